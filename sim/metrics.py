"""Summarise a replay's per-turn log into one metrics row, and aggregate rows with bootstrap CIs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.manager import TURN_FIELDS, TurnLog
from traces.schema import exact_sum

__all__ = ["DEFAULT_BYTES_PER_TOKEN", "METRIC_COLUMNS", "DETERMINISTIC_METRICS", "summarise", "nearest_rank",
           "bootstrap_ci", "aggregate", "TURN_COLUMNS"]

DEFAULT_BYTES_PER_TOKEN = 3.8

METRIC_COLUMNS = (
    "accesses", "hits", "misses", "compulsory_misses", "capacity_misses", "invalidation_misses",
    "miss_rate", "capacity_miss_rate", "byte_miss_rate", "reread_bytes", "reread_tokens",
    "invalidation_bytes", "evictions", "evicted_bytes", "peak_bytes", "peak_turn_bytes",
    "mean_occupancy", "violations", "oversize_entries", "turns", "evict_calls", "evict_p50_ns",
    "evict_p90_ns", "evict_p99_ns", "evict_max_ns",
)

# Metrics that depend only on trace, strategy and budget, never on the machine.
DETERMINISTIC_METRICS = tuple(c for c in METRIC_COLUMNS if not c.startswith("evict_") or c == "evict_calls") \
    + ("log_hash",)

TURN_COLUMNS = ("turn", "ts_ms", "accesses", "hits", "compulsory", "capacity", "invalidation",
                "miss_bytes", "capacity_bytes", "evictions", "turn_bytes", "occupancy_bytes", "entries",
                "evict_ns", "violations")


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


def nearest_rank(values: np.ndarray, percents: Sequence[float]) -> list[int]:
    """``np.percentile(values, percents, method="nearest")`` as ints, from one partial sort.

    >>> nearest_rank(np.array([5, 1, 4, 2, 3]), (0, 50, 90, 100))
    [1, 3, 5, 5]
    """
    last = len(values) - 1
    ranks = [round(p / 100 * last) for p in percents]   # half to even, as numpy rounds
    return np.partition(values, ranks)[ranks].tolist()


def summarise(log: TurnLog, max_bytes: int, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
              oversize: int = 0) -> dict:
    """One metrics row from a per-turn log.

    ``mean_occupancy`` is the mean over turns of (bytes resident after eviction) ÷ ``max_bytes``;
    ``peak_bytes`` is the most resident after eviction, ``peak_turn_bytes`` the most within a turn
    (before eviction). Re-read bytes and tokens count capacity misses only. Latency percentiles
    use the nearest-rank method over every ``evict`` call.
    """
    table = log.table
    turns = len(table)
    if turns:
        total = dict(zip(TURN_FIELDS, table.sum(axis=0).tolist()))
        peak = dict(zip(TURN_FIELDS, table.max(axis=0).tolist()))
        p50, p90, p99 = nearest_rank(log.columns["evict_ns"], (50, 90, 99))
    else:
        total = peak = dict.fromkeys(TURN_FIELDS, 0)
        p50 = p90 = p99 = 0
    accesses = total["accesses"]
    comp, cap, inv = total["compulsory"], total["capacity"], total["invalidation"]
    misses = comp + cap + inv
    reread = total["capacity_bytes"]
    return {
        "accesses": accesses,
        "hits": total["hits"],
        "misses": misses,
        "compulsory_misses": comp,
        "capacity_misses": cap,
        "invalidation_misses": inv,
        "miss_rate": _ratio(misses, accesses),
        "capacity_miss_rate": _ratio(cap, accesses),
        "byte_miss_rate": _ratio(total["miss_bytes"], total["accessed_bytes"]),
        "reread_bytes": reread,
        "reread_tokens": reread / bytes_per_token,
        "invalidation_bytes": total["invalidation_bytes"],
        "evictions": total["evictions"],
        "evicted_bytes": total["evicted_bytes"],
        "peak_bytes": peak["occupancy_bytes"],
        "peak_turn_bytes": peak["turn_bytes"],
        # An exact sum (turns x resident bytes can pass 2**63), so this equals numpy's mean to the last bit
        # whenever that sum is below 2**53.
        "mean_occupancy": (exact_sum(log.columns["occupancy_bytes"]) / turns / max_bytes
                           if turns and max_bytes else 0.0),
        "violations": total["violations"],
        "oversize_entries": oversize,
        "turns": turns,
        "evict_calls": turns,
        "evict_p50_ns": p50,
        "evict_p90_ns": p90,
        "evict_p99_ns": p99,
        "evict_max_ns": peak["evict_ns"],
    }


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``values`` and a percentile-bootstrap CI at ``level`` (seeded, so reproducible).

    >>> bootstrap_ci([2.0, 2.0, 2.0])
    (2.0, 2.0, 2.0)
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (float("nan"),) * 3
    mean = float(x.mean())
    if len(x) == 1:
        return mean, mean, mean
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return mean, float(lo), float(hi)


def aggregate(results: pd.DataFrame, metrics: Sequence[str] = ("miss_rate", "reread_tokens", "evict_p99_ns"),
              by: Sequence[str] = ("strategy", "budget_tokens"), *, level: float = 0.95,
              seed: int = 0) -> pd.DataFrame:
    """Mean and bootstrap CI of each metric across sessions, one row per group.

    Columns: the ``by`` keys, ``sessions``, then ``<metric>``, ``<metric>_lo``, ``<metric>_hi``.
    """
    rows = []
    for keys, group in results.groupby(list(by), sort=True, observed=True):
        keys = keys if isinstance(keys, tuple) else (keys,)
        row = dict(zip(by, keys))
        row["sessions"] = len(group)
        for metric in metrics:
            mean, lo, hi = bootstrap_ci(group[metric].to_numpy(), level=level, seed=seed)
            row[metric], row[f"{metric}_lo"], row[f"{metric}_hi"] = mean, lo, hi
        rows.append(row)
    return pd.DataFrame(rows)
