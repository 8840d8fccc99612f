//! `tli train local --save` and `tli predict` with the real binary and the
//! template plugin: a saved model reproduces its reported test metric from
//! its own predictions, predicts longer files of the same contract with the
//! training statistics (not the new file's), and every bad input is refused
//! with one line and nothing written.

use std::path::{Path, PathBuf};
use tli_e2e_tests::*;

const ES_SAMPLE: &str = "data/samples/es_proxy_sp500_1d.csv";
const CL_SAMPLE: &str = "data/samples/cl_proxy_wti_1d.csv";

pub(crate) fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

/// The first `bars` bars of the ES sample, prices multiplied by `level`.
pub(crate) fn es_bars(dir: &Path, name: &str, bars: usize, level: f64) -> String {
    let text = std::fs::read_to_string(sample(ES_SAMPLE)).unwrap();
    let mut lines = text.lines();
    let mut out = format!("{}\n", lines.next().unwrap());
    for line in lines.take(bars) {
        let mut f: Vec<String> = line.split(',').map(str::to_string).collect();
        for price in &mut f[1..5] {
            *price = (price.parse::<f64>().unwrap() * level).to_string();
        }
        out.push_str(&f.join(","));
        out.push('\n');
    }
    let path = dir.join(name);
    std::fs::write(&path, out).unwrap();
    path.to_str().unwrap().to_string()
}

/// The bar times (UTC ns) of a daily CSV sample, in order.
pub(crate) fn bar_times(path: &str) -> Vec<i64> {
    std::fs::read_to_string(sample(path))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| day_ns(l.split(',').next().unwrap()))
        .collect()
}

/// `tli predict -o json` rows.
pub(crate) fn predict_json(
    plugins: &Path,
    model: &Path,
    data: &str,
    extra: &[&str],
) -> Vec<serde_json::Value> {
    let mut args = vec![
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data,
    ];
    args.extend(extra);
    args.extend(["-o", "json"]);
    match ok_json(&run_tli(plugins, &args)) {
        serde_json::Value::Array(rows) => rows,
        other => panic!("not an array: {other}"),
    }
}

fn ts(row: &serde_json::Value) -> i64 {
    day_ns(row["timestamp"].as_str().unwrap())
}

/// UTC nanoseconds of a daily bar's time (`YYYY-MM-DDT00:00:00Z`).
pub(crate) fn day_ns(text: &str) -> i64 {
    // The files are daily: dates at midnight UTC.
    let date = text.strip_suffix("T00:00:00Z").unwrap();
    let p: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let (y, m, d) = (p[0], p[1], p[2]);
    // days from civil (Howard Hinnant), as the product does it.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400_000_000_000
}

/// The MSE of a template model's `tli predict` rows on its card's test split,
/// in the trained units (forecast and actual divided by the target scale, as
/// f32 like the dataset's targets), and how many rows it covers.
fn test_split_mse(card: &serde_json::Value, rows: &[serde_json::Value]) -> (usize, f64) {
    let asset = &card["assets"][0];
    let scale = asset["stats"]["target_scales"][0].as_f64().unwrap();
    let test = [
        asset["splits"]["test"][0].as_i64().unwrap(),
        asset["splits"]["test"][1].as_i64().unwrap(),
    ];
    let scaled = |v: &serde_json::Value| (v.as_f64().unwrap() / scale) as f32;
    let errors: Vec<f64> = rows
        .iter()
        .filter(|r| (test[0]..=test[1]).contains(&ts(r)))
        .map(|r| {
            let e = scaled(&r["fwd_logret_1:mean"]) - scaled(&r["fwd_logret_1:actual"]);
            f64::from(e) * f64::from(e)
        })
        .collect();
    (
        errors.len(),
        errors.iter().sum::<f64>() / errors.len() as f64,
    )
}

#[test]
fn a_saved_model_reproduces_its_test_metric_and_predicts_files_it_never_saw() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let short = es_bars(dir.path(), "es_short.csv", 3000, 1.0);
    let model = dir.path().join("es-mlp");
    let trained = ok_json(&run_tli(
        plugins.path(),
        &[
            "train",
            "local",
            "-p",
            "template",
            "--steps",
            "200",
            "--data",
            &short,
            "--save",
            model.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    assert_eq!(trained[0]["bundle"], model.to_str().unwrap());
    let reported = trained[0]["evaluation"]["test_mse"].as_f64().unwrap();
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("model.json")).unwrap()).unwrap();
    assert_eq!(card["plugin"]["name"], "template");
    assert_eq!(card["metrics"]["test_mse"].as_f64().unwrap(), reported);

    // Consistency: the test rows' squared errors, in the trained units, are the reported test MSE.
    let own = predict_json(plugins.path(), &model, &short, &[]);
    let (test_rows, mse) = test_split_mse(&card, &own);
    assert!(test_rows > 300, "{test_rows} test rows");
    assert!(
        ((mse - reported) / reported).abs() < 1e-6,
        "test MSE from predictions {mse}, reported {reported}"
    );
    // The newest bar is predicted, its realized return is not known yet.
    assert!(own.last().unwrap()["fwd_logret_1:actual"].is_null());

    // New data: a longer file, its price level doubled. Had it been scaled
    // with its own statistics the shared bars would forecast differently.
    let long = es_bars(dir.path(), "es_long.csv", 5000, 2.0);
    let new = predict_json(plugins.path(), &model, &long, &[]);
    assert!(new.len() > own.len() + 1900, "{} rows", new.len());
    let by_ts: std::collections::HashMap<i64, f64> = new
        .iter()
        .map(|r| (ts(r), r["fwd_logret_1:mean"].as_f64().unwrap()))
        .collect();
    // Equal up to float rounding (the doubled prices' logarithms, the batch size of the
    // matrix products); statistics refitted on the longer file move forecasts by percents.
    for r in &own {
        let (a, b) = (by_ts[&ts(r)], r["fwd_logret_1:mean"].as_f64().unwrap());
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1e-4),
            "{}: {a} on the long file, {b} on the training file",
            r["timestamp"]
        );
    }

    // A window, and the other formats: the same rows.
    let window = predict_json(
        plugins.path(),
        &model,
        &long,
        &["--start", "2010-01-01", "--end", "2010-12-31"],
    );
    assert!((240..=260).contains(&window.len()), "{} rows", window.len());
    assert!(window[0]["timestamp"]
        .as_str()
        .unwrap()
        .starts_with("2010-01"));
    let csv = dir.path().join("p.csv");
    let out = run_tli(
        plugins.path(),
        &[
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--data",
            &long,
            "--start",
            "2010-01-01",
            "--end",
            "2010-12-31",
            "--out",
            csv.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), window.len() + 1);
    assert!(text.starts_with("timestamp,symbol,fwd_logret_1:mean,fwd_logret_1:actual\n"));
    let parquet = dir.path().join("p.parquet");
    let out = run_tli(
        plugins.path(),
        &[
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--data",
            &long,
            "-o",
            "parquet",
            "--out",
            parquet.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(&std::fs::read(&parquet).unwrap()[..4], b"PAR1");
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn bad_predictions_and_saves_are_refused_with_one_line_and_nothing_written() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let data = es_bars(dir.path(), "es.csv", 1500, 1.0);
    let model = dir.path().join("m");
    let model_arg = model.to_str().unwrap().to_string();
    let out = run_tli(
        plugins.path(),
        &[
            "train", "local", "-p", "template", "--steps", "20", "--data", &data, "--save",
            &model_arg,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let target = dir.path().join("out.csv");
    let target_arg = target.to_str().unwrap().to_string();
    let refused = |plugin_dir: &Path, args: &[&str], expected: &str| {
        let out = run_tli(plugin_dir, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let last = err.lines().last().unwrap_or_default();
        assert!(last.contains(expected), "{args:?}: {err}");
        assert!(!target.exists(), "{args:?} wrote {}", target.display());
    };
    let predict = |data: &str| -> Vec<String> {
        [
            "predict",
            "--model",
            &model_arg,
            "--data",
            data,
            "-o",
            "csv",
            "--out",
            &target_arg,
        ]
        .map(str::to_string)
        .to_vec()
    };

    let few = es_bars(dir.path(), "few.csv", 15, 1.0);
    refused(
        plugins.path(),
        &args(&predict(&few)),
        "the model needs more than its look-back",
    );
    let cl = sample(CL_SAMPLE);
    refused(
        plugins.path(),
        &args(&predict(cl.to_str().unwrap())),
        "these are CL bars but the model was trained on ES",
    );
    let empty = PluginDir::with(&[]);
    refused(
        empty.path(),
        &args(&predict(&data)),
        "the model needs plugin template@0.1.0, which is not loaded",
    );
    let mut window = predict(&data);
    window.extend(["--start".into(), "2030-01-01".into()]);
    refused(
        plugins.path(),
        &args(&window),
        "no bar lies between 2030-01-01",
    );

    // A damaged bundle: truncated weights.
    let weights = model.join("weights.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    refused(
        plugins.path(),
        &args(&predict(&data)),
        "weights.safetensors does not match its checksum",
    );

    // --save: an existing directory, a train-only plugin: refused before training.
    for (plugin, expected) in [
        (
            "template",
            "already exists; give a new directory (nothing was trained)",
        ),
        (
            "behaviour",
            "train only, so its model cannot be saved (nothing was trained)",
        ),
    ] {
        let to = if plugin == "template" {
            model_arg.clone()
        } else {
            format!("{model_arg}-b")
        };
        let out = run_tli(
            plugins.path(),
            &[
                "train", "local", "-p", plugin, "--steps", "5", "--data", &data, "--save", &to,
            ],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(
            !stderr(&out).contains("steps ("),
            "trained anyway: {}",
            stderr(&out)
        );
    }
    // The listing says which plugins can apply their models.
    let listing = run_tli(plugins.path(), &["plugins", "list", "--local"]);
    let text = stdout(&listing);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("{name} not listed: {text}"))
            .to_string()
    };
    assert!(line("template").contains("train, predict"), "{text}");
    assert!(line("behaviour").contains("train only"), "{text}");
    // -o csv is for predict only.
    let out = run_tli(plugins.path(), &["plugins", "list", "--local", "-o", "csv"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("-o csv is for `tli predict`"),
        "{}",
        stderr(&out)
    );
}

/// A host's tasks trained on bar files are models: `tli models list` shows
/// them, `tli models export` writes a task's bundle, and `tli predict`
/// applies it, reproducing the test MSE the host recorded.
#[test]
fn a_hosts_tasks_are_models_that_export_and_predict() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 2500, 1.0);
    let nq = sample("data/samples/nq_proxy_nasdaq_1d.csv");
    let state = host_run(
        &plugins,
        dir.path(),
        serde_json::json!({
            "name": "models",
            "models": [{"plugin": "template", "steps": 150, "config": {"hidden_sizes": [16]}}],
            "assets": [{"data": es}, {"data": nq.to_str().unwrap()}, {"synthetic": {"rows": 600}}],
            "checkpoint": {"every_steps": 50}
        }),
    );
    let state_arg = state.to_str().unwrap();

    // Template tasks on ES and NQ (models) and on the synthetic asset (not a model).
    let listed = ok_json(&run_tli(
        plugins.path(),
        &["models", "list", "--state-dir", state_arg, "-o", "json"],
    ));
    let listed = listed["models"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let es_task = listed
        .iter()
        .find(|m| m["data"][0]["name"].as_str().unwrap().contains("es.csv"))
        .unwrap_or_else(|| panic!("no ES model: {listed:?}"));
    let task = es_task["task_id"].as_i64().unwrap().to_string();
    assert_eq!(es_task["id"], task.as_str());
    assert_eq!(es_task["source"], "task");
    let model = dir.path().join("es-model");
    let exported = ok_json(&run_tli(
        plugins.path(),
        &[
            "models",
            "export",
            "--state-dir",
            state_arg,
            &task,
            model.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    assert_eq!(exported["checkpoint_step"], 150);
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("model.json")).unwrap()).unwrap();
    let reported = card["metrics"]["test_mse"].as_f64().unwrap();
    assert_eq!(reported, es_task["metrics"]["test_mse"].as_f64().unwrap());
    let rows = predict_json(plugins.path(), &model, &es, &[]);
    let (_, mse) = test_split_mse(&card, &rows);
    assert!(
        ((mse - reported) / reported).abs() < 1e-6,
        "{mse} vs {reported}"
    );

    // Refusals: a synthetic task, an unknown task, an existing directory.
    let synthetic = "3";
    for (args, expected) in [
        (
            vec![synthetic, "x"],
            "has no model card (trained on synthetic data",
        ),
        (vec!["99", "y"], "no model \"99\""),
        (vec![&task, model.to_str().unwrap()], "already exists"),
    ] {
        let mut all = vec!["models", "export", "--state-dir", state_arg];
        all.extend(args);
        let out = run_tli(plugins.path(), &all);
        assert_eq!(out.status.code(), Some(1), "{all:?}");
        assert!(stderr(&out).contains(expected), "{all:?}: {}", stderr(&out));
    }
}

/// A pooled model trained on two files exports and predicts each of its assets.
#[test]
fn a_pooled_host_model_predicts_each_of_its_assets() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 2500, 1.0);
    let nq = sample("data/samples/nq_proxy_nasdaq_1d.csv");
    let state = host_run(
        &plugins,
        dir.path(),
        serde_json::json!({
            "name": "pooled",
            "models": [{"plugin": "template", "steps": 100, "pooled": true,
                        "config": {"hidden_sizes": [16]}}],
            "assets": [{"data": es}, {"data": nq.to_str().unwrap()}],
            "checkpoint": {"every_steps": 50}
        }),
    );
    let state_arg = state.to_str().unwrap();
    let model = dir.path().join("pooled");
    let out = run_tli(
        plugins.path(),
        &[
            "models",
            "export",
            "--state-dir",
            state_arg,
            "1",
            model.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("model.json")).unwrap()).unwrap();
    assert_eq!(card["pooled"], true);
    assert_eq!(card["assets"].as_array().unwrap().len(), 2);
    let es_rows = predict_json(plugins.path(), &model, &es, &[]);
    let nq_rows = predict_json(plugins.path(), &model, nq.to_str().unwrap(), &[]);
    assert!(es_rows.len() > 2000 && nq_rows.len() > 4000);
    // The asset one-hot differs: the same model forecasts the two files differently.
    assert_ne!(
        es_rows[100]["fwd_logret_1:mean"],
        nq_rows[100]["fwd_logret_1:mean"]
    );
    // CL is none of its assets.
    let cl = sample(CL_SAMPLE);
    let out = run_tli(
        plugins.path(),
        &[
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--data",
            cl.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("trained on ES, NQ"),
        "{}",
        stderr(&out)
    );
}

/// Runs `job` to the end with `tli host run` on a state directory in `dir`
/// (bar files under `dir` and the samples allowed); returns the state directory.
pub(crate) fn host_run(plugins: &PluginDir, dir: &Path, job: serde_json::Value) -> PathBuf {
    let spec = dir.join("job.json");
    std::fs::write(&spec, job.to_string()).unwrap();
    let state = dir.join("state");
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data");
    let run = run_tli(
        plugins.path(),
        &[
            "host",
            "run",
            "--no-tensorboard",
            "--state-dir",
            state.to_str().unwrap(),
            "--data-root",
            dir.to_str().unwrap(),
            "--data-root",
            samples.to_str().unwrap(),
            "--submit",
            spec.to_str().unwrap(),
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    state
}
