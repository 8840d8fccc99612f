#!/usr/bin/env bash
# The Mamba-2 validation runs of docs/benchmarks.md ("Mamba-2"), after `make build`:
#   1. the planted AR(1) set and the three bundled real daily series: Mamba-2 beside the
#      template, validation and test skill over the zero forecast (`tli train local`, in-process),
#   2. the long-memory check at full length (the e2e test with a larger budget),
#   3. throughput against lookback (bench lookback_scaling) and the memory model against the
#      measured heap (bench activation_memory).
# Usage: scripts/bench-mamba2.sh [forecast|memory|speed|all]   (default all; about an hour on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
WHAT=${1:-all}
STEPS=${STEPS:-2000}
SEED=${SEED:-42}
THREADS=${THREADS:-2}
[ -x "$TLI" ] || { echo "bench-mamba2: $TLI not found: run 'make build'" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Mamba-2 on daily data: a lookback of 64 bars (about three months), 1-bar target.
MAMBA_DAILY='{"lookback": 64, "chunk_size": 32, "d_model": 32, "layers": 2, "d_state": 16, "headdim": 16, "loss_positions": 16, "batch_size": 32, "dropout": 0.1, "weight_decay": 0.05}'

# The e2e AR(1) parity test's config (tests/tests/e2e/mamba2_plugin.rs: SMALL + lr 0.003).
MAMBA_SMALL='{"d_model": 16, "layers": 1, "d_state": 8, "headdim": 8, "chunk_size": 8, "lookback": 32, "batch_size": 8, "learning_rate": 0.003, "loss_positions": 16}'

run() { # name, mamba2 config, steps, data args…
  local name=$1 config=$2 steps=$3; shift 3
  "$TLI" train local -p mamba2 -p template --steps "$steps" --seed "$SEED" --threads "$THREADS" \
    --config "mamba2=$config" "$@" -o json > "$work/$name.json"
  python3 - "$work/$name.json" "$name" <<'PYEOF'
import json, sys
runs, name = json.load(open(sys.argv[1])), sys.argv[2]
for r in runs:
    e = r.get("evaluation") or {}
    get = lambda k: f"{e[k]:.4f}" if k in e else "-"
    print(f"| {name} | {r['plugin']} | {r['status']} | {get('valid_skill')} | {get('valid_mse')} | "
          f"{get('valid_mse_zero_forecast')} | {get('test_skill')} | {get('test_mse')} | "
          f"{get('test_mse_zero_forecast')} | {r['seconds']:.0f} |")
PYEOF
}

if [ "$WHAT" = forecast ] || [ "$WHAT" = all ]; then
  echo "## forecasts: $STEPS steps, seed $SEED, $THREADS threads; mamba2 config $MAMBA_DAILY"
  echo "| data | plugin | status | valid skill | valid MSE | zero-forecast MSE | test skill | test MSE | zero-forecast MSE | s |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
  run "synthetic AR(1), 20000 rows" "$MAMBA_DAILY" "$STEPS" --rows 20000
  run "synthetic AR(1), 20000 rows, parity-test config, 600 steps" "$MAMBA_SMALL" 600 --rows 20000
  run "S&P 500 daily (ES proxy)" "$MAMBA_DAILY" "$STEPS" --data data/samples/es_proxy_sp500_1d.dbn.zst
  run "NASDAQ daily (NQ proxy)" "$MAMBA_DAILY" "$STEPS" --data data/samples/nq_proxy_nasdaq_1d.dbn.zst
  run "WTI daily (CL proxy)" "$MAMBA_DAILY" "$STEPS" --data data/samples/cl_proxy_wti_1d.dbn.zst
fi

memory_run() { # label, extra env…
  echo "### $1"
  shift
  env MAMBA_MEMORY_ROWS=60000 MAMBA_MEMORY_STEPS=2000 MAMBA_MEMORY_VERBOSE=1 "$@" \
    cargo test --release -p tli-e2e-tests --test e2e -- mamba2_plugin::sees_a_signal --nocapture \
    2>&1 | grep -E "^step|planted|test result" || true
}

if [ "$WHAT" = memory ] || [ "$WHAT" = all ]; then
  echo "## long memory (signal 200+ bars back): 60000 rows, 2000 steps"
  memory_run "the CI config (lookback 512)"
  # The control: a lookback shorter than the delay cannot see the pulse (the test's assertion fails).
  memory_run "control: lookback 128, loss_positions 64" MAMBA_MEMORY_CONFIG='{"d_model": 32, "layers": 2,
    "d_state": 16, "headdim": 4, "chunk_size": 64, "lookback": 128, "batch_size": 32,
    "learning_rate": 0.01, "warmup_steps": 50, "weight_decay": 0.0, "loss_positions": 64}'
fi

if [ "$WHAT" = speed ] || [ "$WHAT" = all ]; then
  echo "## throughput against lookback"
  THREADS=$THREADS cargo bench -p tli-plugin-mamba2 --bench lookback_scaling 2>/dev/null
  echo "## memory model against the measured heap"
  cargo bench -p tli-plugin-mamba2 --bench activation_memory 2>/dev/null
fi
