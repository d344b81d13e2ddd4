#!/usr/bin/env bash
# Syscalls per MiB relayed: each proxy (every thread and child process) is
# attached with `strace -f -c` during one transfer of STRACE_BYTES over
# loopback. The `direct` row is the load generator itself (sender and
# receiver), for reference.
#
#   scripts/syscalls.sh
#   STRACE_BYTES=512MiB DIR=both PEERS="portcullis-connect tinyproxy" scripts/syscalls.sh
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

STRACE_BYTES=${STRACE_BYTES:-256MiB}
DIR=${DIR:-up}
PEERS=${PEERS:-"direct portcullis-connect portcullis-socks5 tinyproxy"}
export DIR PORTCULLIS_LOG=warn

ulimit -n "$(ulimit -Hn)"
trap cleanup_started EXIT
build_release
install_peers
have strace || { log "strace missing"; exit 1; }

echo "| Path | MiB | syscalls/MiB | epoll_wait/MiB | failed calls/MiB | top syscalls per MiB | command |"
echo "|---|---|---|---|---|---|---|"
for label in $PEERS; do
    case $label in
        direct) peer=none via=direct ;;
        portcullis-connect) peer=portcullis via=connect ;;
        portcullis-socks5) peer=portcullis via=socks5 ;;
        tinyproxy) peer=tinyproxy via=connect ;;
        dante) peer=dante via=socks5 ;;
        haproxy | socat) peer=$label via=relay ;;
        *) log "unknown path $label"; continue ;;
    esac
    sink=$(pick_port)
    port=$(pick_port)
    pid=0
    if [ "$peer" != none ]; then
        if ! { [ "$peer" = portcullis ] || have "${peer/dante/danted}"; }; then
            log "skipping $label: not installed"
            continue
        fi
        pid=$(start_peer "$peer" "$port" "$sink") || continue
    fi
    s=$(strace_count "$label" "$via" "$port" "$pid" "$sink" "$STRACE_BYTES" || true)
    [ "$pid" = 0 ] || stop_peer "$pid"
    printf '| %s | %s | %s | %s | %s | %s | `%s` |\n' "$label" "$(value mib <<<"$s")" \
        "$(value per_mib <<<"$s")" "$(value epoll_per_mib <<<"$s")" "$(value errors_per_mib <<<"$s")" \
        "$(sed -n 's/.*top="\([^"]*\)".*/\1/p' <<<"$s")" "$(sed -n 's/.*cmd="\(.*\)"$/\1/p' <<<"$s")"
done
echo
echo "strace summaries: $WORK/strace-*.txt"
