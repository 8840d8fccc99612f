#!/usr/bin/env bash
# Validates the PPO plugin through the real CLI (`tli train local`), one
# libtorch thread, and prints markdown tables:
#
#   1. CartPole-v1, seeds 1 2 3, 150 000 env steps each: mean return of the
#      last 20 training episodes at the end (the bar: >= 475), greedy
#      evaluation over 10 fresh episodes, wall time, env steps per second.
#   2. Trading on the synthetic AR(1) dataset (phi 0.3; `tli train local`
#      without --data builds it from --seed, so each seed is its own market):
#      test and validation Sharpe beside buy-and-hold.
#   3. Trading on the bundled real daily series (data/samples, index/spot
#      proxies for ES, NQ, CL): test and validation Sharpe beside buy-and-hold.
#
# Usage: scripts/validate-ppo.sh            (builds first; about 5 minutes on one core)
# Environment: PPO_CARTPOLE_STEPS (150000), PPO_TRADING_STEPS (200000),
#              PPO_SEEDS ("1 2 3"), PPO_NO_BUILD=1 to skip the build.
set -euo pipefail
cd "$(dirname "$0")/.."

CARTPOLE_STEPS=${PPO_CARTPOLE_STEPS:-150000}
TRADING_STEPS=${PPO_TRADING_STEPS:-200000}
SEEDS=${PPO_SEEDS:-"1 2 3"}

if [ -z "${PPO_NO_BUILD:-}" ]; then
  cargo build --release -p tli-plugin-ppo -p tli-host >&2
fi
command -v python3 >/dev/null || { echo "validate-ppo: python3 is needed to read the JSON" >&2; exit 1; }

DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cp target/release/libtli_plugin_ppo.so "$DIR/"
# `tli train local` does not set libtorch's thread count; one OpenMP thread = one core.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# run NAME ARGS... : one `tli train local` run, JSON report kept as $DIR/NAME.json
run() {
  local name=$1
  shift
  echo "validate-ppo: tli train local -p ppo $*" >&2
  if ! target/release/tli --plugin-dir "$DIR" train local -p ppo "$@" --output json \
      >"$DIR/$name.json" 2>"$DIR/$name.log"; then
    echo "validate-ppo: run $name failed:" >&2
    tail -20 "$DIR/$name.log" >&2
    exit 1
  fi
}

# field FILE EXPR : a value from the first report of a JSON file (Python expression on r)
report() {
  python3 - "$@" <<'PY'
import json, sys
mode, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))[0]
if r["status"] != "completed":
    sys.exit(f"{path}: {r['status']}: {r['error']}")
f, e = r["final_metrics"], r["evaluation"]
def g(d, k, fmt="{:.2f}"):
    return fmt.format(d[k]) if k in d else "-"
if mode == "cartpole":
    ok = "yes" if f.get("episodic_return_mean20", 0) >= 475 else "**no**"
    print(f"| {r['steps_done']} | {g(f, 'episodic_return_mean20', '{:.1f}')} | {ok} | "
          f"{g(e, 'eval_return_mean', '{:.1f}')} | {g(f, 'episodes', '{:.0f}')} | "
          f"{r['seconds']:.1f} | {r['steps_per_second']:.0f} |")
else:
    beats = "yes" if e.get("test_sharpe", 0) > e.get("test_bh_sharpe", 0) else "no"
    print(f"| {r['steps_done']} | {g(e, 'test_sharpe')} | {g(e, 'test_bh_sharpe')} | {beats} | "
          f"{g(e, 'test_max_drawdown', '{:.0f}')} | {g(e, 'test_bh_max_drawdown', '{:.0f}')} | "
          f"{g(e, 'test_avg_turnover', '{:.3f}')} | {g(e, 'valid_sharpe')} | {g(e, 'valid_bh_sharpe')} | "
          f"{r['seconds']:.1f} | {r['steps_per_second']:.0f} |")
PY
}

CARTPOLE_HEAD="| steps | mean return, last 20 episodes | >= 475 | greedy eval (10 episodes) | episodes | wall s | env steps/s |
|---|---|---|---|---|---|---|---|"
TRADING_HEAD="| steps | test Sharpe | buy-and-hold | beats B&H | test max DD | B&H max DD | test turnover/bar | valid Sharpe | valid B&H | wall s | env steps/s |
|---|---|---|---|---|---|---|---|---|---|---|---|"

cartpole_rows=""
for seed in $SEEDS; do
  run "cartpole-$seed" --config '{"env":"cartpole"}' --steps "$CARTPOLE_STEPS" --seed "$seed" --slice 1000
  cartpole_rows+="| $seed $(report cartpole "$DIR/cartpole-$seed.json")"$'\n'
done

synthetic_rows=""
for seed in $SEEDS; do
  run "synthetic-$seed" --steps "$TRADING_STEPS" --seed "$seed" --slice 10000
  synthetic_rows+="| $seed $(report trading "$DIR/synthetic-$seed.json")"$'\n'
done

real_rows=""
for file in es_proxy_sp500_1d nq_proxy_nasdaq_1d cl_proxy_wti_1d; do
  run "$file" --data "data/samples/$file.csv" --steps "$TRADING_STEPS" --seed 1 --slice 10000
  real_rows+="| $file $(report trading "$DIR/$file.json")"$'\n'
done

echo "## PPO validation ($(date -u +%Y-%m-%dT%H:%MZ), OMP_NUM_THREADS=1)"
echo
echo "### CartPole-v1, default config (\`--config '{\"env\":\"cartpole\"}' --steps $CARTPOLE_STEPS --slice 1000\`)"
echo
echo "| seed $CARTPOLE_HEAD"
printf '%s' "$cartpole_rows"
echo
echo "### Synthetic AR(1) market (phi 0.3, 20 000 rows, dataset seeded by --seed), default trading config"
echo
echo "| seed $TRADING_HEAD"
printf '%s' "$synthetic_rows"
echo
echo "### Bundled real daily data (index/spot proxies), default trading config, seed 1"
echo
echo "| data $TRADING_HEAD"
printf '%s' "$real_rows"
