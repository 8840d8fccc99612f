#!/usr/bin/env bash
# Time to a solved CartPole, through the real host (docs/benchmarks.md, "RL speed"): for each agent
# and seed, one `tli host run` process with one CartPole task (strategy
# sequential, one core: `taskset -c 0`, `--cores 1`, OMP_NUM_THREADS=1, no
# TensorBoard files, slices of 1000 steps) trains the whole budget. From the
# store's metric history (every slice's metrics carry the time they were
# recorded) it prints, per run:
#
#   - steps and seconds to 475: the first slice whose 20-episode mean return
#     (`episodic_return_mean20`) is ≥ 475, and the time from process start to
#     when that slice was recorded;
#   - env steps/s over the whole run (budget / seconds from process start to
#     the last slice);
#   - the final 20-episode mean and the greedy evaluation (`eval_return_mean`);
#   - the process's whole wall time;
#
# then the medians over seeds. Markdown on stdout; each run's state directory
# (store, log) stays under $OUT_DIR (default target/bench-rl-speed).
#
# Environment: AGENTS ("ppo dqn"), SEEDS ("1 2 3"), PPO_STEPS (150000),
# DQN_STEPS (100000), PPO_CONFIG / DQN_CONFIG (JSON overlaid on
# {"env":"cartpole"}), SKIP_BUILD=1 to use target/release as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

AGENTS=${AGENTS:-"ppo dqn"}
SEEDS=${SEEDS:-"1 2 3"}
PPO_STEPS=${PPO_STEPS:-150000}
DQN_STEPS=${DQN_STEPS:-100000}
PPO_CONFIG=${PPO_CONFIG:-"{}"}
DQN_CONFIG=${DQN_CONFIG:-"{}"}
OUT_DIR=${OUT_DIR:-target/bench-rl-speed}
SCRIPT=bench-rl-speed.sh
# shellcheck source=scripts/rl-bench-setup.sh
source scripts/rl-bench-setup.sh

export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PIN=()
if command -v taskset >/dev/null; then PIN=(taskset -c 0); fi

steps_of() { if [[ $1 == ppo ]]; then echo "$PPO_STEPS"; else echo "$DQN_STEPS"; fi; }
config_of() {
  local user
  if [[ $1 == ppo ]]; then user=$PPO_CONFIG; else user=$DQN_CONFIG; fi
  python3 -c 'import json,sys; c={"env":"cartpole"}; c.update(json.loads(sys.argv[1])); print(json.dumps(c))' "$user"
}

# run AGENT SEED: one host process, one task; writes RUN_DIR/{job.json,start_ms,end_ms,log}.
run() {
  local agent=$1 seed=$2 dir="$OUT_DIR/$1-seed$2"
  mkdir -p "$dir"
  cat >"$dir/job.json" <<EOF
{"name": "rl-speed-$agent-$seed",
 "models": [{"plugin": "$agent", "steps": $(steps_of "$agent"), "config": $(config_of "$agent")}],
 "assets": [{"synthetic": {"rows": 1000}}],
 "seed": $seed, "slice_steps": 1000,
 "checkpoint": {"every_steps": 0, "every_seconds": 0}}
EOF
  date +%s%3N >"$dir/start_ms"
  "${PIN[@]}" "$TLI" host run --plugin-dir "$PLUGIN_DIR" --state-dir "$dir/state" \
    --strategy sequential --cores 1 --no-tensorboard --submit "$dir/job.json" \
    >"$dir/log" 2>&1 || { echo "run $agent seed $seed failed; log: $dir/log" >&2; tail -5 "$dir/log" >&2; exit 1; }
  date +%s%3N >"$dir/end_ms"
}

for agent in $AGENTS; do
  for seed in $SEEDS; do
    echo "training $agent seed $seed ($(steps_of "$agent") steps)" >&2
    run "$agent" "$seed"
  done
done

python3 - "$OUT_DIR" "$AGENTS" "$SEEDS" "$PPO_STEPS" "$DQN_STEPS" "$PPO_CONFIG" "$DQN_CONFIG" <<'EOF'
import os, sqlite3, statistics, sys
out, agents, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
budget = {"ppo": int(sys.argv[4]), "dqn": int(sys.argv[5])}
user_config = {"ppo": sys.argv[6], "dqn": sys.argv[7]}
print(f"Commands: `AGENTS=\"{' '.join(agents)}\" SEEDS=\"{' '.join(seeds)}\" "
      f"PPO_STEPS={budget['ppo']} DQN_STEPS={budget['dqn']} scripts/bench-rl-speed.sh`"
      + "".join(f", {a.upper()}_CONFIG='{user_config[a]}'" for a in agents if user_config[a] != "{}"))
print()
print("| agent | seed | steps to 475 | seconds to 475 | env steps/s | final mean of 20 | greedy eval | wall s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
summary = {}
for agent in agents:
    rows = []
    for seed in seeds:
        d = os.path.join(out, f"{agent}-seed{seed}")
        start = int(open(os.path.join(d, "start_ms")).read())
        end = int(open(os.path.join(d, "end_ms")).read())
        db = sqlite3.connect(f"file:{os.path.join(d, 'state', 'tli.sqlite3')}?mode=ro", uri=True)
        curve = db.execute(
            "SELECT step, value, at_ms FROM metrics WHERE name = 'episodic_return_mean20' ORDER BY step"
        ).fetchall()
        solved = next(((s, at) for s, v, at in curve if v is not None and v >= 475), None)
        final = curve[-1][1] if curve else float("nan")
        last_at = max(at for _, _, at in curve) if curve else end
        ev = db.execute(
            "SELECT value FROM metrics WHERE name = 'eval_return_mean' ORDER BY step DESC LIMIT 1"
        ).fetchone()
        rate = budget[agent] / ((last_at - start) / 1e3)
        steps_to = solved[0] if solved else None
        secs_to = (solved[1] - start) / 1e3 if solved else None
        rows.append((steps_to, secs_to, rate, final))
        fmt = lambda x, f: "not reached" if x is None else f.format(x)
        print(f"| {agent.upper()} | {seed} | {fmt(steps_to, '{:,}')} | {fmt(secs_to, '{:.1f}')} | "
              f"{rate:,.0f} | {final:.1f} | {ev[0] if ev else float('nan'):.1f} | {(end - start) / 1e3:.1f} |")
    summary[agent] = rows
print()
for agent, rows in summary.items():
    reached = [r for r in rows if r[0] is not None]
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    print(f"- {agent.upper()}: median steps to 475 {med([r[0] for r in reached]):,.0f}, "
          f"median seconds to 475 {med([r[1] for r in reached]):.1f} "
          f"({len(reached)} of {len(rows)} seeds reached 475), median env steps/s "
          f"{med([r[2] for r in rows]):,.0f}, final means {', '.join(f'{r[3]:.1f}' for r in rows)}")
EOF
