"""Summarise a replay's per-turn log into one metrics row, and aggregate rows with bootstrap CIs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.manager import TurnLog

__all__ = ["DEFAULT_BYTES_PER_TOKEN", "METRIC_COLUMNS", "DETERMINISTIC_METRICS", "summarise",
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


def summarise(log: TurnLog, max_bytes: int, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
              oversize: int = 0) -> dict:
    """One metrics row from a per-turn log.

    ``mean_occupancy`` is the mean over turns of (bytes resident after eviction) ÷ ``max_bytes``;
    ``peak_bytes`` is the most resident after eviction, ``peak_turn_bytes`` the most within a turn
    (before eviction). Re-read bytes and tokens count capacity misses only. Latency percentiles
    use the nearest-rank method over every ``evict`` call.
    """
    c = log.columns
    accesses = int(c["accesses"].sum())
    comp, cap, inv = (int(c[k].sum()) for k in ("compulsory", "capacity", "invalidation"))
    misses = comp + cap + inv
    reread = int(c["capacity_bytes"].sum())
    ns, occ = c["evict_ns"], c["occupancy_bytes"]
    if len(ns):
        p50, p90, p99 = (int(v) for v in np.percentile(ns, [50, 90, 99], method="nearest"))
        top = int(ns.max())
    else:
        p50 = p90 = p99 = top = 0
    return {
        "accesses": accesses,
        "hits": int(c["hits"].sum()),
        "misses": misses,
        "compulsory_misses": comp,
        "capacity_misses": cap,
        "invalidation_misses": inv,
        "miss_rate": _ratio(misses, accesses),
        "capacity_miss_rate": _ratio(cap, accesses),
        "byte_miss_rate": _ratio(c["miss_bytes"].sum(), c["accessed_bytes"].sum()),
        "reread_bytes": reread,
        "reread_tokens": reread / bytes_per_token,
        "invalidation_bytes": int(c["invalidation_bytes"].sum()),
        "evictions": int(c["evictions"].sum()),
        "evicted_bytes": int(c["evicted_bytes"].sum()),
        "peak_bytes": int(occ.max()) if len(occ) else 0,
        "peak_turn_bytes": int(c["turn_bytes"].max()) if len(occ) else 0,
        "mean_occupancy": float(occ.mean() / max_bytes) if len(occ) and max_bytes else 0.0,
        "violations": int(c["violations"].sum()),
        "oversize_entries": oversize,
        "turns": len(occ),
        "evict_calls": len(ns),
        "evict_p50_ns": p50,
        "evict_p90_ns": p90,
        "evict_p99_ns": p99,
        "evict_max_ns": top,
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
