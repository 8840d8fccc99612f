//! `tli train plot JOB` (the job's history from a running host, over gRPC)
//! and `tli plot JOB --state-dir DIR` (the store read directly, read-only,
//! no host needed): PNG charts of the job ([`crate::charts`]) in `--out`
//! (default `./tli-plots/job-N`): an overview, a figure per model, the
//! single values in `scalars.csv`, a memory timeline per device
//! (`--metric`/`--all`: a chart per metric instead of the figures).
//!
//! Prints each file written, one path per line; with `-o json`:
//! ```json
//! {"job_id": 4, "name": "sweep", "out_dir": "tli-plots/job-4",
//!  "files": [{"path": "tli-plots/job-4/overview.png", "kind": "overview", "name": "overview",
//!             "width": 1200, "height": 700, "metrics": ["train_loss", "train_loss"]},
//!            {"path": "tli-plots/job-4/model-tft.png", "kind": "model", "name": "tft",
//!             "width": 1200, "height": 988, "metrics": ["train_loss", "valid_qrisk_p50"]},
//!            {"path": "tli-plots/job-4/scalars.csv", "kind": "table", "name": "scalars",
//!             "metrics": ["test_qrisk_p50"], "rows": 2},
//!            {"path": "tli-plots/job-4/memory-cpu.png", "kind": "memory", "name": "cpu",
//!             "width": 1200, "height": 700, "reservations": 3, "budget_bytes": 8589934592}]}
//! ```
//! With `--metric NAME` or `--all`, each chart is `{"kind": "metric", "name": NAME, …,
//! "series": [{"task_id": 7, "label": "task 7 template/ES", "points": 2000,
//! "recorded_points": 250000, "first_step": 1, "last_step": 250000, "last_value": 0.41}]}`.
//! (`last_value` is null for NaN; `budget_bytes` is absent when the store
//! has no budget recorded for the device.)

use crate::args::{ChartArgs, Cli, OutputFormat, PlotArgs, TrainPlotArgs};
use crate::charts::{write_charts, PlotOptions, WrittenChart};
use crate::print_json;
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::path::PathBuf;
use tli_proto::v1::GetTrainingHistoryRequest;
use tli_store::{HistoryQuery, JobHistory, Store};
use tli_wire::history::history_from_proto;

#[derive(Serialize)]
struct PlotJson<'a> {
    job_id: i64,
    name: &'a str,
    out_dir: PathBuf,
    files: Vec<WrittenChart>,
}

/// `tli train plot JOB`: the history from the host at `--endpoint`.
pub fn train_plot(cli: &Cli, args: &TrainPlotArgs) -> Result<()> {
    let request = GetTrainingHistoryRequest {
        job_id: args.job,
        metrics: args.chart.metrics.clone(),
        max_points_per_series: args.chart.max_points,
    };
    let response = crate::remote::training_history(cli, request)?;
    write(&history_from_proto(&response), &args.chart, cli.output)
}

/// `tli plot JOB --state-dir DIR`: the history from the store itself.
pub fn store_plot(args: &PlotArgs, output: OutputFormat) -> Result<()> {
    let store = Store::open_read_only(&args.state_dir)?;
    let query = HistoryQuery {
        metrics: args.chart.metrics.clone(),
        max_points: args.chart.max_points as usize,
    };
    let history = match i64::try_from(args.job()) {
        Ok(job) if job > 0 => store.job_history(job, &query)?,
        _ => None,
    }
    .ok_or_else(|| {
        anyhow!(
            "job {} not found in the store {} (`tli host status --state-dir {}` lists the jobs)",
            args.job(),
            store.path().display(),
            args.state_dir.display()
        )
    })?;
    write(&history, &args.chart, output)
}

fn write(history: &JobHistory, chart: &ChartArgs, output: OutputFormat) -> Result<()> {
    let out_dir = chart
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("tli-plots").join(format!("job-{}", history.job_id)));
    let options = PlotOptions {
        metrics: chart.metrics.clone(),
        all: chart.all,
        out_dir: out_dir.clone(),
        width: chart.width,
        height: chart.height,
    };
    let files = write_charts(history, &options)?;
    if output == OutputFormat::Json {
        return print_json(&PlotJson {
            job_id: history.job_id,
            name: &history.name,
            out_dir,
            files,
        });
    }
    eprintln!(
        "{} file(s) for job {} \u{201c}{}\u{201d} (start with the first):",
        files.len(),
        history.job_id,
        history.name
    );
    for file in &files {
        crate::outln!("{}", file.path.display());
    }
    Ok(())
}
