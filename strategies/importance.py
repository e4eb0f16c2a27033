"""Importance eviction: frequency × recency ÷ size, lowest score first."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from ctxbench.strategies.base import CappedStrategy
from ctxbench.strategies.compiled import IMPORTANCE
from ctxbench.strategies.contract import ContextBudget, ContextEntry, min_cap
from ctxbench.strategies.ordering import (
    NUMPY_FROM, QUICKSORT_FROM, evict_by_key, evict_ranked, int64_array, rank, rank_array, reorder,
)

__all__ = ["ImportanceStrategy", "create_importance_context_strategy", "importance_definition", "importance_scores"]


def importance_definition(state: Sequence[ContextEntry], budget: ContextBudget,
                          max_entries: int | None = 100) -> list[str]:
    """Importance eviction by its definition (docs/design.md §1): lowest ``frequency * recency / size`` first,
    ties by ``(last_accessed_at, id)``, until the rest fits (`evict_by_key`).

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

    The entry cap is the tighter of ``max_entries`` and ``budget.max_entries``.

    >>> hub = ContextEntry("hub.py:0", "hub.py", 1_000, 4_000, access_count=8)
    >>> once = ContextEntry("leaf.py:0", "leaf.py", 1_010, 4_000, access_count=1)
    >>> importance_definition([hub, once], ContextBudget(max_bytes=4_000))   # scores 0.001 and 0.00025
    ['leaf.py:0']
    """
    times = sorted(e.last_accessed_at for e in state)

    def score(entry: ContextEntry) -> float:
        frequency = 1 if entry.access_count is None else entry.access_count
        recency = (1 + bisect_left(times, entry.last_accessed_at)) / len(state)
        return frequency * recency / max(entry.size_bytes, 1)

    return evict_by_key(state, budget, lambda e: (score(e), e.last_accessed_at, e.id),
                        min_cap(max_entries, budget.max_entries))


def importance_scores(state: Sequence[ContextEntry]) -> list[float]:
    """The score of `importance_definition` of each entry, in state order, in O(n log n).

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
    times = [e.last_accessed_at for e in state]
    # time -> 1 + entries strictly earlier: of equal times, the first position is set last.
    rank = dict(zip(reversed(sorted(times)), range(n, 0, -1)))
    return [(1 if e.access_count is None else e.access_count) * (rank[t] / n)
            / (e.size_bytes if e.size_bytes > 1 else 1) for e, t in zip(state, times)]


_TIE = attrgetter("last_accessed_at", "id")


def _scores_array(state: Sequence[ContextEntry]) -> np.ndarray | None:
    """`importance_scores` in numpy, bit for bit, or ``None`` when a field is no 64-bit integer.

    Times stay integers, so ranks are exact; counts and sizes become float64 as Python's
    int-by-float arithmetic converts them, and the same IEEE operations run in the same order.
    """
    times = [e.last_accessed_at for e in state]
    counts = [e.access_count for e in state]
    sizes = [e.size_bytes for e in state]
    fields = int64_array([*times, *counts, *sizes], 3)
    if fields is None and None in counts:  # an absent count weighs 1
        fields = int64_array([*times, *[1 if c is None else c for c in counts], *sizes], 3)
    if fields is None:
        return None
    t, c, s = fields[0], fields[1], fields[2]   # cheaper than unpacking the array
    # c * ((rank + 1) / n) / max(s, 1), operation by operation, as in `importance_scores`.
    if len(t) < QUICKSORT_FROM:
        r = t.copy()
        r.sort()
        r = r.searchsorted(t)
    else:  # searching for values in sorted order mispredicts fewer branches
        order = t.argsort()
        ascending = t[order]
        r = np.empty_like(t)
        r[order] = ascending.searchsorted(ascending)
    r += 1
    r = r / len(t)
    r *= c
    r /= np.maximum(s, 1)
    return r


class ImportanceStrategy(CappedStrategy):
    """Evict the lowest ``frequency × recency ÷ size`` first: `importance_definition`, at speed.

    Ties break by ``(last_accessed_at, id)``, so the order never depends on input order. Each
    path gives `importance_definition`'s answer: O(1) when the state fits and carries
    ``total_bytes``; otherwise O(n + k log n) for k evicted in the compiled kernel, O(n log n) in
    Python (the scores by `importance_scores`, or by numpy from `NUMPY_FROM` entries).

    >>> imp = ImportanceStrategy()
    >>> state = [ContextEntry("hub:0", "hub", 1, 100, access_count=9),
    ...          ContextEntry("leaf:0", "leaf", 2, 100, access_count=1)]
    >>> imp.evict(state, ContextBudget(max_bytes=100))
    ['leaf:0']
    """

    __slots__ = ()
    KERNEL = IMPORTANCE

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        scores = _scores_array(state) if len(state) >= NUMPY_FROM else None
        # A stable sort on the score alone; evict_ranked orders equal scores by (time, id).
        order, keys = rank(importance_scores(state)) if scores is None else rank_array(scores)
        return evict_ranked(reorder(state, order), keys.__getitem__, _TIE, total, budget, cap, keys)

    def definition(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        return importance_definition(state, budget, self.max_entries)


def create_importance_context_strategy(max_entries: int | None = 100) -> ImportanceStrategy:
    """The importance strategy of docs/design.md §1, with an entry cap of ``max_entries``."""
    return ImportanceStrategy(max_entries)
