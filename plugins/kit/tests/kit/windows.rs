//! Sliding windows and multi-horizon targets: hand-built cases, the window
//! tensors as views, and a property test over random markers and splits
//! against a brute-force definition.

use tch::{Device, Kind, Tensor};
use tli_plugin_api::SplitBounds;
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::windows::{
    select_rows, window_batch, window_view, HorizonTarget, RowRuns, Split, BREAK_ON_DEFAULT,
    GAP_BEFORE, ROLL_BEFORE,
};

fn bounds(train_end: u64, valid_start: u64, valid_end: u64, test_start: u64) -> SplitBounds {
    SplitBounds {
        train_end,
        valid_start,
        valid_end,
        test_start,
    }
}

/// 16 rows: train [0, 8) with a gap before 3 and a roll before 6; valid
/// [8, 12) (row 8 starts a split, row 12 is embargoed); test [13, 16).
fn example(break_on: u8) -> RowRuns {
    let mut markers = vec![0u8; 16];
    markers[3] = GAP_BEFORE;
    markers[6] = ROLL_BEFORE;
    markers[10] = GAP_BEFORE | ROLL_BEFORE;
    markers[8] = GAP_BEFORE; // at a split start: changes nothing
    RowRuns::new(16, &markers, break_on, &bounds(8, 8, 12, 13)).unwrap()
}

#[test]
fn runs_and_window_ends_by_hand() {
    let runs = example(BREAK_ON_DEFAULT);
    let got: Vec<_> = runs
        .runs()
        .iter()
        .map(|r| (r.split, r.rows.clone()))
        .collect();
    use Split::*;
    assert_eq!(
        got,
        [
            (Train, 0..3),
            (Train, 3..6),
            (Train, 6..8),
            (Validation, 8..10),
            (Validation, 10..12),
            (Test, 13..16)
        ]
    );
    assert_eq!(runs.split_of(12), None);
    assert_eq!(runs.split_of(7), Some(Train));
    // Lookback 2, horizon 1: e − 1 and e + 1 in e's run.
    let ends = runs.all_window_ends(2, 1);
    assert_eq!(ends.train, [1, 4]);
    assert_eq!(ends.valid, Vec::<usize>::new());
    assert_eq!(ends.test, [14]);
    // Lookback 1, horizon 0: every row in a split.
    let all = runs.all_window_ends(1, 0);
    assert_eq!(all.train, (0..8).collect::<Vec<_>>());
    assert_eq!(all.valid, [8, 9, 10, 11]);
    assert_eq!(all.test, [13, 14, 15]);
    assert_eq!(runs.window_ends(Test, 3, 0), [15]);
    assert!(runs.window_ends(Test, 3, 1).is_empty());
    assert!(runs.window_ends(Train, 0, 0).is_empty());

    // Breaking on gaps only: the roll before 6 joins [3, 8).
    let gaps = example(GAP_BEFORE);
    assert_eq!(gaps.window_ends(Train, 2, 1), [1, 4, 5, 6]);
    assert_eq!(gaps.window_ends(Validation, 2, 0), [9, 11]);
    // Breaking on nothing: splits still cut.
    let none = example(0);
    assert_eq!(none.window_ends(Train, 3, 2), [2, 3, 4, 5]);
    assert_eq!(none.window_ends(Validation, 4, 0), [11]);
}

#[test]
fn targets_by_hand() {
    let runs = example(BREAK_ON_DEFAULT);
    let series: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let t = runs
        .horizon_targets(&series, 2, HorizonTarget::Value)
        .unwrap();
    let row = |r: usize| {
        (
            t.values[2 * r..2 * r + 2].to_vec(),
            t.valid[2 * r..2 * r + 2].to_vec(),
        )
    };
    assert_eq!(row(0), (vec![1.0, 2.0], vec![true, true]));
    assert_eq!(row(1), (vec![2.0, 0.0], vec![true, false])); // gap before 3
    assert_eq!(row(2), (vec![0.0, 0.0], vec![false, false]));
    assert_eq!(row(7), (vec![0.0, 0.0], vec![false, false])); // split edge at 8
    assert_eq!(row(11), (vec![0.0, 0.0], vec![false, false])); // 12 is in no split
    assert_eq!(row(12), (vec![0.0, 0.0], vec![false, false])); // row in no split
    assert_eq!(row(13), (vec![14.0, 15.0], vec![true, true]));
    assert_eq!(row(15), (vec![0.0, 0.0], vec![false, false])); // end of data

    let sum = runs
        .horizon_targets(&series, 3, HorizonTarget::Sum)
        .unwrap();
    assert_eq!(&sum.values[0..3], &[1.0, 3.0, 0.0]);
    assert_eq!(&sum.valid[0..3], &[true, true, false]);
    assert_eq!(&sum.values[3..6], &[2.0, 0.0, 0.0]); // row 1: the gap before 3
    assert_eq!(&sum.valid[3..6], &[true, false, false]);
    assert_eq!(&sum.values[39..42], &[14.0, 29.0, 0.0]); // row 13: 14, 14 + 15, end
    let (values, valid) = sum.to_tensors(Device::Cpu).unwrap();
    assert_eq!(values.size(), [16, 3]);
    assert_eq!(valid.kind(), Kind::Bool);
    assert_eq!(
        valid.to_kind(Kind::Int64).sum(Kind::Int64).int64_value(&[]),
        { sum.valid.iter().filter(|v| **v).count() as i64 }
    );

    // A non-finite value is not a target, nor is any sum through it.
    let mut holes = series.clone();
    holes[14] = f32::NAN;
    let v = runs
        .horizon_targets(&holes, 2, HorizonTarget::Value)
        .unwrap();
    assert_eq!(&v.valid[26..28], &[false, true]);
    let s = runs.horizon_targets(&holes, 2, HorizonTarget::Sum).unwrap();
    assert_eq!(&s.valid[26..28], &[false, false]);
    assert!(s.values.iter().all(|x| x.is_finite()));
}

#[test]
fn bad_inputs_are_refused() {
    let ok = bounds(4, 4, 6, 6);
    assert!(RowRuns::new(8, &[0; 7], BREAK_ON_DEFAULT, &ok).is_err());
    assert!(RowRuns::new(8, &[0; 8], BREAK_ON_DEFAULT, &bounds(5, 4, 6, 6)).is_err());
    assert!(RowRuns::new(8, &[0; 8], BREAK_ON_DEFAULT, &bounds(4, 4, 6, 9)).is_err());
    let runs = RowRuns::new(8, &[0; 8], BREAK_ON_DEFAULT, &ok).unwrap();
    assert!(runs
        .horizon_targets(&[0.0; 7], 1, HorizonTarget::Value)
        .is_err());
    assert!(runs
        .horizon_targets(&[0.0; 8], 0, HorizonTarget::Value)
        .is_err());
    let f = Tensor::zeros([8, 3], (Kind::Float, Device::Cpu));
    assert!(window_view(&f, 9).is_err());
    assert!(window_view(&f, 0).is_err());
    assert!(window_batch(&f, 3, &[1]).is_err());
    assert!(window_batch(&f, 3, &[8]).is_err());
    assert!(select_rows(&f, &[8]).is_err());
}

#[test]
fn the_window_view_is_a_view_and_batches_hold_the_right_rows() {
    let (rows, feats, lookback) = (10i64, 3i64, 4usize);
    let f = Tensor::arange(rows * feats, (Kind::Float, Device::Cpu)).reshape([rows, feats]);
    let view = window_view(&f, lookback).unwrap();
    assert_eq!(
        view.size(),
        [rows - lookback as i64 + 1, lookback as i64, feats]
    );
    assert_eq!(view.data_ptr(), f.data_ptr(), "no copy");
    assert_eq!(view.stride(), [feats, feats, 1]);
    // Window i is rows [i, i + L).
    for i in 0..view.size()[0] {
        assert!(view.get(i).equal(&f.narrow(0, i, lookback as i64)));
    }
    // A write to the features shows through the view.
    let _ = f.get(5).get(1).fill_(-1.0);
    assert_eq!(view.double_value(&[2, 3, 1]), -1.0);

    let batch = window_batch(&f, lookback, &[3, 9, 5]).unwrap();
    assert_eq!(batch.size(), [3, lookback as i64, feats]);
    for (b, e) in [3i64, 9, 5].iter().enumerate() {
        let want = f.narrow(0, e - lookback as i64 + 1, lookback as i64);
        assert!(batch.get(b as i64).equal(&want));
    }
    // A non-contiguous feature matrix (a column slice) windows correctly too.
    let cols = f.narrow(1, 1, 2);
    let w = window_view(&cols, 2).unwrap();
    assert_eq!(w.data_ptr(), cols.data_ptr());
    assert!(w.get(4).equal(&cols.narrow(0, 4, 2)));

    let targets = Tensor::arange(rows * 2, (Kind::Float, Device::Cpu)).reshape([rows, 2]);
    let picked = select_rows(&targets, &[9, 0]).unwrap();
    assert_eq!(
        Vec::<f32>::try_from(picked.flatten(0, -1)).unwrap(),
        [18.0, 19.0, 0.0, 1.0]
    );
}

/// Brute force: is `[e − L + 1, e + H]` inside one split with no break?
fn window_ok(
    e: usize,
    l: usize,
    h: usize,
    markers: &[u8],
    brk: u8,
    b: &SplitBounds,
    split: Split,
) -> bool {
    let rows = markers.len();
    if e + 1 < l || e + h >= rows {
        return false;
    }
    let (lo, hi) = (e + 1 - l, e + h);
    let r = split.range(b, rows);
    r.contains(&lo) && r.contains(&hi) && (lo + 1..=hi).all(|i| markers[i] & brk == 0)
}

#[test]
fn property_no_window_or_target_spans_a_break_and_none_is_missed() {
    let mut rng = Rng::new(20_240_611);
    for case in 0..300 {
        let rows = 1 + rng.below(60) as usize;
        let markers: Vec<u8> = (0..rows)
            .map(|_| match rng.below(10) {
                0 => GAP_BEFORE,
                1 => ROLL_BEFORE,
                2 => GAP_BEFORE | ROLL_BEFORE,
                _ => 0,
            })
            .collect();
        let mut cuts: Vec<u64> = (0..4).map(|_| rng.below(rows as u64 + 1)).collect();
        cuts.sort_unstable();
        let b = bounds(cuts[0], cuts[1], cuts[2], cuts[3]);
        let brk = [BREAK_ON_DEFAULT, GAP_BEFORE, ROLL_BEFORE, 0][rng.below(4) as usize];
        let (l, h) = (1 + rng.below(6) as usize, rng.below(5) as usize);
        let runs = RowRuns::new(rows, &markers, brk, &b).unwrap();
        let ends = runs.all_window_ends(l, h);
        for split in Split::ALL {
            let want: Vec<usize> = (0..rows)
                .filter(|&e| window_ok(e, l, h, &markers, brk, &b, split))
                .collect();
            assert_eq!(
                ends.of(split),
                want,
                "case {case} {split:?} rows {rows} L {l} H {h}"
            );
        }
        // Targets: valid exactly when rows t..=t+h are contiguous in t's split.
        let horizon = 1 + h;
        let series: Vec<f32> = (0..rows).map(|i| (i * i) as f32).collect();
        let t = runs
            .horizon_targets(&series, horizon, HorizonTarget::Value)
            .unwrap();
        for row in 0..rows {
            for k in 1..=horizon {
                let ok = Split::ALL
                    .iter()
                    .any(|&s| window_ok(row, 1, k, &markers, brk, &b, s));
                let i = row * horizon + k - 1;
                assert_eq!(t.valid[i], ok, "case {case} row {row} h {k}");
                let want = if ok { series[row + k] } else { 0.0 };
                assert_eq!(t.values[i], want);
            }
        }
    }
}
