//! Trained models in use: a model card made from a training run
//! ([`card::card_for`]), and a model loaded from its bundle and applied to
//! bars ([`LoadedModel`]): featurized with the model's own pipeline and
//! training statistics, forecasts de-scaled to returns, realized returns
//! beside them where the file has them.

pub mod backtest;
pub mod card;
pub mod catalog;
mod loaded;

pub use loaded::{estimate_for, LoadedModel, PredictWindow, PreparedBatch};

use tli_plugin_api::PluginError;

/// Why a model could not be loaded or applied. One line each, saying what
/// to do.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the model needs plugin {plugin}, which is not loaded (loaded: {loaded}); install it in the plugin directory")]
    PluginMissing { plugin: String, loaded: String },
    #[error("the model needs plugin {plugin} (a version compatible with it: {wanted}), but only {available} is loaded; install a compatible version")]
    PluginVersion {
        plugin: String,
        wanted: String,
        available: String,
    },
    #[error("{0}")]
    TrainOnly(String),
    #[error("plugin {plugin} refuses the model's config: {source}")]
    Config {
        plugin: String,
        #[source]
        source: PluginError,
    },
    #[error("{what}: {source}")]
    Plugin {
        what: String,
        #[source]
        source: PluginError,
    },
    #[error("these are {root} bars but the model was trained on {known}; give bars of one of those contracts")]
    OtherContract { root: String, known: String },
    #[error(transparent)]
    Data(#[from] tli_data::DataError),
    #[error(
        "no bar lies between {start} and {end} with the model's look-back before it (give more bars, or widen the window)"
    )]
    EmptyWindow { start: String, end: String },
    #[error("{0}")]
    Card(String),
    #[error("backtest: {0}")]
    Backtest(#[from] tli_backtest::MetricsError),
}
