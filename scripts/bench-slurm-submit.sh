#!/usr/bin/env bash
# How fast one host submits a many-task job to Slurm (one sbatch per task), on the real
# single-node Slurm of scripts/slurm-cluster.sh (needs root). A job of TASKS one-asset
# template tasks is started on a `tli host serve --executor slurm`; the script polls
# `tli train status` until every task has its Slurm job id, prints one
# `slurm submit:` line (tasks, seconds, tasks per second, and how long `tli train list`
# took to answer while the host submitted), then stops the job and the cluster.
#
#   scripts/bench-slurm-submit.sh            # 200 tasks
#   TASKS=1000 scripts/bench-slurm-submit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TASKS="${TASKS:-200}"
cargo build --release --workspace >/dev/null
TLI="$PWD/target/release/tli"
WORK=$(mktemp -d)
CLUSTER="$WORK/slurm"
HOST_PID=""
cleanup() {
    [ -n "$HOST_PID" ] && kill "$HOST_PID" 2>/dev/null && wait "$HOST_PID" 2>/dev/null || true
    scripts/slurm-cluster.sh stop "$CLUSTER" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
export SLURM_CONF
SLURM_CONF=$(scripts/slurm-cluster.sh start "$CLUSTER" --gpus 0 --cpus 4 --clean 2>/dev/null)
PLUGINS="$WORK/plugins"
mkdir -p "$PLUGINS"
cp target/release/libtli_plugin_template.so "$PLUGINS/"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$TLI" host serve --listen "127.0.0.1:$PORT" --state-dir "$WORK/state" --plugin-dir "$PLUGINS" \
    --executor slurm --slurm-cpus-per-task 1 --slurm-max-jobs "$((TASKS + 10))" \
    >"$WORK/host.log" 2>&1 &
HOST_PID=$!
EP="http://127.0.0.1:$PORT"
for _ in $(seq 100); do "$TLI" --endpoint "$EP" train list >/dev/null 2>&1 && break; sleep 0.2; done
python3 - "$TASKS" >"$WORK/job.json" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"name": "many", "models": [{"plugin": "template", "steps": 20}],
                  "assets": [{"synthetic": {"rows": 300, "seed": i + 1}} for i in range(n)]}))
PY
START=$(date +%s.%N)
JOB=$("$TLI" --endpoint "$EP" train start --spec "$WORK/job.json" -o json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
SLOWEST=0
while :; do
    T0=$(date +%s.%N)
    "$TLI" --endpoint "$EP" train list >/dev/null
    T1=$(date +%s.%N)
    SLOWEST=$(python3 -c "print(max($SLOWEST, $T1 - $T0))")
    N=$("$TLI" --endpoint "$EP" train status "$JOB" -o json | python3 -c '
import json, sys
tasks = json.load(sys.stdin)["progress"]["tasks"]
print(sum(1 for t in tasks if (t.get("slurm") or {}).get("job_id")))')
    [ "$N" -ge "$TASKS" ] && break
    sleep 0.2
done
END=$(date +%s.%N)
python3 -c "
n, s = $TASKS, $END - $START
print(f'slurm submit: {n} tasks submitted in {s:.1f} s ({n / s:.1f} tasks/s, '
      f'{1000 * s / n:.0f} ms each, status polling included); slowest train list meanwhile '
      f'{$SLOWEST:.2f} s')"
"$TLI" --endpoint "$EP" train stop "$JOB" >/dev/null
