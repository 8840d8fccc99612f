"""What needs no host: the version rule, the typed configs against the generated messages,
assets, states, and the packaging (stubs generated at build time)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import grpc
import pytest

import tli_client
from tli_client import (
    DqnConfig,
    Mamba2Config,
    Model,
    PpoConfig,
    TaskState,
    TemplateConfig,
    TftConfig,
    TradingEnvConfig,
    parse_asset,
    plugin_config,
    synthetic,
)
from tli_client._proto.tli.v1 import training_pb2 as pb
from tli_client.assets import (
    BarFile,
    SyntheticAsset,
    asset_to_proto,
    bar_file,
    walk_forward_to_proto,
)
from tli_client.config import TYPED_CONFIGS
from tli_client.errors import InvalidArgument, NotFound, TliError, Unauthenticated


def test_the_package_version_follows_the_api() -> None:
    # tli.v1 -> tli-client 1.x.y (setup.py also refuses to build anything else).
    assert tli_client.API_PACKAGE == "tli.v1"
    api_major = tli_client.API_PACKAGE.removeprefix("tli.v")
    parts = tli_client.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts), tli_client.__version__
    assert parts[0] == api_major, (tli_client.__version__, tli_client.API_PACKAGE)


def test_the_stubs_are_generated_into_the_installed_package_not_the_sources() -> None:
    stubs = Path(pb.__file__).resolve()
    assert "site-packages" in stubs.parts, stubs
    assert "NO CHECKED-IN PROTOBUF GENCODE" in stubs.read_text(), "protoc's own header"
    # Imports rewritten to the package: no top-level `tli` module is claimed.
    with pytest.raises(ImportError):
        __import__("tli.v1")


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("message", sorted(TYPED_CONFIGS))
def test_each_typed_config_has_every_field_of_its_message(message: str) -> None:
    proto_fields = {f.name for f in pb.DESCRIPTOR.message_types_by_name[message].fields}
    assert _fields(TYPED_CONFIGS[message]) == proto_fields


def test_every_model_family_of_the_api_has_a_typed_config() -> None:
    oneof = pb.ModelSpec.DESCRIPTOR.oneofs_by_name["config"]
    families = {f.name: f.message_type.name for f in oneof.fields if f.name != "plugin"}
    for member, message in families.items():
        assert message in TYPED_CONFIGS, f"no typed config for {message} (ModelSpec.{member})"
        assert getattr(TYPED_CONFIGS[message], "family") == member


def test_typed_configs_send_only_what_is_set() -> None:
    spec = Model(TemplateConfig(hidden_sizes=[16, 8], lr_schedule="cosine"), steps=10).to_proto(None)
    assert spec.WhichOneof("config") == "template"
    assert list(spec.template.hidden_sizes) == [16, 8]
    assert spec.template.lr_schedule == pb.LR_SCHEDULE_COSINE
    assert not spec.template.HasField("learning_rate")
    assert spec.steps == 10

    dqn = Model(DqnConfig(env="cartpole", gamma=0.99, trading=TradingEnvConfig(window=16))).to_proto(7)
    assert dqn.steps == 7 and dqn.dqn.env == pb.RL_ENV_CARTPOLE and dqn.dqn.gamma == 0.99
    assert dqn.dqn.trading.window == 16 and not dqn.dqn.trading.HasField("max_contracts")
    assert not dqn.dqn.HasField("n_step")

    # An all-defaults config still picks its family.
    for cls, member in [(PpoConfig, "ppo"), (Mamba2Config, "mamba2"), (TftConfig, "tft")]:
        assert Model(cls()).to_proto(1).WhichOneof("config") == member
    tft = Model(
        TftConfig(
            precision="int8", step_memory="staged", optimizer_state="4bit", quantiles=[0.1, 0.9]
        )
    ).to_proto(1)
    assert tft.tft.precision == pb.TFT_PRECISION_INT8
    assert tft.tft.step_memory == pb.TFT_STEP_MEMORY_STAGED
    assert tft.tft.optimizer_state == pb.TFT_OPTIMIZER_STATE_4BIT
    assert list(tft.tft.quantiles) == [0.1, 0.9]


def test_a_wrong_enum_word_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="env: 'mountaincar' is not one of trading, cartpole"):
        Model(DqnConfig(env="mountaincar")).to_proto(1)  # type: ignore[arg-type]


def test_plugin_config_is_the_generic_form() -> None:
    spec = Model(plugin_config("ppo", {"target_kl": None, "gamma": 0.9})).to_proto(5)
    assert spec.WhichOneof("config") == "plugin"
    assert spec.plugin.plugin == "ppo"
    assert spec.plugin.config_json == '{"gamma": 0.9, "target_kl": null}'
    assert Model(plugin_config("template")).to_proto(5).plugin.config_json == ""
    with pytest.raises(ValueError, match="NaN"):
        Model(plugin_config("template", {"learning_rate": math.nan})).to_proto(5)
    with pytest.raises(TypeError, match="model config"):
        Model({"plugin": "template"}).to_proto(5)  # type: ignore[arg-type]


def test_assets_in_every_form() -> None:
    assert parse_asset("synthetic:2000") == SyntheticAsset(2000, 1, 0.0)
    assert parse_asset("synthetic:2000:7:0.02") == SyntheticAsset(2000, 7, 0.02)
    assert parse_asset("ES=/data/es.csv") == BarFile("/data/es.csv", "ES")
    assert parse_asset("./synthetic:5") == BarFile("./synthetic:5")
    assert parse_asset("data/a=b.csv") == BarFile("data/a=b.csv")
    for bad in ["synthetic:", "synthetic:x", "synthetic:1:2:-1", "synthetic:1:2:3:4", " "]:
        with pytest.raises(ValueError):
            parse_asset(bad)
    assert asset_to_proto(synthetic(100, seed=3)).synthetic.seed == 3
    assert asset_to_proto(Path("bars.csv")).data_path == "bars.csv"
    cut = asset_to_proto(bar_file("es.csv", "ES", start="2005-01-03", end=1514505600000000000))
    assert (cut.start_unix_ns, cut.end_unix_ns) == (1104710400000000000, 1514505600000000000)
    assert not asset_to_proto(bar_file("es.csv")).HasField("start_unix_ns")
    wf = walk_forward_to_proto({"test_starts": ["2016-01-04", 1483401600000000000], "train_bars": 1500})
    assert list(wf.test_starts_unix_ns) == [1451865600000000000, 1483401600000000000]
    assert (wf.folds, wf.train_bars) == (0, 1500)
    assert walk_forward_to_proto({"folds": 5, "test_bars": 250}).test_bars == 250
    with pytest.raises(ValueError, match="unknown keys"):
        walk_forward_to_proto({"fold": 5})
    with pytest.raises(TypeError):
        asset_to_proto(42)  # type: ignore[arg-type]


def test_task_states_read_every_spelling() -> None:
    assert TaskState.parse("running") is TaskState.RUNNING
    assert TaskState.parse("TASK_STATE_CANCELLED") is TaskState.CANCELLED
    assert TaskState.from_proto(pb.TASK_STATE_COMPLETED) is TaskState.COMPLETED
    assert TaskState.from_proto(99) is TaskState.UNSPECIFIED  # a state newer than the client
    assert TaskState.COMPLETED.is_finished and not TaskState.INTERRUPTED.is_finished
    assert TaskState.INTERRUPTED.is_resumable and TaskState.CHECKPOINTING.is_active
    with pytest.raises(ValueError, match="expected one of queued, running"):
        TaskState.parse("sleeping")
    # Every state of the API has a name here.
    for name in pb.TaskState.keys():
        assert TaskState.from_proto(pb.TaskState.Value(name)).proto_name == name


def test_errors_carry_the_code_and_the_message() -> None:
    e: Any = InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, "models[0].steps: 0", "StartTraining")
    assert isinstance(e, TliError) and e.code is grpc.StatusCode.INVALID_ARGUMENT
    assert str(e) == "StartTraining: INVALID_ARGUMENT: models[0].steps: 0"
    assert NotFound.default_code is grpc.StatusCode.NOT_FOUND
    assert Unauthenticated.default_code is grpc.StatusCode.UNAUTHENTICATED


def test_a_typed_helper_from_a_served_schema_checks_keys_and_values() -> None:
    from tli_client import PluginConfig, PluginInfo, config_type

    schema = {
        "title": "acme forecaster",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "depth": {"type": "integer", "minimum": 1, "maximum": 64, "default": 4,
                      "description": "layers"},
            "rate": {"type": "number", "exclusiveMinimum": 0},
            "mode": {"enum": ["fast", "exact"]},
            "sizes": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 3},
            "lr-schedule": {"type": "string"},
        },
    }
    info = PluginInfo("acme-net", "2.1.0", "1.1.0", "forecaster", "", {}, schema, "/x.so", ())
    Acme = config_type(info)
    assert Acme.__name__ == "AcmeNetConfig" and Acme.keys() == (
        "depth", "rate", "mode", "sizes", "lr-schedule")
    assert "depth: int, >= 1, <= 64, default 4 — layers" in (Acme.__doc__ or "")
    import inspect
    params = inspect.signature(Acme).parameters
    assert list(params)[:4] == ["depth", "rate", "mode", "sizes"]
    cfg = Acme(depth=8, mode="exact", sizes=(2, 3), **{"lr-schedule": "cosine"})
    assert isinstance(cfg, PluginConfig) and cfg.plugin == "acme-net"
    assert cfg.config == {"depth": 8, "mode": "exact", "sizes": [2, 3], "lr-schedule": "cosine"}
    assert cfg.config_json() == '{"depth": 8, "lr-schedule": "cosine", "mode": "exact", "sizes": [2, 3]}'
    spec = Model(cfg, steps=10).to_proto(None)
    assert spec.plugin.plugin == "acme-net" and '"depth": 8' in spec.plugin.config_json
    assert Acme().config == {}
    with pytest.raises(TypeError, match="unknown key 'deph'; its keys are depth, rate"):
        Acme(deph=2)
    for kwargs, message in [
        ({"depth": 0}, "acme-net config: depth: 0 is less than the minimum 1"),
        ({"depth": 2.5}, "depth: expected integer"),
        ({"depth": True}, "depth: expected integer"),
        ({"rate": 0}, "rate: 0 must be more than 0"),
        ({"rate": math.nan}, "rate: nan cannot be sent"),
        ({"mode": "slow"}, "mode: 'slow' is not one of 'fast', 'exact'"),
        ({"sizes": [1, 0]}, r"sizes\[1\]: 0 is less than the minimum 1"),
        ({"sizes": [1, 2, 3, 4]}, "sizes: 4 items, more than 3"),
    ]:
        with pytest.raises(ValueError, match=message):
            Acme(**kwargs)
    # A schema that says nothing takes any keys.
    Loose = config_type(PluginInfo("loose", "0.1.0", "1.1.0", "x", "", {}, None, "", ()))
    assert Loose(anything=[1]).config == {"anything": [1]}


def test_progress_bars_show_each_tasks_own_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task done in 0.5 s and one done in 10.5 s do not show the same rate at the end."""
    pytest.importorskip("tqdm")
    import io

    from tli_client import Progress, Task, TqdmDisplay
    from tli_client import progress as progress_module

    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])

    def task(task_id: int, state: int, done: int, rate: float = 0.0) -> Task:
        return Task.from_proto(
            pb.TaskProgress(task_id=task_id, plugin="template", asset="a", state=state,
                            steps_done=done, total_steps=100, steps_per_second=rate)
        )

    running, completed = pb.TASK_STATE_RUNNING, pb.TASK_STATE_COMPLETED
    shown = io.StringIO()
    display = TqdmDisplay(file=shown)
    display.update(Progress(1, 0.0, (task(1, running, 0), task(2, running, 0))))
    clock[0] += 0.5
    display.update(Progress(1, 0.5, (task(1, completed, 100), task(2, running, 10, 20.0))))
    clock[0] += 10.0
    display.update(Progress(1, 1.0, (task(1, completed, 100), task(2, completed, 100))))
    display.close()
    text = shown.getvalue()
    assert "completed 200 step/s" in text, text
    assert "running 20 step/s" in text, text
    assert "completed 9.52 step/s" in text, text
    assert "[, " not in text, text


def test_progress_bars_show_the_training_loss_then_what_the_plugin_is_compared_by() -> None:
    """While a task trains its bar shows the training loss; once it ended, the first of its
    plugin's headline metrics it reported (not the first metric by name)."""
    pytest.importorskip("tqdm")
    import io

    from tli_client import Progress, Task, TqdmDisplay

    def task(state: int) -> Task:
        return Task.from_proto(
            pb.TaskProgress(
                task_id=3, plugin="dqn", asset="/data/es.dbn.zst", state=state, steps_done=50,
                total_steps=100,
                metrics=[pb.Metric(name=n, value=v) for n, v in
                         [("env_steps", 50.0), ("train_loss", 0.25), ("valid_sharpe", 1.5)]],
                headline_metrics=["test_sharpe", "valid_sharpe", "train_loss"],
            )
        )

    shown = io.StringIO()
    display = TqdmDisplay(file=shown)
    display.update(Progress(1, 0.5, (task(pb.TASK_STATE_RUNNING),)))
    assert "train_loss=0.25" in shown.getvalue(), shown.getvalue()
    display.update(Progress(1, 1.0, (task(pb.TASK_STATE_COMPLETED),)))
    display.close()
    text = shown.getvalue()
    assert "valid_sharpe=1.5" in text and "env_steps=" not in text, text
    assert "task 3 dqn/es.dbn.zst" in text, text


def test_history_labels_name_the_task() -> None:
    from tli_client.history import TaskHistory

    label = TaskHistory(6, 0, "dqn", "es.dbn", "cpu", {}).label
    assert label == "task 6 dqn/es.dbn"
