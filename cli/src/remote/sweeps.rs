//! `tli sweep start|results`: a hyperparameter sweep submitted as a job
//! (`StartTrainingRequest.sweep`), and its result table (`GetSweep`).
//!
//! `sweep results -o json` prints
//! ```json
//! {"job_id": 4, "plugin": "tft", "metric": "valid_loss", "mode": "min",
//!  "scheduler": "asha", "rungs": [100, 300, 900],
//!  "steps_trained": 4200, "steps_if_run_all": 8100,
//!  "trials": [{"trial": 0, "task_id": 9, "asset": "synthetic-ar1:2000:1",
//!              "params": {"learning_rate": 0.003}, "steps_done": 900,
//!              "rung_values": {"100": 1.02, "300": 0.97, "900": 0.95},
//!              "final_value": 0.95, "state": "completed", "status": "completed",
//!              "best": true, "best_checkpoint": {"step": 800, "metric": "valid_loss",
//!                                                "value": 0.94}}],
//!  "best": [0]}
//! ```
//! (`best` lists the best trial of each asset; `final_value` is the value at
//! the last rung the trial reached, null before its first.)

use super::connection::{api_error, normalize_endpoint, run, Remote};
use super::request::{absolutize_local_paths, parse_asset, request_from_spec_file};
use crate::args::{Cli, OutputFormat, SweepCommand, SweepStartArgs};
use crate::charts::sweep_chart::TrialLine;
use crate::render::lower_is_better;
use crate::{new_table, print_json};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use tli_core::sweep::{Asha, Scheduler, SweepSpec};
use tli_proto::v1::{GetSweepRequest, GetSweepResponse, StartTrainingRequest};
use tli_wire::convert::state_from_proto;

pub(crate) fn sweep(cli: &Cli, command: &SweepCommand) -> Result<()> {
    let output = cli.output;
    match command {
        SweepCommand::Start(args) => {
            let mut request = match &args.spec {
                Some(_) if args.features.any() => bail!(
                    "--features, --feature-column, --no-builtin-features, --target and \
                     --target-horizons cannot be combined with --spec (put them in its \
                     \"features\")"
                ),
                Some(path) => request_from_spec_file(path)?,
                None => request_from_flags(args)?,
            };
            if request.sweep.is_none() {
                bail!("--spec: the job spec has no \"sweep\"; use `tli train start --spec`");
            }
            absolutize_local_paths(&mut request, &normalize_endpoint(&cli.endpoint));
            run(cli, |remote| start(remote, request, args.watch, output))
        }
        SweepCommand::Results(args) => {
            let response = fetch(cli, args.job)?;
            if let Some(path) = &args.plot {
                plot(cli, &response, path)?;
            }
            print_results(&response, output)
        }
    }
}

/// `sweep start`'s flags as a request.
fn request_from_flags(args: &SweepStartArgs) -> Result<StartTrainingRequest> {
    let plugin = args
        .plugin
        .clone()
        .ok_or_else(|| anyhow!("give --spec FILE, or --plugin with --space and --asset"))?;
    let space_text = args
        .space
        .as_deref()
        .ok_or_else(|| anyhow!("--space: the search space is needed (JSON or @FILE)"))?;
    let space_text = match space_text.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("--space: cannot read {path}"))?
        }
        None => space_text.to_string(),
    };
    let space = serde_json::from_str(&space_text).map_err(|e| {
        anyhow!(
            "--space: {e}; give {{\"KEY\": {{\"choice\"|\"grid\": [..]}} or \
             {{\"uniform\"|\"log_uniform\"|\"int\": [low, high]}}, ...}}"
        )
    })?;
    let config = args
        .config
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| anyhow!("--config: {e}"))?;
    let mode = args
        .mode
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(|e| anyhow!("--mode: {e}"))?;
    let max_steps = args
        .max_steps
        .ok_or_else(|| anyhow!("--max-steps: how far a trial that is never stopped trains"))?;
    let scheduler = if args.run_all {
        Scheduler::RunAll { max_steps }
    } else {
        Scheduler::Asha(Asha {
            grace_period: args.grace_period.ok_or_else(|| {
                anyhow!("--grace-period: ASHA's first rung in steps (or --run-all)")
            })?,
            reduction_factor: args.reduction_factor,
            max_steps,
        })
    };
    if args.asset.is_empty() {
        bail!("--asset: at least one (a bar file, SYMBOL=FILE or synthetic:ROWS)");
    }
    let sweep = SweepSpec {
        plugin,
        config,
        space,
        samples: args.samples,
        seed: args.sample_seed.unwrap_or(args.seed),
        metric: args.metric.clone(),
        mode,
        scheduler,
        pooled: args.pooled,
        keep_best: !args.keep_last,
    };
    sweep.check_shape().map_err(|e| anyhow!("sweep: {e}"))?;
    Ok(StartTrainingRequest {
        name: args.name.clone(),
        assets: args
            .asset
            .iter()
            .map(|a| parse_asset(a))
            .collect::<Result<_>>()?,
        seed: args.seed,
        device: args.device.to_string(),
        features_json: args.features.to_json()?.unwrap_or_default(),
        sweep: Some(tli_wire::sweep::sweep_to_proto(&sweep)),
        ..Default::default()
    })
}

async fn start(
    remote: Remote,
    request: StartTrainingRequest,
    watch: bool,
    output: OutputFormat,
) -> Result<()> {
    let job = super::submit(&remote, request).await?;
    if !watch {
        if output == OutputFormat::Json {
            return print_json(&job);
        }
        crate::outln!("{}", crate::render::started_table(&job));
        eprintln!(
            "{} trial task(s); follow with `tli train watch {id}`, results with `tli sweep \
             results {id}`",
            job.progress.tasks.len(),
            id = job.job_id
        );
        return Ok(());
    }
    eprintln!("sweep job {} started", job.job_id);
    // Progress on stderr; the table (or JSON) at the end.
    super::watch::watch_progress(&remote, job.job_id).await?;
    let results = get(&remote, job.job_id).await?;
    print_results(&results, output)
}

async fn get(remote: &Remote, job_id: u64) -> Result<GetSweepResponse> {
    Ok(remote
        .training()
        .get_sweep(GetSweepRequest { job_id })
        .await
        .map_err(|s| api_error(remote, s))?
        .into_inner())
}

fn fetch(cli: &Cli, job: u64) -> Result<GetSweepResponse> {
    let mut answer = None;
    let slot = &mut answer;
    run(cli, move |remote| async move {
        *slot = Some(get(&remote, job).await?);
        Ok(())
    })?;
    answer.ok_or_else(|| anyhow!("the host sent no sweep"))
}

#[derive(Serialize)]
struct BestJson {
    step: u64,
    metric: String,
    value: f64,
}

#[derive(Serialize)]
struct TrialJson {
    trial: u32,
    task_id: u64,
    asset: String,
    params: serde_json::Value,
    steps_done: u64,
    rung_values: BTreeMap<u64, f64>,
    final_value: Option<f64>,
    state: &'static str,
    status: String,
    best: bool,
    best_checkpoint: Option<BestJson>,
}

#[derive(Serialize)]
struct SweepJson {
    job_id: u64,
    plugin: String,
    metric: String,
    mode: String,
    scheduler: String,
    rungs: Vec<u64>,
    steps_trained: u64,
    steps_if_run_all: u64,
    trials: Vec<TrialJson>,
    best: Vec<u32>,
}

fn to_json(r: &GetSweepResponse) -> SweepJson {
    SweepJson {
        job_id: r.job_id,
        plugin: r.plugin.clone(),
        metric: r.metric.clone(),
        mode: r.mode.clone(),
        scheduler: r.scheduler.clone(),
        rungs: r.rungs.clone(),
        steps_trained: r.steps_trained,
        steps_if_run_all: r.steps_if_run_all,
        trials: r
            .trials
            .iter()
            .map(|t| TrialJson {
                trial: t.trial,
                task_id: t.task_id,
                asset: t.asset.clone(),
                params: serde_json::from_str(&t.params_json).unwrap_or(serde_json::Value::Null),
                steps_done: t.steps_done,
                rung_values: t.rung_values.iter().map(|v| (v.step, v.value)).collect(),
                final_value: t.final_value,
                state: state_from_proto(t.state).map_or("unknown", |s| s.as_str()),
                status: t.status.clone(),
                best: t.best,
                best_checkpoint: t.best_checkpoint.as_ref().map(|b| BestJson {
                    step: b.step,
                    metric: b.metric.clone(),
                    value: b.value,
                }),
            })
            .collect(),
        best: r
            .trials
            .iter()
            .filter(|t| t.best)
            .map(|t| t.trial)
            .collect(),
    }
}

/// `key=value, …` of a trial's searched values (numbers to 4 significant digits).
fn params_text(params: &serde_json::Value) -> String {
    let Some(map) = params.as_object() else {
        return params.to_string();
    };
    map.iter()
        .map(|(k, v)| match v.as_f64() {
            Some(x) if v.is_f64() => format!("{k}={}", real_text(x)),
            _ => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// 4 significant digits, trailing zeros dropped; scientific outside 1e-3..1e5.
fn real_text(x: f64) -> String {
    let a = x.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        return format!("{x:.3e}");
    }
    let decimals = if a == 0.0 {
        0
    } else {
        (3 - a.log10().floor() as i32).max(0) as usize
    };
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Whether the sweep's trials are on several assets (a group each).
fn several_assets(r: &GetSweepResponse) -> bool {
    r.trials.iter().any(|t| t.asset != r.trials[0].asset)
}

fn value_text(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |x| format!("{x:.5}"))
}

fn print_results(r: &GetSweepResponse, output: OutputFormat) -> Result<()> {
    let json = to_json(r);
    if output == OutputFormat::Json {
        return print_json(&json);
    }
    let several_assets = several_assets(r);
    let mut header: Vec<String> = vec!["TRIAL".into(), "TASK".into()];
    if several_assets {
        header.push("ASSET".into());
    }
    header.push("PARAMS".into());
    header.push("STEPS".into());
    header.extend(r.rungs.iter().map(|g| format!("@{g}")));
    header.extend(["FINAL".into(), "STATUS".into(), "".into()]);
    let mut table = new_table(header.iter().map(String::as_str).collect());
    for (t, j) in r.trials.iter().zip(&json.trials) {
        let mut row = vec![t.trial.to_string(), t.task_id.to_string()];
        if several_assets {
            row.push(t.asset.clone());
        }
        row.push(params_text(&j.params));
        row.push(t.steps_done.to_string());
        for g in &r.rungs {
            row.push(value_text(j.rung_values.get(g).copied()));
        }
        row.push(value_text(t.final_value));
        row.push(t.status.clone());
        row.push(if t.best {
            "★ best".into()
        } else {
            String::new()
        });
        table.add_row(row);
    }
    crate::outln!("{table}");
    let better = if r.mode == "max" || (r.mode.is_empty() && !lower_is_better(&r.metric)) {
        "higher"
    } else {
        "lower"
    };
    crate::outln!(
        "{} ({better} is better) at rungs {:?}; {} of {} steps trained ({:.0}% of running \
         every trial to the end)",
        r.metric,
        r.rungs,
        r.steps_trained,
        r.steps_if_run_all,
        100.0 * r.steps_trained as f64 / r.steps_if_run_all.max(1) as f64
    );
    for t in r.trials.iter().filter(|t| t.best) {
        let model = match &t.best_checkpoint {
            Some(b) => format!(
                "its model is its best checkpoint (step {}, {} {:.5})",
                b.step, b.metric, b.value
            ),
            None => "its model is its last checkpoint".into(),
        };
        crate::outln!(
            "best trial {} (task {}{}): {} {}; {model}; use `tli predict --model {}`",
            t.trial,
            t.task_id,
            if several_assets {
                format!(", {}", t.asset)
            } else {
                String::new()
            },
            r.metric,
            value_text(t.final_value),
            t.task_id
        );
    }
    Ok(())
}

/// The metric of every trial against steps ([`crate::charts::sweep_chart`]),
/// from the job's history.
fn plot(cli: &Cli, r: &GetSweepResponse, path: &std::path::Path) -> Result<()> {
    let response = super::training_history(
        cli,
        tli_proto::v1::GetTrainingHistoryRequest {
            job_id: r.job_id,
            metrics: vec![r.metric.clone()],
            max_points_per_series: 2000,
        },
    )?;
    let history = tli_wire::history::history_from_proto(&response);
    let json = to_json(r);
    let max = r.rungs.last().copied().unwrap_or(0);
    let several_assets = several_assets(r);
    let lines: Vec<TrialLine> = r
        .trials
        .iter()
        .zip(&json.trials)
        .map(|(t, j)| {
            let mut points: Vec<(u64, f64)> = Vec::new();
            if let Some(s) = history
                .tasks
                .iter()
                .find(|h| h.task_id as u64 == t.task_id)
                .and_then(|h| h.series.iter().find(|s| s.name == r.metric))
            {
                for (&step, &value) in s.steps.iter().zip(&s.values) {
                    // The first value at a step is the training call's (an evaluation may follow).
                    if points.last().is_none_or(|p| p.0 != step) {
                        points.push((step, value));
                    }
                }
            }
            let asset = if several_assets {
                format!(" {}", t.asset.rsplit('/').next().unwrap_or(&t.asset))
            } else {
                String::new()
            };
            TrialLine {
                label: format!("trial {}{asset}: {}", t.trial, params_text(&j.params)),
                points,
                finished: t.steps_done >= max && max > 0,
                best: t.best,
            }
        })
        .collect();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--plot: cannot create {}", dir.display()))?;
    }
    crate::charts::font::register_font()?;
    let title = format!(
        "sweep (job {}): {} of {} trials by step, {}",
        r.job_id,
        r.metric,
        r.trials.len(),
        if r.scheduler == "asha" {
            "ASHA"
        } else {
            "run all"
        }
    );
    crate::charts::sweep_chart::draw(
        path,
        &title,
        &r.metric,
        &r.rungs,
        &lines,
        (crate::charts::DEFAULT_WIDTH, crate::charts::DEFAULT_HEIGHT),
    )?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> SweepStartArgs {
        let mut argv = vec!["tli", "sweep", "start"];
        argv.extend_from_slice(extra);
        match Cli::parse_from(argv).command {
            crate::args::Command::Sweep {
                command: SweepCommand::Start(a),
            } => *a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn flags_build_a_sweep_request() {
        let a = args(&[
            "-p",
            "tft",
            "-a",
            "synthetic:500",
            "--space",
            r#"{"learning_rate": {"log_uniform": [1e-4, 1e-2]}}"#,
            "--samples",
            "9",
            "--max-steps",
            "900",
            "--grace-period",
            "100",
        ]);
        let r = request_from_flags(&a).unwrap();
        let s = tli_wire::sweep::sweep_spec(r.sweep.as_ref().unwrap()).unwrap();
        assert_eq!(s.trials().len(), 9);
        assert_eq!(s.decision_rungs(), vec![100, 300]);
        assert!(r.model.is_none() && r.models.is_empty());
    }

    #[test]
    fn bad_flags_are_refused_before_anything_is_sent() {
        let base = ["-p", "tft", "-a", "synthetic:500", "--max-steps", "900"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            request_from_flags(&args(&v)).unwrap_err().to_string()
        };
        assert!(with(&[]).contains("--space"));
        assert!(with(&["--space", "{"]).contains("--space"));
        assert!(with(&["--space", r#"{"x": {"choice": [1]}}"#]).contains("--grace-period"));
        let e = with(&[
            "--space",
            r#"{"x": {"choice": []}}"#,
            "--grace-period",
            "100",
        ]);
        assert!(e.contains("space.x"), "{e}");
        let e = with(&[
            "--space",
            r#"{"x": {"choice": [1]}}"#,
            "--grace-period",
            "100",
            "--reduction-factor",
            "1",
        ]);
        assert!(e.contains("reduction_factor"), "{e}");
    }

    #[test]
    fn reals_show_four_significant_digits() {
        assert_eq!(real_text(0.0031234), "0.003123");
        assert_eq!(real_text(0.25), "0.25");
        assert_eq!(real_text(12.5), "12.5");
        assert_eq!(real_text(1.5e-5), "1.500e-5");
        assert_eq!(real_text(0.0), "0");
    }

    #[test]
    fn params_read_as_key_value_pairs() {
        let p = serde_json::json!({"learning_rate": 0.003, "hidden": 16, "opt": "adamw"});
        assert_eq!(
            params_text(&p),
            "hidden=16, learning_rate=0.003, opt=\"adamw\""
        );
    }
}
