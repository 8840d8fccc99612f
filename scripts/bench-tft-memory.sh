#!/usr/bin/env bash
# The measured FP32-vs-INT8 memory of a TFT of the seed's size class
# (docs/benchmarks.md, "TFT and INT8 training"): `tli profile memory` on the bundled daily ES proxy with
# hidden 1024 (≈178 M parameters on its 6 observed + 7 known inputs),
# lookback 32, batch 8 (and evaluation batch 8: the profile runs no
# evaluation, so the estimate's evaluation term must not be the larger one),
# two steps each, in child processes; prints the table
# (FP32, INT8 with one-pass steps, INT8 with staged steps, and staged with 4-bit
# and with factored optimizer state)
# and the JSON, writes the chart to docs/images/tft-memory-seed-size.png.
# Needs `make build` first; about 4 GiB of free RAM and ~12 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
DATA=${DATA:-data/samples/es_proxy_sp500_1d.dbn.zst}
HIDDEN=${HIDDEN:-1024}
STEPS=${STEPS:-2}
CHART=${CHART:-docs/images/tft-memory-seed-size.png}
base="\"hidden_size\": $HIDDEN, \"attention_heads\": 4, \"lookback\": 32, \"batch_size\": 8, \"eval_batch_size\": 8"
out=$(mktemp)
"$TLI" profile memory -p tft --data "$DATA" --steps "$STEPS" \
  --config "{$base, \"precision\": \"fp32\"}" --label fp32 \
  --config "{$base, \"precision\": \"int8\"}" --label int8 \
  --config "{$base, \"precision\": \"int8\", \"step_memory\": \"staged\"}" --label int8-staged \
  --config "{$base, \"precision\": \"int8\", \"step_memory\": \"staged\", \"optimizer_state\": \"4bit\"}" --label int8-staged-4bit \
  --config "{$base, \"precision\": \"int8\", \"step_memory\": \"staged\", \"optimizer_state\": \"factored\"}" --label int8-staged-factored \
  --chart "$CHART" -o json >"$out"
python3 - "$out" <<'PY'
import json, sys
profiles = json.load(open(sys.argv[1]))
fp32 = profiles[0]
mib = lambda b: f"{b / 2**20:,.1f} MiB"
rows = [
    ("parameters", lambda p: p["tensors"]["parameters"]),
    ("gradients (transient)", lambda p: p["tensors"]["gradients"]),
    ("optimizer state", lambda p: p["tensors"]["optimizer_state"]),
    ("parameters + optimizer", lambda p: p["tensors"]["parameters"] + p["tensors"]["optimizer_state"]),
    ("activations", lambda p: p["tensors"]["activations"]),
    ("tensor total", lambda p: p["tensors"]["total"]),
    ("plugin estimate (total)", lambda p: p["estimate"]["total"]),
    ("peak RSS over baseline", lambda p: p["process"]["peak_over_baseline"]),
    ("  of it while building", lambda p: p["process"]["build_peak_over_baseline"]),
]
print(f"parameters: {fp32['tensors']['parameters'] / 4 / 1e6:.1f} M (fp32 bytes / 4)")
header = "| | " + " | ".join(
    p["label"] if i == 0 else f"{p['label']} | / fp32" for i, p in enumerate(profiles)) + " |"
print(header)
print("|---|" + "---:|" * (2 * len(profiles) - 1))
for name, f in rows:
    cells = [mib(f(fp32))]
    for p in profiles[1:]:
        cells += [mib(f(p)), f"{f(p) / f(fp32):.3f}×"]
    print(f"| {name} | " + " | ".join(cells) + " |")
for p in profiles:
    fractions = ", ".join(f"{n} {v:.1%}" for n, v in p.get("fractions", []))
    print(f"| {p['label']}: peak RSS / tensor total {p['process']['ratio_to_tensors']:.3f}, "
          f"seconds per step {p['seconds_per_step']:.1f}{', ' + fractions if fractions else ''} |")
PY
rm -f "$out"
