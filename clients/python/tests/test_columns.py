"""Your own columns from Python, against a real host (the ``client`` fixture): a pandas
DataFrame with columns of its own (an order-flow signal that leads the next return, and a
label) written to Parquet, trained on with ``features={"columns": [...]}``, and predicted
from the DataFrame itself (its other columns go with the bars). The same frame without the
signal is refused naming it. Offline: ``bars_to_proto`` sends every other column, numbers
as values and anything else as labels.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tli_client import Client, InvalidArgument, TaskState, TemplateConfig, bar_file
from tli_client.models import bars_to_proto

pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")


def _frame(n: int = 900, seed: int = 5) -> "pd.DataFrame":
    """Daily bars whose next return loads 0.5σ on ``ofi`` (σ = 1%), with a ``regime`` label."""
    rng = np.random.default_rng(seed)
    ofi = rng.standard_normal(n)
    ret = 0.01 * (0.5 * np.r_[0.0, ofi[:-1]] + math.sqrt(0.75) * rng.standard_normal(n))
    close = 2000.0 * np.exp(np.cumsum(ret))
    open_ = np.r_[2000.0, close[:-1]]
    index = pd.bdate_range("2015-01-02", periods=n, tz="UTC", name="ts_event")
    return pd.DataFrame(
        {
            "open": open_,
            "high": np.maximum(open_, close) * 1.002,
            "low": np.minimum(open_, close) * 0.998,
            "close": close,
            "volume": 1000,
            "ofi": ofi,
            "regime": np.where(np.abs(ofi) > 1.0, "wild", "calm"),
        },
        index=index,
    )


def test_bars_carry_their_other_columns() -> None:
    frame = _frame(5)
    frame.loc[frame.index[1], "ofi"] = float("nan")
    frame.loc[frame.index[2], "regime"] = None
    bars = bars_to_proto(frame, symbol="ES")
    sent = {c.name: c for c in bars.columns}
    assert set(sent) == {"ofi", "regime"}
    assert len(sent["ofi"].values) == 5 and not sent["ofi"].labels
    assert math.isnan(sent["ofi"].values[1])
    assert list(sent["regime"].labels)[2] == "" and not sent["regime"].values


def test_a_parquet_frame_with_columns_of_its_own_trains_and_predicts(client: Client) -> None:
    data_dir = os.environ.get("TLI_TEST_DATA_DIR")
    if not data_dir:
        pytest.fail("TLI_TEST_DATA_DIR is not set (a directory under the host's data roots)")
    frame = _frame()
    path = Path(data_dir) / "own-columns.parquet"
    frame.to_parquet(path)
    features = {
        "columns": [
            {"name": "ofi", "role": "observed_past", "transform": "zscore"},
            {"name": "regime", "role": "observed_past", "kind": "categorical"},
        ]
    }
    job = client.start(TemplateConfig(), bar_file(str(path), "ES"), steps=200, seed=3,
                       name="own-columns", features=features)
    final = client.wait(job, interval_ms=50, timeout=120)
    task = final.tasks[0]
    assert task.state is TaskState.COMPLETED, task
    # The signal is learnt: the forecast follows the next return.
    assert task.metrics["test_correlation"] > 0.2, task.metrics

    model = client.model(task.task_id)
    assert model.card is not None
    assert [c["name"] for c in model.card["features"]["columns"]] == ["ofi", "regime"]
    assert model.card["inputs"]["feature_names"][-3:] == ["ofi", "regime=calm", "regime=wild"]
    client.load_model(task.task_id)
    out = client.predict(task.task_id, frame.iloc[-300:], symbol="ES")
    assert len(out) > 200 and out.iloc[:, 1].notna().all()
    # The forecast follows ofi: the frame's own column reached the model.
    assert np.corrcoef(out.iloc[:, 1], frame["ofi"].loc[out.index])[0, 1] > 0.5

    with pytest.raises(InvalidArgument, match="ofi"):
        client.predict(task.task_id, frame.drop(columns=["ofi"]).iloc[-300:], symbol="ES")
