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
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

import grpc

from ._proto.tli.v1 import plugins_pb2 as ppb
from ._proto.tli.v1 import plugins_pb2_grpc as ppb_grpc
from ._proto.tli.v1 import training_pb2 as pb
from ._proto.tli.v1 import training_pb2_grpc as pb_grpc
from .assets import AssetLike, asset_to_proto
from .config import (
    DqnConfig,
    Mamba2Config,
    Model,
    ModelConfig,
    PluginConfig,
    PpoConfig,
    TemplateConfig,
    TftConfig,
)
from .errors import TliError, error_from_rpc
from .history import History
from .info import Device, Plugins, RescanReport, devices_from_proto
from .jobs import Event, Finished, Job, JobRef, TaskState, event_from_proto, job_id_of
from .progress import ProgressDisplay, TqdmDisplay
from .schema_config import SchemaConfig, config_type

__all__ = ["Client", "Tls", "CheckpointPolicy", "SlurmOptions", "Page", "Resumed", "DEFAULT_ENDPOINT"]

#: Where the CLI looks too (``TLI_ENDPOINT`` overrides it).
DEFAULT_ENDPOINT = "http://127.0.0.1:50051"

_T = TypeVar("_T")

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
        if tls is False:
            self._channel = grpc.insecure_channel(target)
        else:
            settings = tls if isinstance(tls, Tls) else Tls()
            options = []
            if settings.server_name:
                options.append(("grpc.ssl_target_name_override", settings.server_name))
            self._channel = grpc.secure_channel(target, settings.credentials(), options=options)
        self._training = pb_grpc.TrainingServiceStub(self._channel)
        self._plugins = ppb_grpc.PluginServiceStub(self._channel)
        self._resources = ppb_grpc.ResourceServiceStub(self._channel)

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
    ) -> Job:
        """Submits a job: every model on every asset (a pooled model: one task on all).

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
        specs = [
            (m if isinstance(m, Model) else Model(m)).to_proto(steps) for m in models
        ]
        request = pb.StartTrainingRequest(
            name=name,
            models=specs,
            assets=[asset_to_proto(a) for a in assets],
            seed=seed,
            device=device,
            slice_steps=slice_steps,
            features_json=json.dumps(dict(features), allow_nan=False) if features else "",
        )
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
        reply = self._call("StartTraining", self._training.StartTraining, request)
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

    def resume(self, job: JobRef) -> Resumed:
        """Re-queues the job's cancelled, failed and interrupted tasks (from their checkpoints)."""
        reply = self._call(
            "ResumeTraining",
            self._training.ResumeTraining,
            pb.ResumeTrainingRequest(job_id=job_id_of(job)),
        )
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
        """Each device: memory budget, reservations, measured usage per task."""
        reply = self._call("GetResources", self._resources.GetResources, ppb.GetResourcesRequest())
        return devices_from_proto(reply)

