//! Epochs over a fixed set of training examples in a seeded shuffled order,
//! resumable exactly: the position is a [`DataCursor`] `(epoch, position)`
//! and each epoch's order is regenerated from `(seed, epoch)` alone (a
//! Fisher–Yates shuffle from the kit's [`Rng`]), so a checkpoint needs only
//! the cursor. [`run_steps`] is the step loop of a trainer's `step(n)`.

use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use tli_plugin_api::{Metric, PluginError, StepReport};

/// Where training is in the stream of examples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataCursor {
    pub epoch: u64,
    /// Examples of this epoch's order already used.
    pub position: u64,
}

pub struct EpochSampler {
    seed: u64,
    len: usize,
    cursor: DataCursor,
    /// The order of epoch `order_epoch` (indices into the examples).
    order: Vec<u32>,
    order_epoch: u64,
}

impl EpochSampler {
    /// Epochs over `len` examples (at least one), shuffled from `seed`.
    pub fn new(seed: u64, len: usize) -> Self {
        let mut sampler = Self {
            seed,
            len,
            cursor: DataCursor::default(),
            order: Vec::new(),
            order_epoch: 0,
        };
        sampler.set_order(0);
        sampler
    }

    pub fn cursor(&self) -> DataCursor {
        self.cursor
    }

    /// Continues from `cursor` (a saved checkpoint's, or one taken before
    /// a batch that is being undone).
    pub fn restore(&mut self, cursor: DataCursor) {
        self.cursor = cursor;
        self.set_order(cursor.epoch);
    }

    /// The next `n` example indices, advancing the cursor (into the next
    /// epoch when this one runs out).
    pub fn next_batch(&mut self, n: usize) -> Vec<usize> {
        let mut batch = Vec::with_capacity(n);
        if self.len == 0 {
            return batch;
        }
        while batch.len() < n {
            if self.cursor.position as usize >= self.order.len() {
                self.cursor = DataCursor {
                    epoch: self.cursor.epoch + 1,
                    position: 0,
                };
                self.set_order(self.cursor.epoch);
            }
            batch.push(self.order[self.cursor.position as usize] as usize);
            self.cursor.position += 1;
        }
        batch
    }

    /// Makes `order` the order of `epoch` (regenerated only when it is not).
    fn set_order(&mut self, epoch: u64) {
        if self.order_epoch != epoch || self.order.is_empty() {
            let mut rng = Rng::new(self.seed).fork(1000 + epoch);
            let mut order: Vec<u32> = (0..self.len as u32).collect();
            for i in (1..order.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
            self.order = order;
            self.order_epoch = epoch;
        }
    }
}

/// What [`run_steps`] did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepsRun {
    pub done: u64,
    /// Mean loss of the steps done (`None` when none was).
    pub mean_loss: Option<f64>,
}

impl StepsRun {
    /// The report a trainer's `step` gives: steps done, `learning_rate`,
    /// `epoch` and (after at least one step) the mean `train_loss`.
    pub fn report(&self, learning_rate: f64, epoch: u64) -> StepReport {
        let mut metrics = vec![
            Metric::new("learning_rate", learning_rate),
            Metric::new("epoch", epoch as f64),
        ];
        if let Some(loss) = self.mean_loss {
            metrics.push(Metric::new("train_loss", loss));
        }
        StepReport {
            steps_done: self.done,
            metrics: metrics.into(),
        }
    }
}

/// Runs up to `n` training steps: `one` does a step and returns its loss,
/// or `None` when the task was cancelled (then nothing more runs).
pub fn run_steps(
    n: u64,
    mut one: impl FnMut() -> Result<Option<f64>, PluginError>,
) -> Result<StepsRun, PluginError> {
    let (mut done, mut loss_sum) = (0u64, 0.0);
    while done < n {
        match one()? {
            Some(loss) => loss_sum += loss,
            None => break,
        }
        done += 1;
    }
    Ok(StepsRun {
        done,
        mean_loss: (done > 0).then(|| loss_sum / done as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_cover_every_example_and_resume_exactly() {
        let mut a = EpochSampler::new(7, 10);
        let first: Vec<usize> = a.next_batch(10);
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        let _ = a.next_batch(3);
        let saved = a.cursor();
        assert_eq!(
            saved,
            DataCursor {
                epoch: 1,
                position: 3
            }
        );
        let straight = a.next_batch(25);
        let mut b = EpochSampler::new(7, 10);
        b.restore(saved);
        assert_eq!(b.next_batch(25), straight);
        assert_ne!(
            first,
            EpochSampler::new(7, 10).next_batch(13)[3..],
            "epochs differ"
        );
    }
}
