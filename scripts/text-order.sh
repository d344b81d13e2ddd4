#!/usr/bin/env bash
# Writes scripts/text-order.txt: the functions of the release binary that run
# at start, on a tunnel's path (CONNECT, SOCKS5, splice and read/write),
# on a refusal and at shutdown, as a callgrind run of that workload records
# them. scripts/build.rs hands the list to the linker, which places those
# functions first, so the running proxy maps about 0.75 MiB of text instead
# of 2.5 (a page fault maps the 64 KiB around it).
#
# Run it again after a toolchain update or a large change: names carry
# hashes of the crate and the compiler, and a name that is gone is only
# placed as usual (`--check` says how much of the list still matches).
#
#   scripts/text-order.sh            # rebuild, record, rewrite the list
#   scripts/text-order.sh --check    # how many listed names the release binary has
#
# Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
export LC_ALL=C # one sort order for sort and comm, and for the list's diffs
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
ORDER="$BENCH_ROOT/scripts/text-order.txt"

if [ "${1:-}" = --check ]; then
    text_order_check
    exit 0
fi

have valgrind || { log "valgrind missing (apt-get install valgrind)"; exit 1; }
trap cleanup_started EXIT
build_release

# lg COMMAND PROXY_PORT SINK_PORT ARGS...: one loadgen run through the proxy.
lg() { "$LOADGEN" "$1" --proxy "127.0.0.1:$2" --sink "127.0.0.1:$3" "${@:4}" >/dev/null; }

# One callgrind run of the proxy with ARGS through the workload; writes the
# names of the functions it ran to $WORK/callgrind.NAME.names.
record() {
    local out="$WORK/callgrind.$1" sink port pid
    shift
    sink=$(pick_port)
    port=$(pick_port)
    RUST_LOG=warn valgrind --tool=callgrind --demangle=no --callgrind-out-file="$out" \
        "$PORTCULLIS" --listen "127.0.0.1:$port" --allow "127.0.0.1:$sink" "$@" \
        >"$out.log" 2>&1 &
    pid=$!
    STARTED_PIDS+=("$pid")
    # valgrind starts slowly: up to 25 s
    local up=0
    for _ in 1 2 3 4 5; do wait_listen "$port" && up=1 && break; done
    [ "$up" = 1 ] || { log "the proxy under callgrind did not listen: $out.log"; tail -5 "$out.log" >&2; return 1; }
    lg transfer "$port" "$sink" --via connect --bytes 64MiB --dir up --streams 4
    lg transfer "$port" "$sink" --via socks5 --bytes 64MiB --dir down --streams 4
    lg churn "$port" "$sink" --via connect --count 300 --parallel 4
    lg churn "$port" "$sink" --via connect-early --count 300 --parallel 4
    lg churn "$port" "$sink" --via socks5 --count 300 --parallel 4
    # A refusal: a port no rule allows.
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n' >&3
    timeout 5 head -c 12 <&3 >/dev/null || true
    exec 3<&-
    kill -TERM "$pid"
    wait "$pid" || { log "the proxy under callgrind failed: $out.log"; tail -5 "$out.log" >&2; return 1; }
    grep -oE '^c?fn=\([0-9]+\) .+' "$out" | sed -E 's/^c?fn=\([0-9]+\) //' >"$out.names"
}

cfg="$WORK/rw.toml"
printf '[limits]\nsplice = false\n' >"$cfg"
record splice
record rw --config "$cfg"
{
    echo "# Written by scripts/text-order.sh; read by scripts/build.rs (the linker's --symbol-ordering-file)."
    echo "# The functions the release binary ran (callgrind), placed first in its text. Made with:"
    echo "# $(rustc --version), Cargo.lock $(sha256sum "$BENCH_ROOT/Cargo.lock" | cut -c1-12), $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    comm -12 <(sort -u "$WORK/callgrind.splice.names" "$WORK/callgrind.rw.names") <(functions "$PORTCULLIS")
} >"$ORDER"
log "wrote $ORDER: $(grep -vc "^#" "$ORDER") functions"
