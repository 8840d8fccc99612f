"""Models against a real host (loopback, no token): a bundle (TLI_TEST_BUNDLE, a template model
trained on the ES sample TLI_TEST_BARS_CSV) imported, listed, loaded (its reservation in
GetResources), applied to bars with Predict and bar by bar with PredictStream (the same
forecasts), exported back byte for byte and unloaded; backtested (the ledger and summary against a hand
computation from Predict's forecasts); bad requests raising the exception of the right gRPC
code; docs/python.md's models example run as written. The bars <-> wire conversions and a
backtest's frames are checked without a host."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List

import grpc
import pandas as pd
import pytest

from test_docs_example import example_from

from tli_client import (
    AlreadyExists,
    Backtest,
    Client,
    FailedPrecondition,
    InvalidArgument,
    ModelInfo,
    NotFound,
    Reservation,
)
from tli_client._proto.tli.v1 import models_pb2 as mpb
from tli_client.models import (
    BACKTEST_REPORT_COLUMNS,
    BUNDLE_FILES,
    LEDGER_COLUMNS,
    bars_to_proto,
    parse_checksums,
    rows_to_frame,
    time_to_unix_ns,
)

MODELS_MARKER = "<!-- tested: the models example below is run as written"
FORECAST = "fwd_logret_1:mean"
ACTUAL = "fwd_logret_1:actual"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def read_bars(path: Path, n: int) -> pd.DataFrame:
    """The first n bars of the sample, indexed by their UTC time (its `symbol` column kept)."""
    bars = pd.read_csv(path, index_col="ts_event", parse_dates=True)
    assert list(bars.columns) == ["open", "high", "low", "close", "volume", "symbol"], bars.columns
    return bars.iloc[:n]


def reservations(client: Client) -> List[Reservation]:
    return [r for d in client.resources() for r in d.reservations]


def wait_until(what: str, done: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def assert_same_forecasts(got: pd.Series, want: pd.Series, scale: float) -> None:
    """Equal to 1e-6 relative, with 1e-6 of the target's scale as the floor: the model computes
    in float32, and rows near zero carry its rounding (which also differs with the batch)."""
    assert list(got.index) == list(want.index)
    for ts, a, b in zip(want.index, got.to_list(), want.to_list()):
        assert abs(a - b) <= 1e-6 * (abs(b) + scale), f"{got.name} at {ts}: {a} vs {b}"


def test_an_imported_model_loads_predicts_streams_and_exports(
    client: Client, bundle: Path, bars_csv: Path, tmp_path: Path
) -> None:
    name = unique("py-es")
    card_file = json.loads((bundle / "model.json").read_text(encoding="utf-8"))

    imported = client.import_model(bundle, name=name)
    assert isinstance(imported, ModelInfo)
    assert (imported.id, imported.source, imported.task_id, imported.job_id, imported.task_state) == (
        name, "imported", None, None, None
    )
    assert imported.plugin == "template" and imported.plugin_version == card_file["plugin"]["version"]
    assert imported.steps == 60 and imported.assets == ("ES.FUT",) and not imported.pooled
    assert imported.config == card_file["config"] and "hidden_sizes" in imported.config
    assert imported.size_bytes == (bundle / "weights.safetensors").stat().st_size
    assert [d.name for d in imported.data] == ["es_proxy_sp500_1d.csv"]
    assert all(math.isfinite(v) for v in imported.metrics.values()) and "test_mse" in imported.metrics
    assert imported.resident is None and imported.card is None

    listed = {m.id: m for m in client.models()}
    assert name in listed and listed[name].card is None
    shown = client.model(name)
    assert shown.card == card_file  # GetModel carries the card
    assert shown.resident is None

    # Loading makes it resident; its predictor's memory is reserved like a task's.
    loaded = client.load_model(name)
    assert loaded.resident is not None
    resident = loaded.resident
    assert resident.device == "cpu" and resident.reserved_bytes > 0
    assert resident.served_by == f"template@{imported.plugin_version}"
    assert resident.loaded <= datetime.now(timezone.utc)
    held = [r for r in reservations(client) if r.model == name]
    assert len(held) == 1 and held[0].task_id == 0, reservations(client)
    assert held[0].reserved_bytes == resident.reserved_bytes
    again = client.load_model(name)  # loading a loaded model returns it as it is
    assert again.resident is not None and again.resident.loaded == resident.loaded
    assert len([r for r in reservations(client) if r.model == name]) == 1

    # Predict: one row per bar after the look-back, indexed by the bars' UTC times.
    bars = read_bars(bars_csv, 600)
    features = card_file["features"]
    lookback = max(*features["return_horizons"], features["volatility_window"], features["volume_window"])
    out = client.predict(name, bars)
    assert isinstance(out.index, pd.DatetimeIndex) and out.index.name == "timestamp"
    assert str(out.index.tz) == "UTC"
    assert list(out.index) == list(bars.index[lookback:]), (len(out), lookback)
    assert list(out.columns) == ["symbol", FORECAST, ACTUAL], list(out.columns)
    assert set(out["symbol"]) == {"ES.FUT"}
    assert out[FORECAST].dtype == "float64" and out[ACTUAL].dtype == "float64"
    assert out[FORECAST].notna().all()
    # The actual is the next bar's log return; past the last bar it is NaN.
    close = bars["close"]
    realized = (close.shift(-1) / close).map(math.log).loc[out.index]
    assert math.isnan(out[ACTUAL].iloc[-1])
    assert (out[ACTUAL].iloc[:-1] - realized.iloc[:-1]).abs().max() < 1e-12
    assert out.attrs == {"model": name, "served_by": resident.served_by}

    # The same bars with a ts column (strings) and an explicit symbol give the same rows;
    # start/end choose the rows, the bars before still serve as look-back.
    as_columns = pd.read_csv(bars_csv).iloc[:600].drop(columns=["symbol"])
    same = client.predict(name, as_columns, symbol="ES.FUT")
    pd.testing.assert_frame_equal(same, out)
    window = client.predict(name, bars, start=out.index[100], end=out.index[109].to_pydatetime())
    assert list(window.index) == list(out.index[100:110])
    scale = card_file["assets"][0]["stats"]["target_scales"][0]
    assert_same_forecasts(window[FORECAST], out[FORECAST].iloc[100:110], scale)
    naive = client.predict(name, bars.tz_convert(None), start=str(out.index[-1].date()))
    assert list(naive.index) == list(out.index[-1:])

    # PredictStream, one bar at a time (each a Series named by its time): what Predict gave.
    frames = []
    stream = client.predict_stream(name, "ES.FUT", (bars.iloc[i] for i in range(len(bars))))
    for i, frame in enumerate(stream):
        assert frame.attrs["bars_seen"] == i + 1
        assert len(frame) == (1 if i >= lookback else 0), (i, frame)
        assert ACTUAL not in frame.columns
        if i == 10:  # the stream's own predictor holds memory while it runs
            assert any(r.model == f"{name} (stream 1)" for r in reservations(client)), reservations(client)
        frames.append(frame)
    assert len(frames) == len(bars)
    streamed = pd.concat(frames)
    assert list(streamed.columns) == ["symbol", FORECAST]
    assert list(streamed.index) == list(out.index)
    assert_same_forecasts(streamed[FORECAST], out[FORECAST], scale)
    wait_until("the stream's reservation to end", lambda: not any(
        r.model and r.model.startswith(f"{name} (stream") for r in reservations(client)
    ))
    # Several bars per message (DataFrames) and dict bars work the same way.
    chunks = [bars.iloc[i : i + 150] for i in range(0, 600, 150)]
    chunked = pd.concat(client.predict_stream(name, "ES.FUT", chunks))
    assert [len(f) for f in client.predict_stream(name, "ES.FUT", chunks)] == [150 - lookback, 150, 150, 150]
    assert_same_forecasts(chunked[FORECAST], out[FORECAST], scale)
    dicts = [
        {"ts": ts.to_pydatetime(), "open": r.open, "high": r.high, "low": r.low, "close": r.close,
         "volume": int(r.volume)}
        for ts, r in bars.iloc[:lookback + 3].iterrows()
    ]
    from_dicts = pd.concat(client.predict_stream(name, "ES.FUT", dicts))
    assert list(from_dicts.index) == list(out.index[:3])
    assert client.model(name).resident.streams >= 4  # type: ignore[union-attr]

    # Export: a new directory with the stored bytes exactly.
    exported = client.export_model(name, tmp_path / "exported")
    assert exported == tmp_path / "exported"
    assert sorted(p.name for p in exported.iterdir()) == sorted(BUNDLE_FILES)
    for file in BUNDLE_FILES:
        assert (exported / file).read_bytes() == (bundle / file).read_bytes(), file
    with pytest.raises(FileExistsError, match="already exists"):
        client.export_model(name, exported)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]  # no staging left behind

    # Unloaded: its reservation is gone, and it predicts no more.
    assert client.unload_model(name) is True
    assert client.model(name).resident is None
    assert not any(r.model == name for r in reservations(client))
    with pytest.raises(FailedPrecondition) as unloaded:
        client.predict(name, bars)
    assert unloaded.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert f"model {name} is not loaded" in unloaded.value.message
    assert unloaded.value.method == "Predict"
    with pytest.raises(FailedPrecondition):
        list(client.predict_stream(name, "ES.FUT", [bars]))
    assert client.unload_model(name) is False


def test_bad_model_requests_raise_the_code_the_host_sent_and_change_nothing(
    client: Client, bundle: Path, bars_csv: Path, tmp_path: Path
) -> None:
    bars = read_bars(bars_csv, 600)
    before = [m.id for m in client.models()]

    missing = unique("no-such-model")
    with pytest.raises((NotFound, FailedPrecondition)) as unknown:
        client.predict(missing, bars)
    assert missing in unknown.value.message and unknown.value.method == "Predict"
    for call in (
        lambda: client.model(missing),
        lambda: client.load_model(missing),
        lambda: client.export_model(missing, tmp_path / "never"),
    ):
        with pytest.raises(NotFound) as e:
            call()
        assert e.value.code is grpc.StatusCode.NOT_FOUND and missing in e.value.message
    assert client.unload_model(missing) is False
    assert list(tmp_path.iterdir()) == []  # a refused export leaves nothing

    # A bundle whose model.json was edited is refused whole.
    edited = tmp_path / "edited"
    shutil.copytree(bundle, edited)
    card = json.loads((edited / "model.json").read_text(encoding="utf-8"))
    card["metrics"]["test_mse"] = 0.0
    (edited / "model.json").write_text(json.dumps(card, indent=2), encoding="utf-8")
    with pytest.raises(InvalidArgument) as damaged:
        client.import_model(edited, name=unique("py-edited"))
    assert "model.json" in damaged.value.message and damaged.value.method == "ImportModel"

    with pytest.raises(InvalidArgument, match="not a model name"):
        client.import_model(bundle, name="12345")
    with pytest.raises(FileNotFoundError, match="weights.safetensors"):
        incomplete = tmp_path / "incomplete"
        incomplete.mkdir()
        shutil.copy(bundle / "model.json", incomplete)
        shutil.copy(bundle / "checksums.sha256", incomplete)
        client.import_model(incomplete)
    assert [m.id for m in client.models()] == before

    # A name taken; too few bars for the look-back; bars of another contract.
    name = unique("py-taken")
    client.import_model(bundle, name=name)
    with pytest.raises(AlreadyExists) as taken:
        client.import_model(bundle, name=name)
    assert name in taken.value.message
    client.load_model(name)
    try:
        with pytest.raises(InvalidArgument, match="look-back"):
            client.predict(name, bars.iloc[:10])
        with pytest.raises(InvalidArgument, match="CL"):
            client.predict(name, bars, symbol="CL")
        with pytest.raises(InvalidArgument, match="sorted"):
            client.predict(name, bars.iloc[::-1])
        with pytest.raises(InvalidArgument, match="does not come after"):
            list(client.predict_stream(name, "ES.FUT", [bars.iloc[:30], bars.iloc[5:6]]))
        with pytest.raises(ValueError, match="no column volume"):  # refused here, not sent
            client.predict(name, bars.drop(columns=["volume"]))
    finally:
        assert client.unload_model(name) is True


def sign(x: float) -> float:
    return 0.0 if x == 0 or math.isnan(x) else math.copysign(1.0, x)


def ledger_by_hand(close: List[float], positions: List[float], point_value: float, cost: float) -> pd.DataFrame:
    """The ledger's timing rule, no rolls: row t books gross_t = p_{t-1}·pv·(c_t − c_{t-1}),
    costs_t = cost·|p_{t-1} − p_{t-2}| (p_{-1} = p_{-2} = 0); row 0 books nothing."""
    rows = []
    equity = 0.0
    for t in range(len(close)):
        held = positions[t - 1] if t >= 1 else 0.0
        before = positions[t - 2] if t >= 2 else 0.0
        gross = held * point_value * (close[t] - close[t - 1]) if t >= 1 else 0.0
        costs = cost * abs(held - before) if t >= 1 else 0.0
        equity += gross - costs
        rows.append((positions[t], gross, costs, gross - costs, equity))
    return pd.DataFrame(rows, columns=["position", "gross_pnl", "costs", "net_pnl", "equity"])


def assert_close(got: pd.Series, want: List[float], what: str, tol: float = 1e-9) -> None:
    assert len(got) == len(want), (what, len(got), len(want))
    for i, (a, b) in enumerate(zip(got.to_list(), want)):
        assert abs(a - b) <= tol, f"{what}[{i}] at {got.index[i]}: {a} vs {b}"


def test_a_backtest_trades_the_forecasts_by_the_timing_rule_as_counted_by_hand(
    client: Client, bundle: Path, bars_csv: Path
) -> None:
    name = unique("py-bt")
    client.import_model(bundle, name=name)
    bars = read_bars(bars_csv, 600)
    with pytest.raises(FailedPrecondition, match="not loaded") as not_loaded:
        client.backtest(name, bars)
    assert not_loaded.value.method == "Backtest"
    loaded = client.load_model(name)
    assert loaded.resident is not None
    try:
        out = client.predict(name, bars)
        bt = client.backtest(name, bars)
        assert isinstance(bt, Backtest)
        assert (bt.model, bt.served_by, bt.symbol) == (name, loaded.resident.served_by, "ES.FUT")
        assert (bt.positions_from, bt.forecast, bt.currency) == ("sign", FORECAST, "USD")
        assert (bt.commission, bt.slippage_ticks, bt.point_value) == (2.0, 0.5, 50.0)
        assert bt.cost_per_contract == 2.0 + 0.5 * 0.25 * 50.0 == 8.25

        # The summary: one row per strategy, the report's fields in proto order.
        summary = bt.summary
        assert list(summary.index) == ["model", "buy_and_hold", "flat"]
        assert list(summary.columns) == list(BACKTEST_REPORT_COLUMNS)
        for column in ("periods", "max_drawdown_periods", "periods_in_market", "trades"):
            assert summary[column].dtype == "int64", column
        assert summary["net_pnl"].dtype == "float64" and summary["sharpe"].dtype == "float64"

        # The ledger: the predicted rows (first output to last), indexed as Predict's.
        ledger = bt.ledger
        assert ledger is not None
        assert list(ledger.columns) == ["symbol", *LEDGER_COLUMNS]
        assert ledger.index.name == "timestamp" and str(ledger.index.tz) == "UTC"
        assert list(ledger.index) == list(out.index)
        assert set(ledger["symbol"]) == {"ES.FUT"}
        assert ledger["roll"].dtype == bool and not ledger["roll"].any()  # no rolls in this file
        close = bars["close"].loc[out.index].to_list()
        assert ledger["close"].to_list() == close

        # By hand: p_t = sign(forecast_t), priced with the timing rule.
        positions = [sign(x) for x in out[FORECAST]]
        want = ledger_by_hand(close, positions, 50.0, 8.25)
        for column in want.columns:
            assert_close(ledger[column], want[column].to_list(), column)
        n = len(positions)
        model = summary.loc["model"]
        assert abs(model["net_pnl"] - math.fsum(want["net_pnl"])) <= 1e-9
        assert abs(model["gross_pnl"] - math.fsum(want["gross_pnl"])) <= 1e-9
        assert abs(model["costs"] - math.fsum(want["costs"])) <= 1e-9
        held = positions[: n - 1]  # the positions rows 1..n-1 earn on
        trades = sum(1 for i, p in enumerate(held) if p != (held[i - 1] if i else 0.0))
        assert model["trades"] == trades and model["periods"] == n - 1
        assert model["turnover"] == sum(abs(p - (held[i - 1] if i else 0.0)) for i, p in enumerate(held))
        assert model["exposure"] == sum(1 for p in held if p != 0) / (n - 1)

        # Buy-and-hold: one contract bought at the first bar, held to the last.
        hold = ledger_by_hand(close, [1.0] * n, 50.0, 8.25)
        assert_close(ledger["buy_and_hold_equity"], hold["equity"].to_list(), "buy_and_hold_equity")
        held_net = summary.loc["buy_and_hold", "net_pnl"]
        assert abs(held_net - (50.0 * (close[-1] - close[0]) - 8.25)) <= 1e-6
        assert summary.loc["buy_and_hold", "costs"] == 8.25 and summary.loc["buy_and_hold", "trades"] == 1
        assert summary.loc["buy_and_hold", "exposure"] == 1.0
        flat = summary.loc["flat"]
        for column in BACKTEST_REPORT_COLUMNS:
            assert flat[column] == (n - 1 if column == "periods" else 0), (column, flat[column])

        # The forecasts it traded: Predict's, with the realized log returns.
        forecasts = bt.forecasts
        assert forecasts is not None
        assert list(forecasts.columns) == ["symbol", "p50", "actual"]  # a point forecast
        assert list(forecasts.index) == list(out.index)
        assert forecasts["p50"].to_list() == out[FORECAST].to_list()
        assert forecasts["actual"].iloc[:-1].to_list() == out[ACTUAL].iloc[:-1].to_list()
        assert math.isnan(forecasts["actual"].iloc[-1])

        # The summary alone is the same summary.
        alone = client.backtest(name, bars, summary_only=True)
        assert alone.ledger is None and alone.forecasts is None
        pd.testing.assert_frame_equal(alone.summary, summary)

        # Without costs, net is gross; max_contracts scales the positions; start trades later.
        free = client.backtest(name, bars, commission=0, slippage_ticks=0)
        assert (free.commission, free.slippage_ticks, free.cost_per_contract) == (0.0, 0.0, 0.0)
        assert free.ledger is not None
        assert (free.ledger["costs"] == 0).all() and free.summary.loc["model", "costs"] == 0
        assert free.ledger["net_pnl"].to_list() == free.ledger["gross_pnl"].to_list()
        assert free.ledger["gross_pnl"].to_list() == ledger["gross_pnl"].to_list()
        assert free.summary.loc["model", "net_pnl"] == free.summary.loc["model", "gross_pnl"]
        two = client.backtest(name, bars, max_contracts=2, summary_only=True)
        assert abs(two.summary.loc["model", "net_pnl"] - 2 * model["net_pnl"]) <= 1e-6
        later = client.backtest(name, bars, start=out.index[100])
        assert later.ledger is not None and list(later.ledger.index) == list(out.index[100:])
        assert later.ledger["position"].to_list() == positions[100:]
        assert later.ledger["gross_pnl"].iloc[0] == 0.0 and later.ledger["costs"].iloc[1] == 8.25

        # Refusals: a rule a point forecast cannot take, a bad size, an unknown model.
        with pytest.raises(InvalidArgument, match="P10 and P90") as banded:
            client.backtest(name, bars, rule="threshold:0.5")
        assert banded.value.method == "Backtest"
        with pytest.raises(InvalidArgument, match="position rule"):
            client.backtest(name, bars, rule="martingale")
        with pytest.raises(InvalidArgument, match="max_contracts"):
            client.backtest(name, bars, max_contracts=0)
        with pytest.raises(InvalidArgument, match="commission"):
            client.backtest(name, bars, commission=-1)
        missing = unique("no-such-model")
        with pytest.raises(NotFound) as unknown:
            client.backtest(missing, bars)
        assert missing in unknown.value.message
    finally:
        assert client.unload_model(name) is True


def test_the_docs_models_example_runs_as_written(
    docs: Path, endpoint: str, bundle: Path, bars_csv: Path, tmp_path: Path
) -> None:
    code = example_from(docs, MODELS_MARKER)
    assert "tli.predict(" in code and "tli.predict_stream(" in code and "tli.export_model(" in code
    shutil.copytree(bundle, tmp_path / "es-mlp")
    shutil.copy(bars_csv, tmp_path / "es_proxy_sp500_1d.csv")
    script = tmp_path / "models_example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, TLI_ENDPOINT=f"http://{endpoint}")
    env.pop("TLI_TOKEN", None)
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    output = f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr[-4000:]}"
    assert run.returncode == 0, output
    assert "es-mlp: template@" in run.stdout, output
    assert "rows from 2018-01-02" in run.stdout, output
    assert "2018-12-31" in run.stdout, output  # the last streamed bar's forecast
    exported = tmp_path / "es-mlp-copy"
    assert all((exported / f).read_bytes() == (tmp_path / "es-mlp" / f).read_bytes() for f in BUNDLE_FILES)


# Without a host: bars to the wire, rows from it.


def test_bars_go_to_the_wire_as_utc_nanoseconds_from_any_accepted_shape() -> None:
    utc = pd.DatetimeIndex(["2024-01-02", "2024-01-03"], tz="UTC")
    frame = pd.DataFrame(
        {"Open": [1.0, 2.0], "High": [2.0, 3.0], "Low": [0.5, 1.5], "Close": [1.5, 2.5],
         "Volume": [10.0, 0], "symbol": ["ES", "ES"]},
        index=utc,
    )
    message = bars_to_proto(frame)
    ns = [int(t.value) for t in utc.as_unit("ns")]
    assert (message.symbol, list(message.ts_unix_ns), message.interval) == ("ES", ns, "")
    assert list(message.close) == [1.5, 2.5] and list(message.volume) == [10, 0]
    # Naive times are UTC; other zones are converted; a ts column of strings works too.
    assert list(bars_to_proto(frame.tz_convert(None)).ts_unix_ns) == ns
    assert list(bars_to_proto(frame.tz_convert("America/Chicago")).ts_unix_ns) == ns
    columns = frame.reset_index(drop=True).assign(ts=["2024-01-02T00:00:00Z", "2024-01-03"])
    assert list(bars_to_proto(columns, "ESZ4", "1d").ts_unix_ns) == ns
    assert bars_to_proto(columns, "ESZ4", "1d").symbol == "ESZ4"
    one = {"timestamp": datetime(2024, 1, 2), "open": 1, "high": 2, "low": 0.5, "close": 1.5, "volume": 3}
    assert list(bars_to_proto(one, default_symbol="ES").ts_unix_ns) == ns[:1]
    row = frame.drop(columns=["symbol"]).iloc[1]  # a Series named by its time
    assert list(bars_to_proto(row, default_symbol="ES").ts_unix_ns) == ns[1:]
    assert list(bars_to_proto([one], "ES").open) == [1.0]
    assert time_to_unix_ns("2024-01-02") == ns[0] == time_to_unix_ns(datetime(2024, 1, 2, tzinfo=timezone.utc))

    with pytest.raises(ValueError, match="no symbol"):
        bars_to_proto(frame.drop(columns=["symbol"]))
    with pytest.raises(ValueError, match="several symbols"):
        bars_to_proto(frame.assign(symbol=["ES", "CL"]))
    with pytest.raises(ValueError, match="volumes are whole numbers"):
        bars_to_proto(frame.assign(Volume=[1.5, 2]))
    with pytest.raises(ValueError, match="need their times"):
        bars_to_proto(frame.reset_index(drop=True))
    with pytest.raises(TypeError, match="DataFrame"):
        bars_to_proto(42, "ES")


def test_prediction_rows_become_a_frame_indexed_by_utc_time_with_nan_kept() -> None:
    rows = mpb.PredictionRows(
        columns=["a:mean", "a:actual"], symbol="ES", ts_unix_ns=[0, 86_400_000_000_000],
        values=[0.5, 1.0, -0.5, float("nan")],
    )
    frame = rows_to_frame(rows)
    assert list(frame.columns) == ["symbol", "a:mean", "a:actual"]
    assert frame.index.name == "timestamp" and str(frame.index.tz) == "UTC"
    assert list(frame.index) == [pd.Timestamp("1970-01-01", tz="UTC"), pd.Timestamp("1970-01-02", tz="UTC")]
    assert frame["a:mean"].to_list() == [0.5, -0.5]
    assert frame["a:actual"].iloc[0] == 1.0 and math.isnan(frame["a:actual"].iloc[1])
    empty = rows_to_frame(None, ["a:mean"])
    assert len(empty) == 0 and list(empty.columns) == ["symbol", "a:mean"]
    with pytest.raises(ValueError, match="3 values for 2 rows of 2 columns"):
        rows_to_frame(mpb.PredictionRows(columns=["a", "b"], ts_unix_ns=[1, 2], values=[1, 2, 3]))
    digest = "ab" * 32
    assert parse_checksums(f"{digest}  model.json\n{digest} *weights.safetensors\n") == {
        "model.json": digest, "weights.safetensors": digest
    }
    with pytest.raises(ValueError, match="line 1"):
        parse_checksums("nonsense\n")


def test_a_backtest_response_becomes_frames() -> None:
    def report(net: float, trades: int) -> mpb.BacktestReport:
        return mpb.BacktestReport(net_pnl=net, gross_pnl=net + 1, costs=1.0, periods=1, trades=trades)

    day = 86_400_000_000_000
    reply = mpb.BacktestResponse(
        model="m", served_by="template@0.1.0", symbol="ES", positions_from="sign",
        forecast="r:mean", commission=2.0, slippage_ticks=0.5, cost_per_contract=8.25,
        point_value=50.0, currency="USD",
        strategy=report(10.0, 1), buy_and_hold=report(-5.0, 1), flat=report(0.0, 0),
        ledger=mpb.PredictionRows(
            columns=list(LEDGER_COLUMNS), symbol="ES", ts_unix_ns=[0, day],
            values=[100, 1, 0, 0, 0, 0, 0, 0,  101, 1, 50, 8.25, 41.75, 41.75, 1, 41.75],
        ),
        forecasts=mpb.PredictionRows(
            columns=["p50", "actual"], symbol="ES", ts_unix_ns=[0, day], values=[0.1, 0.01, 0.2, float("nan")]
        ),
    )
    # The summary's columns are BacktestReport's fields, in proto order.
    assert list(BACKTEST_REPORT_COLUMNS) == [f.name for f in mpb.BacktestReport.DESCRIPTOR.fields]
    bt = Backtest.from_proto(reply)
    assert (bt.model, bt.forecast, bt.cost_per_contract, bt.currency) == ("m", "r:mean", 8.25, "USD")
    assert list(bt.summary.index) == ["model", "buy_and_hold", "flat"]
    assert bt.summary["net_pnl"].to_list() == [10.0, -5.0, 0.0]
    assert bt.summary["trades"].dtype == "int64" and bt.summary["sharpe"].dtype == "float64"
    assert bt.ledger is not None and bt.ledger["roll"].to_list() == [False, True]
    assert bt.ledger.index.name == "timestamp" and bt.ledger["equity"].to_list() == [0.0, 41.75]
    assert bt.forecasts is not None and list(bt.forecasts.columns) == ["symbol", "p50", "actual"]

    reply.ClearField("ledger")
    reply.ClearField("forecasts")
    reply.forecast = ""
    alone = Backtest.from_proto(reply)
    assert alone.ledger is None and alone.forecasts is None and alone.forecast is None
    reply.ClearField("flat")
    with pytest.raises(ValueError, match="flat report"):
        Backtest.from_proto(reply)
