#!/usr/bin/env bash
# Side-by-side speed runs of tli against reference implementations, on the same libtorch
# (the bootstrap's .venv PyTorch) and the same threads, in alternating processes:
#   mamba2  tli's Mamba-2 forecaster (bench vs_reference) against a plain-PyTorch Mamba-2
#           with the paper's minimal chunked SSD (scripts/reference/mamba2_ssd.py)
# Prints each run's JSON line, then a table of medians over the rounds and the speed-up
# (reference time / tli time; above 1 means tli is faster).
# Usage: scripts/bench-vs-reference.sh mamba2 [rounds]   (default 4 rounds)
# Environment passed to both sides: LOOKBACKS, BARS, REPEATS, THREADS (see each side's header).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-mamba2}
ROUNDS=${2:-4}
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "bench-vs-reference: $PY not found: run 'make build' (the bootstrap installs it)" >&2; exit 2; }
export THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
case "$WHAT" in
  mamba2)
    bench=$(cargo bench -p tli-plugin-mamba2 --bench vs_reference --no-run --message-format=json 2>/dev/null \
      | "$PY" -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "vs_reference" and m.get("executable"):
        print(m["executable"])')
    tli_cmd=("$bench")
    ref_cmd=("$PY" scripts/reference/mamba2_ssd.py)
    ;;
  *) echo "bench-vs-reference: unknown comparison '$WHAT' (have: mamba2)" >&2; exit 2 ;;
esac
[ -n "${tli_cmd[0]}" ] || { echo "bench-vs-reference: the tli bench did not build" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "$WHAT: $ROUNDS alternating rounds, $THREADS thread(s), $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD)"
for round in $(seq "$ROUNDS"); do
  # Alternate which side goes first, so neither always runs on a warmer machine.
  if (( round % 2 )); then order=(tli ref); else order=(ref tli); fi
  for side in "${order[@]}"; do
    if [ "$side" = tli ]; then "${tli_cmd[@]}"; else "${ref_cmd[@]}"; fi | tee -a "$out"
  done
done
"$PY" - "$out" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = sorted({(r["lookback"], r["batch"]) for r in rows})
metrics = [k for k in rows[0] if k.endswith("_ms")]
print()
print("| lookback | batch | " + " | ".join(f"{m[:-3]} tli ms | {m[:-3]} reference ms | speed-up" for m in metrics) + " |")
print("|---:|---:|" + "---:|---:|---:|" * len(metrics))
for lookback, batch in keys:
    cells = []
    for m in metrics:
        get = lambda impl: [r[m] for r in rows if r["impl"] == impl and r["lookback"] == lookback]
        tli, ref = get("tli"), get("reference")
        ratios = sorted(r / t for t, r in zip(tli, ref))
        cells.append(f"{statistics.median(tli):.1f} | {statistics.median(ref):.1f} | "
                     f"**{statistics.median(ratios):.2f}×** ({', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"| {lookback} | {batch} | " + " | ".join(cells) + " |")
PYEOF
