#!/usr/bin/env bash
# Eight INT8 TFTs of the seed's size in a 4 GiB budget (docs/benchmarks.md): a
# host (`tli host run --strategy parallel:8`: memory alone decides) given one job of 8 TFTs on daily ES (the
# last 900 bars), first with precision "int8", step_memory "staged" and
# optimizer_state $STATE, then the same job in fp32. Prints, for each, the
# reservation timeline from the host's store (when each task was admitted and
# released, what it reserved, what it then measured), the most tasks that ran
# at once, and the host's peak RSS.
#
# Size: hidden 1024 is 178.3 M parameters on these inputs (FP32 weights
# ≈ 713 MB, the seed's size). With 8-bit moments a parameter costs 3.06 bytes
# and eight such tasks cannot fit 4 GiB (8 × 178 M × 3.06 B = 4.37 GB); with
# "factored" state (4-bit first moment, factored second moment) it costs
# 1.56 bytes (STATE=8bit HIDDEN=840 reproduces the earlier 120 M-parameter run).
#
# Needs `make build` first; about 6 GiB of RAM, 24 GB of disk for the FP32
# checkpoints (removed at the end) and ~30 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
# The last 900 daily ES bars (the bundled proxy through `tli data convert`):
# the same 6 observed + 7 known inputs, and evaluation over ~110 validation
# and ~110 test windows instead of ~700 each (a staged evaluation
# dequantizes every block once per batch of 4 windows).
DATA=${DATA:-}
HIDDEN=${HIDDEN:-1024}
STATE=${STATE:-factored}
STEPS=${STEPS:-3}
BUDGET=${BUDGET:-4GiB}
MARGIN=${MARGIN:-0.1}
LOOKBACK=${LOOKBACK:-16}
BATCH=${BATCH:-4}
TASKS=${TASKS:-8}
# As many at once as fit in memory: `auto` would also cap running tasks at one per CPU core.
STRATEGY=${STRATEGY:-parallel:$TASKS}
PRECISIONS=${PRECISIONS:-int8 fp32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Killed or interrupted: still clean up (a kill skips the EXIT trap otherwise).
trap 'exit 130' INT TERM
if [ -z "$DATA" ]; then
  "$TLI" data convert data/samples/es_proxy_sp500_1d.dbn.zst "$work/full.csv" >/dev/null
  mkdir -p "$work/data"
  { head -1 "$work/full.csv"; tail -900 "$work/full.csv"; } >"$work/data/ES.csv"
  DATA=$work/data/ES.csv
fi

for precision in $PRECISIONS; do
  case $precision in
    int8) extra="\"precision\": \"int8\", \"step_memory\": \"staged\", \"optimizer_state\": \"$STATE\"" ;;
    fp32) extra='"precision": "fp32"' ;;
    *) echo "unknown precision $precision" >&2; exit 2 ;;
  esac
  config="{\"hidden_size\": $HIDDEN, \"attention_heads\": 4, \"lookback\": $LOOKBACK, \"batch_size\": $BATCH, \"eval_batch_size\": $BATCH, $extra}"
  python3 - "$work/$precision.json" "$config" "$DATA" "$STEPS" "$TASKS" <<'PY'
import json, sys
path, config, data, steps, tasks = sys.argv[1:]
spec = {
    "name": f"eight-tft-{json.loads(config)['precision']}",
    "models": [{"plugin": "tft", "steps": int(steps), "config": json.loads(config)}
               for _ in range(int(tasks))],
    "assets": [{"data": data}],
    "seed": 1,
    "device": "cpu",
    "checkpoint": {"every_seconds": 0, "keep": 1},
    "slice_steps": 1,
}
json.dump(spec, open(path, "w"), indent=1)
PY
  echo "== $TASKS × TFT hidden $HIDDEN, $precision$([ "$precision" = int8 ] && echo " ($STATE state)"), budget $BUDGET, margin $MARGIN, $STEPS steps each"
  timer=()
  if [ -x /usr/bin/time ]; then timer=(/usr/bin/time -f "%M" -o "$work/$precision.maxrss"); fi
  started=$(date +%s)
  # The host as it runs by default (heap trims after slices); TLI_MMAP_THRESHOLD=1048576
  # instead fixes glibc's mmap threshold (docs/orchestrator.md).
  TLI_MMAP_THRESHOLD=${TLI_MMAP_THRESHOLD:-0} "${timer[@]}" "$TLI" host run --state-dir "$work/$precision" --data-root "$(dirname "$DATA")" --memory-budget "$BUDGET" --strategy "$STRATEGY" \
    --margin "$MARGIN" --submit "$work/$precision.json" >"$work/$precision.log" 2>&1 || {
    tail -30 "$work/$precision.log"; exit 1; }
  echo "wall time: $(( $(date +%s) - started )) s"
  rm -rf "$work/$precision/checkpoints"
  python3 - "$work/$precision/tli.sqlite3" "$work/$precision.maxrss" "$BUDGET" <<'PY'
import os, sqlite3, sys
db, maxrss_path, budget = sys.argv[1:]
c = sqlite3.connect(db)
mib = lambda b: f"{b / 2**20:,.1f}"
rows = c.execute(
    "SELECT r.task_id, r.bytes, r.reserved_ms, r.released_ms, t.estimate_bytes, t.measured_bytes, "
    "t.state, t.steps_done FROM reservations r JOIN tasks t ON t.id = r.task_id ORDER BY r.id").fetchall()
t0 = min(r[2] for r in rows)
print("| task | admitted (s) | released (s) | estimate (MiB) | reserved (MiB) | measured (MiB) | measured ≤ reserved | state |")
print("|---:|---:|---:|---:|---:|---:|:---:|---|")
for task, reserved, start, end, estimate, measured, state, steps in rows:
    ok = "yes" if measured is not None and measured <= reserved else "NO"
    end_s = f"{(end - t0) / 1000:.1f}" if end else "–"
    print(f"| {task} | {(start - t0) / 1000:.1f} | {end_s} | {mib(estimate)} | {mib(reserved)} | "
          f"{mib(measured) if measured else '–'} | {ok} | {state} ({steps} steps) |")
events = sorted([(r[2], 1, r[1]) for r in rows] + [(r[3], -1, -r[1]) for r in rows if r[3]],
                key=lambda e: (e[0], e[1]))
running = most = 0
reserved = peak = 0
for _, d, b in events:
    running += d
    reserved += b
    most = max(most, running)
    peak = max(peak, reserved)
print(f"most tasks running at once: {most}; most reserved at once: {mib(peak)} MiB of {budget}")
if os.path.exists(maxrss_path):
    kib = int(open(maxrss_path).read().split()[-1])
    print(f"host peak RSS: {mib(kib * 1024)} MiB (libtorch, plugins and data included: ≈ 0.4 GiB with no task)")
PY
done
