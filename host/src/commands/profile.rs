//! `tli profile memory`: one child process per config (see
//! [`crate::profile`]), then a table (ratios to the first config) or JSON,
//! and optionally the PNG chart. With the hidden `--child` flag this process
//! is the child: it measures one config and prints its JSON.

use super::scan;
use super::train::{dataset_for, describe_dataset};
use crate::byte_size::format_bytes;
use crate::plugin_configs::PluginConfigs;
use crate::profile::probe::{self, ProbeRequest};
use crate::profile::{chart, configs_with_labels, run_children, MemoryProfile};
use abi_stable::std_types::RArc;
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::path::Path;
use tli_cli::args::{OutputFormat, ProfileMemoryArgs};
use tli_cli::{new_table, print_json};
use tli_data::features::AnnotatedDataset;

pub(super) fn memory(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    args: &ProfileMemoryArgs,
    output: OutputFormat,
) -> Result<()> {
    if args.child {
        return child(plugin_dir, contracts, args);
    }
    // Malformed config JSON fails here, before any child starts.
    PluginConfigs::parse(&args.config, std::slice::from_ref(&args.plugin))?;
    let exe = std::env::current_exe().context("finding the tli binary to run the children")?;
    let mut global: Vec<OsString> = vec!["--plugin-dir".into(), plugin_dir.into()];
    if let Some(contracts) = contracts {
        global.extend(["--contracts".into(), contracts.into()]);
    }
    let profiles = run_children(&exe, &global, args)?;
    if let Some(path) = &args.chart {
        chart::write_chart(path, &profiles)?;
        eprintln!("chart written to {}", path.display());
    }
    if output == OutputFormat::Json {
        return print_json(&profiles);
    }
    print_table(&profiles);
    Ok(())
}

/// Measures the one config of `args` in this process and prints its JSON.
fn child(plugin_dir: &Path, contracts: Option<&Path>, args: &ProfileMemoryArgs) -> Result<()> {
    let mut configs = configs_with_labels(args)?;
    if configs.len() != 1 {
        bail!(
            "a profiling child measures exactly one config, not {}",
            configs.len()
        );
    }
    let (label, config_arg) = configs.remove(0);
    if let Some(threads) = args.run.threads {
        tch::set_num_threads(threads);
    }
    let AnnotatedDataset { dataset, annex } = dataset_for(contracts, &args.data, args.run.seed)?;
    let dataset = RArc::new(dataset);
    describe_dataset(&dataset);
    let registry = scan(plugin_dir)?;
    let plugin = registry.get(&args.plugin).ok_or_else(|| {
        anyhow!(
            "no plugin named {:?} is loaded from {} (loaded: {}); `tli plugins list --local` shows why",
            args.plugin,
            plugin_dir.display(),
            registry.names().join(", ")
        )
    })?;
    let config = match &config_arg {
        Some(arg) => PluginConfigs::parse(
            std::slice::from_ref(arg),
            std::slice::from_ref(&args.plugin),
        )?
        .for_plugin(&args.plugin)
        .map(str::to_string),
        None => None,
    };
    let request = ProbeRequest {
        label: &label,
        config: config.as_deref(),
        steps: args.steps,
        seed: args.run.seed,
        device: args.run.device,
        warmup: !args.no_warmup,
    };
    let profile = probe::measure(plugin, &request, &dataset, &annex)
        .with_context(|| format!("profiling {label}"))?;
    print_json(&profile)
}

/// One row of the table: a name and each profile's bytes.
type Row = (&'static str, fn(&MemoryProfile) -> Option<u64>);

const ROWS: [Row; 13] = [
    ("parameters", |p| Some(p.tensors.parameters)),
    ("gradients (transient)", |p| Some(p.tensors.gradients)),
    ("optimizer state", |p| Some(p.tensors.optimizer_state)),
    ("parameters + optimizer", |p| {
        Some(p.tensors.parameters + p.tensors.optimizer_state)
    }),
    ("activations (trainer's count)", |p| {
        Some(p.tensors.activations)
    }),
    ("tensor total", |p| Some(p.tensors.total)),
    ("plugin estimate (total)", |p| Some(p.estimate.total)),
    ("peak RSS over baseline", |p| {
        Some(p.process.peak_over_baseline)
    }),
    ("  of it while building the trainer", |p| {
        Some(p.process.build_peak_over_baseline)
    }),
    ("  less weights, gradients, state", |p| {
        Some(p.process.activations)
    }),
    ("CUDA peak allocated over baseline", |p| {
        p.cuda.map(|c| c.peak_over_baseline)
    }),
    ("  less weights, gradients, state", |p| {
        p.cuda.map(|c| c.activations)
    }),
    ("CUDA peak reserved", |p| p.cuda.map(|c| c.peak_reserved)),
];

fn print_table(profiles: &[MemoryProfile]) {
    let Some(first) = profiles.first() else {
        return;
    };
    let mut header = vec!["".to_string()];
    for (k, p) in profiles.iter().enumerate() {
        header.push(p.label.clone());
        if k > 0 {
            header.push(format!("{} / {}", p.label, first.label));
        }
    }
    let mut table = new_table(header.iter().map(String::as_str).collect());
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.3}×", a / b)
        } else {
            "-".into()
        }
    };
    for (name, value) in ROWS {
        if profiles.iter().all(|p| value(p).is_none()) {
            continue;
        }
        let mut cells = vec![name.to_string()];
        for (k, p) in profiles.iter().enumerate() {
            let v = value(p);
            cells.push(v.map(format_bytes).unwrap_or_else(|| "-".into()));
            if k > 0 {
                cells.push(match (v, value(first)) {
                    (Some(v), Some(b)) => ratio(v as f64, b as f64),
                    _ => "-".into(),
                });
            }
        }
        table.add_row(cells);
    }
    let mut extra = |name: &str, f: &dyn Fn(&MemoryProfile) -> String, compare: bool| {
        let mut cells = vec![name.to_string()];
        for (k, p) in profiles.iter().enumerate() {
            cells.push(f(p));
            if k > 0 {
                cells.push(if compare {
                    ratio(p.seconds_per_step, first.seconds_per_step)
                } else {
                    String::new()
                });
            }
        }
        table.add_row(cells);
    };
    let mut names: Vec<&str> = Vec::new();
    for p in profiles {
        for (name, _) in &p.fractions {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    for name in names {
        extra(
            &name.replace('_', " "),
            &|p| {
                p.fractions
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("-".into(), |(_, v)| format!("{:.1}%", 100.0 * v))
            },
            false,
        );
    }
    extra(
        "peak RSS / tensor total",
        &|p| format!("{:.3}", p.process.ratio_to_tensors),
        false,
    );
    extra(
        "seconds per step",
        &|p| format!("{:.3}", p.seconds_per_step),
        true,
    );
    tli_cli::outln!(
        "{} on {}, {} step(s) per config, each in its own process",
        first.plugin,
        first.device,
        first.steps
    );
    tli_cli::outln!("{table}");
    tli_cli::outln!(
        "tensor rows: the trainer's count of its own tensors (Trainer::memory); peak RSS: the \
         kernel's count for the child process above its baseline (libtorch, plugins and data \
         loaded{}), which the plugin has no part in.",
        if first.process.warmup {
            ", one warm-up step run and dropped"
        } else {
            ""
        }
    );
    for p in profiles.iter().filter(|p| !p.process.peak_reset) {
        tli_cli::outln!(
            "warning: {}: the kernel's peak counter could not be reset, so its peak may predate \
             the trainer",
            p.label
        );
    }
}
