"""Model configs: typed helpers for the built-in families and a generic one for any plugin.

Each typed class mirrors a tli.v1 message (``TemplateConfig``, ``DqnConfig``, ``PpoConfig``,
``Mamba2Config``, ``TftConfig``; ``TradingEnvConfig`` for the RL plugins' environment). Field
names are the plugins' config keys (plugins/*/README.md). A field left ``None`` is not sent:
the plugin fills in its default for the environment and checks every value, and a refusal
comes back as :class:`~tli_client.errors.InvalidArgument` naming the key.

Any plugin, built in or dropped in, also takes a JSON config by name::

    plugin_config("behaviour", {"sleep_ms_per_step": 10})

(the only way to set PPO's ``target_kl`` / ``reward_scale`` to ``None`` = never / automatic).

A :class:`Model` adds what the job needs besides the config: steps, priority, pooled, and
its own ``keep_best`` / ``early_stopping`` rules (``Client.start`` takes them for every model).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, Literal, Mapping, Optional, Sequence, Union

from ._proto.tli.v1 import training_pb2 as pb

__all__ = [
    "TradingEnvConfig",
    "TemplateConfig",
    "DqnConfig",
    "PpoConfig",
    "Mamba2Config",
    "TftConfig",
    "PluginConfig",
    "plugin_config",
    "ModelConfig",
    "Model",
    "TYPED_CONFIGS",
    "KeepBestLike",
    "EarlyStoppingLike",
    "keep_best_to_proto",
    "early_stopping_to_proto",
]

RlEnv = Literal["trading", "cartpole"]
LrSchedule = Literal["constant", "cosine"]
TftPrecision = Literal["fp32", "int8"]
TftStepMemory = Literal["full", "staged"]
TftOptimizerState = Literal["8bit", "4bit", "factored"]

# Fields sent as tli.v1 enums: the proto enum and the prefix of its value names.
_ENUM_FIELDS: Dict[str, tuple[Any, str]] = {
    "env": (pb.RlEnv, "RL_ENV_"),
    "lr_schedule": (pb.LrSchedule, "LR_SCHEDULE_"),
    "precision": (pb.TftPrecision, "TFT_PRECISION_"),
    "step_memory": (pb.TftStepMemory, "TFT_STEP_MEMORY_"),
    "optimizer_state": (pb.TftOptimizerState, "TFT_OPTIMIZER_STATE_"),
}


def _enum_value(field: str, value: str) -> int:
    enum, prefix = _ENUM_FIELDS[field]
    choices = [
        name[len(prefix) :].lower() for name in enum.keys() if not name.endswith("UNSPECIFIED")
    ]
    if not isinstance(value, str) or value.lower() not in choices:
        raise ValueError(f"{field}: {value!r} is not one of {', '.join(choices)}")
    return int(enum.Value(prefix + value.upper()))


class _Typed:
    """Fills the tli.v1 message of the same name from the fields that are set."""

    def _fill(self, message: Any) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name in _ENUM_FIELDS:
                setattr(message, f.name, _enum_value(f.name, value))
            elif isinstance(value, _Typed):
                value._fill(getattr(message, f.name))
            elif isinstance(value, (list, tuple)):
                getattr(message, f.name).extend(value)
            else:
                setattr(message, f.name, value)


@dataclass(frozen=True, kw_only=True)
class TradingEnvConfig(_Typed):
    """The futures trading environment of the DQN and PPO plugins."""

    window: Optional[int] = None
    max_contracts: Optional[int] = None
    commission_per_contract: Optional[float] = None
    slippage_ticks: Optional[float] = None
    vol_scaled: Optional[bool] = None
    episode_len: Optional[int] = None
    vol_halflife: Optional[float] = None
    vol_floor: Optional[float] = None


class _FamilyConfig(_Typed):
    #: The ModelSpec oneof member (and the plugin's name).
    family: ClassVar[str]

    @property
    def plugin(self) -> str:
        """The plugin that trains this config."""
        return self.family

    def _fill_model(self, spec: pb.ModelSpec) -> None:
        self._fill(getattr(spec, self.family))
        # An all-defaults config must still choose the family (an empty message is still set).
        getattr(spec, self.family).SetInParent()


@dataclass(frozen=True, kw_only=True)
class TemplateConfig(_FamilyConfig):
    """The template plugin: an MLP return forecaster."""

    family: ClassVar[str] = "template"
    hidden_sizes: Optional[Sequence[int]] = None
    learning_rate: Optional[float] = None
    weight_decay: Optional[float] = None
    batch_size: Optional[int] = None
    target_index: Optional[int] = None
    lr_schedule: Optional[LrSchedule] = None


@dataclass(frozen=True, kw_only=True)
class DqnConfig(_FamilyConfig):
    """Double DQN (plugins/dqn/README.md explains every key)."""

    family: ClassVar[str] = "dqn"
    env: Optional[RlEnv] = None
    trading: Optional[TradingEnvConfig] = None
    num_envs: Optional[int] = None
    hidden_sizes: Optional[Sequence[int]] = None
    dueling: Optional[bool] = None
    double_q: Optional[bool] = None
    n_step: Optional[int] = None
    gamma: Optional[float] = None
    learning_rate: Optional[float] = None
    lr_final_fraction: Optional[float] = None
    adam_eps: Optional[float] = None
    batch_size: Optional[int] = None
    buffer_size: Optional[int] = None
    learning_starts: Optional[int] = None
    train_frequency: Optional[int] = None
    gradient_steps: Optional[int] = None
    target_update_interval: Optional[int] = None
    tau: Optional[float] = None
    exploration_initial_eps: Optional[float] = None
    exploration_final_eps: Optional[float] = None
    exploration_fraction: Optional[float] = None
    max_grad_norm: Optional[float] = None
    huber_delta: Optional[float] = None
    checkpoint_replay: Optional[bool] = None
    eval_episodes: Optional[int] = None
    valid_metrics_interval: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class PpoConfig(_FamilyConfig):
    """PPO (plugins/ppo/README.md). ``target_kl``/``reward_scale`` = null: use plugin_config."""

    family: ClassVar[str] = "ppo"
    env: Optional[RlEnv] = None
    trading: Optional[TradingEnvConfig] = None
    num_envs: Optional[int] = None
    num_steps: Optional[int] = None
    num_minibatches: Optional[int] = None
    update_epochs: Optional[int] = None
    learning_rate: Optional[float] = None
    anneal_lr: Optional[bool] = None
    adam_eps: Optional[float] = None
    gamma: Optional[float] = None
    gae_lambda: Optional[float] = None
    clip_coef: Optional[float] = None
    anneal_clip: Optional[bool] = None
    clip_vloss: Optional[bool] = None
    vf_clip_coef: Optional[float] = None
    ent_coef: Optional[float] = None
    vf_coef: Optional[float] = None
    max_grad_norm: Optional[float] = None
    norm_adv: Optional[bool] = None
    target_kl: Optional[float] = None
    hidden_sizes: Optional[Sequence[int]] = None
    reward_scale: Optional[float] = None
    valid_metrics_interval: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class Mamba2Config(_FamilyConfig):
    """The Mamba-2 forecaster (plugins/mamba2/README.md). No ``quantiles`` = point forecasts."""

    family: ClassVar[str] = "mamba2"
    d_model: Optional[int] = None
    layers: Optional[int] = None
    d_state: Optional[int] = None
    headdim: Optional[int] = None
    expand: Optional[int] = None
    d_conv: Optional[int] = None
    ngroups: Optional[int] = None
    chunk_size: Optional[int] = None
    lookback: Optional[int] = None
    loss_positions: Optional[int] = None
    horizons: Optional[int] = None
    quantiles: Optional[Sequence[float]] = None
    target_index: Optional[int] = None
    learning_rate: Optional[float] = None
    lr_schedule: Optional[LrSchedule] = None
    warmup_steps: Optional[int] = None
    dropout: Optional[float] = None
    batch_size: Optional[int] = None
    weight_decay: Optional[float] = None
    max_grad_norm: Optional[float] = None
    eval_batch_size: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class TftConfig(_FamilyConfig):
    """The Temporal Fusion Transformer (plugins/tft/README.md), FP32 or INT8."""

    family: ClassVar[str] = "tft"
    precision: Optional[TftPrecision] = None
    hidden_size: Optional[int] = None
    attention_heads: Optional[int] = None
    lstm_layers: Optional[int] = None
    dropout: Optional[float] = None
    lookback: Optional[int] = None
    horizons: Optional[int] = None
    quantiles: Optional[Sequence[float]] = None
    target_index: Optional[int] = None
    learning_rate: Optional[float] = None
    lr_schedule: Optional[LrSchedule] = None
    warmup_steps: Optional[int] = None
    batch_size: Optional[int] = None
    weight_decay: Optional[float] = None
    max_grad_norm: Optional[float] = None
    eval_batch_size: Optional[int] = None
    int8_min_elements: Optional[int] = None
    step_memory: Optional[TftStepMemory] = None
    optimizer_state: Optional[TftOptimizerState] = None


@dataclass(frozen=True)
class PluginConfig:
    """Any plugin by name with a JSON-able config (None or {} = the plugin's defaults)."""

    plugin: str
    config: Optional[Mapping[str, Any]] = None

    def config_json(self) -> str:
        """The config as the JSON object the plugin reads ('' for its defaults)."""
        if not self.config:
            return ""
        try:
            return json.dumps(dict(self.config), allow_nan=False, sort_keys=True)
        except ValueError as e:
            raise ValueError(f"{self.plugin} config: {e} (JSON has no NaN or infinity)") from e

    def _fill_model(self, spec: pb.ModelSpec) -> None:
        spec.plugin.plugin = self.plugin
        spec.plugin.config_json = self.config_json()


def plugin_config(name: str, config: Optional[Mapping[str, Any]] = None) -> PluginConfig:
    """A config for plugin ``name`` as a JSON object (the generic form; any plugin)."""
    return PluginConfig(name, config)


ModelConfig = Union[TemplateConfig, DqnConfig, PpoConfig, Mamba2Config, TftConfig, PluginConfig]

#: The typed config classes by their tli.v1 message name.
TYPED_CONFIGS: Dict[str, type] = {
    "TemplateConfig": TemplateConfig,
    "DqnConfig": DqnConfig,
    "PpoConfig": PpoConfig,
    "Mamba2Config": Mamba2Config,
    "TftConfig": TftConfig,
    "TradingEnvConfig": TradingEnvConfig,
}


#: A model's ``keep_best``: ``{"metric": "valid_loss", "mode": "min", "k": 2}`` (``mode`` and
#: ``k`` optional), or just the metric's name.
KeepBestLike = Union[str, Mapping[str, Any]]
#: A model's ``early_stopping``: ``{"metric": "valid_loss", "patience": 5, "min_delta": 0.0,
#: "mode": "min"}`` (``min_delta`` and ``mode`` optional).
EarlyStoppingLike = Mapping[str, Any]

_KEEP_BEST_KEYS = ("metric", "mode", "k")
_EARLY_STOPPING_KEYS = ("metric", "mode", "patience", "min_delta")


def _rule_fields(spec: Any, name: str, keys: Sequence[str]) -> Dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"{name}: expected a mapping with the keys {', '.join(keys)}, not {type(spec).__name__}"
        )
    for key in spec:
        if key not in keys:
            raise ValueError(f"{name}: unknown key {key!r}; its keys are {', '.join(keys)}")
    metric = spec.get("metric")
    if not isinstance(metric, str) or not metric.strip():
        raise ValueError(
            f"{name}.metric: give the name of a validation metric the plugin reports "
            f"(valid_loss, valid_sharpe …), not {metric!r}"
        )
    return dict(spec)


def _mode(value: Any, name: str) -> str:
    """``min``, ``max``, or ``""`` (None or ""): by the metric's name."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or value.strip().lower() not in ("min", "max"):
        raise ValueError(
            f"{name}.mode: {value!r} is not 'min' (lower is better) or 'max'; leave it out to "
            "follow the metric's name"
        )
    return value.strip().lower()


def _at_least_one(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number ≥ 1, not {value!r}")
    if value < 1:
        raise ValueError(f"{name}: {value} is less than 1")
    return value


def keep_best_to_proto(spec: KeepBestLike, name: str = "keep_best") -> pb.KeepBest:
    """A ``keep_best`` rule as the API's message, checked (``ValueError`` naming the key: no
    metric, ``k`` < 1, a ``mode`` not ``min``/``max``, an unknown key). The host checks it too
    (the metric must be a ``valid_*`` one)."""
    if isinstance(spec, str):
        spec = {"metric": spec}
    rule = _rule_fields(spec, name, _KEEP_BEST_KEYS)
    message = pb.KeepBest(metric=rule["metric"].strip(), mode=_mode(rule.get("mode"), name))
    if rule.get("k") is not None:
        message.k = _at_least_one(rule["k"], f"{name}.k")
    return message


def early_stopping_to_proto(spec: EarlyStoppingLike, name: str = "early_stopping") -> pb.EarlyStopping:
    """An ``early_stopping`` rule as the API's message, checked (``ValueError`` naming the
    key: no metric, no ``patience`` or one < 1, a negative ``min_delta``, a ``mode`` not
    ``min``/``max``, an unknown key). The host checks it too."""
    if isinstance(spec, str):
        raise ValueError(
            f"{name}: give a mapping with the metric and the patience, e.g. "
            f"{{'metric': {spec!r}, 'patience': 5}}"
        )
    rule = _rule_fields(spec, name, _EARLY_STOPPING_KEYS)
    if rule.get("patience") is None:
        raise ValueError(
            f"{name}.patience: missing; give how many validations in a row without improvement "
            "stop the task (≥ 1)"
        )
    message = pb.EarlyStopping(
        metric=rule["metric"].strip(),
        mode=_mode(rule.get("mode"), name),
        patience=_at_least_one(rule["patience"], f"{name}.patience"),
    )
    min_delta = rule.get("min_delta")
    if min_delta is not None:
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)):
            raise ValueError(f"{name}.min_delta: expected a number ≥ 0, not {min_delta!r}")
        if not math.isfinite(min_delta) or min_delta < 0:
            raise ValueError(f"{name}.min_delta: {min_delta} must be a finite number ≥ 0")
        message.min_delta = float(min_delta)
    return message


@dataclass(frozen=True)
class Model:
    """One model of a job: its config and how long it trains.

    ``steps`` of ``None`` takes ``start(steps=…)``. ``pooled`` trains one task across every
    asset of the job (plugins with the ``pooled`` capability) instead of one per asset.
    ``keep_best`` / ``early_stopping``: this model's rules (see :meth:`Client.start`); when
    set they replace those given to ``start`` for this model.
    """

    config: ModelConfig
    steps: Optional[int] = None
    priority: int = 0
    pooled: bool = False
    keep_best: Optional[KeepBestLike] = None
    early_stopping: Optional[EarlyStoppingLike] = None

    def to_proto(self, default_steps: Optional[int], *, where: str = "") -> pb.ModelSpec:
        """The API's ModelSpec (``where`` prefixes the names in errors: ``models[1].``)."""
        steps = self.steps if self.steps is not None else default_steps
        spec = pb.ModelSpec(steps=steps or 0, priority=self.priority, pooled=self.pooled)
        if self.keep_best is not None:
            spec.keep_best.CopyFrom(keep_best_to_proto(self.keep_best, f"{where}keep_best"))
        if self.early_stopping is not None:
            spec.early_stopping.CopyFrom(
                early_stopping_to_proto(self.early_stopping, f"{where}early_stopping")
            )
        if not isinstance(
            self.config,
            (TemplateConfig, DqnConfig, PpoConfig, Mamba2Config, TftConfig, PluginConfig),
        ):
            raise TypeError(
                f"a model config is a TemplateConfig, DqnConfig, PpoConfig, Mamba2Config, "
                f"TftConfig or plugin_config(name, dict), not {type(self.config).__name__}"
            )
        self.config._fill_model(spec)
        return spec
