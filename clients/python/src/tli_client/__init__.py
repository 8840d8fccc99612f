"""tli-client: drive a tli training host from Python (gRPC API ``tli.v1``).

::

    from tli_client import Client, TemplateConfig, synthetic

    tli = Client("127.0.0.1:50051")              # token=…, tls=… beyond loopback
    job = tli.start(models=[TemplateConfig(hidden_sizes=[16])],
                    assets=[synthetic(2000, seed=1)], steps=500)
    for event in tli.watch(job):                 # Progress, StateChanged, LogLine, Finished
        print(event)
    job.refresh().to_pandas()                    # final metrics per task (pandas optional)
    job.history().to_pandas()                    # metric curves by step
    tli.sweep("tft", [synthetic(2000)], {"learning_rate": {"log_uniform": [1e-4, 1e-2]}},
              samples=8, max_steps=900, grace_period=100).to_pandas()   # ASHA, one row per trial
    tli.load_model("es-mlp")                     # a model of the host (tli.models())
    tli.predict("es-mlp", bars)                  # bars: a DataFrame; outputs: a DataFrame
    tli.backtest("es-mlp", bars).summary         # its P&L beside buy-and-hold and flat

The package version follows the API: ``tli-client 1.x`` speaks ``tli.v1`` (:data:`API_PACKAGE`);
docs/python.md is the guide.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from ._proto.tli.v1 import training_pb2 as _training_pb2
from .assets import AssetLike, BarFile, SyntheticAsset, bar_file, parse_asset, synthetic
from .client import (
    DEFAULT_ENDPOINT,
    CheckpointPolicy,
    Client,
    DataWarning,
    Page,
    Resumed,
    SlurmOptions,
    Tls,
)
from .config import (
    DqnConfig,
    Mamba2Config,
    Model,
    ModelConfig,
    PluginConfig,
    PpoConfig,
    TemplateConfig,
    TftConfig,
    TradingEnvConfig,
    plugin_config,
)
from .errors import (
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TliError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from .history import History, MetricSeries, TaskHistory
from .models import Backtest, ModelData, ModelInfo, ResidentModel
from .schema_config import SchemaConfig, config_type
from .info import Device, PluginInfo, Plugins, RefusedPlugin, RescanReport, Reservation
from .jobs import (
    BestCheckpoint,
    Event,
    Finished,
    Job,
    JobRef,
    LogLine,
    MeasuredMemory,
    Progress,
    SlurmPlacement,
    StateChanged,
    Task,
    TaskState,
)
from .progress import ProgressDisplay, TqdmDisplay
from .sweeps import SearchSpace, SweepResults, SweepTrial

#: The gRPC package this client speaks, from the generated descriptors (``tli.v1``).
API_PACKAGE: str = _training_pb2.DESCRIPTOR.package

try:
    __version__: str = _metadata.version("tli-client")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "DataWarning",
    "API_PACKAGE",
    "__version__",
    "Client",
    "Tls",
    "DEFAULT_ENDPOINT",
    "CheckpointPolicy",
    "SlurmOptions",
    "Page",
    "Resumed",
    "AssetLike",
    "SyntheticAsset",
    "BarFile",
    "synthetic",
    "bar_file",
    "parse_asset",
    "Model",
    "ModelConfig",
    "TemplateConfig",
    "DqnConfig",
    "PpoConfig",
    "Mamba2Config",
    "TftConfig",
    "TradingEnvConfig",
    "PluginConfig",
    "SchemaConfig",
    "config_type",
    "plugin_config",
    "Job",
    "JobRef",
    "Task",
    "TaskState",
    "BestCheckpoint",
    "SlurmPlacement",
    "MeasuredMemory",
    "Event",
    "Progress",
    "StateChanged",
    "LogLine",
    "Finished",
    "History",
    "TaskHistory",
    "MetricSeries",
    "Plugins",
    "PluginInfo",
    "RefusedPlugin",
    "Device",
    "RescanReport",
    "Reservation",
    "ModelInfo",
    "ModelData",
    "ResidentModel",
    "Backtest",
    "SearchSpace",
    "SweepResults",
    "SweepTrial",
    "ProgressDisplay",
    "TqdmDisplay",
    "TliError",
    "InvalidArgument",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "Unauthenticated",
    "ResourceExhausted",
    "FailedPrecondition",
    "Unavailable",
    "DeadlineExceeded",
    "Cancelled",
    "Internal",
    "Unimplemented",
    "DataLoss",
]
