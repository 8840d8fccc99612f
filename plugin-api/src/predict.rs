//! Plugin API 1.2: applying a trained model to rows it may never have seen.
//!
//! A model leaves training as its **weights only** (`export_weights` writes
//! them from a checkpoint: no optimizer state, no training cursor), and a
//! [`PredictorSpec`] names that file beside the config and the *schema* of
//! the training inputs (the training task's [`TaskInputs`] with no rows:
//! feature and target names, contract, roles, horizons, scales, asset index
//! and count). A predictor made from it takes rows of features, as
//! [`TaskInputs`] again, and returns [`Predictions`]: named output columns,
//! one row per input row it could predict.
//!
//! Output columns follow one naming rule, so a host writes any plugin's
//! outputs without knowing the plugin:
//!
//! | name | meaning |
//! |---|---|
//! | `<target>:mean` | point forecast of target `<target>` (e.g. `fwd_logret_1:mean`) |
//! | `<target>:p<NN>` | quantile `NN`% of target `<target>` (`fwd_logret_5:p10`) |
//! | `action` | the action an agent chose (its index) |
//! | `position` | the position held after the action, in contracts (signed) |
//! | `value:<i>`, `prob:<i>` | action values or probabilities of action `i` |
//!
//! Forecasts are in the units of the targets the model was trained on (the
//! dataset's targets: raw ÷ `target_scale`); the host multiplies by the
//! scale to give returns. Other names are the plugin's own and are passed
//! through.

use crate::task_inputs::TaskInputs;
use crate::types::PluginError;
use abi_stable::{
    std_types::{RString, RVec},
    StableAbi,
};

/// What a predictor is made from.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PredictorSpec {
    /// The host's name for the model, for log lines.
    pub model_id: RString,
    /// The validated config the model was trained with.
    pub config_json: RString,
    /// `cpu` or `cuda:N`.
    pub device: RString,
    /// The weights-only file `export_weights` wrote.
    pub weights_path: RString,
    /// The training task's inputs without rows: one dataset per asset the
    /// model was trained on (names, contract, periods per year) and the side
    /// table (roles, horizons, scales, interval, asset index and count).
    pub schema: TaskInputs,
}

/// A predictor's outputs: `rows × columns` values, each output row naming
/// the input dataset and row it belongs to.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq)]
pub struct Predictions {
    /// Output column names (see the module docs).
    pub columns: RVec<RString>,
    /// Per output row: the index of its dataset in the input batch.
    pub dataset: RVec<u32>,
    /// Per output row: its row index within that dataset.
    pub rows: RVec<u64>,
    /// Row-major, `rows.len() × columns.len()`.
    pub values: RVec<f64>,
}

impl Predictions {
    /// No rows yet, with these output columns.
    pub fn with_columns<S: AsRef<str>>(columns: &[S]) -> Self {
        Self {
            columns: columns.iter().map(|c| RString::from(c.as_ref())).collect(),
            ..Self::default()
        }
    }

    /// Appends the outputs of row `row` of dataset `dataset`.
    pub fn push(&mut self, dataset: u32, row: u64, values: &[f64]) -> Result<(), PluginError> {
        if values.len() != self.columns.len() {
            return Err(PluginError::other(format!(
                "a prediction row has {} values for {} output columns",
                values.len(),
                self.columns.len()
            )));
        }
        self.dataset.push(dataset);
        self.rows.push(row);
        self.values.extend_from_slice(values);
        Ok(())
    }

    /// Output rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The index of output column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.as_str() == name)
    }

    /// The values of output row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        let w = self.columns.len();
        &self.values[i * w..(i + 1) * w]
    }

    /// Checks that the arrays agree with each other and with `batch` (a
    /// row index past its dataset's end is refused).
    pub fn check_against(&self, batch: &TaskInputs) -> Result<(), PluginError> {
        let n = self.rows.len();
        if self.dataset.len() != n || self.values.len() != n * self.columns.len() {
            return Err(PluginError::other(format!(
                "predictions hold {} row indices, {} dataset indices and {} values for {} columns",
                n,
                self.dataset.len(),
                self.values.len(),
                self.columns.len()
            )));
        }
        for (&d, &r) in self.dataset.iter().zip(self.rows.iter()) {
            let rows = batch.datasets.get(d as usize).map(|x| x.rows());
            if rows.is_none_or(|rows| r >= rows as u64) {
                return Err(PluginError::other(format!(
                    "a prediction names row {r} of dataset {d}, which the batch does not have"
                )));
            }
        }
        Ok(())
    }
}

/// The name of the point-forecast column of `target`.
pub fn mean_column(target: &str) -> String {
    format!("{target}:mean")
}

/// The name of the quantile column of `target` at `quantile` (0.1 → `p10`).
pub fn quantile_column(target: &str, quantile: f64) -> String {
    let pct = quantile * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        format!("{target}:p{}", pct.round() as i64)
    } else {
        format!("{target}:p{pct}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dataset, DatasetAnnex};
    use abi_stable::std_types::RArc;

    #[test]
    fn quantile_columns_are_named_by_percent() {
        assert_eq!(quantile_column("fwd_logret_1", 0.1), "fwd_logret_1:p10");
        assert_eq!(quantile_column("fwd_logret_1", 0.5), "fwd_logret_1:p50");
        assert_eq!(quantile_column("y", 0.025), "y:p2.5");
        assert_eq!(mean_column("y"), "y:mean");
    }

    #[test]
    fn predictions_are_checked_against_their_batch() {
        let dataset = Dataset {
            timestamps: vec![1, 2].into(),
            close: vec![1.0, 2.0].into(),
            ..Dataset::default()
        };
        let annex = DatasetAnnex::plain(&dataset);
        let batch = TaskInputs::new(vec![(RArc::new(dataset), annex)], false, 1);
        let mut p = Predictions::with_columns(&["y:mean"]);
        p.push(0, 1, &[0.5]).unwrap();
        assert!(p.push(0, 1, &[0.5, 1.0]).is_err());
        assert!(p.check_against(&batch).is_ok());
        assert_eq!(p.row(0), &[0.5]);
        p.push(0, 2, &[0.5]).unwrap();
        assert!(p.check_against(&batch).is_err());
    }
}
