"""Per-arm context snapshots over time (files, estimated tokens, utilisation), as JSON lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ctxbench.sim.errors import InputError
from ctxbench.sim.output import output_file

__all__ = ["context_snapshots", "write_snapshots_jsonl", "is_snapshots_file"]

KEYS = ("trace", "session", "strategy", "budget_tokens", "arm")
FIELDS = KEYS + ("turn", "files", "estimated_tokens", "utilization", "last_updated")


def context_snapshots(turns: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """One snapshot per (trace, session, strategy, budget, arm, turn), after eviction.

    ``files`` = entries resident (files and tool outputs), ``estimated_tokens`` = resident bytes
    ÷ bytes per token, ``utilization`` = resident bytes ÷ the byte budget (0–1 unless a
    violation left it over), ``last_updated`` = the turn's last event time (epoch ms).
    """
    if turns.empty:
        raise InputError("no per-turn log: run without --no-turns to get context snapshots")
    budgets = results[["budget_tokens", "budget_bytes"]].drop_duplicates().set_index("budget_tokens")["budget_bytes"]
    max_bytes = turns["budget_tokens"].map(budgets).to_numpy(dtype=float)
    bytes_per_token = max_bytes / turns["budget_tokens"].to_numpy(dtype=float)
    arm = turns["arm"] if "arm" in turns.columns else "main"
    out = pd.DataFrame({
        "trace": turns["trace"], "session": turns["session"], "strategy": turns["strategy"],
        "budget_tokens": turns["budget_tokens"], "arm": arm, "turn": turns["turn"],
        "files": turns["entries"],
        "estimated_tokens": (turns["occupancy_bytes"].to_numpy() / bytes_per_token).round(1),
        "utilization": (turns["occupancy_bytes"].to_numpy() / max_bytes).round(4),
        "last_updated": turns["ts_ms"],
    })
    if "claims" in turns.columns:
        out.insert(4, "claims", turns["claims"])
    return out


def is_snapshots_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a snapshots file (its first line an object with the snapshot fields): ctxbench's."""
    try:
        with open(Path(path), "rb") as fh:
            first = json.loads(fh.readline(1 << 16))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(first, dict) and set(FIELDS) <= set(first) <= set(FIELDS) | {"claims"}


def write_snapshots_jsonl(snapshots: pd.DataFrame, path: str | os.PathLike, *, force: bool = False) -> int:
    """Write snapshots as JSON lines atomically; returns the number of lines.

    An existing file is replaced only if it is a snapshots file, or with ``force``.
    """
    with output_file(path, ours=is_snapshots_file, force=force) as tmp:
        snapshots.to_json(tmp, orient="records", lines=True)
    return len(snapshots)
