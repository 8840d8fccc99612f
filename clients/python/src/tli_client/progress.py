"""Live progress displays for ``Client.watch(job, progress=…)``.

``progress=True`` draws with tqdm (``pip install 'tli-client[notebook]'``; ``tqdm.auto``: a
widget in Jupyter when ipywidgets is installed, text bars otherwise and in a terminal): one bar
for the job (cost-weighted, in percent) and one per task (steps), each with its state and
latest metric; plugin log lines are printed above the bars. Pass a :class:`TqdmDisplay` to choose where it draws, or any object with the
:class:`ProgressDisplay` methods to draw your own.
"""

from __future__ import annotations

import os
import time
from typing import IO, Any, Dict, Optional, Protocol, Tuple, runtime_checkable

from ._optional import require_tqdm
from .jobs import Event, Finished, LogLine, Progress, StateChanged, Task

__all__ = ["ProgressDisplay", "TqdmDisplay"]


@runtime_checkable
class ProgressDisplay(Protocol):
    """Shown every watch event as it arrives; closed when the watch ends."""

    def update(self, event: Event) -> None: ...

    def close(self) -> None: ...


def _headline(t: Task) -> Optional[str]:
    """The metric a bar shows when none was chosen: while the task trains, its training
    loss; once it ended, the first of its plugin's headline metrics it reported (what its
    tasks are compared by). Else the training loss, else the first by name."""
    if t.state.is_finished:
        for name in t.headline_metrics:
            if name in t.metrics:
                return name
    if "train_loss" in t.metrics:
        return "train_loss"
    for name in t.headline_metrics:
        if name in t.metrics:
            return name
    names = sorted(n for n in t.metrics if n != "learning_rate")
    return names[0] if names else None


class TqdmDisplay:
    """tqdm bars: the job (percent) and each task (steps, state, a metric)."""

    def __init__(
        self,
        file: Optional[IO[str]] = None,
        *,
        metric: Optional[str] = None,
        show_logs: bool = True,
        leave: bool = True,
    ) -> None:
        self._tqdm = require_tqdm()
        self._file = file
        self._metric = metric
        self._show_logs = show_logs
        self._leave = leave
        self._job: Any = None
        self._tasks: Dict[int, Any] = {}
        # When each task was first seen running, and its steps then; its rate once finished.
        self._running_since: Dict[int, Tuple[float, int]] = {}
        self._final_rate: Dict[int, Optional[float]] = {}

    def _rate(self, t: Task) -> Optional[float]:
        """Steps per second of the task's own run: the host's figure while it runs (this
        attempt's steps over its time), and, once it ended, its steps over the time between
        this display first seeing it run and seeing it end (not tqdm's, which counts from
        the bar's creation for every task alike)."""
        now = time.monotonic()
        if t.state.is_active:
            self._running_since.setdefault(t.task_id, (now, t.steps_done))
            return t.steps_per_second or None
        if t.state.is_finished:
            if t.task_id not in self._final_rate:
                since = self._running_since.get(t.task_id)
                rate = None
                if since is not None and now > since[0] and t.steps_done > since[1]:
                    rate = (t.steps_done - since[1]) / (now - since[0])
                self._final_rate[t.task_id] = rate
            return self._final_rate[t.task_id]
        return None

    def _bar(self, **kwargs: Any) -> Any:
        try:
            return self._tqdm.tqdm(file=self._file, leave=self._leave, dynamic_ncols=True, **kwargs)
        except ImportError:
            # A notebook without ipywidgets: tqdm's widget cannot draw; text bars can.
            import tqdm.std

            self._tqdm = tqdm.std
            return self._tqdm.tqdm(file=self._file, leave=self._leave, dynamic_ncols=True, **kwargs)

    def _show(self, job_id: int, fraction: float, tasks: tuple[Task, ...]) -> None:
        if self._job is None:
            self._job = self._bar(total=100, desc=f"job {job_id}", unit="%", position=0,
                                  bar_format="{l_bar}{bar}| {n:.1f}/{total}% [{elapsed}<{remaining}]")
        self._job.n = round(fraction * 100, 1)
        states: Dict[str, int] = {}
        for t in tasks:
            states[t.state.value] = states.get(t.state.value, 0) + 1
        self._job.set_postfix_str(", ".join(f"{n} {s}" for s, n in sorted(states.items())), refresh=False)
        self._job.refresh()
        for i, t in enumerate(tasks):
            bar = self._tasks.get(t.task_id)
            if bar is None:
                bar = self._bar(
                    total=t.total_steps or None,
                    desc=f"  task {t.task_id} {t.plugin}/{os.path.basename(t.asset) or t.asset}",
                    unit="step",
                    position=i + 1,
                    # The task's own rate is in the postfix (tqdm puts ", " before it);
                    # tqdm's rate would be the bar's.
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}",
                )
                self._tasks[t.task_id] = bar
            bar.n = t.steps_done
            metric = self._metric or _headline(t)
            postfix = t.state.value
            if t.stopped_early:
                postfix += " (stopped early)"
            rate = self._rate(t)
            if rate is not None:
                postfix += f" {rate:.3g} step/s"
            if metric is not None and metric in t.metrics:
                postfix += f" {metric}={t.metrics[metric]:.4g}"
            bar.set_postfix_str(postfix, refresh=False)
            bar.refresh()

    def update(self, event: Event) -> None:
        if isinstance(event, Progress):
            self._show(event.job_id, event.fraction, event.tasks)
        elif isinstance(event, Finished):
            self._show(event.job.job_id, event.job.fraction, event.job.tasks)
        elif isinstance(event, LogLine) and self._show_logs:
            where = f"task {event.task_id} {event.plugin}" if event.task_id else "host"
            self._tqdm.tqdm.write(f"[{event.level}] {where}: {event.message}", file=self._file)
        elif isinstance(event, StateChanged):
            bar = self._tasks.get(event.task_id)
            if bar is not None:
                bar.set_postfix_str(event.new.value)

    def close(self) -> None:
        for bar in self._tasks.values():
            bar.close()
        if self._job is not None:
            self._job.close()
        self._tasks.clear()
        self._running_since.clear()
        self._final_rate.clear()
        self._job = None
