"""Jobs, tasks and watch events as typed, immutable values (converted from tli.v1 messages).

A :class:`Job` is a snapshot: its tasks' states, steps and latest metrics when it was read.
``job.refresh()`` reads it again; ``job.wait()`` watches it to the end. The events of
``Client.watch`` are :class:`Progress`, :class:`StateChanged`, :class:`LogLine` and, last,
:class:`Finished` (the union :data:`Event`).
"""

from __future__ import annotations

import builtins
import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from ._proto.tli.v1 import training_pb2 as pb

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .client import Client, Resumed
    from .history import History
    from .progress import ProgressDisplay
    from .sweeps import SweepResults

__all__ = [
    "TaskState",
    "Task",
    "BestCheckpoint",
    "MeasuredMemory",
    "Job",
    "Progress",
    "StateChanged",
    "LogLine",
    "Finished",
    "Event",
    "JobRef",
    "job_id_of",
]


class TaskState(str, enum.Enum):
    """A task's state (the CLI's words: ``queued``, ``running`` …)."""

    UNSPECIFIED = "unspecified"
    QUEUED = "queued"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def is_active(self) -> bool:
        """Training now (running or writing a checkpoint)."""
        return self in (TaskState.RUNNING, TaskState.CHECKPOINTING)

    @property
    def is_finished(self) -> bool:
        """Done for good unless resumed: completed, failed or cancelled."""
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED)

    @property
    def is_stoppable(self) -> bool:
        return self in (TaskState.QUEUED, TaskState.RUNNING, TaskState.CHECKPOINTING)

    @property
    def is_resumable(self) -> bool:
        return self in (TaskState.CANCELLED, TaskState.FAILED, TaskState.INTERRUPTED)

    @classmethod
    def from_proto(cls, value: int) -> "TaskState":
        name = pb.TaskState.Name(value) if value in pb.TaskState.values() else "TASK_STATE_UNSPECIFIED"
        return cls(name[len("TASK_STATE_") :].lower())

    @property
    def proto_name(self) -> str:
        """The tli.v1 enum value's name (``TASK_STATE_RUNNING``)."""
        return "TASK_STATE_" + self.name

    @classmethod
    def parse(cls, value: Union["TaskState", str]) -> "TaskState":
        """A state from itself, its word (``"running"``) or its proto name."""
        if isinstance(value, TaskState):
            return value
        text = str(value).strip().lower()
        text = text[len("task_state_") :] if text.startswith("task_state_") else text
        try:
            return cls(text)
        except ValueError:
            words = ", ".join(s.value for s in cls if s is not TaskState.UNSPECIFIED)
            raise ValueError(f"state {value!r}: expected one of {words}") from None

    def __str__(self) -> str:
        return self.value


def _time(unix_ms: int) -> datetime:
    return datetime.fromtimestamp(unix_ms / 1000.0, tz=timezone.utc)


@dataclass(frozen=True)
class MeasuredMemory:
    """What a task measured after its first slice, by component (bytes)."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    source: str

    @classmethod
    def from_proto(cls, m: pb.MeasuredMemory) -> "MeasuredMemory":
        source = pb.MemorySource.Name(m.source) if m.source in pb.MemorySource.values() else ""
        return cls(
            m.parameters,
            m.gradients,
            m.optimizer_state,
            m.activations,
            source.removeprefix("MEMORY_SOURCE_").lower(),
        )


@dataclass(frozen=True)
class BestCheckpoint:
    """A task's best checkpoint by its ``keep_best`` (or ``early_stopping``) metric: the
    task's model."""

    step: int
    metric: str
    value: float

    @classmethod
    def from_proto(cls, b: pb.BestModel) -> "BestCheckpoint":
        return cls(b.step, b.metric, b.value)


@dataclass(frozen=True)
class SlurmPlacement:
    """A Slurm task's latest Slurm job, and what all its jobs used (Slurm's accounting)."""

    job_id: str
    #: The node its worker reported; None until it attached.
    node: Optional[str]
    #: Slurm jobs submitted for the task so far (one per attempt).
    jobs: int
    #: CPU- and GPU-seconds of its ended jobs (elapsed time times allocated CPUs, GPUs).
    cpu_seconds: float
    gpu_seconds: float

    @classmethod
    def from_proto(cls, s: pb.SlurmPlacement) -> "SlurmPlacement":
        return cls(s.job_id, s.node or None, s.jobs, s.cpu_seconds, s.gpu_seconds)


@dataclass(frozen=True)
class Task:
    """One (model, asset) task of a job: state, steps and its latest metrics."""

    task_id: int
    plugin: str
    asset: str
    state: TaskState
    steps_done: int
    total_steps: int
    steps_per_second: float
    eta_seconds: Optional[float]
    metrics: Dict[str, float]
    error: str
    estimate_bytes: int
    measured_bytes: Optional[int]
    measured_memory: Optional[MeasuredMemory]
    #: The plugin version that runs the task and its library's SHA-256 ("" from older hosts).
    plugin_version: str = ""
    plugin_checksum: str = ""
    #: Why early stopping ended the task ("stopped early at step 800: …"); None otherwise.
    stopped_early: Optional[str] = None
    #: Its best checkpoint (with keep_best or early_stopping), which is its model; None when
    #: it keeps none (or none was measured yet).
    best: Optional[BestCheckpoint] = None
    #: Its latest Slurm job and its jobs' usage (Slurm executor only; None otherwise).
    slurm: Optional[SlurmPlacement] = None
    #: What a task not running yet waits for ("waiting for Slurm: …", "Slurm job 12 pending:
    #: Resources"); None otherwise.
    detail: Optional[str] = None
    #: The metrics its plugin says to compare tasks by, most telling first (plugin API 1.5;
    #: empty when the plugin names none). Some may not be reported yet.
    headline_metrics: Tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Steps done over total steps (0 .. 1)."""
        return self.steps_done / self.total_steps if self.total_steps else 0.0

    @classmethod
    def from_proto(cls, t: pb.TaskProgress) -> "Task":
        return cls(
            task_id=t.task_id,
            plugin=t.plugin,
            asset=t.asset,
            state=TaskState.from_proto(t.state),
            steps_done=t.steps_done,
            total_steps=t.total_steps,
            steps_per_second=t.steps_per_second,
            eta_seconds=t.eta_seconds if t.HasField("eta_seconds") else None,
            metrics={m.name: m.value for m in t.metrics},
            error=t.error,
            estimate_bytes=t.estimate_bytes,
            measured_bytes=t.measured_bytes if t.HasField("measured_bytes") else None,
            measured_memory=MeasuredMemory.from_proto(t.measured_memory)
            if t.HasField("measured_memory")
            else None,
            plugin_version=t.plugin_version,
            plugin_checksum=t.plugin_checksum,
            stopped_early=t.stopped_early or None,
            best=BestCheckpoint.from_proto(t.best) if t.HasField("best") else None,
            slurm=SlurmPlacement.from_proto(t.slurm) if t.HasField("slurm") else None,
            detail=t.detail or None,
            headline_metrics=tuple(t.headline_metrics),
        )


@dataclass(frozen=True)
class Job:
    """A job as the host reported it: id, name, cost-weighted progress and every task."""

    job_id: int
    name: str
    created: datetime
    #: Fraction done, weighted by each task's estimated cost (0 .. 1).
    fraction: float
    tasks: Tuple[Task, ...]
    _client: Optional["Client"] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, job: pb.Job, client: Optional["Client"] = None) -> "Job":
        return cls(
            job_id=job.job_id,
            name=job.name,
            created=_time(job.created_unix_ms),
            fraction=job.progress.weighted_fraction,
            tasks=tuple(Task.from_proto(t) for t in job.progress.tasks),
            _client=client,
        )

    # What the tasks say together.

    @property
    def states(self) -> Dict[TaskState, int]:
        """How many tasks are in each state."""
        counts: Dict[TaskState, int] = {}
        for t in self.tasks:
            counts[t.state] = counts.get(t.state, 0) + 1
        return counts

    @property
    def is_finished(self) -> bool:
        """Every task is completed, failed or cancelled."""
        return bool(self.tasks) and all(t.state.is_finished for t in self.tasks)

    @property
    def is_completed(self) -> bool:
        """Every task completed."""
        return bool(self.tasks) and all(t.state is TaskState.COMPLETED for t in self.tasks)

    @property
    def metrics(self) -> Dict[int, Dict[str, float]]:
        """Each task's latest metrics, by task id."""
        return {t.task_id: dict(t.metrics) for t in self.tasks}

    def task(self, task_id: int) -> Task:
        """The task with this id (KeyError if the job has none)."""
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise KeyError(f"job {self.job_id} has no task {task_id}")

    # Calls back to the host that read it.

    def _host(self) -> "Client":
        if self._client is None:
            raise RuntimeError(f"job {self.job_id} was not read through a Client")
        return self._client

    def refresh(self) -> "Job":
        """The job read again from the host."""
        return self._host().status(self)

    def wait(self, *, progress: Union[bool, "ProgressDisplay"] = False, interval_ms: int = 500) -> "Job":
        """Watches the job until every task has finished; the final job."""
        return self._host().wait(self, progress=progress, interval_ms=interval_ms)

    def stop(
        self,
        task: Optional[int] = None,
        *,
        force: bool = False,
        deadline: Union[float, timedelta, None] = None,
    ) -> "Job":
        """Stops the job (or one task); see :meth:`Client.stop`."""
        return self._host().stop(self, task=task, force=force, deadline=deadline)

    def resume(self, steps: Optional[int] = None) -> "Resumed":
        """Re-queues the job's cancelled, failed and interrupted tasks (with ``steps``, its
        completed ones too, trained that much further); see :meth:`Client.resume`."""
        return self._host().resume(self, steps=steps)

    def history(self, metrics: Optional[builtins.list[str]] = None, max_points: int = 0) -> "History":
        """Every task's metric series (see :meth:`Client.history`)."""
        return self._host().history(self, metrics=metrics, max_points=max_points)

    def sweep_results(self) -> "SweepResults":
        """The result table of a sweep job (see :meth:`Client.sweep_results`)."""
        return self._host().sweep_results(self)

    def to_pandas(self) -> "pandas.DataFrame":
        """One row per task: plugin, asset, state, steps, error, ``stopped_early``, the best
        checkpoint (``best_step``, ``best_metric``, ``best_value``; missing without one) and each
        latest metric as a column."""
        from ._optional import require_pandas

        pd = require_pandas()
        rows: builtins.list[Dict[str, Any]] = []
        for t in self.tasks:
            row: Dict[str, Any] = {
                "job_id": self.job_id,
                "task_id": t.task_id,
                "plugin": t.plugin,
                "asset": t.asset,
                "state": t.state.value,
                "steps_done": t.steps_done,
                "total_steps": t.total_steps,
                "error": t.error,
                "stopped_early": t.stopped_early,
                "best_step": t.best.step if t.best else None,
                "best_metric": t.best.metric if t.best else None,
                "best_value": t.best.value if t.best else None,
            }
            row.update(t.metrics)
            rows.append(row)
        return pd.DataFrame(rows).set_index("task_id") if rows else pd.DataFrame(rows)


#: A job given by its :class:`Job` or its id.
JobRef = Union[Job, int]


def job_id_of(job: JobRef) -> int:
    if isinstance(job, Job):
        return job.job_id
    if isinstance(job, int) and not isinstance(job, bool):
        return job
    raise TypeError(f"a job is a Job or a job id (int), not {type(job).__name__}")


# Watch events.


@dataclass(frozen=True)
class Progress:
    """The job's progress (at most every ``interval_ms``)."""

    job_id: int
    fraction: float
    tasks: Tuple[Task, ...]

    @classmethod
    def from_proto(cls, p: pb.JobProgress) -> "Progress":
        return cls(p.job_id, p.weighted_fraction, tuple(Task.from_proto(t) for t in p.tasks))


@dataclass(frozen=True)
class StateChanged:
    """A task went from one state to another (every change, in order)."""

    job_id: int
    task_id: int
    old: TaskState
    new: TaskState
    reason: str
    at: datetime

    @classmethod
    def from_proto(cls, s: pb.TaskStateChanged) -> "StateChanged":
        old = TaskState.from_proto(getattr(s, "from"))
        return cls(s.job_id, s.task_id, old, TaskState.from_proto(s.to), s.reason, _time(s.at_unix_ms))


@dataclass(frozen=True)
class LogLine:
    """A plugin's log line (``task_id`` 0: a note from the host about the stream itself)."""

    level: str
    message: str
    at: datetime
    task_id: int
    plugin: str

    @classmethod
    def from_proto(cls, line: pb.LogLine) -> "LogLine":
        return cls(line.level, line.message, _time(line.at_unix_ms), line.task_id, line.plugin)


@dataclass(frozen=True)
class Finished:
    """The last event: every task has finished; the final job."""

    job: Job


Event = Union[Progress, StateChanged, LogLine, Finished]


def event_from_proto(e: pb.WatchTrainingResponse, client: Optional["Client"]) -> Optional[Event]:
    kind = e.WhichOneof("event")
    if kind == "progress":
        return Progress.from_proto(e.progress)
    if kind == "state_changed":
        return StateChanged.from_proto(e.state_changed)
    if kind == "log":
        return LogLine.from_proto(e.log)
    if kind == "finished":
        return Finished(Job.from_proto(e.finished, client))
    return None  # an event kind newer than this client: skipped
