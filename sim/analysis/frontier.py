"""The Pareto frontier of two costs: the points no other point beats on both."""

from __future__ import annotations

import numpy as np

__all__ = ["pareto_frontier"]


def pareto_frontier(x, y) -> np.ndarray:
    """Which points are on the frontier of minimising both ``x`` and ``y``: no other point is at most as
    large on both and smaller on one. NaN points are never on it, nor beat any. O(n log n).

    >>> pareto_frontier([1, 2, 3, 2], [3, 1, 2, 1]).tolist()
    [True, True, False, True]
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    on = np.zeros(len(x), dtype=bool)
    valid = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    best_y = np.inf
    order = valid[np.lexsort((y[valid], x[valid]))]      # by x, then y
    i = 0
    while i < len(order):                                 # one group of equal x at a time
        j = i
        while j < len(order) and x[order[j]] == x[order[i]]:
            j += 1
        group_min = y[order[i]]                           # the group's smallest y comes first
        if group_min < best_y:
            for k in order[i:j]:
                on[k] = y[k] == group_min                 # ties on both are on it together
            best_y = group_min
        i = j
    return on
