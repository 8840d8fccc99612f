#!/usr/bin/env bash
# Installs `tli` and `tli-client` into PREFIX/bin and the model plugins, stripped of debug
# info (65 MB → about 2 MB each), into PREFIX/lib/tli/plugins, where the
# installed `tli` finds them without flags or LD_LIBRARY_PATH.
#
#   scripts/install.sh PREFIX [ARTIFACT_DIR]   (ARTIFACT_DIR: target/release)
#
# `make install PREFIX=…` builds first, then runs this. `tli` and the plugins
# keep their rpath to this checkout's .venv/libtorch/lib: keep the checkout
# (and its .venv) where it is, or rebuild after moving it. `tli-client` has no
# libtorch: copy it anywhere (a laptop that only drives hosts needs nothing else).
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=${1:?usage: scripts/install.sh PREFIX [ARTIFACT_DIR]}
FROM=${2:-target/release}

for bin in tli tli-client; do
  if [ ! -x "$FROM/$bin" ]; then
    echo "install: $FROM/$bin not found; build first (make build, or make install)" >&2
    exit 1
  fi
done
shopt -s nullglob
plugins=("$FROM"/libtli_plugin_*.so)
if [ ${#plugins[@]} -eq 0 ]; then
  echo "install: no libtli_plugin_*.so in $FROM; build first (make build)" >&2
  exit 1
fi
STRIP=${STRIP:-strip}
command -v "$STRIP" >/dev/null || { echo "install: $STRIP not found (binutils); set STRIP=" >&2; exit 1; }

mkdir -p "$PREFIX/bin" "$PREFIX/lib/tli/plugins"
# Copy to a temporary name, strip, then rename: a running host never sees a
# half-written plugin.
install_stripped() {
  local src=$1 dest=$2 mode=$3
  local tmp="$dest.tmp.$$"
  cp "$src" "$tmp"
  "$STRIP" --strip-debug "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
}
install_stripped "$FROM/tli" "$PREFIX/bin/tli" 755
install_stripped "$FROM/tli-client" "$PREFIX/bin/tli-client" 755
for p in "${plugins[@]}"; do
  install_stripped "$p" "$PREFIX/lib/tli/plugins/$(basename "$p")" 644
done
echo "install: $PREFIX/bin/tli, $PREFIX/bin/tli-client and ${#plugins[@]} plugin(s) in $PREFIX/lib/tli/plugins" >&2
