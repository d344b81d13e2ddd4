#!/usr/bin/env bash
# Syscalls per MiB relayed and per tunnel. Each proxy (every thread and child
# process) is attached with `strace -f -c`:
#   - per MiB: during one transfer of STRACE_BYTES over loopback; the
#     `direct` row is the load generator itself (sender and receiver);
#   - per tunnel: during `loadgen churn` (open, 32-byte echo, close) of
#     STRACE_CHURN tunnels, with 1 and with 8 clients at once; the total,
#     the total without epoll_wait (the loop's, shared by the tunnels of
#     one wake-up), and each syscall's calls per tunnel.
# The proxies log at warn: no access line is written per tunnel.
#
#   scripts/syscalls.sh
#   STRACE_BYTES=512MiB DIR=both PEERS="portcullis-connect tinyproxy" scripts/syscalls.sh
#   MIB=0 PEERS="portcullis-connect c-relay" scripts/syscalls.sh      # per tunnel only
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

STRACE_BYTES=${STRACE_BYTES:-256MiB}
STRACE_CHURN=${STRACE_CHURN:-1000}
DIR=${DIR:-up}
MIB=${MIB:-1}
TUNNEL=${TUNNEL:-1}
PEERS=${PEERS:-"direct portcullis-connect portcullis-socks5 portcullis-connect-rw c-relay haproxy tinyproxy dante socat"}
export DIR PORTCULLIS_LOG=warn

ulimit -n "$(ulimit -Hn)"
trap cleanup_started EXIT
build_release
install_peers
have strace || { log "strace missing"; exit 1; }

MIB_ROWS=()
TUNNEL_ROWS=()
for label in $PEERS; do
    if ! path_info "$label"; then
        log "unknown path $label"
        continue
    fi
    if ! why=$(have_peer "$PEER" "$label"); then
        log "skipping $label: $why"
        continue
    fi
    sink=$(pick_port)
    port=$(pick_port)
    pid=0
    if [ "$PEER" != none ]; then
        pid=$(start_peer "$PEER" "$port" "$sink" "$PEER_ARGS") || continue
    fi
    if [ "$MIB" = 1 ]; then
        s=$(strace_count "$label" "$VIA" "$port" "$pid" "$sink" "$STRACE_BYTES" || true)
        # shellcheck disable=SC2016 # backquotes are Markdown
        MIB_ROWS+=("$(printf '| %s | %s | %s | %s | %s | %s | `%s` |' "$label" "$(value mib <<<"$s")" \
            "$(value per_mib <<<"$s")" "$(value epoll_per_mib <<<"$s")" "$(value errors_per_mib <<<"$s")" \
            "$(sed -n 's/.*top="\([^"]*\)".*/\1/p' <<<"$s")" "$(sed -n 's/.*cmd="\(.*\)"$/\1/p' <<<"$s")")")
    fi
    if [ "$TUNNEL" = 1 ] && [ "$pid" != 0 ]; then
        for par in 1 8; do
            s=$(strace_churn "$label" "$VIA" "$port" "$pid" "$sink" "$STRACE_CHURN" "$par" || true)
            log "  $s"
            TUNNEL_ROWS+=("$(printf '| %s | %s | %s (%s) | %s | %s |' "$label" "$par" "$(value per_tunnel <<<"$s")" \
                "$(value sockets_per_tunnel <<<"$s")" \
                "$(value errors_per_tunnel <<<"$s")" "$(sed -n 's/.*breakdown="\([^"]*\)".*/\1/p' <<<"$s")")")
        done
    fi
    [ "$pid" = 0 ] || stop_peer "$pid"
done

if [ "${#MIB_ROWS[@]}" -gt 0 ]; then
    echo "| Path | MiB | syscalls/MiB | epoll_wait/MiB | failed calls/MiB | top syscalls per MiB | command |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${MIB_ROWS[@]}"
    echo
fi
if [ "${#TUNNEL_ROWS[@]}" -gt 0 ]; then
    echo "Per tunnel: \`loadgen churn --count $STRACE_CHURN --parallel N\` (open, 32-byte echo, close), the proxy under \`strace -f -c\`; calls per tunnel."
    echo
    echo "| Path | clients at once | syscalls/tunnel (without epoll_wait) | failed calls/tunnel | per syscall, per tunnel |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${TUNNEL_ROWS[@]}"
    echo
fi
echo "strace summaries: $WORK/strace-*.txt"
