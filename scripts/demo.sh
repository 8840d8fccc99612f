#!/usr/bin/env bash
# The main job (`make demo`): start a tli host on a fresh state directory (DEMO_DIR), submit every
# installed model plugin on the two bundled equity-index samples (S&P 500 and NASDAQ daily bars
# as ES/NQ proxies), follow it to completion with live progress, print the final status table,
# write the job's PNG plots, and shut the host down (SIGTERM: it checkpoints anything still
# running). While it runs the host serves its status page (the URL is printed); its
# TensorBoard logs, the plots and the job store stay in DEMO_DIR (default target/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
STEPS=${STEPS:-300}
RL_STEPS=${RL_STEPS:-5000}
state=${DEMO_DIR:-target/demo}
# Only what an earlier demo left there goes (DEMO_DIR may be a directory of the user's).
rm -rf "$state/host" "$state/plots" "$state/host.log" "$state/job.json" "$state/models"
mkdir -p "$state"
host_pid=""
cleanup() {
  if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
    kill -TERM "$host_pid" 2>/dev/null || true
    wait "$host_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

"$TLI" doctor
"$TLI" plugins list --local
"$TLI" data inspect data/samples/es_proxy_sp500_1d.dbn.zst

echo "demo: starting the host"
"$TLI" host serve --listen 127.0.0.1:0 --state-dir "$state/host" 2> "$state/host.log" &
host_pid=$!
address=""
for _ in $(seq 1 600); do
  address=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$state/host.log" | head -n 1)
  [ -n "$address" ] && break
  kill -0 "$host_pid" 2>/dev/null || { cat "$state/host.log" >&2; echo "demo: the host did not start" >&2; exit 1; }
  sleep 0.1
done
[ -n "$address" ] || { cat "$state/host.log" >&2; echo "demo: no ready line from the host" >&2; exit 1; }
export TLI_ENDPOINT="http://$address"
echo "demo: host listening on $TLI_ENDPOINT"
page=$(sed -n 's/.*status page at \(http[^ ]*\).*/\1/p' "$state/host.log" | head -n 1)
echo "demo: status page at $page (live while the job runs)"

"$TLI" plugins list
# Every installed plugin on both assets: forecasters for STEPS steps, the RL agents (whose first
# updates need a few thousand environment steps) for RL_STEPS.
"$TLI" plugins list -o json | STEPS="$STEPS" RL_STEPS="$RL_STEPS" python3 -c '
import json, os, sys
names = [p["name"] for p in json.load(sys.stdin)["plugins"]]
rl = {"dqn", "ppo"}
models = [{"plugin": n, "steps": int(os.environ["RL_STEPS" if n in rl else "STEPS"])} for n in names]
json.dump({"name": "demo", "models": models,
           "assets": [{"data": "data/samples/es_proxy_sp500_1d.dbn.zst"},
                      {"data": "data/samples/nq_proxy_nasdaq_1d.dbn.zst"}],
           "slice_steps": 50}, open(sys.argv[1], "w"))
print(len(models))' "$state/job.json" > "$state/models"
job=$("$TLI" train start --spec "$state/job.json" -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["job_id"])')
echo "demo: job $job submitted ($(cat "$state/models") model(s) x 2 assets)"
# Ends with the job's table (one table: `train status` would print it again).
"$TLI" train watch "$job"
"$TLI" resources
# The job's charts: an overview first, a chart per metric curve, the evaluation scores in
# scalars.csv, the memory timeline.
"$TLI" train plot "$job" --out "$state/plots"
echo "demo: shutting the host down"
kill -TERM "$host_pid"
wait "$host_pid"
host_pid=""
echo "demo: the in-process trainer on the same machine, for comparison (tli train local)"
"$TLI" train local --plugin template --steps 400 --seed 42
echo "demo: done"
echo "demo: plots (PNG):       $state/plots"
echo "demo: TensorBoard logs:  $state/host/tb   (.venv/bin/tensorboard --logdir $state/host/tb)"
echo "demo: the status page was at $page; the job store is $state/host (tli host status --state-dir $state/host)"
