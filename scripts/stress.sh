#!/usr/bin/env bash
# The stress tests of tests/it (kill storms of 200 clients, 10,000 tunnels,
# slowloris, accept exhaustion under RLIMIT_NOFILE): `#[ignore]`d in a plain
# `cargo test` because they load the machine for half a minute, run here once
# (scripts/test.sh and CI call this). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# (The one other ignored test is a measurement: scripts/ktls.sh measure.)
cargo test "$@" --test it -- --ignored --skip ktls::measure
