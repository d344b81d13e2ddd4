#!/usr/bin/env bash
# Relay benchmark: portcullis against a direct loopback baseline and peer
# proxies from Debian, in one run, on loopback only. Prints a Markdown table.
#
#   scripts/bench.sh                 # everything
#   BYTES=2GiB DIR=up REPEAT=3 STRACE_BYTES=256MiB CHURN=2000 IDLE=5000 scripts/bench.sh
#   PEERS="portcullis-connect tinyproxy" scripts/bench.sh
#   BASELINE_BIN=/tmp/old/portcullis PEERS="baseline-connect portcullis-connect" scripts/bench.sh
#
# Per path: bulk throughput (MiB/s) and the proxy's CPU seconds per GiB
# (utime+stime of the proxy and its children from /proc, around the transfer;
# median of REPEAT runs), syscalls per MiB (proxy attached with `strace -f -c`,
# a separate smaller transfer: strace slows everything), epoll_wait calls per
# MiB, connection churn (open, 32-byte echo, close), and memory per idle tunnel
# (PSS growth over IDLE tunnels). Peer proxies missing are installed with
# apt-get when possible (BENCH_NO_INSTALL=1 to skip), and skipped otherwise.
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

BYTES=${BYTES:-2GiB}
DIR=${DIR:-up}
REPEAT=${REPEAT:-3}
STRACE_BYTES=${STRACE_BYTES:-256MiB}
CHURN=${CHURN:-2000}
IDLE=${IDLE:-5000}
PEERS=${PEERS:-"direct portcullis-connect portcullis-socks5 tinyproxy dante haproxy socat"}
export DIR

ulimit -n "$(ulimit -Hn)"
trap cleanup_started EXIT

build_release
install_peers
have strace || { log "strace missing"; exit 1; }

# label -> peer process and loadgen --via
peer_of() {
    case $1 in
        portcullis-*) echo portcullis ;;
        baseline-*) echo baseline ;;
        direct) echo none ;;
        *) echo "$1" ;;
    esac
}
via_of() {
    case $1 in
        direct) echo direct ;;
        portcullis-connect | baseline-connect | tinyproxy) echo connect ;;
        portcullis-socks5 | baseline-socks5 | dante) echo socks5 ;;
        haproxy | socat) echo relay ;;
    esac
}
have_peer() {
    case $1 in
        none | portcullis) return 0 ;;
        baseline) [ -n "${BASELINE_BIN:-}" ] && [ -x "$BASELINE_BIN" ] ;;
        dante) have danted ;;
        *) have "$1" ;;
    esac
}

median() { sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }

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
COMMANDS=()
for label in $PEERS; do
    peer=$(peer_of "$label")
    via=$(via_of "$label")
    if ! have_peer "$peer"; then
        log "skipping $label: not installed"
        continue
    fi
    sink=$(pick_port)
    port=$(pick_port)
    pid=""
    start() { [ "$peer" = none ] || pid=$(start_peer "$peer" "$port" "$sink"); }
    stop() { [ -z "$pid" ] || stop_peer "$pid"; pid=""; }
    lg() { timeout 300 "$LOADGEN" "$@" | grep '^RESULT' || true; }
    vargs=$(via_args "$via" "$port")
    watch=""

    # 1. Idle tunnels first, on a fresh process.
    idle_b="-"
    if [ "$peer" != none ] && [ "$peer" != socat ] && [ "$IDLE" -gt 0 ]; then
        start || { log "$label failed to start"; continue; }
        cmd="loadgen idle $vargs --sink 127.0.0.1:$sink --count $IDLE --watch-pid PID"
        log "$label: $cmd"
        # shellcheck disable=SC2086
        r=$(lg idle $vargs --sink "127.0.0.1:$sink" --count "$IDLE" --watch-pid "$pid")
        idle_b=$(value bytes_per_tunnel <<<"$r")
        [ -n "$idle_b" ] || idle_b="fail"
        COMMANDS+=("$label idle: $cmd")
        stop
    fi

    # 2. Bulk throughput and CPU per GiB, REPEAT times.
    start || { log "$label failed to start"; continue; }
    [ -n "$pid" ] && watch="--watch-pid $pid"
    cmd="loadgen transfer $vargs --sink 127.0.0.1:$sink --bytes $BYTES --dir $DIR${watch:+ --watch-pid PID}"
    log "$label: $cmd (x$REPEAT)"
    COMMANDS+=("$label transfer: $cmd")
    rates=()
    cpus=()
    c0=""
    case $peer in portcullis | baseline) c0=$(portcullis_counters "$pid" "$peer") ;; esac
    for i in $(seq 1 "$REPEAT"); do
        # shellcheck disable=SC2086
        r=$(lg transfer $vargs --sink "127.0.0.1:$sink" --bytes "$BYTES" --dir "$DIR" $watch)
        log "  $r"
        rates+=("$(value mib_per_s <<<"$r")")
        cpus+=("$(value cpu_s_per_gib <<<"$r")")
    done
    rate=$(printf '%s\n' "${rates[@]}" | awk NF | median)
    cpu=$(printf '%s\n' "${cpus[@]}" | awk NF | median)
    wake="-"
    if [ -n "$c0" ]; then
        c1=$(portcullis_counters "$pid" "$peer")
        wake=$(awk -v a="$c0" -v b="$c1" -v n="$REPEAT" -v bytes="$BYTES" 'BEGIN {
            split(a, x, " "); split(b, y, " ")
            m = bytes; u = 1
            if (m ~ /GiB$/) u = 1024; else if (m ~ /KiB$/) u = 1 / 1024
            sub(/[KMG]iB$/, "", m); mib = m * u * n * ("'"$DIR"'" == "both" ? 2 : 1)
            w = y[1] - x[1]; e = y[2] - x[2]
            printf "%.1f (%.2f events each)", w / mib, e / w }')
    fi

    # 3. Churn.
    cmd="loadgen churn $vargs --sink 127.0.0.1:$sink --count $CHURN${watch:+ --watch-pid PID}"
    log "$label: $cmd"
    COMMANDS+=("$label churn: $cmd")
    # shellcheck disable=SC2086
    r=$(lg churn $vargs --sink "127.0.0.1:$sink" --count "$CHURN" $watch)
    log "  $r"
    cps=$(value conns_per_s <<<"$r")
    cpu_conn=$(value proxy_cpu_us_per_conn <<<"$r")

    # 4. Syscalls under strace (a separate, smaller transfer).
    s=$(strace_count "$label" "$via" "$port" "${pid:-0}" "$sink" "$STRACE_BYTES" || true)
    log "  $s"
    COMMANDS+=("$label syscalls: $(sed -n 's/.*cmd="\(.*\)"$/\1/p' <<<"$s")")
    per_mib=$(value per_mib <<<"$s")
    epoll=$(value epoll_per_mib <<<"$s")
    errs=$(value errors_per_mib <<<"$s")
    top=$(sed -n 's/.*top="\([^"]*\)".*/\1/p' <<<"$s")
    stop

    ROWS+=("| $label | ${rate:--} | ${cpu:--} | ${per_mib:--} | ${epoll:--} | ${errs:--} | ${top:--} | ${wake} | ${cps:--} | ${cpu_conn:--} | ${idle_b} |")
done

echo
echo "## Results ($(date -u +%Y-%m-%dT%H:%MZ))"
echo
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), Linux $(uname -r)."
echo "Transfer: $BYTES per run, direction $DIR, median of $REPEAT runs; strace transfer: $STRACE_BYTES; churn: $CHURN connections; idle: $IDLE tunnels."
echo
echo "| Path | MiB/s | proxy CPU s/GiB | syscalls/MiB (strace) | epoll_wait/MiB (strace) | failed calls/MiB (EAGAIN...) | top syscalls per MiB | wakeups/MiB (portcullis counters, no strace) | churn conn/s | proxy CPU µs/conn | idle bytes/tunnel |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "For \`direct\`, the syscall figures are the load generator's own (sender and receiver together), the floor any relay that reads and writes every byte compares to."
echo
echo "Commands (loadgen = $LOADGEN; PID = the proxy's process id):"
echo
printf -- '- `%s`\n' "${COMMANDS[@]}"
echo
echo "Logs and strace summaries: $WORK"
