#!/usr/bin/env bash
# SOCKS5 UDP benchmark: datagrams per second and CPU per datagram through
# portcullis's UDP ASSOCIATE relay, against dante (danted, Debian's
# dante-server, installed with apt-get when missing and allowed) and a
# direct loopback baseline, in one run, on loopback only.
#
#   scripts/bench-udp.sh                        # printed as a Markdown fragment
#   scripts/bench-udp.sh --write BENCHMARKS.md  # and put in place in FILE
#   COUNT=200000 WINDOW=32 SIZE=64 REPEAT=3 PATHS="direct portcullis dante" scripts/bench-udp.sh
#
# examples/udp_loadgen.rs runs a UDP echo server and a client that keeps
# WINDOW datagrams of SIZE payload bytes in flight until COUNT echoes came
# back (each echo is two datagrams through the relay, one each way). Per
# path: the median of REPEAT runs of echoes/s, with the relay's CPU time
# (utime+stime of its process tree, /proc) per relayed datagram.
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
CMDLINE=$(command_line "$0" "COUNT WINDOW SIZE REPEAT PATHS" "${ARGS[@]}")
COUNT=${COUNT:-200000}
WINDOW=${WINDOW:-32}
SIZE=${SIZE:-64}
REPEAT=${REPEAT:-3}
PATHS=${PATHS:-"direct portcullis dante"}
UDP_LOADGEN="$TARGET_DIR/release/examples/udp_loadgen"
trap cleanup_started EXIT

log "building release (portcullis, examples/udp_loadgen)"
(cd "$BENCH_ROOT" && cargo build --release --quiet --bin portcullis &&
    cargo build --release --quiet --example udp_loadgen)

if ! have danted && [ "${BENCH_NO_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
    log "installing dante-server"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q dante-server >"$WORK/apt.log" 2>&1 ||
        log "dante-server not installable (see $WORK/apt.log); its row is skipped"
fi

# start_udp_peer NAME PORT ECHO_PORT: starts a SOCKS5 server allowing UDP to
# 127.0.0.1:ECHO_PORT; prints its PID.
start_udp_peer() {
    local name=$1 port=$2 echo=$3 pid
    case $name in
        portcullis)
            RUST_LOG=$PORTCULLIS_LOG "$PORTCULLIS" --listen "127.0.0.1:$port" \
                --allow "127.0.0.1:$echo" >"$WORK/portcullis.log" 2>&1 &
            pid=$!
            ;;
        dante)
            dante_conf "$port" \
                "socks pass { from: 127.0.0.0/8 to: 127.0.0.1/32 port = $echo command: udpassociate }" \
                "socks pass { from: 127.0.0.1/32 port = $echo to: 0.0.0.0/0 command: udpreply }"
            /usr/sbin/danted -f "$WORK/danted.conf" >>"$WORK/danted.log" 2>&1 &
            pid=$!
            ;;
        *) log "unknown path $name"; return 1 ;;
    esac
    STARTED_PIDS+=("$pid")
    if ! wait_listen "$port"; then
        log "$name did not start listening on $port (see $WORK/$name*.log)"
        kill "$pid" 2>/dev/null || true
        return 1
    fi
    echo "$pid"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

rows=()
for path in $PATHS; do
    if [ "$path" = dante ] && ! have danted; then
        rows+=("| dante | n/a (not installed) | | | |")
        continue
    fi
    results=()
    for _ in $(seq 1 "$REPEAT"); do
        echo_port=$(pick_port)
        if [ "$path" = direct ]; then
            line=$("$UDP_LOADGEN" --via direct --count "$COUNT" --window "$WINDOW" --size "$SIZE" --echo-port "$echo_port" | grep '^RESULT')
        else
            port=$(pick_port)
            pid=$(start_udp_peer "$path" "$port" "$echo_port") || { results=(); break; }
            line=$("$UDP_LOADGEN" --via socks5 --proxy "127.0.0.1:$port" --count "$COUNT" \
                --window "$WINDOW" --size "$SIZE" --echo-port "$echo_port" --watch-pid "$pid" | grep '^RESULT')
            stop_peer "$pid"
        fi
        log "$path: $line"
        results+=("$line")
    done
    [ "${#results[@]}" -gt 0 ] || { rows+=("| $path | failed (see $WORK) | | | |"); continue; }
    eps=$(printf '%s\n' "${results[@]}" | grep -o 'echoes_per_sec=[0-9]*' | cut -d= -f2 | median)
    # The run with the median rate gives the other columns.
    line=$(printf '%s\n' "${results[@]}" | grep -m1 "echoes_per_sec=$eps ")
    dps=$(echo "$line" | value datagrams_per_sec)
    cpu=$(echo "$line" | value cpu_us_per_datagram)
    lost=$(printf '%s\n' "${results[@]}" | grep -o 'lost=[0-9]*' | cut -d= -f2 | paste -sd+ | bc)
    rows+=("| $path | $eps | $dps | ${cpu:-—} | $lost |")
done

frag="$WORK/bench-udp.md"
{
    echo "<!-- begin scripts/bench-udp.sh -->"
    echo "### SOCKS5 UDP: datagrams per second and CPU per datagram"
    echo
    md_machine
    echo "- Command: \`$CMDLINE\`"
    echo "- $COUNT echoes of $SIZE-byte payloads, $WINDOW in flight, median of $REPEAT runs; a relayed datagram is one hop through the relay (each echo is two)."
    echo
    echo "| path | echoes/s | relayed datagrams/s | relay CPU µs per datagram | lost (all runs) |"
    echo "|---|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo "<!-- end scripts/bench-udp.sh -->"
} >"$frag"
cat "$frag"
if [ -n "$WRITE" ]; then
    splice_fragment "$WRITE" scripts/bench-udp.sh "$frag"
fi
