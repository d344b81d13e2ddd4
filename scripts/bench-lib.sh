# shellcheck shell=bash
# Helpers shared by scripts/bench.sh, scripts/bench-tls.sh and scripts/syscalls.sh. Sourced, not run.
# shellcheck disable=SC2034 # PEER, VIA, PEER_ARGS are read by the scripts that source this
# Everything here listens on and connects to loopback only, and every wait is bounded.

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$BENCH_ROOT/target}"
PORTCULLIS="$TARGET_DIR/release/portcullis"
LOADGEN="$TARGET_DIR/release/examples/loadgen"
WORK="${BENCH_WORK:-$(mktemp -d /tmp/portcullis-bench.XXXXXX)}"
mkdir -p "$WORK"
STARTED_PIDS=()

RELAY="$WORK/c-relay"
# Proxies log at warn (no access line per tunnel, as the peers run without
# one), except the counters SIGUSR1 logs (target `portcullis`, at info).
PORTCULLIS_LOG=${PORTCULLIS_LOG:-warn,portcullis=info,portcullis::session=warn,portcullis::event=off}

log() { printf '[bench] %s\n' "$*" >&2; }

build_release() {
    log "building release (portcullis, examples/loadgen)"
    # The binary alone, as `cargo build --release` builds it: built with the
    # example, the dependencies' features would be unified with the
    # dev-dependencies'.
    (cd "$BENCH_ROOT" && cargo build --release --quiet --bin portcullis &&
        cargo build --release --quiet --example loadgen)
    build_relay
}

# The C yardstick relay (benches/relay/relay.c), built with the system cc.
build_relay() {
    if command -v cc >/dev/null; then
        cc -O2 -o "$RELAY" "$BENCH_ROOT/benches/relay/relay.c" || log "c-relay did not build; its row is skipped"
    else
        log "no C compiler: the c-relay row is skipped"
    fi
}

# Whether this portcullis build has multi-threaded reactors: its help names
# --workers, or --check accepts it (--check binds nothing).
portcullis_has_workers() {
    "$PORTCULLIS" --help 2>/dev/null | grep -q -- '--workers' ||
        "$PORTCULLIS" --workers 2 --allow 127.0.0.1:1 --check >/dev/null 2>&1
}

# path_info LABEL: sets PEER (process to start: none | portcullis | baseline |
# tinyproxy | dante | haproxy | socat | c-relay), VIA (direct | relay |
# connect | connect-early | socks5) and PEER_ARGS (extra arguments for start_peer), or
# returns 1 for an unknown label. Labels:
#   direct
#   portcullis-connect, portcullis-socks5        splice path (Linux default)
#   portcullis-connect-early                     CONNECT with the first bytes in the
#                                                request's write (churn: one client flight)
#   portcullis-connect-rw, portcullis-socks5-rw  read/write path ([limits] splice = false)
#   portcullis-connect-w2, portcullis-socks5-w2  --workers 2 (when the build has it)
#   baseline-connect, baseline-socks5            BASELINE_BIN, another portcullis build
#   tinyproxy, dante, socat, c-relay
#   c-relay-connect                              the C relay with -c: reads a CONNECT head,
#                                                answers 200, fixed backend (the protocol's floor)
#   haproxy (nbthread 1), haproxy-nbthread2
path_info() {
    PEER_ARGS=""
    case $1 in
        direct) PEER=none VIA=direct ;;
        portcullis-* | baseline-*)
            PEER=${1%%-*}
            case $1 in
                *-connect-early*) VIA=connect-early ;;
                *-connect*) VIA=connect ;;
                *-socks5*) VIA=socks5 ;;
                *) return 1 ;;
            esac
            # Every client here is the same uid: lift the per-client limits
            # (sized to the fd limit, a quarter of the sessions) so one
            # load generator may hold IDLE tunnels, as it may on the peers.
            # A --config in PORTCULLIS_ARGS replaces this file.
            {
                echo "[limits]"
                echo "max_sessions_per_client = 1000000"
                echo "max_pending_handshakes_per_client = 1000000"
                case $1 in *-rw) echo "splice = false" ;; esac
            } >"$WORK/$1.toml"
            case " ${PORTCULLIS_ARGS:-} " in *" --config "* | *" -c "*) ;; *) PEER_ARGS="--config $WORK/$1.toml" ;; esac
            case $1 in
                *-w[0-9]*) PEER_ARGS="$PEER_ARGS --workers ${1##*-w}" ;;
            esac
            ;;
        tinyproxy) PEER=tinyproxy VIA=connect ;;
        dante) PEER=dante VIA=socks5 ;;
        socat | c-relay) PEER=$1 VIA=relay ;;
        # The C relay speaking the least of CONNECT (relay.c -c): what the
        # protocol's round trip costs in a relay that does nothing else.
        c-relay-connect) PEER=c-relay VIA=connect PEER_ARGS=-c ;;
        haproxy) PEER=haproxy VIA=relay PEER_ARGS=1 ;;
        haproxy-nbthread*) PEER=haproxy VIA=relay PEER_ARGS=${1#haproxy-nbthread} ;;
        *) return 1 ;;
    esac
}

# have_peer PEER [LABEL]: 0 if it can run here; prints why not otherwise.
have_peer() {
    case $1 in
        none) return 0 ;;
        portcullis)
            case ${2:-} in
                *-w[0-9]*) portcullis_has_workers || { echo "n/a: this build has no --workers"; return 1; } ;;
            esac
            ;;
        baseline) if [ -z "${BASELINE_BIN:-}" ] || [ ! -x "$BASELINE_BIN" ]; then echo "n/a (no BASELINE_BIN)"; return 1; fi ;;
        dante) have danted || { echo "n/a (not installed)"; return 1; } ;;
        c-relay) [ -x "$RELAY" ] || { echo "n/a (no cc)"; return 1; } ;;
        *) have "$1" || { echo "n/a (not installed)"; return 1; } ;;
    esac
}

# Installs the peer proxies from Debian when missing (CI and fresh machines).
install_peers() {
    local want=()
    command -v tinyproxy >/dev/null || want+=(tinyproxy)
    command -v danted >/dev/null || [ -x /usr/sbin/danted ] || want+=(dante-server)
    command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || want+=(haproxy)
    command -v socat >/dev/null || want+=(socat)
    command -v strace >/dev/null || want+=(strace)
    if [ "${#want[@]}" -gt 0 ] && [ "${BENCH_NO_INSTALL:-0}" != 1 ] && command -v apt-get >/dev/null; then
        log "installing: ${want[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || true
        apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null || log "install failed; missing peers are skipped"
    fi
}

have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ]; }

# A free loopback TCP port (bounded number of tries).
pick_port() {
    local p i
    for i in $(seq 1 200); do
        p=$((20000 + RANDOM % 12000))  # below the ephemeral range
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# Waits (at most ~5 s) until something listens on 127.0.0.1:$1.
wait_listen() {
    local i
    for i in $(seq 1 100); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

# dante_conf PORT RULE...: writes $WORK/danted.conf for a danted on
# 127.0.0.1:PORT with no authentication, any loopback client, and the given
# `socks pass` rules.
dante_conf() {
    local port=$1
    shift
    {
        cat <<CONF
logoutput: $WORK/danted.log
internal: 127.0.0.1 port = $port
external: 127.0.0.1
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
CONF
        printf '%s\n' "$@"
    } >"$WORK/danted.conf"
}

# start_peer NAME PORT SINK_PORT [ARGS]: starts one proxy in the background,
# prints its PID. NAME: portcullis | baseline | tinyproxy | dante | haproxy |
# socat | c-relay. ARGS: more portcullis flags (word-split), or haproxy's nbthread.
start_peer() {
    local name=$1 port=$2 sink=$3 args=${4:-} pid
    case $name in
        portcullis | baseline)
            # baseline: another portcullis binary (BASELINE_BIN), e.g. the
            # previous commit's, measured in the same run for a before/after row.
            local bin=$PORTCULLIS
            [ "$name" = baseline ] && bin=$BASELINE_BIN
            # shellcheck disable=SC2086
            RUST_LOG=$PORTCULLIS_LOG "$bin" --listen "127.0.0.1:$port" \
                --allow "127.0.0.1:$sink" ${PORTCULLIS_ARGS:-} $args >"$WORK/$name.log" 2>&1 &
            pid=$!
            ;;
        c-relay)
            # shellcheck disable=SC2086 # args: -c or nothing
            "$RELAY" $args "$port" "$sink" >"$WORK/c-relay.log" 2>&1 &
            pid=$!
            ;;
        tinyproxy)
            cat >"$WORK/tinyproxy.conf" <<CONF
User nobody
Group nogroup
Port $port
Listen 127.0.0.1
Timeout 600
MaxClients 12000
LogLevel Error
Allow 127.0.0.1
ConnectPort $sink
DisableViaHeader Yes
CONF
            tinyproxy -d -c "$WORK/tinyproxy.conf" >"$WORK/tinyproxy.log" 2>&1 &
            pid=$!
            ;;
        dante)
            dante_conf "$port" \
                "socks pass { from: 127.0.0.0/8 to: 127.0.0.1/32 port = $sink command: connect }"
            /usr/sbin/danted -f "$WORK/danted.conf" >>"$WORK/danted.log" 2>&1 &
            pid=$!
            ;;
        haproxy)
            cat >"$WORK/haproxy.cfg" <<CONF
global
    maxconn 9000
    nbthread ${args:-1}
defaults
    mode tcp
    timeout connect 5s
    timeout client 600s
    timeout server 600s
listen relay
    bind 127.0.0.1:$port
    server sink 127.0.0.1:$sink
CONF
            /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
            pid=$!
            ;;
        socat)
            socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$sink" \
                >"$WORK/socat.log" 2>&1 &
            pid=$!
            ;;
        *) log "unknown peer $name"; return 1 ;;
    esac
    STARTED_PIDS+=("$pid")
    if ! wait_listen "$port"; then
        log "$name did not start listening on $port (see $WORK/$name*.log)"
        kill "$pid" 2>/dev/null || true
        return 1
    fi
    echo "$pid"
}

stop_peer() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup_started() {
    local p
    for p in "${STARTED_PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null && stop_peer "$p"
    done
}

# The PID and its descendants (for multi-process peers).
pid_tree() {
    local all=("$1") i=0 c
    while [ "$i" -lt "${#all[@]}" ]; do
        for c in $(pgrep -P "${all[$i]}" 2>/dev/null); do all+=("$c"); done
        i=$((i + 1))
    done
    echo "${all[@]}"
}

# MiB in a size like 2GiB, 256MiB.
mib_of() { awk -v m="$1" 'BEGIN { u = 1; if (m ~ /GiB$/) u = 1024; else if (m ~ /KiB$/) u = 1 / 1024; sub(/[KMG]iB$/, "", m); print m * u }'; }

# value KEY: the value of KEY=... in the RESULT line on stdin.
value() { { grep -o "$1=[^ ]*" || true; } | head -1 | cut -d= -f2; }

# Loadgen arguments for a path: direct | relay PORT | connect PORT | socks5 PORT.
via_args() {
    case $1 in
        direct) echo "--via direct" ;;
        *) echo "--via $1 --proxy 127.0.0.1:$2" ;;
    esac
}

# strace_count LABEL VIA PROXY_PORT PROXY_PID SINK_PORT BYTES
# Runs one transfer of BYTES with the proxy (every process of it) under
# `strace -f -c`, or, for VIA=direct, the loadgen itself. Prints:
#   STRACE label=... mib=... total=... per_mib=... epoll_per_mib=... eagain_per_mib=... top="name:per_mib ..."
# and leaves the strace summary in $WORK/strace-LABEL.txt.
strace_count() {
    local label=$1 via=$2 pport=$3 ppid=$4 sink=$5 bytes=$6
    local out="$WORK/strace-$label.txt" cmd line spid p
    # $cmd is split into words on purpose (no spaces inside its words).
    # shellcheck disable=SC2046,SC2086
    if [ "$via" = direct ]; then
        cmd="strace -f -c -o $out $LOADGEN transfer --via direct --sink 127.0.0.1:$sink --bytes $bytes --dir ${DIR:-up}"
        line=$(timeout 300 $cmd | grep '^RESULT') || { log "strace $label failed"; return 1; }
    else
        local attach=()
        for p in $(pid_tree "$ppid"); do attach+=(-p "$p"); done
        strace -f -c -o "$out" "${attach[@]}" 2>"$WORK/strace-$label.err" &
        spid=$!
        sleep 1   # let strace attach to every thread
        cmd="$LOADGEN transfer $(via_args "$via" "$pport") --sink 127.0.0.1:$sink --bytes $bytes --dir ${DIR:-up}"
        line=$(timeout 300 $cmd | grep '^RESULT') || { kill -INT "$spid"; wait "$spid" 2>/dev/null; log "strace $label failed"; return 1; }
        kill -INT "$spid"
        wait "$spid" 2>/dev/null || true
        cmd="strace -f -c -o FILE -p <$label pids> & $cmd"
    fi
    local moved mib
    moved=$(value bytes <<<"$line")
    mib=$(awk -v b="$moved" 'BEGIN{printf "%.1f", b/1048576}')
    awk -v label="$label" -v mib="$mib" -v cmd="$cmd" '
        /^-+ / || /^% time/ || NF < 5 { next }
        $NF == "total" { total = $4; next }
        {
            calls = $4; errs = (NF >= 6) ? $5 : 0; name = $NF
            n[name] += calls; e[name] += errs
        }
        END {
            epoll = n["epoll_wait"] + n["epoll_pwait"] + n["epoll_pwait2"]
            eagain = e["read"] + e["recvfrom"] + e["recvmsg"] + e["write"] + e["sendto"] + e["sendmsg"] + e["writev"] + e["readv"]
            # top five by count
            top = ""
            for (k = 0; k < 5; k++) {
                best = ""; bn = -1
                for (s in n) if (!(s in used) && n[s] > bn) { best = s; bn = n[s] }
                if (best == "") break
                used[best] = 1
                top = top sprintf("%s%s %.0f", (top == "" ? "" : ", "), best, bn / mib)
            }
            printf "STRACE label=%s mib=%s total=%d per_mib=%.1f epoll_per_mib=%.2f errors_per_mib=%.2f top=\"%s\" cmd=\"%s\"\n",
                label, mib, total, total / mib, epoll / mib, eagain / mib, top, cmd
        }' "$out"
}

# strace_attach OUT PID: `strace -f -c` on every process of PID's tree, in
# the background; sets SPID. Waits until strace has attached (bounded).
strace_attach() {
    local out=$1 p attach=() i
    for p in $(pid_tree "$2"); do attach+=(-p "$p"); done
    strace -f -c -o "$out" "${attach[@]}" 2>"$out.err" &
    SPID=$!
    for i in $(seq 1 40); do
        grep -q 'attached' "$out.err" 2>/dev/null && break
        sleep 0.05
    done
    sleep 0.5 # the remaining threads
}

strace_detach() {
    kill -INT "$SPID" 2>/dev/null || true
    wait "$SPID" 2>/dev/null || true
}

# strace_table FILE: "name calls errors" per syscall from an `strace -c` summary.
strace_table() {
    awk '/^-+ / || /^% time/ || NF < 5 || $NF == "total" { next }
        { print $NF, $4, (NF >= 6 ? $5 : 0) }' "$1"
}

# strace_churn LABEL VIA PROXY_PORT PROXY_PID SINK_PORT COUNT PARALLEL
# `loadgen churn` (open, 32-byte echo, close) with the proxy under
# `strace -f -c`. Prints:
#   CHURN label=... tunnels=... per_tunnel=... sockets_per_tunnel=... errors_per_tunnel=... breakdown="name n.n, ..." cmd="..."
# Everything the proxy did while attached is counted, timers included.
# sockets_per_tunnel leaves out epoll_wait: one wake-up serves every tunnel
# with news, so it is the loop's cost rather than the tunnel's (the count
# issue 11 sets its budget of 18 against).
strace_churn() {
    local label=$1 via=$2 pport=$3 ppid=$4 sink=$5 count=$6 par=$7
    local out="$WORK/strace-churn-$label-p$par.txt" cmd line
    strace_attach "$out" "$ppid"
    cmd="$LOADGEN churn $(via_args "$via" "$pport") --sink 127.0.0.1:$sink --count $count --parallel $par"
    # shellcheck disable=SC2086
    line=$(timeout 300 $cmd | grep '^RESULT') || { strace_detach; log "strace churn $label failed"; return 1; }
    strace_detach
    count=$(value count <<<"$line")
    strace_table "$out" | sort -k2,2nr | awk -v label="$label" -v n="$count" -v cmd="$cmd" '
        { total += $2; errs += $3; if ($1 != "epoll_wait") own += $2
          b = b sprintf("%s%s %.2g", (b == "" ? "" : ", "), $1, $2 / n) }
        END { printf "CHURN label=%s tunnels=%d per_tunnel=%.1f sockets_per_tunnel=%.1f errors_per_tunnel=%.1f breakdown=\"%s\" cmd=\"%s\"\n",
            label, n, total / n, own / n, errs / n, b, cmd }'
}

# idle_syscalls LABEL VIA PROXY_PORT PROXY_PID SINK_PORT TUNNELS SECS
# Opens TUNNELS idle tunnels, then counts the proxy's syscalls over SECS
# seconds with `strace -f -c`. Prints: IDLE_SYSCALLS label=... tunnels=... secs=... syscalls=... top="..."
idle_syscalls() {
    local label=$1 via=$2 pport=$3 ppid=$4 sink=$5 n=$6 secs=$7
    local out="$WORK/strace-idle-$label.txt" res="$WORK/idle-hold-$label.out" lpid i total
    : >"$res"
    # shellcheck disable=SC2046
    timeout $((secs + 120)) "$LOADGEN" idle $(via_args "$via" "$pport") --sink "127.0.0.1:$sink" \
        --count "$n" --watch-pid "$ppid" --hold-secs $((secs + 3)) >"$res" 2>&1 &
    lpid=$!
    for i in $(seq 1 1200); do
        grep -q '^RESULT' "$res" && break
        kill -0 "$lpid" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -q '^RESULT' "$res"; then
        kill "$lpid" 2>/dev/null || true
        wait "$lpid" 2>/dev/null || true
        log "idle check $label: tunnels did not open ($(tail -1 "$res"))"
        return 1
    fi
    strace_attach "$out" "$ppid"
    sleep "$secs"
    strace_detach
    wait "$lpid" 2>/dev/null || true
    total=$(strace_table "$out" | awk '{ t += $2 } END { print t + 0 }')
    printf 'IDLE_SYSCALLS label=%s tunnels=%s secs=%s syscalls=%s top="%s"\n' "$label" "$n" "$secs" "$total" \
        "$(strace_table "$out" | sort -k2,2nr | head -3 | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')"
}

# peak RSS of a process tree in KiB: the sum of VmHWM over its processes.
peak_rss_kib() {
    local p t=0 v
    for p in $(pid_tree "$1"); do
        v=$(awk '/^VmHWM:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
        t=$((t + ${v:-0}))
    done
    echo "$t"
}

# ---- Markdown fragments (BENCHMARKS.md) ----------------------------------------

# command_line SCRIPT "KNOB ..." ARGS...: the command as typed, with the
# knobs that were set in the environment (call it before defaults are applied).
command_line() {
    local script=$1 knobs=$2 k out=""
    shift 2
    for k in $knobs; do
        if [ -n "${!k+set}" ]; then
            case ${!k} in
                *[!A-Za-z0-9._/:=,+-]* | '') out+="$k='${!k}' " ;;
                *) out+="$k=${!k} " ;;
            esac
        fi
    done
    out+="scripts/$(basename "$script")"
    [ "$#" -eq 0 ] || out+=" $*"
    echo "$out"
}

# The machine, the commit and the load, as Markdown list items.
md_machine() {
    local model commit dirty
    model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
    [ -n "$model" ] || model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    commit=$(git -C "$BENCH_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    dirty=""
    if git -C "$BENCH_ROOT" status --porcelain --untracked-files=no 2>/dev/null | grep -q .; then
        dirty=" (with uncommitted changes)"
    fi
    echo "- Machine: $(nproc) cores ($model$(lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor: *\(.*\)/, virtualised: \1/p')), Linux $(uname -r)"
    echo "- Commit: \`$commit\`$dirty ($(git -C "$BENCH_ROOT" rev-parse --abbrev-ref HEAD 2>/dev/null || echo '?'))"
}

# splice_fragment FILE NAME FRAGMENT: puts FRAGMENT (which starts with
# "<!-- begin NAME -->" and ends with "<!-- end NAME -->") in FILE in place
# of the previous one, or at the end when FILE has none.
splice_fragment() {
    local file=$1 name=$2 frag=$3
    if [ -f "$file" ] && grep -qxF "<!-- begin $name -->" "$file"; then
        awk -v b="<!-- begin $name -->" -v e="<!-- end $name -->" -v f="$frag" '
            $0 == b { while ((getline l < f) > 0) print l; skip = 1; next }
            $0 == e { skip = 0; next }
            !skip' "$file" >"$file.tmp" && mv "$file.tmp" "$file"
    else
        { echo; cat "$frag"; } >>"$file"
    fi
    log "wrote the $name results into $file"
}

# ratio A B: A/B as "0.59×", or nothing when either is missing.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f×", a / b }'; }
