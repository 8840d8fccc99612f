#!/usr/bin/env bash
# Hyperparameter sweeps (docs/benchmarks.md, "Sweeps"): 27 pooled TFT configs (learning rate ×
# hidden size × dropout, a 3×3×3 grid) on the planted seasonal set (3 assets × 3000 bars), ranked
# on the validation P50 q-risk, run twice through one host (`tli host serve`, strategy auto):
#   * under ASHA (grace period GRACE steps, reduction factor 3, MAX_STEPS steps), and
#   * "run all": every trial to MAX_STEPS.
# It prints both result tables (`tli sweep results`), the steps each trained, the best trial of
# each and how far ASHA's best final q-risk is from run-all's, the most trials that held a
# reservation at once (the arbiter packing them), and writes the metric-by-trial chart and the
# memory timeline of the ASHA sweep into OUT (default: a temporary directory). Then it runs the
# ASHA sweep once more with `tli host run`, killing the host (SIGKILL) KILLS times (default 5)
# while it trains, and checks that every trial stopped where it did uninterrupted and that the
# same trial is best with the same value.
#
# Needs `make build` first; about 13 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
PYTHON=${PYTHON:-python3}
MAX_STEPS=${MAX_STEPS:-540}
GRACE=${GRACE:-20}
work=$(mktemp -d)
OUT=${OUT:-$work/out}
mkdir -p "$OUT"
export TLI_PLUGIN_DIR=${TLI_PLUGIN_DIR:-target/release}
port=$((20000 + RANDOM % 20000))
endpoint="http://127.0.0.1:$port"
"$TLI" host serve --listen "127.0.0.1:$port" --no-tensorboard --state-dir "$work/state" \
  --strategy auto >"$work/host.log" 2>&1 &
host=$!
trap 'kill $host 2>/dev/null; wait $host 2>/dev/null; rm -rf "$work"' EXIT
# Killed or interrupted: still clean up (a kill skips the EXIT trap otherwise).
trap 'exit 130' INT TERM
for _ in $(seq 100); do
  "$TLI" --endpoint "$endpoint" train list >/dev/null 2>&1 && break
  sleep 0.2
done

spec() { # $1 = scheduler JSON
  cat <<JSON
{"name": "tft sweep", "seed": 1,
 "assets": [{"synthetic": {"rows": 3000, "seed": 21, "seasonal": {"asset": 0, "assets": 3}}},
            {"synthetic": {"rows": 3000, "seed": 21, "seasonal": {"asset": 1, "assets": 3}}},
            {"synthetic": {"rows": 3000, "seed": 21, "seasonal": {"asset": 2, "assets": 3}}}],
 "checkpoint": {"every_steps": 0, "every_seconds": 0, "keep": 1},
 "sweep": {"plugin": "tft", "pooled": true,
           "config": {"attention_heads": 4, "lookback": 40, "horizons": 3, "batch_size": 32,
                      "valid_every": $GRACE},
           "space": {"learning_rate": {"grid": [0.001, 0.003, 0.01]},
                     "hidden_size": {"grid": [8, 16, 32]},
                     "dropout": {"grid": [0.0, 0.1, 0.3]}},
           "metric": "valid_qrisk_p50", "scheduler": $1}}
JSON
}
spec "{\"asha\": {\"grace_period\": $GRACE, \"reduction_factor\": 3, \"max_steps\": $MAX_STEPS}}" >"$work/asha.json"
spec "{\"run_all\": {\"max_steps\": $MAX_STEPS}}" >"$work/all.json"

for name in asha all; do
  start=$(date +%s)
  "$TLI" --endpoint "$endpoint" sweep start --spec "$work/$name.json" --watch -o json \
    >"$OUT/$name.json" 2>"$work/$name.log" || { cat "$work/$name.log"; exit 1; }
  echo "$name: $(( $(date +%s) - start )) s wall"
done
for job in 1 2; do
  "$TLI" --endpoint "$endpoint" sweep results "$job"
done
"$TLI" --endpoint "$endpoint" sweep results 1 --plot "$OUT/sweep-asha.png" >/dev/null
"$TLI" --endpoint "$endpoint" train plot 1 --metric valid_qrisk_p50 --out "$OUT/asha-charts" >/dev/null

status=0
"$PYTHON" - "$OUT/asha.json" "$OUT/all.json" "$work/state/tli.sqlite3" <<'PY' || status=$?
import json, sqlite3, sys
asha, full = (json.load(open(p)) for p in sys.argv[1:3])
def best(r):
    t = r["trials"][r["best"][0]]
    return t["trial"], t["params"], t["final_value"]
(ta, pa, va), (tf, pf, vf) = best(asha), best(full)
gap = (va - vf) / vf
print(f"| scheduler | steps trained | of run-all | best trial | its params | final valid P50 q-risk |")
print(f"|---|---:|---:|---:|---|---:|")
for name, r, (t, p, v) in [("ASHA", asha, (ta, pa, va)), ("run all", full, (tf, pf, vf))]:
    print(f"| {name} | {r['steps_trained']:,} | {r['steps_trained'] / full['steps_trained']:.1%} "
          f"| {t} | {json.dumps(p)} | {v:.4f} |")
print(f"ASHA's best is {gap:+.2%} from run-all's best")
ranked = sorted(full["trials"], key=lambda t: t["final_value"])
print("run-all ranking of ASHA's best: " + str([t["trial"] for t in ranked].index(ta) + 1) + " of 27")
db = sqlite3.connect(f"file:{sys.argv[3]}?mode=ro", uri=True)
for job in (1, 2):
    spans = db.execute("""SELECT r.reserved_ms, COALESCE(r.released_ms, r.reserved_ms) FROM reservations r
                          JOIN tasks t ON t.id = r.task_id WHERE t.job_id = ?""", (job,)).fetchall()
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    print(f"job {job}: {len(spans)} reservations, at most {most} at once")
ok = gap <= 0.01 and asha["steps_trained"] <= 0.4 * full["steps_trained"]
print("PASS" if ok else "FAIL: ASHA must be within 1% of run-all's best in at most 40% of its steps")
sys.exit(0 if ok else 1)
PY
echo "charts: $OUT/sweep-asha.png, $OUT/asha-charts"

# The ASHA sweep again in a fresh state directory, its host killed (SIGKILL) KILLS times while it
# trains and started again each time: every trial must stop where it stopped uninterrupted, and
# the same trial must be best with the same final value.
KILLS=${KILLS:-5}
if [ "$KILLS" -gt 0 ]; then
  kstate="$work/killed"
  done_steps() {
    "$PYTHON" -c "import sqlite3,sys
try:
    db = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True)
    print(db.execute('SELECT COALESCE(SUM(steps_done), 0) FROM tasks').fetchone()[0])
except Exception:
    print(0)" "$kstate/tli.sqlite3"
  }
  for k in $(seq "$KILLS"); do
    submit=(); [ "$k" = 1 ] && submit=(--submit "$work/asha.json")
    "$TLI" host run --no-tensorboard --state-dir "$kstate" --strategy auto "${submit[@]}" \
      >>"$work/killed.log" 2>&1 &
    pid=$!
    before=$(done_steps)
    while [ "$(done_steps)" -lt $((before + 200)) ]; do
      kill -0 "$pid" 2>/dev/null || { echo "FAIL: the sweep ended before kill $k"; exit 1; }
      sleep 0.5
    done
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    echo "killed the host at $(done_steps) steps trained (kill $k)"
  done
  "$TLI" host run --no-tensorboard --state-dir "$kstate" --strategy auto >>"$work/killed.log" 2>&1
  "$PYTHON" - "$work/state/tli.sqlite3" "$kstate/tli.sqlite3" <<'PY'
import sqlite3, sys
def trials(path, job):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute("SELECT id, ordinal, steps_done, state FROM tasks WHERE job_id=? ORDER BY ordinal", (job,)).fetchall()
    out = []
    for tid, ordinal, steps, state in rows:
        v = db.execute("SELECT value FROM metrics WHERE task_id=? AND name='valid_qrisk_p50' AND step=? ORDER BY rowid LIMIT 1", (tid, steps)).fetchone()
        out.append((ordinal, steps, state, v[0] if v else None))
    kills = db.execute("SELECT COUNT(*) FROM transitions t JOIN tasks k ON k.id=t.task_id WHERE k.job_id=? AND t.to_state='interrupted'", (job,)).fetchone()[0]
    return out, kills
(calm, _), (killed, interruptions) = trials(sys.argv[1], 1), trials(sys.argv[2], 1)
same = [a[:3] == b[:3] for a, b in zip(calm, killed)]
print(f"killed run: {interruptions} task interruptions; {sum(same)} of {len(calm)} trials stopped at the same step")
best = lambda t: min((x for x in t if x[1] == max(y[1] for y in t)), key=lambda x: x[3])
print(f"best trial uninterrupted {best(calm)[0]} ({best(calm)[3]:.6f}), killed {best(killed)[0]} ({best(killed)[3]:.6f})")
ok = all(same) and best(calm)[:2] == best(killed)[:2]
print("PASS: the same decisions and best trial" if ok else "FAIL: the killed sweep decided otherwise")
sys.exit(0 if ok else 1)
PY
fi
exit $status
