//! The bundled sample data (data/samples): each series reads back to the
//! identical table from CSV, DBN (zstd) and Parquet, with the row counts and
//! ranges its README states, and resolves to its stand-in contract.

use std::path::PathBuf;
use tli_data::{contracts::ContractBook, read_bars, timefmt, BarInterval};

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/samples")
}

#[test]
fn every_sample_is_identical_in_all_three_formats() {
    let book = ContractBook::builtin();
    for (stem, symbol, rows, first, last) in [
        (
            "es_proxy_sp500_1d",
            "ES.FUT",
            5031,
            "1999-01-04",
            "2018-12-31",
        ),
        (
            "nq_proxy_nasdaq_1d",
            "NQ.FUT",
            5031,
            "1999-01-04",
            "2018-12-31",
        ),
        (
            "cl_proxy_wti_1d",
            "CL.FUT",
            8321,
            "1986-01-02",
            "2019-01-03",
        ),
    ] {
        let csv = read_bars(&samples().join(format!("{stem}.csv"))).unwrap();
        let dbn = read_bars(&samples().join(format!("{stem}.dbn.zst"))).unwrap();
        let parquet = read_bars(&samples().join(format!("{stem}.parquet"))).unwrap();
        assert_eq!(csv, dbn, "{stem}: CSV and DBN differ");
        assert_eq!(csv, parquet, "{stem}: CSV and Parquet differ");
        assert_eq!(csv.symbol, symbol);
        assert_eq!(csv.interval, BarInterval::Day);
        assert_eq!(csv.len(), rows, "{stem}");
        assert_eq!(timefmt::format_date(csv.ts[0]), first);
        assert_eq!(timefmt::format_date(csv.ts[rows - 1]), last);
        assert!(book.lookup(&csv.symbol).is_ok());
    }
}

#[test]
fn the_licence_travels_with_the_samples() {
    let licence = std::fs::read_to_string(samples().join("raw/LICENSE-arch.md")).unwrap();
    assert!(licence.contains("Kevin Sheppard"));
    let readme = std::fs::read_to_string(samples().join("README.md")).unwrap();
    assert!(readme.contains("not futures prices"));
}
