//! `tli-plugin-api`: the ABI contract between the tli host and its model
//! plugins, and nothing else.
//!
//! * [`abi`]: the FFI surface (root module, trainer and host-services trait
//!   objects), checked for layout by abi_stable at load time.
//! * [`device`]: the device string (`cpu`, `cuda:N`) parsed once, as [`Device`].
//! * [`types`]: the plain data that crosses it (datasets as arrays, configs as
//!   JSON, reports, errors).
//! * [`task_inputs`] (1.1): every dataset of a pooled task and the side table
//!   of named columns (feature roles, target horizons and scales, bar
//!   interval, gap and roll markers, asset index).
//! * [`predict`] (1.2): predictors made from exported weights, and the
//!   naming rule of their output columns.
//! * [`plugin`]: the safe traits plugin authors implement, and
//!   [`export_plugin!`], which wraps every entry point in a panic guard.
//! * [`version`]: the plugin-API semver and the host's compatibility rule.
//!
//! See `docs/plugin-api.md` for the contract and the rules for evolving it.

pub mod abi;
pub mod device;
mod guard;
pub mod plugin;
pub mod predict;
pub mod task_inputs;
pub mod types;
pub mod version;

pub use abi::{
    AbiPredictor, AbiPredictor_TO, AbiTrainer, AbiTrainer_TO, HostServices, HostServicesApi,
    HostServicesApi_TO, PluginModule, PluginModuleRef, PredictorBox, TrainerBox,
};
pub use abi_stable;
pub use device::{Device, DeviceParseError};
pub use guard::guarded;
pub use plugin::{Host, Manifest, Plugin, Predictor, Trainer, MAX_HEADLINE_METRICS};
pub use predict::{Predictions, PredictorSpec};
pub use task_inputs::{
    Column, DatasetAnnex, FeatureRole, TaskInputs, GAP_BEFORE, ROLL_BEFORE, TASK_WIDE,
};
pub use types::*;
pub use version::{check_compatible, PLUGIN_API_VERSION, VERSION_SYMBOL};

/// Capability names a plugin may declare through `Plugin::capabilities` (1.1).
pub mod capability {
    /// Can train one model across every asset of a job (a pooled task).
    pub const POOLED: &str = "pooled";
    /// 1.2: can apply a trained model (`export_weights`, `create_predictor`).
    pub const PREDICT: &str = "predict";
}

#[doc(hidden)]
pub mod __private {
    pub use crate::plugin::root_module;
    pub use crate::version::version_marker;
}

/// Exports a [`Plugin`] implementation as a tli plugin library.
///
/// ```ignore
/// struct MyPlugin;
/// impl tli_plugin_api::Plugin for MyPlugin { /* … */ }
/// tli_plugin_api::export_plugin!(MyPlugin);
/// ```
///
/// This emits two symbols: `tli_plugin_api_version` (a NUL-terminated string
/// the host reads before touching anything else) and abi_stable's root module
/// whose every function is panic-guarded. The crate must depend on
/// `abi_stable` directly (its attribute macro names `::abi_stable`).
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        $crate::export_plugin!(@api_version $crate::PLUGIN_API_VERSION, $plugin);
    };
    // Declares another API version than the one compiled against. Exists only
    // so tests can build a plugin that claims an incompatible version.
    (@api_version $version:expr, $plugin:ty) => {
        #[no_mangle]
        #[allow(non_upper_case_globals)]
        pub static tli_plugin_api_version: [u8; 32] = $crate::__private::version_marker($version);

        #[::abi_stable::export_root_module]
        pub fn tli_plugin_root_module() -> $crate::PluginModuleRef {
            $crate::__private::root_module::<$plugin>($version)
        }
    };
}
