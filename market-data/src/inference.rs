//! New bars as a model's inputs: the feature pipeline a model was trained
//! with, applied to bars it may never have seen, z-scored with the
//! statistics fitted on its training split ([`FeatureStats`]), never
//! re-fitted on the new file.
//!
//! Every bar with a full look-back gets a row, the newest included: unlike a
//! training dataset, nothing here needs a future bar for a target.

use super::calendar::ExchangeCalendar;
use super::contracts::ContractSpec;
use super::features::{
    pipeline_error, raw_features, row_markers, target_names, zscored, FeatureConfig, FeatureStats,
};
use super::table::BarTable;
use super::user_features::{check_rows, raw_targets};
use super::DataError;

/// New bars as a model's inputs: every row with a full look-back (the
/// newest bar included: no target is needed), featurized by the model's
/// pipeline and z-scored with its training statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureRows {
    pub symbol: String,
    /// UTC nanoseconds, one per row.
    pub timestamps: Vec<i64>,
    /// `rows × feature_names.len()`, row-major.
    pub features: Vec<f32>,
    pub feature_names: Vec<String>,
    /// Each row's close (what a trading environment marks positions to).
    pub close: Vec<f64>,
    /// Each row's [`GAP_BEFORE`](tli_plugin_api::GAP_BEFORE) /
    /// [`ROLL_BEFORE`](tli_plugin_api::ROLL_BEFORE) markers.
    pub row_markers: Vec<u8>,
    /// The model's targets as they turned out, `rows × target_names.len()`,
    /// row-major, unscaled (a log return, or the config's target): NaN
    /// where the file ends before the target's horizon (or a target column
    /// has no value). Training divided them by the target scales.
    pub realized: Vec<f64>,
    pub target_names: Vec<String>,
}

impl FeatureRows {
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }
}

/// Featurizes `table` with the pipeline of `config` and the statistics a
/// model was trained with (see [`FeatureRows`]). Refuses a file that gives
/// other features than the model's (another bar interval or calendar), one
/// with no row of full look-back, and values that are not finite once scaled.
pub fn featurize_with_stats(
    table: &BarTable,
    contract: &ContractSpec,
    config: &FeatureConfig,
    stats: &FeatureStats,
) -> Result<FeatureRows, DataError> {
    let invalid = |m: String| pipeline_error(table, m);
    config.check().map_err(invalid)?;
    let width = stats.feature_names.len();
    if stats.feature_mean.len() != width || stats.feature_std.len() != width {
        return Err(invalid(format!(
            "the model's statistics are damaged: {width} features but {} means and {} standard \
             deviations",
            stats.feature_mean.len(),
            stats.feature_std.len()
        )));
    }
    if let Some(bad) = stats
        .feature_std
        .iter()
        .find(|s| !(s.is_finite() && **s > 0.0))
    {
        return Err(invalid(format!(
            "the model's statistics are damaged: a feature standard deviation of {bad}"
        )));
    }
    let calendar = ExchangeCalendar::for_contract(contract)?;
    let lookback = config.lookback();
    let n = table.len();
    if n <= lookback {
        return Err(invalid(format!(
            "{n} bars; the model needs more than its look-back of {lookback} bars"
        )));
    }
    let rows: Vec<usize> = (lookback..n).collect();
    let raw = raw_features(table, &calendar, config, &stats.levels)?;
    check_rows(table, config, &rows)?;
    if raw.names != stats.feature_names {
        return Err(invalid(format!(
            "this file gives the features [{}] but the model was trained on [{}] (another bar \
             interval or contract?)",
            raw.names.join(", "),
            stats.feature_names.join(", ")
        )));
    }
    let features = zscored(&raw, &rows, &stats.feature_mean, &stats.feature_std);
    if let Some(i) = features.iter().position(|x| !x.is_finite()) {
        return Err(invalid(format!(
            "feature {} of the bar at {} is not finite once scaled",
            stats.feature_names[i % width],
            crate::timefmt::format(table.ts[rows[i / width]])
        )));
    }
    let target_names = target_names(config);
    if target_names != stats.target_names {
        return Err(invalid(format!(
            "the feature config gives the targets [{}] but the model's statistics are for [{}]",
            target_names.join(", "),
            stats.target_names.join(", ")
        )));
    }
    // New bars need not carry a target column: its realized values are then unknown.
    let realized = match config.target.column() {
        Some(name) if crate::covariates::column(table, name).is_none() => {
            vec![f64::NAN; rows.len() * config.target_horizons.len()]
        }
        _ => raw_targets(table, config, &rows)?,
    };
    let all_markers = row_markers(table, &calendar);
    Ok(FeatureRows {
        symbol: table.symbol.clone(),
        timestamps: rows.iter().map(|&t| table.ts[t]).collect(),
        features,
        feature_names: raw.names,
        close: rows.iter().map(|&t| table.close[t]).collect(),
        row_markers: rows.iter().map(|&t| all_markers[t]).collect(),
        realized,
        target_names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::ContractBook;
    use crate::features::build_with_stats;
    use crate::synth::es_test_bars as bars;
    use crate::table::BarInterval;

    fn es() -> ContractSpec {
        ContractBook::builtin().lookup("ES").unwrap().clone()
    }

    /// The training file featurized with its own stored statistics gives
    /// the dataset's features, bit for bit, on every row they share.
    #[test]
    fn stored_statistics_reproduce_the_training_features() {
        let table = bars(BarInterval::Day, 800, 5);
        let config = FeatureConfig::default();
        let (built, stats) = build_with_stats(&table, &es(), &config).unwrap();
        let rows = featurize_with_stats(&table, &es(), &config, &stats).unwrap();
        let d = &built.dataset;
        let width = d.feature_names.len();
        assert_eq!(rows.feature_names.len(), width);
        // Every dataset row is a row here; the newest bars (no target) only here.
        assert_eq!(rows.len(), table.len() - config.lookback());
        assert!(rows.len() > d.timestamps.len());
        assert_eq!(rows.timestamps.last(), table.ts.last());
        for (r, ts) in d.timestamps.iter().enumerate() {
            let i = rows.timestamps.binary_search(ts).unwrap();
            let a = &d.features[r * width..(r + 1) * width];
            let b = &rows.features[i * width..(i + 1) * width];
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "row {r}"
            );
            assert_eq!(d.close[r], rows.close[i]);
            // The realized target, scaled as training did, is the dataset's target.
            assert_eq!(
                (rows.realized[i] / stats.target_scales[0]) as f32,
                d.targets[r],
                "row {r}"
            );
        }
        // The newest bar has no realized one-bar-ahead target.
        assert!(rows.realized.last().unwrap().is_nan());
        assert_eq!(rows.target_names, stats.target_names);
        assert_eq!(stats.target_names, vec!["fwd_logret_1".to_string()]);
        assert_eq!(stats.target_scales.len(), 1);
        // The statistics survive JSON (a model keeps them in a file).
        let back: FeatureStats =
            serde_json::from_str(&serde_json::to_string(&stats).unwrap()).unwrap();
        assert_eq!(back, stats);
    }

    /// A longer, three times more volatile file of the same contract is
    /// scaled with the training statistics: its volatility feature sits far
    /// above the training mean instead of being re-centred at 0.
    #[test]
    fn new_data_is_scaled_with_the_training_statistics_not_its_own() {
        let config = FeatureConfig::default();
        let (_, stats) = build_with_stats(&bars(BarInterval::Day, 600, 5), &es(), &config).unwrap();
        let mut wild = bars(BarInterval::Day, 900, 5);
        let first = wild.close[0].ln();
        for i in 0..wild.len() {
            let scale = |p: f64| (first + 3.0 * (p.ln() - first)).exp();
            let (c, h, l, o) = (wild.close[i], wild.high[i], wild.low[i], wild.open[i]);
            wild.close[i] = scale(c);
            // Keep the bar's own range: high and low move with the close.
            wild.high[i] = scale(c) * h / c;
            wild.low[i] = scale(c) * l / c;
            wild.open[i] = (scale(c) * o / c).clamp(wild.low[i], wild.high[i]);
        }
        let rows = featurize_with_stats(&wild, &es(), &config, &stats).unwrap();
        let calendar = ExchangeCalendar::for_contract(&es()).unwrap();
        let raw = raw_features(&wild, &calendar, &config, &stats.levels).unwrap();
        let width = stats.feature_names.len();
        let vol = stats
            .feature_names
            .iter()
            .position(|n| n.starts_with("realized_vol_"))
            .unwrap();
        let mut sum = 0.0;
        for (i, t) in (config.lookback()..wild.len()).enumerate() {
            let expected =
                (raw.values[t * width + vol] - stats.feature_mean[vol]) / stats.feature_std[vol];
            assert_eq!(rows.features[i * width + vol], expected as f32);
            sum += f64::from(rows.features[i * width + vol]);
        }
        // The new file really is more volatile: fitted on itself, its
        // volatility would centre far above the training mean ...
        let (_, own) = build_with_stats(&wild, &es(), &config).unwrap();
        assert!(
            own.feature_mean[vol] > 2.0 * stats.feature_mean[vol],
            "own {} stored {} sd {}",
            own.feature_mean[vol],
            stats.feature_mean[vol],
            stats.feature_std[vol]
        );
        // ... and scaled with the training statistics it stays above them
        // (a re-fit would centre it at 0).
        let mean = sum / rows.len() as f64;
        assert!(
            mean > 0.5,
            "volatility z-score mean {mean}: re-fitted on the new file?"
        );
    }

    #[test]
    fn another_feature_set_and_too_few_bars_are_refused() {
        let config = FeatureConfig::default();
        let (_, stats) = build_with_stats(&bars(BarInterval::Day, 600, 5), &es(), &config).unwrap();
        let minutes = bars(BarInterval::Minute, 600, 5);
        let e = featurize_with_stats(&minutes, &es(), &config, &stats)
            .unwrap_err()
            .to_string();
        assert!(e.contains("but the model was trained on"), "{e}");
        let short = bars(BarInterval::Day, config.lookback(), 5);
        let e = featurize_with_stats(&short, &es(), &config, &stats)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than its look-back of 20 bars"), "{e}");
        let mut damaged = stats.clone();
        damaged.feature_std[0] = 0.0;
        let e = featurize_with_stats(&bars(BarInterval::Day, 600, 5), &es(), &config, &damaged)
            .unwrap_err()
            .to_string();
        assert!(e.contains("statistics are damaged"), "{e}");
    }
}
