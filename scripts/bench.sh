#!/usr/bin/env bash
# Relay benchmark: portcullis against a direct loopback baseline, peer
# proxies from Debian and a minimal C relay, in one run, on loopback only.
# Prints Markdown tables (then the TLS tables of scripts/bench-tls.sh).
#
#   scripts/bench.sh                 # everything
#   BYTES=2GiB DIR=up REPEAT=3 STREAMS=16 STRACE_BYTES=256MiB CHURN=2000 IDLE=5000 scripts/bench.sh
#   PEERS="portcullis-connect c-relay haproxy" TLS=0 scripts/bench.sh
#   BASELINE_BIN=/tmp/old/portcullis PEERS="baseline-connect portcullis-connect" scripts/bench.sh
#
# Paths (PEERS): direct, portcullis-connect, portcullis-socks5 (splice, the
# Linux default), portcullis-{connect,socks5}-rw (read/write path: a config
# with [limits] splice = false), portcullis-{connect,socks5}-w2 (--workers 2;
# "n/a (not built)" when this build has no --workers), baseline-connect and
# baseline-socks5 (BASELINE_BIN), tinyproxy, dante, haproxy (nbthread 1),
# haproxy-nbthread2, socat, c-relay (benches/relay/relay.c, built with cc -O2).
# haproxy, socat and c-relay are plain TCP relays: no CONNECT, no parsing.
#
# Per path, on a fresh proxy process: memory per idle tunnel (PSS growth over
# IDLE tunnels), then the proxy's syscalls over IDLE_SECS with IDLE_CHECK idle
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

BYTES=${BYTES:-2GiB}
DIR=${DIR:-up}
REPEAT=${REPEAT:-3}
STREAMS=${STREAMS:-16}
STRACE_BYTES=${STRACE_BYTES:-256MiB}
CHURN=${CHURN:-2000}
STRACE_CHURN=${STRACE_CHURN:-1000}
IDLE=${IDLE:-5000}
IDLE_CHECK=${IDLE_CHECK:-1000}
IDLE_SECS=${IDLE_SECS:-5}
TLS=${TLS:-1}
PEERS=${PEERS:-"direct portcullis-connect portcullis-socks5 portcullis-connect-rw portcullis-socks5-rw portcullis-connect-w2 portcullis-socks5-w2 c-relay haproxy haproxy-nbthread2 tinyproxy dante socat"}
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
DETAIL=()
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
        ROWS+=("| $label | $why | - | - | - | - | - | - | - | - | - |")
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
        out=$(timeout 300 "$LOADGEN" "$@") || rc=$?
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
            top=$(sed -n 's/.*top="\([^"]*\)".*/\1/p' <<<"$s")
            [ -z "$top" ] || idle_sys="$idle_sys ($top)"
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
        rates=() cpus=() peaks=()
        for i in $(seq 1 "$REPEAT"); do
            # shellcheck disable=SC2086
            r=$(lg transfer $vargs --sink "127.0.0.1:$sink" --bytes "$BYTES" --dir "$DIR" --streams "$n" $watch)
            log "  $r"
            rates+=("$(value mib_per_s <<<"$r")")
            cpus+=("$(value cpu_s_per_gib <<<"$r")")
            peaks+=("$(value peak_rss_kib <<<"$r")")
        done
        rate[$n]=$(printf '%s\n' "${rates[@]}" | awk NF | median)
        cpu[$n]=$(printf '%s\n' "${cpus[@]}" | awk NF | median)
        p=$(printf '%s\n' "${peaks[@]}" | awk NF | maxof)
        [ -z "$p" ] || peak=$(awk -v k="$p" 'BEGIN { printf "%.1f", k / 1024 }')
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
        per_tunnel=$(value per_tunnel <<<"$s")
        breakdown=$(sed -n 's/.*breakdown="\([^"]*\)".*/\1/p' <<<"$s")
    fi
    stop

    ROWS+=("| $label | ${rate[1]:--} | ${rate[$STREAMS]:--} | ${cpu[1]:--} / ${cpu[$STREAMS]:--} | ${per_mib:--} | ${cps[1]:--} / ${cps[8]:--} | ${cpt[1]:--} / ${cpt[8]:--} | ${per_tunnel:--} | ${idle_b} | ${idle_sys} | ${peak} |")
    DETAIL+=("| $label | ${top:--} | ${epoll:--} | ${errs:--} | ${wake} | ${breakdown:--} |")
    unset rate cpu cps cpt
done
LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")

echo
echo "## Results ($START to $(date -u +%Y-%m-%dT%H:%MZ))"
echo
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), Linux $(uname -r)."
echo "Load average (1, 5, 15 min) at the start of each path: $(printf '%s; ' "${LOADS[@]}" | sed 's/; $//')."
echo "Transfer: $BYTES in all per run (over 1 stream, then over $STREAMS), direction $DIR, median of $REPEAT runs; strace transfer: $STRACE_BYTES; churn: $CHURN tunnels (1 and 8 clients at once, median of $REPEAT), strace churn: $STRACE_CHURN tunnels; idle: $IDLE tunnels for memory, $IDLE_CHECK for the ${IDLE_SECS}-second syscall check."
echo
echo "| Path | MiB/s, 1 stream | MiB/s, $STREAMS streams | proxy CPU s/GiB (1 / $STREAMS streams) | syscalls/MiB | churn conn/s (1 / 8 clients) | proxy CPU µs/tunnel (1 / 8 clients) | syscalls/tunnel | idle bytes/tunnel | syscalls in ${IDLE_SECS} s, $IDLE_CHECK idle tunnels | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "| Path | top syscalls per MiB | epoll_wait/MiB | failed calls/MiB (EAGAIN...) | wakeups/MiB (portcullis counters, no strace) | syscalls per tunnel, by name (churn, 1 client) |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${DETAIL[@]}"
echo
echo "For \`direct\`, the syscall figures are the load generator's own (sender and receiver together), the floor any relay that reads and writes every byte compares to."
echo
echo "Commands (loadgen = $LOADGEN; PID = the proxy's process id):"
echo
# shellcheck disable=SC2016 # backquotes are Markdown
printf -- '- `%s`\n' "${COMMANDS[@]}"
echo
echo "Logs and strace summaries: $WORK"

if [ "$TLS" = 1 ]; then
    BENCH_WORK=$WORK BENCH_NO_BUILD=1 "$(dirname "$0")/bench-tls.sh"
fi
