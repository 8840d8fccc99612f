"""Bar files as common tools write them, for tests/e2e/bring_your_own_bars.rs.

Usage: write_bar_files.py OUT_DIR

Writes, from one deterministic random walk of New York minute bars
(09:30-15:59 local, 2024-03-04 .. 2024-03-15, across the 2024-03-10 change
from EST to EDT):

  pandas_utc.csv          pandas to_csv of a UTC index   (2024-03-04 14:30:00+00:00)
  pandas_offsets.csv      pandas to_csv of a New York index (2024-03-04 09:30:00-05:00)
  pandas_local.csv        pandas to_csv of a naive local index (2024-03-04 09:30:00)
  pandas_ny.parquet       pandas to_parquet of the New York index (timestamp[ns, tz=America/New_York])
  pyarrow_local.parquet   pyarrow.parquet.write_table, naive local timestamp[us], float32 prices
and daily bars as Yahoo Finance exports them:
  ES_yahoo.csv            Date,Open,High,Low,Close,Adj Close,Volume
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def walk(rng, n, start):
    """OHLC on a 0.25 grid and integer volumes: opens follow closes."""
    steps = rng.integers(-4, 5, size=n) * 0.25
    close = start + np.cumsum(steps)
    open_ = np.concatenate([[start], close[:-1]])
    high = np.maximum(open_, close) + rng.integers(0, 4, size=n) * 0.25
    low = np.minimum(open_, close) - rng.integers(0, 4, size=n) * 0.25
    volume = rng.integers(1, 5000, size=n)
    return open_, high, low, close, volume


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20)

    days = pd.bdate_range("2024-03-04", "2024-03-15")
    local = pd.DatetimeIndex(
        [d + pd.Timedelta(hours=9, minutes=30) + pd.Timedelta(minutes=m) for d in days for m in range(390)]
    )
    ny = local.tz_localize("America/New_York")
    o, h, l, c, v = walk(rng, len(ny), 5100.0)
    frame = pd.DataFrame({"open": o, "high": h, "low": l, "close": c, "volume": v}, index=ny)
    frame.index.name = "timestamp"

    frame.tz_convert("UTC").to_csv(out / "pandas_utc.csv")
    frame.to_csv(out / "pandas_offsets.csv")
    frame.tz_localize(None).to_csv(out / "pandas_local.csv")
    frame.to_parquet(out / "pandas_ny.parquet", engine="pyarrow")
    table = pa.table(
        {
            "ts_event": pa.array(local.to_numpy().astype("datetime64[us]"), type=pa.timestamp("us")),
            "open": pa.array(o, type=pa.float32()),
            "high": pa.array(h, type=pa.float32()),
            "low": pa.array(l, type=pa.float32()),
            "close": pa.array(c, type=pa.float32()),
            "volume": pa.array(v, type=pa.int64()),
        }
    )
    pq.write_table(table, out / "pyarrow_local.parquet")

    dates = pd.bdate_range("2021-01-04", periods=700)
    o, h, l, c, v = walk(rng, len(dates), 3700.0)
    yahoo = pd.DataFrame(
        {"Open": o, "High": h, "Low": l, "Close": c, "Adj Close": c, "Volume": v * 300},
        index=pd.DatetimeIndex(dates, name="Date"),
    )
    yahoo.to_csv(out / "ES_yahoo.csv")
    print("wrote", ", ".join(sorted(p.name for p in out.iterdir())))


if __name__ == "__main__":
    main(sys.argv[1])
