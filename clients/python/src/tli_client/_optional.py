"""The optional dependencies (pandas, tqdm), imported when first needed with a clear error."""

from __future__ import annotations

from typing import Any


def require_pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "DataFrames need pandas: pip install 'tli-client[pandas]'"
        ) from e
    return pandas


def require_tqdm() -> Any:
    try:
        import tqdm.auto
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "a progress display needs tqdm: pip install 'tli-client[notebook]'"
        ) from e
    return tqdm.auto
