#!/usr/bin/env bash
# Side-by-side speed runs of tli against reference implementations, on the same libtorch
# (the bootstrap's .venv PyTorch) and the same threads, in alternating processes:
#   mamba2  tli's Mamba-2 forecaster (bench vs_reference) against a plain-PyTorch Mamba-2
#           with the paper's minimal chunked SSD (scripts/reference/mamba2_ssd.py)
#   tft     tli's TFT training step (bench step, FP32; INT8 beside it) against
#           pytorch-forecasting's TemporalFusionTransformer in a manual AdamW loop
#           (scripts/reference/tft_forecasting.py), at each of HIDDENS (default 64,256);
#           pytorch-forecasting is installed into target/reference-venv on first use (PyPI),
#           which reuses the bootstrap's PyTorch rather than installing another
# Prints each run's JSON line, then a table of medians over the rounds and the speed-up
# (reference time / tli time; above 1 means tli is faster).
# Usage: scripts/bench-vs-reference.sh mamba2|tft [rounds]   (default 4 rounds)
# Environment passed to both sides: LOOKBACKS, BARS, REPEATS, THREADS, HIDDENS (see each side's
# header).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-mamba2}
ROUNDS=${2:-4}
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "bench-vs-reference: $PY not found: run 'make build' (the bootstrap installs it)" >&2; exit 2; }
export THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
bench_binary() { # package, bench name: the built bench executable
  cargo bench -p "$1" --bench "$2" --no-run --message-format=json 2>/dev/null \
    | "$PY" -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$2"
}
case "$WHAT" in
  mamba2)
    bench=$(bench_binary tli-plugin-mamba2 vs_reference)
    [ -n "$bench" ] || { echo "bench-vs-reference: the tli bench did not build" >&2; exit 1; }
    tli_run() { "$bench"; }
    ref_run() { "$PY" scripts/reference/mamba2_ssd.py; }
    ;;
  tft)
    bench=$(bench_binary tli-plugin-tft step)
    [ -n "$bench" ] || { echo "bench-vs-reference: the tli bench did not build" >&2; exit 1; }
    ref_venv=target/reference-venv
    if [ ! -x "$ref_venv/bin/python" ] || ! "$ref_venv/bin/python" -c 'import pytorch_forecasting' 2>/dev/null; then
      echo "installing pytorch-forecasting 1.8.0 into $ref_venv (once)" >&2
      "$PY" -m venv "$ref_venv"
      # The bootstrap's site-packages (PyTorch) seen from the new venv, so pip keeps that torch.
      site=$("$ref_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/tli-venv.pth"
      "$ref_venv/bin/pip" install -q pytorch-forecasting==1.8.0
    fi
    HIDDENS=${HIDDENS:-64,256}
    tli_run() {
      for h in ${HIDDENS//,/ }; do
        TLI_BENCH_HIDDEN=$h TLI_BENCH_THREADS=$THREADS "$bench" | grep '^{'
      done
    }
    ref_run() {
      for h in ${HIDDENS//,/ }; do HIDDEN=$h "$ref_venv/bin/python" scripts/reference/tft_forecasting.py; done
    }
    ;;
  *) echo "bench-vs-reference: unknown comparison '$WHAT' (have: mamba2, tft)" >&2; exit 2 ;;
esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "$WHAT: $ROUNDS alternating rounds, $THREADS thread(s), $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD)"
for round in $(seq "$ROUNDS"); do
  # Alternate which side goes first, so neither always runs on a warmer machine.
  if (( round % 2 )); then order=(tli ref); else order=(ref tli); fi
  for side in "${order[@]}"; do
    if [ "$side" = tli ]; then tli_run; else ref_run; fi | tee -a "$out"
  done
done
"$PY" - "$out" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ref_rows = [r for r in rows if r["impl"] == "reference"]
shape = [k for k in ref_rows[0] if k not in ("impl", "parameters") and not k.endswith("_ms")]
metrics = [k for k in ref_rows[0] if k.endswith("_ms")]
keys = sorted({tuple(r[k] for k in shape) for r in rows})
print()
print("| " + " | ".join(shape) + " | " + " | ".join(f"{m[:-3]} tli ms | {m[:-3]} reference ms | speed-up" for m in metrics) + " |")
print("|" + "---:|" * len(shape) + "---:|---:|---:|" * len(metrics))
for key in keys:
    cells = []
    for m in metrics:
        get = lambda impl: [r[m] for r in rows if r["impl"] == impl and tuple(r[k] for k in shape) == key]
        tli, ref = get("tli"), get("reference")
        ratios = sorted(r / t for t, r in zip(tli, ref))
        cells.append(f"{statistics.median(tli):.1f} | {statistics.median(ref):.1f} | "
                     f"**{statistics.median(ratios):.2f}×** ({', '.join(f'{x:.2f}' for x in ratios)})")
    print("| " + " | ".join(str(k) for k in key) + " | " + " | ".join(cells) + " |")
extra = sorted({k for r in rows if r["impl"] == "tli" for k in r if k.endswith("_ms")} - set(metrics))
for m in extra:
    for key in keys:
        vals = [r[m] for r in rows if r["impl"] == "tli" and tuple(r[k] for k in shape) == key]
        print(f"tli {m} at {dict(zip(shape, key))}: median {statistics.median(vals):.1f} ({', '.join(f'{v:.1f}' for v in vals)})")
PYEOF
