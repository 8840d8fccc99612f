//! Hyperparameter sweeps: a search space over a plugin's config keys, the
//! trials sampled from it, and the asynchronous successive-halving (ASHA)
//! rule that stops bad trials early. Pure: no engine runs here; the
//! orchestrator asks [`Asha::decide`] at each rung and records the answer.
//!
//! ASHA is the asynchronous variant of successive halving of Li et al., "A
//! System for Massively Parallel Hyperparameter Tuning" (MLSys 2020): rungs
//! at `grace_period · η^k` steps (and `max_steps`); a trial reaching a rung
//! goes on only when its validation metric ranks in the top `1/η` of the
//! values recorded at that rung. Here the comparison is with the trials
//! *before it* in trial order (and itself), never with later ones, so the
//! decisions do not depend on which task the device happened to run first:
//! a sweep replayed after a crash decides exactly as before. A trial whose
//! earlier trials have not yet reached (or been stopped before) its rung
//! waits for them ([`Verdict::Wait`]).
//!
//! Invariants:
//! * Trial configs are a pure function of the spec (seeded sampling), so
//!   trial `i` is the same config after a restart.
//! * A trial goes on from a rung only when its value ranks in the top
//!   `ceil(n / η)` of the `n` values recorded there by it and the trials
//!   before it (earlier trials win ties); the first at a rung always goes
//!   on, and a non-finite value never does.
//! * Only `valid_*` metrics decide.

use crate::config_schema;
use crate::selection::Mode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Most trials one sweep may have (grid points × samples).
pub const MAX_TRIALS: usize = crate::job::MAX_TASKS;

/// One dimension of a search space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Param {
    /// One of these values, drawn at random per trial.
    Choice(Vec<Value>),
    /// Every one of these values: trials are the product of the grids.
    Grid(Vec<Value>),
    /// A real number uniform in `[low, high]`.
    Uniform([f64; 2]),
    /// A real number whose logarithm is uniform in `[ln low, ln high]`.
    LogUniform([f64; 2]),
    /// An integer uniform in `low ..= high`.
    Int([i64; 2]),
}

/// How trials are stopped early.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Scheduler {
    /// Asynchronous successive halving.
    Asha(Asha),
    /// Every trial to `max_steps` (the baseline ASHA is measured against).
    RunAll { max_steps: u64 },
}

impl Scheduler {
    pub fn max_steps(&self) -> u64 {
        match self {
            Scheduler::Asha(a) => a.max_steps,
            Scheduler::RunAll { max_steps } => *max_steps,
        }
    }
}

/// ASHA's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Asha {
    /// Steps before the first rung.
    pub grace_period: u64,
    /// η: each rung keeps the top 1/η.
    #[serde(default = "three")]
    pub reduction_factor: u32,
    pub max_steps: u64,
}

fn three() -> u32 {
    3
}

fn default_samples() -> u32 {
    1
}

/// A sweep: trials of one plugin over a search space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    pub plugin: String,
    /// Config keys every trial shares (the plugin's defaults for the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// Config key (`learning_rate`, `trading.window`) → its values.
    pub space: BTreeMap<String, Param>,
    /// Random draws per grid point (1 without grids: the number of trials).
    #[serde(default = "default_samples")]
    pub samples: u32,
    #[serde(default)]
    pub seed: u64,
    /// The validation metric that ranks trials.
    pub metric: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    pub scheduler: Scheduler,
    /// Each trial one task across every asset (a pooled model) instead of
    /// one task per asset.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pooled: bool,
    /// Each trial keeps its best checkpoint by `metric` (its model); `false`
    /// keeps the newest only.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub keep_best: bool,
}

fn yes() -> bool {
    true
}

/// Why a sweep was refused; each names the key at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepError {
    #[error("plugin: must name the plugin whose configs are searched")]
    Plugin,
    #[error("space: empty; give at least one config key to search")]
    EmptySpace,
    #[error("space.{key}: the plugin's config has no such key{hint}")]
    UnknownKey { key: String, hint: String },
    #[error("space.{key}: {problem}")]
    Param { key: String, problem: String },
    #[error("space.{key}: {value} is refused by the plugin's config schema: {problem}")]
    OutOfSchema {
        key: String,
        value: String,
        problem: String,
    },
    #[error("samples: {0} is outside 1..={MAX_TRIALS}")]
    Samples(u32),
    #[error("{trials} trials (grid points × samples); at most {MAX_TRIALS}")]
    TooManyTrials { trials: usize },
    #[error(
        "metric: {0:?} is not a validation metric (valid_*); trials are ranked on validation only"
    )]
    Metric(String),
    #[error("scheduler.asha.reduction_factor: {0} must be at least 2")]
    ReductionFactor(u32),
    #[error("scheduler.asha.grace_period: {grace} must be between 1 and max_steps ({max})")]
    GracePeriod { grace: u64, max: u64 },
    #[error("scheduler: max_steps {0} is outside 1..={max}", max = crate::job::MAX_STEPS)]
    MaxSteps(u64),
    #[error("config: must be a JSON object")]
    Config,
}

impl Param {
    /// The values that bound this dimension (checked against the schema).
    fn extremes(&self) -> Vec<Value> {
        match self {
            Param::Choice(v) | Param::Grid(v) => v.clone(),
            Param::Uniform([lo, hi]) | Param::LogUniform([lo, hi]) => {
                vec![Value::from(*lo), Value::from(*hi)]
            }
            Param::Int([lo, hi]) => vec![Value::from(*lo), Value::from(*hi)],
        }
    }

    fn check(&self, key: &str) -> Result<(), SweepError> {
        let bad = |problem: String| SweepError::Param {
            key: key.to_string(),
            problem,
        };
        match self {
            Param::Choice(v) | Param::Grid(v) if v.is_empty() => {
                Err(bad("an empty list of values; give at least one".into()))
            }
            Param::Uniform([lo, hi]) | Param::LogUniform([lo, hi])
                if !(lo.is_finite() && hi.is_finite() && lo <= hi) =>
            {
                Err(bad(format!(
                    "[{lo}, {hi}] is not a range: give [low, high], finite, low ≤ high"
                )))
            }
            Param::LogUniform([lo, _]) if *lo <= 0.0 => {
                Err(bad(format!("log_uniform needs low > 0 (got {lo})")))
            }
            Param::Int([lo, hi]) if lo > hi => Err(bad(format!(
                "[{lo}, {hi}] is not a range: give [low, high] with low ≤ high"
            ))),
            _ => Ok(()),
        }
    }

    fn draw(&self, rng: &mut SplitMix) -> Value {
        match self {
            Param::Choice(v) | Param::Grid(v) => v[rng.below(v.len() as u64) as usize].clone(),
            Param::Uniform([lo, hi]) => Value::from(lo + (hi - lo) * rng.unit()),
            Param::LogUniform([lo, hi]) => {
                Value::from((lo.ln() + (hi.ln() - lo.ln()) * rng.unit()).exp())
            }
            Param::Int([lo, hi]) => {
                let span = (*hi as i128 - *lo as i128 + 1) as u128;
                let r = (rng.next() as u128) % span;
                Value::from((*lo as i128 + r as i128) as i64)
            }
        }
    }
}

/// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): enough for drawing configs, and stable across
/// versions, which a replayed sweep needs.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Sets `key` (dot-separated path) in `config` to `value`, creating objects.
fn set_path(config: &mut Value, key: &str, value: Value) {
    let mut at = config;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(map) = at else { return };
        if i + 1 == parts.len() {
            map.insert((*part).to_string(), value);
            return;
        }
        at = map
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Whether the schema describes `key` (a dot-separated path through
/// `properties`); a schema that lists no properties allows any key.
fn schema_has(schema: &Value, key: &str) -> Result<(), Vec<String>> {
    let mut at = schema;
    for part in key.split('.') {
        let Some(props) = at.get("properties").and_then(Value::as_object) else {
            return Ok(());
        };
        match props.get(part) {
            Some(next) => at = next,
            None => return Err(props.keys().cloned().collect()),
        }
    }
    Ok(())
}

impl SweepSpec {
    /// Checks the spec against the plugin's config schema and its defaults:
    /// every key exists, every range and choice is one the schema allows.
    pub fn check(&self, schema: &Value, defaults: &Value) -> Result<(), SweepError> {
        self.check_shape()?;
        let base = self.base(defaults)?;
        for (key, param) in &self.space {
            if let Err(known) = schema_has(schema, key) {
                let mut near: Vec<&String> = known
                    .iter()
                    .filter(|k| {
                        let last = key.rsplit('.').next().unwrap_or(key);
                        k.contains(last) || last.contains(k.as_str())
                    })
                    .collect();
                near.truncate(5);
                let hint = if near.is_empty() {
                    format!(" (its keys: {})", known.join(", "))
                } else {
                    format!(
                        " (did you mean {}?)",
                        near.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                return Err(SweepError::UnknownKey {
                    key: key.clone(),
                    hint,
                });
            }
            for value in param.extremes() {
                let mut config = base.clone();
                set_path(&mut config, key, value.clone());
                if let Err(v) = config_schema::check(schema, &config) {
                    return Err(SweepError::OutOfSchema {
                        key: key.clone(),
                        value: value.to_string().chars().take(60).collect(),
                        problem: v.problem,
                    });
                }
            }
        }
        Ok(())
    }

    /// The checks that need no plugin: a space, a validation metric, sane
    /// samples, steps and ASHA parameters, well-formed dimensions, at most
    /// [`MAX_TRIALS`] trials.
    pub fn check_shape(&self) -> Result<(), SweepError> {
        if self.plugin.trim().is_empty() {
            return Err(SweepError::Plugin);
        }
        if self.space.is_empty() {
            return Err(SweepError::EmptySpace);
        }
        if !self.metric.starts_with("valid_") {
            return Err(SweepError::Metric(self.metric.chars().take(80).collect()));
        }
        if self.samples == 0 || self.samples as usize > MAX_TRIALS {
            return Err(SweepError::Samples(self.samples));
        }
        let max = self.scheduler.max_steps();
        if max == 0 || max > crate::job::MAX_STEPS {
            return Err(SweepError::MaxSteps(max));
        }
        if let Scheduler::Asha(a) = &self.scheduler {
            if a.reduction_factor < 2 {
                return Err(SweepError::ReductionFactor(a.reduction_factor));
            }
            if a.grace_period == 0 || a.grace_period > a.max_steps {
                return Err(SweepError::GracePeriod {
                    grace: a.grace_period,
                    max: a.max_steps,
                });
            }
        }
        if self.config.as_ref().is_some_and(|c| !c.is_object()) {
            return Err(SweepError::Config);
        }
        for (key, param) in &self.space {
            param.check(key)?;
        }
        let trials = self.trial_count();
        if trials > MAX_TRIALS {
            return Err(SweepError::TooManyTrials { trials });
        }
        Ok(())
    }

    /// The plugin's defaults with the sweep's shared `config` over them.
    fn base(&self, defaults: &Value) -> Result<Value, SweepError> {
        let mut base = if defaults.is_object() {
            defaults.clone()
        } else {
            Value::Object(Map::new())
        };
        match &self.config {
            None => {}
            Some(Value::Object(shared)) => {
                for (k, v) in shared {
                    set_path(&mut base, k, v.clone());
                }
            }
            Some(_) => return Err(SweepError::Config),
        }
        Ok(base)
    }

    /// Grid points × samples.
    pub fn trial_count(&self) -> usize {
        let grid: usize = self
            .space
            .values()
            .map(|p| match p {
                Param::Grid(v) => v.len().max(1),
                _ => 1,
            })
            .fold(1usize, |a, b| a.saturating_mul(b));
        grid.saturating_mul(self.samples as usize)
    }

    /// The direction of the metric.
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or_else(|| Mode::for_metric(&self.metric))
    }

    /// Every trial's config overrides (the searched keys only, over the
    /// shared `config`), in trial order: grid points in key order (the last
    /// key's grid varies fastest), each drawn `samples` times; the other
    /// dimensions drawn from one seeded stream in that order.
    pub fn trials(&self) -> Vec<Value> {
        let grids: Vec<(&String, &Vec<Value>)> = self
            .space
            .iter()
            .filter_map(|(k, p)| match p {
                Param::Grid(v) => Some((k, v)),
                _ => None,
            })
            .collect();
        let points: usize = grids.iter().map(|(_, v)| v.len()).product();
        let mut rng = SplitMix(self.seed ^ 0x7469_6C69_7377_6565);
        let mut out = Vec::with_capacity(self.trial_count());
        for point in 0..points {
            for _ in 0..self.samples {
                let mut config = self.config.clone().unwrap_or(Value::Object(Map::new()));
                // Mixed radix: the last grid varies fastest.
                let mut rest = point;
                let mut chosen = Vec::with_capacity(grids.len());
                for (k, v) in grids.iter().rev() {
                    chosen.push((*k, v[rest % v.len()].clone()));
                    rest /= v.len();
                }
                for (key, param) in &self.space {
                    let value = match param {
                        Param::Grid(_) => chosen
                            .iter()
                            .find(|(k, _)| *k == key)
                            .map(|(_, v)| v.clone())
                            .unwrap_or(Value::Null),
                        other => other.draw(&mut rng),
                    };
                    set_path(&mut config, key, value);
                }
                out.push(config);
            }
        }
        out
    }
}

/// What ASHA says of a trial at a rung.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Train on to the next rung.
    Continue,
    /// Stop here (its evaluation and best checkpoint are kept).
    Stop,
    /// An earlier trial has not yet reached or passed this rung.
    Wait,
}

/// Where an earlier trial stands at a rung.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum AtRung {
    /// It recorded this value there.
    Value(f64),
    /// It was stopped before the rung (it does not count there).
    StoppedBefore,
    /// It has not got there yet.
    Pending,
}

impl Asha {
    /// The rungs in steps: `grace · η^k` below `max_steps`, then `max_steps`.
    pub fn rungs(&self) -> Vec<u64> {
        let mut rungs = Vec::new();
        let mut r = self.grace_period.max(1);
        let eta = u64::from(self.reduction_factor.max(2));
        while r < self.max_steps {
            rungs.push(r);
            r = r.saturating_mul(eta);
        }
        rungs.push(self.max_steps);
        rungs
    }

    /// The verdict on a trial that recorded `value` at a rung, given where
    /// each earlier trial stands at that rung. At the last rung every trial
    /// is done: `Stop`.
    pub fn decide(&self, mode: Mode, earlier: &[AtRung], value: f64, last_rung: bool) -> Verdict {
        if last_rung {
            return Verdict::Stop;
        }
        let mut values = Vec::with_capacity(earlier.len() + 1);
        for e in earlier {
            match e {
                AtRung::Pending => return Verdict::Wait,
                AtRung::StoppedBefore => {}
                AtRung::Value(v) => values.push(*v),
            }
        }
        let n = values.len() + 1;
        let keep = n.div_ceil(self.reduction_factor.max(2) as usize);
        // Rank: earlier trials win ties; a non-finite value ranks last.
        let better = |a: f64| {
            a.is_finite() && (!value.is_finite() || mode.improves(a, value, 0.0) || a == value)
        };
        let ahead = values.iter().filter(|&&a| better(a)).count();
        if value.is_finite() && ahead < keep {
            Verdict::Continue
        } else {
            Verdict::Stop
        }
    }
}

impl SweepSpec {
    /// The ASHA parameters, when the scheduler is ASHA.
    pub fn asha(&self) -> Option<&Asha> {
        match &self.scheduler {
            Scheduler::Asha(a) => Some(a),
            Scheduler::RunAll { .. } => None,
        }
    }

    /// The steps at which trials are decided (ASHA's rungs below
    /// `max_steps`); none for "run all".
    pub fn decision_rungs(&self) -> Vec<u64> {
        self.asha()
            .map(|a| {
                let mut r = a.rungs();
                r.pop();
                r
            })
            .unwrap_or_default()
    }

    /// The rungs a result table shows: ASHA's (with `max_steps`), or for
    /// "run all" `max_steps` alone.
    pub fn table_rungs(&self) -> Vec<u64> {
        match &self.scheduler {
            Scheduler::Asha(a) => a.rungs(),
            Scheduler::RunAll { max_steps } => vec![*max_steps],
        }
    }

    /// The job's models: one per trial, in trial order, each trained to
    /// `max_steps` (keeping its best checkpoint by the metric unless
    /// `keep_best` is off).
    pub fn models(&self) -> Vec<crate::job::ModelSpec> {
        let keep_best = self.keep_best.then(|| crate::selection::KeepBest {
            metric: self.metric.clone(),
            mode: self.mode,
            k: 1,
        });
        self.trials()
            .into_iter()
            .map(|config| crate::job::ModelSpec {
                plugin: self.plugin.clone(),
                steps: self.scheduler.max_steps(),
                config: Some(config),
                priority: 0,
                pooled: self.pooled,
                keep_best: keep_best.clone(),
                early_stopping: None,
            })
            .collect()
    }

    /// The searched keys' values in a trial's config (what a result table
    /// shows), as a JSON object keyed by the space's keys.
    pub fn searched(&self, config: &Value) -> Value {
        let mut out = Map::new();
        for key in self.space.keys() {
            let mut at = Some(config);
            for part in key.split('.') {
                at = at.and_then(|v| v.get(part));
            }
            out.insert(key.clone(), at.cloned().unwrap_or(Value::Null));
        }
        Value::Object(out)
    }

    /// ASHA's verdict on `trial` at step `rung`, from what every trial of
    /// its group recorded (`records[i]` is trial `i`'s); `None` when `rung`
    /// is not a decision rung (or the scheduler is "run all").
    pub fn verdict(&self, trial: usize, rung: u64, records: &[TrialRecord]) -> Option<Verdict> {
        let asha = self.asha()?;
        if !self.decision_rungs().contains(&rung) {
            return None;
        }
        let own = records.get(trial)?;
        let value = own.value_at(rung).unwrap_or(f64::NAN);
        let earlier: Vec<AtRung> = records[..trial].iter().map(|r| r.at(rung)).collect();
        Some(asha.decide(self.mode(), &earlier, value, false))
    }

    /// The result table of one group of trials (one asset, or the pooled
    /// tasks): every trial's value at each rung, its final value (at its
    /// last rung reached) and the best trial: the best final value among
    /// the trials that reached `max_steps` (earlier trials win ties).
    pub fn results(&self, records: &[TrialRecord]) -> SweepResults {
        let rungs = self.table_rungs();
        let max = self.scheduler.max_steps();
        let mode = self.mode();
        let trials: Vec<TrialResult> = records
            .iter()
            .map(|r| {
                let at: Vec<Option<f64>> = rungs
                    .iter()
                    .map(|&g| (r.steps_done >= g).then(|| r.value_at(g)).flatten())
                    .collect();
                let last = rungs.iter().rposition(|&g| r.steps_done >= g);
                TrialResult {
                    steps: r.steps_done,
                    final_value: last.and_then(|i| at[i]),
                    rung_values: at,
                    finished: r.steps_done >= max,
                }
            })
            .collect();
        let mut best: Option<usize> = None;
        for (i, t) in trials.iter().enumerate() {
            let Some(v) = t.final_value.filter(|v| v.is_finite() && t.finished) else {
                continue;
            };
            let better = match best.and_then(|b| trials[b].final_value) {
                None => true,
                Some(b) => mode.improves(v, b, 0.0),
            };
            if better {
                best = Some(i);
            }
        }
        SweepResults {
            rungs,
            trials,
            best,
        }
    }
}

/// What the store says of one trial, for decisions and result tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrialRecord {
    /// Steps it has recorded.
    pub steps_done: u64,
    /// It will train no further by itself (completed, failed or cancelled).
    pub ended: bool,
    /// The sweep metric by step, oldest first.
    pub history: Vec<(u64, f64)>,
}

impl TrialRecord {
    /// Its value at a rung: the latest measurement at or before that step
    /// (`None` when it measured nothing by then). Of several rows at that
    /// step the first is the training call's own; an evaluation recorded
    /// after it (at a stop or a park) does not change the value, so a trial
    /// decides the same whether or not it waited.
    pub fn value_at(&self, rung: u64) -> Option<f64> {
        let step = self
            .history
            .iter()
            .map(|(s, _)| *s)
            .filter(|s| *s <= rung)
            .max()?;
        self.history
            .iter()
            .find(|(s, _)| *s == step)
            .map(|(_, v)| *v)
    }

    /// Where it stands at a rung for the trials after it.
    pub fn at(&self, rung: u64) -> AtRung {
        if self.steps_done >= rung {
            AtRung::Value(self.value_at(rung).unwrap_or(f64::NAN))
        } else if self.ended {
            AtRung::StoppedBefore
        } else {
            AtRung::Pending
        }
    }
}

/// One row of a result table.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialResult {
    pub steps: u64,
    /// The metric at each of [`SweepResults::rungs`] it reached.
    pub rung_values: Vec<Option<f64>>,
    /// At the last rung it reached.
    pub final_value: Option<f64>,
    /// It trained to `max_steps`.
    pub finished: bool,
}

/// A group's result table.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepResults {
    pub rungs: Vec<u64>,
    pub trials: Vec<TrialResult>,
    /// The index of the best trial.
    pub best: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object", "additionalProperties": false,
            "properties": {
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "hidden_size": {"type": "integer", "minimum": 4, "maximum": 1024},
                "dropout": {"type": "number", "minimum": 0, "maximum": 0.9},
                "optimizer": {"enum": ["adamw", "sgd"]},
                "trading": {"type": "object", "properties": {
                    "window": {"type": "integer", "minimum": 2}}}
            }
        })
    }

    fn spec(space: Value, scheduler: Value) -> SweepSpec {
        serde_json::from_value(json!({
            "plugin": "tft", "space": space, "samples": 9, "seed": 7,
            "metric": "valid_loss", "scheduler": scheduler
        }))
        .unwrap()
    }

    fn asha() -> Value {
        json!({"asha": {"grace_period": 100, "reduction_factor": 3, "max_steps": 900}})
    }

    #[test]
    fn trials_are_a_pure_function_of_the_spec_within_their_ranges() {
        let s = spec(
            json!({"learning_rate": {"log_uniform": [1e-4, 1e-1]},
                   "hidden_size": {"int": [8, 64]},
                   "dropout": {"grid": [0.0, 0.1, 0.2]},
                   "trading.window": {"choice": [10, 20]}}),
            asha(),
        );
        s.check(&schema(), &json!({})).unwrap();
        let trials = s.trials();
        assert_eq!(trials.len(), 27);
        assert_eq!(trials, s.trials(), "seeded: the same trials again");
        for (i, t) in trials.iter().enumerate() {
            let lr = t["learning_rate"].as_f64().unwrap();
            assert!((1e-4..=1e-1).contains(&lr));
            let h = t["hidden_size"].as_i64().unwrap();
            assert!((8..=64).contains(&h));
            assert_eq!(t["dropout"], json!([0.0, 0.1, 0.2][i / 9]));
            assert!([10, 20].contains(&t["trading"]["window"].as_i64().unwrap()));
        }
        let other = SweepSpec { seed: 8, ..s };
        assert_ne!(other.trials(), trials);
    }

    #[test]
    fn bad_spaces_are_refused_naming_the_key() {
        let err = |space: Value, scheduler: Value| {
            spec(space, scheduler)
                .check(&schema(), &json!({}))
                .unwrap_err()
                .to_string()
        };
        let e = err(json!({"learning_rat": {"uniform": [0.001, 0.01]}}), asha());
        assert!(
            e.contains("space.learning_rat: the plugin's config has no such key"),
            "{e}"
        );
        assert!(e.contains("did you mean learning_rate"), "{e}");
        let e = err(json!({"learning_rate": {"uniform": [0.001, 2.0]}}), asha());
        assert!(e.starts_with("space.learning_rate: 2.0 is refused"), "{e}");
        let e = err(json!({"optimizer": {"choice": []}}), asha());
        assert!(e.contains("space.optimizer: an empty list"), "{e}");
        let e = err(json!({"optimizer": {"choice": ["adam"]}}), asha());
        assert!(e.starts_with("space.optimizer: \"adam\" is refused"), "{e}");
        let e = err(json!({"hidden_size": {"int": [64, 8]}}), asha());
        assert!(e.contains("not a range"), "{e}");
        let e = err(
            json!({"learning_rate": {"log_uniform": [0.0, 0.1]}}),
            asha(),
        );
        assert!(e.contains("low > 0"), "{e}");
        let e = err(
            json!({"dropout": {"uniform": [0.0, 0.5]}}),
            json!({"asha": {"grace_period": 10, "reduction_factor": 1, "max_steps": 90}}),
        );
        assert!(e.contains("reduction_factor: 1 must be at least 2"), "{e}");
        let e = err(
            json!({"dropout": {"uniform": [0.0, 0.5]}}),
            json!({"asha": {"grace_period": 100, "max_steps": 90}}),
        );
        assert!(e.contains("grace_period"), "{e}");
        let e = err(json!({}), asha());
        assert!(e.contains("space: empty"), "{e}");
        let mut s = spec(json!({"dropout": {"uniform": [0.0, 0.5]}}), asha());
        s.metric = "test_loss".into();
        assert!(s.check(&schema(), &json!({})).is_err());
    }

    #[test]
    fn rungs_grow_by_eta_and_end_at_max_steps() {
        let a = Asha {
            grace_period: 100,
            reduction_factor: 3,
            max_steps: 2700,
        };
        assert_eq!(a.rungs(), [100, 300, 900, 2700]);
        let b = Asha {
            max_steps: 1000,
            ..a
        };
        assert_eq!(b.rungs(), [100, 300, 900, 1000]);
    }

    #[test]
    fn asha_keeps_the_top_third_of_the_earlier_trials_and_waits_for_them() {
        let a = Asha {
            grace_period: 100,
            reduction_factor: 3,
            max_steps: 900,
        };
        let v = AtRung::Value;
        let min = Mode::Min;
        // The first at a rung goes on.
        assert_eq!(a.decide(min, &[], 5.0, false), Verdict::Continue);
        // Two: keep ceil(2/3) = 1, the better.
        assert_eq!(a.decide(min, &[v(1.0)], 2.0, false), Verdict::Stop);
        assert_eq!(a.decide(min, &[v(3.0)], 2.0, false), Verdict::Continue);
        // A tie goes to the earlier trial.
        assert_eq!(a.decide(min, &[v(2.0)], 2.0, false), Verdict::Stop);
        // Four: keep 2.
        let four = [v(1.0), v(4.0), v(5.0)];
        assert_eq!(a.decide(min, &four, 3.0, false), Verdict::Continue);
        assert_eq!(a.decide(min, &four, 4.5, false), Verdict::Stop);
        // Trials stopped before the rung do not count; pending ones are waited for.
        let with = [v(1.0), AtRung::StoppedBefore, v(4.0), v(5.0)];
        assert_eq!(a.decide(min, &with, 3.0, false), Verdict::Continue);
        assert_eq!(
            a.decide(min, &[v(1.0), AtRung::Pending], 0.5, false),
            Verdict::Wait
        );
        assert_eq!(
            a.decide(Mode::Max, &[v(1.0)], 2.0, false),
            Verdict::Continue
        );
        assert_eq!(a.decide(min, &[v(1.0)], f64::NAN, false), Verdict::Stop);
        assert_eq!(a.decide(min, &[], 1.0, true), Verdict::Stop);
    }

    #[test]
    fn a_trial_goes_on_exactly_when_it_ranks_in_the_top_third_so_far() {
        let a = Asha {
            grace_period: 1,
            reduction_factor: 3,
            max_steps: 9,
        };
        // 27 distinct values in a scrambled order of quality.
        let values: Vec<f64> = (0..27).map(|i| ((i * 17) % 27) as f64).collect();
        let mut passed = 0;
        for (i, &x) in values.iter().enumerate() {
            let earlier: Vec<AtRung> = values[..i].iter().map(|&e| AtRung::Value(e)).collect();
            let rank = values[..i].iter().filter(|&&e| e < x).count();
            let goes_on = a.decide(Mode::Min, &earlier, x, false) == Verdict::Continue;
            assert_eq!(goes_on, rank < (i + 1).div_ceil(3), "trial {i}");
            passed += usize::from(goes_on);
        }
        // About a third go on (early trials pass more easily, late ones less).
        assert!((5..14).contains(&passed), "{passed}");
    }

    fn record(steps: u64, ended: bool, history: &[(u64, f64)]) -> TrialRecord {
        TrialRecord {
            steps_done: steps,
            ended,
            history: history.to_vec(),
        }
    }

    #[test]
    fn verdicts_and_results_come_from_the_recorded_values_only() {
        let s = spec(json!({"dropout": {"grid": [0.0, 0.1, 0.2]}}), asha());
        let s = SweepSpec { samples: 1, ..s };
        assert_eq!(s.decision_rungs(), [100, 300]);
        assert_eq!(s.table_rungs(), [100, 300, 900]);
        let records = [
            record(900, true, &[(100, 2.0), (300, 1.5), (900, 1.2), (900, 9.0)]),
            record(100, false, &[(50, 7.0), (100, 3.0)]),
            record(40, false, &[]),
        ];
        // Trial 1 at 100: 3.0 behind 2.0, top 1 of 2: stop. Not a rung at 150.
        assert_eq!(s.verdict(1, 100, &records), Some(Verdict::Stop));
        assert_eq!(s.verdict(1, 150, &records), None);
        // Trial 2 waits for nobody at 100 but is not there yet: its own value is missing
        // (NaN), which never goes on.
        assert_eq!(s.verdict(2, 100, &records), Some(Verdict::Stop));
        let r = s.results(&records);
        assert_eq!(r.rungs, [100, 300, 900]);
        // The first row at a step is the training call's (9.0 is an evaluation after it).
        assert_eq!(r.trials[0].rung_values, [Some(2.0), Some(1.5), Some(1.2)]);
        assert_eq!(r.trials[0].final_value, Some(1.2));
        assert_eq!(r.trials[1].rung_values, [Some(3.0), None, None]);
        assert_eq!(r.trials[2].final_value, None);
        assert_eq!(r.best, Some(0), "the only trial that reached max_steps");
        assert_eq!(records[1].at(300), AtRung::Pending);
        assert_eq!(record(100, true, &[]).at(300), AtRung::StoppedBefore);
        // Each trial is a model trained to max_steps keeping its best by the metric.
        let models = s.models();
        assert_eq!(models.len(), 3);
        assert!(models.iter().all(|m| m.steps == 900
            && m.keep_best
                .as_ref()
                .is_some_and(|k| k.metric == "valid_loss" && k.k == 1)));
        assert_eq!(
            s.searched(models[2].config.as_ref().unwrap()),
            json!({"dropout": 0.2})
        );
    }

    #[test]
    fn a_job_spec_gives_a_sweep_instead_of_models_and_stores_it_so() {
        let text = r#"{"name": "s", "assets": [{"synthetic": {"rows": 100}}],
            "sweep": {"plugin": "tft", "space": {"dropout": {"grid": [0.0, 0.1]}},
                      "metric": "valid_loss", "scheduler": {"run_all": {"max_steps": 50}}}}"#;
        let spec = crate::job::JobSpec::from_json(text).unwrap();
        assert_eq!(spec.models.len(), 2);
        let stored = serde_json::to_string(&spec).unwrap();
        assert!(!stored.contains("\"models\""), "{stored}");
        let back: crate::job::JobSpec = serde_json::from_str(&stored).unwrap();
        assert_eq!(back, spec);
        let both = text.replace(
            "\"assets\"",
            "\"models\": [{\"plugin\": \"tft\", \"steps\": 5}], \"assets\"",
        );
        let e = crate::job::JobSpec::from_json(&both)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not both"), "{e}");
        let huge = text.replace(
            "\"dropout\": {\"grid\": [0.0, 0.1]}",
            "\"a\": {\"grid\": [1,2,3,4,5,6,7,8,9,10,11]}, \"b\": {\"grid\": [1,2,3,4,5,6,7,8,9,10,11]}, \"c\": {\"grid\": [1,2,3,4,5,6,7,8,9,10,11]}",
        );
        let e = crate::job::JobSpec::from_json(&huge)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1331 trials"), "{e}");
    }
}
