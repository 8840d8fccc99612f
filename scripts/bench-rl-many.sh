#!/usr/bin/env bash
# Many RL agents on one box (docs/benchmarks.md, "Many agents per box"): one job of 8 CartPole tasks
# (PPO and DQN, 4 seeds each) through the real host (`tli host run`, no
# TensorBoard files, 1000-step slices), once per admission strategy, on every
# core of this machine; first each agent alone (one task, same budget) for the
# baseline. From the store it prints, per strategy: the makespan (first start
# to last completion), the job's total env steps/s (all tasks' steps over the
# makespan), that total against one task alone doing the same work (the
# job's steps over the time its tasks take one after another at their agents'
# alone rates; also against the plain mean of the two rates, which overstates
# a mixed job's one-task throughput since DQN's slower tasks take most of the
# time), and each agent's mean per-task slowdown (its steps/s alone over its
# steps/s in the job, each task timed from start to completion).
#
# Environment: STRATEGIES ("sequential parallel:2 auto"), PPO_STEPS (30000),
# DQN_STEPS (20000), SEEDS ("1 2 3 4"), EXTRA_ENV (e.g. "OMP_WAIT_POLICY=passive",
# set for the host process), SKIP_BUILD=1, OUT_DIR (target/bench-rl-many).
set -euo pipefail
cd "$(dirname "$0")/.."

STRATEGIES=${STRATEGIES:-"sequential parallel:2 auto"}
PPO_STEPS=${PPO_STEPS:-30000}
DQN_STEPS=${DQN_STEPS:-20000}
SEEDS=${SEEDS:-"1 2 3 4"}
EXTRA_ENV=${EXTRA_ENV:-}
OUT_DIR=${OUT_DIR:-target/bench-rl-many}
SCRIPT=bench-rl-many.sh
# shellcheck source=scripts/rl-bench-setup.sh
source scripts/rl-bench-setup.sh

# job NAME MODELS_JSON : a job spec of MODELS_JSON on one (ignored) synthetic asset.
job() {
  cat >"$OUT_DIR/$1.json" <<EOF
{"name": "$1", "models": $2, "assets": [{"synthetic": {"rows": 1000}}],
 "slice_steps": 1000, "checkpoint": {"every_steps": 0, "every_seconds": 0}}
EOF
}
models=()
for seed in $SEEDS; do
  models+=("{\"plugin\": \"ppo\", \"steps\": $PPO_STEPS, \"config\": {\"env\": \"cartpole\"}}")
  models+=("{\"plugin\": \"dqn\", \"steps\": $DQN_STEPS, \"config\": {\"env\": \"cartpole\"}}")
done
all=$(IFS=,; echo "[${models[*]}]")
job alone-ppo "[{\"plugin\": \"ppo\", \"steps\": $PPO_STEPS, \"config\": {\"env\": \"cartpole\"}}]"
job alone-dqn "[{\"plugin\": \"dqn\", \"steps\": $DQN_STEPS, \"config\": {\"env\": \"cartpole\"}}]"
job many "$all"

# run NAME JOB STRATEGY
run() {
  echo "running $1 ($3)" >&2
  env $EXTRA_ENV "$TLI" host run --plugin-dir "$PLUGIN_DIR" --state-dir "$OUT_DIR/$1" \
    --strategy "$3" --no-tensorboard --submit "$OUT_DIR/$2.json" >"$OUT_DIR/$1.log" 2>&1 \
    || { echo "$1 failed; log: $OUT_DIR/$1.log" >&2; tail -5 "$OUT_DIR/$1.log" >&2; exit 1; }
}
run alone-ppo alone-ppo sequential
run alone-dqn alone-dqn sequential
names=()
for s in $STRATEGIES; do
  name="many-${s//:/-}"
  run "$name" many "$s"
  names+=("$name:$s")
done

python3 - "$OUT_DIR" "$EXTRA_ENV" "${names[@]}" <<'EOF'
import os, sqlite3, statistics, sys
out, extra, runs = sys.argv[1], sys.argv[2], sys.argv[3:]

def tasks(name):
    db = sqlite3.connect(f"file:{os.path.join(out, name, 'tli.sqlite3')}?mode=ro", uri=True)
    rows = []
    for tid, plugin, steps in db.execute("SELECT id, plugin, steps_done FROM tasks"):
        times = dict(db.execute(
            "SELECT to_state, MAX(at_ms) FROM transitions WHERE task_id = ? GROUP BY to_state", (tid,)))
        start = db.execute(
            "SELECT MIN(at_ms) FROM transitions WHERE task_id = ? AND to_state = 'running'", (tid,)).fetchone()[0]
        rows.append((plugin, steps, start, times["completed"]))
    return rows

alone = {}
for agent in ("ppo", "dqn"):
    (plugin, steps, start, end), = tasks(f"alone-{agent}")
    alone[agent] = steps / ((end - start) / 1e3)
mean_rate = statistics.mean(alone.values())
print(f"Command: `{'EXTRA_ENV=' + repr(extra) + ' ' if extra else ''}scripts/bench-rl-many.sh`; "
      f"alone: PPO {alone['ppo']:,.0f} env steps/s, DQN {alone['dqn']:,.0f} (mean {mean_rate:,.0f})")
print()
print("| strategy | tasks | makespan s | total env steps/s | × one task (same work) | × mean rate | PPO slowdown | DQN slowdown |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for entry in runs:
    name, strategy = entry.split(":", 1)
    rows = tasks(name)
    span = (max(r[3] for r in rows) - min(r[2] for r in rows)) / 1e3
    steps = sum(r[1] for r in rows)
    total = steps / span
    # One task at a time doing the same work: each task's steps at its agent's rate alone.
    one_task = steps / sum(s / alone[p] for p, s, _, _ in rows)
    slow = {a: statistics.mean(alone[a] / (s / ((e - b) / 1e3)) for p, s, b, e in rows if p == a)
            for a in ("ppo", "dqn")}
    print(f"| {strategy} | {len(rows)} | {span:.1f} | {total:,.0f} | {total / one_task:.2f} | "
          f"{total / mean_rate:.2f} | {slow['ppo']:.2f} | {slow['dqn']:.2f} |")
EOF
