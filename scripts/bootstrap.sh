#!/usr/bin/env bash
# Installs the pinned libtorch (PyPI torch==2.11.0) into a project-local .venv.
# Idempotent: does nothing when .venv already holds torch 2.11.0.
# tch =0.24.0 builds against it with LIBTORCH_USE_PYTORCH=1 (see docs/ARCHITECTURE.md).
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION="2.11.0"
# The Python test scripts (tests/python) use these: the gRPC client (reflection only), the
# TensorBoard reader of the event-file round trip, Prometheus's own parser of the text
# format, Selenium for the status-page browser test (the browser itself, Debian's
# chromium and chromium-driver, comes from `make browser-tools`), and pandas + pyarrow,
# which write the bar files users bring (tests/python/write_bar_files.py).
PY_TEST_PACKAGES=(grpcio==1.85.1 grpcio-reflection==1.85.1 tensorboard==2.21.0 selenium==4.40.0 prometheus-client==0.23.1 pandas==2.3.3 pyarrow==21.0.0)
VENV=".venv"
PY="${PYTHON:-python3}"

# .venv/libtorch -> site-packages/torch: a path that does not depend on the
# Python minor version, used by .cargo/config.toml (LIBTORCH) and as rpath.
link_libtorch() {
  local torch_dir
  torch_dir=$("$VENV/bin/python" -c "import pathlib, importlib.util as u; print(pathlib.Path(u.find_spec('torch').origin).parent)")
  ln -sfn "$torch_dir" "$VENV/libtorch"
}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$TORCH_VERSION" <<'PYEOF' 2>/dev/null
import sys, importlib.metadata as md
sys.exit(0 if md.version("torch").split("+")[0] == sys.argv[1] else 1)
PYEOF
then
  link_libtorch
  "$VENV/bin/python" -c "import grpc, grpc_reflection, tensorboard, selenium, prometheus_client, pandas, pyarrow" 2>/dev/null \
    || "$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PY_TEST_PACKAGES[@]}"
  echo "bootstrap: torch $TORCH_VERSION already in $VENV" >&2
  exit 0
fi

command -v "$PY" >/dev/null || { echo "bootstrap: $PY not found; install Python 3.10+ or set PYTHON=" >&2; exit 1; }
echo "bootstrap: creating $VENV and installing torch==$TORCH_VERSION from PyPI (about 2.6 GB, once)" >&2
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip
"$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off "torch==$TORCH_VERSION" "${PY_TEST_PACKAGES[@]}"
link_libtorch
echo "bootstrap: torch $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))') at $(readlink "$VENV/libtorch")" >&2
