#!/usr/bin/env bash
# The long kill storm of docs/reliability.md: the same end-to-end
# test as CI's (tests/tests/e2e/kill_storm.rs), with more kills. A real
# `tli host serve` running DQN, PPO and template tasks on two assets is
# SIGKILLed KILLS times at random moments (every other kill aimed at a
# checkpoint write in progress) and restarted each time, while jobs are
# submitted. Prints one `kill storm:` line of figures per seed.
#
#   scripts/kill-storm.sh            # 60 kills, seed 1
#   KILLS=100 SEEDS="1 2 3" scripts/kill-storm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS="${KILLS:-60}"
SEEDS="${SEEDS:-1}"
cargo build --release --workspace
for seed in $SEEDS; do
  TLI_KILL_STORM_KILLS="$KILLS" TLI_KILL_STORM_SEED="$seed" \
    cargo test --release -p tli-e2e-tests --test e2e kill_storm:: -- --nocapture 2>&1 \
    | grep -E '^kill storm:|panicked|^test result' | sed "s/^/seed $seed: /"
done
