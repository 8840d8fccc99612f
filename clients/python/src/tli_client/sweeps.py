"""Hyperparameter sweeps: the search space as a plain dict, the ``Sweep`` message built from it
(checked here first), and the result table of ``GetSweep`` as typed values and a DataFrame.

A search space maps a plugin config key (dot-separated for nested keys: ``"trading.window"``)
to one dimension, the same JSON form as ``tli sweep start --space``::

    {"learning_rate": {"log_uniform": [1e-4, 1e-2]},   # a real, uniform in its logarithm
     "dropout":       {"uniform": [0.0, 0.3]},          # a real, uniform
     "layers":        {"int": [1, 3]},                  # a whole number, both ends included
     "hidden_size":   {"choice": [16, 32, 64]},         # one value at random per trial
     "optimizer":     {"grid": ["adamw", "sgd"]}}       # every value: trials are the grids' product

(docs/orchestrator.md, "Sweeps"; ``Client.sweep`` submits one, ``Client.sweep_results`` reads
its table.)
"""

from __future__ import annotations

import builtins
import json
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

from ._proto.tli.v1 import training_pb2 as pb
from .jobs import BestCheckpoint, TaskState

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = [
    "SearchSpace",
    "SweepTrial",
    "SweepResults",
    "DIMENSION_KINDS",
    "SCHEDULERS",
    "space_to_proto",
    "sweep_to_proto",
]

#: A search space: config key → ``{"choice"|"grid": [...]}`` or
#: ``{"uniform"|"log_uniform"|"int": [low, high]}``.
SearchSpace = Mapping[str, Mapping[str, Any]]

#: The kinds of dimension, as the space's JSON names them (``SearchDimension.kind``).
DIMENSION_KINDS = ("choice", "grid", "uniform", "log_uniform", "int")
#: The schedulers ``Client.sweep`` takes.
SCHEDULERS = ("asha", "run_all")

#: The host's limits (``tli_core``): steps of a task, and the range of an ``int`` dimension.
MAX_STEPS = 1_000_000_000
_I64 = (-(2**63), 2**63 - 1)
_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays (``np.float64(0.1)``, ``np.array([1, 2])``) as plain JSON."""
    for method in ("tolist", "item"):
        convert = getattr(value, method, None)
        if callable(convert):
            return convert()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _json_text(value: Any, where: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"), default=_json_default)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {value!r} is not a JSON value ({e}); JSON has no NaN or infinity") from None


def _is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _pair(bounds: Any, where: str) -> Tuple[Any, Any]:
    if isinstance(bounds, (str, bytes, Mapping)) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise ValueError(f"{where}: expected [low, high], not {bounds!r}")
    return bounds[0], bounds[1]


def _dimension(key: str, dim: Any) -> pb.SearchDimension:
    where = f"space.{key}"
    if not isinstance(dim, Mapping):
        raise ValueError(
            f"{where}: expected one of {{'choice'|'grid': [...]}} or "
            f"{{'uniform'|'log_uniform'|'int': [low, high]}}, not {dim!r}"
        )
    if len(dim) != 1:
        kinds = ", ".join(repr(k) for k in dim) or "none"
        raise ValueError(
            f"{where}: give exactly one kind of dimension ({', '.join(DIMENSION_KINDS)}); got {kinds}"
        )
    ((kind, values),) = dim.items()
    if kind not in DIMENSION_KINDS:
        raise ValueError(
            f"{where}: unknown dimension kind {kind!r}; give one of {', '.join(DIMENSION_KINDS)}"
        )
    where = f"{where}.{kind}"
    if kind in ("choice", "grid"):
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
            raise ValueError(f"{where}: expected a list of values, not {values!r}")
        if len(values) == 0:
            raise ValueError(f"{where}: an empty list of values; give at least one")
        texts = pb.JsonValues(json=[_json_text(v, f"{where}[{i}]") for i, v in enumerate(values)])
        return pb.SearchDimension(**{kind: texts})
    low, high = _pair(values, where)
    if kind == "int":
        if not (_is_whole(low) and _is_whole(high)):
            raise ValueError(f"{where}: [{low!r}, {high!r}]: low and high must be whole numbers")
        low, high = int(low), int(high)
        if not (_I64[0] <= low <= _I64[1] and _I64[0] <= high <= _I64[1]):
            raise ValueError(f"{where}: [{low}, {high}] is outside the 64-bit integers")
        if low > high:
            raise ValueError(f"{where}: [{low}, {high}] is not a range: give [low, high] with low ≤ high")
        return pb.SearchDimension(int=pb.IntRange(low=low, high=high))
    if not (_is_real(low) and _is_real(high)):
        raise ValueError(f"{where}: [{low!r}, {high!r}]: low and high must be numbers")
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(
            f"{where}: [{low}, {high}] is not a range: give [low, high], finite, low ≤ high"
        )
    if kind == "log_uniform" and low <= 0:
        raise ValueError(f"{where}: log_uniform needs low > 0 (got {low})")
    return pb.SearchDimension(**{kind: pb.RealRange(low=low, high=high)})


def space_to_proto(space: SearchSpace) -> Dict[str, pb.SearchDimension]:
    """Each key's ``SearchDimension``, checked (``ValueError`` naming ``space.KEY``: an unknown
    kind of dimension, an empty choice or grid, a range that is not ``[low, high]`` with
    ``low ≤ high`` (finite; ``log_uniform``: ``low > 0``; ``int``: whole numbers), a value that
    is not JSON). Whether the key is one of the plugin's and the values ones its schema allows
    is the host's check (``InvalidArgument``)."""
    if not isinstance(space, Mapping):
        raise TypeError(f"space: expected a mapping of config key → dimension, not {type(space).__name__}")
    if not space:
        raise ValueError("space: empty; give at least one config key to search")
    out: Dict[str, pb.SearchDimension] = {}
    for key, dim in space.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(
                f"space: {key!r} is not a config key (a name such as 'learning_rate', dots for "
                "nested keys: 'trading.window')"
            )
        out[key] = _dimension(key, dim)
    return out


def _whole(value: Any, name: str, low: int, high: int, why: str = "") -> int:
    if not _is_whole(value):
        raise ValueError(f"{name}: expected a whole number, not {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name}: {value} is outside {low}..={high}{why}")
    return int(value)


def sweep_to_proto(
    plugin: str,
    space: SearchSpace,
    *,
    metric: str = "valid_loss",
    max_steps: int,
    grace_period: Optional[int] = None,
    reduction_factor: int = 3,
    scheduler: str = "asha",
    samples: int = 1,
    seed: int = 1,
    config: Optional[Mapping[str, Any]] = None,
    mode: Optional[str] = None,
    pooled: bool = False,
    keep_best: bool = True,
) -> pb.Sweep:
    """The ``Sweep`` message (``StartTrainingRequest.sweep``), checked: ``ValueError`` naming
    the argument (or ``space.KEY``) for what needs no plugin to judge; the host checks the rest
    against the plugin's config schema (see :meth:`tli_client.Client.sweep`)."""
    if not isinstance(plugin, str) or not plugin.strip():
        raise ValueError(f"plugin: name the plugin whose configs are searched, not {plugin!r}")
    dimensions = space_to_proto(space)
    if not isinstance(metric, str) or not metric.startswith("valid_"):
        raise ValueError(
            f"metric: {metric!r} is not a validation metric (valid_*); trials are ranked on "
            "validation only (valid_loss, valid_sharpe …)"
        )
    if mode is None or mode == "":
        mode_text = ""
    elif isinstance(mode, str) and mode.strip().lower() in ("min", "max"):
        mode_text = mode.strip().lower()
    else:
        raise ValueError(
            f"mode: {mode!r} is not 'min' (lower is better) or 'max'; leave it out to follow "
            "the metric's name"
        )
    steps = _whole(max_steps, "max_steps", 1, MAX_STEPS, " (steps of a trial that is never stopped)")
    count = _whole(samples, "samples", 1, _U32_MAX, " (random draws per grid point)")
    sample_seed = _whole(seed, "seed", 0, _U64_MAX)
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler: {scheduler!r}: expected 'asha' or 'run_all'")
    if not isinstance(pooled, bool):
        raise ValueError(f"pooled: expected True or False, not {pooled!r}")
    if not isinstance(keep_best, bool):
        raise ValueError(f"keep_best: expected True or False, not {keep_best!r}")
    config_json = ""
    if config is not None:
        if not isinstance(config, Mapping):
            raise ValueError(f"config: expected a mapping (the keys every trial shares), not {config!r}")
        if config:
            try:
                config_json = json.dumps(
                    dict(config), allow_nan=False, sort_keys=True, default=_json_default
                )
            except (TypeError, ValueError) as e:
                raise ValueError(f"config: {e} (JSON has no NaN or infinity)") from None
    message = pb.Sweep(
        plugin=plugin.strip(),
        config_json=config_json,
        space=dimensions,
        samples=count,
        seed=sample_seed,
        metric=metric,
        mode=mode_text,
        pooled=pooled,
        keep_last=not keep_best,
    )
    if scheduler == "asha":
        if grace_period is None:
            raise ValueError(
                "grace_period: missing; give ASHA's first rung in steps (a multiple of the "
                "plugin's validation cadence), or scheduler='run_all'"
            )
        grace = _whole(grace_period, "grace_period", 1, steps, " (1 ..= max_steps)")
        if _is_whole(reduction_factor) and reduction_factor < 2:
            raise ValueError(
                f"reduction_factor: {reduction_factor} must be at least 2 (each rung keeps the "
                "top 1/reduction_factor of the trials)"
            )
        eta = _whole(reduction_factor, "reduction_factor", 2, _U32_MAX)
        message.asha.CopyFrom(pb.AshaScheduler(grace_period=grace, reduction_factor=eta, max_steps=steps))
    else:
        if grace_period is not None:
            raise ValueError(
                "grace_period: ASHA's only; scheduler='run_all' trains every trial to max_steps"
            )
        message.run_all.CopyFrom(pb.RunAllScheduler(max_steps=steps))
    return message


@dataclass(frozen=True)
class SweepTrial:
    """One trial of a sweep on one asset (a row of ``tli sweep results``)."""

    #: 0-based, in trial order (the order ASHA ranks in); per asset unless pooled.
    trial: int
    #: Its task: ``tli predict --model TASK_ID`` / ``Client.predict(task_id, …)``.
    task_id: int
    asset: str
    #: The searched keys' values (``{"learning_rate": 0.003, "trading.window": 32}``).
    params: Dict[str, Any]
    steps_done: int
    #: The metric at each rung it reached, by step.
    rung_values: Dict[int, float]
    #: At the last rung it reached; None before the first.
    final_value: Optional[float]
    state: TaskState
    #: ``"queued"``, ``"running"``, ``"waiting at rung 300"``, ``"stopped at rung 100"``,
    #: ``"completed"`` …
    status: str
    #: The best trial of its asset (of those that reached max_steps).
    best: bool
    #: Its best checkpoint, which is its model (None when it keeps none).
    best_checkpoint: Optional[BestCheckpoint]

    @classmethod
    def from_proto(cls, t: pb.SweepTrial) -> "SweepTrial":
        try:
            params = json.loads(t.params_json) if t.params_json else {}
        except ValueError:
            params = {}
        return cls(
            trial=t.trial,
            task_id=t.task_id,
            asset=t.asset,
            params=params if isinstance(params, dict) else {},
            steps_done=t.steps_done,
            rung_values={r.step: r.value for r in t.rung_values},
            final_value=t.final_value if t.HasField("final_value") else None,
            state=TaskState.from_proto(t.state),
            status=t.status,
            best=t.best,
            best_checkpoint=BestCheckpoint.from_proto(t.best_checkpoint)
            if t.HasField("best_checkpoint")
            else None,
        )


@dataclass(frozen=True)
class SweepResults:
    """A sweep's result table (``GetSweep``; what ``tli sweep results`` prints)."""

    job_id: int
    plugin: str
    #: The validation metric that ranks trials, and which way is better (``"min"``/``"max"``).
    metric: str
    mode: str
    #: ``"asha"`` or ``"run_all"``.
    scheduler: str
    #: The steps at which values are shown (ASHA's rungs and max_steps).
    rungs: Tuple[int, ...]
    #: Steps trained by every trial together, and what training all to max_steps takes.
    steps_trained: int
    steps_if_run_all: int
    trials: Tuple[SweepTrial, ...]
    #: The best trial of each asset (one per asset; none before any reached max_steps).
    best: Tuple[SweepTrial, ...]
    #: The sweep as given, in its JSON form (plugin, space, scheduler, …).
    spec: Dict[str, Any]

    @classmethod
    def from_proto(cls, r: pb.GetSweepResponse) -> "SweepResults":
        trials = tuple(SweepTrial.from_proto(t) for t in r.trials)
        try:
            spec = json.loads(r.sweep_json) if r.sweep_json else {}
        except ValueError:
            spec = {}
        return cls(
            job_id=r.job_id,
            plugin=r.plugin,
            metric=r.metric,
            mode=r.mode,
            scheduler=r.scheduler,
            rungs=tuple(r.rungs),
            steps_trained=r.steps_trained,
            steps_if_run_all=r.steps_if_run_all,
            trials=trials,
            best=tuple(t for t in trials if t.best),
            spec=spec if isinstance(spec, dict) else {},
        )

    @property
    def param_names(self) -> Tuple[str, ...]:
        """The searched keys: the space's, in its order, then any other a trial reports."""
        space = self.spec.get("space")
        names: Dict[str, None] = dict.fromkeys(space if isinstance(space, dict) else ())
        for t in self.trials:
            names.update(dict.fromkeys(t.params))
        return tuple(names)

    def trial(self, number: int, asset: Optional[str] = None) -> SweepTrial:
        """Trial ``number`` (of ``asset`` when the sweep has several); KeyError if none."""
        for t in self.trials:
            if t.trial == number and (asset is None or t.asset == asset):
                return t
        raise KeyError(f"sweep job {self.job_id} has no trial {number}" + (f" on {asset}" if asset else ""))

    def to_pandas(self) -> "pandas.DataFrame":
        """One row per trial, in task order: ``trial``, ``task_id``, ``asset``, one
        ``param.KEY`` column per searched key (``param.learning_rate``,
        ``param.trading.window``), ``steps_done``, one ``@STEP`` column per rung (the metric
        there; NaN where the trial did not reach it), ``final_value`` (NaN before the first
        rung), ``status`` and ``best`` (bool). ``.attrs`` holds ``job_id``, ``plugin``,
        ``metric``, ``mode``, ``scheduler``, ``rungs``, ``steps_trained`` and
        ``steps_if_run_all``. Needs pandas."""
        from ._optional import require_pandas

        pd = require_pandas()
        params = self.param_names
        columns = (
            ["trial", "task_id", "asset"]
            + [f"param.{k}" for k in params]
            + ["steps_done"]
            + [f"@{g}" for g in self.rungs]
            + ["final_value", "status", "best"]
        )
        rows: builtins.list[Dict[str, Any]] = []
        for t in self.trials:
            row: Dict[str, Any] = {"trial": t.trial, "task_id": t.task_id, "asset": t.asset}
            row.update({f"param.{k}": t.params.get(k) for k in params})
            row["steps_done"] = t.steps_done
            row.update({f"@{g}": t.rung_values.get(g, math.nan) for g in self.rungs})
            row["final_value"] = math.nan if t.final_value is None else t.final_value
            row["status"] = t.status
            row["best"] = t.best
            rows.append(row)
        frame = pd.DataFrame(rows, columns=columns)
        types = {c: "float64" for c in columns if c.startswith("@")}
        types.update(trial="int64", task_id="int64", steps_done="int64", final_value="float64", best="bool")
        frame = frame.astype(types)
        frame.attrs.update(
            job_id=self.job_id,
            plugin=self.plugin,
            metric=self.metric,
            mode=self.mode,
            scheduler=self.scheduler,
            rungs=list(self.rungs),
            steps_trained=self.steps_trained,
            steps_if_run_all=self.steps_if_run_all,
        )
        return frame

    #: The same table (the name pandas users reach for).
    to_dataframe = to_pandas
