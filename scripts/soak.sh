#!/usr/bin/env bash
# Soak test: the release binary under a mixed load for a bounded time.
#
#   scripts/soak.sh [--minutes N] [--profile release|dev]   defaults 10, release
#
# CI runs it with --profile dev: the binary `cargo test` already built (our
# whole build at opt-level 1), with no release build to wait for.
#
# Builds the release binary, starts it on loopback with a policy allowing the
# loopback upstreams the load generator (examples/soak.rs) starts, runs the
# load (long WebSockets, short tunnels, denied requests, clients killed
# mid-stream; inspected HTTP tunnels with requests allowed and refused by a
# request rule; terminated TLS to an in-process origin with its own CA, with
# WebSockets after the 101 and a [[secrets]] placeholder injected for
# localhost and refused (secret-not-allowed) for 127.0.0.1; a SIGHUP reload
# every 3 s; every payload hashed and checked at the other end), then prints
# sessions, bytes, close reasons from the proxy's SIGUSR1 stats, and the
# proxy's fd and RSS high-water marks. Memory must be flat: the RSS
# high-water mark of the run's last third may exceed the first third's by
# at most the larger of 4 MiB and 25% (examples/soak.rs --rss-slack-kib). The last line is `lost: N`; the exit status is non-zero
# when N > 0 (or anything else failed: wrong refusals, a secret not
# injected or its value in the proxy's log, reloads not applied, RSS grew).
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
# One build of both: built alone, the binary would resolve dependency
# features without the dev-dependencies the example brings, unlike the
# build `cargo test` left, and recompile the crate (45 s in CI) for nothing.
cargo build --profile "$profile" --bin portcullis --example soak >&2

work="$(mktemp -d)"
proxy_pid=""
cleanup() {
    if [ -n "$proxy_pid" ] && kill -0 "$proxy_pid" 2>/dev/null; then
        kill -KILL "$proxy_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# CAs, the origins' ports and the inspecting/terminating rules + secret.
"$target/$outdir/examples/soak" --prepare "$work"

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
cat "$work/inspect.toml" >>"$work/soak.toml"

# The secret's value: in the proxy's environment only; the load generator
# gets it to check what the origin received, and sends the placeholder.
SOAK_SECRET="soak-value-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export SOAK_SECRET
placeholder="$("$target/$outdir/portcullis" env --config "$work/soak.toml" |
    sed -n "s/^export SOAK_TOKEN='\{0,1\}\([^']*\)'\{0,1\}$/\1/p")"
case "$placeholder" in
    portcullis-secret-SOAK_TOKEN-*) ;;
    *) echo "== no placeholder from portcullis env: '$placeholder'" >&2; exit 1 ;;
esac

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
    --work "$work" --placeholder "$placeholder" \
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
# The secret's value must appear in no log line.
if grep -qF "$SOAK_SECRET" "$work/proxy.log"; then
    echo "== the secret's value appears in the proxy's log" >&2
    rc=1
fi

# The report last, so that its final line (`lost: N`) is the script's last line.
cat "$work/report.txt"
if ! tail -n 1 "$work/report.txt" | grep -q '^lost: '; then
    echo "lost: unknown (the load generator did not finish; status $rc)"
    [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
