#!/usr/bin/env bash
# The whole test suite, as CI runs it (the README's test command):
#   1. the clients the tests drive, user-locally under target/test-env
#      (scripts/test-deps.sh); with them present no test skips;
#   2. `cargo test`: unit tests, the integration binary (tests/it), doc tests;
#   3. the relay tests again on the portable read/write path (what macOS
#      runs: no splice), chosen at run time, so nothing is rebuilt;
#   4. the stress tests (kill storms, scale, slowloris, accept exhaustion),
#      `#[ignore]`d in a plain `cargo test`: scripts/stress.sh;
#   5. the kernel-TLS tests where a kernel with the TLS ULP runs them
#      (this one's, or a QEMU VM's): scripts/ktls.sh.
# Extra arguments go to every `cargo test` (e.g. --release).
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(scripts/test-deps.sh)"

cargo test "$@"

# Modules of tests/it whose sessions are raw relays.
PORTCULLIS_SPLICE=off cargo test "$@" --test it -- \
    backpressure:: curl:: half_close:: idle:: kill:: reset:: shutdown:: \
    upgrade:: websocket:: workers::

scripts/stress.sh "$@"

scripts/ktls.sh "$@"
