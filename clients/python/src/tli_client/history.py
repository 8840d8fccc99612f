"""A job's recorded metric history (GetTrainingHistory): each task's series by step.

``History.to_pandas()`` gives the long form (one row per task, metric and step) that pandas
pivots and plots directly::

    df = job.history(["train_loss"]).to_pandas()
    df.pivot_table(index="step", columns="task", values="value").plot()
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from ._proto.tli.v1 import training_pb2 as pb

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = ["MetricSeries", "TaskHistory", "History"]


def _time(unix_ms: int) -> datetime:
    return datetime.fromtimestamp(unix_ms / 1000.0, tz=timezone.utc)


@dataclass(frozen=True)
class MetricSeries:
    """One metric of one task by step (long series thinned evenly; NaN stays NaN)."""

    name: str
    steps: Tuple[int, ...]
    values: Tuple[float, ...]
    at: Tuple[datetime, ...]
    #: Points recorded before thinning.
    recorded_points: int

    @property
    def last(self) -> Optional[float]:
        """The latest value, if any."""
        return self.values[-1] if self.values else None


@dataclass(frozen=True)
class TaskHistory:
    task_id: int
    ordinal: int
    plugin: str
    asset: str
    device: str
    series: Dict[str, MetricSeries]

    @property
    def label(self) -> str:
        """``task 6 plugin/asset``: a legend entry, naming the task as the CLI, the status
        page and the charts do."""
        return f"task {self.task_id} {self.plugin}/{self.asset}"


@dataclass(frozen=True)
class History:
    job_id: int
    name: str
    created: datetime
    #: Every metric name the job's tasks reported (also those not asked for).
    metric_names: Tuple[str, ...]
    tasks: Tuple[TaskHistory, ...]

    @classmethod
    def from_proto(cls, h: pb.GetTrainingHistoryResponse) -> "History":
        tasks = tuple(
            TaskHistory(
                t.task_id,
                t.ordinal,
                t.plugin,
                t.asset,
                t.device,
                {
                    s.name: MetricSeries(
                        s.name,
                        tuple(s.steps),
                        tuple(s.values),
                        tuple(_time(ms) for ms in s.at_unix_ms),
                        s.recorded_points,
                    )
                    for s in t.series
                },
            )
            for t in h.tasks
        )
        return cls(h.job_id, h.name, _time(h.created_unix_ms), tuple(h.metric_names), tasks)

    def series(self, metric: str) -> Dict[int, MetricSeries]:
        """One metric's series by task id (tasks that never reported it left out)."""
        return {t.task_id: t.series[metric] for t in self.tasks if metric in t.series}

    def to_pandas(self) -> "pandas.DataFrame":
        """Long form: task_id, task (a label), plugin, asset, metric, step, value, at."""
        from ._optional import require_pandas

        pd = require_pandas()
        columns = ["task_id", "task", "plugin", "asset", "metric", "step", "value", "at"]
        rows: builtins.list[Dict[str, Any]] = [
            {
                "task_id": t.task_id,
                "task": t.label,
                "plugin": t.plugin,
                "asset": t.asset,
                "metric": s.name,
                "step": step,
                "value": value,
                "at": at,
            }
            for t in self.tasks
            for s in t.series.values()
            for step, value, at in zip(s.steps, s.values, s.at)
        ]
        return pd.DataFrame(rows, columns=columns)
