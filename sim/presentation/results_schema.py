"""The tables of a results directory checked as traces are: each problem names file, row, column and value."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.labels import BRACKET_EXACT, BRACKET_LOWER
from ctxbench.sim.engine.measures import METRIC_COLUMNS, TURN_FIELDS
from ctxbench.sim.errors import InputError
from ctxbench.traces.schema import LIMITS, MAX_LISTED, Problem

__all__ = ["TableSpec", "RESULTS_SPEC", "TURNS_SPEC", "ARMS_SPEC", "SCHEDULES_SPEC", "DUPLICATE", "find_table_problems", "check_table"]


@dataclass(frozen=True)
class TableSpec:
    """What one table of a results directory may hold.

    ``text``: columns of non-empty strings (``required_text`` must be present and never missing);
    ``flags``: true, false or missing; ``positive``: numbers > 0, never missing; ``integers``:
    whole numbers in the range given, never missing; ``rates``: numbers in [0, 1]; every other
    column named in ``numbers``: a number >= 0 or missing. ``measured`` columns may be missing only
    on the rows of the bounds (``opt:lower``, ``opt:exact``), which measure no evict calls.
    ``key``: no two rows may agree on these columns (those present).
    """

    required_text: tuple[str, ...]
    text: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()
    integers: tuple[tuple[str, int, int], ...] = ()
    rates: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()
    always: tuple[str, ...] = ()
    measured: tuple[str, ...] = ()
    key: tuple[str, ...] = ()


DUPLICATE = "*"  # the column of a problem that is a repeated row
_BOUNDS_WITHOUT_CALLS = (BRACKET_LOWER, BRACKET_EXACT)
_RATES = ("miss_rate", "capacity_miss_rate", "byte_miss_rate")
_KEYS = ("trace", "session", "strategy")
_OPTIONAL_TEXT = ("model", "log_hash", "opt_method", "claims", "arm", "opt_bound")
_CLAIM_NUMBERS = ("lines_lost", "lines_overwritten", "thrashing_events", "blocked_turns", "blocked_ms", "handoffs",
                  "pauses", "escalations")
_BRACKET_NUMBERS = ("reread_bytes_lower", "reread_tokens_lower", "capacity_misses_lower", "opt_undecided",
                    "opt_reread_tokens", "opt_lower_tokens", "directory_evictions", "budget_bytes", "events", "arms",
                    "opt_cost_tokens", "opt_cost_lower_tokens")

RESULTS_SPEC = TableSpec(
    required_text=_KEYS, text=_OPTIONAL_TEXT, flags=("pure", "feasible", "opt_exact"),
    positive=("budget_tokens",), rates=_RATES,
    numbers=tuple(c for c in METRIC_COLUMNS if c != "feasible") + _CLAIM_NUMBERS + _BRACKET_NUMBERS,
    always=("miss_rate", "reread_tokens"), measured=("evict_p99_ns",),
    key=_KEYS + ("budget_tokens", "claims"),
)
TURNS_SPEC = TableSpec(
    required_text=_KEYS, text=("arm", "claims"), positive=("budget_tokens",),
    integers=(("turn", *LIMITS["turn"]), ("ts_ms", *LIMITS["ts_ms"]))
    + tuple((c, 0, 2**53) for c in TURN_FIELDS[2:]),
    key=_KEYS + ("budget_tokens", "claims", "arm", "turn"),
)
ARMS_SPEC = TableSpec(
    required_text=_KEYS + ("arm",), text=("claims", "model", "log_hash"), flags=("pure", "feasible"),
    positive=("budget_tokens",), rates=_RATES,
    numbers=tuple(c for c in METRIC_COLUMNS if c != "feasible") + _CLAIM_NUMBERS + _BRACKET_NUMBERS,
    key=_KEYS + ("budget_tokens", "claims", "arm"),
)

SCHEDULES_SPEC = TableSpec(
    required_text=_KEYS, text=("claims",), positive=("budget_tokens",),
    numbers=("weight", "cost_tokens", "reread_tokens"), always=("weight", "cost_tokens", "reread_tokens"),
    key=_KEYS + ("budget_tokens", "claims", "weight"),
)


def _show(value: object) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def _number(value: object) -> float | None:
    """``value`` as a float when it is a number (not a flag, not text), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    return float(value)


def _cells(df: pd.DataFrame, column: str) -> list:
    return df[column].astype(object).tolist()


def _as_numbers(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The column as floats (NaN where missing) and a mask of the cells that are no number at all."""
    dtype = series.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
        return series.to_numpy(dtype=float), np.zeros(len(series), dtype=bool)
    cells = _cells(series.to_frame(), series.name)
    values = np.array([math.nan if _missing(v) or _number(v) is None else _number(v) for v in cells], dtype=float)
    return values, np.array([not _missing(v) and _number(v) is None for v in cells], dtype=bool)


def _rows(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)[:MAX_LISTED]]


def find_table_problems(df: pd.DataFrame, spec: TableSpec) -> list[Problem]:
    """Every problem of ``df`` against ``spec`` (at most a few per column and kind), in column order."""
    problems: list[Problem] = []
    missing = [c for c in spec.required_text + spec.positive + spec.always if c not in df.columns]
    if missing:
        return [Problem(None, c, "missing column") for c in missing]
    for column in spec.required_text + spec.text:
        if column in df.columns:
            series = df[column]
            if pd.api.types.is_string_dtype(series.dtype) and not pd.api.types.is_object_dtype(series.dtype):
                absent = series.isna().to_numpy()
                bad = ~absent & (series.fillna("x").str.len() == 0).to_numpy()
            else:
                cells = _cells(df, column)
                absent = np.array([_missing(v) for v in cells], dtype=bool)
                bad = np.array([not _missing(v) and (not isinstance(v, str) or not v) for v in cells], dtype=bool)
            if column in spec.required_text:
                bad = bad | absent
            for i in _rows(bad):
                problems.append(Problem(i, column, f"expected a non-empty string, got {_show(series.iloc[i])}"))
    for column in spec.flags:
        if column in df.columns and not pd.api.types.is_bool_dtype(df[column].dtype):
            cells = _cells(df, column)
            bad = np.array([not (_missing(v) or isinstance(v, (bool, np.bool_))) for v in cells], dtype=bool)
            for i in _rows(bad):
                problems.append(Problem(i, column, f"expected true, false or null, got {_show(cells[i])}"))
    integers = {c: (low, high) for c, low, high in spec.integers}
    bounds = df["strategy"].astype(object).isin(_BOUNDS_WITHOUT_CALLS).to_numpy()
    for column in dict.fromkeys(spec.positive + spec.rates + spec.numbers + tuple(integers)):
        if column not in df.columns:
            continue
        series = df[column]
        values, not_number = _as_numbers(series)
        absent = np.isnan(values) & ~not_number
        must = column in spec.positive or column in spec.always or column in integers
        kinds = [(not_number, "expected a number"), (absent & (must or ((column in spec.measured) & ~bounds)),
                                                      "a value is required")]
        with np.errstate(invalid="ignore"):
            infinite = np.isinf(values)
            kinds.append((infinite, "expected a finite number"))
            finite = np.isfinite(values)
            if column in integers:
                low, high = integers[column]
                kinds.append((finite & ((values != np.floor(values)) | (values < low) | (values > high)),
                              f"expected a whole number from {low:,} to {high:,}"))
            elif column in spec.positive:
                kinds.append((finite & (values <= 0), "must be > 0"))
            else:
                kinds.append((finite & (values < 0), "must be >= 0"))
                if column in spec.rates:
                    kinds.append((finite & (values > 1), "a rate must be at most 1"))
        for mask, what in kinds:
            for i in _rows(mask):
                problems.append(Problem(i, column, f"{what}, got {_show(series.iloc[i])}"))
    if not problems and len(df) > 1:
        key = [c for c in spec.key if c in df.columns]
        repeats = df.duplicated(key, keep=False).to_numpy()
        if repeats.any():
            groups = df[repeats].groupby(key, dropna=False, sort=False).indices
            for rows in list(groups.values())[:MAX_LISTED]:
                positions = np.flatnonzero(repeats)
                first, again = int(positions[rows[0]]), int(positions[rows[1]])
                shown = ", ".join(f"{c} {_show(df[c].iloc[first])}" for c in key if not _missing(df[c].iloc[first]))
                problems.append(Problem(again, DUPLICATE, f"repeats row {first} ({shown})"))
    return problems


def check_table(df: pd.DataFrame, spec: TableSpec, where: object) -> pd.DataFrame:
    """``df`` when it holds what ``spec`` allows, else `InputError` naming ``where``, row, column and value."""
    problems = find_table_problems(df, spec)
    if problems:
        shown = "; ".join(f"row {p.row}: {p.message}" if p.column == DUPLICATE else str(p)
                          for p in problems[:MAX_LISTED])
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise InputError(f"{where}: {shown}{more}")
    return df
