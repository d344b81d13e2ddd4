#!/usr/bin/env bash
# Churn CPU per tunnel, this build against another portcullis binary (or
# any paths of scripts/bench.sh), alternating them round by round so the
# machine's load falls on all: each round runs `loadgen churn` (open,
# 32-byte echo, close) with 1 and with 8 clients through each path and
# prints the rate and the proxy's CPU per tunnel, as medians.
#
#   BASELINE_BIN=/tmp/old/portcullis scripts/churn-ab.sh
#   ROUNDS=5 COUNT=2000 BASELINE_BIN=... scripts/churn-ab.sh
#   # against the yardsticks (installed by scripts/bench.sh):
#   LABELS="portcullis-connect portcullis-connect-early c-relay haproxy" COUNT=5000 scripts/churn-ab.sh
#   # clients that are not loopback by address (no uid lookup):
#   unshare -Urn sh -c 'ip link set lo up; ip addr add 10.9.9.9/32 dev lo;
#     HOST=10.9.9.9 BASELINE_BIN=... scripts/churn-ab.sh'
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

ROUNDS=${ROUNDS:-5}
COUNT=${COUNT:-2000}
HOST=${HOST:-127.0.0.1}
LABELS=${LABELS:-"portcullis-connect baseline-connect"}
case " $LABELS " in
    *" baseline-"*) : "${BASELINE_BIN:?set BASELINE_BIN to the portcullis binary to compare with}" ;;
esac

trap cleanup_started EXIT
build_release
declare -A PORT PID SINK VIAS
for label in $LABELS; do
    path_info "$label" || { log "unknown path $label"; exit 2; }
    SINK[$label]=$(pick_port)
    PORT[$label]=$(pick_port)
    VIAS[$label]=$VIA
    if [ "$PEER" != portcullis ] && [ "$PEER" != baseline ]; then
        # A yardstick: started as scripts/bench.sh starts it (127.0.0.1 only).
        why=$(have_peer "$PEER" "$label") || { log "$label: $why"; exit 2; }
        PID[$label]=$(start_peer "$PEER" "${PORT[$label]}" "${SINK[$label]}" "$PEER_ARGS")
        STARTED_PIDS+=("${PID[$label]}")
        continue
    fi
    bin=$PORTCULLIS
    [ "$PEER" = baseline ] && bin=$BASELINE_BIN
    # shellcheck disable=SC2086 # PEER_ARGS is a list of flags
    RUST_LOG=warn "$bin" --listen "$HOST:${PORT[$label]}" --allow "$HOST:${SINK[$label]}" $PEER_ARGS \
        >"$WORK/$label.log" 2>&1 &
    PID[$label]=$!
    STARTED_PIDS+=("${PID[$label]}")
done
for label in $LABELS; do wait_listen "${PORT[$label]}" || { log "$label did not listen"; exit 1; }; done

results=()
for r in $(seq "$ROUNDS"); do
    for par in 1 8; do
        for label in $LABELS; do
            out=$(timeout 150 "$LOADGEN" churn --via "${VIAS[$label]}" --proxy "$HOST:${PORT[$label]}" \
                --sink "$HOST:${SINK[$label]}" --count "$COUNT" --parallel "$par" \
                --watch-pid "${PID[$label]}" 2>&1 | grep RESULT | tail -1) || true
            line="$label clients=$par $(value conns_per_s <<<"$out") $(value proxy_cpu_us_per_conn <<<"$out")"
            log "round $r: $line"
            results+=("$line")
        done
    done
done
echo "| proxy | clients | tunnels/s (median) | proxy CPU µs/tunnel (median) | CPU per round |"
echo "|---|---|---|---|---|"
for label in $LABELS; do
    for par in 1 8; do
        printf '%s\n' "${results[@]}" | awk -v l="$label" -v p="clients=$par" '
            BEGIN { n = 0 }
            $1 == l && $2 == p { r[n] = $3; c[n] = $4; all = all " " $4; n++ }
            function median(a, n,   i, j, t) {
                for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2
            }
            END { if (n) printf "| %s | %s | %s | %s |%s |\n", l, substr(p, 9), median(r, n), median(c, n), all }'
    done
done
