#!/usr/bin/env bash
# The long version of the generated hostile-input tests
# (docs/reliability.md, "Generated market-data files and job specs"):
# the properties of market-data/tests/hostile_files (mutated DBN, DBN.zst,
# Parquet and CSV files) and host/tests/hostile_job_specs (mutated job-spec
# JSON) with PROPTEST_CASES cases each instead of CI's few dozen.
#
#   scripts/fuzz-inputs.sh [CASES [SEED]]   # default 20000 cases per property, a random seed
#
# The seed (PROPTEST_RNG_SEED) is printed: the same CASES and SEED generate
# the same cases again.
# Prints one line per property (cases, read, refused, panics, hangs, peak
# allocation, slowest case), then the totals; exits non-zero if any property
# failed (a panic, a hang, an allocation over the bound, a refusal that does
# not name the file or field), after printing proptest's minimal failing input.
set -euo pipefail
cd "$(dirname "$0")/.."

cases="${1:-${PROPTEST_CASES:-20000}}"
seed="${2:-$((RANDOM * 32768 + RANDOM))}"
export PROPTEST_CASES="$cases" PROPTEST_RNG_SEED="$seed" RUST_BACKTRACE=0
log="$(mktemp --suffix=.fuzz-inputs.log)"

# Built first, so that the time printed is the tests' own.
cargo test --release -q -p tli-data --test hostile_files --no-run
cargo test --release -q -p tli-host --test hostile_job_specs --no-run
started=$SECONDS
failed=0
cargo test --release -q -p tli-data --test hostile_files -- --nocapture >"$log" 2>&1 || failed=1
cargo test --release -q -p tli-host --test hostile_job_specs -- --nocapture >>"$log" 2>&1 || failed=1

echo "PROPTEST_CASES=$cases PROPTEST_RNG_SEED=$seed: $((SECONDS - started)) s"
# (`-q` prints its progress dots on the same lines.)
grep -o 'hostile-inputs .*' "$log" >"$log.figures" || true
sed 's/^hostile-inputs /  /' "$log.figures"
awk '{
        for (i = 1; i <= NF; i++) {
            if ($i == "cases") cases += $(i + 1)
            if ($i == "panics") panics += $(i + 1)
            if ($i == "hangs") hangs += $(i + 1)
        }
        properties++
    }
    END { printf "total: %d properties, %d cases, panics %d, hangs %d\n", properties, cases, panics, hangs }' "$log.figures"
rm -f "$log.figures"
if [ "$failed" -ne 0 ]; then
    echo "FAILED (the whole output: $log):"
    grep -E -A30 'Test failed|panicked at|memory allocation|overflowed|signal:' "$log" | head -120
    tail -20 "$log"
    exit 1
fi
grep -E '^test result' "$log"
rm -f "$log"
