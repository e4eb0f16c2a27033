"""The trace schema of DESIGN §2: columns, dtypes, and validation that names row and column."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traces.errors import TraceError

__all__ = [
    "OPS",
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "COLUMNS",
    "DEFAULT_ARM",
    "Problem",
    "find_problems",
    "validate",
    "empty_trace",
]

OPS: tuple[str, ...] = ("read", "edit", "write", "output")
REQUIRED_COLUMNS: tuple[str, ...] = ("session", "turn", "ts_ms", "op", "path", "size_bytes")
OPTIONAL_COLUMNS: tuple[str, ...] = ("arm", "lines_changed")
COLUMNS: tuple[str, ...] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
DEFAULT_ARM = "main"
INT_COLUMNS: tuple[str, ...] = ("turn", "ts_ms", "size_bytes", "lines_changed")
CATEGORY_COLUMNS: tuple[str, ...] = ("session", "path", "arm")
MAX_LISTED = 5


@dataclass(frozen=True)
class Problem:
    """One schema problem: 0-based row position (or None for the whole table), column, message."""

    row: int | None
    column: str
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}, column {self.column!r}" if self.row is not None else f"column {self.column!r}"
        return f"{where}: {self.message}"


def _show(value: object) -> str:
    """repr of a cell, with numpy scalars shown as plain Python values."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _first_rows(mask: np.ndarray, limit: int = MAX_LISTED) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)[:limit]]


def _codes(series: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """Row codes and category strings of a categorical column (None otherwise): checks run per category."""
    if not isinstance(series.dtype, pd.CategoricalDtype):
        return None
    return series.cat.codes.to_numpy(), np.asarray(series.cat.categories.astype(str), dtype=object)


def _int_problems(df: pd.DataFrame, column: str, problems: list[Problem], minimum: int | None) -> np.ndarray | None:
    series = df[column]
    if series.dtype == np.int64:  # fast path: every value is an integer already
        values = series.to_numpy()
        if minimum is not None:
            for i in _first_rows(values < minimum):
                problems.append(Problem(i, column, f"must be >= {minimum}, got {_show(series.iloc[i])}"))
        return values
    if pd.api.types.is_bool_dtype(series):
        problems.append(Problem(None, column, "expected integers, got booleans"))
        return None
    numeric = pd.to_numeric(series, errors="coerce")
    values = numeric.to_numpy(dtype=float, na_value=np.nan)
    bad = np.isnan(values) | (np.isfinite(values) & (values != np.floor(values))) | np.isinf(values)
    for i in _first_rows(bad):
        problems.append(Problem(i, column, f"expected an integer, got {_show(series.iloc[i])}"))
    if minimum is not None:
        neg = ~bad & (values < minimum)
        for i in _first_rows(neg):
            problems.append(Problem(i, column, f"must be >= {minimum}, got {_show(series.iloc[i])}"))
    return None if bad.any() else values.astype(np.int64)


def find_problems(df: pd.DataFrame) -> list[Problem]:
    """Every schema problem in ``df`` (at most a few per kind), in column order."""
    problems: list[Problem] = []
    if not isinstance(df, pd.DataFrame):
        return [Problem(None, "*", f"expected a pandas DataFrame, got {type(df).__name__}")]
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    for column in missing:
        problems.append(Problem(None, column, "missing column"))
    if missing:
        return problems
    for column in ("session", "path") + (("arm",) if "arm" in df.columns else ()):
        series = df[column]
        coded = _codes(series)
        if coded is not None:
            codes, labels = coded
            empty_label = np.append(np.asarray([len(x) == 0 for x in labels], dtype=bool), True)
            empty = empty_label[codes]  # code -1 (missing) picks the appended True
        else:
            as_str = series.astype("string")
            empty = (series.isna() | (as_str.str.len() == 0)).to_numpy(dtype=bool, na_value=True)
        for i in _first_rows(empty):
            problems.append(Problem(i, column, "empty value"))
    coded = _codes(df["op"])
    if coded is not None:
        codes, labels = coded
        unknown = np.append(~np.isin(labels, OPS), True)[codes]  # code -1 (missing) is unknown too
    else:
        ops = df["op"].astype("string")
        unknown = ~ops.isin(OPS).to_numpy(dtype=bool, na_value=False)
    for i in _first_rows(unknown):
        problems.append(Problem(i, "op", f"unknown op {_show(df['op'].iloc[i])}; expected one of {', '.join(OPS)}"))
    turns = _int_problems(df, "turn", problems, minimum=0)
    times = _int_problems(df, "ts_ms", problems, minimum=None)
    _int_problems(df, "size_bytes", problems, minimum=0)
    if "lines_changed" in df.columns:
        _int_problems(df, "lines_changed", problems, minimum=0)
    if len(df) > 1:
        coded = _codes(df["session"])
        if coded is not None:  # compare codes, look names up only where a message needs them
            keys, labels = coded
            sessions = _Lookup(keys, labels)
        else:
            keys = df["session"].astype("string").to_numpy(dtype=object)
            sessions = keys
        same = np.empty(len(df), dtype=bool)
        same[0] = False
        same[1:] = keys[1:] == keys[:-1]
        for column, values in (("turn", turns), ("ts_ms", times)):
            if values is None:
                continue
            back = np.zeros(len(df), dtype=bool)
            back[1:] = same[1:] & (values[1:] < values[:-1])
            for i in _first_rows(back):
                problems.append(Problem(i, column, f"goes backwards within session {sessions[i]!r} "
                                                   f"({values[i - 1]} then {values[i]})"))
        # a session's rows must be contiguous, or turns could interleave silently
        starts = ~same
        starts[0] = True
        first_seen: dict[object, int] = {}
        for i in np.flatnonzero(starts):
            key = sessions[i]
            if key in first_seen:
                problems.append(Problem(int(i), "session", f"session {key!r} resumes after other sessions' rows "
                                                           f"(first block at row {first_seen[key]}); sort by session"))
                if sum(p.column == "session" for p in problems) >= MAX_LISTED:
                    break
            else:
                first_seen[key] = int(i)
    return problems


class _Lookup:
    """``names[i]`` for row ``i`` of a categorical column, from its codes and labels."""

    def __init__(self, codes: np.ndarray, labels: np.ndarray):
        self.codes, self.labels = codes, labels

    def __getitem__(self, i: int) -> object:
        code = self.codes[i]
        return self.labels[code] if code >= 0 else None


def validate(df: pd.DataFrame, source: str = "trace") -> pd.DataFrame:
    """Check ``df`` against the schema and return it with canonical dtypes.

    Raises `TraceError` whose message names ``source`` and each problem's row and column.
    Optional columns are filled (``arm`` = ``"main"``, ``lines_changed`` = 0); extra columns
    are kept.

    >>> t = validate(pd.DataFrame({"session": ["s"], "turn": [0], "ts_ms": [0], "op": ["read"],
    ...                             "path": ["a.py"], "size_bytes": [10]}))
    >>> list(t.columns), str(t["op"].dtype)
    (['session', 'turn', 'ts_ms', 'op', 'path', 'size_bytes', 'arm', 'lines_changed'], 'category')
    >>> validate(t.assign(size_bytes=[-1]))
    Traceback (most recent call last):
    ...
    traces.errors.TraceError: trace: row 0, column 'size_bytes': must be >= 0, got -1
    """
    problems = find_problems(df)
    if problems:
        shown = "; ".join(str(p) for p in problems[:MAX_LISTED])
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise TraceError(f"{source}: {shown}{more}")
    return _canonical(df)


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy() if not df.index.equals(pd.RangeIndex(len(df))) else df.copy(deep=False)
    out = out.reset_index(drop=True)
    if "arm" not in out.columns:
        out["arm"] = DEFAULT_ARM
    if "lines_changed" not in out.columns:
        out["lines_changed"] = 0
    for column in INT_COLUMNS:
        if out[column].dtype != np.int64:
            out[column] = pd.to_numeric(out[column]).astype(np.int64)
    for column in CATEGORY_COLUMNS:
        if not isinstance(out[column].dtype, pd.CategoricalDtype):
            out[column] = out[column].astype(str).astype("category")
        elif not pd.api.types.is_string_dtype(out[column].cat.categories) and \
                out[column].cat.categories.dtype != object:
            out[column] = out[column].astype(str).astype("category")
    if not (isinstance(out["op"].dtype, pd.CategoricalDtype) and tuple(out["op"].cat.categories) == OPS):
        out["op"] = pd.Categorical(out["op"].astype(str), categories=list(OPS))
    ordered = list(COLUMNS) + [c for c in out.columns if c not in COLUMNS]
    return out[ordered]


def empty_trace() -> pd.DataFrame:
    """A valid trace with no rows, in canonical dtypes."""
    return validate(pd.DataFrame({c: pd.Series([], dtype=object) for c in REQUIRED_COLUMNS}).astype(
        {"turn": np.int64, "ts_ms": np.int64, "size_bytes": np.int64}))
