#!/usr/bin/env bash
# Runs every cargo-fuzz target under fuzz/ for N seconds each (default 20), installing
# cargo-fuzz from crates.io if it is missing. Stable toolchains need RUSTC_BOOTSTRAP=1 for the
# sanitizer flags cargo-fuzz passes; it is set here. A crash fails the script and leaves the
# input under fuzz/artifacts/TARGET/.
#
#   scripts/fuzz-smoke.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
shift || true
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi
start=$(date +%s)
if [ "$#" -eq 0 ]; then
    cargo fuzz build --fuzz-dir fuzz
else
    for t in "${targets[@]}"; do cargo fuzz build --fuzz-dir fuzz "$t"; done
fi
echo "fuzz-smoke: built ${#targets[@]} targets in $(( $(date +%s) - start ))s"
log=$(mktemp)
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    echo "fuzz-smoke: $t for ${secs}s"
    # LeakSanitizer is on for every target, db_model included: it was off there while the
    # page file's `woods-io` threads were never joined (the check caught one mid-exit); the
    # I/O queue now joins them on drop (docs/reliability.md, *Fuzzing*).
    if ! cargo fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -max_len=16384 -detect_leaks=1 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz-smoke: $t FAILED; the input is under fuzz/artifacts/$t/"
        exit 1
    fi
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done)' "$log" || true
done
rm -f "$log"
echo "fuzz-smoke: ${#targets[@]} targets, ${secs}s each, $(( $(date +%s) - start ))s in all"
