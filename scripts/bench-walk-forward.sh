#!/usr/bin/env bash
# Walk-forward backtests of a TFT (docs/benchmarks.md, "Walk-forward backtests"): one job
# (`tli host run`) trains a small TFT over 4 walk-forward folds of 250 out-of-sample daily
# bars on each of
#   * planted: 3000 synthetic daily bars whose returns carry a calendar effect (Monday and
#     Tuesday drift up 6 bp, Wednesday to Friday down 6 bp, noise 30 bp; seeded), and
#   * the bundled real daily series (ES, NQ, CL proxies),
# then `tli walk-forward` prints each series' out-of-sample record at the default costs
# (2.0 + 0.5 ticks per contract) and at ten times them. On the planted series the sign of the
# P50 must earn a net Sharpe above 1 and above buy-and-hold, and lose at tenfold costs (the
# script fails otherwise); the real series are reported as they come out.
#
# Needs `make build` first; about 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-400}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Killed or interrupted: still clean up (a kill skips the EXIT trap otherwise).
trap 'exit 130' INT TERM
export TLI_PLUGIN_DIR=${TLI_PLUGIN_DIR:-target/release}

"$PYTHON" - "$work/planted.csv" <<'PY'
import datetime, math, random, sys
rng, rows, mu, sigma = random.Random(7), 3000, 0.0006, 0.003
drift = {0: mu, 1: mu, 2: -mu, 3: -mu, 4: -mu}  # Monday .. Friday
day, price, n = datetime.date(2006, 1, 2), 2000.0, 0
with open(sys.argv[1], "w") as f:
    f.write("ts_event,open,high,low,close,volume,symbol\n")
    while n < rows:
        if day.weekday() < 5:
            o = price
            price *= math.exp(drift[day.weekday()] + sigma * rng.gauss(0, 1))
            f.write(f"{day.isoformat()}T00:00:00Z,{o:.2f},{max(o, price) * 1.001:.2f},"
                    f"{min(o, price) * 0.999:.2f},{price:.2f},{rng.randint(1000, 5000)},ES.FUT\n")
            n += 1
        day += datetime.timedelta(days=1)
PY

root=$(pwd)
cat >"$work/job.json" <<JSON
{"name": "walk-forward bench",
 "models": [{"plugin": "tft", "steps": $STEPS, "config": {"hidden_size": 16, "attention_heads": 2,
             "lookback": 20, "horizons": 1, "learning_rate": 0.003}}],
 "assets": [{"data": "$work/planted.csv", "symbol": "ES"},
            {"data": "$root/data/samples/es_proxy_sp500_1d.csv", "symbol": "ES"},
            {"data": "$root/data/samples/nq_proxy_nasdaq_1d.csv", "symbol": "NQ"},
            {"data": "$root/data/samples/cl_proxy_wti_1d.csv", "symbol": "CL"}],
 "walk_forward": {"folds": 4, "test_bars": 250}}
JSON
start=$(date +%s)
"$TLI" host run --no-tensorboard --state-dir "$work/state" --data-root "$work" \
  --data-root "$root/data" --submit "$work/job.json" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
echo "trained 16 fold tasks in $(( $(date +%s) - start )) s"
"$TLI" walk-forward 1 --state-dir "$work/state" -o json >"$work/cost.json"
"$TLI" walk-forward 1 --state-dir "$work/state" --commission 20 --slippage-ticks 5 -o json \
  >"$work/tenfold.json"

"$PYTHON" - "$work/cost.json" "$work/tenfold.json" <<'PY'
import json, sys
cost, tenfold = (json.load(open(p)) for p in sys.argv[1:3])
names = ["planted", "ES (S&P 500)", "NQ (NASDAQ 100)", "CL (WTI)"]
print("| series | out-of-sample bars | net P&L | net Sharpe | max drawdown | trades "
      "| buy-and-hold P&L | buy-and-hold Sharpe | sign hit | at 10× costs: net P&L | Sharpe |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name, c, t in zip(names, cost, tenfold):
    o, x = c["out_of_sample"], t["out_of_sample"]
    s, b = o["strategy"], o["buy_and_hold"]
    hit = c["forecast"]["hit_rate"] * 100 if c["forecast"] else float("nan")
    print(f"| {name} | {s['performance']['periods'] + 1} | {s['net_pnl']:,.0f} "
          f"| {s['performance']['sharpe']:.2f} | {s['performance']['max_drawdown']:,.0f} "
          f"| {s['trades']} | {b['net_pnl']:,.0f} | {b['performance']['sharpe']:.2f} "
          f"| {hit:.1f}% | {x['strategy']['net_pnl']:,.0f} "
          f"| {x['strategy']['performance']['sharpe']:.2f} |")
planted, ten = cost[0]["out_of_sample"], tenfold[0]["out_of_sample"]
sharpe = planted["strategy"]["performance"]["sharpe"]
held = planted["buy_and_hold"]["performance"]["sharpe"]
costly = ten["strategy"]["performance"]["sharpe"]
ok = sharpe > 1 and sharpe > held and costly < 0
print(f"planted: net Sharpe {sharpe:.2f} (buy-and-hold {held:.2f}); at 10x costs {costly:.2f}: "
      + ("the edge is found, and costs take it" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
