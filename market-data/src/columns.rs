//! A user's own inputs, as a feature config names them: columns of the bar
//! file (CSV, Parquet) or of a separate covariate file, each with a role, a
//! kind, a transform and a fill rule ([`UserColumn`]), and the target a model
//! forecasts ([`Target`]). These are the settings and their checks; reading
//! the columns is [`crate::column_read`], joining them to bars
//! [`crate::covariates`], turning them into features [`crate::features`].
//!
//! * **role**: `observed_past` (known at the bar's close: an order-flow
//!   imbalance, another asset's return), `known_future` (known in advance
//!   for every bar ahead: a scheduled release, an auction day) or `static`
//!   (constant for the asset: a sector, a contract's margin class).
//! * **kind**: `real` (a number) or `categorical` (a label; one-hot columns
//!   `NAME=LEVEL` that form one input variable, an embedding for the TFT).
//! * **transform** (real columns): `none`, `zscore` (with the training
//!   split's mean and standard deviation), `log1p`, `diff` (x_t − x_{t−1}),
//!   `pct_change` (x_t / x_{t−1} − 1).
//! * **fill** of missing values (an empty CSV field, `NaN`, a Parquet null):
//!   `refuse` (the default: a missing value is an error naming the row),
//!   `zero`, `ffill` or `ffill:N` (the last value, carried at most N bars).
//!
//! The rules a config must follow are in [`UserColumn::check`]; every
//! refusal says what to change.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use tli_plugin_api::FeatureRole;

/// Most user columns a feature config may name.
pub const MAX_USER_COLUMNS: usize = 256;
/// Longest column name, in bytes.
pub const MAX_COLUMN_NAME_BYTES: usize = 128;
/// The default cap on a categorical column's levels.
pub const DEFAULT_MAX_LEVELS: usize = 32;
/// The highest cap a config may set on a categorical column's levels.
pub const MAX_LEVELS_CAP: usize = 1024;

/// Why a user column, a target or the feature set was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ColumnError {
    #[error("columns: {count} columns named; at most {MAX_USER_COLUMNS}")]
    TooMany { count: usize },
    #[error(
        "columns: a column name must be 1 to {MAX_COLUMN_NAME_BYTES} bytes without '=' or \
         control characters; got {name:?}"
    )]
    BadName { name: String },
    #[error("columns: {name:?} is named twice (or clashes with a built-in feature)")]
    Duplicate { name: String },
    #[error("column {name:?}: {problem}")]
    Rule { name: String, problem: String },
    #[error("no features: builtin is false and no columns are named; name a column or keep the built-in features")]
    NoFeatures,
    #[error("target: {0}")]
    Target(String),
}

/// What a user column is, for a forecaster (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnRole {
    ObservedPast,
    KnownFuture,
    Static,
}

impl ColumnRole {
    pub fn feature_role(self) -> FeatureRole {
        match self {
            Self::ObservedPast => FeatureRole::ObservedPast,
            Self::KnownFuture => FeatureRole::KnownFuture,
            Self::Static => FeatureRole::Static,
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        FeatureRole::parse(text).map(|r| match r {
            FeatureRole::ObservedPast => Self::ObservedPast,
            FeatureRole::KnownFuture => Self::KnownFuture,
            FeatureRole::Static => Self::Static,
        })
    }

    pub fn name(self) -> &'static str {
        self.feature_role().name()
    }
}

/// A number, or a label.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnKind {
    #[default]
    Real,
    Categorical,
}

/// How a real column's values become a feature (see the module docs).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    #[default]
    None,
    Zscore,
    Log1p,
    Diff,
    PctChange,
}

impl Transform {
    pub const ALL: [Self; 5] = [
        Self::None,
        Self::Zscore,
        Self::Log1p,
        Self::Diff,
        Self::PctChange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Zscore => "zscore",
            Self::Log1p => "log1p",
            Self::Diff => "diff",
            Self::PctChange => "pct_change",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == text)
    }
}

/// What a missing value becomes (see the module docs). Written as text:
/// `refuse`, `zero`, `ffill`, `ffill:N`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Fill {
    #[default]
    Refuse,
    Zero,
    /// The last value, carried at most `limit` bars (`None`: without limit).
    Ffill {
        limit: Option<usize>,
    },
}

impl Fill {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "refuse" => Ok(Self::Refuse),
            "zero" => Ok(Self::Zero),
            "ffill" => Ok(Self::Ffill { limit: None }),
            other => match other.strip_prefix("ffill:").map(str::parse::<usize>) {
                Some(Ok(limit)) if limit > 0 => Ok(Self::Ffill { limit: Some(limit) }),
                _ => Err(format!(
                    "fill {:?}: use refuse, zero, ffill or ffill:N (N ≥ 1 bars)",
                    crate::excerpt(other)
                )),
            },
        }
    }
}

impl fmt::Display for Fill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refuse => f.write_str("refuse"),
            Self::Zero => f.write_str("zero"),
            Self::Ffill { limit: None } => f.write_str("ffill"),
            Self::Ffill { limit: Some(n) } => write!(f, "ffill:{n}"),
        }
    }
}

impl TryFrom<String> for Fill {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text)
    }
}

impl From<Fill> for String {
    fn from(fill: Fill) -> String {
        fill.to_string()
    }
}

fn default_max_levels() -> usize {
    DEFAULT_MAX_LEVELS
}

fn is_default_max_levels(n: &usize) -> bool {
    *n == DEFAULT_MAX_LEVELS
}

/// One column of the user's as a model input (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserColumn {
    /// The column's name in its file (matched without regard to case).
    pub name: String,
    pub role: ColumnRole,
    #[serde(default, skip_serializing_if = "is_default")]
    pub kind: ColumnKind,
    #[serde(default, skip_serializing_if = "is_default")]
    pub transform: Transform,
    #[serde(default, skip_serializing_if = "is_default")]
    pub fill: Fill,
    /// A covariate file (CSV or Parquet with a timestamp column) the
    /// column comes from, joined to the bars; `None`: the bar file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// The IANA time zone of the covariate file's timestamps written
    /// without one (default: the asset's `tz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// A categorical column's levels, in order (`None`: the distinct
    /// values of the training split, sorted). Give them when a pooled task's
    /// assets must share one-hot columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Vec<String>>,
    /// The most levels a categorical column may have.
    #[serde(
        default = "default_max_levels",
        skip_serializing_if = "is_default_max_levels"
    )]
    pub max_levels: usize,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl UserColumn {
    /// A real column of the bar file with the given role and no transform.
    pub fn new(name: &str, role: ColumnRole) -> Self {
        Self {
            name: name.to_string(),
            role,
            kind: ColumnKind::Real,
            transform: Transform::None,
            fill: Fill::Refuse,
            file: None,
            tz: None,
            levels: None,
            max_levels: DEFAULT_MAX_LEVELS,
        }
    }

    /// The column from the command line: `NAME:ROLE[:OPTION…]`, options
    /// being `real` or `categorical`, a transform, `fill=RULE`,
    /// `levels=N` (the cap) and, last, `file=PATH` (the rest of the text).
    pub fn parse_arg(text: &str) -> Result<Self, String> {
        let usage = "use NAME:ROLE[:OPTION…] with ROLE observed_past, known_future or static \
                     and options real|categorical, none|zscore|log1p|diff|pct_change, \
                     fill=refuse|zero|ffill|ffill:N, levels=N, file=PATH (last)";
        let (head, file) = match text.find(":file=") {
            Some(i) => (&text[..i], Some(&text[i + ":file=".len()..])),
            None => (text, None),
        };
        let mut parts = head.split(':');
        let name = parts.next().unwrap_or_default();
        let role_text = parts
            .next()
            .ok_or_else(|| format!("{}: no role; {usage}", crate::excerpt(text)))?;
        let role = ColumnRole::parse(role_text).ok_or_else(|| {
            format!(
                "{}: role {}; {usage}",
                crate::excerpt(text),
                crate::excerpt(role_text)
            )
        })?;
        let mut column = Self::new(name, role);
        // `ffill:N` holds a colon of its own.
        let rest: Vec<&str> = parts.collect();
        let mut i = 0;
        while i < rest.len() {
            let option = rest[i];
            if let Some(transform) = Transform::parse(option) {
                column.transform = transform;
            } else if option == "real" {
                column.kind = ColumnKind::Real;
            } else if option == "categorical" {
                column.kind = ColumnKind::Categorical;
            } else if let Some(rule) = option.strip_prefix("fill=") {
                let rule = match (rule, rest.get(i + 1)) {
                    ("ffill", Some(n)) if n.parse::<usize>().is_ok() => {
                        i += 1;
                        format!("ffill:{n}")
                    }
                    _ => rule.to_string(),
                };
                column.fill = Fill::parse(&rule)?;
            } else if let Some(n) = option.strip_prefix("levels=") {
                column.max_levels = n
                    .parse()
                    .map_err(|_| format!("levels={}: a number of levels", crate::excerpt(n)))?;
            } else {
                return Err(format!(
                    "{}: option {}; {usage}",
                    crate::excerpt(text),
                    crate::excerpt(option)
                ));
            }
            i += 1;
        }
        if let Some(file) = file {
            if file.is_empty() {
                return Err(format!("{}: file= needs a path", crate::excerpt(text)));
            }
            column.file = Some(PathBuf::from(file));
        }
        Ok(column)
    }

    /// The rules of a column on its own (see the module docs).
    pub fn check(&self) -> Result<(), ColumnError> {
        let name = &self.name;
        if name.is_empty()
            || name.len() > MAX_COLUMN_NAME_BYTES
            || name.contains('=')
            || name.chars().any(char::is_control)
        {
            return Err(ColumnError::BadName {
                name: crate::excerpt(name),
            });
        }
        let rule = |problem: &str| {
            Err(ColumnError::Rule {
                name: name.clone(),
                problem: problem.to_string(),
            })
        };
        if self.kind == ColumnKind::Categorical && self.transform != Transform::None {
            return rule(&format!(
                "a categorical column has no transform (got {}); it becomes one-hot columns",
                self.transform.name()
            ));
        }
        if self.role == ColumnRole::Static {
            if matches!(
                self.transform,
                Transform::Zscore | Transform::Diff | Transform::PctChange
            ) {
                return rule(&format!(
                    "a static column is constant for its asset, so {} would make it 0 or \
                     undefined; use none or log1p",
                    self.transform.name()
                ));
            }
            if self.file.is_some() {
                return rule(
                    "a static column comes from the asset's own bar file (a covariate file is \
                     shared by every asset); drop file or make it observed_past",
                );
            }
        }
        if self.role == ColumnRole::KnownFuture && matches!(self.fill, Fill::Ffill { .. }) {
            return rule(
                "a known_future column must have a value on every bar (a value carried forward \
                 is not known in advance); use fill refuse, or zero if a missing value means \
                 \"no event\"",
            );
        }
        if let Some(tz) = &self.tz {
            if self.file.is_none() {
                return rule("tz is the zone of a covariate file's timestamps; give file too");
            }
            if let Err(e) = crate::zones::LocalZone::parse(tz) {
                return rule(&e.to_string());
            }
        }
        if self.max_levels < 2 || self.max_levels > MAX_LEVELS_CAP {
            return rule(&format!(
                "max_levels {} must be 2 to {MAX_LEVELS_CAP}",
                self.max_levels
            ));
        }
        if let Some(levels) = &self.levels {
            if self.kind != ColumnKind::Categorical {
                return rule("levels are for a categorical column; add kind categorical");
            }
            if levels.is_empty() || levels.len() > self.max_levels {
                return rule(&format!(
                    "{} levels given; 1 to max_levels {}",
                    levels.len(),
                    self.max_levels
                ));
            }
            let mut seen = std::collections::HashSet::new();
            if let Some(repeat) = levels.iter().find(|l| !seen.insert(l.as_str())) {
                return rule(&format!("level {} is given twice", crate::excerpt(repeat)));
            }
        }
        Ok(())
    }
}

/// What a model forecasts: forward returns (the default), another built-in
/// quantity over the bars ahead, or a column of the bar file. Written as
/// `"fwd_logret"`, `"fwd_realized_vol"`, `"fwd_range"`, `"fwd_sign"` or
/// `{"column": "NAME"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// ln(close_{t+h} / close_t).
    #[default]
    FwdLogret,
    /// √(mean of squared 1-bar log returns of bars t+1 … t+h).
    FwdRealizedVol,
    /// ln(max high / min low) over bars t+1 … t+h.
    FwdRange,
    /// The sign of ln(close_{t+h} / close_t): −1, 0 or 1.
    FwdSign,
    /// The column's value h bars ahead.
    Column(String),
}

impl Target {
    /// The target's name at horizon `h` (`fwd_logret_5`, `fwd_vix_5`).
    pub fn name(&self, h: usize) -> String {
        match self {
            Self::FwdLogret => format!("fwd_logret_{h}"),
            Self::FwdRealizedVol => format!("fwd_realized_vol_{h}"),
            Self::FwdRange => format!("fwd_range_{h}"),
            Self::FwdSign => format!("fwd_sign_{h}"),
            Self::Column(c) => format!("fwd_{c}_{h}"),
        }
    }

    /// `fwd_logret`, …, or `column:NAME` (the command line's form).
    pub fn parse_arg(text: &str) -> Result<Self, String> {
        match text {
            "fwd_logret" => Ok(Self::FwdLogret),
            "fwd_realized_vol" => Ok(Self::FwdRealizedVol),
            "fwd_range" => Ok(Self::FwdRange),
            "fwd_sign" => Ok(Self::FwdSign),
            other => match other.strip_prefix("column:") {
                Some(name) if !name.is_empty() => Ok(Self::Column(name.to_string())),
                _ => Err(format!(
                    "target {}: use fwd_logret, fwd_realized_vol, fwd_range, fwd_sign or \
                     column:NAME",
                    crate::excerpt(other)
                )),
            },
        }
    }

    /// The column of the bar file the target reads, if any.
    pub fn column(&self) -> Option<&str> {
        match self {
            Self::Column(c) => Some(c),
            _ => None,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == Self::FwdLogret
    }
}

/// The rules of a set of columns: each column's, unique names that are not
/// `builtin` feature names, at most [`MAX_USER_COLUMNS`], at least one
/// feature, and a target column with a sane name.
pub fn check_columns(
    columns: &[UserColumn],
    builtin_names: &[String],
    target: &Target,
) -> Result<(), ColumnError> {
    if columns.len() > MAX_USER_COLUMNS {
        return Err(ColumnError::TooMany {
            count: columns.len(),
        });
    }
    if columns.is_empty() && builtin_names.is_empty() {
        return Err(ColumnError::NoFeatures);
    }
    let mut seen: std::collections::HashSet<String> = builtin_names
        .iter()
        .map(|n| n.to_ascii_lowercase())
        .collect();
    for column in columns {
        column.check()?;
        if !seen.insert(column.name.to_ascii_lowercase()) {
            return Err(ColumnError::Duplicate {
                name: column.name.clone(),
            });
        }
    }
    if let Target::Column(name) = target {
        if name.is_empty()
            || name.len() > MAX_COLUMN_NAME_BYTES
            || name.chars().any(char::is_control)
        {
            return Err(ColumnError::Target(format!(
                "column name {} must be 1 to {MAX_COLUMN_NAME_BYTES} bytes",
                crate::excerpt(name)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_reads_from_json_with_defaults_and_writes_back_the_same() {
        let c: UserColumn =
            serde_json::from_str(r#"{"name": "ofi", "role": "observed_past", "fill": "ffill:3"}"#)
                .unwrap();
        assert_eq!(c.kind, ColumnKind::Real);
        assert_eq!(c.transform, Transform::None);
        assert_eq!(c.fill, Fill::Ffill { limit: Some(3) });
        assert_eq!(c.max_levels, DEFAULT_MAX_LEVELS);
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(
            text,
            r#"{"name":"ofi","role":"observed_past","fill":"ffill:3"}"#
        );
        assert_eq!(serde_json::from_str::<UserColumn>(&text).unwrap(), c);
        let e = serde_json::from_str::<UserColumn>(r#"{"name": "x", "role": "past"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `past`"), "{e}");
        let e = serde_json::from_str::<UserColumn>(
            r#"{"name": "x", "role": "static", "fill": "ffill:0"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("use refuse, zero, ffill or ffill:N"), "{e}");
    }

    #[test]
    fn the_command_line_form_names_every_option() {
        let c = UserColumn::parse_arg("event:known_future:categorical:fill=zero:levels=4").unwrap();
        assert_eq!(c.role, ColumnRole::KnownFuture);
        assert_eq!(c.kind, ColumnKind::Categorical);
        assert_eq!(c.fill, Fill::Zero);
        assert_eq!(c.max_levels, 4);
        let c =
            UserColumn::parse_arg("vix:observed_past:log1p:fill=ffill:5:file=/d/a:b.csv").unwrap();
        assert_eq!(c.transform, Transform::Log1p);
        assert_eq!(c.fill, Fill::Ffill { limit: Some(5) });
        assert_eq!(c.file, Some(PathBuf::from("/d/a:b.csv")));
        for (bad, expected) in [
            ("ofi", "no role"),
            ("ofi:past", "role \"past\""),
            ("ofi:static:squared", "option \"squared\""),
            ("ofi:static:file=", "file= needs a path"),
        ] {
            let e = UserColumn::parse_arg(bad).unwrap_err();
            assert!(e.contains(expected), "{bad}: {e}");
        }
    }

    #[test]
    fn each_rule_is_refused_with_what_to_change() {
        let refused = |c: UserColumn, expected: &str| {
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(expected), "{expected:?} in: {e}");
        };
        let base = UserColumn::new("x", ColumnRole::ObservedPast);
        refused(
            UserColumn {
                kind: ColumnKind::Categorical,
                transform: Transform::Zscore,
                ..base.clone()
            },
            "a categorical column has no transform",
        );
        refused(
            UserColumn {
                role: ColumnRole::Static,
                transform: Transform::Zscore,
                ..base.clone()
            },
            "use none or log1p",
        );
        refused(
            UserColumn {
                role: ColumnRole::KnownFuture,
                fill: Fill::Ffill { limit: None },
                ..base.clone()
            },
            "must have a value on every bar",
        );
        refused(
            UserColumn {
                levels: Some(vec!["a".into()]),
                ..base.clone()
            },
            "add kind categorical",
        );
        refused(
            UserColumn {
                name: "a=b".into(),
                ..base.clone()
            },
            "without '='",
        );
        let e = check_columns(
            &[base.clone(), UserColumn::new("X", ColumnRole::Static)],
            &[],
            &Target::FwdLogret,
        )
        .unwrap_err();
        assert!(matches!(e, ColumnError::Duplicate { .. }), "{e}");
        let e = check_columns(
            &[UserColumn::new("range", ColumnRole::Static)],
            &["range".into()],
            &Target::FwdLogret,
        )
        .unwrap_err();
        assert!(e.to_string().contains("clashes with a built-in"), "{e}");
        assert_eq!(
            check_columns(&[], &[], &Target::FwdLogret),
            Err(ColumnError::NoFeatures)
        );
    }

    #[test]
    fn targets_read_as_names_or_a_column() {
        let t: Target = serde_json::from_str(r#""fwd_realized_vol""#).unwrap();
        assert_eq!(t, Target::FwdRealizedVol);
        assert_eq!(t.name(5), "fwd_realized_vol_5");
        let t: Target = serde_json::from_str(r#"{"column": "basis"}"#).unwrap();
        assert_eq!(t.name(1), "fwd_basis_1");
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"column":"basis"}"#);
        assert_eq!(Target::parse_arg("column:basis").unwrap(), t);
        assert!(Target::parse_arg("vol").unwrap_err().contains("fwd_sign"));
    }
}
