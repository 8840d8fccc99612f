//! A task's inputs on the wire between the host and a worker: plugin-api
//! [`TaskInputs`] (every dataset and the side table) ↔ the worker service's
//! `WorkerInputs` message, exactly (floats are sent as they are).

use abi_stable::std_types::{RArc, RString, RVec};
use tli_plugin_api::{Column, ContractTerms, Dataset, SplitBounds, TaskInputs};
use tli_proto::v1 as pb;

fn strings(values: &[RString]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

fn rstrings(values: Vec<String>) -> RVec<RString> {
    values.into_iter().map(RString::from).collect()
}

/// The inputs as a message.
pub fn inputs_to_wire(inputs: &TaskInputs) -> pb::WorkerInputs {
    pb::WorkerInputs {
        datasets: inputs.datasets.iter().map(|d| dataset_to_wire(d)).collect(),
        pooled: inputs.pooled,
        columns: inputs
            .columns
            .iter()
            .map(|c| pb::WorkerColumn {
                dataset: c.dataset,
                name: c.name.to_string(),
                numbers: c.numbers.to_vec(),
                integers: c.integers.to_vec(),
                text: strings(&c.text),
            })
            .collect(),
    }
}

fn dataset_to_wire(d: &Dataset) -> pb::WorkerDataset {
    pb::WorkerDataset {
        symbol: d.symbol.to_string(),
        timestamps: d.timestamps.to_vec(),
        features: d.features.to_vec(),
        feature_names: strings(&d.feature_names),
        targets: d.targets.to_vec(),
        target_names: strings(&d.target_names),
        train_end: d.splits.train_end,
        valid_start: d.splits.valid_start,
        valid_end: d.splits.valid_end,
        test_start: d.splits.test_start,
        close: d.close.to_vec(),
        contract_root: d.contract.root.to_string(),
        tick_size: d.contract.tick_size,
        point_value: d.contract.point_value,
        currency: d.contract.currency.to_string(),
        periods_per_year: d.periods_per_year,
    }
}

/// Why a message is not a task's inputs.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the host sent a task without datasets")]
    NoDatasets,
    #[error("dataset {index} ({symbol}) from the host is inconsistent: {message}")]
    Inconsistent {
        index: usize,
        symbol: String,
        message: String,
    },
}

/// The inputs from a message; every dataset is checked for consistency.
pub fn inputs_from_wire(w: pb::WorkerInputs) -> Result<TaskInputs, WireError> {
    if w.datasets.is_empty() {
        return Err(WireError::NoDatasets);
    }
    let mut datasets = RVec::with_capacity(w.datasets.len());
    for (index, d) in w.datasets.into_iter().enumerate() {
        let dataset = dataset_from_wire(d);
        dataset
            .check_consistent()
            .map_err(|e| WireError::Inconsistent {
                index,
                symbol: dataset.symbol.to_string(),
                message: e.message.to_string(),
            })?;
        datasets.push(RArc::new(dataset));
    }
    Ok(TaskInputs {
        datasets,
        pooled: w.pooled,
        columns: w
            .columns
            .into_iter()
            .map(|c| Column {
                dataset: c.dataset,
                name: c.name.into(),
                numbers: c.numbers.into(),
                integers: c.integers.into(),
                text: rstrings(c.text),
            })
            .collect(),
    })
}

fn dataset_from_wire(d: pb::WorkerDataset) -> Dataset {
    Dataset {
        symbol: d.symbol.into(),
        timestamps: d.timestamps.into(),
        features: d.features.into(),
        feature_names: rstrings(d.feature_names),
        targets: d.targets.into(),
        target_names: rstrings(d.target_names),
        splits: SplitBounds {
            train_end: d.train_end,
            valid_start: d.valid_start,
            valid_end: d.valid_end,
            test_start: d.test_start,
        },
        close: d.close.into(),
        contract: ContractTerms {
            root: d.contract_root.into(),
            tick_size: d.tick_size,
            point_value: d.point_value,
            currency: d.currency.into(),
        },
        periods_per_year: d.periods_per_year,
    }
}

/// Bytes of the task's datasets (what a worker holds in host memory for them).
pub fn data_bytes(inputs: &TaskInputs) -> u64 {
    inputs
        .datasets
        .iter()
        .map(|d| {
            (d.timestamps.len() * 8
                + d.features.len() * 4
                + d.targets.len() * 4
                + d.close.len() * 8) as u64
        })
        .sum()
}

/// A best checkpoint's mark as the worker service sends it.
pub fn best_to_proto(best: &tli_store::BestMark) -> pb::BestCheckpoint {
    pb::BestCheckpoint {
        metric: best.metric.clone(),
        value: best.value,
        mode: best.mode.as_str().to_string(),
    }
}

/// The mark of a best checkpoint a worker recorded; refuses a bad mode.
pub fn best_from_proto(best: &pb::BestCheckpoint) -> Result<tli_store::BestMark, tonic::Status> {
    let mode = best
        .mode
        .parse()
        .map_err(|e: tli_core::selection::SelectionError| {
            tonic::Status::invalid_argument(format!("best.mode: {e}"))
        })?;
    Ok(tli_store::BestMark {
        metric: best.metric.clone(),
        value: best.value,
        mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_data::synthetic_ar::{synthetic_ar_dataset, SyntheticArSpec};

    #[test]
    fn inputs_survive_the_wire_exactly() {
        let d = synthetic_ar_dataset(SyntheticArSpec {
            rows: 300,
            ..Default::default()
        });
        let inputs = TaskInputs {
            datasets: vec![RArc::new(d.clone()), RArc::new(d)].into(),
            pooled: true,
            columns: vec![Column {
                dataset: 1,
                name: "asset_index".into(),
                integers: vec![1].into(),
                ..Default::default()
            }]
            .into(),
        };
        let back = inputs_from_wire(inputs_to_wire(&inputs)).unwrap();
        assert_eq!(back.pooled, inputs.pooled);
        assert_eq!(back.columns, inputs.columns);
        for (a, b) in back.datasets.iter().zip(inputs.datasets.iter()) {
            assert_eq!(a.timestamps, b.timestamps);
            assert_eq!(a.features, b.features);
            assert_eq!(a.targets, b.targets);
            assert_eq!(a.close, b.close);
            assert_eq!(a.splits, b.splits);
            assert_eq!(a.contract, b.contract);
            assert_eq!(a.feature_names, b.feature_names);
        }
        assert!(data_bytes(&back) > 300 * 8);
    }

    #[test]
    fn an_inconsistent_dataset_is_refused() {
        let mut w = pb::WorkerInputs::default();
        assert!(matches!(
            inputs_from_wire(w.clone()),
            Err(WireError::NoDatasets)
        ));
        w.datasets.push(pb::WorkerDataset {
            symbol: "ES".into(),
            timestamps: vec![1, 2],
            feature_names: vec!["f".into()],
            features: vec![0.5],
            close: vec![1.0, 2.0],
            ..Default::default()
        });
        let e = inputs_from_wire(w).unwrap_err();
        assert!(e.to_string().contains("ES"), "{e}");
    }
}
