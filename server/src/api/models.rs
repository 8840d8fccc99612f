//! `ModelService`: the host's models (tasks with a checkpoint and a model
//! card, imported bundles), their export and import as bundles in chunks,
//! and the prediction service: resident models (held through the arbiter),
//! `Predict` and the bidirectional `PredictStream`.
//!
//! Limits: a `Predict` carries at most [`MAX_BARS`](tli_wire::bars::MAX_BARS) bars (one message is
//! under tonic's 4 MiB default); an import is at most [`MAX_IMPORT_BYTES`] of
//! weights, each chunk at most [`CHUNK_BYTES`] × 4, and is written to a
//! staging directory that appears as a model only once checked whole. A
//! stream's first message must open it within [`OPEN_TIMEOUT`].

use super::{blocking, shutting_down, ShutdownSignal};
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tli_backtest::rules::PositionRule;
use tli_data::table::BarInterval;
use tli_models::bundle::{CARD_FILE, CHECKSUMS_FILE, WEIGHTS_FILE};
use tli_models::{Bundle, BundleWriter};
use tli_proto::v1 as pb;
use tli_proto::v1::model_service_server::ModelService;
use tli_runtime::models::backtest::BacktestOptions;
use tli_runtime::models::catalog::{CatalogError, ModelEntry, ModelSource};
use tli_runtime::models::{estimate_for, ModelError, PredictWindow};
use tli_runtime::orchestrator::engine::serving::{Resident, ServeError};
use tli_runtime::orchestrator::engine::Orchestrator;
use tli_wire::backtest::backtest_to_proto;
use tli_wire::bars::{bars_from_proto, rows_to_proto, BarsError};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// Bytes per chunk of an export.
pub const CHUNK_BYTES: usize = 1 << 20;
/// The most weights an import may carry.
pub const MAX_IMPORT_BYTES: u64 = 16 << 30;
/// `model.json` and `checksums.sha256` of an import, at most.
const MAX_SMALL_FILE: usize = 16 << 20;
/// How long a stream may wait for its `open` message.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ModelApi {
    orchestrator: Arc<Orchestrator>,
    shutdown: ShutdownSignal,
}

impl ModelApi {
    pub fn new(orchestrator: Arc<Orchestrator>, shutdown: ShutdownSignal) -> Self {
        Self {
            orchestrator,
            shutdown,
        }
    }

    fn refuse_when_shutting_down(&self) -> Result<(), Status> {
        if self.shutdown.is_triggered() {
            Err(shutting_down())
        } else {
            Ok(())
        }
    }
}

/// A catalog error as a status.
pub fn catalog_status(e: CatalogError) -> Status {
    let text = e.to_string();
    match e {
        CatalogError::NotFound(_) => Status::not_found(text),
        CatalogError::BadName(_) => Status::invalid_argument(text),
        CatalogError::Exists(_) => Status::already_exists(text),
        CatalogError::NotAModel { .. } | CatalogError::TrainedPluginMissing { .. } => {
            Status::failed_precondition(text)
        }
        CatalogError::Bundle(_) => Status::invalid_argument(text),
        CatalogError::Model(e) => model_status(e),
        CatalogError::Card { .. }
        | CatalogError::Export { .. }
        | CatalogError::Store(_)
        | CatalogError::Io { .. } => Status::internal(text),
    }
}

fn model_status(e: ModelError) -> Status {
    let text = e.to_string();
    match e {
        ModelError::PluginMissing { .. }
        | ModelError::PluginVersion { .. }
        | ModelError::TrainOnly(_) => Status::failed_precondition(text),
        ModelError::OtherContract { .. } | ModelError::Data(_) | ModelError::EmptyWindow { .. } => {
            Status::invalid_argument(text)
        }
        ModelError::Config { .. } | ModelError::Card(_) => Status::failed_precondition(text),
        ModelError::Backtest(_) => Status::invalid_argument(text),
        ModelError::Plugin { source, .. }
            if source.code == tli_plugin_api::ErrorCode::INVALID_DATA =>
        {
            Status::invalid_argument(text)
        }
        ModelError::Plugin { .. } => Status::internal(text),
    }
}

fn serve_status(e: ServeError) -> Status {
    match e {
        ServeError::Catalog(e) => catalog_status(e),
        ServeError::Model(e) => model_status(e),
        e @ ServeError::NoRoom { .. } => Status::resource_exhausted(e.to_string()),
        e @ ServeError::NotLoaded(_) => Status::failed_precondition(e.to_string()),
        e @ ServeError::BadBars(_) => Status::invalid_argument(e.to_string()),
        ServeError::ShuttingDown => shutting_down(),
    }
}

/// The bars a request asks outputs for; refuses a start after the end.
fn window_of(start: Option<i64>, end: Option<i64>) -> Result<PredictWindow, Status> {
    if let (Some(s), Some(e)) = (start, end) {
        if s > e {
            return Err(Status::invalid_argument("start is after end"));
        }
    }
    Ok(PredictWindow { start, end })
}

fn bars_status(e: BarsError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// A model as a message (with its resident state when loaded).
pub fn model_info(entry: &ModelEntry, resident: Option<&Resident>) -> pb::ModelInfo {
    let (source, task_id, job_id, task_state) = match &entry.source {
        ModelSource::Task { task, job, state } => {
            ("task", *task as u64, *job as u64, state.clone())
        }
        ModelSource::Imported { .. } => ("imported", 0, 0, String::new()),
    };
    pb::ModelInfo {
        id: entry.id.clone(),
        source: source.into(),
        task_id,
        job_id,
        plugin: entry.card.plugin.name.clone(),
        plugin_version: entry.plugin_version.clone(),
        config_json: entry.card.config.to_string(),
        assets: entry.card.assets.iter().map(|a| a.symbol.clone()).collect(),
        pooled: entry.card.pooled,
        metrics: entry.metrics.clone().into_iter().collect(),
        steps: entry.steps,
        task_state,
        size_bytes: entry.size_bytes,
        card_json: String::new(),
        resident: resident.map(resident_info),
        data: entry
            .card
            .training
            .data
            .iter()
            .map(|d| pb::ModelData {
                name: d.name.clone(),
                sha256: d.sha256.clone(),
            })
            .collect(),
    }
}

fn resident_info(r: &Resident) -> pb::ResidentModel {
    pb::ResidentModel {
        device: r.device.to_string(),
        reserved_bytes: r.reserved_bytes,
        measured_bytes: r.measured_bytes,
        loaded_unix_ms: r.loaded_ms,
        predictions: r.predictions.load(Ordering::Relaxed),
        streams: r.streams.load(Ordering::Relaxed),
        open_streams: r.open_streams.load(Ordering::Relaxed),
        served_by: r.served_by.clone(),
    }
}

fn info_of(o: &Orchestrator, entry: &ModelEntry) -> pb::ModelInfo {
    let resident = o.resident_model(&entry.id).ok();
    model_info(entry, resident.as_deref())
}

type Chunks = Pin<Box<dyn Stream<Item = Result<pb::ExportModelResponse, Status>> + Send>>;
type Outputs = Pin<Box<dyn Stream<Item = Result<pb::PredictStreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ModelService for ModelApi {
    async fn list_models(
        &self,
        _request: Request<pb::ListModelsRequest>,
    ) -> Result<Response<pb::ListModelsResponse>, Status> {
        let o = self.orchestrator.clone();
        let models = blocking(move || {
            let entries = o.models().map_err(catalog_status)?;
            Ok(entries.iter().map(|e| info_of(&o, e)).collect())
        })
        .await?;
        Ok(Response::new(pb::ListModelsResponse { models }))
    }

    async fn get_model(
        &self,
        request: Request<pb::GetModelRequest>,
    ) -> Result<Response<pb::GetModelResponse>, Status> {
        let id = request.into_inner().model;
        let o = self.orchestrator.clone();
        let model = blocking(move || {
            let entry = o.model(&id).map_err(catalog_status)?;
            let mut info = info_of(&o, &entry);
            info.card_json = serde_json::to_string_pretty(&entry.card)
                .map_err(|e| Status::internal(format!("the model card: {e}")))?;
            Ok(info)
        })
        .await?;
        Ok(Response::new(pb::GetModelResponse { model: Some(model) }))
    }

    type ExportModelStream = Chunks;

    async fn export_model(
        &self,
        request: Request<pb::ExportModelRequest>,
    ) -> Result<Response<Self::ExportModelStream>, Status> {
        self.refuse_when_shutting_down()?;
        let id = request.into_inner().model;
        let o = self.orchestrator.clone();
        let (entry, bundle) = blocking(move || {
            let (entry, bundle) = o.open_model_bundle(&id).map_err(catalog_status)?;
            Ok((info_of(&o, &entry), bundle))
        })
        .await?;
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || send_bundle(&bundle, entry, &tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn import_model(
        &self,
        request: Request<Streaming<pb::ImportModelRequest>>,
    ) -> Result<Response<pb::ImportModelResponse>, Status> {
        self.refuse_when_shutting_down()?;
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("an import needs its files; none came"))?;
        let name = first.name.trim().to_string();
        let o = self.orchestrator.clone();
        let target = {
            let name = name.clone();
            blocking(move || o.imported_model_path(&name).map_err(catalog_status)).await?
        };
        // Messages name the model, never the host's directories.
        let (path_text, model_text) = (target.display().to_string(), format!("model {name}"));
        let hide = move |e: tli_models::BundleError| e.to_string().replace(&path_text, &model_text);
        let writer = {
            let target = target.clone();
            let hide = hide.clone();
            blocking(move || BundleWriter::create(&target).map_err(|e| Status::internal(hide(e))))
                .await?
        };
        let mut upload = Upload::new(&writer)?;
        upload.take(first)?;
        while let Some(chunk) = inbound.message().await? {
            if !chunk.name.is_empty() {
                return Err(Status::invalid_argument(
                    "the model's name goes in the first message only",
                ));
            }
            tokio::task::block_in_place(|| upload.take(chunk))?;
        }
        let (card, checksums) = upload.finish()?;
        let o = self.orchestrator.clone();
        let model = blocking(move || {
            // The plugin must accept it here before it appears as a model.
            let parsed = tli_models::bundle::parse_card(&target, &card)
                .map_err(|e| Status::invalid_argument(hide(e)))?;
            estimate_for(&o.registry(), &parsed, 1, o.budget().device).map_err(model_status)?;
            let bundle: Bundle = writer
                .finish_checked(&card, &checksums)
                .map_err(|e| Status::invalid_argument(hide(e)))?;
            tracing::info!(model = %name, "model imported ({} bytes of weights)", bundle.weights_bytes);
            let entry = o.model(&name).map_err(catalog_status)?;
            Ok(info_of(&o, &entry))
        })
        .await?;
        Ok(Response::new(pb::ImportModelResponse {
            model: Some(model),
        }))
    }

    async fn load_model(
        &self,
        request: Request<pb::LoadModelRequest>,
    ) -> Result<Response<pb::LoadModelResponse>, Status> {
        self.refuse_when_shutting_down()?;
        let id = request.into_inner().model;
        let o = self.orchestrator.clone();
        let (model, loaded_now) = blocking(move || {
            let (resident, loaded_now) = o.load_model(&id).map_err(serve_status)?;
            Ok((model_info(&resident.entry, Some(&resident)), loaded_now))
        })
        .await?;
        Ok(Response::new(pb::LoadModelResponse {
            model: Some(model),
            loaded_now,
        }))
    }

    async fn unload_model(
        &self,
        request: Request<pb::UnloadModelRequest>,
    ) -> Result<Response<pb::UnloadModelResponse>, Status> {
        let id = request.into_inner().model;
        let o = self.orchestrator.clone();
        let unloaded = blocking(move || Ok(o.unload_model(&id))).await?;
        Ok(Response::new(pb::UnloadModelResponse { unloaded }))
    }

    async fn predict(
        &self,
        request: Request<pb::PredictRequest>,
    ) -> Result<Response<pb::PredictResponse>, Status> {
        self.refuse_when_shutting_down()?;
        let req = request.into_inner();
        let window = window_of(req.start_unix_ns, req.end_unix_ns)?;
        let bars = req
            .bars
            .ok_or_else(|| Status::invalid_argument("give the bars to predict on"))?;
        let o = self.orchestrator.clone();
        let resident = resident_or_why(&o, &req.model).await?;
        let response = blocking(move || {
            let table = bars_from_proto(&bars, None).map_err(bars_status)?;
            let contract = o.contract_of(&table.symbol).map_err(serve_status)?;
            let rows = resident
                .predict(&table, &contract, window)
                .map_err(serve_status)?;
            Ok(pb::PredictResponse {
                model: resident.id().to_string(),
                served_by: resident.served_by.clone(),
                rows: Some(rows_to_proto(&rows)),
            })
        })
        .await?;
        Ok(Response::new(response))
    }

    async fn backtest(
        &self,
        request: Request<pb::BacktestRequest>,
    ) -> Result<Response<pb::BacktestResponse>, Status> {
        self.refuse_when_shutting_down()?;
        let req = request.into_inner();
        let window = window_of(req.start_unix_ns, req.end_unix_ns)?;
        let rule = match req.rule.trim() {
            "" => PositionRule::Sign,
            text => {
                PositionRule::parse(text).map_err(|e| Status::invalid_argument(e.to_string()))?
            }
        };
        let max_contracts = req.max_contracts.unwrap_or(1.0);
        if !(max_contracts.is_finite() && max_contracts > 0.0) {
            return Err(Status::invalid_argument(
                "max_contracts must be a finite number > 0",
            ));
        }
        for (name, value) in [
            ("commission", req.commission),
            ("slippage_ticks", req.slippage_ticks),
        ] {
            if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(Status::invalid_argument(format!(
                    "{name} must be a finite number ≥ 0"
                )));
            }
        }
        let options = BacktestOptions {
            rule,
            max_contracts,
            commission: req.commission,
            slippage_ticks: req.slippage_ticks,
            window,
        };
        let bars = req
            .bars
            .ok_or_else(|| Status::invalid_argument("give the bars to trade on"))?;
        let o = self.orchestrator.clone();
        let resident = resident_or_why(&o, &req.model).await?;
        let summary_only = req.summary_only;
        let response = blocking(move || {
            let table = bars_from_proto(&bars, None).map_err(bars_status)?;
            let contract = o.contract_of(&table.symbol).map_err(serve_status)?;
            let outcome = resident
                .backtest(&table, &contract, options)
                .map_err(serve_status)?;
            Ok(pb::BacktestResponse {
                model: resident.id().to_string(),
                served_by: resident.served_by.clone(),
                ..backtest_to_proto(&outcome, summary_only)
            })
        })
        .await?;
        Ok(Response::new(response))
    }

    type PredictStreamStream = Outputs;

    async fn predict_stream(
        &self,
        request: Request<Streaming<pb::PredictStreamRequest>>,
    ) -> Result<Response<Self::PredictStreamStream>, Status> {
        self.refuse_when_shutting_down()?;
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(OPEN_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("a stream must open within 30 s"))??;
        let Some(pb::PredictStreamRequest {
            request: Some(pb::predict_stream_request::Request::Open(open)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "a stream's first message opens it (model and symbol)",
            ));
        };
        let interval = match open.interval.trim() {
            "" => None,
            text => Some(
                BarInterval::parse(text).map_err(|e| Status::invalid_argument(e.to_string()))?,
            ),
        };
        let o = self.orchestrator.clone();
        resident_or_why(&o, &open.model).await?;
        let mut stream = blocking(move || {
            o.open_stream(&open.model, open.symbol.trim(), interval)
                .map_err(serve_status)
        })
        .await?;
        let (tx, rx) = mpsc::channel(16);
        let mut shutdown = self.shutdown.subscribe();
        tokio::spawn(async move {
            let opened = pb::PredictStreamResponse {
                rows: None,
                bars_seen: 0,
            };
            if tx.send(Ok(opened)).await.is_err() {
                return;
            }
            loop {
                let next = tokio::select! {
                    next = inbound.next() => next,
                    _ = shutdown.changed() => {
                        let _ = tx.send(Err(shutting_down())).await;
                        return;
                    }
                };
                let bars = match next {
                    None => return,
                    Some(Err(status)) => {
                        tracing::debug!("prediction stream ended: {status}");
                        return;
                    }
                    Some(Ok(pb::PredictStreamRequest {
                        request: Some(pb::predict_stream_request::Request::Bars(bars)),
                    })) => bars,
                    Some(Ok(_)) => {
                        let _ = tx
                            .send(Err(Status::invalid_argument(
                                "after `open`, every message carries bars",
                            )))
                            .await;
                        return;
                    }
                };
                let interval = stream.interval();
                let result = tokio::task::spawn_blocking(move || {
                    let out = stream_bars(&mut stream, &bars, interval);
                    (stream, out)
                })
                .await;
                let Ok((back, out)) = result else {
                    let _ = tx
                        .send(Err(Status::internal("the stream's handler failed")))
                        .await;
                    return;
                };
                stream = back;
                let failed = out.is_err();
                if tx.send(out).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The resident model `id`; NOT_FOUND when there is no such model at all,
/// FAILED_PRECONDITION when it exists but is not loaded.
async fn resident_or_why(o: &Arc<Orchestrator>, id: &str) -> Result<Arc<Resident>, Status> {
    match o.resident_model(id) {
        Ok(resident) => Ok(resident),
        Err(not_loaded) => {
            let (o, id) = (o.clone(), id.to_string());
            blocking(move || match o.model(&id) {
                Ok(_) => Err(serve_status(not_loaded)),
                Err(e) => Err(catalog_status(e)),
            })
            .await
        }
    }
}

/// One request of a stream: its bars checked, pushed, the outputs answered.
fn stream_bars(
    stream: &mut tli_runtime::orchestrator::engine::serving::PredictStream,
    bars: &pb::Bars,
    interval: BarInterval,
) -> Result<pb::PredictStreamResponse, Status> {
    let mut bars = bars.clone();
    if bars.symbol.trim().is_empty() {
        bars.symbol = stream.symbol().to_string();
    } else if bars.symbol.trim() != stream.symbol() {
        return Err(Status::invalid_argument(format!(
            "this stream is for {}; open another stream for {}",
            stream.symbol(),
            bars.symbol.trim()
        )));
    }
    if bars.interval.trim().is_empty() {
        bars.interval = interval.name().to_string();
    }
    let table = bars_from_proto(&bars, Some(interval)).map_err(bars_status)?;
    if table.interval != interval {
        return Err(Status::invalid_argument(format!(
            "these are {} bars; the stream was opened for {} bars",
            table.interval.name(),
            interval.name()
        )));
    }
    let rows = stream.push(&table).map_err(serve_status)?;
    Ok(pb::PredictStreamResponse {
        rows: (!rows.is_empty()).then(|| rows_to_proto(&rows)),
        bars_seen: stream.bars_seen,
    })
}

/// Sends a bundle's three files in chunks (on a blocking thread); stops
/// when the client goes away.
fn send_bundle(
    bundle: &Bundle,
    model: pb::ModelInfo,
    tx: &mpsc::Sender<Result<pb::ExportModelResponse, Status>>,
) {
    let mut out = ChunkSender {
        tx,
        model: Some(model),
    };
    if !out.bytes(CARD_FILE, &bundle.card_bytes) {
        return;
    }
    let Ok(mut weights) = std::fs::File::open(bundle.weights_path()) else {
        let _ = tx.blocking_send(Err(Status::internal(
            "the model's weights could not be read",
        )));
        return;
    };
    let mut offset = 0u64;
    loop {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let n = match read_full(&mut weights, &mut chunk) {
            Ok(n) => n,
            Err(e) => {
                let _ = tx.blocking_send(Err(Status::internal(format!(
                    "reading the model's weights: {e}"
                ))));
                return;
            }
        };
        if n == 0 {
            break;
        }
        chunk.truncate(n);
        if !out.send(WEIGHTS_FILE, offset, bundle.weights_bytes, chunk) {
            return;
        }
        offset += n as u64;
    }
    out.bytes(CHECKSUMS_FILE, &bundle.checksums_bytes);
}

/// An export's messages; the model goes with the first.
struct ChunkSender<'a> {
    tx: &'a mpsc::Sender<Result<pb::ExportModelResponse, Status>>,
    model: Option<pb::ModelInfo>,
}

impl ChunkSender<'_> {
    fn send(&mut self, file: &str, offset: u64, file_size: u64, data: Vec<u8>) -> bool {
        self.tx
            .blocking_send(Ok(pb::ExportModelResponse {
                model: self.model.take(),
                file: file.into(),
                offset,
                file_size,
                data,
            }))
            .is_ok()
    }

    fn bytes(&mut self, file: &str, bytes: &[u8]) -> bool {
        let size = bytes.len() as u64;
        bytes
            .chunks(CHUNK_BYTES)
            .enumerate()
            .all(|(i, chunk)| self.send(file, (i * CHUNK_BYTES) as u64, size, chunk.to_vec()))
    }
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// An import being received (see the module docs).
struct Upload {
    weights: std::fs::File,
    weights_bytes: u64,
    card: Vec<u8>,
    checksums: Vec<u8>,
}

impl Upload {
    fn new(writer: &BundleWriter) -> Result<Self, Status> {
        let weights = std::fs::File::create(writer.weights_path())
            .map_err(|e| Status::internal(format!("staging the import: {e}")))?;
        Ok(Self {
            weights,
            weights_bytes: 0,
            card: Vec::new(),
            checksums: Vec::new(),
        })
    }

    fn take(&mut self, chunk: pb::ImportModelRequest) -> Result<(), Status> {
        if chunk.data.len() > CHUNK_BYTES * 4 {
            return Err(Status::invalid_argument(format!(
                "a chunk of {} bytes; send at most {} per message",
                chunk.data.len(),
                CHUNK_BYTES * 4
            )));
        }
        let small = |into: &mut Vec<u8>, data: &[u8]| {
            if into.len() + data.len() > MAX_SMALL_FILE {
                return Err(Status::invalid_argument(format!(
                    "{} is larger than {MAX_SMALL_FILE} bytes; it is not a tli model file",
                    chunk.file
                )));
            }
            into.extend_from_slice(data);
            Ok(())
        };
        match chunk.file.as_str() {
            CARD_FILE => small(&mut self.card, &chunk.data),
            CHECKSUMS_FILE => small(&mut self.checksums, &chunk.data),
            WEIGHTS_FILE => {
                self.weights_bytes += chunk.data.len() as u64;
                if self.weights_bytes > MAX_IMPORT_BYTES {
                    return Err(Status::invalid_argument(format!(
                        "the weights exceed {MAX_IMPORT_BYTES} bytes; that is not a model this \
                         host imports"
                    )));
                }
                self.weights
                    .write_all(&chunk.data)
                    .map_err(|e| Status::internal(format!("staging the import: {e}")))
            }
            "" if chunk.data.is_empty() => Ok(()),
            other => Err(Status::invalid_argument(format!(
                "{:?} is not a file of a model bundle ({CARD_FILE}, {WEIGHTS_FILE}, \
                 {CHECKSUMS_FILE})",
                other.chars().take(80).collect::<String>()
            ))),
        }
    }

    fn finish(self) -> Result<(Vec<u8>, Vec<u8>), Status> {
        for (name, bytes) in [(CARD_FILE, &self.card), (CHECKSUMS_FILE, &self.checksums)] {
            if bytes.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "the import has no {name}; send all three files of the bundle"
                )));
            }
        }
        if self.weights_bytes == 0 {
            return Err(Status::invalid_argument(format!(
                "the import has no {WEIGHTS_FILE}; send all three files of the bundle"
            )));
        }
        self.weights
            .sync_all()
            .map_err(|e| Status::internal(format!("staging the import: {e}")))?;
        Ok((self.card, self.checksums))
    }
}
