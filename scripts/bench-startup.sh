#!/usr/bin/env bash
# Start-up time of the two command-line binaries: the full `tli` (links libtorch) and
# `tli-client` (no libtorch), against a trivial Rust binary, for `--version` and for
# `train list` answered by a running host (loopback). Median and p90 of RUNS runs each.
#
#   RUNS=25 scripts/bench-startup.sh        (SKIP_BUILD=1 to use target/release as it is)
#
# Figures go to docs/benchmarks.md ("Command-line start-up").
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-25}"
BIN=target/release
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -p tli-host -p tli-cli -p tli-plugin-template >&2
fi
work=$(mktemp -d)
trap 'kill "${host_pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT

# The floor: a Rust binary that prints a line and exits.
printf 'fn main() { println!("trivial 0.1.0"); }\n' >"$work/trivial.rs"
rustc -O -o "$work/trivial" "$work/trivial.rs"

# A host to answer `train list` (one finished job in its store).
mkdir -p "$work/plugins"
cp "$BIN/libtli_plugin_template.so" "$work/plugins/"
"$BIN/tli" --plugin-dir "$work/plugins" host serve --state-dir "$work/state" --listen 127.0.0.1:0 \
  >"$work/serve.out" 2>"$work/serve.err" &
host_pid=$!
endpoint=""
for _ in $(seq 1 200); do
  endpoint=$(grep -oE 'listening on [^ ]+' "$work/serve.err" "$work/serve.out" 2>/dev/null | head -1 | awk '{print $3}' || true)
  [ -n "$endpoint" ] && break
  sleep 0.1
done
[ -n "$endpoint" ] || { echo "bench-startup: the host did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
"$BIN/tli" --endpoint "$endpoint" train start -p template -a synthetic:300:1 --steps 20 --watch >/dev/null 2>&1 || true

python3 - "$RUNS" "$endpoint" "$work/trivial" "$BIN/tli" "$BIN/tli-client" <<'PYEOF'
import os, statistics, subprocess, sys, time
runs, endpoint, trivial, full, client = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
def measure(argv):
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)  # warm the page cache
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]
rows = [
    ("trivial Rust binary", [trivial]),
    ("tli --version", [full, "--version"]),
    ("tli-client --version", [client, "--version"]),
    ("tli train list", [full, "--endpoint", endpoint, "train", "list"]),
    ("tli-client train list", [client, "--endpoint", endpoint, "train", "list"]),
]
print(f"| command | median ms | p90 ms |  ({runs} runs each)")
print("|---|---|---|")
for name, argv in rows:
    med, p90 = measure(argv)
    print(f"| `{name}` | {med:.1f} | {p90:.1f} |")
PYEOF
