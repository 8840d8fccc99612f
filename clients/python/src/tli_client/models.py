"""Trained models of a host (``tli.v1.ModelService``): typed values, and bars and prediction
rows between pandas and the wire.

A model is a training task with a checkpoint and a model card (its id is the task id, e.g.
``"12"``) or a bundle imported into the host (its id is the name it was imported under). A
:class:`ModelInfo` is a snapshot of one; ``resident`` is set while the model is loaded, i.e.
holds a predictor and a memory reservation on the host's device.

:func:`bars_to_proto` turns bars (a DataFrame with ``open``, ``high``, ``low``, ``close``,
``volume`` and a DatetimeIndex or a ``ts`` / ``timestamp`` column) into the columnar ``Bars``
message; :func:`rows_to_frame` turns ``PredictionRows`` into a DataFrame indexed by UTC
timestamp. Both need pandas (``pip install 'tli-client[pandas]'``).

A :class:`Backtest` is what ``Client.backtest`` returns: a model's outputs traded bar by bar
on bars, priced with the contract's point value and costs, beside buy-and-hold and flat; its
summary, per-bar ledger and forecasts are DataFrames.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._optional import require_pandas
from ._proto.tli.v1 import models_pb2 as mpb

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = [
    "ModelData",
    "ResidentModel",
    "ModelInfo",
    "ModelRef",
    "Backtest",
    "BACKTEST_REPORT_COLUMNS",
    "BACKTEST_STRATEGIES",
    "LEDGER_COLUMNS",
    "BarsLike",
    "TimeLike",
    "BUNDLE_FILES",
    "model_id_of",
    "bars_to_proto",
    "rows_to_frame",
    "time_to_unix_ns",
]

#: The files of a bundle, in the order ExportModel sends them and ImportModel takes them.
BUNDLE_FILES: Tuple[str, str, str] = ("model.json", "weights.safetensors", "checksums.sha256")

#: The columns a bar needs besides its time (matched case-insensitively).
_PRICE_COLUMNS = ("open", "high", "low", "close")
#: Where a bar's time may be when the index is not a DatetimeIndex, in this order.
_TIME_COLUMNS = ("ts", "timestamp", "ts_event")


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _time(unix_ms: int) -> datetime:
    return datetime.fromtimestamp(unix_ms / 1000.0, tz=timezone.utc)


@dataclass(frozen=True)
class ModelData:
    """A file the model was trained on: its name and SHA-256."""

    name: str
    sha256: str


@dataclass(frozen=True)
class ResidentModel:
    """A loaded model: where its predictor lives and what the memory arbiter holds for it."""

    #: ``cpu`` or ``cuda:N``.
    device: str
    #: What the arbiter holds for the predictor (measured, plus the margin), and what the
    #: predictor measured after loading (bytes).
    reserved_bytes: int
    measured_bytes: int
    loaded: datetime
    #: Predict calls answered and streams opened since it was loaded; streams open now.
    predictions: int
    streams: int
    open_streams: int
    #: ``plugin@version`` that serves it (the trained version or a compatible later one).
    served_by: str

    @classmethod
    def from_proto(cls, r: mpb.ResidentModel) -> "ResidentModel":
        return cls(
            device=r.device,
            reserved_bytes=r.reserved_bytes,
            measured_bytes=r.measured_bytes,
            loaded=_time(r.loaded_unix_ms),
            predictions=r.predictions,
            streams=r.streams,
            open_streams=r.open_streams,
            served_by=r.served_by,
        )


@dataclass(frozen=True)
class ModelInfo:
    """A model of the host: where it came from, what it was trained as, whether it is loaded."""

    #: ``"12"`` (a task's model) or an imported model's name.
    id: str
    #: ``"task"`` or ``"imported"``.
    source: str
    #: The task and its job (None for an imported model).
    task_id: Optional[int]
    job_id: Optional[int]
    plugin: str
    plugin_version: str
    #: The config it was trained with.
    config: Dict[str, Any]
    #: The symbols of the assets it was trained on, in asset-index order.
    assets: Tuple[str, ...]
    pooled: bool
    #: Validation and test metrics (finite values only).
    metrics: Dict[str, float]
    #: Steps of the checkpoint it is exported from (a task), or the steps trained (imported).
    steps: int
    #: The task's state (None for an imported model).
    task_state: Optional[str]
    #: Bytes on disk: the newest checkpoint (a task) or the bundle's weights (imported).
    size_bytes: int
    #: Where the training data came from.
    data: Tuple[ModelData, ...]
    #: Set while the model is loaded.
    resident: Optional[ResidentModel]
    #: The model card (model.json) as a dict: from ``Client.model`` only, else None.
    card: Optional[Dict[str, Any]]

    @property
    def is_resident(self) -> bool:
        return self.resident is not None

    @classmethod
    def from_proto(cls, m: mpb.ModelInfo) -> "ModelInfo":
        imported = m.source == "imported"
        config = _json(m.config_json)
        card = _json(m.card_json)
        return cls(
            id=m.id,
            source=m.source,
            task_id=None if imported else m.task_id,
            job_id=None if imported else m.job_id,
            plugin=m.plugin,
            plugin_version=m.plugin_version,
            config=config if isinstance(config, dict) else {},
            assets=tuple(m.assets),
            pooled=m.pooled,
            metrics=dict(m.metrics),
            steps=m.steps,
            task_state=m.task_state or None,
            size_bytes=m.size_bytes,
            data=tuple(ModelData(d.name, d.sha256) for d in m.data),
            resident=ResidentModel.from_proto(m.resident) if m.HasField("resident") else None,
            card=card if isinstance(card, dict) else None,
        )


#: A model given by its :class:`ModelInfo`, its id, or a task id.
ModelRef = Union[ModelInfo, str, int]


def model_id_of(model: ModelRef) -> str:
    if isinstance(model, ModelInfo):
        return model.id
    if isinstance(model, int) and not isinstance(model, bool):
        return str(model)
    if isinstance(model, str):
        if not model.strip():
            raise ValueError("a model id is needed (a task id or an imported model's name)")
        return model.strip()
    raise TypeError(f"a model is a ModelInfo, a model id (str) or a task id (int), not {type(model).__name__}")


#: Bars: a DataFrame (a DatetimeIndex or a ts/timestamp column), one bar as a dict or a Series,
#: a dict of columns, or a list of bars as dicts.
BarsLike = Any

#: A point in time: a pandas Timestamp, a datetime (naive = UTC), a date, a string pandas
#: parses (``"2018-01-01"``, RFC 3339) or UTC nanoseconds (int).
TimeLike = Union[datetime, date, str, int, Any]


def time_to_unix_ns(value: TimeLike, what: str = "time") -> int:
    """UTC nanoseconds of ``value`` (naive times are UTC)."""
    pd = require_pandas()
    if isinstance(value, bool):
        raise TypeError(f"{what}: {value!r} is not a time")
    try:
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what}: {value!r} is not a time ({e})") from None
    if stamp is pd.NaT:
        raise ValueError(f"{what}: {value!r} is not a time")
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return int(stamp.as_unit("ns").value)


def _frame(bars: BarsLike) -> "pandas.DataFrame":
    """Bars in any accepted shape as a DataFrame (a copy when reshaped)."""
    pd = require_pandas()
    if isinstance(bars, pd.DataFrame):
        return bars
    if isinstance(bars, pd.Series):
        one = bars.to_dict()
        keys = {str(k).lower() for k in one}
        if not keys & set(_TIME_COLUMNS) and isinstance(bars.name, (datetime, pd.Timestamp)):
            one["ts"] = bars.name  # a row of a DataFrame indexed by time (df.iloc[i])
        return pd.DataFrame([one])
    if isinstance(bars, Mapping):
        values = list(bars.values())
        if values and not any(pd.api.types.is_scalar(v) for v in values):
            return pd.DataFrame(dict(bars))  # columns
        return pd.DataFrame([dict(bars)])
    if isinstance(bars, Sequence) and not isinstance(bars, str):
        return pd.DataFrame(list(bars))  # bars as dicts
    raise TypeError(
        "bars are a pandas DataFrame (open, high, low, close, volume and a DatetimeIndex or a "
        f"ts/timestamp column), a dict or Series of one bar, or a list of them; not {type(bars).__name__}"
    )


def _timestamps(frame: "pandas.DataFrame", columns: Mapping[str, Any]) -> Any:
    """The bars' times as a UTC DatetimeIndex."""
    pd = require_pandas()
    if isinstance(frame.index, pd.DatetimeIndex):
        index = frame.index
        index = index.tz_localize("UTC") if index.tz is None else index.tz_convert("UTC")
    else:
        name = next((columns[c] for c in _TIME_COLUMNS if c in columns), None)
        if name is None:
            raise ValueError(
                "bars need their times: a DatetimeIndex, or a ts / timestamp column "
                f"(the columns are {', '.join(map(str, frame.columns))})"
            )
        try:
            index = pd.DatetimeIndex(pd.to_datetime(frame[name], utc=True))
        except (TypeError, ValueError):
            try:  # RFC 3339 / ISO 8601 times not all written alike ("…T00:00:00Z", "2024-01-03")
                index = pd.DatetimeIndex(pd.to_datetime(frame[name], utc=True, format="ISO8601"))
            except (TypeError, ValueError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise ValueError(f"bars: column {name!r} does not hold times ({first})") from None
    if index.isna().any():
        raise ValueError("bars: a bar has no time (NaT)")
    return index


def bars_to_proto(
    bars: BarsLike,
    symbol: Optional[str] = None,
    interval: Optional[str] = None,
    *,
    default_symbol: Optional[str] = None,
) -> mpb.Bars:
    """The ``Bars`` message of one symbol's bars (oldest first; the host checks every row).

    The symbol is ``symbol``, else the bars' ``symbol`` column (one value), else
    ``default_symbol``. ``interval``: ``1s``, ``1m``, ``1h`` or ``1d``; None = inferred by the
    host from the timestamps. Every other column goes with the bars (numbers as values,
    anything else as labels): a model trained on columns of your own reads them.
    """
    pd = require_pandas()
    frame = _frame(bars)
    columns = {str(c).lower(): c for c in frame.columns}
    missing = [c for c in (*_PRICE_COLUMNS, "volume") if c not in columns]
    if missing:
        raise ValueError(
            f"bars: no column {', '.join(missing)} (the columns are "
            f"{', '.join(map(str, frame.columns)) or 'none'})"
        )
    index = _timestamps(frame, columns)
    if symbol is None and "symbol" in columns:
        found = [str(s) for s in pd.unique(frame[columns["symbol"]].dropna())]
        if len(found) > 1:
            raise ValueError(
                f"bars: several symbols ({', '.join(found[:5])}); give the bars of one symbol"
            )
        symbol = found[0] if found else None
    symbol = symbol if symbol is not None else default_symbol
    if not symbol or not str(symbol).strip():
        raise ValueError("bars: no symbol; pass symbol=… or give the bars a symbol column")
    prices = {}
    for name in _PRICE_COLUMNS:
        try:
            prices[name] = pd.to_numeric(frame[columns[name]]).astype("float64").tolist()
        except (TypeError, ValueError) as e:
            raise ValueError(f"bars: column {columns[name]!r} is not numeric ({e})") from None
    try:
        volume = pd.to_numeric(frame[columns["volume"]])
    except (TypeError, ValueError) as e:
        raise ValueError(f"bars: column {columns['volume']!r} is not numeric ({e})") from None
    bad = volume.isna() | (volume < 0) | (volume % 1 != 0)
    if bad.any():
        at = index[int(bad.to_numpy().argmax())]
        raise ValueError(
            f"bars: volume at {at.isoformat()} is {volume[bad].iloc[0]!r}; volumes are whole "
            "numbers >= 0"
        )
    return mpb.Bars(
        symbol=str(symbol).strip(),
        interval=interval or "",
        ts_unix_ns=index.as_unit("ns").asi8.tolist(),
        open=prices["open"],
        high=prices["high"],
        low=prices["low"],
        close=prices["close"],
        volume=volume.astype("uint64").tolist(),
        columns=_own_columns(frame),
    )


#: Columns of a bars frame that are not the user's own.
_BAR_COLUMNS = frozenset((*_PRICE_COLUMNS, "volume", "symbol", *_TIME_COLUMNS, "datetime", "date"))


def _own_columns(frame: "pandas.DataFrame") -> List[mpb.BarColumn]:
    """The frame's other columns, for a model trained on columns of its own: numbers (and
    booleans) as values, NaN where missing; anything else as labels, "" where missing."""
    pd = require_pandas()
    out: List[mpb.BarColumn] = []
    for name in frame.columns:
        if str(name).lower() in _BAR_COLUMNS:
            continue
        series = frame[name]
        if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
            values = pd.to_numeric(series, errors="coerce").astype("float64").tolist()
            out.append(mpb.BarColumn(name=str(name), values=values))
        else:
            labels = ["" if pd.isna(v) else str(v) for v in series.tolist()]
            out.append(mpb.BarColumn(name=str(name), labels=labels))
    return out


def rows_to_frame(
    rows: Optional[mpb.PredictionRows], columns: Sequence[str] = ()
) -> "pandas.DataFrame":
    """Prediction rows as a DataFrame: a UTC DatetimeIndex named ``timestamp``, a ``symbol``
    column, then one float column per output (NaN kept). ``columns``: the output columns of
    an answer without rows (a stream warming up), so empty frames concatenate cleanly."""
    pd = require_pandas()
    names = list(rows.columns) if rows is not None and rows.columns else list(columns)
    stamps = list(rows.ts_unix_ns) if rows is not None else []
    values = list(rows.values) if rows is not None else []
    width = len(names)
    if len(values) != len(stamps) * width:
        raise ValueError(
            f"the host sent {len(values)} values for {len(stamps)} rows of {width} columns"
        )
    index = pd.DatetimeIndex(pd.to_datetime(stamps, unit="ns", utc=True), name="timestamp")
    data: Dict[str, Any] = {"symbol": [rows.symbol if rows is not None else ""] * len(stamps)}
    for j, name in enumerate(names):
        data[name] = pd.Series(values[j::width] if width else [], index=index, dtype="float64")
    frame = pd.DataFrame(data, index=index)
    frame["symbol"] = frame["symbol"].astype(str)
    return frame


#: The columns of :attr:`Backtest.summary`: the fields of ``BacktestReport``, in proto order.
BACKTEST_REPORT_COLUMNS: Tuple[str, ...] = (
    "net_pnl",
    "gross_pnl",
    "costs",
    "periods",
    "mean_pnl",
    "std_pnl",
    "sharpe",
    "sortino",
    "max_drawdown",
    "max_drawdown_periods",
    "turnover",
    "avg_turnover",
    "hit_rate",
    "periods_in_market",
    "exposure",
    "trades",
)
#: The summary's integer columns (counts of periods and trades; int64).
_REPORT_INTS = frozenset({"periods", "max_drawdown_periods", "periods_in_market", "trades"})
#: The rows of :attr:`Backtest.summary` and the response fields they come from.
BACKTEST_STRATEGIES: Tuple[Tuple[str, str], ...] = (
    ("model", "strategy"),
    ("buy_and_hold", "buy_and_hold"),
    ("flat", "flat"),
)
#: The ledger's columns after ``symbol``, as the host sends them.
LEDGER_COLUMNS: Tuple[str, ...] = (
    "close",
    "position",
    "gross_pnl",
    "costs",
    "net_pnl",
    "equity",
    "roll",
    "buy_and_hold_equity",
)


@dataclass(frozen=True, eq=False)
class Backtest:
    """A model's outputs traded on bars (``Client.backtest``), beside buy-and-hold (one
    contract long throughout) and flat on the same bars. P&L and costs are in ``currency``.

    Compared by identity (it holds DataFrames).
    """

    #: The model's id and ``plugin@version`` that answered.
    model: str
    served_by: str
    symbol: str
    #: ``"agent"`` (its own positions) or the position rule (``"sign"``, ``"scaled"``,
    #: ``"threshold:0.1"``).
    positions_from: str
    #: The forecast column the rule read (``"fwd_logret_1:mean"``, ``"…:p50"``); None for an
    #: agent.
    forecast: Optional[str]
    #: Commission per contract traded (currency) and slippage in ticks per contract traded.
    commission: float
    slippage_ticks: float
    #: commission + slippage_ticks × tick size × point value: the cost of one contract traded.
    cost_per_contract: float
    point_value: float
    currency: str
    #: One row per strategy, indexed ``model``, ``buy_and_hold``, ``flat``; one column per
    #: ``BacktestReport`` field (:data:`BACKTEST_REPORT_COLUMNS`): ``net_pnl``, ``gross_pnl``,
    #: ``costs``, ``periods``, ``mean_pnl``, ``std_pnl``, ``sharpe``, ``sortino``,
    #: ``max_drawdown``, ``max_drawdown_periods``, ``turnover``, ``avg_turnover``,
    #: ``hit_rate``, ``periods_in_market``, ``exposure``, ``trades`` (counts as int64).
    summary: "pandas.DataFrame"
    #: One row per bar traded, indexed by UTC ``timestamp``: ``symbol``, ``close``,
    #: ``position`` (decided at this bar's close, held over the next), ``gross_pnl``,
    #: ``costs``, ``net_pnl``, ``equity`` (cumulative net), ``roll`` (bool: the bar starts a
    #: new contract), ``buy_and_hold_equity``. None with ``summary_only``.
    ledger: Optional["pandas.DataFrame"]
    #: A forecaster's outputs as traded (log returns), indexed like the ledger: ``symbol``,
    #: ``p50`` (or the point forecast), ``p10`` and ``p90`` (absent for a point forecast),
    #: ``actual``. None for an agent and with ``summary_only``.
    forecasts: Optional["pandas.DataFrame"]

    @classmethod
    def from_proto(cls, r: mpb.BacktestResponse) -> "Backtest":
        """A ``BacktestResponse`` as a :class:`Backtest`; ``ValueError`` when it lacks a
        report or a ledger column. Needs pandas."""
        pd = require_pandas()
        reports = []
        for row, field in BACKTEST_STRATEGIES:
            if not r.HasField(field):
                raise ValueError(f"the host sent a backtest without its {row} report")
            report = getattr(r, field)
            reports.append([getattr(report, c) for c in BACKTEST_REPORT_COLUMNS])
        summary = pd.DataFrame(
            reports,
            index=[row for row, _ in BACKTEST_STRATEGIES],
            columns=list(BACKTEST_REPORT_COLUMNS),
        ).astype({c: "int64" if c in _REPORT_INTS else "float64" for c in BACKTEST_REPORT_COLUMNS})
        ledger = None
        if r.HasField("ledger"):
            ledger = rows_to_frame(r.ledger)
            missing = [c for c in LEDGER_COLUMNS if c not in ledger.columns]
            if missing:
                raise ValueError(f"the host sent a backtest ledger without {', '.join(missing)}")
            ledger["roll"] = ledger["roll"] != 0.0
            ledger.attrs.update(model=r.model, served_by=r.served_by)
        forecasts = None
        if r.HasField("forecasts"):
            forecasts = rows_to_frame(r.forecasts)
            forecasts.attrs.update(model=r.model, served_by=r.served_by)
        return cls(
            model=r.model,
            served_by=r.served_by,
            symbol=r.symbol,
            positions_from=r.positions_from,
            forecast=r.forecast or None,
            commission=r.commission,
            slippage_ticks=r.slippage_ticks,
            cost_per_contract=r.cost_per_contract,
            point_value=r.point_value,
            currency=r.currency,
            summary=summary,
            ledger=ledger,
            forecasts=forecasts,
        )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_checksums(text: str) -> Dict[str, str]:
    """``checksums.sha256`` (``sha256sum`` format) as {file: hex digest}."""
    found: Dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.strip().partition(" ")
        name = name.strip().lstrip("*")
        if not sep or len(digest) != 64 or not name or any(c not in "0123456789abcdef" for c in digest.lower()):
            raise ValueError(f"checksums.sha256 line {number} is not `<sha256>  <file>`: {line[:80]!r}")
        found[name] = digest.lower()
    return found
