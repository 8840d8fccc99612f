//! The one feature pipeline every plugin gets: bars → features, targets and
//! chronological splits, packed as the ABI's [`Dataset`].
//!
//! Features at row t use bars up to and including t only:
//! * `logret_h`: ln(close_t / close_{t−h}) for each return horizon h;
//! * `realized_vol_w`: √(mean of squared 1-bar log returns over the last w bars);
//! * `range`: ln(high_t / low_t);
//! * `volume_z_w`: z-score of ln(1 + volume_t) within the last w bars;
//! * calendar and session inputs (known in advance: a function of the
//!   timestamp and the contract alone), computed in the exchange's local
//!   time by [`ExchangeCalendar::known_future_features`]: day of week and
//!   month as sin/cos pairs, for bars under a day the time of day and the
//!   session position, holiday and half-day flags, days to the next roll.
//!
//! The user's own columns ([`crate::columns`]: of the bar file or a
//! covariate file, observed-past, known-future or static, real or
//! categorical) follow, with their roles (`builtin: false` leaves only
//! them); how they become features is [`crate::user_features`].
//!
//! Targets: `fwd_logret_h` = ln(close_{t+h} / close_t) by default, or
//! another [`Target`] (forward realized volatility, range, return sign, a
//! column h bars ahead), divided by its training-split standard deviation
//! (so losses are O(1)); the sign and relative size are kept.
//!
//! Rows without a full look-back or a full target horizon are dropped. The
//! remaining rows are split chronologically into train / validation / test
//! with an embargo gap of at least the longest target horizon between them,
//! so no training target overlaps a later split. Every built-in feature is
//! z-scored with the mean and standard deviation of the training rows only
//! (a user column when its transform is `zscore`; the others are kept as
//! they are).
//!
//! A model keeps what the pipeline fitted on its training split
//! ([`FeatureStats`], from [`build_with_stats`]): new bars are featurized with
//! those statistics (`inference::featurize_with_stats`), never re-fitted on the new
//! file (the `inference` module), so a model sees its inputs on the scale it
//! was trained on.
//!
//! [`build_annotated_dataset`] also returns the plugin API 1.1 annex: each
//! feature's role (observed past or known future), each target's horizon and
//! the scale it was divided by, the bar interval, and per-row markers for
//! gaps (bars missing where the exchange calendar expects trading) and
//! front-contract rolls.

use super::calendar::ExchangeCalendar;
use super::columns::{check_columns, Target, UserColumn};
use super::contracts::ContractSpec;
use super::table::BarTable;
pub use super::user_features::Levels;
use super::user_features::{check_rows, check_targets, fit_levels, raw_targets, user_features};
use super::DataError;
use crate::timefmt::UtcTime;
use abi_stable::std_types::{RString, RVec};
use serde::{Deserialize, Serialize};
use tli_plugin_api::{Dataset, DatasetAnnex, FeatureRole, SplitBounds, GAP_BEFORE, ROLL_BEFORE};

/// A dataset with its plugin API 1.1 annex (see the module docs).
#[derive(Clone, Debug)]
pub struct AnnotatedDataset {
    pub dataset: Dataset,
    pub annex: DatasetAnnex,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeatureConfig {
    pub return_horizons: Vec<usize>,
    pub volatility_window: usize,
    pub volume_window: usize,
    pub target_horizons: Vec<usize>,
    pub valid_fraction: f64,
    pub test_fraction: f64,
    /// Rows left out between splits; default (and minimum) the longest target horizon.
    pub embargo: Option<usize>,
    /// The validation split starts at the first usable bar at or after this
    /// time (instead of `valid_fraction`); it ends `embargo` rows before the
    /// test split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_start: Option<UtcTime>,
    /// The test split is every usable bar at or after this time (instead of
    /// `test_fraction`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_start: Option<UtcTime>,
    /// Whether the built-in features (returns, volatility, range, volume,
    /// calendar) stay; `false` leaves only `columns`.
    #[serde(skip_serializing_if = "is_true")]
    pub builtin: bool,
    /// The user's own columns (see [`crate::columns`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<UserColumn>,
    /// What the targets are (forward log returns unless said otherwise).
    #[serde(skip_serializing_if = "Target::is_default")]
    pub target: Target,
}

fn is_true(value: &bool) -> bool {
    *value
}

impl Default for FeatureConfig {
    fn default() -> Self {
        Self {
            return_horizons: vec![1, 5, 20],
            volatility_window: 20,
            volume_window: 20,
            target_horizons: vec![1],
            valid_fraction: 0.15,
            test_fraction: 0.15,
            embargo: None,
            valid_start: None,
            test_start: None,
            builtin: true,
            columns: Vec::new(),
            target: Target::FwdLogret,
        }
    }
}

/// Most features a row may have (one-hot columns counted one by one).
pub const MAX_FEATURES: usize = 2048;
/// Most raw feature values (bars × features) one table may produce (2 GiB of f64).
pub const MAX_FEATURE_VALUES: usize = 1 << 28;

/// Most return horizons, and most target horizons, a config may ask for
/// (each is a column of every row: a job spec listing a million would
/// allocate rows × a million).
pub const MAX_HORIZONS: usize = 64;

impl FeatureConfig {
    /// The settings are in range (a job spec is checked with this before it
    /// is accepted; the pipeline checks again).
    pub fn check(&self) -> Result<(), String> {
        for (name, horizons) in [
            ("return_horizons", &self.return_horizons),
            ("target_horizons", &self.target_horizons),
        ] {
            if horizons.len() > MAX_HORIZONS {
                return Err(format!(
                    "{name} lists {} horizons; at most {MAX_HORIZONS}",
                    horizons.len()
                ));
            }
        }
        if self.return_horizons.is_empty() || self.return_horizons.contains(&0) {
            return Err("return_horizons must be non-empty and positive".into());
        }
        if self.target_horizons.is_empty() || self.target_horizons.contains(&0) {
            return Err("target_horizons must be non-empty and positive".into());
        }
        if self.volatility_window < 2 || self.volume_window < 2 {
            return Err("volatility_window and volume_window must be at least 2".into());
        }
        let f = (self.valid_fraction, self.test_fraction);
        if !(0.0..1.0).contains(&f.0) || !(0.0..1.0).contains(&f.1) || f.0 + f.1 >= 0.9 {
            return Err(format!(
                "valid_fraction {} + test_fraction {} must leave at least 10% for training",
                f.0, f.1
            ));
        }
        if let (Some(v), Some(t)) = (self.valid_start, self.test_start) {
            if v >= t {
                return Err(format!(
                    "valid_start {} is not before test_start {}",
                    crate::timefmt::format(v.0),
                    crate::timefmt::format(t.0)
                ));
            }
        }
        let builtin = if self.builtin {
            self.builtin_names()
        } else {
            Vec::new()
        };
        check_columns(&self.columns, &builtin, &self.target).map_err(|e| e.to_string())?;
        if let Some(e) = self.embargo {
            if e < self.max_target_horizon() {
                return Err(format!(
                    "embargo {e} is shorter than the longest of target_horizons ({}): training \
                     targets would overlap later splits; raise embargo or shorten target_horizons",
                    self.max_target_horizon()
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn max_target_horizon(&self) -> usize {
        self.target_horizons.iter().copied().max().unwrap_or(1)
    }

    /// Every name a built-in feature can have (the calendar's depend on the
    /// bar interval and contract: all of them here).
    pub fn builtin_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .return_horizons
            .iter()
            .map(|h| format!("logret_{h}"))
            .collect();
        names.push(format!("realized_vol_{}", self.volatility_window));
        names.push("range".into());
        names.push(format!("volume_z_{}", self.volume_window));
        names.extend(
            crate::calendar::KNOWN_FUTURE_NAMES
                .iter()
                .map(|n| n.to_string()),
        );
        names
    }

    /// Bars of history the features need before a row is usable.
    pub fn lookback(&self) -> usize {
        let longest_return = self.return_horizons.iter().copied().max().unwrap_or(1);
        longest_return
            .max(self.volatility_window)
            .max(self.volume_window)
    }
}

/// Features before normalization: `rows × names.len()`, row-major; rows
/// before the look-back hold NaN (and user columns NaN where they have no
/// value: [`crate::user_features`]).
pub struct RawFeatures {
    pub names: Vec<String>,
    pub roles: Vec<FeatureRole>,
    /// Per feature, the input variable it belongs to: its own, or its
    /// categorical column's (one-hot columns share one).
    pub variables: Vec<u32>,
    /// Per feature: z-scored with the training split's statistics (every
    /// built-in feature, user columns with transform `zscore`).
    pub zscore: Vec<bool>,
    pub values: Vec<f64>,
}

/// Computes the raw features of every row (see the module docs), with
/// categorical user columns one-hot over `levels`.
pub fn raw_features(
    table: &BarTable,
    calendar: &ExchangeCalendar,
    config: &FeatureConfig,
    levels: &Levels,
) -> Result<RawFeatures, DataError> {
    let n = table.len();
    let mut names: Vec<String> = Vec::new();
    let mut known = Vec::new();
    if config.builtin {
        names.extend(config.return_horizons.iter().map(|h| format!("logret_{h}")));
        names.push(format!("realized_vol_{}", config.volatility_window));
        names.push("range".into());
        names.push(format!("volume_z_{}", config.volume_window));
        known = calendar.known_future_features(&table.ts, table.interval);
    }
    let observed = names.len();
    names.extend(known.iter().map(|(name, _)| name.clone()));
    let mut roles = vec![FeatureRole::ObservedPast; observed];
    roles.resize(names.len(), FeatureRole::KnownFuture);
    let builtin = names.len();
    let user = user_features(table, config, levels)?;
    names.extend(user.names.iter().cloned());
    roles.extend(user.roles.iter().copied());
    let mut variables: Vec<u32> = (0..builtin as u32).collect();
    let mut last_source = None;
    let mut next = builtin as u32;
    for &source in &user.sources {
        if last_source != Some(source) {
            last_source = Some(source);
            variables.push(next);
            next += 1;
        } else {
            variables.push(next - 1);
        }
    }
    let mut zscore = vec![true; builtin];
    zscore.extend(&user.zscore);
    let width = names.len();
    if width > MAX_FEATURES || n.saturating_mul(width) > MAX_FEATURE_VALUES {
        return Err(pipeline_error(
            table,
            format!(
                "{width} features × {n} bars is more than this pipeline holds ({MAX_FEATURES} \
                 features, {MAX_FEATURE_VALUES} values); lower a categorical column's \
                 max_levels, name fewer columns or cut the bars"
            ),
        ));
    }
    let mut values = vec![f64::NAN; n * width];
    let log_close: Vec<f64> = table.close.iter().map(|c| c.ln()).collect();
    let log_volume: Vec<f64> = table.volume.iter().map(|v| (*v as f64).ln_1p()).collect();
    for t in 0..n {
        let row = &mut values[t * width..(t + 1) * width];
        let mut col = 0;
        if config.builtin {
            for &h in &config.return_horizons {
                if t >= h {
                    row[col] = log_close[t] - log_close[t - h];
                }
                col += 1;
            }
            let w = config.volatility_window;
            if t >= w {
                let sum_sq: f64 = (t + 1 - w..=t)
                    .map(|i| (log_close[i] - log_close[i - 1]).powi(2))
                    .sum();
                row[col] = (sum_sq / w as f64).sqrt();
            }
            col += 1;
            row[col] = (table.high[t] / table.low[t]).ln();
            col += 1;
            let w = config.volume_window;
            if t + 1 >= w {
                let window = &log_volume[t + 1 - w..=t];
                let mean = window.iter().sum::<f64>() / w as f64;
                let std = (window.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (w - 1) as f64)
                    .sqrt();
                row[col] = if std > 0.0 {
                    (log_volume[t] - mean) / std
                } else {
                    0.0
                };
            }
            col += 1;
            for (_, column) in &known {
                row[col] = column[t];
                col += 1;
            }
        }
        for column in &user.values {
            row[col] = column[t];
            col += 1;
        }
    }
    Ok(RawFeatures {
        names,
        roles,
        variables,
        zscore,
        values,
    })
}

/// Per-row markers of every bar: [`GAP_BEFORE`] where the calendar expected
/// bars between a bar and the one before it, [`ROLL_BEFORE`] on the first
/// bar of a new front contract.
pub fn row_markers(table: &BarTable, calendar: &ExchangeCalendar) -> Vec<u8> {
    let mut markers = vec![0u8; table.len()];
    for (t, pair) in table.ts.windows(2).enumerate() {
        if calendar.gap_before(pair[0], pair[1], table.interval) {
            markers[t + 1] |= GAP_BEFORE;
        }
    }
    for roll in &table.rolls {
        if let Ok(t) = table.ts.binary_search(&roll.ts) {
            markers[t] |= ROLL_BEFORE;
        }
    }
    markers
}

/// Builds the dataset plugins receive (see the module docs).
pub fn build_dataset(
    table: &BarTable,
    contract: &ContractSpec,
    config: &FeatureConfig,
) -> Result<Dataset, DataError> {
    build_annotated_dataset(table, contract, config).map(|a| a.dataset)
}

/// Builds the dataset and its plugin API 1.1 annex (see the module docs).
pub fn build_annotated_dataset(
    table: &BarTable,
    contract: &ContractSpec,
    config: &FeatureConfig,
) -> Result<AnnotatedDataset, DataError> {
    build_with_stats(table, contract, config).map(|(dataset, _)| dataset)
}

/// What the pipeline fitted on a training split: each feature's mean and
/// standard deviation (features were z-scored with them) and each target's
/// scale (targets were divided by it). Kept with a model so that new bars
/// are scaled as its training data was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureStats {
    pub feature_names: Vec<String>,
    pub feature_mean: Vec<f64>,
    pub feature_std: Vec<f64>,
    pub target_names: Vec<String>,
    /// Each target's training-split standard deviation.
    pub target_scales: Vec<f64>,
    /// Each categorical user column's levels (its one-hot columns, in order).
    #[serde(default, skip_serializing_if = "Levels::is_empty")]
    pub levels: Levels,
}

/// [`build_annotated_dataset`], and the statistics it fitted on the
/// training split.
pub fn build_with_stats(
    table: &BarTable,
    contract: &ContractSpec,
    config: &FeatureConfig,
) -> Result<(AnnotatedDataset, FeatureStats), DataError> {
    let invalid = |m: String| pipeline_error(table, m);
    config.check().map_err(invalid)?;
    let calendar = ExchangeCalendar::for_contract(contract)?;
    let n = table.len();
    let lookback = config.lookback();
    let horizon = config.max_target_horizon();
    let embargo = config.embargo.unwrap_or(horizon);
    let usable: Vec<usize> = (lookback..n.saturating_sub(horizon)).collect();
    let m = usable.len();
    let [train_end, valid_start, valid_end, test_start] =
        split_rows(table, &usable, config, embargo).map_err(|why| {
            invalid(format!(
                "{n} bars leave {m} usable rows (look-back {lookback}, horizon {horizon}); {why}"
            ))
        })?;

    let train_rows = &usable[..train_end];
    let levels = fit_levels(table, config, train_rows)?;
    let raw = raw_features(table, &calendar, config, &levels)?;
    check_rows(table, config, &usable)?;
    let width = raw.names.len();
    let (mut mean, mut std) = column_stats(&raw.values, width, train_rows.iter().copied());
    for (c, zscore) in raw.zscore.iter().enumerate() {
        if !zscore {
            (mean[c], std[c]) = (0.0, 1.0);
        }
    }
    let features = zscored(&raw, &usable, &mean, &std);
    let n_targets = config.target_horizons.len();
    let raw_targets = raw_targets(table, config, &usable)?;
    check_targets(table, config, &usable, &raw_targets)?;
    let (_, target_std) = column_stats(&raw_targets, n_targets, 0..train_end);
    let targets: Vec<f32> = raw_targets
        .iter()
        .enumerate()
        .map(|(i, r)| (r / target_std[i % n_targets]) as f32)
        .collect();
    if let Some(i) = features.iter().position(|x| !x.is_finite()) {
        return Err(invalid(format!(
            "feature {} of the bar at {} is not finite after normalization",
            raw.names[i % width],
            crate::timefmt::format(table.ts[usable[i / width]])
        )));
    }
    if targets.iter().any(|x| !x.is_finite()) {
        return Err(invalid("a target is not finite after normalization".into()));
    }
    let target_names = target_names(config);
    let stats = FeatureStats {
        feature_names: raw.names.clone(),
        feature_mean: mean,
        feature_std: std,
        target_names: target_names.clone(),
        target_scales: target_std.clone(),
        levels,
    };
    let all_markers = row_markers(table, &calendar);
    let annex = DatasetAnnex {
        feature_roles: raw.roles.clone(),
        feature_variables: raw.variables.clone(),
        target_horizons: config.target_horizons.iter().map(|&h| h as u32).collect(),
        target_scales: target_std.clone(),
        bar_interval_ns: table.interval.nanos(),
        row_markers: usable.iter().map(|&t| all_markers[t]).collect(),
        asset_index: 0,
    };
    let dataset = Dataset {
        symbol: RString::from(table.symbol.as_str()),
        timestamps: usable.iter().map(|&t| table.ts[t]).collect(),
        features: features.into(),
        feature_names: raw
            .names
            .iter()
            .map(|s| RString::from(s.as_str()))
            .collect::<RVec<_>>(),
        targets: targets.into(),
        target_names: target_names
            .iter()
            .map(|s| RString::from(s.as_str()))
            .collect::<RVec<_>>(),
        splits: SplitBounds {
            train_end: train_end as u64,
            valid_start: valid_start as u64,
            valid_end: valid_end as u64,
            test_start: test_start as u64,
        },
        close: usable.iter().map(|&t| table.close[t]).collect(),
        contract: contract.terms(),
        periods_per_year: table.interval.periods_per_year(),
    };
    Ok((AnnotatedDataset { dataset, annex }, stats))
}

/// The split bounds `[train_end, valid_start, valid_end, test_start]` of the
/// usable rows (indices into `usable`, bars of `table`): the test split from
/// `test_start`'s time or the last `test_fraction` of the rows, the
/// validation split from `valid_start`'s time or the `valid_fraction`
/// before it, `embargo` rows left out before each split that has rows, and
/// at least 10 training rows.
fn split_rows(
    table: &BarTable,
    usable: &[usize],
    config: &FeatureConfig,
    embargo: usize,
) -> Result<[usize; 4], String> {
    let m = usable.len();
    let date = |t: i64| crate::timefmt::format(t);
    let span = || match (usable.first(), usable.last()) {
        (Some(&a), Some(&b)) => format!("{} to {}", date(table.ts[a]), date(table.ts[b])),
        _ => "none".into(),
    };
    // The first usable row at or after `t`.
    let at = |name: &str, t: UtcTime| -> Result<usize, String> {
        let i = usable.partition_point(|&r| table.ts[r] < t.0);
        if i == 0 || i == m {
            return Err(format!(
                "{name} {} must fall after the first usable bar and on or before the last \
                 (usable bars run from {})",
                date(t.0),
                span()
            ));
        }
        Ok(i)
    };
    let too_few = || "too few for the splits and embargo".to_string();
    let (test_start, test_rows) = match config.test_start {
        Some(t) => {
            let i = at("test_start", t)?;
            (i, m - i)
        }
        None => {
            let rows = (m as f64 * config.test_fraction).round() as usize;
            (m.checked_sub(rows).ok_or_else(too_few)?, rows)
        }
    };
    // Saturating: an embargo near usize::MAX (a job spec can say so) must
    // fail the size checks, not wrap around them.
    let valid_end = test_start
        .checked_sub(if test_rows > 0 { embargo } else { 0 })
        .ok_or_else(too_few)?;
    let (valid_start, valid_rows) = match config.valid_start {
        Some(t) => {
            let i = at("valid_start", t)?;
            if i > valid_end {
                return Err(format!(
                    "valid_start {} leaves no validation rows before the test split's embargo \
                     ({embargo} rows before {})",
                    date(t.0),
                    date(table.ts[usable[test_start.min(m - 1)]])
                ));
            }
            (i, valid_end - i)
        }
        None => {
            let rows = (m as f64 * config.valid_fraction).round() as usize;
            (valid_end.checked_sub(rows).ok_or_else(too_few)?, rows)
        }
    };
    let train_end = valid_start
        .checked_sub(if valid_rows > 0 { embargo } else { 0 })
        .ok_or_else(too_few)?;
    if train_end < 10 {
        return Err(match (config.valid_start, config.test_start) {
            (None, None) => too_few(),
            _ => format!(
                "the dates leave {train_end} training rows (at least 10; usable bars run from \
                 {})",
                span()
            ),
        });
    }
    Ok([train_end, valid_start, valid_end, test_start])
}

/// The names of the targets `config` asks for (`fwd_logret_<h>`, or the
/// target's own: [`Target::name`]).
pub fn target_names(config: &FeatureConfig) -> Vec<String> {
    config
        .target_horizons
        .iter()
        .map(|&h| config.target.name(h))
        .collect()
}

/// A refusal of the feature pipeline for `table`'s symbol.
pub(crate) fn pipeline_error(table: &BarTable, problem: String) -> DataError {
    DataError::Invalid(format!("feature pipeline for {}: {problem}", table.symbol))
}

/// The raw features of `rows`, z-scored with one `mean` and `std` per column:
/// the one scaling a training dataset and new bars both go through.
pub(crate) fn zscored(raw: &RawFeatures, rows: &[usize], mean: &[f64], std: &[f64]) -> Vec<f32> {
    let width = raw.names.len();
    let mut features = Vec::with_capacity(rows.len() * width);
    for &t in rows {
        for c in 0..width {
            features.push(((raw.values[t * width + c] - mean[c]) / std[c]) as f32);
        }
    }
    features
}

/// Mean and standard deviation of each column over `rows`; a constant
/// column gets standard deviation 1 so it normalizes to 0.
fn column_stats(
    values: &[f64],
    width: usize,
    rows: impl Iterator<Item = usize> + Clone,
) -> (Vec<f64>, Vec<f64>) {
    let count = rows.clone().count().max(1) as f64;
    let mut mean = vec![0.0; width];
    for r in rows.clone() {
        for c in 0..width {
            mean[c] += values[r * width + c];
        }
    }
    mean.iter_mut().for_each(|m| *m /= count);
    let mut var = vec![0.0; width];
    for r in rows {
        for c in 0..width {
            var[c] += (values[r * width + c] - mean[c]).powi(2);
        }
    }
    let std = var
        .iter()
        .map(|v| (v / count).sqrt())
        .map(|s| if s > 1e-12 { s } else { 1.0 })
        .collect();
    (mean, std)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::ContractBook;
    use crate::synth::es_test_bars;
    use crate::table::BarInterval;

    fn bars(interval: BarInterval, n: usize) -> BarTable {
        es_test_bars(interval, n, 5)
    }

    fn calendar() -> ExchangeCalendar {
        ExchangeCalendar::for_contract(ContractBook::builtin().lookup("ES").unwrap()).unwrap()
    }

    /// Perturbs every bar after `t` and checks that no feature at or before `t` changes.
    #[test]
    fn no_feature_at_t_depends_on_data_after_t() {
        let config = FeatureConfig::default();
        let calendar = calendar();
        for interval in [BarInterval::Day, BarInterval::Minute] {
            let table = bars(interval, 600);
            let base = raw_features(&table, &calendar, &config, &Levels::new()).unwrap();
            let width = base.names.len();
            for t in [30, 250, 598] {
                let mut changed = table.clone();
                for i in t + 1..changed.len() {
                    changed.close[i] *= 1.37;
                    changed.high[i] *= 1.5;
                    changed.low[i] *= 0.5;
                    changed.open[i] *= 0.9;
                    changed.volume[i] = changed.volume[i] * 7 + 3;
                    changed.ts[i] += 3_600_000_000_000;
                }
                let after = raw_features(&changed, &calendar, &config, &Levels::new()).unwrap();
                let upto = (t + 1) * width;
                for (i, (a, b)) in base.values[..upto]
                    .iter()
                    .zip(&after.values[..upto])
                    .enumerate()
                {
                    assert!(
                        a.to_bits() == b.to_bits(),
                        "{interval:?}: feature {} of row {} changed",
                        base.names[i % width],
                        i / width
                    );
                }
                if t + 1 < table.len() {
                    assert_ne!(
                        base.values[upto..],
                        after.values[upto..],
                        "the perturbation must show after t"
                    );
                }
            }
        }
    }

    #[test]
    fn normalization_uses_only_the_training_split() {
        let table = bars(BarInterval::Day, 1000);
        let es = ContractBook::builtin().lookup("ES").unwrap().clone();
        let config = FeatureConfig::default();
        let a = build_dataset(&table, &es, &config).unwrap();
        a.check_consistent().unwrap();
        // Change every bar from the validation split on: training rows must not move.
        let first_valid_bar = table
            .ts
            .iter()
            .position(|&ts| ts == a.timestamps[a.splits.valid_start as usize])
            .unwrap();
        let mut changed = table.clone();
        for i in first_valid_bar..changed.len() {
            changed.close[i] *= 1.2;
            changed.high[i] *= 1.3;
            changed.low[i] *= 0.8;
            changed.open[i] = changed.open[i].clamp(changed.low[i], changed.high[i]);
        }
        let b = build_dataset(&changed, &es, &config).unwrap();
        let width = a.feature_names.len();
        let train_values = a.splits.train_end as usize * width;
        assert_eq!(a.features[..train_values], b.features[..train_values]);
        // Training features are z-scored: mean ≈ 0, std ≈ 1 per column.
        for c in 0..width {
            let col: Vec<f32> = (0..a.splits.train_end as usize)
                .map(|r| a.features[r * width + c])
                .collect();
            let mean = col.iter().map(|x| *x as f64).sum::<f64>() / col.len() as f64;
            assert!(mean.abs() < 1e-4, "{} mean {mean}", a.feature_names[c]);
        }
    }

    #[test]
    fn splits_are_chronological_with_an_embargo() {
        let table = bars(BarInterval::Day, 1000);
        let es = ContractBook::builtin().lookup("ES").unwrap().clone();
        let config = FeatureConfig {
            target_horizons: vec![1, 5],
            ..FeatureConfig::default()
        };
        let d = build_dataset(&table, &es, &config).unwrap();
        let s = d.splits;
        assert_eq!(s.valid_start - s.train_end, 5);
        assert_eq!(s.test_start - s.valid_end, 5);
        assert!(d.timestamps.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(d.target_names.len(), 2);
        assert_eq!(d.periods_per_year, 252.0);
        assert_eq!(d.contract.point_value, 50.0);
        let bad = FeatureConfig {
            embargo: Some(2),
            target_horizons: vec![5],
            ..FeatureConfig::default()
        };
        let e = build_dataset(&table, &es, &bad).unwrap_err().to_string();
        // Both fields are named: a refusal says which key to change.
        assert!(
            e.contains("embargo 2 is shorter") && e.contains("target_horizons (5)"),
            "{e}"
        );
        let short = bars(BarInterval::Day, 40);
        assert!(build_dataset(&short, &es, &config)
            .unwrap_err()
            .to_string()
            .contains("too few"));
    }

    #[test]
    fn splits_given_as_dates_start_at_those_bars_and_keep_the_embargo() {
        let table = bars(BarInterval::Day, 1000);
        let es = ContractBook::builtin().lookup("ES").unwrap().clone();
        let fractions = FeatureConfig {
            target_horizons: vec![1, 5],
            ..FeatureConfig::default()
        };
        let by_fraction = build_dataset(&table, &es, &fractions).unwrap();
        // The same bounds given as the times of those rows give the same splits.
        let at = |row: u64| UtcTime(by_fraction.timestamps[row as usize]);
        let s = by_fraction.splits;
        let dated = FeatureConfig {
            valid_start: Some(at(s.valid_start)),
            test_start: Some(at(s.test_start)),
            valid_fraction: 0.3,
            test_fraction: 0.01,
            ..fractions.clone()
        };
        assert_eq!(build_dataset(&table, &es, &dated).unwrap().splits, s);
        // A time between bars starts the split at the next bar; 5 rows of embargo before it.
        let between = FeatureConfig {
            test_start: Some(UtcTime(by_fraction.timestamps[600] - 1)),
            valid_start: None,
            ..fractions.clone()
        };
        let d = build_dataset(&table, &es, &between).unwrap();
        let m = d.timestamps.len() as u64;
        assert_eq!(d.splits.test_start, 600);
        assert_eq!(d.splits.valid_end, 595);
        let valid_rows = (m as f64 * 0.15).round() as u64;
        assert_eq!(d.splits.valid_start, 595 - valid_rows);
        assert_eq!(d.splits.train_end, 595 - valid_rows - 5);
        // Refusals: outside the bars, in the wrong order, into the embargo, no training rows.
        let refused = |c: FeatureConfig, expected: &str| {
            let e = build_dataset(&table, &es, &c).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected:?} in: {e}");
        };
        let last = *by_fraction.timestamps.last().unwrap();
        refused(
            FeatureConfig {
                test_start: Some(UtcTime(last + 1)),
                ..fractions.clone()
            },
            "test_start",
        );
        refused(
            FeatureConfig {
                valid_start: Some(at(500)),
                test_start: Some(at(400)),
                ..fractions.clone()
            },
            "is not before test_start",
        );
        refused(
            FeatureConfig {
                valid_start: Some(at(598)),
                test_start: Some(at(600)),
                ..fractions.clone()
            },
            "leaves no validation rows before the test split's embargo",
        );
        refused(
            FeatureConfig {
                valid_start: Some(at(12)),
                test_start: Some(at(600)),
                ..fractions.clone()
            },
            "the dates leave 7 training rows",
        );
        // Written back as nanoseconds: a stored spec reads back the same.
        let text = serde_json::to_string(&dated).unwrap();
        assert_eq!(serde_json::from_str::<FeatureConfig>(&text).unwrap(), dated);
        let from_dates: FeatureConfig =
            serde_json::from_str(r#"{"valid_start": "2019-06-01", "test_start": "2019-09-01"}"#)
                .unwrap();
        assert!(from_dates.valid_start < from_dates.test_start);
    }
}
