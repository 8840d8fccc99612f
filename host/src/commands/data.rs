//! `tli data synth|inspect|convert|contracts`.

use super::{new_table, print_json};
use crate::byte_size::format_bytes;
use crate::cli::{OutputFormat, SynthArgs};
use anyhow::{anyhow, Context, Result};
use std::path::{Path, PathBuf};
use tli_data::{contracts::ContractBook, dbn_format, inspect, synth, timefmt, BarInterval, Format};

pub(super) fn synth(
    contracts: Option<&Path>,
    args: &SynthArgs,
    output: OutputFormat,
) -> Result<()> {
    let book = ContractBook::load(contracts)?;
    let contract = book.lookup(&args.symbol)?;
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

pub(super) fn inspect(
    contracts: Option<&Path>,
    files: &[PathBuf],
    output: OutputFormat,
) -> Result<()> {
    let book = ContractBook::load(contracts)?;
    let summaries = files
        .iter()
        .map(|f| inspect::summarize(f, &book))
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
            ("symbol", s.symbol.clone()),
            ("contract", contract),
            ("bars", format!("{} × {}", s.bars, s.interval)),
            ("range", format!("{} .. {}", s.first, s.last)),
            (
                "price",
                format!("low {} high {} last close {}", s.low, s.high, s.last_close),
            ),
            ("volume", s.total_volume.to_string()),
            ("gaps", gap_text(s)),
            ("rolls", roll_text(s)),
        ];
        for (k, v) in rows {
            table.add_row(vec![k.to_string(), v]);
        }
        crate::outln!("{table}");
    }
    Ok(())
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

pub(super) fn convert(input: &Path, output: &Path) -> Result<()> {
    Format::from_path(output)?;
    let table = tli_data::read_bars(input)?;
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
