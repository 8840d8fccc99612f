//! The charts drawn to temporary PNG files (needs a TrueType font, e.g.
//! fonts-dejavu-core, or TLI_CHART_FONT), and the choices around them.

use super::*;

/// Width and height from a PNG's IHDR chunk, if the file is a PNG.
fn png_size(path: &Path) -> Option<(u32, u32)> {
    let bytes = std::fs::read(path).ok()?;
    let be = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    (bytes.get(..8)? == b"\x89PNG\r\n\x1a\n" && bytes.get(12..16)? == b"IHDR")
        .then(|| Some((be(16)?, be(20)?)))
        .flatten()
}

fn series(name: &str, n: u64, f: impl Fn(u64) -> f64) -> MetricSeries {
    MetricSeries {
        name: name.into(),
        steps: (1..=n).map(|s| s * 10).collect(),
        values: (1..=n).map(f).collect(),
        at_ms: (1..=n).map(|s| 1_000 + s as i64 * 100).collect(),
        recorded_points: n,
    }
}

fn history() -> JobHistory {
    let task = |task_id: i64, plugin: &str, series: Vec<MetricSeries>| TaskHistory {
        task_id,
        ordinal: task_id as u32 - 1,
        plugin: plugin.into(),
        asset: "synthetic-ar1:300:1".into(),
        device: "cpu".into(),
        series,
    };
    let mib = 1u64 << 20;
    JobHistory {
        job_id: 4,
        name: "sweep".into(),
        created_ms: 1_000,
        now_ms: 120_000,
        metric_names: vec!["loss".into(), "val/skill".into()],
        tasks: vec![
            task(
                1,
                "template",
                vec![
                    series("loss", 500, |s| 1.0 / s as f64),
                    series("val/skill", 5, |s| {
                        if s == 3 {
                            f64::NAN
                        } else {
                            s as f64 * 0.1
                        }
                    }),
                ],
            ),
            task(2, "dqn", vec![series("loss", 300, |s| 2.0 / s as f64)]),
        ],
        devices: vec![DeviceHistory {
            device: "cuda:0".into(),
            budget: vec![BudgetChange {
                at_ms: 0,
                bytes: 600 * mib,
            }],
            reservations: vec![
                ReservationSpan {
                    task_id: 1,
                    job_id: 4,
                    bytes: 300 * mib,
                    measured_bytes: Some(200 * mib),
                    from_ms: 2_000,
                    to_ms: Some(60_000),
                },
                ReservationSpan {
                    task_id: 2,
                    job_id: 4,
                    bytes: 250 * mib,
                    measured_bytes: None,
                    from_ms: 3_000,
                    to_ms: Some(90_000),
                },
                ReservationSpan {
                    task_id: 9,
                    job_id: 3,
                    bytes: 100 * mib,
                    measured_bytes: Some(80 * mib),
                    from_ms: 500,
                    to_ms: Some(2_500),
                },
            ],
        }],
    }
}

fn options(dir: &Path, metrics: &[&str]) -> PlotOptions {
    PlotOptions {
        metrics: metrics.iter().map(|m| m.to_string()).collect(),
        all: false,
        out_dir: dir.join("plots"),
        width: 900,
        height: 500,
    }
}

#[test]
fn an_overview_a_figure_per_model_and_every_device_are_drawn_as_pngs() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_charts(&history(), &options(dir.path(), &[])).unwrap();
    let names: Vec<(&str, &str)> = written.iter().map(|w| (w.kind, w.name.as_str())).collect();
    assert_eq!(
        names,
        [
            ("overview", "overview"),
            ("model", "template"),
            ("model", "dqn"),
            ("memory", "cuda:0")
        ]
    );
    let files: Vec<String> = written
        .iter()
        .map(|w| w.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files,
        [
            "overview.png",
            "model-template.png",
            "model-dqn.png",
            "memory-cuda_0.png"
        ]
    );
    assert_eq!(
        written[0].metrics,
        ["loss", "loss"],
        "each model's main curve"
    );
    assert_eq!(written[1].metrics, ["loss", "val/skill"]);
    assert_eq!(written[2].metrics, ["loss"]);
    for w in &written {
        let size = (w.width.unwrap(), w.height.unwrap());
        assert_eq!(png_size(&w.path), Some(size), "{}", w.path.display());
        assert_eq!(size.0, 900);
        assert!(size.1 >= 500);
        // Something was drawn: far more than a blank image compresses to.
        let len = std::fs::metadata(&w.path).unwrap().len();
        assert!(len > 8_000, "{} is only {len} bytes", w.path.display());
    }
    assert_eq!(written[3].reservations, Some(3));
    assert_eq!(written[3].budget_bytes, Some(600 << 20));
    // One chart per metric, a line per task, on request.
    let charts = write_charts(&history(), &options(dir.path(), &["loss", "val/skill"])).unwrap();
    let loss = &charts[0].series;
    assert_eq!(loss.len(), 2);
    assert_eq!(loss[0].label, "task 1 template/synthetic-ar1:300:1");
    assert_eq!((loss[0].points, loss[0].last_step), (500, Some(5000)));
    assert_eq!(loss[1].last_value, Some(2.0 / 300.0));
    assert_eq!(charts[1].series.len(), 1, "only task 1 reported it");
    // TLI_PLOT_TEST_KEEP=DIR keeps copies to look at.
    if let Ok(keep) = std::env::var("TLI_PLOT_TEST_KEEP") {
        for w in &written {
            let _ = std::fs::create_dir_all(&keep);
            let _ = std::fs::copy(&w.path, Path::new(&keep).join(w.path.file_name().unwrap()));
        }
    }
}

/// A job as the plugins report one: training curves with validation twins,
/// counters, and evaluation scores reported once at the end.
fn job_with_scores() -> JobHistory {
    let mut h = history();
    h.metric_names = [
        "episodes",
        "test_loss",
        "test_sharpe",
        "train_loss",
        "valid_loss",
        "valid_skill",
    ]
    .map(String::from)
    .to_vec();
    let once = |name: &str, step: u64, value: f64| MetricSeries {
        name: name.into(),
        steps: vec![step],
        values: vec![value],
        at_ms: vec![5_000],
        recorded_points: 1,
    };
    h.tasks[0].series = vec![
        series("episodes", 40, |s| s as f64),
        once("test_loss", 400, 0.25),
        once("test_sharpe", 400, f64::NAN),
        series("train_loss", 40, |s| 1.0 / s as f64),
        series("valid_loss", 4, |s| 0.5 / s as f64),
        series("valid_skill", 4, |s| 0.1 * s as f64),
    ];
    h.tasks[1].series = vec![once("test_loss", 300, 0.5), once("valid_skill", 300, 0.2)];
    h.tasks[1].asset = "ES=/data/bars/es, front.csv".into();
    h
}

#[test]
fn single_values_go_in_a_table_and_validation_twins_are_not_charted_twice() {
    let h = job_with_scores();
    let panel = |title: &str, metric: &str| Panel {
        title: title.into(),
        metric: metric.into(),
        tasks: vec![0],
    };
    assert_eq!(
        plan(&h),
        PlotPlan {
            overview: vec![panel("template: train_loss", "train_loss")],
            models: vec![(
                "template".into(),
                vec![
                    panel("train_loss", "train_loss"),
                    panel("valid_skill", "valid_skill"),
                    panel("episodes", "episodes"),
                ]
            )],
            scalars: vec!["test_loss".into(), "test_sharpe".into()],
        },
        "dqn reported no curve: no figure; valid_loss is on train_loss's panel"
    );
    let dir = tempfile::tempdir().unwrap();
    let written = write_charts(&h, &options(dir.path(), &[])).unwrap();
    let names: Vec<(&str, &str)> = written.iter().map(|w| (w.kind, w.name.as_str())).collect();
    assert_eq!(
        names,
        [
            ("model", "template"),
            ("table", "scalars"),
            ("memory", "cuda:0")
        ],
        "one model: no overview"
    );
    let table = &written[1];
    assert_eq!((table.rows, table.width), (Some(3), None));
    assert_eq!(table.path.file_name().unwrap(), "scalars.csv");
    assert_eq!(
        std::fs::read_to_string(&table.path).unwrap(),
        "task_id,task,metric,step,value\n\
         1,task 1 template/synthetic-ar1:300:1,test_loss,400,0.25\n\
         1,task 1 template/synthetic-ar1:300:1,test_sharpe,400,\n\
         2,\"task 2 dqn/es, front.csv\",test_loss,300,0.5\n"
    );
    // --all: a chart per metric, single values included; no overview or table.
    let mut o = options(dir.path(), &[]);
    o.all = true;
    o.out_dir = dir.path().join("all");
    let all = write_charts(&h, &o).unwrap();
    assert_eq!(all.len(), h.metric_names.len() + 1);
    assert!(all.iter().all(|w| w.kind == "metric" || w.kind == "memory"));
}

/// A model's figure leaves out breakdowns: per-horizon and other
/// extensions of a metric it shows, and large families no metric heads.
#[test]
fn a_model_figure_shows_main_curves_not_breakdowns() {
    let names: Vec<String> = [
        "epoch",
        "train_loss",
        "valid_loss",
        "valid_mse",
        "valid_mse_h1",
        "valid_mse_h2",
        "valid_mse_zero_forecast",
        "valid_qrisk_p50",
        "valid_qrisk_p50_h1",
        "valid_trade_a",
        "valid_trade_b",
        "valid_trade_c",
        "valid_trade_d",
        "valid_trade_e",
        "valid_pinball_p10",
        "valid_pinball_p90",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        model_curves(&names),
        [
            "train_loss",
            "valid_mse",
            "valid_qrisk_p50",
            "valid_pinball_p10",
            "valid_pinball_p90",
            "epoch"
        ]
    );
}

#[test]
fn chosen_metrics_only_and_unknown_ones_list_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_charts(
        &history(),
        &options(dir.path(), &["val/skill", "val/skill"]),
    )
    .unwrap();
    assert_eq!(
        written.len(),
        2,
        "one metric (asked twice) and the memory chart"
    );
    assert_eq!(written[0].name, "val/skill");

    let e = write_charts(&history(), &options(dir.path(), &["loss", "sharpe"])).unwrap_err();
    assert!(matches!(e, PlotError::UnknownMetric { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "no task of job 4 reported a metric named \"sharpe\"; the metrics reported are: loss, val/skill"
    );
    let mut empty = history();
    empty.metric_names.clear();
    let e = chosen_metrics(&empty, &["loss".into()]).unwrap_err();
    assert!(
        e.to_string().ends_with("its tasks reported no metrics yet"),
        "{e}"
    );
}

#[test]
fn a_job_without_metrics_or_reservations_still_gets_its_memory_chart() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = history();
    h.metric_names.clear();
    for t in &mut h.tasks {
        t.series.clear();
    }
    h.devices[0].reservations.clear();
    h.devices[0].budget.clear();
    let written = write_charts(&h, &options(dir.path(), &[])).unwrap();
    assert_eq!(written.len(), 1);
    assert_eq!(png_size(&written[0].path), Some((900, 500)));
    assert_eq!(written[0].kind, "memory");
}

#[test]
fn an_unwritable_place_and_a_silly_size_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let mut o = options(dir.path(), &[]);
    o.out_dir = file.join("plots");
    let e = write_charts(&history(), &o).unwrap_err();
    assert!(matches!(e, PlotError::OutDir { .. }), "{e:?}");
    assert!(e.to_string().starts_with("cannot write charts to "), "{e}");
    let mut o = options(dir.path(), &[]);
    o.width = 10;
    let e = write_charts(&history(), &o).unwrap_err();
    assert!(e.to_string().contains("10×500"), "{e}");
}

#[test]
fn names_and_numbers_for_people() {
    assert_eq!(file_stem("val/skill"), "val_skill");
    assert_eq!(file_stem("cuda:0"), "cuda_0");
    assert_eq!(file_stem(".."), "unnamed");
    assert_eq!(file_stem("episodic return"), "episodic_return");
    assert_eq!(short_number(0.0), "0");
    assert_eq!(short_number(250.0), "250");
    assert_eq!(short_number(12_500.0), "12.5k");
    assert_eq!(short_number(2_000_000.0), "2M");
    assert_eq!(short_number(0.125), "0.125");
    assert_eq!(short_number(1.5), "1.5");
    assert_eq!(short_number(0.00002), "2.0e-5");
    assert_eq!(short_number(-2.8e-17), "0");
    assert_eq!(byte_unit(100.0 * 1048576.0).0, "MiB");
    assert_eq!(byte_unit(8.0 * 1073741824.0).0, "GiB");
    assert_eq!(
        task_label(&history().tasks[1]),
        "task 2 dqn/synthetic-ar1:300:1"
    );
    let mut t = history().tasks[1].clone();
    for (asset, shown) in [
        (
            "pooled[synthetic-seasonal:3000:21:0/3,synthetic-seasonal:3000:21:1/3]",
            "task 2 dqn/pooled ×2",
        ),
        (
            "synthetic-seasonal:3000:21:2/3",
            "task 2 dqn/synthetic-seasonal:3000:21:2/3",
        ),
        ("ES=/data/bars/es.csv", "task 2 dqn/es.csv"),
    ] {
        t.asset = asset.into();
        assert_eq!(task_label(&t), shown);
    }
}

#[test]
fn a_sweep_chart_draws_finished_and_stopped_trials() {
    font::register_font().expect("a TrueType font (fonts-dejavu-core or TLI_CHART_FONT)");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sweep.png");
    let line = |trial: u64, until: u64, best: bool| sweep_chart::TrialLine {
        label: format!("trial {trial}: lr=0.{trial}"),
        points: (1..=until / 10)
            .map(|k| (k * 10, 1.0 / (k + trial) as f64))
            .collect(),
        finished: until == 90,
        best,
    };
    let lines = [
        line(0, 90, false),
        line(1, 10, false),
        line(2, 90, true),
        line(3, 30, false),
    ];
    sweep_chart::draw(
        &path,
        "sweep (job 1): valid_loss of 4 trials by step, ASHA",
        "valid_loss",
        &[10, 30, 90],
        &lines,
        (800, 500),
    )
    .unwrap();
    assert_eq!(png_size(&path), Some((800, 500)));
    // No trial at all still draws the axes.
    sweep_chart::draw(&path, "empty", "valid_loss", &[], &[], (400, 400)).unwrap();
    assert_eq!(png_size(&path), Some((400, 400)));
}

#[test]
fn a_training_metric_is_drawn_with_its_validation_twin() {
    font::register_font().expect("a TrueType font (fonts-dejavu-core or TLI_CHART_FONT)");
    let dir = tempfile::tempdir().unwrap();
    let mut h = history();
    h.metric_names = vec!["train_loss".into(), "valid_loss".into()];
    h.tasks[0].series = vec![
        series("train_loss", 50, |s| 1.0 / s as f64),
        series("valid_loss", 50, |s| 0.5 + 0.01 * s as f64),
    ];
    h.tasks.truncate(1);
    let with = dir.path().join("with.png");
    metrics_chart::draw(&with, &h, "train_loss", (640, 400)).unwrap();
    h.metric_names.pop();
    h.tasks[0].series.pop();
    let without = dir.path().join("without.png");
    metrics_chart::draw(&without, &h, "train_loss", (640, 400)).unwrap();
    assert_ne!(
        std::fs::read(&with).unwrap(),
        std::fs::read(&without).unwrap(),
        "the dashed valid_loss line and its caption"
    );
}

/// A job of many tasks: every task's colour differs from every other's by a
/// visible amount (no two lines share a legend colour), and from white.
#[test]
fn task_colours_stay_distinct_past_the_palette() {
    let colours: Vec<RGBColor> = (0..60).map(task_color).collect();
    let apart = |a: &RGBColor, b: &RGBColor| {
        let d = |x: u8, y: u8| (f64::from(x) - f64::from(y)).powi(2);
        (d(a.0, b.0) + d(a.1, b.1) + d(a.2, b.2)).sqrt()
    };
    for (i, a) in colours.iter().enumerate() {
        assert!(apart(a, &RGBColor(255, 255, 255)) > 60.0, "task {i}: {a:?}");
        for (j, b) in colours.iter().enumerate().skip(i + 1) {
            assert!(apart(a, b) > 15.0, "tasks {i} and {j}: {a:?} and {b:?}");
        }
    }
    assert_eq!(task_color(0), PALETTE[0], "the palette first");
}
