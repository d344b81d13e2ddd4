#!/usr/bin/env bash
# Relay benchmark: portcullis against a direct loopback baseline, peer
# proxies from Debian and a minimal C relay, in one run, on loopback only.
# Prints the results as a Markdown fragment (also kept in $WORK/bench.md),
# then those of scripts/bench-tls.sh; with --write FILE, puts both fragments
# into FILE in place of the previous ones (between their
# "<!-- begin scripts/bench.sh -->" and "<!-- end ... -->" lines), so
#
#   scripts/bench.sh --write BENCHMARKS.md
#
# regenerates every figure of BENCHMARKS.md and leaves its prose alone.
#
#   scripts/bench.sh                 # everything, printed
#   BYTES=2GiB DIR=up REPEAT=3 STREAMS=16 STRACE_BYTES=256MiB CHURN=5000 IDLE=5000 scripts/bench.sh
#   PEERS="portcullis-connect c-relay haproxy" TLS=0 scripts/bench.sh
#   BASELINE_BIN=/tmp/old/portcullis PEERS="baseline-connect portcullis-connect" scripts/bench.sh
#
# Paths (PEERS): direct, portcullis-connect, portcullis-socks5 (splice, the
# Linux default), portcullis-{connect,socks5}-rw (read/write path: a config
# with [limits] splice = false), portcullis-{connect,socks5}-w2 (--workers 2;
# "n/a" when this build has no --workers), baseline-connect and
# baseline-socks5 (BASELINE_BIN), tinyproxy, dante, haproxy (nbthread 1),
# haproxy-nbthread2, socat, c-relay (benches/relay/relay.c, built with cc -O2),
# c-relay-connect (the same with -c: a CONNECT head read, 200, fixed backend).
# haproxy, socat and c-relay are plain TCP relays: no CONNECT, no parsing.
#
# Per path, on a fresh proxy process: memory per idle tunnel (growth of the
# anonymous and shared-memory PSS over IDLE tunnels), then the proxy's syscalls over IDLE_SECS with IDLE_CHECK idle
# tunnels open (strace). On a second process: throughput over 1 stream and
# over STREAMS streams (BYTES in all, median of REPEAT) with the proxy's CPU
# seconds per GiB (utime+stime of the proxy and its children, /proc) and its
# peak RSS; churn (open, 32-byte echo, close) with 1 and 8 clients at once,
# with the proxy's CPU per tunnel; syscalls per MiB (`strace -f -c` during a
# separate STRACE_BYTES transfer) and per tunnel (`strace -f -c` during a
# churn of STRACE_CHURN tunnels). Missing peers are installed with apt-get
# when possible (BENCH_NO_INSTALL=1 to skip), and skipped otherwise.
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

WRITE=""
ARGS=("$@")
while [ "$#" -gt 0 ]; do
    case $1 in
        --write) WRITE=${2:?--write needs a file}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) log "unknown argument $1 (only --write FILE)"; exit 2 ;;
    esac
done
CMDLINE=$(command_line "$0" "BYTES DIR REPEAT STREAMS STRACE_BYTES CHURN STRACE_CHURN IDLE IDLE_CHECK IDLE_SECS TLS PEERS PORTCULLIS_ARGS BASELINE_BIN TLS_BYTES TLS_REPEAT TLS_STREAMS TLS_STREAM_BYTES SETUP TLS_PEERS PROFILE" "${ARGS[@]}")

BYTES=${BYTES:-2GiB}
DIR=${DIR:-up}
REPEAT=${REPEAT:-3}
STREAMS=${STREAMS:-16}
STRACE_BYTES=${STRACE_BYTES:-256MiB}
CHURN=${CHURN:-5000}
STRACE_CHURN=${STRACE_CHURN:-1000}
IDLE=${IDLE:-5000}
IDLE_CHECK=${IDLE_CHECK:-1000}
IDLE_SECS=${IDLE_SECS:-5}
TLS=${TLS:-1}
PEERS=${PEERS:-"direct portcullis-connect portcullis-connect-early portcullis-socks5 portcullis-connect-rw portcullis-socks5-rw portcullis-connect-w2 portcullis-socks5-w2 c-relay c-relay-connect haproxy haproxy-nbthread2 tinyproxy dante socat"}
export DIR

ulimit -n "$(ulimit -Hn)"
trap cleanup_started EXIT

build_release
install_peers
have strace || { log "strace missing"; exit 1; }

median() { sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }
maxof() { sort -g | tail -1; }

# portcullis's own counters (SIGUSR1 logs them to $WORK/NAME.log): "wakeups events".
portcullis_counters() {
    local pid=$1 logf="$WORK/$2.log" before i
    before=$(grep -c 'stats:' "$logf" || true)
    kill -USR1 "$pid"
    for i in $(seq 1 50); do
        [ "$(grep -c 'stats:' "$logf" || true)" -gt "$before" ] && break
        sleep 0.05
    done
    grep 'stats:' "$logf" | tail -1 | awk '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "wakeups") w = kv[2]; if (kv[1] == "events") e = kv[2] }
        print w, e }'
}

ROWS=()
RAW=()
DETAIL=()
declare -A BREAKDOWN=()
D1="" D16="" DC1="" DC8=""
COMMANDS=()
LOADS=("$(cut -d' ' -f1-3 /proc/loadavg)")
START=$(date -u +%Y-%m-%dT%H:%MZ)
for label in $PEERS; do
    if ! path_info "$label"; then
        log "unknown path $label"
        continue
    fi
    peer=$PEER via=$VIA pargs=$PEER_ARGS
    if ! why=$(have_peer "$peer" "$label"); then
        log "skipping $label: $why"
        RAW+=("$label|SKIP|$why")
        continue
    fi
    LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")
    sink=$(pick_port)
    port=$(pick_port)
    pid=""
    start() { [ "$peer" = none ] || pid=$(start_peer "$peer" "$port" "$sink" "$pargs"); }
    stop() { [ -z "$pid" ] || stop_peer "$pid"; pid=""; }
    lg() {
        local out rc=0
        out=$(timeout "${LOADGEN_TIMEOUT:-150}" "$LOADGEN" "$@") || rc=$?
        [ "$rc" = 0 ] || log "loadgen $1 exited with status $rc"
        grep '^RESULT' <<<"$out" || true
    }
    vargs=$(via_args "$via" "$port")
    watch=""

    # 1. Idle tunnels first, on a fresh process: memory, then syscalls while idle.
    idle_b="-" idle_sys="-"
    if [ "$peer" != none ] && [ "$peer" != socat ] && [ "$IDLE" -gt 0 ]; then
        start || { log "$label failed to start"; continue; }
        cmd="loadgen idle $vargs --sink 127.0.0.1:$sink --count $IDLE --watch-pid PID"
        log "$label: $cmd"
        # shellcheck disable=SC2086
        r=$(lg idle $vargs --sink "127.0.0.1:$sink" --count "$IDLE" --watch-pid "$pid")
        idle_b=$(value bytes_per_tunnel <<<"$r")
        [ -n "$idle_b" ] || idle_b="fail"
        COMMANDS+=("$label idle: $cmd")
        if [ "$IDLE_CHECK" -gt 0 ]; then
            s=$(idle_syscalls "$label" "$via" "$port" "$pid" "$sink" "$IDLE_CHECK" "$IDLE_SECS" || true)
            log "  $s"
            idle_sys=$(value syscalls <<<"$s")
            [ -z "$idle_sys" ] || idle_sys=$(awk -v n="$idle_sys" -v t="$IDLE_SECS" 'BEGIN { printf "%.3g", n / t }')
            top=$(sed -n 's/.*top="\([^"]*\)".*/\1/p' <<<"$s")
            [ -z "$top" ] || idle_sys="$idle_sys ($top in ${IDLE_SECS} s)"
            COMMANDS+=("$label idle syscalls: loadgen idle $vargs --sink 127.0.0.1:$sink --count $IDLE_CHECK --watch-pid PID --hold-secs $((IDLE_SECS + 3)) & strace -f -c -p <$label pids> for ${IDLE_SECS}s once the tunnels are open")
        fi
        stop
    fi

    # 2. Throughput, CPU per GiB, peak RSS: 1 stream then STREAMS streams, REPEAT times each.
    start || { log "$label failed to start"; continue; }
    [ -n "$pid" ] && watch="--watch-pid $pid"
    c0=""
    case $peer in portcullis | baseline) c0=$(portcullis_counters "$pid" "$peer") ;; esac
    declare -A rate=() cpu=()
    peak="-"
    for n in 1 "$STREAMS"; do
        cmd="loadgen transfer $vargs --sink 127.0.0.1:$sink --bytes $BYTES --dir $DIR --streams $n${watch:+ --watch-pid PID}"
        log "$label: $cmd (x$REPEAT)"
        COMMANDS+=("$label transfer: $cmd")
        rates=() cpus=() peaks=() anons=()
        for i in $(seq 1 "$REPEAT"); do
            # shellcheck disable=SC2086
            r=$(lg transfer $vargs --sink "127.0.0.1:$sink" --bytes "$BYTES" --dir "$DIR" --streams "$n" $watch)
            log "  $r"
            rates+=("$(value mib_per_s <<<"$r")")
            cpus+=("$(value cpu_s_per_gib <<<"$r")")
            peaks+=("$(value peak_rss_kib <<<"$r")")
            anons+=("$(value peak_anon_kib <<<"$r")")
        done
        rate[$n]=$(printf '%s\n' "${rates[@]}" | awk NF | median)
        cpu[$n]=$(printf '%s\n' "${cpus[@]}" | awk NF | median)
        p=$(printf '%s\n' "${peaks[@]}" | awk NF | maxof)
        a=$(printf '%s\n' "${anons[@]}" | awk NF | maxof)
        # Anonymous memory (heap, stacks, buffers) beside the whole RSS,
        # which also counts the mapped binary and libraries.
        [ -z "$p" ] || peak=$(awk -v k="$p" -v a="${a:-0}" 'BEGIN { printf "%.1f (%.1f)", k / 1024, a / 1024 }')
    done
    wake="-"
    if [ -n "$c0" ]; then
        c1=$(portcullis_counters "$pid" "$peer")
        wake=$(awk -v a="$c0" -v b="$c1" -v mib="$(mib_of "$BYTES")" -v n="$REPEAT" -v both="$([ "$DIR" = both ] && echo 2 || echo 1)" 'BEGIN {
            split(a, x, " "); split(b, y, " "); m = mib * 2 * n * both
            w = y[1] - x[1]; e = y[2] - x[2]
            if (w > 0) printf "%.1f (%.2f events each)", w / m, e / w; else print "-" }')
    fi

    # 3. Churn, 1 and 8 clients at once, REPEAT times each.
    declare -A cps=() cpt=()
    for par in 1 8; do
        cmd="loadgen churn $vargs --sink 127.0.0.1:$sink --count $CHURN --parallel $par${watch:+ --watch-pid PID}"
        log "$label: $cmd (x$REPEAT)"
        COMMANDS+=("$label churn: $cmd")
        rates=() cpus=()
        for i in $(seq 1 "$REPEAT"); do
            # shellcheck disable=SC2086
            r=$(lg churn $vargs --sink "127.0.0.1:$sink" --count "$CHURN" --parallel "$par" $watch)
            log "  $r"
            rates+=("$(value conns_per_s <<<"$r")")
            cpus+=("$(value proxy_cpu_us_per_conn <<<"$r")")
        done
        cps[$par]=$(printf '%s\n' "${rates[@]}" | awk NF | median)
        cpt[$par]=$(printf '%s\n' "${cpus[@]}" | awk NF | median)
    done

    # 4. Syscalls under strace: per MiB (a separate, smaller transfer), per tunnel (churn, 1 client).
    s=$(strace_count "$label" "$via" "$port" "${pid:-0}" "$sink" "$STRACE_BYTES" || true)
    log "  $s"
    COMMANDS+=("$label syscalls/MiB: $(sed -n 's/.*cmd="\(.*\)"$/\1/p' <<<"$s")")
    per_mib=$(value per_mib <<<"$s")
    epoll=$(value epoll_per_mib <<<"$s")
    errs=$(value errors_per_mib <<<"$s")
    top=$(sed -n 's/.*top="\([^"]*\)".*/\1/p' <<<"$s")
    per_tunnel="-" breakdown="-"
    if [ -n "$pid" ]; then
        s=$(strace_churn "$label" "$via" "$port" "$pid" "$sink" "$STRACE_CHURN" 1 || true)
        log "  $s"
        COMMANDS+=("$label syscalls/tunnel: strace -f -c -p <$label pids> & $(sed -n 's/.*cmd="\(.*\)"$/\1/p' <<<"$s")")
        per_tunnel="$(value per_tunnel <<<"$s") ($(value sockets_per_tunnel <<<"$s"))"
        breakdown=$(sed -n 's/.*breakdown="\([^"]*\)".*/\1/p' <<<"$s")
    fi
    stop

    if [ "$label" = direct ]; then
        D1=${rate[1]:-} D16=${rate[$STREAMS]:-} DC1=${cps[1]:-} DC8=${cps[8]:-}
    fi
    RAW+=("$label|${rate[1]:--}|${rate[$STREAMS]:--}|${cpu[1]:--} / ${cpu[$STREAMS]:--}|${per_mib:--}|${cps[1]:--}|${cps[8]:--}|${cpt[1]:--} / ${cpt[8]:--}|${per_tunnel:--}|${idle_sys}|${idle_b}|${peak}")
    DETAIL+=("| $label | ${top:--} | ${epoll:--} | ${errs:--} | ${wake} | ${breakdown:--} |")
    BREAKDOWN[$label]=$breakdown
    unset rate cpu cps cpt
done
LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")
END=$(date -u +%Y-%m-%dT%H:%MZ)

# "× direct" needs the direct row, wherever it came in PEERS.
for r in "${RAW[@]}"; do
    IFS='|' read -r l r1 r16 cpu pm c1 c8 cpt pt isys ib pk <<<"$r"
    if [ "$r1" = SKIP ]; then
        ROWS+=("| $l | $r16 | - | - | - | - | - | - | - | - | - | - |")
        continue
    fi
    x() { local v; v=$(ratio "$1" "$2"); if [ "$l" = direct ] || [ -z "$v" ]; then echo "$1"; else echo "$1 ($v)"; fi; }
    ROWS+=("| $l | $(x "$r1" "$D1") | $(x "$r16" "$D16") | $cpu | $pm | $(x "$c1" "$DC1") | $(x "$c8" "$DC8") | $cpt | $pt | $isys | $ib | $pk |")
done

# Why each syscall of a tunnel's life is there (portcullis, CONNECT and SOCKS5,
# open / 32-byte echo / close with one client). A syscall without a reason
# here is shown as such: give it one, or remove it from the code.
reason() {
    case $1 in
        accept4) echo "accepts the client; the listener is level-triggered (Linux, one reactor), so no EAGAIN-returning accept ends a batch: only a batch grown past 1 by a burst tries once more" ;;
        sendto) echo "the reply to the client (CONNECT \`200\`, or SOCKS5 method choice and reply: 2); the echoed payload, once each way (2). No netlink SOCK_DIAG query for the loopback client's uid: access lines are off here and the unidentified loopback pool is far from a quarter of any per-client limit (docs/limits.md, Who a client is); with access lines on, one query more" ;;
        recvfrom) echo "the client's request (1; SOCKS5: greeting and request, 2); the payload, once each way (2); end of stream from each side (2); with access lines on, the netlink answer (1) more" ;;
        epoll_ctl) echo "registration of the client and of the upstream socket (EPOLL_CTL_ADD, edge-triggered for both directions once); no MOD, and no DEL before close (close removes the fd)" ;;
        epoll_wait) echo "wake-ups: upstream connected, each payload arrival, each end of stream; shared between tunnels when several clients are at work (8 clients: under 1 per tunnel)" ;;
        socket) echo "the upstream socket (non-blocking, close-on-exec at creation: no fcntl)" ;;
        connect) echo "the non-blocking connect to the vetted address (EINPROGRESS, completion is the EPOLLOUT wake-up)" ;;
        setsockopt) echo "TCP_NODELAY on the upstream socket, set only before its second write (a tunnel that writes upstream once never pays it; the client's socket inherits it from the listener)" ;;
        shutdown) echo "the client's end of stream passed on to the upstream (SHUT_WR), so half-close works" ;;
        close) echo "the two sockets" ;;
        getsockname) echo "none expected: the SOCKS5 reply carries BND 0.0.0.0:0 (RFC 1928 lets a CONNECT reply say nothing useful there; clients ignore it)" ;;
        write) echo "a log line (the access log; off in this run)" ;;
        splice | pipe2) echo "splice path only, for tunnels that fill a buffer (never for this 32-byte echo)" ;;
        *) echo "(no reason recorded here: see scripts/bench.sh)" ;;
    esac
}
SYSCALL_ROWS=()
if [ -n "${BREAKDOWN[portcullis-connect]:-}" ] || [ -n "${BREAKDOWN[portcullis-socks5]:-}" ]; then
    declare -A sc_c=() sc_s=()
    names=()
    while read -r n v; do [ -n "$n" ] && { sc_c[$n]=$v; names+=("$n"); }; done < <(tr ',' '\n' <<<"${BREAKDOWN[portcullis-connect]:-}" | sed 's/^ *//')
    while read -r n v; do
        [ -n "$n" ] || continue
        sc_s[$n]=$v
        [ -n "${sc_c[$n]:-}" ] || names+=("$n")
    done < <(tr ',' '\n' <<<"${BREAKDOWN[portcullis-socks5]:-}" | sed 's/^ *//')
    for n in "${names[@]}"; do
        SYSCALL_ROWS+=("| \`$n\` | ${sc_c[$n]:--} | ${sc_s[$n]:--} | $(reason "$n") |")
    done
fi

FRAG=$WORK/bench.md
{
    echo "<!-- begin scripts/bench.sh -->"
    echo "<!-- Generated by scripts/bench.sh; edits here are overwritten by the next --write. -->"
    echo
    echo "### Relays and proxies"
    echo
    echo "- Date: $START to $END"
    md_machine
    echo "- Command: \`$CMDLINE\`"
    echo "- Load average (1, 5, 15 min) before the run: ${LOADS[0]}; at the start of each path: $(printf '%s; ' "${LOADS[@]:1}" | sed 's/; $//')"
    echo "- Transfer: $BYTES in all per run, over 1 stream then over $STREAMS, direction $DIR, median of $REPEAT runs; strace transfer: $STRACE_BYTES; churn (open, 32-byte echo, close): $CHURN tunnels with 1 and with 8 clients at once, median of $REPEAT; strace churn: $STRACE_CHURN tunnels, 1 client; idle: $IDLE tunnels for memory, $IDLE_CHECK for the ${IDLE_SECS}-second syscall count"
    echo
    echo "| Path | MiB/s, 1 stream (× direct) | MiB/s, $STREAMS streams (× direct) | proxy CPU s/GiB (1 / $STREAMS streams) | syscalls/MiB | tunnels/s, 1 client (× direct) | tunnels/s, 8 clients (× direct) | proxy CPU µs/tunnel (1 / 8 clients) | syscalls/tunnel (without epoll_wait) | syscalls/s, $IDLE_CHECK idle tunnels | bytes/idle tunnel | peak RSS MiB (of it anonymous) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "| Path | top syscalls per MiB | epoll_wait/MiB | failed calls/MiB (EAGAIN...) | wakeups/MiB (portcullis counters, no strace) | syscalls per tunnel, by name (churn, 1 client) |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${DETAIL[@]}"
    echo
    echo "For \`direct\`, the syscall figures are the load generator's own (sender and receiver together), the floor any relay that reads and writes every byte compares to. Syscalls per tunnel count everything the proxy did while the churn ran (\`strace -f -c\`, every thread), timers and wake-ups included."
    if [ "${#SYSCALL_ROWS[@]}" -gt 0 ]; then
        echo
        echo "#### Per-tunnel syscalls of portcullis, and why"
        echo
        echo "Calls per tunnel in the strace churn above (1 client; CONNECT and SOCKS5 rows), with the reason for each:"
        echo
        echo "| syscall | CONNECT | SOCKS5 | why |"
        echo "|---|---|---|---|"
        printf '%s\n' "${SYSCALL_ROWS[@]}"
    fi
    echo
    echo "<details><summary>Every command of this run</summary>"
    echo
    echo "loadgen = \`target/release/examples/loadgen\`; PID = the proxy's process id; ports are picked at random on 127.0.0.1."
    echo
    # shellcheck disable=SC2016 # backquotes are Markdown
    printf -- '- `%s`\n' "${COMMANDS[@]}" | sed "s#$TARGET_DIR/release/examples/loadgen#loadgen#g"
    echo
    echo "</details>"
    echo
    echo "<!-- end scripts/bench.sh -->"
} >"$FRAG"
cat "$FRAG"
log "fragment: $FRAG; logs and strace summaries: $WORK"
[ -z "$WRITE" ] || splice_fragment "$WRITE" scripts/bench.sh "$FRAG"

if [ "$TLS" = 1 ]; then
    BENCH_WORK=$WORK BENCH_NO_BUILD=1 BENCH_CMDLINE="$CMDLINE" "$(dirname "$0")/bench-tls.sh" ${WRITE:+--write "$WRITE"}
fi
