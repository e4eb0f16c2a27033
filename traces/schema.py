"""The trace schema of docs/design.md §2: columns, dtypes, and validation that names row and column."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pandas as pd

from ctxbench.traces.errors import TraceError
from ctxbench.traces.model_ratios import MAX_MODEL_CHARS
from ctxbench.traces.vocabulary import KINDS, OPS, PINNED_OPS

__all__ = [
    "OPS",
    "PINNED_OPS",
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "COLUMNS",
    "DEFAULT_ARM",
    "Problem",
    "Carry",
    "MAX_VALUE",
    "MAX_TOTAL",
    "LIMITS",
    "find_problems",
    "validate",
    "within_limits",
    "exact_sum",
    "category_labels",
    "empty_trace",
]

# The ops (`OPS`, `PINNED_OPS`) and content kinds are the event vocabulary's (`traces.vocabulary`).
REQUIRED_COLUMNS: tuple[str, ...] = ("session", "turn", "ts_ms", "op", "path", "size_bytes")
#: ``kind`` (a content kind of `traces.tokens.KINDS`, empty for the op's own) is kept only when a
#: trace has it: a trace without it loads, and is written, as before.
#: ``model`` (the model that made the turn's call, as the log names it; empty where unknown) and
#: ``exact_tokens`` (the event's content in tokens, counted at import; 0 where its kind's ratio counts it) likewise.
#: ``truncated`` (true where the agent's tool cut the result to its cap, so that ``size_bytes`` is what it
#: kept: docs/design.md §2) likewise: a trace without it has nothing cut, and loads as before.
OPTIONAL_COLUMNS: tuple[str, ...] = ("arm", "lines_changed", "kind", "model", "exact_tokens", "truncated")
COLUMNS: tuple[str, ...] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
DEFAULT_ARM = "main"
INT_COLUMNS: tuple[str, ...] = ("turn", "ts_ms", "size_bytes", "lines_changed")
CATEGORY_COLUMNS: tuple[str, ...] = ("session", "path", "arm")
MAX_LISTED = 5

# Limits. Every integer in a trace has magnitude at most 2**50, and size_bytes and lines_changed also
# add up to at most 2**50 over a trace, so that no number the program forms from them can overflow or
# lose precision:
# - each byte count of a replay (accessed, missed, re-read, evicted or resident bytes, per turn,
#   session or grid) adds sizes of the events of the traces replayed, each at most twice (a miss
#   re-reads a revision that some event brought): <= 2**51, exact in int64 and in float64 (tokens are
#   bytes / bytes-per-token as floats; trace statistics sum sizes as floats). `ctxbench run` holds the
#   traces of one run to the same total. Means over turns of resident bytes sum exactly (`exact_sum`).
# - turn numbers and timestamps in [-2**50, 2**50] (35,000 years of epoch milliseconds): every
#   difference and duration is <= 2**51, exact in int64 and float64.
# - counts (events, turns, accesses) are at most the rows of a trace.
MAX_VALUE = 2**50
MAX_TOTAL = 2**50
LIMITS: dict[str, tuple[int, int]] = {
    "turn": (0, MAX_VALUE), "ts_ms": (-MAX_VALUE, MAX_VALUE),
    "size_bytes": (0, MAX_VALUE), "lines_changed": (0, MAX_VALUE),
    "usage_input_tokens": (0, MAX_VALUE),   # an import's real input tokens per turn, where the trace has them
    "exact_tokens": (0, MAX_VALUE),
}
#: Columns of true/false (the real compaction points an import adds, the results an agent's cap cut), and the
#: values that spell each.
FLAG_COLUMNS: tuple[str, ...] = ("compact_before", "truncated")
#: The ops whose event a tool's cap can cut (`truncated`): a tool's result, not content the model wrote.
CUT_OPS: tuple[str, ...] = ("read", "edit", "write", "output")
_TRUE, _FALSE = frozenset({"true", "1", "1.0"}), frozenset({"false", "0", "0.0", ""})
TOTAL_COLUMNS: tuple[str, ...] = ("size_bytes", "lines_changed")
_DIGITS = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


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
    """repr of a cell, with numpy scalars shown as plain Python values and decimals as written."""
    if isinstance(value, Decimal):
        return str(value)
    return repr(value.item() if isinstance(value, np.generic) else value)


def _first_rows(mask: np.ndarray, limit: int = MAX_LISTED) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)[:limit]]


def _codes(series: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """Row codes and category strings of a categorical column (None otherwise): checks run per category."""
    if not isinstance(series.dtype, pd.CategoricalDtype):
        return None
    return series.cat.codes.to_numpy(), category_labels(series)


def category_labels(series: pd.Series) -> np.ndarray:
    """The categories of a categorical column as an object array of str (taken as they are when they are
    str already, which for a column of a million paths saves converting them twice)."""
    categories = series.cat.categories
    if categories.dtype == object and pd.api.types.infer_dtype(categories, skipna=False) in ("string", "empty"):
        return categories.to_numpy(dtype=object)
    return np.asarray(categories.astype(str), dtype=object)


def _limit_text(limit: int) -> str:
    return f"{limit:,} (2**{limit.bit_length() - 1})" if limit & (limit - 1) == 0 else f"{limit:,}"


def _range_message(value: object, parsed: int, low: int, high: int) -> str:
    """Why ``value`` (the integer ``parsed``, quoted as written) is outside ``[low, high]``."""
    shown = _show(value)
    if low == 0:
        return f"must be >= 0, got {shown}" if parsed < 0 else f"must be at most {_limit_text(high)}, got {shown}"
    return f"must be between -{_limit_text(-low)} and {_limit_text(high)}, got {shown}"


def _parse_int(value: object, low: int, high: int) -> int | None:
    """``value`` as an exact int when it is one (an int, an integral float or decimal, or the text of
    one), clamped just outside ``[low, high]`` when far beyond; None when it is no integer."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value) or not value.is_integer():
            return None
        return int(value) if abs(value) <= 2.0 ** 63 else (high + 1 if value > 0 else low - 1)
    if isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):  # a plain integer, of any length
            digits = text.lstrip("+-").lstrip("0")
            if len(digits) > 19:
                return low - 1 if text.startswith("-") else high + 1
            return int(text)
        if not _NUMBER.fullmatch(text):
            return None
        value = Decimal(text)
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        if value > high or value < low:  # compared before int(): "1e999999" must not become a huge int
            return high + 1 if value > high else low - 1
        return int(value) if value == value.to_integral_value() else None
    return None


def _int_column(df: pd.DataFrame, column: str, problems: list[Problem], low: int, high: int) -> np.ndarray | None:
    """The column as exact int64 values in ``[low, high]``; None (and problems) where a value is not.

    Values are taken exactly whatever the column holds (int64, unsigned, floats, decimals, text of
    integers, mixed objects), and quoted as written in the problems.
    """
    series = df[column]
    dtype = series.dtype
    if dtype == np.int64:  # fast path: every value is an integer already
        values = series.to_numpy()
        for i in _first_rows((values < low) | (values > high)):
            problems.append(Problem(i, column, _range_message(series.iloc[i], int(values[i]), low, high)))
        return values
    if pd.api.types.is_bool_dtype(dtype):
        problems.append(Problem(None, column, "expected integers, got booleans"))
        return None
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":  # other widths, unsigned: compare before casting
        values = series.to_numpy()
        out = (values > high) | ((values < low) if dtype.kind == "i" else np.zeros(len(values), dtype=bool))
        for i in _first_rows(out):
            problems.append(Problem(i, column, _range_message(series.iloc[i], int(values[i]), low, high)))
        return None if out.any() else values.astype(np.int64)
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        values = series.to_numpy()
        with np.errstate(invalid="ignore"):
            not_int = ~np.isfinite(values) | (values != np.floor(values))
            out = ~not_int & ((values < low) | (values > high))
        for i in _first_rows(not_int):
            problems.append(Problem(i, column, f"expected an integer, got {_show(series.iloc[i])}"))
        for i in _first_rows(out):
            problems.append(Problem(i, column, _range_message(series.iloc[i], -1 if values[i] < 0 else 1, low, high)))
        return None if (not_int | out).any() else values.astype(np.int64)  # exact: |values| <= 2**50 < 2**53
    raw = series.to_numpy(dtype=object)
    parsed = [_parse_int(v, low, high) for v in raw]
    not_int = np.fromiter((p is None for p in parsed), dtype=bool, count=len(parsed))
    out = np.fromiter((p is not None and not low <= p <= high for p in parsed), dtype=bool, count=len(parsed))
    for i in _first_rows(not_int):
        problems.append(Problem(i, column, f"expected an integer, got {_show(raw[i])}"))
    for i in _first_rows(out):
        problems.append(Problem(i, column, _range_message(raw[i], parsed[i], low, high)))
    if (not_int | out).any():
        return None
    return np.fromiter(parsed, dtype=np.int64, count=len(parsed))


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of an int64 array of fewer than 2**31 values, as a Python int (numpy's wraps).

    >>> exact_sum(np.array([2**62, 2**62, 2**62]))
    13835058055282163712
    """
    values = np.asarray(values, dtype=np.int64)
    return (int((values >> 32).sum()) << 32) + int((values & 0xFFFFFFFF).sum())


def _total_problems(column: str, values: np.ndarray, problems: list[Problem], carry: "Carry | None") -> None:
    total = exact_sum(values) + (carry.totals.get(column, 0) if carry is not None else 0)
    if total > MAX_TOTAL:
        so_far = f" by row {carry.offset + len(values) - 1}" if carry is not None and carry.offset else ""
        problems.append(Problem(None, column, f"the values add up to {total:,}{so_far}, more than the "
                                              f"{_limit_text(MAX_TOTAL)} a trace may hold"))
    elif carry is not None:
        carry.totals[column] = total


@dataclass
class Carry:
    """What validating a file chunk by chunk carries from one chunk to the next, so that each chunk is
    held to the rules of the whole file: rows numbered in the file, a session's turns and times
    non-decreasing across a chunk's edge, a session's rows contiguous, totals over the file."""

    offset: int = 0                     # rows of the file before the next chunk
    last_session: object = None         # the session of the last row so far, and its turn and time
    last_turn: int | None = None
    last_ts: int | None = None
    first_seen: dict = field(default_factory=dict)   # each session so far -> its first row in the file
    totals: dict = field(default_factory=dict)       # each column of `TOTAL_COLUMNS` -> its sum so far


def within_limits(df: pd.DataFrame) -> bool:
    """Whether ``df``'s integer columns (already int64) hold values and totals inside `LIMITS`."""
    for column, (low, high) in LIMITS.items():
        if column in df.columns:
            values = df[column].to_numpy()
            if len(values) and (values.min() < low or values.max() > high):
                return False
            if column in TOTAL_COLUMNS and exact_sum(values) > MAX_TOTAL:
                return False
    return True


def find_problems(df: pd.DataFrame) -> list[Problem]:
    """Every schema problem in ``df`` (at most a few per kind), in column order."""
    return _check(df)[0]


def _check(df: pd.DataFrame, carry: Carry | None = None) -> tuple[list[Problem], dict[str, np.ndarray]]:
    """The problems of ``df`` (rows numbered from ``carry.offset``, and held to what ``carry`` says of
    the rows before it), and its integer columns as exact int64 values (where they all are)."""
    problems, parsed = _check_rows(df, carry)
    if carry is None or not carry.offset:
        return problems, parsed
    return [Problem(p.row + carry.offset if p.row is not None else None, p.column, p.message)
            for p in problems], parsed


def _check_rows(df: pd.DataFrame, carry: Carry | None) -> tuple[list[Problem], dict[str, np.ndarray]]:
    """`_check` with rows numbered from 0 in ``df``."""
    problems: list[Problem] = []
    parsed: dict[str, np.ndarray] = {}
    if not isinstance(df, pd.DataFrame):
        return [Problem(None, "*", f"expected a pandas DataFrame, got {type(df).__name__}")], parsed
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    for column in missing:
        problems.append(Problem(None, column, "missing column"))
    if missing:
        return problems, parsed
    for column in ("session", "path") + (("arm",) if "arm" in df.columns else ()):
        series = df[column]
        coded = _codes(series)
        if coded is not None:
            codes, labels = coded
            empty_label = np.append(~labels.astype(bool), True)   # a str is false when empty
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
    if "kind" in df.columns:
        kinds = df["kind"].astype("string").fillna("")
        unknown = ~kinds.isin(("",) + KINDS).to_numpy(dtype=bool)
        for i in _first_rows(unknown):
            problems.append(Problem(i, "kind", f"unknown content kind {_show(df['kind'].iloc[i])}; expected one of "
                                               f"{', '.join(KINDS)} (or empty for the op's own)"))
    if "model" in df.columns:
        _model_problems(df["model"], problems)
    for column in FLAG_COLUMNS:
        if column in df.columns and df[column].dtype != bool:
            text = df[column].astype("string").fillna("").str.strip().str.lower()
            for i in _first_rows(~text.isin(_TRUE | _FALSE).to_numpy(dtype=bool)):
                problems.append(Problem(i, column, f"expected true or false, got {_show(df[column].iloc[i])}"))
    if "truncated" in df.columns:
        _truncated_problems(df, problems)
    for column, (low, high) in LIMITS.items():
        if column in df.columns:
            values = _int_column(df, column, problems, low, high)
            if values is not None:
                parsed[column] = values
                if column in TOTAL_COLUMNS and not any(p.column == column for p in problems):
                    _total_problems(column, values, problems, carry)
    turns, times = parsed.get("turn"), parsed.get("ts_ms")
    if len(df) > 1 or (carry is not None and len(df)):
        _order_problems(df, turns, times, problems, carry)
    return problems, parsed


def _order_problems(df: pd.DataFrame, turns: np.ndarray | None, times: np.ndarray | None, problems: list[Problem],
                    carry: Carry | None) -> None:
    """Turns or times that go backwards within a session, and sessions whose rows are not contiguous;
    then, with no problem found, ``carry`` updated past ``df``."""
    coded = _codes(df["session"])
    if coded is not None:  # compare codes, look names up only where a message needs them
        keys, labels = coded
        sessions = _Lookup(keys, labels)
    else:
        keys = df["session"].astype("string").to_numpy(dtype=object)
        sessions = keys
    offset = carry.offset if carry is not None else 0
    same = np.empty(len(df), dtype=bool)
    same[0] = carry is not None and carry.last_session is not None and sessions[0] == carry.last_session
    same[1:] = keys[1:] == keys[:-1]
    for column, values, last in (("turn", turns, carry and carry.last_turn), ("ts_ms", times, carry and carry.last_ts)):
        if values is None:
            continue
        back = np.zeros(len(df), dtype=bool)
        back[0] = same[0] and last is not None and values[0] < last
        back[1:] = same[1:] & (values[1:] < values[:-1])
        for i in _first_rows(back):
            before = values[i - 1] if i else last
            problems.append(Problem(i, column, f"goes backwards within session {sessions[i]!r} "
                                               f"({before} then {values[i]})"))
    # a session's rows must be contiguous, or turns could interleave silently
    first_seen: dict[object, int] = carry.first_seen if carry is not None else {}
    for i in np.flatnonzero(~same):
        key = sessions[i]
        if key in first_seen:
            problems.append(Problem(int(i), "session", f"session {key!r} resumes after other sessions' rows "
                                                       f"(first block at row {first_seen[key]}); sort by session"))
            if sum(p.column == "session" for p in problems) >= MAX_LISTED:
                break
        else:
            first_seen[key] = int(i) + offset
    if carry is not None and not problems:
        carry.offset += len(df)
        carry.last_session = sessions[len(df) - 1]
        carry.last_turn = None if turns is None else int(turns[-1])
        carry.last_ts = None if times is None else int(times[-1])


def _truncated_problems(df: pd.DataFrame, problems: list[Problem]) -> None:
    """A ``truncated`` event must be a tool's result (`CUT_OPS`): a message, call or overhead is no tool's to cut."""
    flags = df["truncated"]
    cut = flags.to_numpy() if flags.dtype == bool else \
        flags.astype("string").fillna("").str.strip().str.lower().isin(_TRUE).to_numpy(dtype=bool)
    if not cut.any():
        return
    ops = df["op"].astype("string")
    for i in _first_rows(cut & ops.isin(OPS).to_numpy(dtype=bool, na_value=False)
                         & ~ops.isin(CUT_OPS).to_numpy(dtype=bool, na_value=False)):
        problems.append(Problem(i, "truncated", f"a {df['op'].iloc[i]} event cannot be truncated; only a tool's "
                                                f"result can ({', '.join(CUT_OPS)})"))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _model_problems(series: pd.Series, problems: list[Problem]) -> None:
    """A model name must be text (empty for unknown) of at most `MAX_MODEL_CHARS` characters, without control characters."""
    coded = _codes(series)
    codes, labels = coded if coded is not None else pd.factorize(series.to_numpy(dtype=object), use_na_sentinel=True)
    for j, value in enumerate(labels):
        if isinstance(value, str) and len(value) <= MAX_MODEL_CHARS and not _CONTROL.search(value):
            continue
        row = int(np.flatnonzero(codes == j)[0])
        shown = series.iloc[row]
        problems.append(Problem(row, "model", f"expected a model name, got {_show(shown)}" if not isinstance(shown, str)
                                else f"a model name is at most {MAX_MODEL_CHARS} characters without control "
                                     f"characters, got {shown[:60]!r}"))
        if sum(p.column == "model" for p in problems) >= MAX_LISTED:
            return


class _Lookup:
    """``names[i]`` for row ``i`` of a categorical column, from its codes and labels."""

    def __init__(self, codes: np.ndarray, labels: np.ndarray):
        self.codes, self.labels = codes, labels

    def __getitem__(self, i: int) -> object:
        code = self.codes[i]
        return self.labels[code] if code >= 0 else None


def validate(df: pd.DataFrame, source: str = "trace", *, carry: Carry | None = None) -> pd.DataFrame:
    """Check ``df`` against the schema and return it with canonical dtypes.

    Raises `TraceError` whose message names ``source`` and each problem's row and column.
    ``carry`` validates one chunk of a file read in order (`Carry`): rows are numbered in the file,
    the chunk is held to the rows before it, and ``carry`` moves past it.
    Optional columns are filled (``arm`` = ``"main"``, ``lines_changed`` = 0); extra columns
    are kept.

    >>> t = validate(pd.DataFrame({"session": ["s"], "turn": [0], "ts_ms": [0], "op": ["read"],
    ...                             "path": ["a.py"], "size_bytes": [10]}))
    >>> list(t.columns), str(t["op"].dtype)
    (['session', 'turn', 'ts_ms', 'op', 'path', 'size_bytes', 'arm', 'lines_changed'], 'category')
    >>> validate(t.assign(size_bytes=[-1]))
    Traceback (most recent call last):
    ...
    ctxbench.traces.errors.TraceError: trace: row 0, column 'size_bytes': must be >= 0, got -1
    """
    problems, parsed = _check(df, carry)
    if problems:
        shown = "; ".join(str(p) for p in problems[:MAX_LISTED])
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise TraceError(f"{source}: {shown}{more}")
    return _canonical(df, parsed)


def _canonical(df: pd.DataFrame, parsed: dict[str, np.ndarray]) -> pd.DataFrame:
    out = df.copy() if not df.index.equals(pd.RangeIndex(len(df))) else df.copy(deep=False)
    out = out.reset_index(drop=True)
    if "arm" not in out.columns:
        out["arm"] = DEFAULT_ARM
    if "lines_changed" not in out.columns:
        out["lines_changed"] = 0
    for column in (*INT_COLUMNS, *(c for c in LIMITS if c not in INT_COLUMNS and c in out.columns)):
        if out[column].dtype != np.int64:
            out[column] = parsed[column]
    for column in FLAG_COLUMNS:
        if column in out.columns and out[column].dtype != bool:
            out[column] = out[column].astype("string").fillna("").str.strip().str.lower().isin(_TRUE).to_numpy()
    for column in CATEGORY_COLUMNS:
        if not isinstance(out[column].dtype, pd.CategoricalDtype):
            out[column] = out[column].astype(str).astype("category")
        elif not pd.api.types.is_string_dtype(out[column].cat.categories) and \
                out[column].cat.categories.dtype != object:
            out[column] = out[column].astype(str).astype("category")
    if not (isinstance(out["op"].dtype, pd.CategoricalDtype) and tuple(out["op"].cat.categories) == OPS):
        out["op"] = pd.Categorical(out["op"].astype(str), categories=list(OPS))
    if "kind" in out.columns and not (isinstance(out["kind"].dtype, pd.CategoricalDtype)
                                      and tuple(out["kind"].cat.categories) == ("",) + KINDS):
        out["kind"] = pd.Categorical(out["kind"].astype("string").fillna("").astype(str), categories=("",) + KINDS)
    if "model" in out.columns and not isinstance(out["model"].dtype, pd.CategoricalDtype):
        out["model"] = out["model"].astype("string").fillna("").astype(str).astype("category")
    ordered = [c for c in COLUMNS if c in out.columns] + [c for c in out.columns if c not in COLUMNS]
    return out[ordered]


def empty_trace() -> pd.DataFrame:
    """A valid trace with no rows, in canonical dtypes."""
    return validate(pd.DataFrame({c: pd.Series([], dtype=object) for c in REQUIRED_COLUMNS}).astype(
        {"turn": np.int64, "ts_ms": np.int64, "size_bytes": np.int64}))
