#!/usr/bin/env bash
# Handshake flood: does one client replaying a TLS ClientHello at full rate
# against a terminating rule starve the other clients?
#
#   scripts/handshake-flood.sh                 # needs root (the flooder runs as nobody)
#   DURATION=20 FLOODERS=32 VICTIM_RATE=20 scripts/handshake-flood.sh
#   PORTCULLIS=path/to/portcullis scripts/handshake-flood.sh
#
# A release portcullis (target/release/portcullis; built when missing) on
# loopback, with a local HTTP origin and two rules for it: `plain` (a raw
# tunnel) and `tls` (tls = "terminate", its own CA under the work dir).
# The victim (root) opens a new tunnel through the `plain` rule, GETs a small
# page and closes, VICTIM_RATE times a second for DURATION seconds; its
# CONNECT+GET latencies give p50/p90/p99. The flooder runs as `nobody`
# (another uid: another client to the proxy's per-client limits), FLOODERS
# connections at once, each looping: CONNECT to the `tls` rule, replay one
# recorded ClientHello, read the server's first flight (or the refusal),
# close. Scenarios, each with a fresh proxy:
#   idle            the victim alone
#   tls-flood-off   the ClientHello flood, limits.handshakes_per_client_per_sec = 0
#   tls-flood       the ClientHello flood, the default budget (50/s, burst 100)
#   plain-flood     a plaintext flood (CONNECT + GET through `plain`) paced at
#                   the rate the tls-flood scenario's flooder reached
# Prints a Markdown table (kept in $WORK/handshake-flood.md). The issue's
# bar: the victim's p90 under tls-flood within 3x its p90 under plain-flood.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PORTCULLIS=${PORTCULLIS:-$ROOT/target/release/portcullis}
DURATION=${DURATION:-10}
FLOODERS=${FLOODERS:-16}
VICTIM_RATE=${VICTIM_RATE:-20}
SCENARIOS=${SCENARIOS:-"idle tls-flood-off tls-flood plain-flood"}
WORK=${WORK:-$(mktemp -d /tmp/portcullis-flood.XXXXXX)}
mkdir -p "$WORK"
chmod 755 "$WORK"

log() { printf '[flood] %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
    log "needs root: the flooder runs as nobody (setpriv), a client apart from the victim"
    exit 2
fi
if [ ! -x "$PORTCULLIS" ]; then
    log "building $PORTCULLIS"
    (cd "$ROOT" && cargo build --release --quiet --bin portcullis)
fi

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- the origin: HTTP/1.1 on two ports, a short page, then close ----------
cat >"$WORK/origin.py" <<'EOF'
import asyncio, sys
BODY = b"ok\n" * 100
async def serve(r, w):
    try:
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY)
        await w.drain()
    except Exception:
        pass
    w.close()
async def main():
    for port in sys.argv[1:]:
        await asyncio.start_server(serve, "127.0.0.1", int(port), backlog=4096)
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
EOF

# ---- the clients: the victim and the two floods --------------------------
cat >"$WORK/clients.py" <<'EOF'
import asyncio, json, ssl, sys, time
mode, proxy_port, target, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
arg = float(sys.argv[5])

def client_hello():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()

CONNECT = b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode())
GET = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"

async def tunnel():
    r, w = await asyncio.open_connection("127.0.0.1", proxy_port)
    w.write(CONNECT)
    head = await r.readuntil(b"\r\n\r\n")
    return r, w, head.split(b" ", 2)[1]

async def get_once():
    r, w, status = await tunnel()
    if status == b"200":
        w.write(GET)
        await r.read()
    w.close()
    return status

async def hello_once(hello):
    r, w, status = await tunnel()
    if status == b"200":
        w.write(hello)
        await r.read(1)  # the proxy's first flight: its half of the handshake
    w.close()
    return status

async def victim(rate):
    lat, errors = [], 0
    end = time.monotonic() + duration
    nxt = time.monotonic()
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            ok = await asyncio.wait_for(get_once(), 10) == b"200"
        except Exception:
            ok = False
        if ok:
            lat.append((time.monotonic() - t) * 1000)
        else:
            errors += 1
        nxt += 1 / rate
        await asyncio.sleep(max(0, nxt - time.monotonic()))
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
    print(json.dumps({"n": len(lat), "errors": errors, "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}), flush=True)

async def flood(kind, concurrency, rate):
    # rate 0: full speed, `concurrency` loops; else starts paced at `rate`/s.
    hello = client_hello()
    once = (lambda: hello_once(hello)) if kind == "tls" else get_once
    counts = {}
    end = time.monotonic() + duration
    async def one():
        try:
            s = (await asyncio.wait_for(once(), 10)).decode()
        except Exception:
            s = "error"
        counts[s] = counts.get(s, 0) + 1
    async def loop():
        while time.monotonic() < end:
            await one()
    t0 = time.monotonic()
    if rate == 0:
        await asyncio.gather(*(loop() for _ in range(concurrency)))
    else:
        sem = asyncio.Semaphore(concurrency * 4)
        tasks, nxt = [], time.monotonic()
        async def paced():
            async with sem:
                await one()
        while time.monotonic() < end:
            tasks.append(asyncio.ensure_future(paced()))
            nxt += 1 / rate
            await asyncio.sleep(max(0, nxt - time.monotonic()))
        await asyncio.gather(*tasks)
    total = sum(counts.values())
    print(json.dumps({"attempts": total, "rate": total / (time.monotonic() - t0), "statuses": counts}), flush=True)

if mode == "victim":
    asyncio.run(victim(arg))
elif mode == "tls-flood":
    asyncio.run(flood("tls", int(arg), 0))
else:  # plain-flood: arg is the rate
    asyncio.run(flood("plain", 64, arg))
EOF

PLAIN_PORT=$(free_port)
TLS_PORT=$(free_port)
python3 "$WORK/origin.py" "$PLAIN_PORT" "$TLS_PORT" >"$WORK/origin.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q ready "$WORK/origin.out" 2>/dev/null && break; sleep 0.1; done

config() { # $1: handshakes_per_client_per_sec, or "" for the default
    local rate=""
    [ -n "$1" ] && rate="handshakes_per_client_per_sec = $1"
    cat <<EOF
[tls]
state_dir = "$WORK/state"

[limits]
$rate

[[rules]]
name = "plain"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
ports = [$PLAIN_PORT]

[[rules]]
name = "tls"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
ports = [$TLS_PORT]
tls = "terminate"
inspect = "http"
EOF
}

PROXY_PID=""
PROXY_PORT=""
start_proxy() { # $1: the budget ("" default, 0 off)
    config "$1" >"$WORK/portcullis.toml"
    PROXY_PORT=$(free_port)
    : >"$WORK/proxy.log"
    RUST_LOG=warn,portcullis=info "$PORTCULLIS" --listen "127.0.0.1:$PROXY_PORT" \
        --config "$WORK/portcullis.toml" 2>"$WORK/proxy.log" &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $PROXY_PORT)).close()" 2>/dev/null && return
        sleep 0.1
    done
    log "the proxy did not start:"; cat "$WORK/proxy.log" >&2; exit 1
}

stop_proxy() { # prints the counters the proxy logged at SIGUSR1
    kill -USR1 "$PROXY_PID"
    for _ in $(seq 50); do grep -q "stats:" "$WORK/proxy.log" && break; sleep 0.1; done
    grep -o 'handshake_rate_refused=[0-9]*' "$WORK/proxy.log" | tail -1
    kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
}

victim() { python3 "$WORK/clients.py" victim "$PROXY_PORT" "localhost:$PLAIN_PORT" "$DURATION" "$VICTIM_RATE"; }
# A python3 that nobody can run (a root-only pyenv shim will not do).
NOBODY_PY=""
for py in /usr/bin/python3 /usr/local/bin/python3 "$(command -v python3)"; do
    if setpriv --reuid=65534 --regid=65534 --clear-groups "$py" -c '' 2>/dev/null; then NOBODY_PY=$py; break; fi
done
[ -n "$NOBODY_PY" ] || { log "no python3 that nobody (uid 65534) can run"; exit 2; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$NOBODY_PY" "$WORK/clients.py" "$@"; }

field() { python3 -c "import json,sys; v=json.loads(sys.argv[1]); print(${2})" "$1"; }

TLS_RATE=""
ROWS=()
for s in $SCENARIOS; do
    case $s in
        idle) start_proxy "" ;;
        tls-flood-off) start_proxy 0 ;;
        tls-flood) start_proxy "" ;;
        plain-flood) start_proxy "" ;;
        *) log "unknown scenario $s"; exit 2 ;;
    esac
    log "$s"
    flood_out="{}"
    case $s in
        idle) v=$(victim) ;;
        tls-flood | tls-flood-off)
            as_nobody tls-flood "$PROXY_PORT" "localhost:$TLS_PORT" "$DURATION" "$FLOODERS" >"$WORK/flood.out" &
            fp=$!
            v=$(victim)
            wait "$fp"
            flood_out=$(cat "$WORK/flood.out")
            [ "$s" = tls-flood ] && TLS_RATE=$(field "$flood_out" 'round(v["rate"])')
            ;;
        plain-flood)
            rate=${TLS_RATE:-${PLAIN_RATE:-1000}}
            as_nobody plain-flood "$PROXY_PORT" "localhost:$PLAIN_PORT" "$DURATION" "$rate" >"$WORK/flood.out" &
            fp=$!
            v=$(victim)
            wait "$fp"
            flood_out=$(cat "$WORK/flood.out")
            ;;
    esac
    refused=$(stop_proxy)
    log "$s: victim $v; flooder $flood_out; $refused"
    ROWS+=("| $s | $(field "$v" 'v["n"]') | $(field "$v" 'v["errors"]') | $(field "$v" '"%.1f" % v["p50"]') | $(field "$v" '"%.1f" % v["p90"]') | $(field "$v" '"%.1f" % v["p99"]') | $(field "$flood_out" '"%.0f/s" % v["rate"] if v else "-"') | $(field "$flood_out" '", ".join("%s: %d" % kv for kv in sorted(v["statuses"].items())) if v else "-"') | ${refused#handshake_rate_refused=} |")
done

{
    echo "| scenario | victim requests | victim errors | p50 ms | p90 ms | p99 ms | flooder rate | flooder answers | handshake_rate_refused |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|---:|"
    printf '%s\n' "${ROWS[@]}"
} | tee "$WORK/handshake-flood.md"
