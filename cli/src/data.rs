//! `tli data synth|inspect|convert|contracts`.

use crate::args::{OutputFormat, SynthArgs};
use crate::{new_table, print_json};
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use tli_core::byte_size::format_bytes;
use tli_data::{
    contracts::ContractBook, dbn_format, inspect, synth, timefmt, BarInterval, BarSource, Format,
};

/// The files of a command with its `--tz` (timestamps written without a zone).
pub(super) fn with_tz(files: &[BarSource], tz: &Option<String>) -> Vec<BarSource> {
    files
        .iter()
        .map(|f| BarSource {
            tz: tz.clone(),
            ..f.clone()
        })
        .collect()
}

pub(super) fn synth(
    contracts: Option<&Path>,
    args: &SynthArgs,
    output: OutputFormat,
) -> Result<()> {
    let book = ContractBook::load(contracts)?;
    let contract = book.lookup(&args.symbol)?;
    if args.planted_covariates {
        return synth_covariates(&book, contract, args, output);
    }
    let spec = synth::SynthSpec {
        symbol: args.symbol.clone(),
        interval: BarInterval::parse(&args.interval).map_err(|e| anyhow!("--interval: {e}"))?,
        bars: args.bars as usize,
        start: timefmt::parse(&args.start).map_err(|e| anyhow!("--start: {e}"))?,
        seed: args.seed,
        planted_strength: args.planted_strength,
        single_contract: args.single_contract,
    };
    let contract_bars = synth::generate(&spec, contract)?;
    match Format::from_path(&args.out)? {
        Format::Dbn if !spec.single_contract => {
            dbn_format::write_parent(&args.out, &spec.symbol, spec.interval, &contract_bars)?
        }
        _ if contract_bars.len() == 1 => tli_data::write_bars(&args.out, &contract_bars[0].table)?,
        _ => {
            return Err(anyhow!(
                "{}: several contracts only fit a DBN file; use .dbn/.dbn.zst or --single-contract",
                args.out.display()
            ))
        }
    }
    let summary = inspect::summarize(&args.out, &book)
        .with_context(|| format!("reading back {}", args.out.display()))?;
    if output == OutputFormat::Json {
        return print_json(&summary);
    }
    crate::outln!(
        "wrote {} ({}): {} contract(s), {} bars of {} {} from {} to {}, planted strength {}",
        args.out.display(),
        format_bytes(summary.bytes),
        contract_bars.len(),
        summary.bars,
        summary.interval,
        summary.symbol,
        summary.first,
        summary.last,
        spec.planted_strength
    );
    Ok(())
}

/// `tli data synth --planted-covariates`.
fn synth_covariates(
    book: &ContractBook,
    contract: &tli_data::contracts::ContractSpec,
    args: &SynthArgs,
    output: OutputFormat,
) -> Result<()> {
    use tli_data::synthetic_covariates::{planted_covariates, PlantedCovariates};
    if args.interval != "1d" && args.interval != "1m" {
        bail!("--planted-covariates writes daily bars: leave --interval out (or give 1d)");
    }
    if Format::from_path(&args.out)? == Format::Dbn {
        bail!(
            "{}: a DBN file cannot hold columns of your own; name it .csv or .parquet",
            args.out.display()
        );
    }
    let spec = PlantedCovariates {
        symbol: contract.root.clone(),
        bars: args.bars as usize,
        start: timefmt::parse(&args.start).map_err(|e| anyhow!("--start: {e}"))?,
        seed: args.seed,
        ..PlantedCovariates::default()
    };
    let table = planted_covariates(&spec);
    tli_data::write_bars(&args.out, &table)?;
    let summary = inspect::summarize(&args.out, book)
        .with_context(|| format!("reading back {}", args.out.display()))?;
    if output == OutputFormat::Json {
        return print_json(&summary);
    }
    crate::outln!(
        "wrote {} ({}): {} daily bars of {} from {} to {} with the columns ofi (observed past, \
         leads the next return by {}σ) and event (known future: FOMC moves its bar {}σ)",
        args.out.display(),
        format_bytes(summary.bytes),
        summary.bars,
        summary.symbol,
        summary.first,
        summary.last,
        spec.lead,
        spec.event_effect
    );
    Ok(())
}

pub(super) fn inspect(
    contracts: Option<&Path>,
    files: &[BarSource],
    output: OutputFormat,
) -> Result<()> {
    let book = ContractBook::load(contracts)?;
    let summaries = files
        .iter()
        .map(|f| inspect::summarize_source(f, &book))
        .collect::<Result<Vec<_>, _>>()?;
    if output == OutputFormat::Json {
        return print_json(&summaries);
    }
    for s in &summaries {
        let mut table = new_table(vec!["FIELD", "VALUE"]);
        let contract = match (&s.contract, &s.contract_error) {
            (Some(c), _) => c.clone(),
            (None, e) => format!("none: {}", e.as_deref().unwrap_or_default()),
        };
        let rows = [
            (
                "file",
                format!("{} ({}, {})", s.file, s.format, format_bytes(s.bytes)),
            ),
            ("symbol", symbol_text(s)),
            ("contract", contract),
            ("bars", format!("{} × {}", s.bars, s.interval)),
            ("range", format!("{} .. {}", s.first, s.last)),
            ("timestamps", s.timestamps.clone()),
            (
                "price",
                format!("low {} high {} last close {}", s.low, s.high, s.last_close),
            ),
            ("volume", s.total_volume.to_string()),
            ("gaps", gap_text(s)),
            ("rolls", roll_text(s)),
            ("outliers", outlier_text(s)),
        ];
        for (k, v) in rows {
            table.add_row(vec![k.to_string(), v]);
        }
        crate::outln!("{table}");
    }
    Ok(())
}

/// What plugins receive from one file (`tli data inspect --features`).
#[derive(serde::Serialize)]
struct FeatureView {
    file: String,
    symbol: String,
    rows: usize,
    bar_interval_ns: i64,
    splits: [u64; 4],
    features: Vec<NamedRole>,
    targets: Vec<TargetView>,
    gap_rows: Vec<String>,
    roll_rows: Vec<String>,
}

#[derive(serde::Serialize)]
struct NamedRole {
    name: String,
    role: String,
    /// `built-in`, `bar file` or a covariate file's name.
    source: String,
    /// `z-score (train)` or `as is`.
    scaling: String,
    /// The input variable (a categorical column's one-hot columns share one).
    variable: u32,
    /// Mean and standard deviation of the input, as the model gets it, over the training split.
    train_mean: f64,
    train_sd: f64,
}

#[derive(serde::Serialize)]
struct TargetView {
    name: String,
    horizon: u32,
    scale: f64,
}

/// The feature config `tli data inspect --features` shows.
pub(super) struct FeatureRequest<'a> {
    /// `--feature-config` JSON.
    pub config: Option<&'a str>,
    /// `--feature-column`s, added to it.
    pub columns: &'a [tli_data::columns::UserColumn],
    pub target: Option<&'a tli_data::columns::Target>,
}

/// Mean and standard deviation of column `c` of `rows` rows of `width`.
fn column_moments(values: &[f32], width: usize, c: usize, rows: usize) -> (f64, f64) {
    let n = rows.max(1) as f64;
    let mean = (0..rows)
        .map(|r| f64::from(values[r * width + c]))
        .sum::<f64>()
        / n;
    let var = (0..rows)
        .map(|r| (f64::from(values[r * width + c]) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}

/// The symbol and where it came from (`ES (given on the asset; the file says ESH4)`).
fn symbol_text(s: &inspect::Summary) -> String {
    use tli_data::bar_source::SymbolOrigin;
    let origin = match s.symbol_origin {
        SymbolOrigin::FileName => "from the file name",
        SymbolOrigin::Column => "from the symbol column",
        SymbolOrigin::Metadata => "from the tli.symbol metadata",
        SymbolOrigin::Dbn => "from the DBN symbology",
        SymbolOrigin::Asset => "given",
    };
    match &s.file_symbol {
        Some(file) if file != &s.symbol => format!("{} ({origin}; the file says {file})", s.symbol),
        _ => format!("{} ({origin})", s.symbol),
    }
}

pub(super) fn inspect_features(
    contracts: Option<&Path>,
    files: &[BarSource],
    request: FeatureRequest<'_>,
    output: OutputFormat,
) -> Result<()> {
    let book = ContractBook::load(contracts)?;
    let mut config: tli_data::features::FeatureConfig = match request.config {
        Some(json) => serde_json::from_str(json).context("--feature-config")?,
        None => Default::default(),
    };
    config.columns.extend(request.columns.iter().cloned());
    if let Some(target) = request.target {
        config.target = target.clone();
    }
    config
        .check()
        .map_err(|e| anyhow::anyhow!("features: {e}"))?;
    let mut views = Vec::new();
    for file in files {
        let (table, notes) = file.read_for(&book, &config)?;
        let contract = file.contract(&table, &notes, &book)?;
        let (built, stats) = tli_data::features::build_with_stats(&table, contract, &config)?;
        let (d, a) = (&built.dataset, &built.annex);
        let width = d.feature_names.len();
        let train = d.splits.train_end as usize;
        let variables = a.variables();
        // User columns never share a name with a built-in feature (checked).
        let builtin_names = if config.builtin {
            config.builtin_names()
        } else {
            Vec::new()
        };
        let is_builtin = |j: usize| {
            builtin_names
                .iter()
                .any(|n| n == d.feature_names[j].as_str())
        };
        let source_of = |j: usize| -> String {
            if is_builtin(j) {
                return "built-in".into();
            }
            let name = d.feature_names[j].as_str();
            let column = name.split('=').next().unwrap_or(name);
            match config
                .columns
                .iter()
                .find(|c| c.name == column)
                .and_then(|c| c.file.as_ref())
            {
                Some(file) => file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                None => "bar file".into(),
            }
        };
        let marked = |bit: u8| -> Vec<String> {
            (0..d.rows())
                .filter(|&r| a.row_markers[r] & bit != 0)
                .map(|r| timefmt::format(d.timestamps[r]))
                .collect()
        };
        let s = d.splits;
        views.push(FeatureView {
            file: file.path.display().to_string(),
            symbol: d.symbol.to_string(),
            rows: d.rows(),
            bar_interval_ns: a.bar_interval_ns,
            splits: [s.train_end, s.valid_start, s.valid_end, s.test_start],
            features: d
                .feature_names
                .iter()
                .zip(&a.feature_roles)
                .enumerate()
                .map(|(j, (n, r))| {
                    let (train_mean, train_sd) = column_moments(&d.features, width, j, train);
                    let scaled = stats.feature_std[j] != 1.0 || stats.feature_mean[j] != 0.0;
                    NamedRole {
                        name: n.to_string(),
                        role: r.name().to_string(),
                        source: source_of(j),
                        scaling: if is_builtin(j) || scaled {
                            "z-score (train)".into()
                        } else {
                            "as is".into()
                        },
                        variable: variables[j],
                        train_mean,
                        train_sd,
                    }
                })
                .collect(),
            targets: d
                .target_names
                .iter()
                .zip(a.target_horizons.iter().zip(&a.target_scales))
                .map(|(n, (h, sc))| TargetView {
                    name: n.to_string(),
                    horizon: *h,
                    scale: *sc,
                })
                .collect(),
            gap_rows: marked(tli_plugin_api::GAP_BEFORE),
            roll_rows: marked(tli_plugin_api::ROLL_BEFORE),
        });
    }
    if output == OutputFormat::Json {
        return print_json(&views);
    }
    for v in &views {
        crate::outln!(
            "{} ({}): {} rows, bar interval {} s; train [0, {}), validation [{}, {}), test [{}, {})",
            v.file,
            v.symbol,
            v.rows,
            v.bar_interval_ns / 1_000_000_000,
            v.splits[0],
            v.splits[1],
            v.splits[2],
            v.splits[3],
            v.rows
        );
        let mut table = new_table(vec![
            "INPUT",
            "SOURCE",
            "ROLE / HORIZON",
            "SCALE",
            "TRAIN MEAN",
            "TRAIN SD",
        ]);
        for f in &v.features {
            table.add_row(vec![
                f.name.clone(),
                f.source.clone(),
                f.role.clone(),
                f.scaling.clone(),
                format!("{:.4}", f.train_mean),
                format!("{:.4}", f.train_sd),
            ]);
        }
        for t in &v.targets {
            table.add_row(vec![
                t.name.clone(),
                "target".into(),
                format!("{} bars ahead", t.horizon),
                format!("÷ {:.6e}", t.scale),
                String::new(),
                String::new(),
            ]);
        }
        crate::outln!("{table}");
        let list = |rows: &[String]| -> String {
            let mut text = rows.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            if rows.len() > 10 {
                text.push_str(&format!(", … ({} in all)", rows.len()));
            }
            text
        };
        crate::outln!(
            "gap before: {} row(s) {}",
            v.gap_rows.len(),
            list(&v.gap_rows)
        );
        crate::outln!(
            "roll before: {} row(s) {}",
            v.roll_rows.len(),
            list(&v.roll_rows)
        );
    }
    Ok(())
}

fn outlier_text(s: &inspect::Summary) -> String {
    if s.outlier_count == 0 {
        return "none".into();
    }
    let mut text = format!(
        "{} price(s) on {} bar(s) far from every bar around them (a wrong unit or a typing slip?)",
        s.outlier_count, s.outlier_bars
    );
    for o in &s.outliers {
        text.push_str(&format!("\n{}", o.describe()));
    }
    if s.outlier_count > s.outliers.len() {
        text.push_str(&format!(
            "\n… and {} more",
            s.outlier_count - s.outliers.len()
        ));
    }
    text
}

fn gap_text(s: &inspect::Summary) -> String {
    let mut text = s.gap_count.to_string();
    for g in &s.largest_gaps {
        text.push_str(&format!(
            "\n{} bars missing after {}",
            g.missing_bars, g.after
        ));
    }
    text
}

fn roll_text(s: &inspect::Summary) -> String {
    if s.rolls.is_empty() {
        return "none".into();
    }
    s.rolls
        .iter()
        .map(|r| format!("{} {} → {} (ratio {:.6})", r.at, r.from, r.to, r.ratio))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(super) fn convert(contracts: Option<&Path>, input: &BarSource, output: &Path) -> Result<()> {
    Format::from_path(output)?;
    let (table, _) = input.read(&ContractBook::load(contracts)?)?;
    tli_data::write_bars(output, &table)?;
    eprintln!(
        "wrote {} bars of {} to {}",
        table.len(),
        table.symbol,
        output.display()
    );
    Ok(())
}

pub(super) fn contracts(contracts: Option<&Path>, output: OutputFormat) -> Result<()> {
    let book = ContractBook::load(contracts)?;
    let specs: Vec<_> = book.specs().collect();
    if output == OutputFormat::Json {
        return print_json(&specs);
    }
    let mut table = new_table(vec![
        "ROOT",
        "NAME",
        "EXCHANGE",
        "TICK",
        "POINT VALUE",
        "TICK VALUE",
        "SESSION",
    ]);
    for c in specs {
        table.add_row(vec![
            c.root.clone(),
            c.name.clone(),
            c.exchange.clone(),
            c.tick_size.to_string(),
            format!("{} {}", c.point_value, c.currency),
            format!("{} {}", c.tick_value(), c.currency),
            c.session.clone(),
        ]);
    }
    crate::outln!("{table}");
    Ok(())
}
