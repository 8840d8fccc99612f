//! A vectorized futures trading environment over one market series.
//!
//! **Timing (no look-ahead).** At decision row `t` an environment observes
//! feature rows `t−window+1 ..= t` and the position it holds coming into `t`.
//! Its action chooses the position `p_t` held over `(t, t+1]`; the step's reward is
//!
//! ```text
//! p_t · point_value · (close[t+1] − close[t])  −  cost · |p_t − p_{t−1}|
//! cost = commission_per_contract + slippage_ticks · tick_size · point_value
//! ```
//!
//! and the environment moves to `t+1`. With `vol_scaled` the whole reward is
//! divided by `max(σ_t, vol_floor) · close[t] · point_value`, where `σ_t` is the
//! zero-mean, bias-corrected EWMA standard deviation of log close-to-close
//! returns up to and including row `t` (see [`ewma_volatility`]), so a reward is
//! "P&L in units of the current one-bar volatility of one contract".
//!
//! **Actions.** Discrete position targets: action `a ∈ 0..=2·max_contracts`
//! means position `a − max_contracts` (with `max_contracts = 1`: 0 short,
//! 1 flat, 2 long).
//!
//! **Observation.** `window · F` floats (the feature rows, oldest first,
//! row-major) followed by `position / max_contracts`.
//!
//! **Episodes.** Each environment starts flat at a start row drawn uniformly
//! (its own [`Rng`] stream) among those where the window and `episode_len`
//! steps fit inside the split, so no step reads a price or feature outside it.
//! After `episode_len` steps it is done (a time limit, not a terminal state:
//! bootstrap from [`VecTradingEnv::final_observation`]); positions are not
//! liquidated at the end. Per-episode P&L in currency (net of costs, never
//! vol-scaled), costs, turnover and final position are kept in
//! [`EpisodeStats`].
//!
//! The market data is copied once at construction, along with per-row
//! precomputed price moves and volatility scales, so the step loop does no
//! allocation and no transcendental math. Checkpoints hold only
//! [`TradingState`] (positions, indices, RNG streams, statistics).

use super::check_len;
use crate::data::{split_rows, Split};
use crate::metrics::ewma_volatility;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use tli_plugin_api::{ContractTerms, Dataset, PluginError};

pub use super::trading_config::{EpisodeStats, TradingConfig};

/// One environment's mutable state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Slot {
    rng: Rng,
    /// Current decision row (index into the copied split).
    t: usize,
    /// Row at which the episode is done.
    end: usize,
    stats: EpisodeStats,
    /// `(row, position)` where the last completed episode ended.
    last_final: Option<(usize, i32)>,
}

/// Where episodes may start: `first_start + rng.below(num_starts)`.
#[derive(Clone, Copy, Debug)]
struct Starts {
    first_start: usize,
    num_starts: u64,
    episode_len: usize,
    row_offset: usize,
}

impl Slot {
    /// Starts a new episode, flat, at a random admissible row.
    #[inline]
    fn restart(&mut self, env: usize, s: Starts) {
        let start = s.first_start + self.rng.below(s.num_starts) as usize;
        self.t = start;
        self.end = start + s.episode_len;
        self.stats = EpisodeStats {
            env,
            start_row: start + s.row_offset,
            ..EpisodeStats::default()
        };
    }
}

/// What a checkpoint holds: everything but the market data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TradingState {
    /// The config as JSON text (compared as text on restore).
    config: String,
    /// `(rows, features, first dataset row, fingerprint)` of the market it was taken on.
    market: (usize, usize, usize, u64),
    slots: Vec<Slot>,
    completed: Vec<EpisodeStats>,
}

/// N trading environments over one market series, stepped in one call.
#[derive(Clone, Debug)]
pub struct VecTradingEnv {
    config: TradingConfig,
    /// `rows × width`, the split's rows only.
    features: Vec<f32>,
    width: usize,
    rows: usize,
    /// `point_value · (close[t+1] − close[t])`, `rows − 1` entries.
    move_value: Vec<f64>,
    /// `max(σ_t, floor) · close[t] · point_value` (empty unless `vol_scaled`).
    vol_divisor: Vec<f64>,
    cost_per_contract: f64,
    starts: Starts,
    /// Hash of the market data, so a checkpoint is not restored onto other data.
    fingerprint: u64,
    slots: Vec<Slot>,
    completed: Vec<EpisodeStats>,
}

/// Copies `rows × width` features into `out` followed by the scaled position.
#[inline(always)]
fn fill_obs(features: &[f32], first_row: usize, width: usize, pos: f32, out: &mut [f32]) {
    let (head, tail) = out.split_at_mut(out.len() - 1);
    let first = first_row * width;
    head.copy_from_slice(&features[first..first + head.len()]);
    tail[0] = pos;
}

/// FNV-1a-style hash of the bits of every value.
fn fingerprint(features: &[f32], move_value: &[f64], vol_divisor: &[f64]) -> u64 {
    let mix = |h: u64, x: u64| (h ^ x).wrapping_mul(0x0100_0000_01b3);
    let h = features
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, f| mix(h, f.to_bits().into()));
    let h = move_value.iter().fold(h, |h, m| mix(h, m.to_bits()));
    vol_divisor.iter().fold(h, |h, v| mix(h, v.to_bits()))
}

fn first_non_finite<T: Copy + Into<f64>>(x: &[T]) -> Option<(usize, f64)> {
    x.iter()
        .map(|&v| v.into())
        .enumerate()
        .find(|(_, v)| !v.is_finite())
}

impl VecTradingEnv {
    /// Environments over split `split` of `dataset`. Volatility (for
    /// `vol_scaled`) is warmed up on the rows before the split as well.
    pub fn from_dataset(
        dataset: &Dataset,
        split: Split,
        config: TradingConfig,
        num_envs: usize,
        seed: u64,
    ) -> Result<Self, PluginError> {
        dataset.check_consistent()?;
        let rows = split_rows(dataset, split);
        let width = dataset.feature_names.len();
        let context =
            |e: PluginError| PluginError::new(e.code, format!("{split:?} split: {}", e.message));
        let sigma = match config.vol_scaled {
            false => None,
            true => {
                config.validate()?;
                let all = ewma_volatility(&dataset.close[..rows.end], config.vol_halflife)
                    .map_err(|e| context(e.into()))?;
                Some(all[rows.start..].to_vec())
            }
        };
        let market = (
            &dataset.features[rows.start * width..rows.end * width],
            width,
        );
        let close = &dataset.close[rows.clone()];
        Self::build(
            market,
            close,
            sigma,
            &dataset.contract,
            config,
            (num_envs, seed, rows.start),
        )
        .map_err(context)
    }

    /// Environments over plain slices: `features` is `close.len() × n_features`, row-major.
    pub fn from_slices(
        features: &[f32],
        n_features: usize,
        close: &[f64],
        terms: &ContractTerms,
        config: TradingConfig,
        num_envs: usize,
        seed: u64,
    ) -> Result<Self, PluginError> {
        let market = (features, n_features);
        Self::build(market, close, None, terms, config, (num_envs, seed, 0))
    }

    fn build(
        (features, width): (&[f32], usize),
        close: &[f64],
        sigma: Option<Vec<f64>>,
        terms: &ContractTerms,
        config: TradingConfig,
        (num_envs, seed, row_offset): (usize, u64, usize),
    ) -> Result<Self, PluginError> {
        config.validate()?;
        let bad = |msg: String| Err(PluginError::invalid_data(msg));
        if num_envs == 0 {
            return Err(PluginError::invalid_config(
                "trading env needs num_envs ≥ 1, got 0",
            ));
        }
        let (tick, pv) = (terms.tick_size, terms.point_value);
        if !(tick.is_finite() && tick > 0.0 && pv.is_finite() && pv > 0.0) {
            return bad(format!(
                "contract terms need positive finite tick_size and point_value, \
                 got tick_size {tick}, point_value {pv}"
            ));
        }
        let rows = close.len();
        check_len("features", features.len(), rows * width)?;
        if let Some((i, c)) = first_non_finite(close) {
            return bad(format!("close[{}] = {c} is not finite", i + row_offset));
        }
        if let Some((i, f)) = first_non_finite(features) {
            let (row, col) = (i / width + row_offset, i % width);
            return bad(format!(
                "feature row {row} column {col} is {f} (not finite)"
            ));
        }
        let needed = config.window + config.episode_len;
        if rows < needed {
            return bad(format!(
                "{rows} rows are too few for one episode: window {} + episode_len {} \
                 needs at least {needed}",
                config.window, config.episode_len
            ));
        }
        let vol_divisor = match (config.vol_scaled, sigma) {
            (false, _) => Vec::new(),
            (true, sigma) => {
                let sigma = match sigma {
                    Some(s) => s,
                    None => ewma_volatility(close, config.vol_halflife)?,
                };
                let floor = config.vol_floor;
                sigma
                    .iter()
                    .zip(close)
                    .map(|(s, c)| s.max(floor) * c * pv)
                    .collect()
            }
        };
        let starts = Starts {
            first_start: config.window - 1,
            num_starts: (rows - needed + 1) as u64,
            episode_len: config.episode_len,
            row_offset,
        };
        let slots = (0..num_envs)
            .map(|i| {
                let mut slot = Slot {
                    rng: Rng::new(seed).fork(i as u64),
                    t: 0,
                    end: 0,
                    stats: EpisodeStats::default(),
                    last_final: None,
                };
                slot.restart(i, starts);
                slot
            })
            .collect();
        let move_value: Vec<f64> = close.windows(2).map(|w| pv * (w[1] - w[0])).collect();
        Ok(Self {
            cost_per_contract: config.cost_per_contract(tick, pv),
            fingerprint: fingerprint(features, &move_value, &vol_divisor),
            features: features.to_vec(),
            width,
            rows,
            move_value,
            vol_divisor,
            config,
            starts,
            slots,
            completed: Vec::new(),
        })
    }

    pub fn config(&self) -> &TradingConfig {
        &self.config
    }
    pub fn num_envs(&self) -> usize {
        self.slots.len()
    }
    pub fn num_actions(&self) -> usize {
        self.config.num_actions()
    }
    /// `window · features + 1`.
    pub fn obs_dim(&self) -> usize {
        self.config.window * self.width + 1
    }
    /// Currency charged per contract traded.
    pub fn cost_per_contract(&self) -> f64 {
        self.cost_per_contract
    }

    fn write_obs(&self, t: usize, position: i32, out: &mut [f32]) {
        let (window, pos) = (
            self.config.window,
            position as f32 / self.config.max_contracts as f32,
        );
        fill_obs(&self.features, t + 1 - window, self.width, pos, out);
    }

    fn check_obs(&self, obs_out: &[f32]) -> Result<(), PluginError> {
        check_len(
            "trading obs_out",
            obs_out.len(),
            self.num_envs() * self.obs_dim(),
        )
    }

    /// Writes every environment's current observation (`num_envs × obs_dim`).
    pub fn observe(&self, obs_out: &mut [f32]) -> Result<(), PluginError> {
        self.check_obs(obs_out)?;
        for (slot, out) in self
            .slots
            .iter()
            .zip(obs_out.chunks_exact_mut(self.obs_dim()))
        {
            self.write_obs(slot.t, slot.stats.position, out);
        }
        Ok(())
    }

    /// Abandons the episodes in progress, starts new ones and writes their observations.
    pub fn reset(&mut self, obs_out: &mut [f32]) -> Result<(), PluginError> {
        self.check_obs(obs_out)?;
        let starts = self.starts;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            slot.restart(i, starts);
        }
        self.observe(obs_out)
    }

    /// The last observation of environment `env`'s most recently completed
    /// episode, for bootstrapping past the time limit.
    pub fn final_observation(&self, env: usize, out: &mut [f32]) -> Result<(), PluginError> {
        check_len("trading final observation", out.len(), self.obs_dim())?;
        let (t, position) = self
            .slots
            .get(env)
            .and_then(|s| s.last_final)
            .ok_or_else(|| {
                PluginError::invalid_data(format!(
                    "trading environment {env} (of {}) has not completed an episode yet",
                    self.num_envs()
                ))
            })?;
        self.write_obs(t, position, out);
        Ok(())
    }

    fn check_step(
        &self,
        actions: &[u32],
        rewards: &[f32],
        dones: &[bool],
    ) -> Result<(), PluginError> {
        let n = self.num_envs();
        check_len("trading actions", actions.len(), n)?;
        check_len("trading rewards", rewards.len(), n)?;
        check_len("trading dones", dones.len(), n)?;
        let limit = self.num_actions() as u32;
        match actions.iter().position(|&a| a >= limit) {
            None => Ok(()),
            Some(i) => Err(PluginError::invalid_data(format!(
                "trading action {} for environment {i} is out of range 0..{limit} \
                 (position targets −{m}..=+{m})",
                actions[i],
                m = self.config.max_contracts
            ))),
        }
    }

    /// Steps every environment (see the module docs for timing and rewards).
    /// `obs_out` is `num_envs × obs_dim`; a done environment has already been
    /// reset and `obs_out` holds its new episode's first observation. Nothing
    /// moves if any action or buffer length is wrong.
    pub fn step(
        &mut self,
        actions: &[u32],
        obs_out: &mut [f32],
        rewards: &mut [f32],
        dones: &mut [bool],
    ) -> Result<(), PluginError> {
        self.check_step(actions, rewards, dones)?;
        self.check_obs(obs_out)?;
        match self.config.vol_scaled {
            false => self.step_loop::<false, true>(actions, obs_out, rewards, dones),
            true => self.step_loop::<true, true>(actions, obs_out, rewards, dones),
        }
        Ok(())
    }

    /// [`step`](Self::step) without writing observations: for replaying
    /// positions decided elsewhere, and for measuring the copy's cost.
    pub fn step_without_observations(
        &mut self,
        actions: &[u32],
        rewards: &mut [f32],
        dones: &mut [bool],
    ) -> Result<(), PluginError> {
        self.check_step(actions, rewards, dones)?;
        match self.config.vol_scaled {
            false => self.step_loop::<false, false>(actions, &mut [], rewards, dones),
            true => self.step_loop::<true, false>(actions, &mut [], rewards, dones),
        }
        Ok(())
    }

    /// The hot loop. Checked by the callers: one action in range per env,
    /// buffer lengths; every slot has `window − 1 ≤ t < end ≤ rows − 1`.
    fn step_loop<const SCALED: bool, const OBS: bool>(
        &mut self,
        actions: &[u32],
        obs_out: &mut [f32],
        rewards: &mut [f32],
        dones: &mut [bool],
    ) {
        let max = self.config.max_contracts as i32;
        let inv_max = 1.0 / max as f32;
        let (window, width, starts) = (self.config.window, self.width, self.starts);
        let obs_dim = window * width + 1;
        let cost = self.cost_per_contract;
        let (features, move_value) = (&self.features[..], &self.move_value[..]);
        let vol_divisor = &self.vol_divisor[..];
        let envs = self.slots.iter_mut().zip(actions);
        for (i, (((slot, &a), r), d)) in envs.zip(rewards).zip(dones).enumerate() {
            let t = slot.t;
            let p = a as i32 - max;
            let traded = (p - slot.stats.position).unsigned_abs();
            let paid = cost * traded as f64;
            let pnl = p as f64 * move_value[t] - paid;
            let reward = if SCALED { pnl / vol_divisor[t] } else { pnl };
            let s = &mut slot.stats;
            s.pnl += pnl;
            s.costs += paid;
            s.turnover += traded as u64;
            s.reward += reward;
            s.steps += 1;
            s.position = p;
            *r = reward as f32;
            slot.t = t + 1;
            *d = slot.t == slot.end;
            if *d {
                slot.last_final = Some((slot.t, p));
                self.completed.push(*s);
                slot.restart(i, starts);
            }
            if OBS {
                let out = &mut obs_out[i * obs_dim..(i + 1) * obs_dim];
                let pos = slot.stats.position as f32 * inv_max;
                fill_obs(features, slot.t + 1 - window, width, pos, out);
            }
        }
    }

    /// Statistics of the episodes in progress, one per environment.
    pub fn running(&self) -> impl ExactSizeIterator<Item = &EpisodeStats> + '_ {
        self.slots.iter().map(|s| &s.stats)
    }

    /// Removes and yields the episodes completed since the last drain, in
    /// order. They accumulate until drained, so drain them regularly.
    pub fn drain_completed(&mut self) -> std::vec::Drain<'_, EpisodeStats> {
        self.completed.drain(..)
    }

    fn config_json(&self) -> String {
        serde_json::to_string(&self.config).unwrap_or_else(|e| format!("{:?} ({e})", self.config))
    }

    fn market_shape(&self) -> (usize, usize, usize, u64) {
        (
            self.rows,
            self.width,
            self.starts.row_offset,
            self.fingerprint,
        )
    }

    /// Everything needed to continue exactly, without the market data.
    pub fn state(&self) -> TradingState {
        TradingState {
            config: self.config_json(),
            market: self.market_shape(),
            slots: self.slots.clone(),
            completed: self.completed.clone(),
        }
    }

    /// Restores a [`state`](Self::state) taken from an environment built on
    /// the same data with the same config and number of environments.
    pub fn restore(&mut self, state: TradingState) -> Result<(), PluginError> {
        let saved = (&state.config, state.market, state.slots.len());
        let here = (&self.config_json(), self.market_shape(), self.num_envs());
        if saved != here {
            return Err(PluginError::invalid_data(format!(
                "trading env checkpoint does not fit this environment: it was taken with \
                 (config, (rows, features, first row, data hash), environments) = \
                 {saved:?}, this has {here:?}"
            )));
        }
        let Starts {
            first_start: lo,
            num_starts,
            episode_len: len,
            ..
        } = self.starts;
        let max = self.config.max_contracts as i32;
        for (i, s) in state.slots.iter().enumerate() {
            let start = s.end.wrapping_sub(len);
            let ok = s.end >= len
                && (lo..lo + num_starts as usize).contains(&start)
                && (start..s.end).contains(&s.t)
                && s.stats.position.abs() <= max
                && s.last_final
                    .is_none_or(|(t, p)| t > lo && t < self.rows && p.abs() <= max);
            if !ok {
                return Err(PluginError::invalid_data(format!(
                    "trading env checkpoint: environment {i} has an impossible state {s:?}"
                )));
            }
        }
        self.slots = state.slots;
        self.completed = state.completed;
        Ok(())
    }
}
