//! The user's columns (on the table, one value per bar: [`crate::covariates`])
//! as features, and the targets a config asks for.
//!
//! A column's value at row t becomes its feature at row t: filled (the
//! column's fill rule), transformed (real: `diff` and `pct_change` read
//! row t − 1 too, never a later one), or one-hot encoded (categorical: one
//! column `NAME=LEVEL` per level, all zero for a missing value under
//! `fill: zero` and for a level the training split never saw). So a user
//! feature at t depends on the column at t and t − 1 only; an observed-past
//! column joined from a covariate file only on rows stamped at or before
//! the bar (the as-of join).
//!
//! A categorical column's levels are declared (`levels`) or fitted on the
//! training split (sorted), like the z-score statistics, and kept with a
//! model ([`Levels`], in its `FeatureStats`) so new bars get the same
//! columns.
//!
//! Missing values left after the fill, a value a transform cannot take, a
//! static column that changes and a known-future column with a gap are
//! refused on the rows that become a model's inputs, naming the column,
//! the bar and what to change ([`check_rows`]).

use crate::column_read::ColumnValues;
use crate::columns::{ColumnKind, ColumnRole, Fill, Target, Transform};
use crate::covariates::column;
use crate::features::{pipeline_error, FeatureConfig, MAX_FEATURES, MAX_FEATURE_VALUES};
use crate::{excerpt, timefmt, BarTable, DataError};
use std::collections::{BTreeMap, BTreeSet};
use tli_plugin_api::FeatureRole;

/// Each categorical column's levels, by column name, in one-hot order.
pub type Levels = BTreeMap<String, Vec<String>>;

/// The user columns' features, before normalization.
pub(crate) struct UserFeatures {
    pub names: Vec<String>,
    pub roles: Vec<FeatureRole>,
    /// Per feature: the index of its column in `config.columns` (a
    /// categorical's one-hot columns share one: one input variable).
    pub sources: Vec<usize>,
    /// Per feature: z-scored with the training split's statistics.
    pub zscore: Vec<bool>,
    /// Per feature, one value per bar (NaN where there is none).
    pub values: Vec<Vec<f64>>,
}

fn missing_column(table: &BarTable, name: &str, what: &str) -> DataError {
    let present: Vec<&str> = table.extra.iter().map(|c| c.name.as_str()).collect();
    pipeline_error(
        table,
        format!(
            "the bars have no column {} ({what}); columns read with them: {}",
            excerpt(name),
            if present.is_empty() {
                "none".to_string()
            } else {
                present.join(", ")
            }
        ),
    )
}

/// The column's values with its fill rule applied.
fn filled(values: &ColumnValues, fill: Fill) -> ColumnValues {
    fn carry<T: Clone>(values: &[T], missing: impl Fn(&T) -> bool, limit: Option<usize>) -> Vec<T> {
        let mut out = values.to_vec();
        let mut last: Option<(usize, T)> = None;
        for (i, v) in values.iter().enumerate() {
            if !missing(v) {
                last = Some((i, v.clone()));
            } else if let Some((at, value)) = &last {
                if limit.is_none_or(|l| i - at <= l) {
                    out[i] = value.clone();
                }
            }
        }
        out
    }
    match (values, fill) {
        (_, Fill::Refuse) => values.clone(),
        (ColumnValues::Real(v), Fill::Zero) => ColumnValues::Real(
            v.iter()
                .map(|x| if x.is_nan() { 0.0 } else { *x })
                .collect(),
        ),
        // A missing label under `zero` is no level: all its one-hot columns 0.
        (ColumnValues::Text(_), Fill::Zero) => values.clone(),
        (ColumnValues::Real(v), Fill::Ffill { limit }) => {
            ColumnValues::Real(carry(v, |x| x.is_nan(), limit))
        }
        (ColumnValues::Text(v), Fill::Ffill { limit }) => {
            ColumnValues::Text(carry(v, Option::is_none, limit))
        }
    }
}

/// A real column transformed (see the module docs); NaN where it cannot be.
fn transformed(v: &[f64], transform: Transform) -> Vec<f64> {
    let before = |t: usize| if t == 0 { f64::NAN } else { v[t - 1] };
    (0..v.len())
        .map(|t| match transform {
            Transform::None | Transform::Zscore => v[t],
            Transform::Log1p if v[t] > -1.0 => v[t].ln_1p(),
            Transform::Log1p => f64::NAN,
            Transform::Diff => v[t] - before(t),
            Transform::PctChange if before(t) != 0.0 => v[t] / before(t) - 1.0,
            Transform::PctChange => f64::NAN,
        })
        .collect()
}

/// The levels of `config`'s categorical columns: declared, or the distinct
/// values (after the fill) on `rows` (the training split), sorted; more
/// than the column's `max_levels` is refused.
pub fn fit_levels(
    table: &BarTable,
    config: &FeatureConfig,
    rows: &[usize],
) -> Result<Levels, DataError> {
    let mut levels = Levels::new();
    for c in config
        .columns
        .iter()
        .filter(|c| c.kind == ColumnKind::Categorical)
    {
        if let Some(declared) = &c.levels {
            levels.insert(c.name.clone(), declared.clone());
            continue;
        }
        let values = column(table, &c.name)
            .ok_or_else(|| missing_column(table, &c.name, "a categorical input"))?;
        let ColumnValues::Text(values) = filled(values, c.fill) else {
            return Err(pipeline_error(
                table,
                format!(
                    "column {} was read as numbers but is declared categorical",
                    c.name
                ),
            ));
        };
        let seen: BTreeSet<&str> = rows
            .iter()
            .filter_map(|&r| values.get(r).and_then(|v| v.as_deref()))
            .collect();
        if seen.len() > c.max_levels {
            let shown: Vec<&str> = seen.iter().take(5).copied().collect();
            return Err(pipeline_error(
                table,
                format!(
                    "categorical column {} has {} levels in the training split ({}, …), more \
                     than max_levels {}; raise max_levels, or map rare values to one level",
                    c.name,
                    seen.len(),
                    shown.join(", "),
                    c.max_levels
                ),
            ));
        }
        if seen.is_empty() {
            return Err(pipeline_error(
                table,
                format!(
                    "categorical column {} has no value in the training split; give its levels \
                     or drop it",
                    c.name
                ),
            ));
        }
        levels.insert(
            c.name.clone(),
            seen.into_iter().map(str::to_string).collect(),
        );
    }
    Ok(levels)
}

/// The features of `config`'s user columns on every bar of `table`, with
/// categorical columns one-hot over `levels` (see the module docs).
pub(crate) fn user_features(
    table: &BarTable,
    config: &FeatureConfig,
    levels: &Levels,
) -> Result<UserFeatures, DataError> {
    let mut out = UserFeatures {
        names: Vec::new(),
        roles: Vec::new(),
        sources: Vec::new(),
        zscore: Vec::new(),
        values: Vec::new(),
    };
    for (i, c) in config.columns.iter().enumerate() {
        let values = column(table, &c.name)
            .ok_or_else(|| missing_column(table, &c.name, "the features name it"))?;
        let role = c.role.feature_role();
        // Refused before the columns are allocated (raw_features checks the whole width).
        let adding = match c.kind {
            ColumnKind::Real => 1,
            ColumnKind::Categorical => levels.get(&c.name).map_or(0, Vec::len),
        };
        let width = out.names.len() + adding;
        if width > MAX_FEATURES || table.len().saturating_mul(width) > MAX_FEATURE_VALUES {
            return Err(pipeline_error(
                table,
                format!(
                    "the user columns give more than {MAX_FEATURES} features, or {} values \
                     over {} bars, by column {}; lower a categorical column's max_levels, name \
                     fewer columns or cut the bars",
                    MAX_FEATURE_VALUES,
                    table.len(),
                    c.name
                ),
            ));
        }
        match (c.kind, filled(values, c.fill)) {
            (ColumnKind::Real, ColumnValues::Real(v)) => {
                out.names.push(c.name.clone());
                out.roles.push(role);
                out.sources.push(i);
                out.zscore.push(c.transform == Transform::Zscore);
                out.values.push(transformed(&v, c.transform));
            }
            (ColumnKind::Categorical, ColumnValues::Text(v)) => {
                let column_levels = levels.get(&c.name).ok_or_else(|| {
                    pipeline_error(
                        table,
                        format!("no levels are known for categorical column {}", c.name),
                    )
                })?;
                for level in column_levels {
                    out.names.push(format!("{}={level}", c.name));
                    out.roles.push(role);
                    out.sources.push(i);
                    out.zscore.push(false);
                    out.values.push(
                        v.iter()
                            .map(|x| f64::from(u8::from(x.as_deref() == Some(level.as_str()))))
                            .collect(),
                    );
                }
            }
            _ => {
                return Err(pipeline_error(
                    table,
                    format!(
                        "column {} was read as {} but is declared {}",
                        c.name,
                        match values {
                            ColumnValues::Real(_) => "numbers",
                            ColumnValues::Text(_) => "labels",
                        },
                        match c.kind {
                            ColumnKind::Real => "real",
                            ColumnKind::Categorical => "categorical",
                        }
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// Refuses what the user columns cannot give on `rows` (the rows that
/// become a model's inputs): a missing value left after the fill, a value
/// a transform cannot take, a static column that changes, a known-future
/// column with a gap (see the module docs).
pub(crate) fn check_rows(
    table: &BarTable,
    config: &FeatureConfig,
    rows: &[usize],
) -> Result<(), DataError> {
    let at = |t: usize| timefmt::format(table.ts[t]);
    for c in &config.columns {
        let Some(values) = column(table, &c.name) else {
            return Err(missing_column(table, &c.name, "the features name it"));
        };
        let values = filled(values, c.fill);
        let refuse = |why: String| {
            let advice = match (c.role, c.fill) {
                (ColumnRole::KnownFuture, _) => {
                    "a known_future input must be known on every bar, the bars a forecast \
                     looks ahead to included; fill the gap in the file (or fill zero if a \
                     missing value means no event)"
                }
                (_, Fill::Refuse) => "fill it in the file, or set fill zero, ffill or ffill:N",
                (_, Fill::Ffill { limit: Some(_) }) => {
                    "the gap is longer than the ffill limit; raise it or fill the file"
                }
                _ => "fill it in the file",
            };
            Err(pipeline_error(
                table,
                format!("column {} ({}) {why}; {advice}", c.name, c.role.name()),
            ))
        };
        for &t in rows {
            if values.is_missing(t) && !(c.fill == Fill::Zero && c.kind == ColumnKind::Categorical)
            {
                return refuse(format!("has no value at {}", at(t)));
            }
            if let ColumnValues::Real(v) = &values {
                let before = t.checked_sub(1).map(|p| v[p]);
                match c.transform {
                    Transform::Diff | Transform::PctChange if before.is_none_or(f64::is_nan) => {
                        return refuse(format!(
                            "has no value on the bar before {} ({} reads it)",
                            at(t),
                            c.transform.name()
                        ))
                    }
                    Transform::PctChange if before == Some(0.0) => {
                        return refuse(format!(
                            "is 0 on the bar before {}, so pct_change divides by 0 (use \
                                 diff)",
                            at(t)
                        ))
                    }
                    Transform::Log1p if v[t] <= -1.0 => {
                        return refuse(format!(
                            "is {} at {}, where log1p is undefined (≤ −1)",
                            v[t],
                            at(t)
                        ))
                    }
                    _ => {}
                }
            }
        }
        if c.role == ColumnRole::Static {
            if let Some(&first) = rows.first() {
                if let Some(&t) = rows
                    .iter()
                    .find(|&&t| !values.is_missing(t) && values.show(t) != values.show(first))
                {
                    return Err(pipeline_error(
                        table,
                        format!(
                            "column {} is static, but its value changes at {} ({} → {}); a \
                             static column holds one value per asset (make it observed_past)",
                            c.name,
                            at(t),
                            values.show(first),
                            values.show(t)
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The raw targets of `rows` (`rows × horizons`, row-major): NaN where the
/// bars end before the horizon or a target column has no value.
pub(crate) fn raw_targets(
    table: &BarTable,
    config: &FeatureConfig,
    rows: &[usize],
) -> Result<Vec<f64>, DataError> {
    let n = table.len();
    let log_close: Vec<f64> = table.close.iter().map(|c| c.ln()).collect();
    let target_column = match &config.target {
        Target::Column(name) => match column(table, name) {
            Some(ColumnValues::Real(v)) => Some(v),
            Some(ColumnValues::Text(_)) => {
                return Err(pipeline_error(
                    table,
                    format!("target column {name} holds labels; a target is a number"),
                ))
            }
            None => return Err(missing_column(table, name, "the target")),
        },
        _ => None,
    };
    let mut out = Vec::with_capacity(rows.len() * config.target_horizons.len());
    for &t in rows {
        for &h in &config.target_horizons {
            let end = t + h;
            if end >= n {
                out.push(f64::NAN);
                continue;
            }
            let ret = || log_close[end] - log_close[t];
            out.push(match &config.target {
                Target::FwdLogret => ret(),
                Target::FwdSign => {
                    let r = ret();
                    if r > 0.0 {
                        1.0
                    } else if r < 0.0 {
                        -1.0
                    } else {
                        0.0
                    }
                }
                Target::FwdRealizedVol => {
                    let sum: f64 = (t + 1..=end)
                        .map(|i| (log_close[i] - log_close[i - 1]).powi(2))
                        .sum();
                    (sum / h as f64).sqrt()
                }
                Target::FwdRange => {
                    let high = table.high[t + 1..=end]
                        .iter()
                        .fold(f64::MIN, |a, &b| a.max(b));
                    let low = table.low[t + 1..=end]
                        .iter()
                        .fold(f64::MAX, |a, &b| a.min(b));
                    (high / low).ln()
                }
                Target::Column(_) => target_column.map_or(f64::NAN, |v| v[end]),
            });
        }
    }
    Ok(out)
}

/// Refuses a missing target on a training row, naming it.
pub(crate) fn check_targets(
    table: &BarTable,
    config: &FeatureConfig,
    rows: &[usize],
    targets: &[f64],
) -> Result<(), DataError> {
    let width = config.target_horizons.len();
    if let Some(i) = targets.iter().position(|x| !x.is_finite()) {
        let (t, h) = (rows[i / width], config.target_horizons[i % width]);
        let what = match &config.target {
            Target::Column(name) => format!("target column {name} has no value"),
            _ => "the target is not a finite number".to_string(),
        };
        return Err(pipeline_error(
            table,
            format!(
                "{what} at {} (the {h}-bar-ahead target of the bar at {}); every training row \
                 needs its target: fill the column, or end the bars before the gap",
                table
                    .ts
                    .get(t + h)
                    .map_or_else(|| "the end".to_string(), |&ts| timefmt::format(ts)),
                timefmt::format(table.ts[t])
            ),
        ));
    }
    Ok(())
}
