"""Hyperparameter sweeps: ``Client.sweep`` and ``Client.sweep_results``.

Without a host: a gRPC server in this process stands in for the TrainingService (it keeps each
request and answers with canned replies), so the exact ``StartTrainingRequest.sweep`` fields,
the checks made before sending, the watch to the end, the ``GetSweep`` table read back (typed
and as a DataFrame) and the error codes are pinned. Against a real host (the ``client``
fixture): ``test_sweep_with_asha_returns_a_results_dataframe``, the scripted ASHA sweep of
tests/tests/e2e/sweeps.rs through the Python client.
"""

from __future__ import annotations

import dataclasses
import json
import math
from concurrent import futures
from typing import Any, Dict, Iterator, List, Optional, Tuple

import grpc
import pytest

import tli_client
from tli_client import (
    BestCheckpoint,
    Client,
    FailedPrecondition,
    InvalidArgument,
    Job,
    NotFound,
    SweepResults,
    SweepTrial,
    TaskState,
    plugin_config,
    synthetic,
)
from tli_client._proto.tli.v1 import training_pb2 as pb
from tli_client._proto.tli.v1 import training_pb2_grpc as pb_grpc
from tli_client.sweeps import space_to_proto, sweep_to_proto

# The scripted sweep of tests/tests/e2e/sweeps.rs: trial i's valid_loss at its k-th validation
# (every 10 steps) is CURVES[i][k-1], the last value repeating. With η = 3 and rungs 10, 30, 90,
# ASHA stops trials 2, 4, 6, 7, 8 at step 10 and 1, 5 at step 30; trials 0 and 3 reach 90, and 3
# is best with 0.5.
CURVES: List[List[float]] = [[5, 6], [3, 9], [8], [1, 0.5], [7], [2, 7], [9], [4], [6]]
STEPS = [90, 30, 10, 90, 10, 30, 10, 10, 10]
RUNGS = [10, 30, 90]
ASSET = "synthetic-ar1:200:1"


def _value_at(curve: List[float], step: int) -> float:
    return float(curve[min(step // 10, len(curve)) - 1])


def _scripted_table(job_id: int = 7) -> pb.GetSweepResponse:
    """The table a host answers for the scripted sweep, worked out by hand."""
    trials = []
    for i, (curve, steps) in enumerate(zip(CURVES, STEPS)):
        reached = [g for g in RUNGS if g <= steps]
        trial = pb.SweepTrial(
            trial=i,
            task_id=100 + i,
            asset=ASSET,
            params_json=json.dumps({"valid_curve": curve}),
            steps_done=steps,
            rung_values=[pb.RungValue(step=g, value=_value_at(curve, g)) for g in reached],
            final_value=_value_at(curve, reached[-1]),
            state=pb.TASK_STATE_COMPLETED,
            status="completed" if steps == 90 else f"stopped at rung {steps}",
            best=i == 3,
        )
        if i == 3:
            trial.best_checkpoint.CopyFrom(pb.BestModel(step=20, metric="valid_loss", value=0.5))
        trials.append(trial)
    sweep_json = {
        "plugin": "behaviour",
        "config": {"valid_every": 10},
        "space": {"valid_curve": {"grid": CURVES}},
        "samples": 1,
        "seed": 1,
        "metric": "valid_loss",
        "scheduler": {"asha": {"grace_period": 10, "reduction_factor": 3, "max_steps": 90}},
    }
    return pb.GetSweepResponse(
        job_id=job_id,
        plugin="behaviour",
        metric="valid_loss",
        mode="min",
        scheduler="asha",
        rungs=RUNGS,
        trials=trials,
        steps_trained=sum(STEPS),
        steps_if_run_all=90 * len(STEPS),
        sweep_json=json.dumps(sweep_json),
    )


def _job(job_id: int, state: int = pb.TASK_STATE_QUEUED) -> pb.Job:
    tasks = [
        pb.TaskProgress(task_id=100 + i, plugin="behaviour", asset=ASSET, state=state, total_steps=90)
        for i in range(len(CURVES))
    ]
    return pb.Job(job_id=job_id, name="sweep", progress=pb.JobProgress(job_id=job_id, tasks=tasks))


class _FakeTraining(pb_grpc.TrainingServiceServicer):
    """Keeps each request; job 7 is a finished sweep, job 8 a job that is not one, job 9 a
    sweep that has just started; every other job is unknown."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any]] = []

    def StartTraining(self, request: pb.StartTrainingRequest, context: Any) -> pb.StartTrainingResponse:
        self.calls.append(("StartTraining", request))
        if "valid_curv" in request.sweep.space:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "sweep: space.valid_curv: the plugin's config has no such key (did you mean "
                "valid_curve?)",
            )
        return pb.StartTrainingResponse(job=_job(7))

    def WatchTraining(self, request: pb.WatchTrainingRequest, context: Any) -> Iterator[pb.WatchTrainingResponse]:
        self.calls.append(("WatchTraining", request))
        yield pb.WatchTrainingResponse(progress=_job(request.job_id, pb.TASK_STATE_RUNNING).progress)
        yield pb.WatchTrainingResponse(finished=_job(request.job_id, pb.TASK_STATE_COMPLETED))

    def GetSweep(self, request: pb.GetSweepRequest, context: Any) -> pb.GetSweepResponse:
        self.calls.append(("GetSweep", request))
        job = request.job_id
        if job == 7:
            return _scripted_table(7)
        if job == 8:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "job 8 is not a sweep; `tli train status 8` shows its tasks",
            )
        if job == 9:
            started = pb.SweepTrial(
                trial=0, task_id=200, asset=ASSET, params_json='{"valid_curve":[5,6]}',
                state=pb.TASK_STATE_RUNNING, status="running",
            )
            return pb.GetSweepResponse(
                job_id=9, plugin="behaviour", metric="valid_loss", mode="min", scheduler="asha",
                rungs=RUNGS, trials=[started], steps_if_run_all=90,
            )
        context.abort(grpc.StatusCode.NOT_FOUND, f"job {job} not found")
        raise AssertionError("unreachable")  # abort raises


@pytest.fixture
def fake() -> Iterator[Tuple[Client, _FakeTraining]]:
    servicer = _FakeTraining()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_TrainingServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(f"127.0.0.1:{port}", timeout=10.0) as client:
            yield client, servicer
    finally:
        server.stop(grace=None)


def _sent(servicer: _FakeTraining, method: str = "StartTraining") -> Any:
    sent = [request for name, request in servicer.calls if name == method]
    assert sent, f"no {method} was sent: {servicer.calls}"
    return sent[-1]


# Requests.


def test_the_request_carries_the_sweep_and_no_models(fake: Tuple[Client, _FakeTraining]) -> None:
    client, servicer = fake
    job = client.sweep(
        "behaviour",
        synthetic(200),
        {
            "valid_curve": {"grid": CURVES},
            "optimizer": {"choice": ["adamw", "sgd", None, True, {"beta": 0.9}]},
            "learning_rate": {"log_uniform": [1e-4, 1e-2]},
            "dropout": {"uniform": [0, 0.5]},
            "trading.window": {"int": [8, 64]},
        },
        config={"valid_every": 10},
        max_steps=90,
        grace_period=10,
        wait=False,
    )
    assert isinstance(job, Job) and job.job_id == 7 and len(job.tasks) == 9
    assert [name for name, _ in servicer.calls] == ["StartTraining"]  # no watch without wait
    request = _sent(servicer)
    # The job: a sweep's trials are its models, so neither model nor models is set.
    assert not request.HasField("model") and len(request.models) == 0
    assert (request.name, request.seed, request.device, request.slice_steps) == ("sweep", 1, "", 0)
    assert [a.synthetic.rows for a in request.assets] == [200]
    assert not request.HasField("walk_forward") and not request.HasField("checkpoint")

    s = request.sweep
    assert (s.plugin, s.config_json, s.samples, s.seed) == ("behaviour", '{"valid_every": 10}', 1, 1)
    assert (s.metric, s.mode, s.pooled, s.keep_last) == ("valid_loss", "", False, False)
    assert s.WhichOneof("scheduler") == "asha"
    assert (s.asha.grace_period, s.asha.reduction_factor, s.asha.max_steps) == (10, 3, 90)
    assert sorted(s.space) == ["dropout", "learning_rate", "optimizer", "trading.window", "valid_curve"]
    # Each value as JSON text.
    grid = s.space["valid_curve"]
    assert grid.WhichOneof("kind") == "grid"
    assert list(grid.grid.json) == ["[5,6]", "[3,9]", "[8]", "[1,0.5]", "[7]", "[2,7]", "[9]", "[4]", "[6]"]
    choice = s.space["optimizer"]
    assert choice.WhichOneof("kind") == "choice"
    assert list(choice.choice.json) == ['"adamw"', '"sgd"', "null", "true", '{"beta":0.9}']
    lr = s.space["learning_rate"]
    assert lr.WhichOneof("kind") == "log_uniform" and (lr.log_uniform.low, lr.log_uniform.high) == (1e-4, 1e-2)
    dropout = s.space["dropout"]
    assert dropout.WhichOneof("kind") == "uniform" and (dropout.uniform.low, dropout.uniform.high) == (0.0, 0.5)
    window = s.space["trading.window"]
    assert window.WhichOneof("kind") == "int" and (window.int.low, window.int.high) == (8, 64)


def test_run_all_seeds_modes_and_the_job_options(fake: Tuple[Client, _FakeTraining]) -> None:
    client, servicer = fake
    client.sweep(
        "template",
        ["synthetic:300:5", synthetic(300, seed=6)],
        {"hidden_sizes": {"choice": [[8], (16, 16)]}},
        metric="valid_sharpe",
        mode="MAX",
        scheduler="run_all",
        max_steps=500,
        samples=4,
        seed=42,
        sample_seed=7,
        pooled=True,
        keep_best=False,
        name="hs",
        device="cuda:0",
        slice_steps=25,
        checkpoint=tli_client.CheckpointPolicy(every_steps=100, keep=2),
        features={"valid_start": "2014-01-02"},
        executor="local",
        wait=False,
    )
    request = _sent(servicer)
    assert (request.name, request.seed, request.device, request.slice_steps) == ("hs", 42, "cuda:0", 25)
    assert [(a.synthetic.rows, a.synthetic.seed) for a in request.assets] == [(300, 5), (300, 6)]
    assert (request.checkpoint.every_steps, request.checkpoint.keep) == (100, 2)
    assert json.loads(request.features_json) == {"valid_start": "2014-01-02"}
    assert request.executor == pb.EXECUTOR_LOCAL
    s = request.sweep
    # The job seed seeds the tasks; sample_seed (default: seed) the trials' draws.
    assert (s.seed, s.samples, s.config_json) == (7, 4, "")
    assert (s.metric, s.mode, s.pooled, s.keep_last) == ("valid_sharpe", "max", True, True)
    assert s.WhichOneof("scheduler") == "run_all" and s.run_all.max_steps == 500
    assert list(s.space["hidden_sizes"].choice.json) == ["[8]", "[16,16]"]

    # Without sample_seed the draws take the job's seed; an empty config is the plugin's defaults.
    client.sweep("template", synthetic(300), {"x": {"int": [1, 2]}}, max_steps=9,
                 grace_period=3, reduction_factor=2, seed=11, config={}, wait=False)
    s = _sent(servicer).sweep
    assert (s.seed, s.config_json, s.asha.reduction_factor) == (11, "", 2)


def test_numpy_values_are_sent_as_plain_json() -> None:
    np = pytest.importorskip("numpy")
    space = space_to_proto({
        "a": {"grid": [np.float64(0.25), np.int64(3), np.array([1, 2])]},
        "b": {"uniform": [np.float32(0.5), np.float64(1.5)]},
        "c": {"int": [np.int32(1), np.int64(4)]},
    })
    assert list(space["a"].grid.json) == ["0.25", "3", "[1,2]"]
    assert (space["b"].uniform.low, space["b"].uniform.high) == (0.5, 1.5)
    assert (space["c"].int.low, space["c"].int.high) == (1, 4)


ASHA: Dict[str, Any] = {"max_steps": 90, "grace_period": 10}


@pytest.mark.parametrize(
    ("space", "kwargs", "message"),
    [
        ({}, ASHA, r"^space: empty; give at least one config key"),
        ({"lr": {"normal": [0, 1]}}, ASHA,
         r"^space\.lr: unknown dimension kind 'normal'; give one of choice, grid, uniform, log_uniform, int"),
        ({"lr": {"uniform": [0, 1], "int": [0, 1]}}, ASHA, r"^space\.lr: give exactly one kind of dimension"),
        ({"lr": {}}, ASHA, r"^space\.lr: give exactly one kind"),
        ({"lr": [0.1, 0.2]}, ASHA, r"^space\.lr: expected one of"),
        ({"opt": {"choice": []}}, ASHA, r"^space\.opt\.choice: an empty list of values; give at least one"),
        ({"opt": {"grid": []}}, ASHA, r"^space\.opt\.grid: an empty list of values"),
        ({"opt": {"grid": "adamw"}}, ASHA, r"^space\.opt\.grid: expected a list of values"),
        ({"opt": {"choice": [1.0, math.nan]}}, ASHA, r"^space\.opt\.choice\[1\]: nan is not a JSON value"),
        ({"opt": {"choice": [object()]}}, ASHA, r"^space\.opt\.choice\[0\]: .* is not a JSON value"),
        ({"lr": {"uniform": [1, 0]}}, ASHA, r"^space\.lr\.uniform: \[1\.0, 0\.0\] is not a range: give \[low, high\]"),
        ({"lr": {"uniform": [0, math.inf]}}, ASHA, r"^space\.lr\.uniform: \[0\.0, inf\] is not a range"),
        ({"lr": {"uniform": [0, 1, 2]}}, ASHA, r"^space\.lr\.uniform: expected \[low, high\]"),
        ({"lr": {"uniform": ["0", 1]}}, ASHA, r"^space\.lr\.uniform: \['0', 1\]: low and high must be numbers"),
        ({"lr": {"log_uniform": [0, 1]}}, ASHA, r"^space\.lr\.log_uniform: log_uniform needs low > 0 \(got 0\.0\)"),
        ({"n": {"int": [3, 1]}}, ASHA, r"^space\.n\.int: \[3, 1\] is not a range: give \[low, high\] with low ≤ high"),
        ({"n": {"int": [1, 2.5]}}, ASHA, r"^space\.n\.int: \[1, 2\.5\]: low and high must be whole numbers"),
        ({"n": {"int": [True, 2]}}, ASHA, r"^space\.n\.int: .*whole numbers"),
        ({"n": {"int": [0, 2**63]}}, ASHA, r"^space\.n\.int: .* is outside the 64-bit integers"),
        ({"": {"int": [0, 1]}}, ASHA, r"^space: '' is not a config key"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, metric="train_loss"),
         r"^metric: 'train_loss' is not a validation metric \(valid_\*\)"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, mode="lower"), r"^mode: 'lower' is not 'min'"),
        ({"lr": {"uniform": [0, 1]}}, {"max_steps": 90}, r"^grace_period: missing; give ASHA's first rung"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, grace_period=0), r"^grace_period: 0 is outside 1\.\.=90"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, grace_period=100), r"^grace_period: 100 is outside 1\.\.=90"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, reduction_factor=1),
         r"^reduction_factor: 1 must be at least 2"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, reduction_factor=0), r"^reduction_factor: 0 must be at least 2"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, reduction_factor=2.5), r"^reduction_factor: expected a whole number"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, max_steps=0), r"^max_steps: 0 is outside 1\.\.=1000000000"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, samples=0), r"^samples: 0 is outside 1\.\."),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, seed=-1), r"^seed: -1 is outside 0\.\."),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, scheduler="hyperband"),
         r"^scheduler: 'hyperband': expected 'asha' or 'run_all'"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, scheduler="run_all"), r"^grace_period: ASHA's only"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, config=[1]), r"^config: expected a mapping"),
        ({"lr": {"uniform": [0, 1]}}, dict(ASHA, config={"x": math.inf}), r"^config: .*JSON has no NaN"),
    ],
)
def test_bad_sweeps_are_refused_before_sending(
    fake: Tuple[Client, _FakeTraining], space: Any, kwargs: Dict[str, Any], message: str
) -> None:
    client, servicer = fake
    with pytest.raises(ValueError, match=message):
        client.sweep("behaviour", synthetic(200), space, wait=False, **kwargs)
    assert servicer.calls == []


def test_a_space_that_is_not_a_mapping_and_a_missing_plugin() -> None:
    with pytest.raises(TypeError, match="space: expected a mapping"):
        space_to_proto([("lr", {"uniform": [0, 1]})])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^plugin: name the plugin"):
        sweep_to_proto(" ", {"lr": {"uniform": [0, 1]}}, max_steps=9, scheduler="run_all")


# Results.


def test_wait_watches_to_the_end_then_reads_the_table(fake: Tuple[Client, _FakeTraining]) -> None:
    client, servicer = fake
    results = client.sweep(
        "behaviour", synthetic(200), {"valid_curve": {"grid": CURVES}},
        config={"valid_every": 10}, max_steps=90, grace_period=10, interval_ms=50,
    )
    assert [name for name, _ in servicer.calls] == ["StartTraining", "WatchTraining", "GetSweep"]
    assert _sent(servicer, "WatchTraining").interval_ms == 50
    assert _sent(servicer, "GetSweep").job_id == 7
    assert isinstance(results, SweepResults)
    assert results == client.sweep_results(7)

    assert (results.job_id, results.plugin, results.metric, results.mode, results.scheduler) == (
        7, "behaviour", "valid_loss", "min", "asha")
    assert results.rungs == (10, 30, 90)
    assert (results.steps_trained, results.steps_if_run_all) == (290, 810)
    assert [t.steps_done for t in results.trials] == STEPS
    assert [t.trial for t in results.best] == [3]
    best = results.best[0]
    assert best == results.trial(3) and best.task_id == 103 and best.asset == ASSET
    assert best.params == {"valid_curve": [1, 0.5]}
    assert best.rung_values == {10: 1.0, 30: 0.5, 90: 0.5}
    assert best.final_value == 0.5 and best.state is TaskState.COMPLETED and best.status == "completed"
    assert best.best_checkpoint == BestCheckpoint(step=20, metric="valid_loss", value=0.5)
    assert results.trial(1).status == "stopped at rung 30" and results.trial(1).final_value == 9.0
    assert results.trial(2).rung_values == {10: 8.0} and results.trial(2).best_checkpoint is None
    assert results.param_names == ("valid_curve",)
    assert results.spec["scheduler"]["asha"]["grace_period"] == 10
    with pytest.raises(KeyError, match="sweep job 7 has no trial 9"):
        results.trial(9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        results.trials[0].best = True  # type: ignore[misc]
    # The same through the Job.
    job = client.sweep("behaviour", synthetic(200), {"valid_curve": {"grid": CURVES}},
                       max_steps=90, grace_period=10, wait=False)
    assert job.sweep_results() == results


def test_a_sweep_just_started_reads_without_values() -> None:
    trial = SweepTrial.from_proto(pb.SweepTrial(trial=0, task_id=5, state=pb.TASK_STATE_QUEUED, status="queued"))
    assert (trial.final_value, trial.best_checkpoint, trial.rung_values, trial.params) == (None, None, {}, {})
    assert trial.state is TaskState.QUEUED and not trial.best
    empty = SweepResults.from_proto(pb.GetSweepResponse(job_id=3, rungs=[10, 90]))
    assert empty.trials == () and empty.best == () and empty.spec == {}


def test_the_table_as_a_dataframe(fake: Tuple[Client, _FakeTraining]) -> None:
    pd = pytest.importorskip("pandas")
    client, _ = fake
    results = client.sweep_results(7)
    frame = results.to_pandas()
    assert list(frame.columns) == [
        "trial", "task_id", "asset", "param.valid_curve", "steps_done",
        "@10", "@30", "@90", "final_value", "status", "best",
    ]
    assert len(frame) == 9 and frame["trial"].tolist() == list(range(9))
    assert frame["steps_done"].tolist() == STEPS
    assert frame["task_id"].tolist() == [100 + i for i in range(9)]
    assert frame["param.valid_curve"].tolist() == CURVES
    assert frame["@10"].tolist() == [5.0, 3.0, 8.0, 1.0, 7.0, 2.0, 9.0, 4.0, 6.0]
    assert frame["@30"].isna().tolist() == [s < 30 for s in STEPS]
    assert frame.loc[frame["best"], "trial"].tolist() == [3]
    assert frame.loc[3, "final_value"] == 0.5 and frame.loc[3, "@90"] == 0.5
    assert frame.loc[1, "status"] == "stopped at rung 30"
    assert str(frame["best"].dtype) == "bool" and str(frame["steps_done"].dtype) == "int64"
    assert all(str(frame[c].dtype) == "float64" for c in ["@10", "@30", "@90", "final_value"])
    assert frame.attrs == {
        "job_id": 7, "plugin": "behaviour", "metric": "valid_loss", "mode": "min",
        "scheduler": "asha", "rungs": [10, 30, 90], "steps_trained": 290, "steps_if_run_all": 810,
    }
    # The name pandas users reach for is the same table.
    pd.testing.assert_frame_equal(results.to_dataframe(), frame)

    # Before any rung: NaN values; a table without trials still has its columns.
    started = client.sweep_results(9).to_pandas()
    assert math.isnan(started.loc[0, "final_value"]) and started.loc[0, "status"] == "running"
    assert started[["@10", "@30", "@90"]].isna().all(axis=None)
    empty = SweepResults.from_proto(pb.GetSweepResponse(job_id=3, rungs=[10, 90])).to_pandas()
    assert list(empty.columns) == ["trial", "task_id", "asset", "steps_done", "@10", "@90",
                                   "final_value", "status", "best"] and len(empty) == 0


def test_errors_map_to_the_codes_the_host_sent(fake: Tuple[Client, _FakeTraining]) -> None:
    client, _ = fake
    with pytest.raises(NotFound) as missing:
        client.sweep_results(404)
    assert missing.value.method == "GetSweep" and missing.value.message == "job 404 not found"
    with pytest.raises(FailedPrecondition, match="job 8 is not a sweep") as plain:
        client.sweep_results(8)
    assert plain.value.code is grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(InvalidArgument, match="did you mean valid_curve") as key:
        client.sweep("behaviour", synthetic(200), {"valid_curv": {"grid": [[1]]}}, max_steps=90, grace_period=10)
    assert key.value.method == "StartTraining"
    with pytest.raises(TypeError, match="a job is a Job or a job id"):
        client.sweep_results("7")  # type: ignore[arg-type]


def test_the_sweep_types_are_exported() -> None:
    for name in ("SweepResults", "SweepTrial", "SearchSpace"):
        assert name in tli_client.__all__ and hasattr(tli_client, name)


# Against a real host.


def test_sweep_with_asha_returns_a_results_dataframe(client: Client) -> None:
    results = client.sweep(
        "behaviour",
        synthetic(200),
        {"valid_curve": {"grid": CURVES}},
        config={"valid_every": 10},
        scheduler="asha",
        grace_period=10,
        reduction_factor=3,
        max_steps=90,
        name="py-asha",
        interval_ms=100,
        timeout=300,
    )
    assert (results.plugin, results.metric, results.mode, results.scheduler) == (
        "behaviour", "valid_loss", "min", "asha")
    assert results.rungs == (10, 30, 90)
    assert [t.steps_done for t in results.trials] == STEPS, results.trials
    assert all(t.state is TaskState.COMPLETED for t in results.trials), results.trials
    assert [t.status for t in results.trials] == [
        "completed" if s == 90 else f"stopped at rung {s}" for s in STEPS
    ]
    assert (results.steps_trained, results.steps_if_run_all) == (290, 810)
    assert [t.trial for t in results.best] == [3]
    best = results.best[0]
    assert best.params == {"valid_curve": [1, 0.5]} and best.final_value == 0.5
    assert best.rung_values == {10: 1.0, 30: 0.5, 90: 0.5}
    assert best.best_checkpoint is not None and best.best_checkpoint.value == 0.5
    assert best.best_checkpoint.metric == "valid_loss"
    # Its model is that task's: the job's tasks are the trials.
    job = client.status(results.job_id)
    assert [t.task_id for t in job.tasks] == [t.task_id for t in results.trials]
    assert job.sweep_results() == results

    frame = results.to_pandas()
    assert list(frame.columns) == [
        "trial", "task_id", "asset", "param.valid_curve", "steps_done",
        "@10", "@30", "@90", "final_value", "status", "best",
    ]
    assert frame["steps_done"].tolist() == STEPS
    assert frame["param.valid_curve"].tolist() == CURVES
    assert frame["@10"].tolist() == [float(c[0]) for c in CURVES]
    assert frame.loc[frame["best"], "trial"].tolist() == [3]
    assert frame.loc[frame["best"], "final_value"].tolist() == [0.5]
    assert frame.attrs["steps_trained"] == 290 and frame.attrs["steps_if_run_all"] == 810

    # A key the plugin's config does not have: refused by the host, nothing stored.
    with pytest.raises(InvalidArgument) as bad:
        client.sweep("behaviour", synthetic(200), {"valid_curv": {"grid": [[1]]}},
                     config={"valid_every": 10}, max_steps=90, grace_period=10)
    assert "did you mean valid_curve" in bad.value.message, bad.value.message
    # A job that is not a sweep has no table; no job, no table.
    plain = client.start(plugin_config("behaviour"), synthetic(100, seed=77), steps=1)
    with pytest.raises(FailedPrecondition, match="is not a sweep"):
        client.sweep_results(plain)
    with pytest.raises(NotFound):
        client.sweep_results(987654)
    client.wait(plain, timeout=120)
