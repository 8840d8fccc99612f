"""Best checkpoints and early stopping, without a host: the requests ``start`` and ``resume``
build (``ModelSpec.keep_best`` / ``early_stopping``, ``ResumeTrainingRequest.more_steps``),
the rules checked before sending, and ``TaskProgress.best`` / ``stopped_early`` read back.
(Against a real host: test_host.py, ``test_early_stopping_keeps_the_best_and_resume_trains_further``.)"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, List, Tuple

import pytest

import tli_client
from tli_client import (
    BestCheckpoint,
    Client,
    Job,
    Model,
    Task,
    TemplateConfig,
    plugin_config,
    synthetic,
)
from tli_client._proto.tli.v1 import training_pb2 as pb
from tli_client.config import early_stopping_to_proto, keep_best_to_proto


class _Recorder:
    """Stands in for the TrainingService stub: keeps each request, answers a job of one task."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any]] = []

    def _job(self) -> pb.Job:
        task = pb.TaskProgress(
            task_id=1,
            plugin="behaviour",
            asset="synthetic-ar1:200:1",
            state=pb.TASK_STATE_COMPLETED,
            steps_done=80,
            total_steps=200,
            stopped_early="stopped early at step 80: valid_loss did not improve",
            best=pb.BestModel(step=50, metric="valid_loss", value=2.5),
        )
        return pb.Job(job_id=7, name="j", progress=pb.JobProgress(job_id=7, tasks=[task]))

    def StartTraining(self, request: pb.StartTrainingRequest, **_: Any) -> pb.StartTrainingResponse:
        self.calls.append(("StartTraining", request))
        return pb.StartTrainingResponse(job=self._job())

    def ResumeTraining(self, request: pb.ResumeTrainingRequest, **_: Any) -> pb.ResumeTrainingResponse:
        self.calls.append(("ResumeTraining", request))
        return pb.ResumeTrainingResponse(job=self._job(), resumed_tasks=1)


@pytest.fixture
def offline() -> Iterator[Tuple[Client, _Recorder]]:
    # Nothing listens on port 9; the channel never connects (the stub is replaced).
    with Client("127.0.0.1:9") as c:
        recorder = _Recorder()
        c._training = recorder  # type: ignore[assignment]
        yield c, recorder


def _sent(recorder: _Recorder) -> Any:
    assert recorder.calls, "nothing was sent"
    return recorder.calls[-1][1]


def test_keep_best_and_early_stopping_apply_to_every_model(offline: Tuple[Client, _Recorder]) -> None:
    client, recorder = offline
    client.start(
        [TemplateConfig(), plugin_config("behaviour", {"valid_every": 10})],
        synthetic(200),
        steps=100,
        keep_best={"metric": "valid_loss", "mode": "min", "k": 2},
        early_stopping={"metric": "valid_loss", "patience": 5, "min_delta": 0.001, "mode": "MIN"},
    )
    request = _sent(recorder)
    assert len(request.models) == 2
    for spec in request.models:
        assert (spec.keep_best.metric, spec.keep_best.mode, spec.keep_best.k) == ("valid_loss", "min", 2)
        e = spec.early_stopping
        assert (e.metric, e.mode, e.patience, e.min_delta) == ("valid_loss", "min", 5, 0.001)


def test_without_rules_nothing_is_set(offline: Tuple[Client, _Recorder]) -> None:
    client, recorder = offline
    client.start(TemplateConfig(), synthetic(200), steps=10)
    spec = _sent(recorder).models[0]
    assert not spec.HasField("keep_best") and not spec.HasField("early_stopping")


def test_a_plain_string_is_the_keep_best_metric_and_defaults_are_left_to_the_host(
    offline: Tuple[Client, _Recorder],
) -> None:
    client, recorder = offline
    client.start(TemplateConfig(), synthetic(200), steps=10, keep_best="valid_sharpe",
                 early_stopping={"metric": "valid_loss", "patience": 3})
    spec = _sent(recorder).models[0]
    # mode "" = by the metric's name; k 0 = 1; min_delta 0.
    assert (spec.keep_best.metric, spec.keep_best.mode, spec.keep_best.k) == ("valid_sharpe", "", 0)
    e = spec.early_stopping
    assert (e.metric, e.mode, e.patience, e.min_delta) == ("valid_loss", "", 3, 0.0)


def test_a_models_own_rules_replace_the_jobs(offline: Tuple[Client, _Recorder]) -> None:
    client, recorder = offline
    client.start(
        [
            TemplateConfig(),
            Model(TemplateConfig(), keep_best={"metric": "valid_mse", "k": 3}),
            Model(TemplateConfig(), early_stopping={"metric": "valid_mse", "patience": 9, "mode": "max"}),
        ],
        synthetic(200),
        steps=10,
        keep_best="valid_loss",
        early_stopping={"metric": "valid_loss", "patience": 2},
    )
    plain, own_keep, own_stop = _sent(recorder).models
    assert (plain.keep_best.metric, plain.early_stopping.patience) == ("valid_loss", 2)
    assert (own_keep.keep_best.metric, own_keep.keep_best.k) == ("valid_mse", 3)
    assert own_keep.early_stopping.metric == "valid_loss"  # the job's, not replaced
    assert own_stop.keep_best.metric == "valid_loss"
    assert (own_stop.early_stopping.metric, own_stop.early_stopping.mode) == ("valid_mse", "max")
    assert own_stop.early_stopping.patience == 9
    # And straight from a Model, without a job.
    spec = Model(TemplateConfig(), keep_best="valid_loss").to_proto(5)
    assert spec.keep_best.metric == "valid_loss" and not spec.HasField("early_stopping")


@pytest.mark.parametrize(
    ("keep_best", "message"),
    [
        ({"k": 2}, r"keep_best\.metric: give the name of a validation metric"),
        ({"metric": "  "}, r"keep_best\.metric"),
        ("", r"keep_best\.metric"),
        ({"metric": "valid_loss", "k": 0}, r"keep_best\.k: 0 is less than 1"),
        ({"metric": "valid_loss", "k": -1}, r"keep_best\.k: -1 is less than 1"),
        ({"metric": "valid_loss", "k": 1.5}, r"keep_best\.k: expected a whole number"),
        ({"metric": "valid_loss", "k": True}, r"keep_best\.k: expected a whole number"),
        ({"metric": "valid_loss", "mode": "up"}, r"keep_best\.mode: 'up' is not 'min'"),
        ({"metric": "valid_loss", "kk": 2}, r"keep_best: unknown key 'kk'; its keys are metric, mode, k"),
        ({"metric": "valid_loss", "patience": 2}, r"keep_best: unknown key 'patience'"),
    ],
)
def test_bad_keep_best_is_refused_before_sending(
    offline: Tuple[Client, _Recorder], keep_best: Any, message: str
) -> None:
    client, recorder = offline
    with pytest.raises(ValueError, match=message):
        client.start(TemplateConfig(), synthetic(200), steps=10, keep_best=keep_best)
    assert recorder.calls == []


@pytest.mark.parametrize(
    ("early_stopping", "message"),
    [
        ({"patience": 3}, r"early_stopping\.metric: give the name of a validation metric"),
        ({"metric": "valid_loss"}, r"early_stopping\.patience: missing"),
        ({"metric": "valid_loss", "patience": 0}, r"early_stopping\.patience: 0 is less than 1"),
        ({"metric": "valid_loss", "patience": "5"}, r"early_stopping\.patience: expected a whole number"),
        ({"metric": "valid_loss", "patience": 3, "min_delta": -0.1},
         r"early_stopping\.min_delta: -0\.1 must be a finite number ≥ 0"),
        ({"metric": "valid_loss", "patience": 3, "min_delta": float("nan")},
         r"early_stopping\.min_delta: nan must be a finite number"),
        ({"metric": "valid_loss", "patience": 3, "min_delta": "0"},
         r"early_stopping\.min_delta: expected a number"),
        ({"metric": "valid_loss", "patience": 3, "mode": "lower"}, r"early_stopping\.mode: 'lower' is not 'min'"),
        ({"metric": "valid_loss", "patience": 3, "k": 2},
         r"early_stopping: unknown key 'k'; its keys are metric, mode, patience, min_delta"),
        ("valid_loss", r"early_stopping: give a mapping with the metric and the patience"),
    ],
)
def test_bad_early_stopping_is_refused_before_sending(
    offline: Tuple[Client, _Recorder], early_stopping: Any, message: str
) -> None:
    client, recorder = offline
    with pytest.raises(ValueError, match=message):
        client.start(TemplateConfig(), synthetic(200), steps=10, early_stopping=early_stopping)
    assert recorder.calls == []


def test_a_rule_that_is_not_a_mapping_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="keep_best: expected a mapping"):
        keep_best_to_proto(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="early_stopping: expected a mapping"):
        early_stopping_to_proto(["valid_loss", 3])  # type: ignore[arg-type]


def test_a_bad_rule_of_one_model_names_the_model(offline: Tuple[Client, _Recorder]) -> None:
    client, recorder = offline
    with pytest.raises(ValueError, match=r"^models\[1\]\.early_stopping\.patience: 0 is less than 1"):
        client.start(
            [TemplateConfig(), Model(TemplateConfig(), early_stopping={"metric": "valid_loss", "patience": 0})],
            synthetic(200),
            steps=10,
        )
    with pytest.raises(ValueError, match=r"^models\[0\]\.keep_best\.k"):
        client.start([Model(TemplateConfig(), keep_best={"metric": "valid_loss", "k": 0})], synthetic(200), steps=1)
    assert recorder.calls == []


def test_resume_sends_more_steps(offline: Tuple[Client, _Recorder]) -> None:
    client, recorder = offline
    resumed = client.resume(7)
    assert _sent(recorder).job_id == 7 and _sent(recorder).more_steps == 0
    assert resumed.resumed_tasks == 1 and resumed.job.job_id == 7
    client.resume(7, steps=30)
    assert _sent(recorder).more_steps == 30
    # Through the Job too.
    resumed.job.resume(steps=5)
    assert (_sent(recorder).job_id, _sent(recorder).more_steps) == (7, 5)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="steps: .*whole number ≥ 1"):
            client.resume(7, steps=bad)  # type: ignore[arg-type]
    assert len(recorder.calls) == 3


def test_best_and_stopped_early_are_read_from_the_task(offline: Tuple[Client, _Recorder]) -> None:
    client, _ = offline
    job = client.start(plugin_config("behaviour"), synthetic(200), steps=200)
    task = job.tasks[0]
    assert task.best == BestCheckpoint(step=50, metric="valid_loss", value=2.5)
    assert task.stopped_early is not None and task.stopped_early.startswith("stopped early at step 80")
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.best.step = 1  # type: ignore[misc]
    # A task without them (and an older host, which never sets them): None, not "" or a zero best.
    plain = Task.from_proto(pb.TaskProgress(task_id=2, state=pb.TASK_STATE_RUNNING))
    assert plain.best is None and plain.stopped_early is None
    assert "BestCheckpoint" in tli_client.__all__


def test_the_task_table_has_the_best_checkpoint_and_why_it_stopped() -> None:
    pd = pytest.importorskip("pandas")
    stopped = pb.TaskProgress(
        task_id=1, plugin="behaviour", state=pb.TASK_STATE_COMPLETED, steps_done=80, total_steps=200,
        stopped_early="stopped early at step 80: …", best=pb.BestModel(step=50, metric="valid_loss", value=2.5),
        metrics=[pb.Metric(name="valid_loss", value=2.8)],
    )
    plain = pb.TaskProgress(task_id=2, plugin="template", state=pb.TASK_STATE_COMPLETED)
    job = Job.from_proto(pb.Job(job_id=3, progress=pb.JobProgress(job_id=3, tasks=[stopped, plain])))
    table = job.to_pandas()
    assert table.loc[1, "stopped_early"] == "stopped early at step 80: …"
    assert (table.loc[1, "best_step"], table.loc[1, "best_metric"], table.loc[1, "best_value"]) == (
        50, "valid_loss", 2.5)
    assert table.loc[1, "valid_loss"] == 2.8
    # A task without them: missing (NaN), as any metric a task did not report.
    assert pd.isna(table.loc[2, "stopped_early"]) and pd.isna(table.loc[2, "best_step"])
    assert pd.isna(table.loc[2, "best_metric"]) and pd.isna(table.loc[2, "best_value"])
