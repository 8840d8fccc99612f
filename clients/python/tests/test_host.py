"""The client against a real host (loopback, no token; template and behaviour plugins):
plugins and resources, a 2 x 2 job watched to `finished`, listing over several pages, stop and
resume, and bad requests raising the exception of the right gRPC code."""

from __future__ import annotations

import io
import time
from typing import Callable, List

import grpc
import pytest

from tli_client import (
    Client,
    Finished,
    InvalidArgument,
    Job,
    LogLine,
    Model,
    NotFound,
    Progress,
    StateChanged,
    TaskState,
    TemplateConfig,
    TliError,
    TqdmDisplay,
    Unavailable,
    plugin_config,
    synthetic,
)


def poll(client: Client, job: Job, what: str, done: Callable[[Job], bool], seconds: float = 120) -> Job:
    deadline = time.monotonic() + seconds
    while True:
        now = client.status(job)
        if done(now):
            return now
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {now}"
        time.sleep(0.05)


def test_plugins_and_resources(client: Client) -> None:
    plugins = client.plugins()
    assert sorted(plugins.names) == ["behaviour", "template"]
    template = plugins["template"]
    assert "template" in plugins and template.version and template.api_version
    assert isinstance(template.default_config, dict) and "hidden_sizes" in template.default_config
    assert isinstance(template.config_schema, dict)
    with pytest.raises(KeyError, match="no plugin 'dqn'"):
        plugins["dqn"]
    assert plugins[f"template@{template.version}"] == template
    assert len(template.checksum) == 64 and template.loaded_unix_ms > 0
    # Nothing was added to the plugin directory: a rescan loads nothing and refuses nothing.
    rescan = client.rescan_plugins()
    assert (rescan.loaded, rescan.refused, rescan.unchanged) == ((), (), 2)
    devices = client.resources()
    cpu = next(d for d in devices if d.name == "cpu")
    assert cpu.budget_bytes > 0 and cpu.strategy


def test_a_two_by_two_job_watched_to_finished(client: Client) -> None:
    job = client.start(
        name="two-by-two",
        models=[
            TemplateConfig(hidden_sizes=[8]),
            Model(plugin_config("behaviour", {"log_every": 25, "sleep_ms_per_step": 1}), steps=50),
        ],
        assets=[synthetic(400, seed=11), "synthetic:400:12"],
        steps=80,
    )
    assert len(job.tasks) == 4
    assert [(t.plugin, t.total_steps) for t in job.tasks] == [
        ("template", 80), ("template", 80), ("behaviour", 50), ("behaviour", 50)
    ]
    # Each task records the plugin version it runs on, and that library's SHA-256.
    assert {t.plugin_version for t in job.tasks if t.plugin == "behaviour"} == {"0.1.0"}
    assert all(len(t.plugin_checksum) == 64 for t in job.tasks)
    shown = io.StringIO()
    events = list(client.watch(job, interval_ms=50, progress=TqdmDisplay(file=shown)))
    assert isinstance(events[-1], Finished), events[-3:]
    assert not any(isinstance(e, Finished) for e in events[:-1])
    assert any(isinstance(e, Progress) for e in events)
    logs = [e for e in events if isinstance(e, LogLine)]
    assert any("reached step 25" in line.message and line.plugin == "behaviour" for line in logs), logs
    # Every task's state changes, in order, end in completed.
    for task in job.tasks:
        # (A watcher that fell behind re-reads the changes so far: the same change again.)
        changes = list(
            dict.fromkeys(e for e in events if isinstance(e, StateChanged) and e.task_id == task.task_id)
        )
        assert changes and changes[-1].new is TaskState.COMPLETED, changes
        assert all(a.new is b.old for a, b in zip(changes, changes[1:])), changes

    final = events[-1].job
    assert final.job_id == job.job_id and final.is_completed and final.fraction == pytest.approx(1.0)
    assert final.states == {TaskState.COMPLETED: 4}
    template_tasks = [t for t in final.tasks if t.plugin == "template"]
    assert all("valid_mse" in t.metrics and "train_loss" in t.metrics for t in template_tasks)
    assert client.status(job.job_id).is_completed
    assert "100.0/100%" in shown.getvalue(), shown.getvalue()[-500:]

    # The final metrics per task, and the metric history, as DataFrames.
    table = final.to_pandas()
    assert list(table.index) == [t.task_id for t in final.tasks]
    assert set(table["state"]) == {"completed"}
    assert table.loc[template_tasks[0].task_id, "valid_mse"] == template_tasks[0].metrics["valid_mse"]
    history = final.history(["train_loss"])
    assert "valid_mse" in history.metric_names
    frame = history.to_pandas()
    assert set(frame["metric"]) == {"train_loss"}
    assert set(frame["task_id"]) == {t.task_id for t in template_tasks}
    for _, one in frame.groupby("task_id"):
        assert one["step"].is_monotonic_increasing and one["step"].max() == 80


def test_list_iterates_over_every_page(client: Client) -> None:
    asset = synthetic(300, seed=4242)  # an asset of these jobs only: the listing's filter
    names = [f"page-{i}" for i in range(5)]
    jobs = [client.start(TemplateConfig(hidden_sizes=[4]), asset, steps=5, name=n) for n in reversed(names)]
    for job in jobs:
        client.wait(job, interval_ms=50)
    key = "synthetic-ar1:300:4242"
    pages = list(client.list_pages(asset=key, order="name", page_size=2))
    assert [len(p.jobs) for p in pages] == [2, 2, 1]
    assert [bool(p.next_page_token) for p in pages] == [True, True, False]
    assert [j.name for p in pages for j in p.jobs] == names

    listed = list(client.list(asset=key, order="name", page_size=2))
    assert [j.name for j in listed] == names
    ids = [j.job_id for j in jobs]
    assert [j.job_id for j in client.list(asset=key, order="oldest", page_size=2)] == ids
    assert [j.job_id for j in client.list(asset=key, page_size=3)] == ids[::-1]  # newest first
    assert len(list(client.list(asset=key, state="completed", page_size=1))) == 5
    assert list(client.list(asset=key, state=[TaskState.RUNNING, "queued"])) == []
    assert {j.job_id for j in client.list(plugin="template", page_size=2)} >= set(ids)
    assert list(client.list(plugin="no-such-plugin")) == []


def test_stop_one_task_then_the_rest_then_resume(client: Client) -> None:
    slow = plugin_config("behaviour", {"sleep_ms_per_step": 20})
    job = client.start(slow, [synthetic(100, seed=21), synthetic(100, seed=22)], steps=300, name="stoppable")
    first, second = (t.task_id for t in job.tasks)

    poll(client, job, "a running task", lambda j: any(t.state.is_active for t in j.tasks))
    stopped = client.stop(job, task=first)
    assert stopped.job_id == job.job_id
    now = poll(client, job, f"task {first} cancelled", lambda j: j.task(first).state is TaskState.CANCELLED)
    assert now.task(second).state is not TaskState.CANCELLED

    job.stop(force=True, deadline=5.0)
    now = poll(client, job, "every task stopped", lambda j: j.is_finished)
    assert now.states.get(TaskState.CANCELLED, 0) >= 1
    assert list(client.list(state="cancelled", asset="synthetic-ar1:100:21"))

    resumed = client.resume(job)
    assert resumed.job.job_id == job.job_id
    assert resumed.resumed_tasks == sum(1 for t in now.tasks if t.state is TaskState.CANCELLED)
    final = job.wait(interval_ms=100)
    assert final.is_completed, final
    assert [t.steps_done for t in final.tasks] == [300, 300]


def test_bad_requests_raise_the_code_the_host_sent_and_change_nothing(client: Client) -> None:
    before = [j.job_id for j in client.list(page_size=1000)]

    with pytest.raises(InvalidArgument) as steps:
        client.start(TemplateConfig(), synthetic(100), steps=0)
    assert steps.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "models[0].steps" in steps.value.message and steps.value.method == "StartTraining"

    with pytest.raises(InvalidArgument) as key:
        client.start(TemplateConfig(learning_rate=-1.0), synthetic(100), steps=10)
    assert "learning_rate" in key.value.message, key.value.message

    with pytest.raises(TliError) as unknown:
        client.start(plugin_config("no-such-plugin"), synthetic(100), steps=10)
    assert unknown.value.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
    assert "no-such-plugin" in unknown.value.message

    with pytest.raises(NotFound) as missing:
        client.status(987654)
    assert missing.value.code is grpc.StatusCode.NOT_FOUND and "987654" in missing.value.message
    for call in (lambda: client.resume(987654), lambda: client.stop(987654), lambda: client.history(987654)):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(NotFound):
        next(iter(client.watch(987654)))

    assert [j.job_id for j in client.list(page_size=1000)] == before


def test_a_plugin_never_seen_trains_through_a_helper_built_from_its_schema(client: Client) -> None:
    # `behaviour` is a test fixture: this package has no typed class for it.
    Behaviour = client.config_type("behaviour")
    assert Behaviour.__name__ == "BehaviourConfig" and "log_every" in Behaviour.keys()
    assert "log_every: int, >= 0, <= 1000000" in (Behaviour.__doc__ or "")
    with pytest.raises(TypeError, match="unknown key 'sleep_ms_per_stp'"):
        Behaviour(sleep_ms_per_stp=1)
    with pytest.raises(ValueError, match="log_every: 1000000000 is more than the maximum 1000000"):
        Behaviour(log_every=10**9)
    with pytest.raises(ValueError, match="fail_create: expected boolean"):
        Behaviour(fail_create="yes")
    # The host checks the same schema for a client that skips the helper.
    with pytest.raises(InvalidArgument, match="config key `log_every`"):
        client.start([plugin_config("behaviour", {"log_every": 10**9})], [synthetic(300, seed=1)], steps=3)
    job = client.start([Model(Behaviour(sleep_ms_per_step=1, log_every=2), steps=6)],
                       [synthetic(300, seed=1)])
    final = client.wait(job, timeout=120)
    assert [t.state for t in final.tasks] == [TaskState.COMPLETED]
    assert final.tasks[0].steps_done == 6


def test_no_host_is_unavailable() -> None:
    with Client("127.0.0.1:9", timeout=5.0) as nobody:
        with pytest.raises(Unavailable) as e:
            nobody.plugins()
    assert e.value.code is grpc.StatusCode.UNAVAILABLE


def test_early_stopping_keeps_the_best_and_resume_trains_further(client: Client) -> None:
    # The behaviour fixture reports valid_loss = valid_curve[k-1] at its k-th validation (every
    # 10 steps): best 2.5 at step 50, then 2.6, 2.7, 2.8 do not beat it: patience 3 ends at 80.
    curve = [5, 4, 3, 3.5, 2.5, 2.6, 2.7, 2.8, 2.9, 3.0]
    job = client.start(
        plugin_config("behaviour", {"valid_every": 10, "valid_curve": curve}),
        synthetic(200, seed=31),
        steps=200,
        name="early-stopping",
        early_stopping={"metric": "valid_loss", "patience": 3},
        keep_best={"metric": "valid_loss", "k": 2},
    )
    final = client.wait(job, interval_ms=50, timeout=120)
    task = final.tasks[0]
    assert task.state is TaskState.COMPLETED, task
    assert (task.steps_done, task.total_steps) == (80, 200), task
    assert task.best is not None and (task.best.step, task.best.metric) == (50, "valid_loss"), task
    assert task.best.value == 2.5
    assert task.stopped_early is not None, task
    assert task.stopped_early.startswith("stopped early at step 80"), task.stopped_early
    table = final.to_pandas()
    assert table.loc[task.task_id, "best_step"] == 50
    assert table.loc[task.task_id, "stopped_early"] == task.stopped_early

    # A completed task trains further: 30 steps beyond the 80 done, from its final checkpoint.
    resumed = client.resume(job, steps=30)
    assert resumed.resumed_tasks == 1, resumed
    final = client.wait(job, interval_ms=50, timeout=120)
    task = final.tasks[0]
    assert task.state is TaskState.COMPLETED, task
    assert (task.steps_done, task.total_steps) == (110, 110), task
    assert task.best is not None and task.best.step == 50, "nothing beat 2.5 after step 80"

    # A rule the host refuses (only valid_* metrics may choose a model): InvalidArgument.
    with pytest.raises(InvalidArgument, match="test_loss"):
        client.start(plugin_config("behaviour"), synthetic(200, seed=31), steps=20,
                     early_stopping={"metric": "test_loss", "patience": 2})
