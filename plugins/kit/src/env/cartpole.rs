//! CartPole-v1 with Gymnasium's exact dynamics (`gymnasium/envs/classic_control/cartpole.py`,
//! Euler integrator, `sutton_barto_reward=False`) and the v1 time limit of 500 steps.
//!
//! * Action 1 pushes the cart right with +10 N, action 0 left with −10 N; any
//!   other action is an error.
//! * The state `(x, x_dot, theta, theta_dot)` is kept in `f64` (as Gymnasium
//!   keeps it in Python floats); observations are that state cast to `f32`.
//! * Reward is 1.0 on every step, the terminating one included.
//! * `terminated` when `|x| > 2.4` or `|theta| > 12°`; `truncated` when the
//!   episode reaches 500 steps, as Gymnasium's `TimeLimit` sets it (both can be
//!   true on the 500th step).
//! * Reset draws each state component from U(−0.05, 0.05) with the kit's [`Rng`].
//!
//! [`CartPole::step_from`] is the pure transition, for tests; [`CartPole`] is
//! one environment; [`VecCartPole`] steps N of them in one call with automatic
//! reset and is serde-serializable as a whole for exact checkpoints.

use super::check_len;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use tli_plugin_api::PluginError;

pub const GRAVITY: f64 = 9.8;
pub const MASS_CART: f64 = 1.0;
pub const MASS_POLE: f64 = 0.1;
pub const TOTAL_MASS: f64 = MASS_POLE + MASS_CART;
/// Half the pole's length.
pub const LENGTH: f64 = 0.5;
pub const POLEMASS_LENGTH: f64 = MASS_POLE * LENGTH;
pub const FORCE_MAG: f64 = 10.0;
/// Seconds between state updates.
pub const TAU: f64 = 0.02;
/// 12 degrees, as Gymnasium writes it: `12 * 2 * pi / 360`.
pub const THETA_THRESHOLD: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
pub const X_THRESHOLD: f64 = 2.4;
/// CartPole-v1's `max_episode_steps`.
pub const MAX_EPISODE_STEPS: u32 = 500;
/// Floats per observation.
pub const OBS_DIM: usize = 4;
/// Number of discrete actions.
pub const NUM_ACTIONS: u32 = 2;

/// `(x, x_dot, theta, theta_dot)`.
pub type State = [f64; 4];

/// What [`CartPole::step`] returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CartPoleStep {
    pub observation: [f32; 4],
    pub reward: f32,
    pub terminated: bool,
    pub truncated: bool,
}

/// One finished episode of a [`VecCartPole`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompletedEpisode {
    /// Which environment of the vector.
    pub env: usize,
    /// Sum of rewards (= length for CartPole).
    pub episode_return: f64,
    pub length: u32,
    /// Whether it ended by falling (`terminated`) rather than only by the time limit.
    pub terminated: bool,
}

fn check_action(env: usize, action: u32) -> Result<(), PluginError> {
    if action < NUM_ACTIONS {
        Ok(())
    } else {
        Err(PluginError::invalid_data(format!(
            "CartPole action {action} for environment {env} is out of range: \
             0 pushes left, 1 pushes right"
        )))
    }
}

/// Gymnasium's transition; `push_right` is action 1.
#[inline]
fn dynamics(s: &State, push_right: bool) -> (State, bool) {
    let [x, x_dot, theta, theta_dot] = *s;
    let force = if push_right { FORCE_MAG } else { -FORCE_MAG };
    let (sin, cos) = theta.sin_cos();
    let temp = (force + POLEMASS_LENGTH * theta_dot * theta_dot * sin) / TOTAL_MASS;
    let thetaacc =
        (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - MASS_POLE * cos * cos / TOTAL_MASS));
    let xacc = temp - POLEMASS_LENGTH * thetaacc * cos / TOTAL_MASS;
    let next = [
        x + TAU * x_dot,
        x_dot + TAU * xacc,
        theta + TAU * theta_dot,
        theta_dot + TAU * thetaacc,
    ];
    let terminated = next[0] < -X_THRESHOLD
        || next[0] > X_THRESHOLD
        || next[2] < -THETA_THRESHOLD
        || next[2] > THETA_THRESHOLD;
    (next, terminated)
}

fn reset_state(rng: &mut Rng) -> State {
    std::array::from_fn(|_| -0.05 + 0.1 * rng.uniform())
}

fn observe(s: &State) -> [f32; 4] {
    s.map(|v| v as f32)
}

/// The generator of environment `index` in a vector seeded with `seed`
/// ([`CartPole::new`] uses index 0).
fn env_rng(seed: u64, index: usize) -> Rng {
    Rng::new(seed).fork(index as u64)
}

/// One CartPole-v1 environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CartPole {
    state: State,
    elapsed: u32,
    done: bool,
    rng: Rng,
}

impl CartPole {
    /// A reset environment; the same seed gives the same episodes, and
    /// environment 0 of `VecCartPole::new(_, seed)` follows the same stream.
    pub fn new(seed: u64) -> Self {
        let mut rng = env_rng(seed, 0);
        let state = reset_state(&mut rng);
        Self {
            state,
            elapsed: 0,
            done: false,
            rng,
        }
    }

    /// The pure transition: next state and whether it is terminal.
    pub fn step_from(state: State, action: u32) -> Result<(State, bool), PluginError> {
        check_action(0, action)?;
        Ok(dynamics(&state, action == 1))
    }

    /// Starts a new episode and returns its first observation.
    pub fn reset(&mut self) -> [f32; 4] {
        self.state = reset_state(&mut self.rng);
        self.elapsed = 0;
        self.done = false;
        observe(&self.state)
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn observation(&self) -> [f32; 4] {
        observe(&self.state)
    }

    /// Steps taken in the current episode.
    pub fn elapsed_steps(&self) -> u32 {
        self.elapsed
    }

    /// One step. Stepping a finished episode without [`reset`](Self::reset) is an error.
    pub fn step(&mut self, action: u32) -> Result<CartPoleStep, PluginError> {
        check_action(0, action)?;
        if self.done {
            return Err(PluginError::other(
                "CartPole episode has finished (terminated or truncated); call reset() first",
            ));
        }
        let (next, terminated) = dynamics(&self.state, action == 1);
        self.state = next;
        self.elapsed += 1;
        let truncated = self.elapsed >= MAX_EPISODE_STEPS;
        self.done = terminated || truncated;
        Ok(CartPoleStep {
            observation: observe(&next),
            reward: 1.0,
            terminated,
            truncated,
        })
    }
}

/// N CartPole-v1 environments stepped in one call, with automatic reset,
/// episode tracking, and exact serde checkpoints (`Serialize`/`Deserialize`
/// cover the whole state; deserializing checks that the parts agree).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "VecCartPoleParts")]
pub struct VecCartPole {
    states: Vec<State>,
    lengths: Vec<u32>,
    returns: Vec<f64>,
    rngs: Vec<Rng>,
    final_obs: Vec<f32>,
    completed: Vec<CompletedEpisode>,
}

/// The serialized form of [`VecCartPole`], checked before use.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VecCartPoleParts {
    states: Vec<State>,
    lengths: Vec<u32>,
    returns: Vec<f64>,
    rngs: Vec<Rng>,
    final_obs: Vec<f32>,
    completed: Vec<CompletedEpisode>,
}

impl TryFrom<VecCartPoleParts> for VecCartPole {
    type Error = String;
    fn try_from(p: VecCartPoleParts) -> Result<Self, String> {
        let n = p.states.len();
        if n == 0 {
            return Err("VecCartPole state holds no environments".into());
        }
        if p.lengths.len() != n
            || p.returns.len() != n
            || p.rngs.len() != n
            || p.final_obs.len() != n * OBS_DIM
        {
            return Err(format!(
                "VecCartPole state is inconsistent: {n} states, {} lengths, {} returns, \
                 {} rngs, {} final observation floats (expected {})",
                p.lengths.len(),
                p.returns.len(),
                p.rngs.len(),
                p.final_obs.len(),
                n * OBS_DIM
            ));
        }
        Ok(Self {
            states: p.states,
            lengths: p.lengths,
            returns: p.returns,
            rngs: p.rngs,
            final_obs: p.final_obs,
            completed: p.completed,
        })
    }
}

impl VecCartPole {
    /// `num_envs` freshly reset environments; environment `i` draws from its
    /// own stream of `seed`, so its episodes do not depend on `num_envs`.
    pub fn new(num_envs: usize, seed: u64) -> Result<Self, PluginError> {
        if num_envs == 0 {
            return Err(PluginError::invalid_config(
                "VecCartPole needs at least one environment (num_envs = 0)",
            ));
        }
        let mut rngs: Vec<Rng> = (0..num_envs).map(|i| env_rng(seed, i)).collect();
        let states: Vec<State> = rngs.iter_mut().map(reset_state).collect();
        let final_obs = states.iter().flat_map(observe).collect();
        Ok(Self {
            states,
            lengths: vec![0; num_envs],
            returns: vec![0.0; num_envs],
            rngs,
            final_obs,
            completed: Vec::new(),
        })
    }

    pub fn num_envs(&self) -> usize {
        self.states.len()
    }

    /// Current `f64` states, one per environment.
    pub fn states(&self) -> &[State] {
        &self.states
    }

    /// Writes the current observations (`num_envs × 4`) into `obs_out`,
    /// e.g. the first ones after [`new`](Self::new).
    pub fn observe(&self, obs_out: &mut [f32]) -> Result<(), PluginError> {
        check_len("CartPole obs_out", obs_out.len(), self.num_envs() * OBS_DIM)?;
        for (o, s) in obs_out.chunks_exact_mut(OBS_DIM).zip(&self.states) {
            o.copy_from_slice(&observe(s));
        }
        Ok(())
    }

    /// Steps every environment with its action (0 or 1). Buffers hold one
    /// entry per environment (`obs_out`: `num_envs × 4`). An environment that
    /// terminates or truncates is reset at once: `obs_out` then holds the new
    /// episode's first observation and [`final_observations`](Self::final_observations)
    /// the finished episode's last one. Nothing moves if any action or length is wrong.
    pub fn step(
        &mut self,
        actions: &[u32],
        obs_out: &mut [f32],
        rewards: &mut [f32],
        terminated: &mut [bool],
        truncated: &mut [bool],
    ) -> Result<(), PluginError> {
        let n = self.num_envs();
        check_len("CartPole actions", actions.len(), n)?;
        check_len("CartPole obs_out", obs_out.len(), n * OBS_DIM)?;
        check_len("CartPole rewards", rewards.len(), n)?;
        check_len("CartPole terminated", terminated.len(), n)?;
        check_len("CartPole truncated", truncated.len(), n)?;
        for (i, &a) in actions.iter().enumerate() {
            check_action(i, a)?;
        }
        let envs = self
            .states
            .iter_mut()
            .zip(self.lengths.iter_mut())
            .zip(self.returns.iter_mut())
            .zip(self.rngs.iter_mut())
            .zip(self.final_obs.chunks_exact_mut(OBS_DIM));
        let outs = actions
            .iter()
            .zip(obs_out.chunks_exact_mut(OBS_DIM))
            .zip(rewards.iter_mut())
            .zip(terminated.iter_mut())
            .zip(truncated.iter_mut());
        for (i, (((((state, len), ret), rng), fin), ((((&a, obs), r), term), trunc))) in
            envs.zip(outs).enumerate()
        {
            let (next, is_terminal) = dynamics(state, a == 1);
            *len += 1;
            *ret += 1.0;
            *r = 1.0;
            let is_truncated = *len >= MAX_EPISODE_STEPS;
            *term = is_terminal;
            *trunc = is_truncated;
            let next_obs = observe(&next);
            fin.copy_from_slice(&next_obs);
            if is_terminal || is_truncated {
                self.completed.push(CompletedEpisode {
                    env: i,
                    episode_return: *ret,
                    length: *len,
                    terminated: is_terminal,
                });
                *state = reset_state(rng);
                *len = 0;
                *ret = 0.0;
                obs.copy_from_slice(&observe(state));
            } else {
                *state = next;
                obs.copy_from_slice(&next_obs);
            }
        }
        Ok(())
    }

    /// `num_envs × 4`: for each environment, the observation its last step
    /// reached. For an environment that was done on that step this is the
    /// final observation of the finished episode (for bootstrapping a
    /// truncated one); otherwise it equals the observation in `obs_out`.
    pub fn final_observations(&self) -> &[f32] {
        &self.final_obs
    }

    /// Removes and yields the episodes completed since the last drain, in order.
    /// They accumulate until drained, so drain them regularly.
    pub fn drain_completed(&mut self) -> std::vec::Drain<'_, CompletedEpisode> {
        self.completed.drain(..)
    }

    /// Per-environment length of the episodes in progress.
    pub fn running_lengths(&self) -> &[u32] {
        &self.lengths
    }
}
