//! What the reinforcement-learning plugins (DQN, PPO) share: one vectorized
//! environment over CartPole and trading ([`env`]), and greedy evaluation —
//! CartPole episodes and a walk over a trading split beside buy-and-hold
//! ([`eval`]). Both are independent of the network: evaluation takes a
//! closure that scores a batch of observations. [`agent`] applies a trained
//! policy to new rows (the plugins' predictors) with the evaluation walk's rules.

pub mod agent;
pub mod env;
pub mod eval;

pub use env::{EnvKind, EnvKindError, EnvState, Finished, StepBuffers, VecEnv};
