#!/usr/bin/env bash
# The scancel storm of docs/scale-out.md: the same end-to-end test as CI's
# (a_scancel_storm_redoes_no_step_and_ends_as_the_local_run in
# tests/tests/e2e/slurm_executor.rs), larger. On a real single-node Slurm
# (scripts/slurm-cluster.sh; needs root), a 6-task job (2 template models x
# 3 assets) runs as Slurm jobs while running ones are scancelled CANCELS
# times over SECONDS seconds; then the same job runs locally and the final
# checkpoints are compared. Prints one `scancel storm:` line of figures.
#
#   scripts/scancel-storm.sh                       # 15 cancels in 60 s, 6 tasks
#   CANCELS=30 SECONDS_=60 STEPS=200000 scripts/scancel-storm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
TLI_SCANCEL_STORM_CANCELS="${CANCELS:-15}" \
TLI_SCANCEL_STORM_SECONDS="${SECONDS_:-60}" \
TLI_SCANCEL_STORM_ASSETS=3 \
TLI_SCANCEL_STORM_STEPS="${STEPS:-200000}" \
  cargo test --release -p tli-e2e-tests --test e2e a_scancel_storm -- --nocapture 2>&1 \
  | grep -E '^scancel storm:|panicked|^test result'
