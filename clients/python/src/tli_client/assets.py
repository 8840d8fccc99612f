"""Assets of a job: a bar file on the host or the synthetic AR(1) dataset.

Wherever an asset is expected, the CLI's text forms work too: ``"synthetic:ROWS"``,
``"synthetic:ROWS:SEED"``, ``"synthetic:ROWS:SEED:SIGMA"``, a bar file path on the host
(``"data/samples/es.dbn.zst"``), or ``"SYMBOL=PATH"`` naming the bars' symbol
(``"ES=/data/es_1m.csv"``; write ``./synthetic:…`` for a file of that name).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from ._proto.tli.v1 import training_pb2 as pb

__all__ = [
    "SyntheticAsset",
    "BarFile",
    "AssetLike",
    "synthetic",
    "bar_file",
    "parse_asset",
    "walk_forward_to_proto",
]

_SYMBOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")


@dataclass(frozen=True)
class SyntheticAsset:
    """The synthetic AR(1) dataset: ``rows`` bars, ``seed`` (0 = 1), ``sigma`` (0 = 0.01)."""

    rows: int
    seed: int = 0
    sigma: float = 0.0

    def to_proto(self) -> pb.AssetSpec:
        return pb.AssetSpec(
            synthetic=pb.SyntheticAsset(rows=self.rows, seed=self.seed, sigma=self.sigma)
        )


@dataclass(frozen=True)
class BarFile:
    """A bar file (DBN, Parquet or CSV) on the host, under one of its ``--data-root``s.

    ``symbol`` names the bars' symbol (``ES``) when the file does not; ``tz`` is the IANA zone
    of timestamps written without one; ``start`` / ``end`` (inclusive; dates, datetimes,
    strings, UTC nanoseconds) use only the bars between them (docs/data.md; needs pandas).
    """

    path: str
    symbol: Optional[str] = None
    tz: Optional[str] = None
    start: Optional[Any] = None
    end: Optional[Any] = None

    def to_proto(self) -> pb.AssetSpec:
        spec = pb.AssetSpec(data_path=self.path, symbol=self.symbol or "", tz=self.tz or "")
        if self.start is not None or self.end is not None:
            from .models import time_to_unix_ns

            if self.start is not None:
                spec.start_unix_ns = time_to_unix_ns(self.start, "start")
            if self.end is not None:
                spec.end_unix_ns = time_to_unix_ns(self.end, "end")
        return spec


AssetLike = Union[SyntheticAsset, BarFile, str, "os.PathLike[str]"]


def synthetic(rows: int, seed: int = 0, sigma: float = 0.0) -> SyntheticAsset:
    """The synthetic AR(1) dataset (what ``synthetic:ROWS:SEED:SIGMA`` says)."""
    return SyntheticAsset(rows, seed, sigma)


def bar_file(
    path: Union[str, "os.PathLike[str]"],
    symbol: Optional[str] = None,
    tz: Optional[str] = None,
    start: Optional[Any] = None,
    end: Optional[Any] = None,
) -> BarFile:
    """A bar file on the host (the path as the host sees it), optionally cut to the bars
    from ``start`` to ``end``."""
    return BarFile(os.fspath(path), symbol, tz, start, end)


def parse_asset(text: str) -> Union[SyntheticAsset, BarFile]:
    """An asset from the CLI's text form (``synthetic:2000:7``, ``ES=prices.csv``, a path)."""
    text = text.strip()
    if not text:
        raise ValueError("asset: empty; give a bar file path, synthetic:ROWS or synthetic:ROWS:SEED")
    if text.startswith("synthetic:"):
        parts = text[len("synthetic:") :].split(":")
        bad = ValueError(
            f"asset {text!r}: expected synthetic:ROWS, synthetic:ROWS:SEED or "
            "synthetic:ROWS:SEED:SIGMA (whole numbers, SIGMA a positive number)"
        )
        if len(parts) > 3 or not all(p.isdigit() for p in parts[:2]):
            raise bad
        sigma = 0.0
        if len(parts) == 3:
            try:
                sigma = float(parts[2])
            except ValueError:
                raise bad from None
            if not (math.isfinite(sigma) and sigma > 0):
                raise bad
        return SyntheticAsset(int(parts[0]), int(parts[1]) if len(parts) > 1 else 1, sigma)
    symbol, sep, path = text.partition("=")
    if sep and _SYMBOL.match(symbol):
        if not path.strip():
            raise ValueError(f"asset {text!r}: give the bar file after the = ({symbol}=prices.csv)")
        return BarFile(path, symbol)
    return BarFile(text)


def asset_to_proto(asset: AssetLike) -> pb.AssetSpec:
    """The tli.v1 AssetSpec of any asset form."""
    if isinstance(asset, (SyntheticAsset, BarFile)):
        return asset.to_proto()
    if isinstance(asset, str):
        return parse_asset(asset).to_proto()
    if isinstance(asset, os.PathLike):
        return BarFile(os.fspath(asset)).to_proto()
    raise TypeError(
        f"an asset is synthetic(rows, …), bar_file(path, …), or the text forms "
        f"'synthetic:ROWS[:SEED[:SIGMA]]' / '[SYMBOL=]PATH', not {type(asset).__name__}"
    )


_WALK_KEYS = {"folds", "test_bars", "train_bars", "test_starts"}


def walk_forward_to_proto(spec: Mapping[str, Any]) -> pb.WalkForward:
    """A job's walk-forward folds (``folds``, ``test_bars``, ``train_bars``, ``test_starts``:
    dates, datetimes or UTC nanoseconds) as the API's message; unknown keys are refused."""
    unknown = set(spec) - _WALK_KEYS
    if unknown:
        raise ValueError(f"walk_forward: unknown keys {sorted(unknown)}; use {sorted(_WALK_KEYS)}")
    message = pb.WalkForward(
        folds=int(spec.get("folds", 0)),
        test_bars=int(spec.get("test_bars", 0)),
        train_bars=int(spec.get("train_bars", 0)),
    )
    starts = spec.get("test_starts") or []
    if starts:
        from .models import time_to_unix_ns

        message.test_starts_unix_ns.extend(time_to_unix_ns(t, "test_starts") for t in starts)
    return message
