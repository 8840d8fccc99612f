# Shared set-up of the RL benchmark scripts (bench-rl-speed.sh, bench-rl-many.sh);
# source it from the repository root with SCRIPT (the caller's name) and OUT_DIR
# set. It checks for python3, builds the host and the two RL plugins unless
# SKIP_BUILD=1, sets TLI (the binary) and PLUGIN_DIR (a temporary directory
# holding only the DQN and PPO plugins, removed on exit), and empties OUT_DIR.
command -v python3 >/dev/null || { echo "$SCRIPT needs python3 (sqlite3 module) to read the store" >&2; exit 1; }

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release -p tli-host -p tli-plugin-dqn -p tli-plugin-ppo >&2
fi
TLI=$(pwd)/target/release/tli
PLUGIN_DIR=$(mktemp -d)
trap 'rm -rf "$PLUGIN_DIR"' EXIT
cp target/release/libtli_plugin_dqn.so target/release/libtli_plugin_ppo.so "$PLUGIN_DIR/"
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
