#!/usr/bin/env bash
# Validates the DQN plugin through the real CLI (`tli train local`), on one core:
#
#   1. CartPole-v1, seeds 1 2 3, 100k env steps each: the mean return of the
#      last 20 training episodes at the end (the bar: ≥ 475), the greedy
#      evaluation return, wall time and env steps per second.
#   2. The synthetic AR(1) market (φ = 0.3, `tli train local` without --data),
#      seeds 1 2 3: out-of-sample (test split) Sharpe beside buy-and-hold.
#   3. The bundled real daily data (data/samples, index/spot proxies of ES, NQ,
#      CL): test Sharpe beside buy-and-hold, reported as it comes.
#
# Prints markdown tables (with the exact commands) on stdout; raw JSON goes to
# $OUT_DIR (default target/validate-dqn).
#
# Environment: SEEDS ("1 2 3"), CARTPOLE_STEPS (100000), TRADING_STEPS (50000),
# SKIP_BUILD=1 to use the binaries already in target/release.
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-"1 2 3"}
CARTPOLE_STEPS=${CARTPOLE_STEPS:-100000}
TRADING_STEPS=${TRADING_STEPS:-50000}
OUT_DIR=${OUT_DIR:-target/validate-dqn}
command -v python3 >/dev/null || { echo "validate-dqn.sh needs python3 to read the JSON" >&2; exit 1; }

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release -p tli-host -p tli-plugin-dqn >&2
fi
TLI=target/release/tli
PLUGIN_DIR=$(mktemp -d)
trap 'rm -rf "$PLUGIN_DIR"' EXIT
cp target/release/libtli_plugin_dqn.so "$PLUGIN_DIR/"
mkdir -p "$OUT_DIR"

# One core: one libtorch/OpenMP thread (tli train local does not set a thread
# count, so libtorch would otherwise use every core), pinned when taskset exists.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PIN=()
if command -v taskset >/dev/null; then PIN=(taskset -c 0); fi
# Newer CLIs take the thread count directly.
THREADS=()
if "$TLI" train local --help 2>/dev/null | grep -q -- '--threads'; then THREADS=(--threads 1); fi

# run NAME ARGS... : trains, stores NAME.json and NAME.wall (seconds, whole process).
run() {
  local name=$1; shift
  local start end
  start=$(date +%s.%N)
  "${PIN[@]}" "$TLI" --plugin-dir "$PLUGIN_DIR" train local -p dqn "${THREADS[@]}" --slice 1000 --output json "$@" \
    >"$OUT_DIR/$name.json" 2>"$OUT_DIR/$name.log"
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.1f}')" >"$OUT_DIR/$name.wall"
}

# field NAME EXPR : evaluates EXPR over r (the run's report) and w (wall seconds).
field() {
  python3 - "$OUT_DIR/$1.json" "$OUT_DIR/$1.wall" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))[0]
w = float(open(sys.argv[2]).read())
if r["status"] != "completed":
    print(f"FAILED: {r.get('error')}")
else:
    print(eval(sys.argv[3]))
EOF
}

echo "## DQN validation ($(date -u +%Y-%m-%d), $(uname -m), one core: OMP_NUM_THREADS=1 ${PIN[*]} ${THREADS[*]})"
echo
echo "### CartPole-v1, $CARTPOLE_STEPS env steps"
echo
echo "Command: \`${PIN[*]} $TLI --plugin-dir DIR train local -p dqn ${THREADS[*]} --config '{\"env\":\"cartpole\"}' --steps $CARTPOLE_STEPS --seed S --slice 1000 --output json\`"
echo
echo "| seed | env steps | episodes | mean return, last 20 training episodes | greedy eval (10 episodes) | ≥ 475 | wall (s) | env steps/s |"
echo "|---|---|---|---|---|---|---|---|"
pass=0
for s in $SEEDS; do
  run "cartpole-$s" --config '{"env":"cartpole"}' --steps "$CARTPOLE_STEPS" --seed "$s"
  row=$(field "cartpole-$s" '"| {} | {:.0f} | {:.0f} | {:.1f} | {:.1f} | {} | {:.1f} | {:.0f} |".format(
      '"$s"', r["final_metrics"]["env_steps"], r["final_metrics"]["episodes"],
      r["final_metrics"]["episodic_return_mean20"], r["evaluation"]["eval_return_mean"],
      "yes" if r["final_metrics"]["episodic_return_mean20"] >= 475 else "no", w, r["steps_per_second"])')
  echo "$row"
  [[ "$row" == *"| yes |"* ]] && pass=$((pass + 1))
done
echo
echo "Seeds reaching the bar: $pass of $(wc -w <<<"$SEEDS")."
echo

echo "### Synthetic AR(1) market (φ = 0.3, 20000 rows, seeded with the run's seed), $TRADING_STEPS env steps"
echo
echo "Command: \`${PIN[*]} $TLI --plugin-dir DIR train local -p dqn ${THREADS[*]} --steps $TRADING_STEPS --seed S --slice 1000 --output json\`"
echo
trading_header() {
  echo "| $1 | test Sharpe | buy-and-hold test Sharpe | test max drawdown | buy-and-hold max drawdown | valid Sharpe | buy-and-hold valid Sharpe | test turnover/bar | wall (s) | env steps/s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
}
trading_row() {
  field "$1" '"| '"$2"' | {:.2f} | {:.2f} | {:.0f} | {:.0f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.0f} |".format(
      r["evaluation"]["test_sharpe"], r["evaluation"]["test_bh_sharpe"],
      r["evaluation"]["test_max_drawdown"], r["evaluation"]["test_bh_max_drawdown"],
      r["evaluation"]["valid_sharpe"], r["evaluation"]["valid_bh_sharpe"],
      r["evaluation"]["test_avg_turnover"], w, r["steps_per_second"])'
}
trading_header seed
for s in $SEEDS; do
  run "synthetic-$s" --steps "$TRADING_STEPS" --seed "$s"
  trading_row "synthetic-$s" "$s"
done
echo

echo "### Bundled real daily data (index/spot proxies, see data/samples/README.md), $TRADING_STEPS env steps"
echo
echo "Command: \`${PIN[*]} $TLI --plugin-dir DIR train local -p dqn ${THREADS[*]} --data data/samples/FILE --steps $TRADING_STEPS --seed S --slice 1000 --output json\`"
echo
trading_header "data, seed"
for file in es_proxy_sp500_1d nq_proxy_nasdaq_1d cl_proxy_wti_1d; do
  for s in $SEEDS; do
    run "$file-$s" --data "data/samples/$file.csv" --steps "$TRADING_STEPS" --seed "$s"
    trading_row "$file-$s" "$file, $s"
  done
done
echo
echo "Raw reports: $OUT_DIR/*.json"
