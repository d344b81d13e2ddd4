#!/usr/bin/env bash
# Soak test: the release binary under a mixed load for a bounded time.
#
#   scripts/soak.sh [--minutes N] [--profile release|dev]   defaults 10, release
#
# CI runs it with --profile dev: the binary `cargo test` already built (our
# crate at opt-level 1, dependencies at 3), with no release build to wait for.
#
# Builds the release binary, starts it on loopback with a policy allowing the
# loopback upstreams the load generator (examples/soak.rs) starts, runs the
# load (long WebSockets, short tunnels, denied requests, clients killed
# mid-stream; every payload hashed and checked at the other end), then prints
# sessions, bytes, close reasons from the proxy's SIGUSR1 stats, and the
# proxy's fd and RSS high-water marks. The last line is `lost: N`; the exit
# status is non-zero when N > 0 (or anything else failed).
set -euo pipefail

minutes=10
profile=release
while [ "$#" -gt 0 ]; do
    case "$1" in
        --minutes) minutes="${2:-}"; shift 2 || true ;;
        --profile) profile="${2:-}"; shift 2 || true ;;
        *) echo "usage: $0 [--minutes N] [--profile release|dev]" >&2; exit 2 ;;
    esac
done
case "$profile" in
    release) outdir=release ;;
    dev) outdir=debug ;;
    *) echo "usage: $0 [--minutes N] [--profile release|dev]" >&2; exit 2 ;;
esac
case "$minutes" in
    '' | *[!0-9]*) echo "usage: $0 [--minutes N]" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"

echo "== building ($profile)" >&2
cargo build --profile "$profile" >&2
cargo build --profile "$profile" --example soak >&2

work="$(mktemp -d)"
proxy_pid=""
cleanup() {
    if [ -n "$proxy_pid" ] && kill -0 "$proxy_pid" 2>/dev/null; then
        kill -KILL "$proxy_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/soak.toml" <<'TOML'
[timeouts]
handshake = "10s"
connect = "10s"
close = "2s"
drain = "5s"

# The load generator's upstreams: loopback, unprivileged ports. Port 9 stays
# denied (no rule allows it): the generator's denied requests aim there.
[[rules]]
name = "soak-upstreams"
action = "allow"
cidr = "127.0.0.1/32"
ports = ["1024-65535"]
TOML

"$target/$outdir/portcullis" --config "$work/soak.toml" --listen 127.0.0.1:0 \
    2>"$work/proxy.log" &
proxy_pid=$!

addr=""
for _ in $(seq 100); do
    addr="$(grep -m1 -o 'listening on [^ ]*' "$work/proxy.log" 2>/dev/null | awk '{print $3}' || true)"
    [ -n "$addr" ] && break
    kill -0 "$proxy_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$addr" ]; then
    echo "== the proxy did not start:" >&2
    cat "$work/proxy.log" >&2
    exit 1
fi
echo "== proxy pid $proxy_pid on $addr; load for $minutes minute(s)" >&2

set +e
cargo run --profile "$profile" --example soak -- \
    --proxy "$addr" --minutes "$minutes" --pid "$proxy_pid" --log "$work/proxy.log" \
    2> >(sed 's/^/[soak] /' >&2) > "$work/report.txt"
rc=$?
set -e

# Stop the proxy (SIGTERM, bounded), keeping its warnings and errors.
kill -TERM "$proxy_pid" 2>/dev/null || true
for _ in $(seq 100); do
    kill -0 "$proxy_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$proxy_pid" 2>/dev/null; then
    echo "== the proxy did not exit within 10 s of SIGTERM" >&2
    rc=1
fi
grep -E ' (WARN|ERROR) ' "$work/proxy.log" | tail -n 20 >&2 || true

# The report last, so that its final line (`lost: N`) is the script's last line.
cat "$work/report.txt"
if ! tail -n 1 "$work/report.txt" | grep -q '^lost: '; then
    echo "lost: unknown (the load generator did not finish; status $rc)"
    [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
