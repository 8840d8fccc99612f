//! A greedy trading agent applied to new rows: what the RL plugins'
//! predictors (plugin API 1.2) share. It runs the walk of
//! [`eval::trading_walk`](super::eval::trading_walk) over the rows of a
//! prediction batch, and continues the same walk bar by bar over a stream.
//!
//! **Walk.** In dataset `i` of a batch the agent starts flat at row
//! `max(predict_from, window − 1)` (rows before it are context only; row
//! `window − 1` is the first with a full look-back window) and acts on every
//! row from there to the last. At row `t` it sees the trading environment's
//! observation (feature rows `t − window + 1 ..= t`, oldest first, then
//! `position / max_contracts` for the position it holds coming in) and takes
//! the action with the highest score (the first on ties), which is the
//! position `action − max_contracts` held over `(t, t+1]`. Every decision row
//! is scored for every possible incoming position in one call of `scores` per
//! `chunk` decision rows, aligned on the first decision: the batching of the
//! evaluation walk, so that the same rows and the same `chunk` give the same
//! scores bit for bit. Row markers (gaps, rolls) are ignored, as the trading
//! environment ignores them.
//!
//! **P&L.** Each decision row `t` also reports the currency P&L of the bar
//! that ends at `t`, earned by the position chosen at `t − 1` net of what
//! the environment charged for trading into it:
//!
//! ```text
//! pnl_t = p_{t−1} · point_value · (close[t] − close[t−1]) − cost · |p_{t−1} − p_{t−2}|
//! cost  = commission_per_contract + slippage_ticks · tick_size · point_value
//! ```
//!
//! It is 0 on the first decision row (the agent comes in flat). So `pnl_t`
//! is the environment's P&L of the decision taken at `t − 1`, reported once
//! its bar has closed, computed with the same floating-point operations as
//! [`metrics::strategy_pnl`](crate::metrics::strategy_pnl): the values of
//! rows `first + 1 ..= last` are, bit for bit, the per-period P&L of the
//! positions of rows `first ..= last − 1`. It is NaN when the dataset's
//! contract terms cannot price a trade (a tick size or point value that is
//! not finite and positive).
//!
//! **Stream.** [`TradingAgent::stream`] takes the next rows of each dataset
//! and keeps, per dataset index, the rows streamed so far (a count), the last
//! `max(window − 1, 1)` feature rows and closes, and the positions of the
//! last two decisions, so that the decisions over a stream equal those of one
//! walk over the same rows. In a stream `predict_from` counts rows of the
//! stream (as output rows are numbered); it can be sent with every call or
//! with the first. Before the agent's first decision a new value replaces the
//! old one; once it has acted from row `s`, a value above `s` (which would
//! restart it) is refused: [`reset`](TradingAgent::reset) and stream again.

use crate::env::TradingConfig;
use crate::metrics::CostTerms;
use crate::rl::eval::argmax;
use std::ops::Range;
use tli_plugin_api::{task_inputs::column, Dataset, PluginError, TaskInputs};

/// One decision of the agent.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Its row: in the batch's dataset ([`TradingAgent::walk`]) or in the
    /// stream ([`TradingAgent::stream`]).
    pub row: u64,
    /// The action taken (the index of the largest score).
    pub action: usize,
    /// The position held after it, in contracts (`action − max_contracts`).
    pub position: i32,
    /// Currency P&L of the bar ending at this row (module docs).
    pub pnl: f64,
    /// The action scores at the position held coming in (one per action).
    pub scores: Vec<f32>,
}

/// Positions of the last two decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Carry {
    /// True once the agent has made a decision.
    acted: bool,
    /// `p_{t−1}`: held now.
    position: i32,
    /// `p_{t−2}`: held before the last decision.
    previous: i32,
}

impl Carry {
    /// P&L of the bar ending at local row `row` (module docs).
    fn bar_pnl(&self, close: &[f64], row: usize, terms: Option<CostTerms>) -> f64 {
        if !self.acted {
            return 0.0;
        }
        let Some(terms) = terms else {
            return f64::NAN;
        };
        let (p, prev) = (f64::from(self.position), f64::from(self.previous));
        // As metrics::strategy_pnl computes each period.
        let paid = terms.cost_per_contract * (p - prev).abs();
        p * terms.point_value * (close[row] - close[row - 1]) - paid
    }
}

/// What the agent keeps of one streamed dataset.
#[derive(Clone, Debug, Default)]
struct Stream {
    /// Rows streamed so far (the stream row number of the next one).
    streamed: u64,
    /// The last rows streamed (at most `max(window − 1, 1)`), flattened.
    features: Vec<f32>,
    close: Vec<f64>,
    /// `predict_from` as last given (stream rows).
    from: u64,
    /// The stream row of the first decision.
    started: Option<u64>,
    carry: Carry,
}

/// The greedy agent over the trading environment's observations (module docs).
#[derive(Clone, Debug)]
pub struct TradingAgent {
    config: TradingConfig,
    feature_names: Vec<String>,
    chunk: usize,
    streams: Vec<Stream>,
}

/// The cost terms of `dataset`'s contract, `None` when they cannot price a trade.
fn cost_terms(dataset: &Dataset, config: &TradingConfig) -> Option<CostTerms> {
    let tick = dataset.contract.tick_size;
    if !(tick.is_finite() && tick > 0.0) {
        return None;
    }
    CostTerms::from_contract(
        &dataset.contract,
        config.commission_per_contract,
        config.slippage_ticks,
    )
    .ok()
}

/// Writes the observation of local row `row` with `position` held coming in,
/// as [`trading_observation`](super::eval::trading_observation) does.
fn observation(
    features: &[f32],
    width: usize,
    config: &TradingConfig,
    row: usize,
    position: i32,
    out: &mut [f32],
) {
    let first = (row + 1 - config.window) * width;
    let (head, tail) = out.split_at_mut(out.len() - 1);
    head.copy_from_slice(&features[first..first + head.len()]);
    tail[0] = position as f32 / config.max_contracts as f32;
}

impl TradingAgent {
    /// An agent acting in the environment `config` on rows with the features
    /// `feature_names` (the model's, in order), scoring `chunk` decision rows
    /// per call (the evaluation walk's chunk).
    pub fn new(
        config: TradingConfig,
        feature_names: Vec<String>,
        chunk: usize,
    ) -> Result<Self, PluginError> {
        config.validate()?;
        if feature_names.is_empty() {
            return Err(PluginError::invalid_data(
                "the model's schema has no feature columns",
            ));
        }
        Ok(Self {
            config,
            feature_names,
            chunk: chunk.max(1),
            streams: Vec::new(),
        })
    }

    pub fn config(&self) -> &TradingConfig {
        &self.config
    }

    /// `2 · max_contracts + 1`.
    pub fn num_actions(&self) -> usize {
        self.config.num_actions()
    }

    /// `window · features + 1`.
    pub fn obs_dim(&self) -> usize {
        self.config.window * self.feature_names.len() + 1
    }

    /// Bytes of what the streams keep.
    pub fn stream_bytes(&self) -> u64 {
        self.streams
            .iter()
            .map(|s| (s.features.len() * 4 + s.close.len() * 8) as u64)
            .sum()
    }

    /// Forgets every stream.
    pub fn reset(&mut self) {
        self.streams.clear();
    }

    /// Dataset `index` of `batch`, checked: consistent, with the model's features.
    fn dataset<'a>(&self, batch: &'a TaskInputs, index: usize) -> Result<&'a Dataset, PluginError> {
        let dataset: &Dataset = &batch.datasets[index];
        dataset
            .check_consistent()
            .map_err(|e| PluginError::new(e.code, format!("{}: {}", dataset.symbol, e.message)))?;
        if dataset
            .feature_names
            .iter()
            .map(|s| s.as_str())
            .ne(self.feature_names.iter().map(String::as_str))
        {
            return Err(PluginError::invalid_data(format!(
                "{}: the rows have features [{}] but the model was trained on [{}]; \
                 compute the model's features, in its order",
                dataset.symbol,
                dataset.feature_names.join(", "),
                self.feature_names.join(", ")
            )));
        }
        Ok(dataset)
    }

    /// The walk over dataset `index` of `batch` (module docs): one decision
    /// per row from `max(predict_from, window − 1)` to the last, numbered by
    /// dataset row. Keeps no state.
    pub fn walk(
        &self,
        batch: &TaskInputs,
        index: usize,
        mut scores: impl FnMut(&[f32], usize) -> Result<Vec<f32>, PluginError>,
    ) -> Result<Vec<Decision>, PluginError> {
        let dataset = self.dataset(batch, index)?;
        let rows = dataset.rows();
        let start = batch.predict_from(index).max(self.config.window - 1);
        if start >= rows {
            return Ok(Vec::new());
        }
        let terms = cost_terms(dataset, &self.config);
        let mut carry = Carry::default();
        self.act(
            (&dataset.features, &dataset.close, &dataset.symbol),
            start..rows,
            0,
            &mut carry,
            terms,
            &mut scores,
        )
    }

    /// The next rows of every dataset of `bars` (module docs): the decisions
    /// on them, per dataset, numbered by stream row. Nothing changes when
    /// an error is returned.
    pub fn stream(
        &mut self,
        bars: &TaskInputs,
        mut scores: impl FnMut(&[f32], usize) -> Result<Vec<f32>, PluginError>,
    ) -> Result<Vec<Vec<Decision>>, PluginError> {
        let window = self.config.window;
        let keep = (window - 1).max(1);
        let width = self.feature_names.len();
        let mut next = self.streams.clone();
        if next.len() < bars.datasets.len() {
            next.resize_with(bars.datasets.len(), Stream::default);
        }
        let mut out = Vec::with_capacity(bars.datasets.len());
        for (index, stream) in next.iter_mut().enumerate().take(bars.datasets.len()) {
            let dataset = self.dataset(bars, index)?;
            if bars.column(index as u32, column::PREDICT_FROM).is_some() {
                let from = bars.predict_from(index) as u64;
                match stream.started {
                    None => stream.from = from,
                    Some(started) if from.max(window as u64 - 1) > started => {
                        return Err(PluginError::invalid_data(format!(
                            "{}: predict_from {from} would restart the agent, which has been \
                             acting since stream row {started}; call reset() and stream again",
                            dataset.symbol
                        )));
                    }
                    Some(_) => {}
                }
            }
            let held = stream.close.len();
            let mut features = stream.features.clone();
            features.extend_from_slice(&dataset.features);
            let mut close = stream.close.clone();
            close.extend_from_slice(&dataset.close);
            let local_rows = close.len();
            // Stream row of local row 0.
            let offset = stream.streamed - held as u64;
            let start = match stream.started {
                Some(_) => held,
                None => {
                    let first = stream.from.max(window as u64 - 1);
                    held.max(first.saturating_sub(offset).min(local_rows as u64) as usize)
                }
            };
            let decisions = self.act(
                (&features, &close, &dataset.symbol),
                start..local_rows,
                offset,
                &mut stream.carry,
                cost_terms(dataset, &self.config),
                &mut scores,
            )?;
            if let (None, Some(first)) = (stream.started, decisions.first()) {
                stream.started = Some(first.row);
            }
            let kept = local_rows.min(keep);
            stream.features = features[(local_rows - kept) * width..].to_vec();
            stream.close = close[local_rows - kept..].to_vec();
            stream.streamed += dataset.rows() as u64;
            out.push(decisions);
        }
        self.streams = next;
        Ok(out)
    }

    /// Decides on local rows `decide` of `features` (every one with a full
    /// window), carrying positions in `carry`; `offset` is the row number
    /// of local row 0.
    fn act(
        &self,
        (features, close, symbol): (&[f32], &[f64], &str),
        decide: Range<usize>,
        offset: u64,
        carry: &mut Carry,
        terms: Option<CostTerms>,
        scores: &mut impl FnMut(&[f32], usize) -> Result<Vec<f32>, PluginError>,
    ) -> Result<Vec<Decision>, PluginError> {
        if decide.is_empty() {
            return Ok(Vec::new());
        }
        let width = self.feature_names.len();
        let window = self.config.window;
        let read = (decide.start + 1 - window) * width..decide.end * width;
        if let Some(i) = features[read.clone()].iter().position(|f| !f.is_finite()) {
            let at = read.start + i;
            return Err(PluginError::invalid_data(format!(
                "{symbol}: row {} feature {} is {} (not finite); the agent cannot act on it",
                offset + (at / width) as u64,
                self.feature_names[at % width],
                features[at]
            )));
        }
        let max = self.config.max_contracts as i32;
        let k = self.num_actions();
        let obs_dim = self.obs_dim();
        let rows: Vec<usize> = decide.collect();
        let mut out = Vec::with_capacity(rows.len());
        let mut obs = Vec::new();
        for chunk in rows.chunks(self.chunk) {
            obs.clear();
            obs.resize(chunk.len() * k * obs_dim, 0.0);
            let mut slots = obs.chunks_exact_mut(obs_dim);
            for &row in chunk {
                for p in 0..k {
                    if let Some(slot) = slots.next() {
                        observation(features, width, &self.config, row, p as i32 - max, slot);
                    }
                }
            }
            let s = scores(&obs, chunk.len() * k)?;
            if s.len() != chunk.len() * k * k {
                return Err(PluginError::other(format!(
                    "the policy gave {} scores for {} observations of {k} actions",
                    s.len(),
                    chunk.len() * k
                )));
            }
            for (j, &row) in chunk.iter().enumerate() {
                let at = (j * k + (carry.position + max) as usize) * k;
                let row_scores = &s[at..at + k];
                let action = argmax(row_scores);
                let pnl = carry.bar_pnl(close, row, terms);
                *carry = Carry {
                    acted: true,
                    position: action as i32 - max,
                    previous: carry.position,
                };
                out.push(Decision {
                    row: offset + row as u64,
                    action,
                    position: carry.position,
                    pnl,
                    scores: row_scores.to_vec(),
                });
            }
        }
        Ok(out)
    }
}

/// Why an agent is not exported to TorchScript (plugin API 1.3): the RL
/// plugins' `export_torchscript` answer.
pub fn torchscript_refusal() -> PluginError {
    PluginError::unsupported(
        "an agent's action depends on the position it holds, which its predictor carries bar \
         by bar as the trading environment does; its policy alone would not trade the same, so \
         agents are not exported to TorchScript (use `tli predict` or the Predict API)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Split;
    use crate::metrics::strategy_pnl;
    use crate::rl::eval::{trading_observation, trading_walk};
    use tli_plugin_api::{
        abi_stable::std_types::RArc, Column, ContractTerms, DatasetAnnex, SplitBounds,
    };

    fn dataset(rows: usize, width: usize) -> Dataset {
        Dataset {
            symbol: "T".into(),
            timestamps: (0..rows as i64).collect::<Vec<_>>().into(),
            features: (0..rows * width)
                .map(|i| ((i as f32) * 0.37).sin())
                .collect::<Vec<_>>()
                .into(),
            feature_names: (0..width)
                .map(|i| format!("f{i}").as_str().into())
                .collect::<Vec<_>>()
                .into(),
            close: (0..rows)
                .map(|i| 100.0 + (i as f64 * 0.7).sin() + i as f64 * 0.01)
                .collect::<Vec<_>>()
                .into(),
            contract: ContractTerms {
                root: "T".into(),
                tick_size: 0.25,
                point_value: 50.0,
                currency: "USD".into(),
            },
            periods_per_year: 252.0,
            ..Dataset::default()
        }
    }

    fn batch(d: Dataset, from: Option<i64>) -> TaskInputs {
        let annex = DatasetAnnex::plain(&d);
        let mut b = TaskInputs::new(vec![(RArc::new(d), annex)], false, 1);
        if let Some(from) = from {
            b.columns.push(Column {
                dataset: 0,
                name: column::PREDICT_FROM.into(),
                integers: vec![from].into(),
                ..Column::default()
            });
        }
        b
    }

    /// A fixed linear policy: scores depend on the features and the position.
    fn policy(obs: &[f32], rows: usize) -> Result<Vec<f32>, PluginError> {
        let dim = obs.len() / rows;
        let mut out = Vec::new();
        for o in obs.chunks_exact(dim) {
            let s: f32 = o[..dim - 1].iter().sum();
            let p = o[dim - 1];
            out.extend([-s - 0.3 * p, 0.1, s + 0.3 * p - 0.05, 0.5 * s, -0.5 * s]);
        }
        Ok(out)
    }

    fn config() -> TradingConfig {
        TradingConfig {
            window: 3,
            max_contracts: 2,
            ..TradingConfig::default()
        }
    }

    fn names(width: usize) -> Vec<String> {
        (0..width).map(|i| format!("f{i}")).collect()
    }

    #[test]
    fn observations_match_the_evaluation_walk() {
        let d = dataset(20, 2);
        let c = config();
        let (mut a, mut b) = (vec![0f32; 7], vec![0f32; 7]);
        for (row, p) in [(2, -2), (10, 1), (19, 0)] {
            observation(&d.features, 2, &c, row, p, &mut a);
            trading_observation(&d, &c, row, p, &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn the_walk_from_a_split_start_is_the_evaluation_walk() {
        let mut d = dataset(120, 2);
        d.splits = SplitBounds {
            train_end: 60,
            valid_start: 60,
            valid_end: 80,
            test_start: 85,
        };
        let c = config();
        let eval = trading_walk(&d, Split::Test, &c, 7, policy)
            .unwrap()
            .unwrap();
        let first = 85 + c.window - 1;
        let agent = TradingAgent::new(c.clone(), names(2), 7).unwrap();
        let decisions = agent
            .walk(&batch(d.clone(), Some(first as i64)), 0, policy)
            .unwrap();
        assert_eq!(decisions[0].row, first as u64);
        assert_eq!(decisions.len(), 120 - first);
        let positions: Vec<f64> = decisions[..decisions.len() - 1]
            .iter()
            .map(|x| f64::from(x.position))
            .collect();
        let terms = CostTerms::from_contract(&d.contract, 2.0, 0.5).unwrap();
        let (pnl, _) = strategy_pnl(&d.close[first..], &positions, terms).unwrap();
        let column: Vec<f64> = decisions[1..].iter().map(|x| x.pnl).collect();
        assert_eq!(pnl, column);
        assert_eq!(decisions[0].pnl, 0.0);
        assert_eq!(column.iter().sum::<f64>(), eval.strategy.total_pnl);
        assert!(positions.iter().any(|p| *p != positions[0]));
    }

    #[test]
    fn streaming_in_pieces_gives_the_walk() {
        let d = dataset(60, 2);
        let agent = TradingAgent::new(config(), names(2), 4).unwrap();
        for from in [None, Some(0), Some(9)] {
            let whole = agent.walk(&batch(d.clone(), from), 0, policy).unwrap();
            let mut streaming = agent.clone();
            let mut got = Vec::new();
            let mut at = 0;
            for len in [1, 1, 5, 2, 1, 13, 37] {
                let end = (at + len).min(60);
                let w = 2;
                let piece = Dataset {
                    timestamps: d.timestamps[at..end].to_vec().into(),
                    features: d.features[at * w..end * w].to_vec().into(),
                    close: d.close[at..end].to_vec().into(),
                    ..dataset(0, 2)
                };
                let out = streaming.stream(&batch(piece, from), policy).unwrap();
                got.extend(out.into_iter().flatten());
                at = end;
            }
            assert_eq!(got, whole, "predict_from {from:?}");
            streaming.reset();
            assert_eq!(streaming.stream_bytes(), 0);
        }
    }

    #[test]
    fn a_restarting_predict_from_and_bad_rows_are_refused() {
        let d = dataset(10, 2);
        let mut agent = TradingAgent::new(config(), names(2), 4).unwrap();
        agent.stream(&batch(d.clone(), Some(3)), policy).unwrap();
        let e = agent
            .stream(&batch(d.clone(), Some(12)), policy)
            .unwrap_err();
        assert!(e.message.contains("reset()"), "{e}");
        // Earlier values are consistent with the start and accepted.
        agent.stream(&batch(d.clone(), Some(0)), policy).unwrap();

        let mut bad = d.clone();
        let mut f = bad.features.to_vec();
        f[9] = f32::NAN;
        bad.features = f.into();
        let e = agent.walk(&batch(bad, None), 0, policy).unwrap_err();
        assert!(e.message.contains("row 4 feature f1"), "{e}");
        let other = TradingAgent::new(config(), names(3), 4).unwrap();
        let e = other.walk(&batch(d, None), 0, policy).unwrap_err();
        assert!(e.message.contains("trained on [f0, f1, f2]"), "{e}");
    }
}
