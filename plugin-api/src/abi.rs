//! The FFI surface itself: the root module every plugin exports, the trainer
//! trait object and the host-services trait object.
//!
//! Plugin authors never implement these directly: they implement the safe
//! traits in [`crate::plugin`] and call [`export_plugin!`](crate::export_plugin),
//! which wraps every entry point in a panic guard.

// abi_stable 0.11's `sabi_trait` expands to impls inside anonymous consts.
#![allow(non_local_definitions)]

use crate::predict::{Predictions, PredictorSpec};
use crate::task_inputs::TaskInputs;
use crate::types::{
    DatasetShape, EvalReport, LogLevel, MemoryBreakdown, PluginError, PluginManifest, StepReport,
    TaskSpec,
};
use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings, sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RArc, RBox, RResult, RStr, RString, RVec},
    StableAbi,
};

/// A trainer living inside a plugin. Every method is called from one host
/// thread at a time (the task's runner thread); a trainer is never shared.
#[sabi_trait]
pub trait AbiTrainer: Send {
    /// Runs up to `n` optimization steps and returns what was done with metrics.
    fn step(&mut self, n: u64) -> RResult<StepReport, PluginError>;
    /// Evaluates on the validation split.
    fn evaluate(&mut self) -> RResult<EvalReport, PluginError>;
    /// Writes everything needed to continue exactly into the existing directory `dir`.
    fn save_checkpoint(&mut self, dir: RStr<'_>) -> RResult<(), PluginError>;
    /// Restores the state written by `save_checkpoint` from `dir`.
    fn load_checkpoint(&mut self, dir: RStr<'_>) -> RResult<(), PluginError>;
    /// Measured bytes currently held by this trainer's tensors.
    fn memory(&self) -> RResult<MemoryBreakdown, PluginError>;
    /// Steps completed over the trainer's whole life, including those restored
    /// from a checkpoint.
    #[sabi(last_prefix_field)]
    fn total_steps(&self) -> RResult<u64, PluginError>;
}

/// A trainer as the host holds it.
pub type TrainerBox = AbiTrainer_TO<'static, RBox<()>>;

/// A predictor living inside a plugin (1.2): a trained model's weights,
/// applied to rows on demand. Called from one host thread at a time; the
/// host may keep it for as long as a model is loaded.
#[sabi_trait]
pub trait AbiPredictor: Send {
    /// Outputs for every row of `batch` that has the context the model
    /// needs (see [`crate::predict`]). Keeps no state between calls.
    fn predict(&mut self, batch: TaskInputs) -> RResult<Predictions, PluginError>;
    /// Measured bytes held by this predictor's tensors.
    fn memory(&self) -> RResult<MemoryBreakdown, PluginError>;
    /// Streaming: `bars` holds the *next* rows of each dataset (usually one);
    /// the predictor keeps what it needs of the past (a window, a recurrent
    /// state, the position an agent holds) and returns outputs for the new
    /// rows, numbered by how many rows of that dataset it has been streamed.
    fn stream(&mut self, bars: TaskInputs) -> RResult<Predictions, PluginError>;
    /// Forgets everything streamed so far.
    #[sabi(last_prefix_field)]
    fn reset(&mut self) -> RResult<(), PluginError>;
}

/// A predictor as the host holds it.
pub type PredictorBox = AbiPredictor_TO<'static, RBox<()>>;

/// What the host offers to plugins. Implemented by the host; plugins call it
/// through [`crate::plugin::Host`].
#[sabi_trait]
pub trait HostServicesApi: Send + Sync {
    /// A log line, routed into the host's log with the plugin and task attached.
    fn log(&self, level: LogLevel, message: RStr<'_>);
    /// True once the host wants this trainer to stop as soon as it can.
    #[sabi(last_prefix_field)]
    fn is_cancelled(&self) -> bool;
}

/// Host services as handed to a plugin.
pub type HostServices = HostServicesApi_TO<'static, RArc<()>>;

/// The root module: the one symbol a plugin library exports.
///
/// A prefix type. `last_prefix_field` (on `create_trainer`) never moves: the
/// fields up to it are the 1.0 module, which every 1.x plugin has. Each later
/// minor appends fields after it, each marked `#[sabi(missing_field(option))]`,
/// so the host reads them as `Option`s: `None` for a plugin built against an
/// older minor, which then gets the 1.0 entry points (docs/plugin-api.md).
///
/// abi_stable's load-time layout check accepts a library whose prefix type
/// has *at least* the expected fields, never fewer ("too many fields"). The
/// host therefore checks each plugin against the module of the minor it
/// declares ([`v1_0::PluginModuleRef`] for a 1.0 plugin) and only then views
/// it through this type, whose appended accessors return `None` for what
/// that plugin lacks.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    pub manifest: extern "C" fn() -> RResult<PluginManifest, PluginError>,
    /// Validates a config JSON and returns it normalized (defaults filled in).
    pub validate_config: extern "C" fn(config_json: RStr<'_>) -> RResult<RString, PluginError>,
    /// Bytes a trainer for this config, dataset shape and device (`cpu`, `cuda:N`) will need.
    /// For a pooled task the shape is the sum over its datasets (rows added up).
    pub estimate_memory: extern "C" fn(
        config_json: RStr<'_>,
        shape: DatasetShape,
        device: RStr<'_>,
    ) -> RResult<MemoryBreakdown, PluginError>,
    #[sabi(last_prefix_field)]
    pub create_trainer:
        extern "C" fn(spec: TaskSpec, host: HostServices) -> RResult<TrainerBox, PluginError>,
    /// 1.1: what the plugin can do beyond 1.0, as names (e.g. `pooled`,
    /// `task_inputs`); see [`crate::capability`].
    #[sabi(missing_field(option))]
    pub capabilities: extern "C" fn() -> RResult<RVec<RString>, PluginError>,
    /// 1.1: `create_trainer` with the [`TaskInputs`] (every dataset of a
    /// pooled task and the side table of named columns).
    #[sabi(missing_field(option))]
    pub create_trainer_with_inputs: extern "C" fn(
        spec: TaskSpec,
        inputs: TaskInputs,
        host: HostServices,
    ) -> RResult<TrainerBox, PluginError>,
    /// 1.2: writes the weights of the checkpoint in `checkpoint_dir` (one
    /// `save_checkpoint` wrote for this config) to the file `weights_path`:
    /// weights only, no optimizer state or training cursor.
    #[sabi(missing_field(option))]
    pub export_weights: extern "C" fn(
        config_json: RStr<'_>,
        checkpoint_dir: RStr<'_>,
        weights_path: RStr<'_>,
    ) -> RResult<(), PluginError>,
    /// 1.2: bytes a predictor for this config will hold, on `device`, for a
    /// batch of `shape.rows` rows.
    #[sabi(missing_field(option))]
    pub estimate_predictor_memory: extern "C" fn(
        config_json: RStr<'_>,
        shape: DatasetShape,
        device: RStr<'_>,
    ) -> RResult<MemoryBreakdown, PluginError>,
    /// 1.2: a predictor from exported weights.
    #[sabi(missing_field(option))]
    pub create_predictor: extern "C" fn(
        spec: PredictorSpec,
        host: HostServices,
    ) -> RResult<PredictorBox, PluginError>,
    /// 1.3: the model of `spec` (as for `create_predictor`) traced on the
    /// windows of `example` into a TorchScript module, written with its
    /// example inputs into the existing directory `out_dir`; returns the
    /// module's signature as JSON (docs/plugin-api.md, "TorchScript").
    #[sabi(missing_field(option))]
    pub export_torchscript: extern "C" fn(
        spec: PredictorSpec,
        example: TaskInputs,
        out_dir: RStr<'_>,
        host: HostServices,
    ) -> RResult<RString, PluginError>,
    /// 1.5: the metrics a person compares this plugin's tasks by, most
    /// telling first (see [`crate::Plugin::headline_metrics`]).
    #[sabi(missing_field(option))]
    pub headline_metrics: extern "C" fn() -> RResult<RVec<RString>, PluginError>,
}

/// The root module exactly as plugin API 1.3 declared it (1.4 added
/// side-table columns only and shares it): used only to check the layout of
/// plugins that declare 1.3.x or 1.4.x (see [`PluginModule`]). Never change it.
pub mod v1_3 {
    use super::*;

    /// The 1.3 root module (same name, fields and types as 1.3.0 shipped).
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginModule {
        pub manifest: extern "C" fn() -> RResult<PluginManifest, PluginError>,
        pub validate_config: extern "C" fn(config_json: RStr<'_>) -> RResult<RString, PluginError>,
        pub estimate_memory: extern "C" fn(
            config_json: RStr<'_>,
            shape: DatasetShape,
            device: RStr<'_>,
        ) -> RResult<MemoryBreakdown, PluginError>,
        #[sabi(last_prefix_field)]
        pub create_trainer:
            extern "C" fn(spec: TaskSpec, host: HostServices) -> RResult<TrainerBox, PluginError>,
        #[sabi(missing_field(option))]
        pub capabilities: extern "C" fn() -> RResult<RVec<RString>, PluginError>,
        #[sabi(missing_field(option))]
        pub create_trainer_with_inputs: extern "C" fn(
            spec: TaskSpec,
            inputs: TaskInputs,
            host: HostServices,
        ) -> RResult<TrainerBox, PluginError>,
        #[sabi(missing_field(option))]
        pub export_weights: extern "C" fn(
            config_json: RStr<'_>,
            checkpoint_dir: RStr<'_>,
            weights_path: RStr<'_>,
        ) -> RResult<(), PluginError>,
        #[sabi(missing_field(option))]
        pub estimate_predictor_memory: extern "C" fn(
            config_json: RStr<'_>,
            shape: DatasetShape,
            device: RStr<'_>,
        )
            -> RResult<MemoryBreakdown, PluginError>,
        #[sabi(missing_field(option))]
        pub create_predictor: extern "C" fn(
            spec: PredictorSpec,
            host: HostServices,
        ) -> RResult<PredictorBox, PluginError>,
        #[sabi(missing_field(option))]
        pub export_torchscript: extern "C" fn(
            spec: PredictorSpec,
            example: TaskInputs,
            out_dir: RStr<'_>,
            host: HostServices,
        ) -> RResult<RString, PluginError>,
    }

    impl RootModule for PluginModuleRef {
        declare_root_module_statics! {PluginModuleRef}
        const BASE_NAME: &'static str = "tli_plugin";
        const NAME: &'static str = "tli_plugin";
        const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.3.0");
    }
}

/// The root module exactly as plugin API 1.2 declared it: used only to check
/// the layout of plugins that declare a 1.2.x API (see [`PluginModule`]).
/// Never change it.
pub mod v1_2 {
    use super::*;

    /// The 1.2 root module (same name, fields and types as 1.2.0 shipped).
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginModule {
        pub manifest: extern "C" fn() -> RResult<PluginManifest, PluginError>,
        pub validate_config: extern "C" fn(config_json: RStr<'_>) -> RResult<RString, PluginError>,
        pub estimate_memory: extern "C" fn(
            config_json: RStr<'_>,
            shape: DatasetShape,
            device: RStr<'_>,
        ) -> RResult<MemoryBreakdown, PluginError>,
        #[sabi(last_prefix_field)]
        pub create_trainer:
            extern "C" fn(spec: TaskSpec, host: HostServices) -> RResult<TrainerBox, PluginError>,
        #[sabi(missing_field(option))]
        pub capabilities: extern "C" fn() -> RResult<RVec<RString>, PluginError>,
        #[sabi(missing_field(option))]
        pub create_trainer_with_inputs: extern "C" fn(
            spec: TaskSpec,
            inputs: TaskInputs,
            host: HostServices,
        ) -> RResult<TrainerBox, PluginError>,
        #[sabi(missing_field(option))]
        pub export_weights: extern "C" fn(
            config_json: RStr<'_>,
            checkpoint_dir: RStr<'_>,
            weights_path: RStr<'_>,
        ) -> RResult<(), PluginError>,
        #[sabi(missing_field(option))]
        pub estimate_predictor_memory: extern "C" fn(
            config_json: RStr<'_>,
            shape: DatasetShape,
            device: RStr<'_>,
        )
            -> RResult<MemoryBreakdown, PluginError>,
        #[sabi(missing_field(option))]
        pub create_predictor: extern "C" fn(
            spec: PredictorSpec,
            host: HostServices,
        ) -> RResult<PredictorBox, PluginError>,
    }

    impl RootModule for PluginModuleRef {
        declare_root_module_statics! {PluginModuleRef}
        const BASE_NAME: &'static str = "tli_plugin";
        const NAME: &'static str = "tli_plugin";
        const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.2.0");
    }
}

/// The root module exactly as plugin API 1.1 declared it: used only to check
/// the layout of plugins that declare a 1.1.x API (see [`PluginModule`]).
/// Never change it.
pub mod v1_1 {
    use super::*;

    /// The 1.1 root module (same name, fields and types as 1.1.0 shipped).
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginModule {
        pub manifest: extern "C" fn() -> RResult<PluginManifest, PluginError>,
        pub validate_config: extern "C" fn(config_json: RStr<'_>) -> RResult<RString, PluginError>,
        pub estimate_memory: extern "C" fn(
            config_json: RStr<'_>,
            shape: DatasetShape,
            device: RStr<'_>,
        ) -> RResult<MemoryBreakdown, PluginError>,
        #[sabi(last_prefix_field)]
        pub create_trainer:
            extern "C" fn(spec: TaskSpec, host: HostServices) -> RResult<TrainerBox, PluginError>,
        #[sabi(missing_field(option))]
        pub capabilities: extern "C" fn() -> RResult<RVec<RString>, PluginError>,
        #[sabi(missing_field(option))]
        pub create_trainer_with_inputs: extern "C" fn(
            spec: TaskSpec,
            inputs: TaskInputs,
            host: HostServices,
        ) -> RResult<TrainerBox, PluginError>,
    }

    impl RootModule for PluginModuleRef {
        declare_root_module_statics! {PluginModuleRef}
        const BASE_NAME: &'static str = "tli_plugin";
        const NAME: &'static str = "tli_plugin";
        const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.1.0");
    }
}

/// The root module exactly as plugin API 1.0 declared it: used only to check
/// the layout of plugins that declare a 1.0.x API (see [`PluginModule`]).
/// Never change it; `tests` compare it with `tests/fixtures/api-1-0`.
pub mod v1_0 {
    use super::*;

    /// The 1.0 root module (same name, fields and types as 1.0.0 shipped).
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginModule {
        pub manifest: extern "C" fn() -> RResult<PluginManifest, PluginError>,
        pub validate_config: extern "C" fn(config_json: RStr<'_>) -> RResult<RString, PluginError>,
        pub estimate_memory: extern "C" fn(
            config_json: RStr<'_>,
            shape: DatasetShape,
            device: RStr<'_>,
        ) -> RResult<MemoryBreakdown, PluginError>,
        #[sabi(last_prefix_field)]
        pub create_trainer:
            extern "C" fn(spec: TaskSpec, host: HostServices) -> RResult<TrainerBox, PluginError>,
    }

    impl RootModule for PluginModuleRef {
        declare_root_module_statics! {PluginModuleRef}
        const BASE_NAME: &'static str = "tli_plugin";
        const NAME: &'static str = "tli_plugin";
        const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.0.0");
    }
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "tli_plugin";
    const NAME: &'static str = "tli_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

#[cfg(test)]
mod tests {
    use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
    use abi_stable::StableAbi;

    /// The host views a 1.0 plugin through the current module: that is sound
    /// only while the 1.0 module is exactly its prefix (abi_stable accepts a
    /// library with more fields than the interface, never fewer).
    #[test]
    fn abi_v1_0_is_a_prefix_of_the_current_module() {
        let v1_0 = <super::v1_0::PluginModuleRef as StableAbi>::LAYOUT;
        let current = <super::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_0, current).is_ok());
        let refused = check_layout_compatibility(current, v1_0)
            .expect_err("abi_stable refuses a library with fewer fields than expected");
        assert!(refused.to_string().contains("too many fields"));
    }

    /// The same for 1.1: a 1.1 plugin is checked against the frozen 1.1
    /// module and read through the current one.
    #[test]
    fn abi_v1_1_is_a_prefix_of_the_current_module() {
        let v1_1 = <super::v1_1::PluginModuleRef as StableAbi>::LAYOUT;
        let current = <super::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_1, current).is_ok());
        assert!(check_layout_compatibility(current, v1_1).is_err());
        let v1_0 = <super::v1_0::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_0, v1_1).is_ok());
    }

    /// The same for 1.3 and 1.4 (TorchScript; side-table columns), checked
    /// against the frozen 1.3 module.
    #[test]
    fn abi_v1_3_is_a_prefix_of_the_current_module() {
        let v1_3 = <super::v1_3::PluginModuleRef as StableAbi>::LAYOUT;
        let current = <super::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_3, current).is_ok());
        assert!(check_layout_compatibility(current, v1_3).is_err());
        let v1_2 = <super::v1_2::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_2, v1_3).is_ok());
    }

    /// The same for 1.2 (predictors), checked against the frozen 1.2 module.
    #[test]
    fn abi_v1_2_is_a_prefix_of_the_current_module() {
        let v1_2 = <super::v1_2::PluginModuleRef as StableAbi>::LAYOUT;
        let current = <super::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_2, current).is_ok());
        assert!(check_layout_compatibility(current, v1_2).is_err());
        let v1_1 = <super::v1_1::PluginModuleRef as StableAbi>::LAYOUT;
        assert!(check_layout_compatibility(v1_1, v1_2).is_ok());
    }
}
