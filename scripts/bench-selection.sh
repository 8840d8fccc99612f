#!/usr/bin/env bash
# Best checkpoints and early stopping on real runs (docs/benchmarks.md, "Best checkpoints and
# early stopping"). One `tli host run` trains
#   * DQN on CartPole (learning rate 0.003) for STEPS_DQN environment steps, validating (a
#     greedy evaluation over 20 episodes with a fixed seed) every 5,000, with `keep_best` on
#     valid_return_mean: the agent solves the task and falls back again and again, and at
#     110,000 steps it is in a trough; its best and final checkpoints are then evaluated
#     greedily afresh over 100 episodes (`cargo bench -p tli-plugin-dqn --bench
#     checkpoint_eval`);
#   * a TFT on the bundled real ES daily series for STEPS_TFT steps, validating every 25, with
#     `early_stopping` on valid_qrisk_p50 (patience 8): it overfits and stops early.
# It then prints, from the store, each task's validation curve, its best checkpoint (the
# task's model), where it stopped and why, and checks that the best checkpoint's value is the
# best on its curve and that the TFT stopped before its total. For the TFT it also predicts the
# validation rows with `tli predict --model 2` and `--model 2:last` to show which weights each
# names.
#
# Needs `make build` first; about 1 minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
PYTHON=${PYTHON:-python3}
STEPS_DQN=${STEPS_DQN:-110000}
STEPS_TFT=${STEPS_TFT:-3000}
# DQN's config beyond the environment and the validation (JSON members).
DQN_CONFIG=${DQN_CONFIG:-\"learning_rate\": 0.003}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Killed or interrupted: still clean up (a kill skips the EXIT trap otherwise).
trap 'exit 130' INT TERM
export TLI_PLUGIN_DIR=${TLI_PLUGIN_DIR:-target/release}
root=$(pwd)

cat >"$work/job.json" <<JSON
{"name": "selection bench",
 "models": [
   {"plugin": "dqn", "steps": $STEPS_DQN,
    "config": {"env": "cartpole", "valid_metrics_interval": 5000, "eval_episodes": 20${DQN_CONFIG:+, $DQN_CONFIG}},
    "keep_best": {"metric": "valid_return_mean", "k": 1}},
   {"plugin": "tft", "steps": $STEPS_TFT,
    "config": {"hidden_size": 16, "attention_heads": 2, "lookback": 20, "horizons": 1,
               "learning_rate": 0.003, "valid_every": 25},
    "early_stopping": {"metric": "valid_qrisk_p50", "patience": 8}}],
 "assets": [{"data": "$root/data/samples/es_proxy_sp500_1d.csv", "symbol": "ES"}],
 "checkpoint": {"every_steps": 0, "every_seconds": 60, "keep": 1}}
JSON
start=$(date +%s)
"$TLI" host run --no-tensorboard --state-dir "$work/state" --data-root "$root/data" \
  --submit "$work/job.json" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
echo "trained in $(( $(date +%s) - start )) s"

status=0
"$PYTHON" - "$work/state/tli.sqlite3" "$work/dqn-checkpoints" <<'PY' || status=$?
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
def series(task, name):
    return db.execute("SELECT step, value FROM metrics WHERE task_id=? AND name=? ORDER BY step, rowid",
                      (task, name)).fetchall()
failed = False
for task, plugin, metric, better in [(1, "dqn", "valid_return_mean", max), (2, "tft", "valid_qrisk_p50", min)]:
    state, done, total = db.execute("SELECT state, steps_done, total_steps FROM tasks WHERE id=?", (task,)).fetchone()
    curve = series(task, metric)
    reason = db.execute("SELECT reason FROM transitions WHERE task_id=? ORDER BY id DESC LIMIT 1", (task,)).fetchone()[0]
    best = db.execute("SELECT step, best_value FROM checkpoints WHERE task_id=? AND best_metric IS NOT NULL", (task,)).fetchall()
    # The evaluation at the end repeats the last step; the training-time curve is what selection saw.
    during = [(s, v) for s, v in curve][: len([1 for s, _ in curve]) - 1] if curve else []
    top = better(v for _, v in during) if during else None
    print(f"{plugin} curve: " + " ".join(f"{s}:{v:.4g}" for s, v in during))
    print(f"| {plugin} | {state} {done}/{total} | {len(during)} validations | best {best} | "
          f"best on curve {top} | last {during[-1] if during else None} | {reason} |")
    if not best or best[0][1] != top:
        print(f"FAIL: {plugin}: the best checkpoint is not the best on its curve"); failed = True
    if plugin == "tft" and done >= total:
        print("FAIL: the TFT did not stop early"); failed = True
with open(sys.argv[2], "w") as f:
    for kind, cond in [("best", "best_metric IS NOT NULL"), ("final", "best_metric IS NULL")]:
        row = db.execute(f"SELECT path FROM checkpoints WHERE task_id=1 AND {cond} ORDER BY step DESC LIMIT 1").fetchone()
        f.write(f"{kind} {row[0]}\n")
sys.exit(1 if failed else 0)
PY

# The DQN's best and final checkpoints, each evaluated greedily afresh over 100 episodes
# (another seed than the validations').
while read -r kind dir; do
  printf '%s checkpoint: ' "$kind"
  TLI_CHECKPOINT="$dir" TLI_EPISODES=100 cargo bench -q -p tli-plugin-dqn --bench checkpoint_eval 2>/dev/null
done <"$work/dqn-checkpoints"
exit $status
