//! `tli-models`: a trained model as files a user can keep, move and check.
//!
//! * [`card`]: `model.json`, everything about a model but its weights: the
//!   plugin and config, the feature pipeline and the normalization
//!   statistics of each asset's training split, the contract, the input
//!   schema, the metrics and how it was trained.
//! * [`bundle`]: a model directory (`model.json`, `weights.safetensors`,
//!   `checksums.sha256`), written atomically and opened only after every
//!   file is checked against its checksum, by what was opened.
//! * [`table`]: a model's predictions as a table (timestamp, symbol, named
//!   columns), written as CSV, JSON or Parquet.
//!
//! No libtorch here: the weights file is written and read by the model's
//! plugin; this crate only moves and checks it. The format is documented in
//! docs/models.md.

pub mod bundle;
pub mod card;
pub mod table;

pub use bundle::{Bundle, BundleError, BundleWriter};
pub use card::{AssetCard, ContractCard, InputSchema, ModelCard, PluginRef, SplitTimes};
pub use table::{PredictionTable, TableError, TableFormat};
