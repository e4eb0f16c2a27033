"""The results directory: write it atomically, read it back, describe the machine and the run."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ctxbench.sim import ctxbench_version
from ctxbench.sim.analysis.ranking import RANK_BY
from ctxbench.sim.errors import InputError
from ctxbench.sim.folder_lock import folder_lock
from ctxbench.sim.output import OutputDir
from ctxbench.sim.presentation.results_schema import RESULTS_SPEC, TURNS_SPEC, check_table
from ctxbench.traces import safejson

__all__ = ["RESULTS_FILE", "TURNS_FILE", "ARMS_FILE", "THRASHING_FILE", "META_FILE", "SUMMARY_FILE", "Results", "write_results_dir",
           "load_results", "run_metadata"]

RESULTS_FILE, RESULTS_CSV, TURNS_FILE = "results.parquet", "results.csv", "turns.parquet"
META_FILE, SUMMARY_FILE = "meta.json", "summary.md"
ARMS_FILE, THRASHING_FILE = "arms.parquet", "thrashing.parquet"


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
    with OutputDir(out, force=force) as tmp:
        results.to_parquet(tmp / RESULTS_FILE, index=False)
        results.to_csv(tmp / RESULTS_CSV, index=False)
        if len(turns):
            turns.to_parquet(tmp / TURNS_FILE, index=False)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
        if extra is not None:
            extra(tmp)
    return Path(out)


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
