#!/usr/bin/env bash
# Your own columns, measured (docs/benchmarks.md, "Your own columns"). For each of SEEDS,
# `tli data synth --planted-covariates` writes daily bars with two planted inputs:
#   * ofi   (observed past): the next bar's return loads 0.5σ on it;
#   * event (known future, categorical none / FOMC / CPI): an FOMC bar's return has mean +1.5σ,
#     a CPI bar's none.
# A TFT is trained on each file twice with `tli train local`: with the two columns
# (--feature-column ofi:observed_past, --feature-column event:known_future:categorical) and
# without them (the built-in features only), same config, steps and seed. The script prints
# the test split's P50 q-risk of both (lower is better; 1 = the zero forecast's), the
# variable-selection weights of the planted inputs (ofi's on the last past bar, where it acts;
# event's on the future bars) against the largest other data input's,
# and, for the model with the columns, its forecast on the test split's bars twice over:
# every event set to FOMC, and every event set to none. The difference of the mean P50
# one-bar forecast is the effect the model learned; the planted one is 1.5σ. The oracle's P50
# q-risk (the planted mean, σ·(0.5·ofi + 1.5·[FOMC]), on the same test bars) is the floor.
# Then the other families with ofi as an observed-past input and without it: the template
# MLP and Mamba-2 (test skill and correlation of the forecast with the return) and PPO on the
# trading environment (its window of feature rows includes ofi; validation Sharpe).
#
# Needs `make build` first; about 8 minutes on 2 cores (STEPS=600, 3 seeds).
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
PYTHON=${PYTHON:-.venv/bin/python}
SEEDS=${SEEDS:-1 2 3}
STEPS=${STEPS:-600}
BARS=${BARS:-3000}
CONFIG=${CONFIG:-'{"hidden_size": 16, "attention_heads": 2, "lookback": 20, "horizons": 1, "learning_rate": 0.003}'}
MAMBA2=${MAMBA2:-'{"d_model": 16, "layers": 1, "d_state": 8, "headdim": 8, "chunk_size": 8, "lookback": 32, "batch_size": 32, "horizons": 1}'}
PPO_STEPS=${PPO_STEPS:-100000}
export TLI_PLUGIN_DIR=${TLI_PLUGIN_DIR:-target/release}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Killed or interrupted: still clean up (a kill skips the EXIT trap otherwise).
trap 'exit 130' INT TERM
start=$(date +%s)
for seed in $SEEDS; do
  "$TLI" data synth --planted-covariates --symbol ES --bars "$BARS" --seed "$seed" \
    -O "$work/planted-$seed.csv" >/dev/null
  for run in with without; do
    columns=()
    if [ "$run" = with ]; then
      columns=(--feature-column ofi:observed_past
               --feature-column event:known_future:categorical)
    fi
    "$TLI" train local -p tft --data "ES=$work/planted-$seed.csv" "${columns[@]}" \
      --config "$CONFIG" --steps "$STEPS" --seed "$seed" --save "$work/model-$run-$seed" \
      -o json >"$work/$run-$seed.json" 2>"$work/$run-$seed.log" \
      || { cat "$work/$run-$seed.log"; exit 1; }
  done
  # The test split's bars, every event set one way and then the other.
  "$PYTHON" - "$work/planted-$seed.csv" "$work/model-with-$seed/model.json" "$work" "$seed" <<'PY'
import json, sys
import pandas as pd
bars, card, work, seed = sys.argv[1:]
frame = pd.read_csv(bars)
test = json.load(open(card))["assets"][0]["splits"]["test"]
times = pd.to_datetime(frame["ts_event"], utc=True).astype("int64")
first = int((times >= test[0]).to_numpy().argmax())
# Keep the look-back before the test split.
part = frame.iloc[max(first - 40, 0):].copy()
for level in ["FOMC", "none"]:
    part["event"] = level
    part.to_csv(f"{work}/events-{level}-{seed}.csv", index=False)
PY
  for level in FOMC none; do
    "$TLI" predict --model "$work/model-with-$seed" --data "ES=$work/events-$level-$seed.csv" \
      -o csv >"$work/forecast-$level-$seed.csv" 2>/dev/null
  done
  for plugin in template mamba2 ppo; do
    case $plugin in
      template) config='{}'; steps=300 ;;
      mamba2) config=$MAMBA2; steps=300 ;;
      ppo) config='{}'; steps=$PPO_STEPS ;;
    esac
    for run in with without; do
      columns=()
      [ "$run" = with ] && columns=(--feature-column ofi:observed_past)
      "$TLI" train local -p "$plugin" --data "ES=$work/planted-$seed.csv" "${columns[@]}" \
        --config "$config" --steps "$steps" --seed "$seed" -o json \
        >"$work/$plugin-$run-$seed.json" 2>"$work/$plugin-$run-$seed.log" \
        || { cat "$work/$plugin-$run-$seed.log"; exit 1; }
    done
  done
done
echo "trained and predicted in $(( $(date +%s) - start )) s ($STEPS steps, $BARS bars per seed)"
"$PYTHON" - "$work" $SEEDS <<'PY'
import json, sys
import pandas as pd
work, seeds = sys.argv[1], sys.argv[2:]
def metrics(run, seed):
    return json.load(open(f"{work}/{run}-{seed}.json"))[0]["evaluation"]
def oracle(seed):
    # The planted mean of each test bar's return, from what its row knows.
    frame = pd.read_csv(f"{work}/planted-{seed}.csv")
    card = json.load(open(f"{work}/model-with-{seed}/model.json"))
    lo, hi = card["assets"][0]["splits"]["test"]
    times = pd.to_datetime(frame["ts_event"], utc=True).astype("int64").to_numpy()
    close = frame["close"].to_numpy()
    import numpy as np
    ret = np.log(close[1:] / close[:-1])
    mean = 0.01 * (0.5 * frame["ofi"].to_numpy()[:-1] + 1.5 * (frame["event"].to_numpy()[1:] == "FOMC"))
    rows = (times[:-1] >= lo) & (times[:-1] <= hi)
    return np.abs(ret[rows] - mean[rows]).sum() / np.abs(ret[rows]).sum()
def largest_other(m, group, planted):
    # `position` (the bar's place in the window) is no input from the data: at the last past
    # bar it is the same in every window.
    others = {k: v for k, v in m.items() if k.startswith(f"test_vsn_{group}_") and k != planted
              and not k.endswith("_position")}
    name = max(others, key=others.get)
    return name.removeprefix(f"test_vsn_{group}_"), others[name]
print("| seed | P50 q-risk with the columns | without | oracle | weight of ofi (last past bar) | "
      "largest other input | future weight of event | largest other input | forecast FOMC − none (σ) |")
print("|---|---|---|---|---|---|---|---|---|")
rows = []
for seed in seeds:
    w, wo = metrics("with", seed), metrics("without", seed)
    ofi, event = w["test_vsn_last_ofi"], w["test_vsn_future_event"]
    past_other = largest_other(w, "last", "test_vsn_last_ofi")
    future_other = largest_other(w, "future", "test_vsn_future_event")
    fomc = pd.read_csv(f"{work}/forecast-FOMC-{seed}.csv")
    none = pd.read_csv(f"{work}/forecast-none-{seed}.csv")
    p50 = [c for c in fomc.columns if c.endswith(":p50")][0]
    effect = (fomc[p50] - none[p50]).mean() / 0.01
    floor = oracle(seed)
    rows.append((w["test_qrisk_p50"], wo["test_qrisk_p50"], effect, floor))
    print(f"| {seed} | {w['test_qrisk_p50']:.4f} | {wo['test_qrisk_p50']:.4f} | {floor:.4f} | {ofi:.3f} | "
          f"{past_other[0]} {past_other[1]:.3f} | {event:.3f} | {future_other[0]} {future_other[1]:.3f} | "
          f"{effect:+.2f} |")
n = len(rows)
print(f"| mean | {sum(r[0] for r in rows)/n:.4f} | {sum(r[1] for r in rows)/n:.4f} | "
      f"{sum(r[3] for r in rows)/n:.4f} | | | | | {sum(r[2] for r in rows)/n:+.2f} |")
print()
print("| seed | template skill with ofi / without | correlation with / without | "
      "Mamba-2 skill with / without | correlation with / without | PPO validation Sharpe with / without "
      "(buy and hold) |")
print("|---|---|---|---|---|---|")
def run(plugin, r, seed):
    return json.load(open(f"{work}/{plugin}-{r}-{seed}.json"))[0]
for seed in seeds:
    cells = []
    for plugin in ["template", "mamba2"]:
        a, b = run(plugin, "with", seed)["evaluation"], run(plugin, "without", seed)["evaluation"]
        cells.append(f"{a['test_skill']:+.3f} / {b['test_skill']:+.3f}")
        cells.append(f"{a['test_correlation']:+.3f} / {b['test_correlation']:+.3f}")
    a, b = run("ppo", "with", seed)["final_metrics"], run("ppo", "without", seed)["final_metrics"]
    cells.append(f"{a['valid_sharpe']:.2f} / {b['valid_sharpe']:.2f} ({a['valid_bh_sharpe']:.2f})")
    print(f"| {seed} | " + " | ".join(cells) + " |")
PY
