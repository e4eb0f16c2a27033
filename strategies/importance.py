"""Importance eviction: frequency × recency ÷ size, lowest score first."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from strategies.base import CappedStrategy
from strategies.contract import ContextBudget, ContextEntry
from strategies.lru import NUMPY_FROM, evict_ranked, rank, rank_array, reorder

__all__ = ["ImportanceStrategy", "create_importance_context_strategy", "importance_scores"]


_TIME = attrgetter("last_accessed_at")
_SIZE = attrgetter("size_bytes")
_COUNT = attrgetter("access_count")


def importance_scores(state: Sequence[ContextEntry]) -> list[float]:
    """Score each entry: ``frequency * recency / size``.

    - ``frequency`` = ``access_count``, or 1 when it is absent (then the score is a
      recency/size proxy).
    - ``recency`` = ``(1 + k) / n``, where ``n`` is the number of entries in the state and
      ``k`` how many of them were accessed strictly earlier: the rank of ``last_accessed_at``
      across the current state, scaled into ``(0, 1]``. The most recent entries get 1, the
      oldest ``1 / n``, never 0, so a recent hub file always keeps its frequency's weight; entries
      accessed at the same time share a rank. A rank, not the time itself, is normalised so that
      two entries touched a few calls apart count as similarly recent however long or short the
      state's time span is (min-max scaling of the times would give the older of two entries
      recency ~0 in a two-entry state).
    - ``size`` = ``max(size_bytes, 1)``, so an empty file does not divide by zero.

    A file read 8 times outranks a once-read file of the same size and similar recency:

    >>> hub = ContextEntry("hub.py:0", "hub.py", 1_000, 4_000, access_count=8)
    >>> once = ContextEntry("leaf.py:0", "leaf.py", 1_010, 4_000, access_count=1)
    >>> importance_scores([hub, once])
    [0.001, 0.00025]

    Without access counts the score is recency over size:

    >>> importance_scores([ContextEntry("a:0", "a", 5, 100), ContextEntry("b:0", "b", 9, 400)])
    [0.005, 0.0025]
    """
    n = len(state)
    if not n:
        return []
    times = list(map(_TIME, state))
    rank: dict[int, int] = {}   # time -> 1 + entries strictly earlier
    for k, t in enumerate(sorted(times), 1):
        if t not in rank:
            rank[t] = k
    return [(1 if c is None else c) * (rank[t] / n) / (s if s > 1 else 1)
            for c, t, s in zip(map(_COUNT, state), times, map(_SIZE, state))]


_TIE = attrgetter("last_accessed_at", "id")
_EXACT = 2 ** 53  # integers below this are exact in float64


def _scores_array(state: Sequence[ContextEntry], times: list, sizes: list) -> np.ndarray | None:
    """`importance_scores` in numpy, bit for bit, or ``None`` when the values are too large.

    The same IEEE operations run in the same order on the same float64 values, so the
    scores are identical as long as every time is an exact float64 (ranks then agree).
    """
    counts = list(map(_COUNT, state))
    if None in counts:
        counts = [1 if c is None else c for c in counts]
    try:
        t, c, s = np.array((times, counts, sizes), dtype=np.float64)
    except (OverflowError, TypeError, ValueError):
        return None
    # Rounding is monotone, so converted values inside the exact range were exact already.
    if not (-_EXACT < t.min() and t.max() < _EXACT):
        return None
    # c * ((rank + 1) / n) / max(s, 1), operation by operation, as in `importance_scores`.
    r = np.searchsorted(np.sort(t), t, side="left").astype(np.float64)
    r += 1
    r /= len(t)
    r *= c
    r /= np.maximum(s, 1, out=s)
    return r


class ImportanceStrategy(CappedStrategy):
    """Evict the lowest ``frequency × recency ÷ size`` first (see `importance_scores`).

    Ties break by ``(last_accessed_at, id)``, so the order never depends on input order.
    Cost: O(1) when the state fits and carries ``total_bytes``; O(n log n) otherwise.

    >>> imp = ImportanceStrategy()
    >>> state = [ContextEntry("hub:0", "hub", 1, 100, access_count=9),
    ...          ContextEntry("leaf:0", "leaf", 2, 100, access_count=1)]
    >>> imp.evict(state, ContextBudget(max_bytes=100))
    ['leaf:0']
    """

    __slots__ = ()

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        scores = None
        if len(state) >= NUMPY_FROM:
            scores = _scores_array(state, list(map(_TIME, state)), list(map(_SIZE, state)))
        # A stable sort on the score alone; evict_ranked orders equal scores by (time, id).
        order, keys = rank(importance_scores(state)) if scores is None else rank_array(scores)
        return evict_ranked(reorder(state, order), keys.__getitem__, _TIE, total, budget, cap, keys)


def create_importance_context_strategy(max_entries: int | None = 100) -> ImportanceStrategy:
    """The importance strategy of DESIGN §1, with an entry cap of ``max_entries``."""
    return ImportanceStrategy(max_entries)
