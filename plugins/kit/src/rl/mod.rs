//! What the reinforcement-learning plugins (DQN, PPO) share: one vectorized
//! environment over CartPole and trading ([`env`]), and greedy evaluation —
//! CartPole episodes and a walk over a trading split beside buy-and-hold
//! ([`eval`]). Both are independent of the network: evaluation takes a
//! closure that scores a batch of observations.

pub mod env;
pub mod eval;

pub use env::{EnvKind, EnvKindError, EnvState, Finished, StepBuffers, VecEnv};
