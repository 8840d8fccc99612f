#!/usr/bin/env bash
# GPU check for the orchestrator: run on a CUDA machine whose python has torch 2.11.0.
# Not part of CI. It
#   1. shows `tli doctor` (libtorch, CUDA devices, allocator),
#   2. plans a job of every installed plugin on cuda:0 (the template plugin with three
#      memory-hungry configs) over two synthetic assets, to get each task's estimate,
#   3. runs it under a budget that fits only about two tasks at once (strategy auto),
#   4. prints estimated vs measured memory per task and the schedule (who ran when),
#      and the largest number of tasks that ran at the same time; the job includes a
#      pooled template task (plugin API 1.1) across both assets,
#   5. runs the kit's integration tests (if their binary was built: `cargo test --release
#      -p tli-plugin-kit --no-run`), whose counter-RNG tests compare CUDA with the CPU,
#   6. runs the Mamba-2 tests (binary from `cargo test --release -p tli-plugin-mamba2 --no-run`):
#      chunked SSD vs the recurrence vs the streaming step on the GPU; the job of step 2 holds
#      two Mamba-2 models (default, and lookback 2048 with quantiles) whose estimate vs
#      measured memory is in the table.
#   7. runs the TFT's device tests (binary from `cargo test --release -p tli-plugin-tft --no-run`):
#      the 8-bit, 4-bit and factored Adam tensor-op updates on CUDA against the host kernel,
#      INT8 training on the GPU (8-bit and factored state); the job of step 2 holds a TFT in
#      FP32 and one in INT8 (estimate vs measured).
#   8. measures a seed-size TFT (hidden 1024, ≈178 M parameters) in FP32, INT8 and INT8 with
#      staged steps (`step_memory: "staged"`: the tensor-op update per block on the GPU) with
#      8-bit, 4-bit and factored optimizer state
#      with `tli profile memory` (the CUDA allocator's peak beside the tensor count), and one training
#      step of each with the TFT step bench (binary from `cargo bench -p tli-plugin-tft --bench
#      step --no-run`): INT8 / FP32 step time on the GPU.
#   9. measures trained models' predictors on the GPU (binary from `cargo bench -p tli-host
#      --bench predict_latency --no-run`): batch-1 latency, batch-256 throughput, a streamed
#      bar and predictor memory of every bundled model, and the TFT's INT8/FP32 inference
#      latency at hidden 64, 160 and 1024 (docs/benchmarks.md, "Inference").
#  10. measures `Predict` through a real `tli host serve --device cuda:0` (binary from `cargo
#      bench -p tli-host --bench predict_server --no-run`): batch-1 latency, batch-256
#      throughput and 32 concurrent callers, template and TFT FP32/INT8 (docs/benchmarks.md,
#      "Predict through the server").
# Usage: scripts/gpu-check.sh            (after `make build`, or with TLI=/path/to/tli)
# Binaries built on another machine find this machine's torch through LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda:0}     # DEVICE=cpu SMALL=1 checks the script itself on a machine without a GPU
SMALL=${SMALL:-0}
export DEVICE SMALL
[ -x "$TLI" ] || { echo "gpu-check: $TLI not found: run 'make build' or set TLI" >&2; exit 2; }
TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH="$TORCH_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$PY" -c 'import torch; print("gpu-check: torch", torch.__version__, "| CUDA", torch.version.cuda, "| devices", torch.cuda.device_count())'
"$TLI" doctor

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TLI" plugins list --local -o json > "$work/plugins.json"
"$PY" - "$work" <<'PYEOF'
import json, os, sys
work = sys.argv[1]
small = os.environ["SMALL"] == "1"
plugins = [p["name"] for p in json.load(open(f"{work}/plugins.json"))["plugins"]]
models = []
for name in plugins:
    if name == "template":
        sizes = ([64, 64], [32, 32, 32], [128]) if small else ([4096, 4096], [2048, 2048, 2048], [8192])
        for hidden in sizes:
            models.append({"plugin": name, "steps": 40 if small else 200,
                           "config": {"hidden_sizes": hidden, "batch_size": 256 if small else 8192}})
        models.append({"plugin": name, "steps": 40 if small else 200, "pooled": True,
                       "config": {"hidden_sizes": [256, 256]}})
    elif name == "mamba2":
        models.append({"plugin": name, "steps": 40 if small else 200})
        models.append({"plugin": name, "steps": 20 if small else 200,
                       "config": {"lookback": 256 if small else 2048, "chunk_size": 128,
                                  "batch_size": 8 if small else 32, "horizons": 5,
                                  "quantiles": [0.1, 0.5, 0.9]}})
    elif name == "tft":
        for precision in ("fp32", "int8"):
            models.append({"plugin": name, "steps": 20 if small else 200,
                           "config": {"precision": precision,
                                      "hidden_size": 32 if small else 512,
                                      "lookback": 32 if small else 128,
                                      "batch_size": 16 if small else 64}})
    else:
        models.append({"plugin": name, "steps": 40 if small else 200})
rows = 2000 if small else 200000
job = {"name": "gpu-check", "models": models,
       "assets": [{"synthetic": {"rows": rows, "seed": 1}}, {"synthetic": {"rows": rows, "seed": 2}}],
       "device": os.environ["DEVICE"], "checkpoint": {"every_steps": 100, "keep": 1}, "slice_steps": 20}
json.dump(job, open(f"{work}/job.json", "w"))
tasks = sum(1 if m.get("pooled") else 2 for m in models)
print("gpu-check: plugins", ", ".join(plugins), "->", tasks, "tasks")
PYEOF

"$TLI" host run --state-dir "$work/plan" --device "$DEVICE" --memory-budget 1TiB --plan \
  --submit "$work/job.json" -o json > "$work/plan.json"
BUDGET=$("$PY" -c '
import json, sys, statistics
est = sorted(t["estimate_bytes"] for j in json.load(open(sys.argv[1])) for t in j["tasks"])
# About two median tasks at once, and never less than the biggest task alone (with the margin).
print(max(int(2.2 * statistics.median(est) * 1.1) + max(est) // 10, int(max(est) * 1.1) + 1))' "$work/plan.json")
echo "gpu-check: budget $BUDGET bytes (about two tasks at once)"

start=$(date +%s)
"$TLI" host run --state-dir "$work/run" --device "$DEVICE" --memory-budget "$BUDGET" --strategy auto \
  --submit "$work/job.json" -o json > "$work/result.json" || echo "gpu-check: some tasks failed (see table)"
echo "gpu-check: run took $(( $(date +%s) - start )) s"

"$PY" - "$work/result.json" "$BUDGET" "$work/run/tli.sqlite3" <<'PYEOF'
import json, sqlite3, sys
jobs, budget = json.load(open(sys.argv[1])), int(sys.argv[2])
tasks = [t for j in jobs for t in j["tasks"]]
# When each task held device memory: its reservations in the store (read-only).
held = {}
db = sqlite3.connect(f"file:{sys.argv[3]}?mode=ro", uri=True)
for task, start, end in db.execute("SELECT task_id, reserved_ms, released_ms FROM reservations ORDER BY id"):
    first = held.get(task, (start, end))[0]
    held[task] = (first, end)
for t in tasks:
    t["started_ms"], t["finished_ms"] = held.get(t["task_id"], (None, None))
t0 = min((t["started_ms"] for t in tasks if t["started_ms"]), default=0)
gib = lambda b: f"{b / 2**30:8.3f} GiB" if b is not None else "       -    "
print(f"{'task':>4} {'plugin':10} {'state':10} {'estimate':>12} {'measured':>12} {'meas/est':>8} {'start s':>8} {'end s':>8}")
for t in tasks:
    est, meas = t["estimate_bytes"], t["measured_bytes"]
    ratio = f"{meas / est:8.2f}" if meas and est else "       -"
    s = (t["started_ms"] - t0) / 1e3 if t["started_ms"] else float("nan")
    e = (t["finished_ms"] - t0) / 1e3 if t["finished_ms"] else float("nan")
    print(f"{t['task_id']:>4} {t['plugin']:10} {t['state']:10} {gib(est)} {gib(meas)} {ratio} {s:8.1f} {e:8.1f}")
    if t.get("error"):
        print("      error:", t["error"])
events = sorted([(t["started_ms"], 1) for t in tasks if t["started_ms"]] + [(t["finished_ms"], -1) for t in tasks if t["finished_ms"]])
running = peak = 0
for _, d in events:
    running += d
    peak = max(peak, running)
print(f"budget {budget / 2**30:.3f} GiB; at most {peak} task(s) ran at the same time")
PYEOF
"$TLI" doctor | grep -i "cuda memory" || true

kit_tests=$(ls -t target/release/deps/kit-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
if [ -n "$kit_tests" ]; then
  echo "gpu-check: kit tests ($kit_tests) with CUDA visible"
  "$kit_tests" --test-threads 1 counter_rng nn_blocks flat_adamw windows
else
  echo "gpu-check: kit test binary not built (cargo test --release -p tli-plugin-kit --no-run); skipped"
fi

mamba_tests=$(ls -t target/release/deps/mamba2-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
if [ -n "$mamba_tests" ]; then
  echo "gpu-check: Mamba-2 tests ($mamba_tests) with CUDA visible"
  "$mamba_tests" --test-threads 1 --nocapture chunked_recurrent_and_streaming_agree_on_the_available_device
else
  echo "gpu-check: Mamba-2 test binary not built (cargo test --release -p tli-plugin-mamba2 --no-run); skipped"
fi

tft_tests=$(ls -t target/release/deps/tft-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
if [ -n "$tft_tests" ]; then
  echo "gpu-check: TFT tests ($tft_tests) with CUDA visible"
  "$tft_tests" --test-threads 1 --nocapture device::
else
  echo "gpu-check: TFT test binary not built (cargo test --release -p tli-plugin-tft --no-run); skipped"
fi

hidden=$([ "$SMALL" = 1 ] && echo 64 || echo 1024)
base="\"hidden_size\": $hidden, \"attention_heads\": 4, \"lookback\": 64, \"batch_size\": 64, \"eval_batch_size\": 64"
echo "gpu-check: tli profile memory, TFT hidden $hidden, FP32 vs INT8 vs INT8 staged (8-bit, 4-bit, factored state) on $DEVICE"
"$TLI" profile memory -p tft --device "$DEVICE" --data data/samples/es_proxy_sp500_1d.dbn.zst \
  --steps 3 --config "{$base, \"precision\": \"fp32\"}" --label fp32 \
  --config "{$base, \"precision\": \"int8\"}" --label int8 \
  --config "{$base, \"precision\": \"int8\", \"step_memory\": \"staged\"}" --label int8-staged \
  --config "{$base, \"precision\": \"int8\", \"step_memory\": \"staged\", \"optimizer_state\": \"4bit\"}" --label int8-staged-4bit \
  --config "{$base, \"precision\": \"int8\", \"step_memory\": \"staged\", \"optimizer_state\": \"factored\"}" --label int8-staged-factored \
  || echo "gpu-check: profile failed"
step_bench=$(ls -t target/release/deps/step-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
if [ -n "$step_bench" ]; then
  for hidden in $([ "$SMALL" = 1 ] && echo 32 || echo "256 1024"); do
    TLI_BENCH_DEVICE="$DEVICE" TLI_BENCH_HIDDEN=$hidden "$step_bench" --bench || echo "gpu-check: step bench failed"
  done
else
  echo "gpu-check: TFT step bench not built (cargo bench -p tli-plugin-tft --bench step --no-run); skipped"
fi
predict_bench=$(ls -t target/release/deps/predict_latency-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
if [ -n "$predict_bench" ]; then
  echo "gpu-check: predictors on $DEVICE (train briefly, save, predict)"
  TLI_BENCH_DEVICE="$DEVICE" TLI_BENCH_ITERS=$([ "$SMALL" = 1 ] && echo 5 || echo 100) \
    TLI_BENCH_CASES=$([ "$SMALL" = 1 ] && echo "template,h64" || echo "") \
    "$predict_bench" --bench || echo "gpu-check: predict bench failed"
else
  echo "gpu-check: predict bench not built (cargo bench -p tli-host --bench predict_latency --no-run); skipped"
fi
server_bench=$(ls -t target/release/deps/predict_server-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
if [ -n "$server_bench" ]; then
  echo "gpu-check: Predict through a host on $DEVICE"
  TLI_BENCH_DEVICE="$DEVICE" TLI_BENCH_ITERS=$([ "$SMALL" = 1 ] && echo 10 || echo 100) \
    "$server_bench" --bench || echo "gpu-check: server predict bench failed"
else
  echo "gpu-check: server predict bench not built (cargo bench -p tli-host --bench predict_server --no-run); skipped"
fi
