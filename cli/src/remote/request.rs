//! Building requests from the command line: `train start --spec FILE` or its
//! flags, asset strings, state and sort names. Pure functions, unit-tested.

use crate::args::StartArgs;
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use tli_core::job::{JobSpec, DEFAULT_SEED};
use tli_core::plugin_configs::PluginConfigs;
use tli_core::state::TaskState;
use tli_data::BarSource;
use tli_proto::v1::{
    asset_spec, AssetSpec, JobOrder, StartTrainingRequest, SyntheticAsset,
    TaskState as ProtoTaskState,
};
use tli_wire::convert::state_to_proto;
use tli_wire::job_request::{self, plugin_model, set_models};

/// `queued`, `running`, … (any case) → the wire's state; anything else is an
/// error that lists the valid names.
pub(super) fn parse_state(name: &str) -> Result<ProtoTaskState> {
    let wanted = name.trim().to_ascii_lowercase();
    TaskState::parse(&wanted)
        .map(|s| state_to_proto(Some(s)))
        .ok_or_else(|| {
            let valid: Vec<&str> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
            anyhow!(
                "--state {name:?}: unknown state; use one of {}",
                valid.join(", ")
            )
        })
}

/// `--sort newest|oldest|name`.
pub(super) fn parse_order(name: &str) -> Result<JobOrder> {
    match name.trim().to_ascii_lowercase().as_str() {
        "newest" => Ok(JobOrder::NewestFirst),
        "oldest" => Ok(JobOrder::OldestFirst),
        "name" => Ok(JobOrder::Name),
        _ => bail!("--sort {name:?}: use newest, oldest or name"),
    }
}

/// An `--asset` value: `synthetic:ROWS`, `synthetic:ROWS:SEED`,
/// `synthetic:ROWS:SEED:SIGMA` (the series' scale), or a bar file
/// path on the host (write `./synthetic:…` for a file with that name),
/// `SYMBOL=PATH` to name the symbol of its bars (`ES=prices.csv`).
pub(super) fn parse_asset(text: &str) -> Result<AssetSpec> {
    let text = text.trim();
    if text.is_empty() {
        bail!("--asset: empty; give a bar file path, synthetic:ROWS or synthetic:ROWS:SEED");
    }
    if let Some(rest) = text.strip_prefix("seasonal:") {
        let bad = || {
            anyhow!(
                "--asset {text:?}: expected seasonal:ROWS, seasonal:ROWS:SEED or \
                 seasonal:ROWS:SEED:ASSET/ASSETS (whole numbers; ASSET counts from 0)"
            )
        };
        let mut parts = rest.split(':');
        let rows = parts.next().and_then(|r| r.parse::<u64>().ok());
        let seed = match parts.next() {
            None => Some(DEFAULT_SEED),
            Some(s) => s.parse::<u64>().ok(),
        };
        let pick = match parts.next() {
            None => Some((0, 1)),
            Some(p) => p
                .split_once('/')
                .and_then(|(a, n)| Some((a.parse::<u32>().ok()?, n.parse::<u32>().ok()?))),
        };
        return match (rows, seed, pick, parts.next()) {
            (Some(rows), Some(seed), Some((asset, assets)), None) => Ok(AssetSpec {
                source: Some(asset_spec::Source::Synthetic(SyntheticAsset {
                    rows,
                    seed,
                    sigma: 0.0,
                    seasonal_asset: asset,
                    seasonal_assets: assets,
                })),
                ..AssetSpec::default()
            }),
            _ => Err(bad()),
        };
    }
    let source = match text.strip_prefix("synthetic:") {
        Some(rest) => {
            let bad = || {
                anyhow!(
                    "--asset {text:?}: expected synthetic:ROWS, synthetic:ROWS:SEED or \
                     synthetic:ROWS:SEED:SIGMA (whole numbers, SIGMA a positive number)"
                )
            };
            let mut parts = rest.split(':');
            let rows = parts.next().and_then(|r| r.parse::<u64>().ok());
            let seed = match parts.next() {
                None => Some(DEFAULT_SEED),
                Some(s) => s.parse::<u64>().ok(),
            };
            let sigma = match parts.next() {
                None => Some(0.0),
                Some(s) => s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0),
            };
            match (rows, seed, sigma, parts.next()) {
                (Some(rows), Some(seed), Some(sigma), None) => {
                    asset_spec::Source::Synthetic(SyntheticAsset {
                        rows,
                        seed,
                        sigma,
                        ..SyntheticAsset::default()
                    })
                }
                _ => return Err(bad()),
            }
        }
        None => {
            let file = BarSource::parse_arg(text).map_err(|e| anyhow!("--asset {text:?}: {e}"))?;
            return Ok(AssetSpec {
                source: Some(asset_spec::Source::DataPath(
                    file.path.to_string_lossy().into_owned(),
                )),
                symbol: file.symbol.unwrap_or_default(),
                ..AssetSpec::default()
            });
        }
    };
    Ok(AssetSpec {
        source: Some(source),
        ..AssetSpec::default()
    })
}

/// A JSON job spec (the format of `tli host run --submit`, see
/// `orchestrator::job`) as a StartTrainingRequest. The spec's own checks run
/// here, so a malformed file fails before anything is sent.
pub(super) fn request_from_spec(text: &str) -> Result<StartTrainingRequest> {
    let spec = JobSpec::from_json(text).map_err(|e| anyhow!(e))?;
    // Features go over as the JSON that was written (absent = host defaults).
    let raw: serde_json::Value = serde_json::from_str(text)?;
    let features_json = raw
        .get("features")
        .filter(|v| !v.is_null())
        .map(|v| v.to_string())
        .unwrap_or_default();
    job_request::request_from_spec(&spec, features_json).map_err(|e| anyhow!(e))
}

/// Reads and converts a `--spec` file.
pub(super) fn request_from_spec_file(path: &Path) -> Result<StartTrainingRequest> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--spec: cannot read {}", path.display()))?;
    request_from_spec(&text).with_context(|| format!("--spec {}", path.display()))
}

/// `train start -p PLUGIN… -a ASSET… [--config …] [--steps N] …` as a request.
/// A `--config` without a plugin name applies to every plugin, `PLUGIN=JSON`
/// to that one (the last of each wins, as for `train local`).
pub(super) fn request_from_flags(args: &StartArgs) -> Result<StartTrainingRequest> {
    if args.plugin.is_empty() || args.asset.is_empty() {
        bail!("give --spec FILE, or at least one --plugin and one --asset (a bar file, synthetic:ROWS or synthetic:ROWS:SEED)");
    }
    let configs = PluginConfigs::parse(&args.config, &args.plugin)?;
    let config_for = |plugin: &str| configs.for_plugin(plugin).unwrap_or_default().to_string();
    let s = &args.selection;
    let mode = s.metric_mode.clone().unwrap_or_default();
    if !matches!(mode.as_str(), "" | "min" | "max") {
        bail!("--metric-mode {mode}: use min (lower is better) or max");
    }
    let keep_best = s.keep_best.as_ref().map(|metric| tli_proto::v1::KeepBest {
        metric: metric.clone(),
        mode: mode.clone(),
        k: s.keep_best_k.unwrap_or(1),
    });
    let early_stopping = s
        .early_stopping
        .as_ref()
        .map(|metric| tli_proto::v1::EarlyStopping {
            metric: metric.clone(),
            mode: mode.clone(),
            patience: s.patience.unwrap_or(0),
            min_delta: s.min_delta.unwrap_or(0.0),
        });
    let models = args
        .plugin
        .iter()
        .map(|p| tli_proto::v1::ModelSpec {
            keep_best: keep_best.clone(),
            early_stopping: early_stopping.clone(),
            pooled: args.pooled,
            ..plugin_model(p, args.steps, 0, config_for(p))
        })
        .collect();
    let mut assets = args
        .asset
        .iter()
        .map(|a| parse_asset(a))
        .collect::<Result<Vec<_>>>()?;
    if let Some(tz) = &args.tz {
        let mut files = assets
            .iter_mut()
            .filter(|a| matches!(a.source, Some(asset_spec::Source::DataPath(_))))
            .peekable();
        if files.peek().is_none() {
            bail!("--tz {tz}: applies to bar file assets, and every --asset is synthetic");
        }
        files.for_each(|a| a.tz = tz.clone());
    }
    if args.train_bars.is_some() && args.folds.is_none() && args.test_starts.is_empty() {
        bail!("--train-bars sizes walk-forward folds: give --folds or --test-starts too");
    }
    let dates = &args.dates;
    if dates.start.is_some() || dates.end.is_some() {
        if !assets
            .iter()
            .any(|a| matches!(a.source, Some(asset_spec::Source::DataPath(_))))
        {
            bail!("--start/--end: apply to bar file assets, and every --asset is synthetic");
        }
        for a in assets
            .iter_mut()
            .filter(|a| matches!(a.source, Some(asset_spec::Source::DataPath(_))))
        {
            a.start_unix_ns = dates.start;
            a.end_unix_ns = dates.end;
        }
    }
    let features_json = dates
        .apply_to_features(args.features.to_json()?.as_deref())?
        .unwrap_or_default();
    let mut request = StartTrainingRequest {
        name: args.name.clone(),
        assets,
        seed: args.seed,
        device: args.device.to_string(),
        features_json,
        walk_forward: (args.folds.is_some() || !args.test_starts.is_empty()).then(|| {
            tli_proto::v1::WalkForward {
                folds: args.folds.unwrap_or(0),
                test_bars: args.test_bars.unwrap_or(0),
                train_bars: args.train_bars.unwrap_or(0),
                test_starts_unix_ns: args.test_starts.clone(),
            }
        }),
        ..Default::default()
    };
    set_models(&mut request, models);
    Ok(request)
}

/// True for endpoints on this machine (then local relative paths mean the same
/// files to the host).
pub(super) fn is_loopback_endpoint(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// For a host on this machine, relative data paths that exist here are sent
/// as absolute paths, so they mean the same file whatever directory the host
/// was started in. Other paths go as written (the host resolves them).
pub(super) fn absolutize_local_paths(request: &mut StartTrainingRequest, endpoint: &str) {
    if !is_loopback_endpoint(endpoint) {
        return;
    }
    let absolute = |path: &str| -> Option<String> {
        let p = Path::new(path);
        (p.is_relative() && p.exists())
            .then(|| std::path::absolute(p).ok())
            .flatten()
            .map(|abs| abs.to_string_lossy().into_owned())
    };
    let assets = request.assets.iter_mut();
    for asset in assets {
        if let Some(asset_spec::Source::DataPath(path)) = &mut asset.source {
            if let Some(abs) = absolute(path) {
                *path = abs;
            }
        }
    }
    // Covariate files named in the features.
    let Ok(mut features) = serde_json::from_str::<serde_json::Value>(&request.features_json) else {
        return;
    };
    let mut changed = false;
    if let Some(columns) = features.get_mut("columns").and_then(|c| c.as_array_mut()) {
        for column in columns {
            if let Some(file) = column.get_mut("file") {
                if let Some(abs) = file.as_str().and_then(absolute) {
                    *file = abs.into();
                    changed = true;
                }
            }
        }
    }
    if changed {
        request.features_json = features.to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command, TrainCommand};
    use crate::view::WireState;
    use clap::Parser;
    use tli_proto::v1::{model_spec, ModelSpec};

    fn plugin_of(m: &ModelSpec) -> (&str, &str) {
        match &m.config {
            Some(model_spec::Config::Plugin(p)) => (p.plugin.as_str(), p.config_json.as_str()),
            other => panic!("not a plugin config: {other:?}"),
        }
    }

    fn start_args(args: &[&str]) -> StartArgs {
        let mut argv = vec!["tli", "train", "start"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Train {
                command: TrainCommand::Start(a),
            } => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_spec_with_several_models_uses_the_multi_model_form() {
        let spec = r#"{
          "name": "sweep",
          "models": [
            {"plugin": "template", "steps": 200, "config": {"hidden_sizes": [8]}},
            {"plugin": "other", "steps": 50, "priority": 2}
          ],
          "assets": [{"data": "bars/es.dbn.zst"}, {"synthetic": {"rows": 500, "seed": 9}}],
          "seed": 7,
          "device": "cuda:0",
          "features": {"return_horizons": [1, 5]},
          "checkpoint": {"every_steps": 100, "every_seconds": null, "keep": 2},
          "slice_steps": 25
        }"#;
        let r = request_from_spec(spec).unwrap();
        assert_eq!(r.name, "sweep");
        assert!(r.model.is_none());
        assert_eq!(r.models.len(), 2);
        assert_eq!(
            plugin_of(&r.models[0]),
            ("template", r#"{"hidden_sizes":[8]}"#)
        );
        assert_eq!((r.models[0].steps, r.models[0].priority), (200, 0));
        assert_eq!(plugin_of(&r.models[1]), ("other", ""));
        assert_eq!((r.models[1].steps, r.models[1].priority), (50, 2));
        assert_eq!(
            r.assets[0].source,
            Some(asset_spec::Source::DataPath("bars/es.dbn.zst".into()))
        );
        assert_eq!(
            r.assets[1].source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 500,
                seed: 9,
                sigma: 0.0,
                ..Default::default()
            }))
        );
        assert_eq!(
            (r.seed, r.device.as_str(), r.slice_steps),
            (7, "cuda:0", 25)
        );
        let c = r.checkpoint.unwrap();
        assert_eq!((c.every_steps, c.every_seconds, c.keep), (100, 0.0, 2));
        let features: serde_json::Value = serde_json::from_str(&r.features_json).unwrap();
        assert_eq!(features, serde_json::json!({"return_horizons": [1, 5]}));
    }

    #[test]
    fn feature_flags_become_the_feature_config_and_bad_ones_fail_before_sending() {
        let dir = tempfile::tempdir().unwrap();
        let covariates = dir.path().join("vix.csv");
        std::fs::write(&covariates, "date,vix\n2024-01-02,13\n").unwrap();
        let file_arg = format!("vix:observed_past:log1p:file={}", covariates.display());
        let r = request_from_flags(&start_args(&[
            "-p",
            "tft",
            "-a",
            "ES=es.csv",
            "--features",
            r#"{"return_horizons": [1, 2]}"#,
            "--feature-column",
            "ofi:observed_past:zscore:fill=ffill:3",
            "--feature-column",
            "event:known_future:categorical:fill=zero",
            "--feature-column",
            &file_arg,
            "--no-builtin-features",
            "--target",
            "fwd_sign",
            "--target-horizons",
            "1,5",
        ]))
        .unwrap();
        let features: serde_json::Value = serde_json::from_str(&r.features_json).unwrap();
        assert_eq!(features["return_horizons"], serde_json::json!([1, 2]));
        assert_eq!(features["builtin"], false);
        assert_eq!(features["target"], "fwd_sign");
        assert_eq!(features["target_horizons"], serde_json::json!([1, 5]));
        let columns = features["columns"].as_array().unwrap();
        assert_eq!(
            columns[0],
            serde_json::json!({"name": "ofi", "role": "observed_past", "transform": "zscore",
                               "fill": "ffill:3"})
        );
        assert_eq!(columns[1]["kind"], "categorical");
        assert_eq!(columns[2]["file"], covariates.display().to_string());
        // A covariate file named relative to here goes to a local host as an absolute path.
        let mut relative = request_from_flags(&start_args(&[
            "-p",
            "tft",
            "-a",
            "ES=es.csv",
            "--feature-column",
            "vix:observed_past:file=Cargo.toml",
        ]))
        .unwrap();
        absolutize_local_paths(&mut relative, "http://127.0.0.1:50051");
        let features: serde_json::Value = serde_json::from_str(&relative.features_json).unwrap();
        let file = features["columns"][0]["file"].as_str().unwrap();
        assert!(
            Path::new(file).is_absolute() && file.ends_with("Cargo.toml"),
            "{file}"
        );
        // Refused before anything is sent: a bad column, a rule a column breaks, bad JSON.
        let mut argv = vec!["tli", "train", "start", "-p", "tft", "-a", "x.csv"];
        argv.extend(["--feature-column", "ofi:sometimes"]);
        let e = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(e.contains("role \"sometimes\""), "{e}");
        let e = request_from_flags(&start_args(&[
            "-p",
            "tft",
            "-a",
            "x.csv",
            "--features",
            r#"{"columns": [{"name": "x", "role": "static", "transform": "zscore"}]}"#,
        ]))
        .unwrap_err();
        assert!(format!("{e:#}").contains("use none or log1p"), "{e:#}");
        let e = request_from_flags(&start_args(&[
            "-p",
            "tft",
            "-a",
            "x.csv",
            "--features",
            "{",
        ]))
        .unwrap_err();
        assert!(format!("{e:#}").contains("--features is not JSON"), "{e:#}");
    }

    #[test]
    fn a_spec_with_one_model_uses_the_single_model_form_and_defaults() {
        let spec = r#"{"name":"one","models":[{"plugin":"template","steps":10}],
                       "assets":[{"synthetic":{"rows":100}}]}"#;
        let r = request_from_spec(spec).unwrap();
        assert!(r.models.is_empty());
        let m = r.model.as_ref().unwrap();
        assert_eq!(plugin_of(m), ("template", ""));
        assert_eq!(m.steps, 10);
        assert_eq!(
            r.assets[0].source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 100,
                seed: 1,
                sigma: 0.0,
                ..Default::default()
            }))
        );
        // The spec defaults travel explicitly.
        assert_eq!((r.seed, r.device.as_str(), r.slice_steps), (1, "cpu", 10));
        let c = r.checkpoint.unwrap();
        // Time-based by default: no step interval.
        assert_eq!((c.every_steps, c.every_seconds, c.keep), (0, 300.0, 3));
        assert_eq!(r.features_json, "");
    }

    #[test]
    fn bad_specs_fail_before_sending_and_name_the_field() {
        let e = request_from_spec(
            r#"{"name":"x","models":[{"plugin":"t","steps":0}],"assets":[{"synthetic":{"rows":100}}]}"#,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("models[0].steps"), "{e:#}");
        assert!(request_from_spec("not json").is_err());
        let e = request_from_spec_file(Path::new("/definitely/not/here.json")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read"), "{e:#}");
    }

    /// Bars users bring: `-a SYMBOL=FILE` names the bars; `--tz` goes to every file asset.
    #[test]
    fn file_assets_carry_their_symbol_and_the_time_zone() {
        let args = start_args(&[
            "-p",
            "t",
            "-a",
            "ES=a.csv",
            "-a",
            "NQ=/d/b.parquet",
            "-a",
            "c.csv",
            "-a",
            "synthetic:100",
            "--tz",
            "America/New_York",
        ]);
        let r = request_from_flags(&args).unwrap();
        let got: Vec<(&str, &str)> = r
            .assets
            .iter()
            .map(|a| (a.symbol.as_str(), a.tz.as_str()))
            .collect();
        let ny = "America/New_York";
        assert_eq!(got, [("ES", ny), ("NQ", ny), ("", ny), ("", "")]);
        assert_eq!(
            r.assets[1].source,
            Some(asset_spec::Source::DataPath("/d/b.parquet".into()))
        );
        let only_synthetic = start_args(&["-p", "t", "-a", "synthetic:100", "--tz", "UTC"]);
        let e = request_from_flags(&only_synthetic).unwrap_err().to_string();
        assert!(e.contains("every --asset is synthetic"), "{e}");
        let e = Cli::try_parse_from(["tli", "train", "start", "-p", "t", "-a", "x", "--tz", "X/Y"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown time zone"), "{e}");
        // A spec's symbol and zone go over the wire.
        let r = request_from_spec(
            r#"{"name":"j","models":[{"plugin":"t","steps":1}],
                "assets":[{"data":"p.csv","symbol":"ES","tz":"Europe/London"}]}"#,
        )
        .unwrap();
        assert_eq!(
            (r.assets[0].symbol.as_str(), r.assets[0].tz.as_str()),
            ("ES", "Europe/London")
        );
    }

    #[test]
    fn assets_parse() {
        assert_eq!(
            parse_asset("seasonal:3000:21:2/3").unwrap().source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 3000,
                seed: 21,
                seasonal_asset: 2,
                seasonal_assets: 3,
                ..Default::default()
            }))
        );
        assert_eq!(
            parse_asset("seasonal:500").unwrap().source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 500,
                seed: 1,
                seasonal_asset: 0,
                seasonal_assets: 1,
                ..Default::default()
            }))
        );
        for bad in [
            "seasonal:",
            "seasonal:10:1:2",
            "seasonal:10:1:a/3",
            "seasonal:10:1:0/3:x",
        ] {
            assert!(parse_asset(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_asset("synthetic:100").unwrap().source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 100,
                seed: 1,
                sigma: 0.0,
                ..Default::default()
            }))
        );
        assert_eq!(
            parse_asset("synthetic:100:7").unwrap().source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 100,
                seed: 7,
                sigma: 0.0,
                ..Default::default()
            }))
        );
        assert_eq!(
            parse_asset("data/samples/es.dbn.zst").unwrap().source,
            Some(asset_spec::Source::DataPath(
                "data/samples/es.dbn.zst".into()
            ))
        );
        assert_eq!(
            parse_asset("synthetic:100:2:0.05").unwrap().source,
            Some(asset_spec::Source::Synthetic(SyntheticAsset {
                rows: 100,
                seed: 2,
                sigma: 0.05,
                ..Default::default()
            }))
        );
        assert_eq!(
            parse_asset("./synthetic:5").unwrap().source,
            Some(asset_spec::Source::DataPath("./synthetic:5".into()))
        );
        for bad in [
            "synthetic:x",
            "synthetic:",
            "synthetic:10:y",
            "synthetic:1:2:3:4",
            "synthetic:1:2:-0.5",
            " ",
        ] {
            let e = parse_asset(bad).unwrap_err().to_string();
            assert!(e.contains("--asset"), "{bad}: {e}");
        }
        assert!(parse_asset("synthetic:x")
            .unwrap_err()
            .to_string()
            .contains("synthetic:ROWS"));
    }

    #[test]
    fn states_and_orders_parse() {
        assert_eq!(parse_state("completed").unwrap(), ProtoTaskState::Completed);
        assert_eq!(parse_state("RUNNING").unwrap(), ProtoTaskState::Running);
        let e = parse_state("done").unwrap_err().to_string();
        assert!(e.contains("\"done\""), "{e}");
        assert!(
            e.contains("queued, running, checkpointing, completed, failed, cancelled, interrupted"),
            "{e}"
        );
        for state in TaskState::ALL {
            let wire = parse_state(state.as_str()).unwrap();
            assert_eq!(WireState::from_proto(wire as i32), WireState::Known(state));
            assert_eq!(WireState::from_proto(wire as i32).name(), state.as_str());
        }
        assert_eq!(WireState::from_proto(0).name(), "unspecified");
        assert_eq!(WireState::from_proto(99).name(), "unknown");
        assert_eq!(parse_order("oldest").unwrap(), JobOrder::OldestFirst);
        assert_eq!(parse_order("newest").unwrap(), JobOrder::NewestFirst);
        assert_eq!(parse_order("name").unwrap(), JobOrder::Name);
        assert!(parse_order("size").is_err());
    }

    #[test]
    fn flags_build_either_form() {
        let one = request_from_flags(&start_args(&[
            "-p",
            "template",
            "-a",
            "synthetic:200:3",
            "--steps",
            "40",
            "--config",
            r#"{"batch_size": 8}"#,
            "--name",
            "quick",
        ]))
        .unwrap();
        assert!(one.models.is_empty());
        let m = one.model.as_ref().unwrap();
        assert_eq!(plugin_of(m), ("template", r#"{"batch_size": 8}"#));
        assert_eq!(m.steps, 40);
        assert_eq!(one.name, "quick");
        assert_eq!((one.seed, one.device.as_str()), (1, "cpu"));
        assert!(one.checkpoint.is_none());

        let two = request_from_flags(&start_args(&[
            "-p",
            "a",
            "-p",
            "b",
            "-a",
            "x.dbn",
            "-a",
            "synthetic:100",
            "--config",
            r#"{"general": 1}"#,
            "--config",
            r#"b={"only_b": 2}"#,
        ]))
        .unwrap();
        assert!(two.model.is_none());
        assert_eq!(plugin_of(&two.models[0]), ("a", r#"{"general": 1}"#));
        assert_eq!(plugin_of(&two.models[1]), ("b", r#"{"only_b": 2}"#));
        assert_eq!(two.assets.len(), 2);
        assert!(!two.models[0].pooled, "per-asset tasks are the default");
        let pooled = request_from_flags(&start_args(&[
            "-p", "a", "-a", "x.dbn", "-a", "y.dbn", "--pooled",
        ]))
        .unwrap();
        assert!(pooled.model.as_ref().is_some_and(|m| m.pooled));

        let e = request_from_flags(&start_args(&["-p", "a", "-a", "x", "--config", "c={}"]))
            .unwrap_err();
        assert!(
            e.to_string().contains("not one of the --plugin values"),
            "{e}"
        );
        let e = request_from_flags(&start_args(&["-p", "a"])).unwrap_err();
        assert!(e.to_string().contains("--spec FILE"), "{e}");
        assert!(request_from_flags(&start_args(&["-p", "a", "-a", "synthetic:x"])).is_err());
    }

    #[test]
    fn loopback_endpoints_are_recognised() {
        for e in [
            "http://127.0.0.1:50051",
            "http://localhost:1",
            "https://[::1]:443/",
            "127.0.0.2:9",
        ] {
            assert!(is_loopback_endpoint(e), "{e}");
        }
        for e in [
            "http://10.0.0.1:50051",
            "https://gpu-box:50051",
            "http://[fe80::1]:1",
        ] {
            assert!(!is_loopback_endpoint(e), "{e}");
        }
        let mut r = StartTrainingRequest {
            assets: vec![
                parse_asset("Cargo.toml").unwrap(),
                parse_asset("not/here.dbn").unwrap(),
            ],
            ..Default::default()
        };
        absolutize_local_paths(&mut r, "http://10.1.1.1:1");
        assert_eq!(
            r.assets[0].source,
            Some(asset_spec::Source::DataPath("Cargo.toml".into()))
        );
        absolutize_local_paths(&mut r, "http://127.0.0.1:50051");
        match &r.assets[0].source {
            Some(asset_spec::Source::DataPath(p)) => {
                assert!(
                    Path::new(p).is_absolute() && p.ends_with("Cargo.toml"),
                    "{p}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.assets[1].source,
            Some(asset_spec::Source::DataPath("not/here.dbn".into()))
        );
    }
}
