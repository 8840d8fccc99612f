//! `tli models list|show|export|import|load|unload` and `tli predict --model
//! ID` against a host (`ModelService`). Bundles cross in chunks: an export
//! is written to a staging directory and checked whole (checksums, card)
//! before it appears; an import is checked here before it is sent, and again
//! by the host.

use super::connection::{api_error, run, Authed, Remote};
use crate::args::{BacktestArgs, BarWindow, Cli, ModelsCommand, OutputFormat, PredictArgs};
use crate::model_view::{print_model, print_models};
use anyhow::{anyhow, bail, Context, Result};
use std::io::Read;
use std::path::Path;
use tli_data::contracts::ContractBook;
use tli_data::covariates::attach_bar_file_columns;
use tli_data::features::FeatureConfig;
use tli_data::table::BarTable;
use tli_models::bundle::{CARD_FILE, CHECKSUMS_FILE, WEIGHTS_FILE};
use tli_models::{Bundle, BundleWriter};
use tli_proto::v1 as pb;
use tli_proto::v1::model_service_client::ModelServiceClient;
use tli_wire::backtest::backtest_from_proto;
use tli_wire::bars::{bars_to_proto, rows_from_proto, MAX_BARS};

/// Bytes per chunk of an import.
const CHUNK_BYTES: usize = 1 << 20;

fn client(remote: &Remote) -> ModelServiceClient<Authed> {
    ModelServiceClient::with_interceptor(remote.channel.clone(), remote.auth.clone())
        .max_decoding_message_size(64 << 20)
}

pub(crate) fn models(cli: &Cli, command: &ModelsCommand) -> Result<()> {
    let output = cli.output;
    match command {
        ModelsCommand::List { .. } => run(cli, |remote| async move {
            let models = client(&remote)
                .list_models(pb::ListModelsRequest {})
                .await
                .map_err(|s| api_error(&remote, s))?
                .into_inner()
                .models;
            print_models(&models, output, "the host")
        }),
        ModelsCommand::Show { model, .. } => run(cli, |remote| async move {
            let info = client(&remote)
                .get_model(pb::GetModelRequest {
                    model: model.clone(),
                })
                .await
                .map_err(|s| api_error(&remote, s))?
                .into_inner()
                .model
                .ok_or_else(|| anyhow!("the host sent no model"))?;
            print_model(&info, output)
        }),
        ModelsCommand::Export { model, dir, .. } => {
            if dir.symlink_metadata().is_ok() {
                bail!(
                    "{} already exists; export to a new directory (nothing was written)",
                    dir.display()
                );
            }
            run(cli, |remote| export(remote, model, dir, output))
        }
        ModelsCommand::Import { dir, name } => {
            let bundle = Bundle::open(dir)?;
            let name = match name {
                Some(name) => name.clone(),
                None => dir
                    .canonicalize()
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .ok_or_else(|| anyhow!("name the model with --name"))?,
            };
            run(cli, |remote| import(remote, bundle, name, output))
        }
        ModelsCommand::Load { model } => run(cli, |remote| async move {
            let response = client(&remote)
                .load_model(pb::LoadModelRequest {
                    model: model.clone(),
                })
                .await
                .map_err(|s| api_error(&remote, s))?
                .into_inner();
            let info = response
                .model
                .ok_or_else(|| anyhow!("the host sent no model"))?;
            if output == OutputFormat::Json {
                return crate::print_json(&serde_json::json!({
                    "loaded_now": response.loaded_now,
                    "model": crate::model_view::ModelJson::from(&info),
                }));
            }
            let reserved = info
                .resident
                .as_ref()
                .map(|r| tli_core::byte_size::format_bytes(r.reserved_bytes))
                .unwrap_or_default();
            crate::outln!(
                "model {} {} ({}@{}, {reserved} reserved; `tli predict --model {} --data FILE`)",
                info.id,
                if response.loaded_now {
                    "loaded"
                } else {
                    "was already loaded"
                },
                info.plugin,
                info.plugin_version,
                info.id
            );
            Ok(())
        }),
        ModelsCommand::Torchscript { .. } => {
            bail!("`tli models torchscript` loads plugins: run it with the full `tli`")
        }
        ModelsCommand::Unload { model } => run(cli, |remote| async move {
            let unloaded = client(&remote)
                .unload_model(pb::UnloadModelRequest {
                    model: model.clone(),
                })
                .await
                .map_err(|s| api_error(&remote, s))?
                .into_inner()
                .unloaded;
            if output == OutputFormat::Json {
                return crate::print_json(&serde_json::json!({ "unloaded": unloaded }));
            }
            if unloaded {
                crate::outln!("model {model} unloaded");
            } else {
                crate::outln!("model {model} was not loaded");
            }
            Ok(())
        }),
    }
}

async fn export(remote: Remote, model: &str, dir: &Path, output: OutputFormat) -> Result<()> {
    let mut chunks = client(&remote)
        .export_model(pb::ExportModelRequest {
            model: model.to_string(),
        })
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
    let writer = BundleWriter::create(dir)?;
    let weights_path = writer.weights_path();
    let mut weights = std::fs::File::create(&weights_path)
        .with_context(|| format!("creating {}", weights_path.display()))?;
    let (mut card, mut checksums, mut info) = (Vec::new(), Vec::new(), None);
    while let Some(chunk) = chunks.message().await.map_err(|s| api_error(&remote, s))? {
        if info.is_none() {
            info = chunk.model;
        }
        match chunk.file.as_str() {
            CARD_FILE => card.extend_from_slice(&chunk.data),
            CHECKSUMS_FILE => checksums.extend_from_slice(&chunk.data),
            WEIGHTS_FILE => std::io::Write::write_all(&mut weights, &chunk.data)
                .with_context(|| format!("writing {}", weights_path.display()))?,
            other => bail!("the host sent a file {other:?} that is not part of a bundle"),
        }
    }
    drop(weights);
    let bundle = writer.finish_checked(&card, &checksums)?;
    let info = info.ok_or_else(|| anyhow!("the host sent no model"))?;
    if output == OutputFormat::Json {
        return crate::print_json(&serde_json::json!({
            "model": info.id,
            "bundle": bundle.dir,
            "steps": info.steps,
            "weights_bytes": bundle.weights_bytes,
        }));
    }
    crate::outln!(
        "model {} ({}@{}, {} steps) exported to {} (apply it with `tli predict --model {} --data FILE`)",
        info.id,
        info.plugin,
        info.plugin_version,
        info.steps,
        bundle.dir.display(),
        bundle.dir.display()
    );
    Ok(())
}

async fn import(remote: Remote, bundle: Bundle, name: String, output: OutputFormat) -> Result<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let sender = tokio::task::spawn_blocking(move || -> Result<()> {
        let mut first = Some(name);
        let mut send = |file: &str, data: Vec<u8>| {
            tx.blocking_send(pb::ImportModelRequest {
                name: first.take().unwrap_or_default(),
                file: file.into(),
                data,
            })
            .is_ok()
        };
        for chunk in bundle.card_bytes.chunks(CHUNK_BYTES) {
            if !send(CARD_FILE, chunk.to_vec()) {
                return Ok(());
            }
        }
        let mut weights = std::fs::File::open(bundle.weights_path())
            .with_context(|| format!("reading the weights of {}", bundle.dir.display()))?;
        loop {
            let mut chunk = vec![0u8; CHUNK_BYTES];
            let n = weights.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            chunk.truncate(n);
            if !send(WEIGHTS_FILE, chunk) {
                return Ok(());
            }
        }
        send(CHECKSUMS_FILE, bundle.checksums_bytes.clone());
        Ok(())
    });
    let response = client(&remote)
        .import_model(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| api_error(&remote, s));
    sender
        .await
        .map_err(|e| anyhow!("sending the bundle: {e}"))??;
    let info = response?
        .into_inner()
        .model
        .ok_or_else(|| anyhow!("the host sent no model"))?;
    if output == OutputFormat::Json {
        return crate::print_json(&crate::model_view::ModelJson::from(&info));
    }
    crate::outln!(
        "imported as model {} ({}@{}); load it with `tli models load {}`",
        info.id,
        info.plugin,
        info.plugin_version,
        info.id
    );
    Ok(())
}

/// `tli predict --model ID`: the bar file read here, the model applied by the host.
/// The bars of `window`'s file, read and checked here before they are sent
/// (no more than a message may carry).
fn bars_for_the_host(cli: &Cli, window: &BarWindow, command: &str) -> Result<BarTable> {
    let book = ContractBook::load(cli.contracts.as_deref())?;
    let source = window.source();
    let (table, _notes) = source.read(&book)?;
    if table.len() > MAX_BARS {
        bail!(
            "{} has {} bars; a host takes at most {MAX_BARS} at once: split the file by \
             time (keep the model's look-back before each piece) or export the model and run \
             `tli {command} --model BUNDLE` here",
            source.path.display(),
            table.len()
        );
    }
    Ok(table)
}

/// The bars with the columns of their file that `model` reads (its feature
/// config's, from its card on the host): a model trained on the user's own
/// columns needs them with every bar. The host joins covariate files itself.
async fn with_model_columns(
    remote: &Remote,
    model: &str,
    mut table: BarTable,
    window: &BarWindow,
) -> Result<BarTable> {
    let info = client(remote)
        .get_model(pb::GetModelRequest {
            model: model.to_string(),
        })
        .await
        .map_err(|s| api_error(remote, s))?
        .into_inner()
        .model
        .ok_or_else(|| anyhow!("the host sent no model"))?;
    let card: serde_json::Value = match serde_json::from_str(&info.card_json) {
        Ok(card) => card,
        // A host too old to send cards has models without columns.
        Err(_) => return Ok(table),
    };
    let features: FeatureConfig = match card.get("features") {
        Some(f) => serde_json::from_value(f.clone())
            .with_context(|| format!("model {model}: its card's feature config"))?,
        None => return Ok(table),
    };
    let source = window.source();
    let zone = source.zone()?;
    attach_bar_file_columns(&mut table, Some(&source.path), &features, zone.as_ref())
        .with_context(|| format!("model {model} reads the user columns of its bars"))?;
    Ok(table)
}

pub(crate) fn predict(cli: &Cli, args: &PredictArgs) -> Result<()> {
    let format = crate::predictions::table_format(cli.output, args.out.as_deref())?;
    if !args.bars.is_ordered() {
        bail!("--start is after --end; nothing was written");
    }
    let table = bars_for_the_host(cli, &args.bars, "predict")?;
    let model = args.model.to_string_lossy().into_owned();
    let (start_unix_ns, end_unix_ns) = (args.bars.start, args.bars.end);
    let window = args.bars.clone();
    let out = args.out.clone();
    run(cli, |remote| async move {
        let table = with_model_columns(&remote, &model, table, &window).await?;
        let request = pb::PredictRequest {
            model: model.clone(),
            bars: Some(bars_to_proto(&table)),
            start_unix_ns,
            end_unix_ns,
        };
        let response = client(&remote)
            .predict(request)
            .await
            .map_err(|s| api_error(&remote, s))?
            .into_inner();
        let rows = response
            .rows
            .ok_or_else(|| anyhow!("the host sent no rows"))?;
        let predictions = rows_from_proto(&rows)?;
        eprintln!(
            "{} bars of {} predicted by {} (model {model} on the host)",
            predictions.len(),
            table.symbol,
            response.served_by
        );
        crate::predictions::write(&predictions, format, out.as_deref())
    })
}

/// `tli backtest --model ID`: the host trades its loaded model on the bars
/// of a local file; shown, written and drawn here as a bundle's backtest is.
pub(crate) fn backtest(cli: &Cli, args: &BacktestArgs) -> Result<()> {
    let (rule, ledger) = crate::backtests::check(args)?;
    let table = bars_for_the_host(cli, &args.bars, "backtest")?;
    let model = args.model.to_string_lossy().into_owned();
    let window = args.bars.clone();
    let mut request = pb::BacktestRequest {
        model: model.clone(),
        bars: None,
        start_unix_ns: args.bars.start,
        end_unix_ns: args.bars.end,
        rule: rule.name(),
        max_contracts: Some(args.trading.max_contracts),
        commission: args.trading.commission,
        slippage_ticks: args.trading.slippage_ticks,
        summary_only: args.ledger.is_none() && args.plots.is_none(),
    };
    let output = cli.output;
    run(cli, |remote| async move {
        let table = with_model_columns(&remote, &model, table, &window).await?;
        request.bars = Some(bars_to_proto(&table));
        let response = client(&remote)
            .backtest(request)
            .await
            .map_err(|s| api_error(&remote, s))?
            .into_inner();
        let outcome = backtest_from_proto(&response)?;
        let label = format!(
            "{} (model {} on the host)",
            response.served_by, response.model
        );
        crate::backtests::show(&outcome, &label, args, ledger, output)
    })
}
