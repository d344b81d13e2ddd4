#!/usr/bin/env bash
# The kernel-TLS tests (tests/it/ktls.rs) where a kernel with the TLS ULP
# runs them: this machine's own if it has one, else a QEMU VM with Debian's
# kernel and tls.ko (scripts/ktls-vm.sh). Either way PORTCULLIS_REQUIRE_KTLS
# is set, so they cannot pass by skipping. scripts/test.sh calls this.
#
# Without such a kernel and without root to install QEMU, it says so and
# exits 0, except in CI (CI set), where that fails.
# Extra arguments go to `cargo test` (e.g. --release). `scripts/ktls.sh
# measure` prints the proxy's CPU per GiB for a terminated download with TLS
# in user space and in the kernel, and a raw tunnel's, in one run (in the VM
# the CPU is emulated: compare the figures with each other only).
set -euo pipefail
filter=(ktls::)
if [ "${1:-}" = measure ]; then
    shift
    filter=(ktls::measure --ignored --nocapture)
fi
cd "$(dirname "$0")/.."

export PORTCULLIS_REQUIRE_KTLS=1
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null; then
    exec cargo test "$@" --test it -- "${filter[@]}"
fi
if ! command -v qemu-system-x86_64 >/dev/null && [ "$(id -u)" != 0 ]; then
    echo "NOTE: no TLS ULP in this kernel and no QEMU (needs root to install):" \
        "the kTLS tests did not run" >&2
    [ -z "${CI:-}" ] || exit 1
    exit 0
fi
# The integration binary `cargo test` built, and the proxy binary it runs.
bin=$(cargo test "$@" --test it --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "it" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "ktls: no integration test binary" >&2; exit 1; }
proxy=$(dirname "$(dirname "$bin")")/portcullis
KTLS_VM_FILES="$proxy" KTLS_VM_ENV="PORTCULLIS_REQUIRE_KTLS RUST_BACKTRACE" \
    exec scripts/ktls-vm.sh "$bin" "${filter[@]}"
