#!/usr/bin/env python3
"""Converts the raw daily series in data/samples/raw (copied unchanged from
the PyPI package arch 8.0.0) into the project's normalized bar CSV:
ts_event,open,high,low,close,volume,symbol.

Rules (also in data/samples/README.md):
- Date M/D/YYYY becomes 00:00 UTC of that day.
- S&P 500 and NASDAQ Composite: Open/High/Low/Close/Volume as given; the
  "Adj Close" column is dropped (it equals Close for these indices).
- WTI spot (FRED DCOILWTICO) has only a daily price: open = high = low =
  close = that price, volume 0. Days without a price (FRED's "." holidays)
  are left out, and counted in the output.
- Symbols are the futures they stand in for (ES.FUT, NQ.FUT, CL.FUT): these
  are index and spot proxies, not futures prices.

Then `tli data convert` writes the same bars as .dbn.zst and .parquet
(scripts/make_samples.sh runs both steps).
"""
import csv
import gzip
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent.parent / "data" / "samples"


def iso(date: str) -> str:
    month, day, year = (int(x) for x in date.split("/"))
    return f"{year:04d}-{month:02d}-{day:02d}T00:00:00Z"


def price(text: str) -> str:
    # Keep the decimal text as published; float() only validates it.
    float(text)
    return text


def convert_ohlcv(raw: str, out: str, symbol: str) -> int:
    rows = list(csv.DictReader(gzip.open(HERE / "raw" / raw, "rt")))
    with open(HERE / out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["ts_event", "open", "high", "low", "close", "volume", "symbol"])
        for r in rows:
            w.writerow([iso(r["Date"]), price(r["Open"]), price(r["High"]), price(r["Low"]),
                        price(r["Close"]), int(r["Volume"]), symbol])
    return len(rows)


def convert_close_only(raw: str, out: str, symbol: str) -> tuple[int, int]:
    rows = list(csv.DictReader(gzip.open(HERE / "raw" / raw, "rt")))
    kept = skipped = 0
    with open(HERE / out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["ts_event", "open", "high", "low", "close", "volume", "symbol"])
        for r in rows:
            value = r["DCOILWTICO"].strip()
            if value in ("", "."):
                skipped += 1
                continue
            p = price(value)
            w.writerow([iso(r["DATE"] if "DATE" in r else r["Date"]), p, p, p, p, 0, symbol])
            kept += 1
    return kept, skipped


if __name__ == "__main__":
    print("es_proxy_sp500_1d.csv:", convert_ohlcv("sp500.csv.gz", "es_proxy_sp500_1d.csv", "ES.FUT"), "rows")
    print("nq_proxy_nasdaq_1d.csv:", convert_ohlcv("nasdaq.csv.gz", "nq_proxy_nasdaq_1d.csv", "NQ.FUT"), "rows")
    kept, skipped = convert_close_only("wti.csv.gz", "cl_proxy_wti_1d.csv", "CL.FUT")
    print(f"cl_proxy_wti_1d.csv: {kept} rows ({skipped} days without a price left out)")
    sys.exit(0)
