"""The client: one gRPC channel to a tli host and a typed method per call of the tli.v1 API.

::

    from tli_client import Client, TemplateConfig, synthetic

    with Client("127.0.0.1:50051") as tli:
        job = tli.start(models=[TemplateConfig(hidden_sizes=[16])],
                        assets=[synthetic(2000, seed=1)], steps=500)
        final = tli.wait(job, progress=True)

Every failed call raises a :class:`~tli_client.errors.TliError` subclass carrying the gRPC
code and the host's message. A token (the host's ``--token-file``; needed when it listens
beyond loopback) is sent as ``authorization: Bearer …`` on every call.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    BinaryIO,
    Callable,
    Dict,
    Iterable,
    Iterator,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    overload,
)

import grpc

from ._proto.tli.v1 import models_pb2 as mpb
from ._proto.tli.v1 import models_pb2_grpc as mpb_grpc
from ._proto.tli.v1 import plugins_pb2 as ppb
from ._proto.tli.v1 import plugins_pb2_grpc as ppb_grpc
from ._proto.tli.v1 import training_pb2 as pb
from ._proto.tli.v1 import training_pb2_grpc as pb_grpc
from .assets import AssetLike, asset_to_proto, walk_forward_to_proto
from .config import (
    DqnConfig,
    EarlyStoppingLike,
    KeepBestLike,
    Mamba2Config,
    Model,
    ModelConfig,
    PluginConfig,
    PpoConfig,
    TemplateConfig,
    TftConfig,
    early_stopping_to_proto,
    keep_best_to_proto,
)
from .errors import DataLoss, TliError, error_from_rpc
from .history import History
from .info import Device, Plugins, RescanReport, devices_from_proto
from .jobs import Event, Finished, Job, JobRef, TaskState, event_from_proto, job_id_of
from .models import (
    BUNDLE_FILES,
    Backtest,
    BarsLike,
    ModelInfo,
    ModelRef,
    TimeLike,
    bars_to_proto,
    model_id_of,
    parse_checksums,
    rows_to_frame,
    sha256_of,
    time_to_unix_ns,
)
from .progress import ProgressDisplay, TqdmDisplay
from .schema_config import SchemaConfig, config_type
from .sweeps import SearchSpace, SweepResults, sweep_to_proto

__all__ = ["Client", "Tls", "CheckpointPolicy", "SlurmOptions", "Page", "Resumed", "DEFAULT_ENDPOINT"]

#: Where the CLI looks too (``TLI_ENDPOINT`` overrides it).
DEFAULT_ENDPOINT = "http://127.0.0.1:50051"

if TYPE_CHECKING:  # pragma: no cover
    import pandas

_T = TypeVar("_T")

#: Bytes per message of an import (the host takes at most 4 MiB per chunk).
IMPORT_CHUNK_BYTES = 1 << 20
#: The largest message the client accepts (a Predict answer of many bars and columns; a
#: Backtest's ledger and forecasts of 80,000 bars are under 10 MB).
MAX_RECEIVE_BYTES = 64 << 20

_ORDERS = {
    "newest": pb.JOB_ORDER_NEWEST_FIRST,
    "newest_first": pb.JOB_ORDER_NEWEST_FIRST,
    "oldest": pb.JOB_ORDER_OLDEST_FIRST,
    "oldest_first": pb.JOB_ORDER_OLDEST_FIRST,
    "name": pb.JOB_ORDER_NAME,
}

_EXECUTORS = {"local": pb.EXECUTOR_LOCAL, "slurm": pb.EXECUTOR_SLURM}


@dataclass(frozen=True)
class Tls:
    """TLS settings: the CA that signed the host's certificate (PEM file or bytes; None = the
    system's roots), and the name to check it against when it is not the endpoint's host."""

    ca_cert: Union[str, Path, bytes, None] = None
    server_name: Optional[str] = None

    def credentials(self) -> Any:
        ca = self.ca_cert
        if isinstance(ca, (str, Path)):
            ca = Path(ca).read_bytes()
        return grpc.ssl_channel_credentials(root_certificates=ca)


@dataclass(frozen=True)
class CheckpointPolicy:
    """When tasks checkpoint: every N steps and/or seconds (0 = never by that), keep newest N."""

    every_steps: int = 0
    every_seconds: float = 0.0
    keep: int = 0


@dataclass(frozen=True)
class SlurmOptions:
    """What each task asks of Slurm (the Slurm executor only; 0 = the defaults)."""

    gpus_per_task: int = 0
    time_limit_minutes: int = 0


@dataclass(frozen=True)
class Page:
    """One page of a job listing."""

    jobs: Tuple[Job, ...]
    #: Empty on the last page.
    next_page_token: str


@dataclass(frozen=True)
class Resumed:
    """ResumeTraining's answer: the job and how many tasks were re-queued."""

    job: Job
    resumed_tasks: int


def _unix_ms(value: Union[datetime, int, None]) -> int:
    if value is None:
        return 0
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _seconds_to_ms(value: Union[float, timedelta, None]) -> int:
    if value is None:
        return 0
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ValueError(f"deadline: {seconds} s is negative")
    return min(int(round(seconds * 1000)), 2**32 - 1)


def _set_placement(
    request: pb.StartTrainingRequest,
    checkpoint: Optional[CheckpointPolicy],
    executor: Optional[str],
    slurm: Optional[SlurmOptions],
) -> None:
    """A job's checkpoint policy, executor and Slurm options (``start`` and ``sweep``)."""
    if checkpoint is not None:
        request.checkpoint.CopyFrom(
            pb.CheckpointPolicy(
                every_steps=checkpoint.every_steps,
                every_seconds=checkpoint.every_seconds,
                keep=checkpoint.keep,
            )
        )
    if executor is not None:
        if executor not in _EXECUTORS:
            raise ValueError(f"executor {executor!r}: expected local or slurm")
        request.executor = _EXECUTORS[executor]
    if slurm is not None:
        request.slurm.CopyFrom(
            pb.SlurmOptions(
                gpus_per_task=slurm.gpus_per_task, time_limit_minutes=slurm.time_limit_minutes
            )
        )


class Client:
    """A connection to a tli host.

    ``endpoint``: ``host:port``, ``http://host:port`` or ``https://host:port`` (TLS); default
    ``$TLI_ENDPOINT`` or ``http://127.0.0.1:50051``. ``token``: the host's bearer token; default
    ``$TLI_TOKEN``. ``tls``: ``True`` (system roots), a :class:`Tls`, or ``None`` = TLS iff the
    endpoint says ``https``. ``timeout``: seconds for each call but ``watch`` (None = no limit).
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        token: Optional[str] = None,
        tls: Union[bool, Tls, None] = None,
        *,
        timeout: Optional[float] = 30.0,
    ) -> None:
        endpoint = endpoint or os.environ.get("TLI_ENDPOINT") or DEFAULT_ENDPOINT
        scheme, sep, target = endpoint.partition("://")
        if not sep:
            scheme, target = "", endpoint
        scheme = scheme.lower()
        if scheme not in ("", "http", "https", "grpc", "grpcs"):
            raise ValueError(f"endpoint {endpoint!r}: expected host:port, http://… or https://…")
        target = target.rstrip("/")
        if not target:
            raise ValueError(f"endpoint {endpoint!r}: no host:port")
        if tls is None:
            tls = scheme in ("https", "grpcs")
        self.endpoint: str = endpoint
        self.target: str = target
        self.tls: bool = tls is not False
        self.timeout: Optional[float] = timeout
        token = token if token is not None else os.environ.get("TLI_TOKEN")
        self._metadata: Optional[Tuple[Tuple[str, str], ...]] = (
            (("authorization", f"Bearer {token.strip()}"),) if token else None
        )
        options: builtins.list[Tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)
        ]
        if tls is False:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            settings = tls if isinstance(tls, Tls) else Tls()
            if settings.server_name:
                options.append(("grpc.ssl_target_name_override", settings.server_name))
            self._channel = grpc.secure_channel(target, settings.credentials(), options=options)
        self._training = pb_grpc.TrainingServiceStub(self._channel)
        self._plugins = ppb_grpc.PluginServiceStub(self._channel)
        self._resources = ppb_grpc.ResourceServiceStub(self._channel)
        self._models = mpb_grpc.ModelServiceStub(self._channel)

    def __repr__(self) -> str:
        return f"Client({self.endpoint!r}, tls={self.tls}, token={'set' if self._metadata else 'none'})"

    # Lifecycle.

    def close(self) -> None:
        """Closes the channel (open watches end)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until the channel connects; :class:`~tli_client.errors.Unavailable` if not."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise TliError(
                grpc.StatusCode.UNAVAILABLE,
                f"no tli host answered at {self.endpoint} within {timeout} s",
            ) from None

    def _call(self, method: str, rpc: Callable[..., _T], request: Any) -> _T:
        try:
            return rpc(request, metadata=self._metadata, timeout=self.timeout)
        except grpc.RpcError as e:
            raise error_from_rpc(e, method) from None

    # Training.

    def start(
        self,
        models: Union[Sequence[Union[Model, ModelConfig]], Model, ModelConfig],
        assets: Union[Sequence[AssetLike], AssetLike],
        *,
        steps: Optional[int] = None,
        name: str = "job",
        seed: int = 0,
        device: str = "",
        checkpoint: Optional[CheckpointPolicy] = None,
        slice_steps: int = 0,
        features: Optional[Mapping[str, Any]] = None,
        executor: Optional[str] = None,
        slurm: Optional[SlurmOptions] = None,
        walk_forward: Optional[Mapping[str, Any]] = None,
        keep_best: Optional[KeepBestLike] = None,
        early_stopping: Optional[EarlyStoppingLike] = None,
    ) -> Job:
        """Submits a job: every model on every asset (a pooled model: one task on all).

        ``keep_best``: ``{"metric": "valid_loss", "mode": "min", "k": 2}`` (or just
        ``"valid_loss"``) keeps each task's ``k`` best checkpoints (default 1) by that
        validation metric, and its best is the task's model. ``early_stopping``:
        ``{"metric": "valid_loss", "patience": 5, "min_delta": 0.0, "mode": "min"}`` stops a
        task after ``patience`` validations in a row that do not beat its best by more than
        ``min_delta`` (``Task.stopped_early`` says why). ``mode``: ``"min"`` or ``"max"``;
        left out, it follows the metric's name. Both apply to every model; a :class:`Model`'s
        own ``keep_best`` / ``early_stopping`` replace them for that model. Checked here
        (``ValueError`` naming the key) and by the host (docs/orchestrator.md, "Best
        checkpoints and early stopping").

        ``walk_forward``: ``{"folds": 5, "test_bars": 250, "train_bars": 1500}`` or
        ``{"test_starts": ["2016-01-04", "2017-01-03"]}`` trains every model on every asset once
        per fold, each fold a task (docs/orchestrator.md, "Walk-forward"; needs pandas for
        dates).

        ``models``: configs (``TemplateConfig(…)``, ``plugin_config(name, {…})``) or
        :class:`Model` s (steps, priority, pooled per model); ``steps`` applies to those without
        their own. ``assets``: ``synthetic(rows, seed)``, ``bar_file(path)`` or the CLI's text
        forms. ``device``: ``cpu`` (default) or ``cuda:N``. ``features``: the feature pipeline
        settings (docs/data.md). ``name`` (for people, need not be unique) defaults to the
        CLI's ``job``. The host validates everything before storing anything.
        """
        if isinstance(
            models,
            (Model, TemplateConfig, DqnConfig, PpoConfig, Mamba2Config, TftConfig, PluginConfig),
        ):
            models = [models]
        if isinstance(assets, (str, os.PathLike)) or not isinstance(assets, Sequence):
            assets = [assets]
        job_keep_best = keep_best_to_proto(keep_best) if keep_best is not None else None
        job_early_stopping = (
            early_stopping_to_proto(early_stopping) if early_stopping is not None else None
        )
        specs = []
        for i, m in enumerate(models):
            spec = (m if isinstance(m, Model) else Model(m)).to_proto(steps, where=f"models[{i}].")
            if job_keep_best is not None and not spec.HasField("keep_best"):
                spec.keep_best.CopyFrom(job_keep_best)
            if job_early_stopping is not None and not spec.HasField("early_stopping"):
                spec.early_stopping.CopyFrom(job_early_stopping)
            specs.append(spec)
        request = pb.StartTrainingRequest(
            name=name,
            models=specs,
            assets=[asset_to_proto(a) for a in assets],
            seed=seed,
            device=device,
            slice_steps=slice_steps,
            features_json=json.dumps(dict(features), allow_nan=False) if features else "",
        )
        if walk_forward is not None:
            request.walk_forward.CopyFrom(walk_forward_to_proto(walk_forward))
        _set_placement(request, checkpoint, executor, slurm)
        reply = self._call("StartTraining", self._training.StartTraining, request)
        _warn_of_data(reply)
        return Job.from_proto(reply.job, self)

    def status(self, job: JobRef) -> Job:
        """The job now: every task's state, steps and latest metrics."""
        reply = self._call(
            "GetTrainingStatus",
            self._training.GetTrainingStatus,
            pb.GetTrainingStatusRequest(job_id=job_id_of(job)),
        )
        return Job.from_proto(reply.job, self)

    def list_pages(
        self,
        *,
        state: Union[TaskState, str, Iterable[Union[TaskState, str]], None] = None,
        plugin: Optional[str] = None,
        asset: Optional[str] = None,
        order: Optional[str] = None,
        created_after: Union[datetime, int, None] = None,
        created_before: Union[datetime, int, None] = None,
        page_size: int = 50,
    ) -> Iterator[Page]:
        """The listing page by page (each page one ListTrainingJobs call, read as iterated)."""
        if state is None:
            states: builtins.list[TaskState] = []
        elif isinstance(state, (TaskState, str)):
            states = [TaskState.parse(state)]
        else:
            states = [TaskState.parse(s) for s in state]
        if order is None:
            order_value = pb.JOB_ORDER_UNSPECIFIED
        else:
            key = str(order).lower().removeprefix("job_order_")
            if key not in _ORDERS:
                raise ValueError(f"order {order!r}: expected newest, oldest or name")
            order_value = _ORDERS[key]
        request = pb.ListTrainingJobsRequest(
            states=[s.proto_name for s in states],
            plugin=plugin or "",
            asset=asset or "",
            created_after_unix_ms=_unix_ms(created_after),
            created_before_unix_ms=_unix_ms(created_before),
            order=order_value,
            page_size=page_size,
        )
        while True:
            reply = self._call("ListTrainingJobs", self._training.ListTrainingJobs, request)
            yield Page(tuple(Job.from_proto(j, self) for j in reply.jobs), reply.next_page_token)
            if not reply.next_page_token:
                return
            request.page_token = reply.next_page_token

    def list(
        self,
        *,
        state: Union[TaskState, str, Iterable[Union[TaskState, str]], None] = None,
        plugin: Optional[str] = None,
        asset: Optional[str] = None,
        order: Optional[str] = None,
        created_after: Union[datetime, int, None] = None,
        created_before: Union[datetime, int, None] = None,
        page_size: int = 50,
    ) -> Iterator[Job]:
        """Every job that matches, across all pages (fetched lazily, ``page_size`` at a time).

        ``state``: jobs with a task in that state (or any of several); ``plugin`` / ``asset``:
        jobs with a task of that plugin / on that asset; ``order``: ``newest`` (default),
        ``oldest`` or ``name``.
        """
        for page in self.list_pages(
            state=state,
            plugin=plugin,
            asset=asset,
            order=order,
            created_after=created_after,
            created_before=created_before,
            page_size=page_size,
        ):
            yield from page.jobs

    def watch(
        self,
        job: JobRef,
        *,
        interval_ms: int = 500,
        progress: Union[bool, ProgressDisplay] = False,
        timeout: Optional[float] = None,
    ) -> Iterator[Event]:
        """The job's events as they happen, ending with :class:`~tli_client.jobs.Finished`.

        First every state change so far and a progress snapshot, then new state changes,
        progress at most every ``interval_ms``, plugin log lines, and ``Finished`` with the final
        job once every task has finished. ``progress=True`` also draws live bars (tqdm; a
        widget in notebooks). Breaking out of the loop cancels the stream. The stream also
        ends, without ``Finished``, when the host shuts down.
        """
        display: Optional[ProgressDisplay]
        if progress is True:
            display = TqdmDisplay()
        elif progress is False or progress is None:
            display = None
        else:
            display = progress
        call = self._training.WatchTraining(
            pb.WatchTrainingRequest(job_id=job_id_of(job), interval_ms=interval_ms),
            metadata=self._metadata,
            timeout=timeout,
        )
        try:
            for message in call:
                event = event_from_proto(message, self)
                if event is None:
                    continue
                if display is not None:
                    display.update(event)
                yield event
        except grpc.RpcError as e:
            raise error_from_rpc(e, "WatchTraining") from None
        finally:
            call.cancel()
            if display is not None:
                display.close()

    def wait(
        self,
        job: JobRef,
        *,
        progress: Union[bool, ProgressDisplay] = False,
        interval_ms: int = 500,
        timeout: Optional[float] = None,
    ) -> Job:
        """Watches the job until every task has finished; the final job."""
        for event in self.watch(job, interval_ms=interval_ms, progress=progress, timeout=timeout):
            if isinstance(event, Finished):
                return event.job
        raise TliError(
            grpc.StatusCode.UNAVAILABLE,
            f"the watch of job {job_id_of(job)} ended before it finished (the host shut down?)",
            "WatchTraining",
        )

    def stop(
        self,
        job: JobRef,
        task: Optional[int] = None,
        *,
        force: bool = False,
        deadline: Union[float, timedelta, None] = None,
    ) -> Job:
        """Stops the job's tasks (or one task). Graceful: each checkpoints, then is cancelled.

        ``force``: the plugin is told to return at once, no checkpoint; after ``deadline``
        (seconds) the task is marked cancelled even if the plugin has not returned.
        """
        reply = self._call(
            "StopTraining",
            self._training.StopTraining,
            pb.StopTrainingRequest(
                job_id=job_id_of(job),
                task_id=task or 0,
                force=force,
                deadline_ms=_seconds_to_ms(deadline),
            ),
        )
        return Job.from_proto(reply.job, self)

    def resume(
        self,
        job: JobRef,
        steps: Optional[int] = None,
        accept_changed_inputs: bool = False,
    ) -> Resumed:
        """Re-queues the job's cancelled, failed and interrupted tasks (from their checkpoints).

        ``steps``: also re-queue its completed tasks (early-stopped ones included), every task
        then trained ``steps`` beyond those it has done, going on from its final checkpoint
        (patience counted afresh).

        ``accept_changed_inputs``: a task refuses to start on a data file that changed since
        its job was submitted; True records the files anew as they are now and trains on them
        (each resumed task's history says which changed and how).
        """
        request = pb.ResumeTrainingRequest(
            job_id=job_id_of(job), accept_changed_inputs=bool(accept_changed_inputs)
        )
        if steps is not None:
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
                raise ValueError(
                    f"steps: {steps!r}: give a whole number ≥ 1 of steps to train beyond those "
                    "done (None resumes unfinished tasks only)"
                )
            request.more_steps = steps
        reply = self._call("ResumeTraining", self._training.ResumeTraining, request)
        return Resumed(Job.from_proto(reply.job, self), reply.resumed_tasks)

    def history(
        self, job: JobRef, metrics: Optional[Sequence[str]] = None, max_points: int = 0
    ) -> History:
        """Each task's metric series by step (``metrics``: only these; ``max_points`` per
        series, 0 = 2000, longer series thinned evenly). ``.to_pandas()`` for a DataFrame."""
        reply = self._call(
            "GetTrainingHistory",
            self._training.GetTrainingHistory,
            pb.GetTrainingHistoryRequest(
                job_id=job_id_of(job), metrics=list(metrics or []), max_points_per_series=max_points
            ),
        )
        return History.from_proto(reply)

    # Sweeps.

    @overload
    def sweep(
        self,
        plugin: str,
        assets: Union[Sequence[AssetLike], AssetLike],
        space: SearchSpace,
        *,
        metric: str = "valid_loss",
        max_steps: int,
        grace_period: Optional[int] = None,
        reduction_factor: int = 3,
        scheduler: str = "asha",
        samples: int = 1,
        seed: int = 1,
        sample_seed: Optional[int] = None,
        config: Optional[Mapping[str, Any]] = None,
        mode: Optional[str] = None,
        pooled: bool = False,
        keep_best: bool = True,
        name: str = "sweep",
        device: str = "",
        checkpoint: Optional[CheckpointPolicy] = None,
        slice_steps: int = 0,
        features: Optional[Mapping[str, Any]] = None,
        executor: Optional[str] = None,
        slurm: Optional[SlurmOptions] = None,
        wait: Literal[True] = True,
        progress: Union[bool, ProgressDisplay] = False,
        interval_ms: int = 500,
        timeout: Optional[float] = None,
    ) -> SweepResults: ...

    @overload
    def sweep(
        self,
        plugin: str,
        assets: Union[Sequence[AssetLike], AssetLike],
        space: SearchSpace,
        *,
        metric: str = "valid_loss",
        max_steps: int,
        grace_period: Optional[int] = None,
        reduction_factor: int = 3,
        scheduler: str = "asha",
        samples: int = 1,
        seed: int = 1,
        sample_seed: Optional[int] = None,
        config: Optional[Mapping[str, Any]] = None,
        mode: Optional[str] = None,
        pooled: bool = False,
        keep_best: bool = True,
        name: str = "sweep",
        device: str = "",
        checkpoint: Optional[CheckpointPolicy] = None,
        slice_steps: int = 0,
        features: Optional[Mapping[str, Any]] = None,
        executor: Optional[str] = None,
        slurm: Optional[SlurmOptions] = None,
        wait: Literal[False],
        progress: Union[bool, ProgressDisplay] = False,
        interval_ms: int = 500,
        timeout: Optional[float] = None,
    ) -> Job: ...

    @overload
    def sweep(
        self,
        plugin: str,
        assets: Union[Sequence[AssetLike], AssetLike],
        space: SearchSpace,
        *,
        metric: str = "valid_loss",
        max_steps: int,
        grace_period: Optional[int] = None,
        reduction_factor: int = 3,
        scheduler: str = "asha",
        samples: int = 1,
        seed: int = 1,
        sample_seed: Optional[int] = None,
        config: Optional[Mapping[str, Any]] = None,
        mode: Optional[str] = None,
        pooled: bool = False,
        keep_best: bool = True,
        name: str = "sweep",
        device: str = "",
        checkpoint: Optional[CheckpointPolicy] = None,
        slice_steps: int = 0,
        features: Optional[Mapping[str, Any]] = None,
        executor: Optional[str] = None,
        slurm: Optional[SlurmOptions] = None,
        wait: bool,
        progress: Union[bool, ProgressDisplay] = False,
        interval_ms: int = 500,
        timeout: Optional[float] = None,
    ) -> Union[SweepResults, Job]: ...

    def sweep(
        self,
        plugin: str,
        assets: Union[Sequence[AssetLike], AssetLike],
        space: SearchSpace,
        *,
        metric: str = "valid_loss",
        max_steps: int,
        grace_period: Optional[int] = None,
        reduction_factor: int = 3,
        scheduler: str = "asha",
        samples: int = 1,
        seed: int = 1,
        sample_seed: Optional[int] = None,
        config: Optional[Mapping[str, Any]] = None,
        mode: Optional[str] = None,
        pooled: bool = False,
        keep_best: bool = True,
        name: str = "sweep",
        device: str = "",
        checkpoint: Optional[CheckpointPolicy] = None,
        slice_steps: int = 0,
        features: Optional[Mapping[str, Any]] = None,
        executor: Optional[str] = None,
        slurm: Optional[SlurmOptions] = None,
        wait: bool = True,
        progress: Union[bool, ProgressDisplay] = False,
        interval_ms: int = 500,
        timeout: Optional[float] = None,
    ) -> Union[SweepResults, Job]:
        """Submits a hyperparameter sweep of ``plugin`` over ``space`` (``tli sweep start``):
        its trials, sampled from the space, are the job's models, one task per asset (one
        across all with ``pooled=True``), each trained up to ``max_steps``. With ``wait``
        (default) it watches the job to the end and returns :meth:`sweep_results`; with
        ``wait=False`` the :class:`Job` at once (``job.wait()``, then
        ``tli.sweep_results(job)``).

        ``space``: config key (dots for nested keys: ``"trading.window"``) → ``{"choice":
        [...]}`` (one value at random per trial), ``{"grid": [...]}`` (every value: trials are
        the grids' product), ``{"uniform": [lo, hi]}``, ``{"log_uniform": [lo, hi]}`` (lo > 0)
        or ``{"int": [lo, hi]}`` (both included). ``samples``: random draws per grid point
        (without grids, the number of trials), drawn with ``sample_seed`` (default ``seed``,
        which also seeds the tasks: seed + task ordinal). ``config``: keys every trial shares
        (the plugin's defaults for the rest).

        ``scheduler="asha"`` (default) stops bad trials early: rungs at ``grace_period ×
        reduction_factor^k`` steps (and ``max_steps``); a trial goes on from a rung only when
        its ``metric`` there ranks in the top ``1/reduction_factor`` of the trials before it.
        ``grace_period`` is then required (a multiple of the plugin's validation cadence).
        ``scheduler="run_all"`` trains every trial to ``max_steps``. ``metric``: a validation
        metric the plugin reports (``valid_*``); ``mode`` ``"min"``/``"max"``, left out: by the
        metric's name. ``keep_best`` (default): each trial keeps its best checkpoint by
        ``metric``, which is its model; ``False`` keeps the newest only.

        ``name``, ``device``, ``checkpoint``, ``slice_steps``, ``features``, ``executor``,
        ``slurm``: as for :meth:`start`. ``progress``, ``interval_ms``, ``timeout`` (seconds for
        the whole wait): as for :meth:`wait`.

        Checked here first (``ValueError`` naming the argument or ``space.KEY``: an unknown
        kind of dimension, an empty choice or grid, a range not ``[low, high]``, a metric not
        ``valid_*``, ``reduction_factor`` < 2, no ``grace_period`` for ASHA …); the host checks
        the keys and values against the plugin's config schema (``InvalidArgument``:
        ``space.lr: the plugin's config has no such key (did you mean learning_rate?)``).
        """
        message = sweep_to_proto(
            plugin,
            space,
            metric=metric,
            max_steps=max_steps,
            grace_period=grace_period,
            reduction_factor=reduction_factor,
            scheduler=scheduler,
            samples=samples,
            seed=seed if sample_seed is None else sample_seed,
            config=config,
            mode=mode,
            pooled=pooled,
            keep_best=keep_best,
        )
        if isinstance(assets, (str, os.PathLike)) or not isinstance(assets, Sequence):
            assets = [assets]
        request = pb.StartTrainingRequest(
            name=name,
            assets=[asset_to_proto(a) for a in assets],
            seed=seed,
            device=device,
            slice_steps=slice_steps,
            features_json=json.dumps(dict(features), allow_nan=False) if features else "",
            sweep=message,
        )
        _set_placement(request, checkpoint, executor, slurm)
        reply = self._call("StartTraining", self._training.StartTraining, request)
        _warn_of_data(reply)
        job = Job.from_proto(reply.job, self)
        if not wait:
            return job
        self.wait(job, progress=progress, interval_ms=interval_ms, timeout=timeout)
        return self.sweep_results(job)

    def sweep_results(self, job: JobRef) -> SweepResults:
        """A sweep's result table (``tli sweep results``): each trial's searched values
        (``params``), its metric at every rung (``rung_values``), ``final_value``, ``status``
        and whether it is the best of its asset, with the steps trained against training
        every trial to the end. ``.to_pandas()`` (or ``.to_dataframe()``) for a DataFrame.
        Read while the sweep runs, it shows where each trial is now.

        :class:`~tli_client.errors.NotFound` for no such job,
        :class:`~tli_client.errors.FailedPrecondition` for a job that is not a sweep."""
        reply = self._call(
            "GetSweep", self._training.GetSweep, pb.GetSweepRequest(job_id=job_id_of(job))
        )
        return SweepResults.from_proto(reply)

    # The host.

    def plugins(self) -> Plugins:
        """The plugins the host loaded (defaults, schemas, capabilities) and those it refused."""
        reply = self._call("ListPlugins", self._plugins.ListPlugins, ppb.ListPluginsRequest())
        return Plugins.from_proto(reply)

    def config_type(self, plugin: str) -> Type[SchemaConfig]:
        """A typed config class for ``plugin`` (``name`` or ``name@version``), built from the
        JSON Schema the host serves for it: one keyword argument per config key, checked as it
        is given (:mod:`tli_client.schema_config`). Works for any plugin the host loaded, built
        in or not, with no change to this package."""
        return config_type(self.plugins()[plugin])

    def rescan_plugins(self) -> RescanReport:
        """Make the host load plugin files added to its plugin directory since it started."""
        reply = self._call(
            "RescanPlugins", self._plugins.RescanPlugins, ppb.RescanPluginsRequest()
        )
        return RescanReport.from_proto(reply)

    def resources(self) -> Tuple[Device, ...]:
        """Each device: memory budget, reservations (a task's, or a resident model's:
        ``Reservation.model``), measured usage per task."""
        reply = self._call("GetResources", self._resources.GetResources, ppb.GetResourcesRequest())
        return devices_from_proto(reply)

    # Models.

    def models(self) -> builtins.list[ModelInfo]:
        """Every model of the host (tasks with a checkpoint and a card, imported bundles),
        newest first."""
        reply = self._call("ListModels", self._models.ListModels, mpb.ListModelsRequest())
        return [ModelInfo.from_proto(m) for m in reply.models]

    def model(self, model_id: ModelRef) -> ModelInfo:
        """One model, with its card (model.json) as a dict in ``.card``."""
        reply = self._call(
            "GetModel", self._models.GetModel, mpb.GetModelRequest(model=model_id_of(model_id))
        )
        return ModelInfo.from_proto(reply.model)

    def load_model(self, model_id: ModelRef) -> ModelInfo:
        """Makes the model resident (its predictor's memory reserved on the host's device);
        ``.resident`` is then set. A loaded model is returned as it is.
        :class:`~tli_client.errors.ResourceExhausted` when it does not fit now."""
        reply = self._call(
            "LoadModel", self._models.LoadModel, mpb.LoadModelRequest(model=model_id_of(model_id))
        )
        return ModelInfo.from_proto(reply.model)

    def unload_model(self, model_id: ModelRef) -> bool:
        """Frees a resident model's predictor and reservation; False when it was not loaded."""
        reply = self._call(
            "UnloadModel",
            self._models.UnloadModel,
            mpb.UnloadModelRequest(model=model_id_of(model_id)),
        )
        return bool(reply.unloaded)

    def predict(
        self,
        model_id: ModelRef,
        bars: BarsLike,
        symbol: Optional[str] = None,
        start: Optional[TimeLike] = None,
        end: Optional[TimeLike] = None,
        *,
        interval: Optional[str] = None,
    ) -> "pandas.DataFrame":
        """Applies a resident model to bars of one symbol; one row per bar that has the
        model's look-back.

        ``bars``: a DataFrame with ``open``, ``high``, ``low``, ``close``, ``volume`` and a
        DatetimeIndex (naive = UTC) or a ``ts`` / ``timestamp`` column, oldest first (at most
        80,000 bars). ``symbol``: else the bars' ``symbol`` column. ``start`` / ``end``
        (inclusive; Timestamps, datetimes, strings): rows only for those bars, earlier bars
        still serve as look-back. ``interval``: ``1s`` ``1m`` ``1h`` ``1d``, default inferred.

        A DataFrame indexed by UTC ``timestamp``: ``symbol``, then one float column per output
        (``fwd_logret_1:mean``, ``fwd_logret_1:actual`` …; NaN kept). ``.attrs`` holds
        ``model`` and ``served_by``. Needs pandas.
        """
        request = mpb.PredictRequest(
            model=model_id_of(model_id), bars=bars_to_proto(bars, symbol, interval)
        )
        if start is not None:
            request.start_unix_ns = time_to_unix_ns(start, "start")
        if end is not None:
            request.end_unix_ns = time_to_unix_ns(end, "end")
        reply = self._call("Predict", self._models.Predict, request)
        frame = rows_to_frame(reply.rows if reply.HasField("rows") else None)
        frame.attrs.update(model=reply.model, served_by=reply.served_by)
        return frame

    def backtest(
        self,
        model_id: ModelRef,
        bars: BarsLike,
        symbol: Optional[str] = None,
        start: Optional[TimeLike] = None,
        end: Optional[TimeLike] = None,
        *,
        rule: str = "sign",
        max_contracts: Optional[float] = None,
        commission: Optional[float] = None,
        slippage_ticks: Optional[float] = None,
        summary_only: bool = False,
        interval: Optional[str] = None,
    ) -> Backtest:
        """Trades a resident model's outputs on bars of one symbol, bar by bar with no
        look-ahead, beside buy-and-hold (one contract long throughout) and flat on the same
        bars (the host computes it all, as ``tli backtest`` does).

        ``bars``, ``symbol``, ``start``, ``end``, ``interval``: as for :meth:`predict`; bars
        before ``start`` serve as look-back only. The bars traded run from the first bar with
        an output to the last (a bar inside with no output is flat).

        Timing: the position ``p_t`` decided at bar ``t``'s close is held over the next bar.
        Ledger row ``t`` books::

            gross_t = p_{t-1} · point_value · (close_t − close_{t-1})
            costs_t = cost_per_contract · |p_{t-1} − p_{t-2}|      (p_{-1} = p_{-2} = 0)
            net_t   = gross_t − costs_t,   equity_t = net_0 + … + net_t

        with ``cost_per_contract = commission + slippage_ticks · tick_size · point_value``.
        Row 0 books nothing and the last position is not liquidated. On a roll bar (the first
        of a new contract of a continuous series) gross is 0 and a held position is traded
        twice: costs gain ``2 · cost_per_contract · |p_{t-1}|``.

        Positions: an agent trades its own. A forecaster's one-bar-ahead forecast (the P50 of
        horizon 1, or a point forecast) goes through ``rule``: ``"sign"``
        (``max_contracts · sign(P50)``), ``"scaled"`` (``max_contracts · clamp(P50 / σ, −1,
        1)`` with ``σ = (P90 − P10) / 2.5631``; fractional contracts) or ``"threshold"`` /
        ``"threshold:K"`` (``max_contracts · sign(P50)`` only when ``|P50| > K · (P90 −
        P10)``, K 0.1); a point forecast has the sign rule only. ``max_contracts``: default 1.
        ``commission`` (currency per contract traded) and ``slippage_ticks`` (ticks per
        contract traded): default an agent's own trading config, else 2.0 and 0.5.
        ``summary_only``: leave out the ledger and forecasts (a smaller answer).

        A :class:`~tli_client.models.Backtest`: ``summary`` (one row each for ``model``,
        ``buy_and_hold``, ``flat``), ``ledger`` and ``forecasts`` DataFrames indexed by UTC
        ``timestamp``, and the costs applied. ``InvalidArgument`` for a rule the model cannot
        take or a bad number, ``FailedPrecondition`` when the model is not loaded. Needs
        pandas.
        """
        request = mpb.BacktestRequest(
            model=model_id_of(model_id),
            bars=bars_to_proto(bars, symbol, interval),
            rule=rule,
            summary_only=summary_only,
        )
        if start is not None:
            request.start_unix_ns = time_to_unix_ns(start, "start")
        if end is not None:
            request.end_unix_ns = time_to_unix_ns(end, "end")
        if max_contracts is not None:
            request.max_contracts = float(max_contracts)
        if commission is not None:
            request.commission = float(commission)
        if slippage_ticks is not None:
            request.slippage_ticks = float(slippage_ticks)
        reply = self._call("Backtest", self._models.Backtest, request)
        return Backtest.from_proto(reply)

    def predict_stream(
        self,
        model_id: ModelRef,
        symbol: str,
        bars_iter: Iterable[BarsLike],
        interval: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Iterator["pandas.DataFrame"]:
        """Streams bars to a resident model and yields its outputs as they come: one
        DataFrame (as :meth:`predict`'s, without ``:actual`` columns) per item of
        ``bars_iter``, empty while the look-back is filling.

        Each item: a DataFrame of one or more bars, or one bar as a dict or Series (``ts``,
        ``open``, ``high``, ``low``, ``close``, ``volume``). The host keeps the state (the
        recent bars, a recurrent state, an agent's position), so a new bar costs one step.
        Items are read as the host takes them (``bars_iter`` may be a live feed); breaking
        out of the loop closes the stream. ``.attrs["bars_seen"]``: bars received so far.
        """
        key = model_id_of(model_id)
        if not symbol or not str(symbol).strip():
            raise ValueError("predict_stream: give the symbol of the bars")
        stream_symbol = str(symbol).strip()
        failed: builtins.list[BaseException] = []

        def requests() -> Iterator[mpb.PredictStreamRequest]:
            # Runs on grpc's sending thread: an exception here would only cancel the call, so
            # it is kept and raised to the reader once the answers so far are yielded.
            yield mpb.PredictStreamRequest(
                open=mpb.OpenPredictStream(
                    model=key, symbol=stream_symbol, interval=interval or ""
                )
            )
            items = iter(bars_iter)
            while True:
                try:
                    item = next(items)
                except StopIteration:
                    return
                except BaseException as e:  # the caller's iterator failed
                    failed.append(e)
                    return
                try:
                    message = bars_to_proto(item, None, interval, default_symbol=stream_symbol)
                except BaseException as e:
                    failed.append(e)
                    return
                yield mpb.PredictStreamRequest(bars=message)

        call = self._models.PredictStream(requests(), metadata=self._metadata, timeout=timeout)
        columns: Sequence[str] = ()
        try:
            opened = False
            for message in call:
                if not opened:  # the answer to `open`
                    opened = True
                    continue
                rows = message.rows if message.HasField("rows") else None
                frame = rows_to_frame(rows, columns)
                if rows is not None and rows.columns:
                    columns = list(rows.columns)
                frame.attrs.update(model=key, bars_seen=message.bars_seen)
                yield frame
        except grpc.RpcError as e:
            if failed:
                raise failed[0]
            raise error_from_rpc(e, "PredictStream") from None
        finally:
            call.cancel()
        if failed:
            raise failed[0]

    def export_model(
        self, model_id: ModelRef, directory: Union[str, "os.PathLike[str]"], *, timeout: Optional[float] = None
    ) -> Path:
        """Writes the model as a bundle into ``directory`` (which must not exist): model.json,
        weights.safetensors, checksums.sha256. The files are written in a hidden directory
        beside it, each checked against checksums.sha256, then renamed into place: the
        bundle appears whole or not at all. A task's model is exported from its newest
        checkpoint that verifies. The bundle's path."""
        target = Path(directory)
        if os.path.lexists(target):
            raise FileExistsError(f"{target} already exists; export to a new directory (nothing was written)")
        key = model_id_of(model_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
        try:
            call = self._models.ExportModel(
                mpb.ExportModelRequest(model=key), metadata=self._metadata, timeout=timeout
            )
            files: Dict[str, BinaryIO] = {}
            sizes: Dict[str, int] = {}
            try:
                for chunk in call:
                    if chunk.file not in BUNDLE_FILES:
                        raise DataLoss(
                            grpc.StatusCode.DATA_LOSS,
                            f"the host sent a file {chunk.file[:80]!r} that is not part of a bundle",
                            "ExportModel",
                        )
                    out = files.get(chunk.file)
                    if out is None:
                        out = files[chunk.file] = open(staging / chunk.file, "xb")
                    out.seek(chunk.offset)
                    out.write(chunk.data)
                    sizes[chunk.file] = chunk.file_size
            except grpc.RpcError as e:
                raise error_from_rpc(e, "ExportModel") from None
            finally:
                call.cancel()
                for out in files.values():
                    out.flush()
                    os.fsync(out.fileno())
                    out.close()
            _check_bundle(staging, sizes, key)
            if os.path.lexists(target):
                raise FileExistsError(f"{target} appeared during the export; nothing was written")
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(target.parent)
        return target

    def import_model(
        self,
        directory: Union[str, "os.PathLike[str]"],
        name: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> ModelInfo:
        """Sends a bundle directory (model.json, weights.safetensors, checksums.sha256) to the
        host, where it becomes a model named ``name`` (default: the directory's name; 1 to 64
        of ``A-Z a-z 0-9 . _ -``, not all digits). The host checks it whole (checksums, card,
        its plugin) before it appears: :class:`~tli_client.errors.InvalidArgument` for a
        damaged bundle, :class:`~tli_client.errors.AlreadyExists` for a name taken."""
        source = Path(directory)
        if not source.is_dir():
            raise FileNotFoundError(f"{source} is not a bundle directory")
        model_name = name if name is not None else source.resolve().name
        for file in BUNDLE_FILES:
            if not (source / file).is_file():
                raise FileNotFoundError(f"{source} has no {file}; a bundle has {', '.join(BUNDLE_FILES)}")
        card = (source / "model.json").read_bytes()
        checksums = (source / "checksums.sha256").read_bytes()
        weights = open(source / "weights.safetensors", "rb")
        failed: builtins.list[BaseException] = []

        def requests() -> Iterator[mpb.ImportModelRequest]:
            first = [model_name]

            def message(file: str, data: bytes) -> mpb.ImportModelRequest:
                return mpb.ImportModelRequest(name=first.pop() if first else "", file=file, data=data)

            for at in range(0, max(len(card), 1), IMPORT_CHUNK_BYTES):
                yield message("model.json", card[at : at + IMPORT_CHUNK_BYTES])
            while True:
                try:
                    data = weights.read(IMPORT_CHUNK_BYTES)
                except BaseException as e:  # kept for the caller: grpc would only cancel
                    failed.append(e)
                    return
                if not data:
                    break
                yield message("weights.safetensors", data)
            for at in range(0, max(len(checksums), 1), IMPORT_CHUNK_BYTES):
                yield message("checksums.sha256", checksums[at : at + IMPORT_CHUNK_BYTES])

        try:
            reply = self._models.ImportModel(requests(), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            if failed:
                raise failed[0]
            raise error_from_rpc(e, "ImportModel") from None
        finally:
            weights.close()
        if failed:
            raise failed[0]
        return ModelInfo.from_proto(reply.model)


def _check_bundle(staging: Path, sizes: Mapping[str, int], model_id: str) -> None:
    """An exported bundle is whole: every file at its full size, each matching its SHA-256."""
    for file in BUNDLE_FILES:
        path = staging / file
        if not path.is_file():
            raise DataLoss(
                grpc.StatusCode.DATA_LOSS,
                f"the export of model {model_id} ended without {file}; nothing was written",
                "ExportModel",
            )
        if path.stat().st_size != sizes.get(file, -1):
            raise DataLoss(
                grpc.StatusCode.DATA_LOSS,
                f"the export of model {model_id} sent {path.stat().st_size} of "
                f"{sizes.get(file)} bytes of {file}; nothing was written",
                "ExportModel",
            )
    try:
        listed = parse_checksums((staging / "checksums.sha256").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataLoss(grpc.StatusCode.DATA_LOSS, f"the exported {e}; nothing was written", "ExportModel") from None
    for file in BUNDLE_FILES[:2]:
        if file not in listed:
            raise DataLoss(
                grpc.StatusCode.DATA_LOSS,
                f"the exported checksums.sha256 does not list {file}; nothing was written",
                "ExportModel",
            )
        if sha256_of(staging / file) != listed[file]:
            raise DataLoss(
                grpc.StatusCode.DATA_LOSS,
                f"the exported {file} does not match its SHA-256 in checksums.sha256; nothing "
                "was written",
                "ExportModel",
            )


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class DataWarning(UserWarning):
    """The host accepted a job but says something of its data (e.g. outlier prices)."""


def _warn_of_data(reply: pb.StartTrainingResponse) -> None:
    for text in reply.warnings:
        warnings.warn(text, DataWarning, stacklevel=3)
