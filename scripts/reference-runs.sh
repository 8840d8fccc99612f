#!/usr/bin/env bash
# Seeded reference runs, for checking that a change leaves training bit-identical:
#   scripts/reference-runs.sh BIN_DIR OUT_DIR   (BIN_DIR: tli + plugins, e.g. target/release)
# Run it on the old and the new build, then compare the *.json and checkpoints.txt of the two
# OUT_DIRs with cmp (times are stripped; the state/ dirs differ in timestamps anyway;
# checkpoints.txt holds every checkpoint checksum and final metric of a 6-task job).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$1; OUT=$2; mkdir -p "$OUT"
T="$BIN/tli"
export TLI_LOG=warn
strip_times() { python3 -c '
import json,sys
d=json.load(sys.stdin)
def clean(x):
    if isinstance(x,dict):
        return {k:clean(v) for k,v in x.items() if not any(s in k for s in ("second","elapsed","time","_ms","per_s","rate"))}
    if isinstance(x,list): return [clean(v) for v in x]
    return x
print(json.dumps(clean(d),sort_keys=True,indent=1))'; }
$T train local -p template --steps 400 --seed 42 -o json | strip_times > "$OUT/template.json"
$T train local -p dqn --config '{"env":"cartpole"}' --steps 3000 --seed 1 --threads 1 -o json | strip_times > "$OUT/dqn_cartpole.json"
$T train local -p dqn --steps 3000 --seed 2 --threads 1 -o json | strip_times > "$OUT/dqn_trading.json"
$T train local -p ppo --steps 6000 --seed 1 --threads 1 -o json | strip_times > "$OUT/ppo_trading.json"
$T train local -p ppo --config '{"env":"cartpole"}' --steps 6000 --seed 3 --threads 1 -o json | strip_times > "$OUT/ppo_cartpole.json"
$T train local -p template --data $REPO/data/samples/es_proxy_sp500_1d.dbn.zst --steps 300 --seed 5 -o json | strip_times > "$OUT/template_es.json"
# Through the orchestrator: final checkpoint checksums of a job.
rm -rf "$OUT/state"
cat > "$OUT/job.json" <<JOB
{"name":"ref","models":[{"plugin":"template","steps":500},{"plugin":"dqn","steps":2000},{"plugin":"ppo","steps":3000}],
 "assets":[{"synthetic":{"rows":5000,"seed":3}},{"data":"$REPO/data/samples/nq_proxy_nasdaq_1d.dbn.zst"}],
 "seed":11,"checkpoint":{"every_steps":700,"keep":2}}
JOB
$T host run --state-dir "$OUT/state" --submit "$OUT/job.json" --strategy sequential --cores 1 >/dev/null
python3 - "$OUT/state/tli.sqlite3" > "$OUT/checkpoints.txt" <<'PY'
import sqlite3,sys
c=sqlite3.connect(sys.argv[1])
for r in c.execute("select t.plugin,t.asset,t.state,c.step,c.checksum from checkpoints c join tasks t on t.id=c.task_id order by t.id,c.step"): print(*r)
for r in c.execute("select t.plugin,m.name,m.step,m.value from latest_metrics m join tasks t on t.id=m.task_id order by t.id,m.name"): print(*r)
PY
echo ok
