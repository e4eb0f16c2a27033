"""The results directory: write it atomically, read it back, describe the machine and the run."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ctxbench.sim import ctxbench_version
from ctxbench.sim.analysis.ranking import RANK_BY
from ctxbench.sim.errors import InputError
from ctxbench.sim.folder_lock import folder_lock
from ctxbench.sim.output import OutputDir, interrupted_writer
from ctxbench.sim.presentation.results_schema import RESULTS_SPEC, TURNS_SPEC, check_table

if TYPE_CHECKING:
    from ctxbench.sim.analysis.turn_log import TurnParts
from ctxbench.traces import safejson

__all__ = ["RESULTS_FILE", "TURNS_FILE", "ARMS_FILE", "THRASHING_FILE", "SCHEDULES_FILE", "META_FILE", "SUMMARY_FILE", "Results",
           "write_results_dir", "results_dir", "write_results", "turn_strategies", "report_turns", "load_results",
           "run_metadata"]

RESULTS_FILE, RESULTS_CSV, TURNS_FILE = "results.parquet", "results.csv", "turns.parquet"
META_FILE, SUMMARY_FILE = "meta.json", "summary.md"
ARMS_FILE, THRASHING_FILE, SCHEDULES_FILE = "arms.parquet", "thrashing.parquet", "schedules.parquet"


@dataclass
class Results:
    """A results directory in memory."""

    results: pd.DataFrame
    turns: pd.DataFrame
    meta: dict
    path: Path | None = None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_metadata(config: dict) -> dict:
    """Version, git commit, machine and the run's configuration, for ``meta.json``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count()
    return {
        "ctxbench_version": ctxbench_version(),
        "git_commit": _git_commit(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.machine(), "cores": cores},
        "config": config,
    }


def write_results_dir(out: str | os.PathLike, results: pd.DataFrame, turns: pd.DataFrame, meta: dict,
                      extra: Callable[[Path], None] | None = None, *, force: bool = False) -> Path:
    """Write the results directory whole, or not at all, by the rule of `sim.output`.

    Everything (and whatever ``extra(staging)`` adds: summary, figures, report) is written to a
    staging directory first, which then replaces ctxbench's earlier files in ``out``; a
    directory that ctxbench did not write is refused (`InputError`) unless ``force``, and files
    it did not write are never touched.
    """
    with results_dir(out, force=force) as tmp:
        write_results(tmp, results, turns, meta, extra)
    return Path(out)


@contextlib.contextmanager
def results_dir(out: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """The staging directory of the results directory ``out``, installed when the block ends without an
    error, by the rule of `write_results_dir` (checked now, before any work): a run writes its
    per-turn log there as it goes (`sim.analysis.turn_log.TurnWriter`), then the rest (`write_results`)."""
    with OutputDir(out, force=force) as tmp:
        yield tmp


def write_results(staging: Path, results: pd.DataFrame, turns: pd.DataFrame | None, meta: dict,
                  extra: Callable[[Path], None] | None = None) -> None:
    """Write the results, the per-turn log (when given as a frame; a run's was written already), ``meta``
    and what ``extra(staging)`` adds into the staging directory of a results directory."""
    results.to_parquet(staging / RESULTS_FILE, index=False)
    results.to_csv(staging / RESULTS_CSV, index=False)
    if turns is not None and len(turns):
        turns.to_parquet(staging / TURNS_FILE, index=False)
    (staging / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    if extra is not None:
        extra(staging)


def turn_strategies(log: "Path | TurnParts") -> pd.DataFrame:
    """The strategies with rows in a run's per-turn log (a Parquet file, or `sim.analysis.turn_log.TurnParts`),
    one row each (column ``strategy``): what a summary asks of the log
    (`sim.analysis.summary.summarise_run`), read without the rest of it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not isinstance(log, (str, os.PathLike)):
        return log.strategies()
    names = set()
    file = pq.ParquetFile(log)
    for index in range(file.metadata.num_row_groups):
        names.update(pc.unique(file.read_row_group(index, columns=["strategy"]).column("strategy")).to_pylist())
    return pd.DataFrame({"strategy": sorted(names)})


#: The columns of the per-turn log that a report's figures draw, and those its latency figure draws.
REPORT_TURN_COLUMNS = ("trace", "session", "strategy", "budget_tokens", "turn", "hits", "compulsory", "capacity",
                       "invalidation", "evictions", "occupancy_bytes", "evict_ns")
_LATENCY_COLUMNS = ("trace", "session", "strategy", "budget_tokens", "evict_ns")


def report_turns(log: "Path | TurnParts", budget_tokens: float, focus: tuple[str, str, float] | None) -> pd.DataFrame:
    """The rows of a run's per-turn log (a Parquet file, read a row group at a time, or
    `sim.analysis.turn_log.TurnParts`) that a report draws: all the figures' columns of the ``focus``
    session (trace, session, budget), then every other turn at ``budget_tokens`` with what the latency
    figure draws (the other columns sparse, NaN). About 30 bytes a turn at that budget; the rest of
    the log is never in memory as a frame."""
    if isinstance(log, (str, os.PathLike)):
        focused, latency, wanted = _read_report_rows(Path(log), budget_tokens, focus)
    else:
        def in_focus(row: dict) -> bool:
            return focus is not None and (row["trace"], row["session"], row["budget_tokens"]) == tuple(focus)

        wanted = list(REPORT_TURN_COLUMNS)
        focused = [log.rows(in_focus, wanted)]
        latency = [log.rows(lambda row: row["budget_tokens"] == budget_tokens and not in_focus(row),
                            _LATENCY_COLUMNS)]
        focused, latency = [f for f in focused if len(f)], [f for f in latency if len(f)]
    full = _concat(focused) if focused else pd.DataFrame({c: pd.Series(dtype=object) for c in wanted})
    if not latency:
        return full.assign(strategy=full["strategy"].astype(object))
    rest = _concat(latency)
    out = {}
    for column in wanted:
        if column in rest.columns:
            out[column] = _concat([full[[column]], rest[[column]]])[column]
        else:
            values = np.full(len(full) + len(rest), np.nan)
            values[:len(full)] = full[column].to_numpy(dtype=float)
            out[column] = pd.arrays.SparseArray(values, fill_value=np.nan)
    frame = pd.DataFrame(out)
    frame["strategy"] = frame["strategy"].astype(object)   # the figures map names to kinds (bracket or not)
    return frame


def _read_report_rows(path: Path, budget_tokens: float, focus: tuple[str, str, float] | None
                      ) -> tuple[list[pd.DataFrame], list[pd.DataFrame], list[str]]:
    """`report_turns`' rows of a Parquet log: the focus session's, the others' at the budget, the columns."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path, read_dictionary=[c for c in ("trace", "session", "strategy")
                                                 if c in pq.read_schema(path).names])
    wanted = [c for c in REPORT_TURN_COLUMNS if c in file.schema_arrow.names]
    focused, latency = [], []
    for index in range(file.metadata.num_row_groups):
        group = file.read_row_group(index, columns=wanted)
        budget = group.column("budget_tokens")
        in_focus = pc.equal(budget, budget) if focus is None else pc.and_(
            pc.and_(pc.equal(pc.cast(group.column("trace"), "string"), focus[0]),
                    pc.equal(pc.cast(group.column("session"), "string"), focus[1])),
            pc.equal(budget, focus[2]))
        if focus is None:
            in_focus = pc.invert(in_focus)
        if pc.any(in_focus).as_py():
            focused.append(group.filter(in_focus).to_pandas())
        others = pc.and_(pc.equal(budget, budget_tokens), pc.invert(in_focus))
        if pc.any(others).as_py():
            latency.append(group.select([c for c in _LATENCY_COLUMNS if c in wanted]).filter(others).to_pandas())
    return focused, latency, wanted


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``frames`` one after the other, categorical columns kept categorical (their categories united)."""
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    out = {}
    for column in frames[0].columns:
        parts = [f[column] for f in frames]
        if all(isinstance(p.dtype, pd.CategoricalDtype) for p in parts):
            out[column] = pd.Series(pd.api.types.union_categoricals(parts, ignore_order=True))
        else:
            out[column] = pd.concat([p.astype(object) if isinstance(p.dtype, pd.CategoricalDtype) else p
                                     for p in parts], ignore_index=True)
    return pd.DataFrame(out)


def load_results(path: str | os.PathLike) -> Results:
    """Read a results directory written by `write_results_dir`; a broken one raises `InputError`."""
    p = Path(path)
    with folder_lock(p):   # never half of a run that is rewriting it
        return _load_results(p)


def _load_results(p: Path) -> Results:
    if not p.is_dir():
        raise InputError(f"{p}: not a results directory")
    if not (p / RESULTS_FILE).is_file():
        raise InputError(f"{p}: no {RESULTS_FILE}; is this a ctxbench results directory?")
    writer = interrupted_writer(p)
    if writer is not None:
        raise InputError(f"{p}: incomplete: a ctxbench command (process {writer}) was killed while replacing its "
                         "files one by one, so it holds files of two runs; run again into it")
    try:
        results = pd.read_parquet(p / RESULTS_FILE)
        turns = pd.read_parquet(p / TURNS_FILE) if (p / TURNS_FILE).is_file() else pd.DataFrame()
    except Exception as exc:
        raise InputError(f"{p}: cannot read results: {exc}") from None
    try:
        meta = safejson.loads((p / META_FILE).read_text()) if (p / META_FILE).is_file() else {}
    except (OSError, ValueError) as exc:
        raise InputError(f"{p / META_FILE}: cannot read: {exc}") from None
    _check_meta(meta, p / META_FILE)
    check_table(results, RESULTS_SPEC, p / RESULTS_FILE)
    if len(turns):
        check_table(turns, TURNS_SPEC, p / TURNS_FILE)
    return Results(results, turns, meta, p)


_NUMBER = (int, float)
# The keys of meta.json that ctxbench reads back, and the JSON types each may have (null is always allowed).
_META_SHAPE: dict[str, tuple[type, ...]] = {
    "ctxbench_version": (str,), "git_commit": (str,), "created": (str,), "machine": (dict,), "config": (dict,),
    "elapsed_s": _NUMBER, "violations": (list,),
}
_CONFIG_SHAPE: dict[str, tuple[type, ...]] = {
    "workload": (dict,), "strategies": (list,), "budgets_tokens": (list,), "bytes_per_token": _NUMBER,
    "lenient": (bool,), "token_ratios": (dict,), "rank_by": (str,), "cache_ttl": (str,), "price": (dict,),
    "ratios_by": (str,), "session_ratios": (dict,),
}
_JSON_TYPE = {str: "a string", dict: "an object", list: "an array", bool: "true or false", int: "a number",
              float: "a number"}


def _check_meta(meta: object, where: Path) -> None:
    """Refuse a meta.json whose shape ctxbench cannot read back, naming the key."""
    if not isinstance(meta, dict):
        raise InputError(f"{where}: expected a JSON object, got {_json_type(meta)}")
    for shape, values, prefix in ((_META_SHAPE, meta, ""), (_CONFIG_SHAPE, meta.get("config") or {}, "config.")):
        for key, types in shape.items():
            value = values.get(key)
            is_bool_number = types == _NUMBER and isinstance(value, bool)
            if value is not None and (not isinstance(value, types) or is_bool_number):
                expected = " or ".join(dict.fromkeys(_JSON_TYPE[t] for t in types))
                raise InputError(f"{where}: {prefix}{key} must be {expected}, got {_json_type(value)}")
    config = meta.get("config") or {}
    per_token = config.get("bytes_per_token")
    if per_token is not None and not (math.isfinite(per_token) and per_token > 0):
        raise InputError(f"{where}: config.bytes_per_token must be a positive number, got {per_token!r}")
    for key, values, kind in (("violations", meta.get("violations"), str),
                              ("config.strategies", config.get("strategies"), str),
                              ("config.budgets_tokens", config.get("budgets_tokens"), float),
                              ("config.token_ratios", (config.get("token_ratios") or {}).values(), float),
                              ("machine", (meta.get("machine") or {}).values(), None)):
        for value in values or ():
            if kind is str and not isinstance(value, str) or kind is float and not _positive(value) or \
                    kind is None and not (value is None or isinstance(value, (str, int, float))):
                expected = {str: "strings", float: "positive numbers", None: "strings or numbers"}[kind]
                raise InputError(f"{where}: {key} must hold {expected}, got {_json_type(value)} {value!r}"[:300])
    if config.get("rank_by") is not None and config["rank_by"] not in RANK_BY:
        raise InputError(f"{where}: config.rank_by must be one of {', '.join(RANK_BY)}, got {config['rank_by']!r}")


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return next((name for t, name in _JSON_TYPE.items() if isinstance(value, t)), type(value).__name__)
