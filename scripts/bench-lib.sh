# Helpers shared by scripts/bench.sh and scripts/syscalls.sh. Sourced, not run.
# Everything here listens on and connects to loopback only, and every wait is bounded.

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$BENCH_ROOT/target}"
PORTCULLIS="$TARGET_DIR/release/portcullis"
LOADGEN="$TARGET_DIR/release/examples/loadgen"
WORK="${BENCH_WORK:-$(mktemp -d /tmp/portcullis-bench.XXXXXX)}"
mkdir -p "$WORK"
STARTED_PIDS=()

log() { printf '[bench] %s\n' "$*" >&2; }

build_release() {
    log "building release (portcullis, examples/loadgen)"
    (cd "$BENCH_ROOT" && cargo build --release --quiet --bin portcullis --example loadgen)
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

# start_peer NAME PORT SINK_PORT: starts one proxy in the background, prints its PID.
# NAME: portcullis | tinyproxy | dante | haproxy | socat.
start_peer() {
    local name=$1 port=$2 sink=$3 pid
    case $name in
        portcullis)
            RUST_LOG=${PORTCULLIS_LOG:-info} "$PORTCULLIS" --listen "127.0.0.1:$port" \
                --allow "127.0.0.1:$sink" ${PORTCULLIS_ARGS:-} >"$WORK/portcullis.log" 2>&1 &
            pid=$!
            ;;
        baseline)
            # Another portcullis binary (BASELINE_BIN), e.g. the previous
            # commit's, measured in the same run for a before/after row.
            RUST_LOG=${PORTCULLIS_LOG:-info} "$BASELINE_BIN" --listen "127.0.0.1:$port" \
                --allow "127.0.0.1:$sink" ${PORTCULLIS_ARGS:-} >"$WORK/baseline.log" 2>&1 &
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
            cat >"$WORK/danted.conf" <<CONF
logoutput: $WORK/danted.log
internal: 127.0.0.1 port = $port
external: 127.0.0.1
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 127.0.0.1/32 port = $sink command: connect }
CONF
            /usr/sbin/danted -f "$WORK/danted.conf" >>"$WORK/danted.log" 2>&1 &
            pid=$!
            ;;
        haproxy)
            cat >"$WORK/haproxy.cfg" <<CONF
global
    maxconn 9000
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
    # shellcheck disable=SC2046
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
