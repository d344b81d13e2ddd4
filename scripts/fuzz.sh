#!/usr/bin/env bash
# Runs every cargo-fuzz target for a while; exits non-zero if any target
# fails to build or finds a crash (the input is left in fuzz/artifacts/).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     SECONDS per target, default 30
#
# Works on stable Rust: cargo-fuzz needs nightly flags (-Zsanitizer), which
# RUSTC_BOOTSTRAP=1 unlocks. The committed seeds in fuzz/corpus/<target>/ are
# read but never written; what the fuzzer finds goes to fuzz/target/corpus/.
set -uo pipefail

duration="${1:-30}"
shift || true
case "$duration" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz" || exit 2

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked || exit 2
fi

export RUSTC_BOOTSTRAP=1
# Sanitizer builds live in fuzz/target (gitignored), not the main target dir.
unset CARGO_TARGET_DIR

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

failed=()
for target in "${targets[@]}"; do
    echo "== $target: building" >&2
    if ! cargo fuzz build "$target"; then
        echo "== $target: BUILD FAILED" >&2
        failed+=("$target (build)")
        continue
    fi
    work="target/corpus/$target"
    mkdir -p "$work" "corpus/$target"
    echo "== $target: fuzzing for ${duration}s" >&2
    # libFuzzer reports every new input; keep that in a log, show the summary
    # (and the whole tail when it finds a crash).
    log="target/$target.fuzz.log"
    if cargo fuzz run "$target" "$work" "corpus/$target" -- \
        -max_total_time="$duration" -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        grep -E '^(Done|stat::number_of_executed_units|#[0-9]+[[:space:]]+DONE)' "$log" >&2 || true
    else
        tail -n 60 "$log" >&2
        echo "== $target: CRASH (see fuzz/artifacts/$target/)" >&2
        failed+=("$target (crash)")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "== failed: ${failed[*]}" >&2
    exit 1
fi
echo "== all ${#targets[@]} targets ran ${duration}s without a crash" >&2
