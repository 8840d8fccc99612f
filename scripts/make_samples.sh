#!/usr/bin/env bash
# Regenerates data/samples from data/samples/raw: normalized CSV (scripts/convert_samples.py),
# then the same bars as DBN (zstd) and Parquet with `tli data convert`.
set -euo pipefail
cd "$(dirname "$0")/.."
TLI=${TLI:-target/release/tli}
python3 scripts/convert_samples.py
for f in data/samples/*_1d.csv; do
  base=${f%.csv}
  "$TLI" data convert "$f" "$base.dbn.zst"
  "$TLI" data convert "$f" "$base.parquet"
done
