"""Aggregate metrics rows across sessions, with bootstrap confidence intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["bootstrap_ci", "aggregate", "exact_means"]


def exact_means(rows: np.ndarray) -> np.ndarray:
    """The mean of each row of a 2-D array from its correctly rounded sum (`math.fsum`): the same whatever the
    order of the values, so a mean over sessions never depends on the order the sessions were listed in.

    >>> exact_means(np.array([[1e16, 1.0, -1e16, 1.0], [1.0, -1e16, 1.0, 1e16]])).tolist()   # numpy: 0.25, 0.0
    [0.5, 0.5]
    """
    return np.array([math.fsum(row) / len(row) if len(row) else math.nan for row in rows.tolist()], dtype=float)


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``values`` and a percentile-bootstrap CI at ``level`` (seeded, so reproducible).

    >>> bootstrap_ci([2.0, 2.0, 2.0])
    (2.0, 2.0, 2.0)
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (float("nan"),) * 3
    mean = float(exact_means(x[None, :])[0])
    if len(x) == 1:
        return mean, mean, mean
    rng = np.random.default_rng(seed)
    # resamples drawn a block at a time (the same draws as all at once): memory stays about 16 MiB
    # however many sessions there are
    block = max(1, (1 << 20) // len(x))
    means = np.concatenate([x[rng.integers(0, len(x), size=(min(block, resamples - start), len(x)))].mean(axis=1)
                            for start in range(0, resamples, block)])
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
