"""Least-recently-used eviction, the default strategy of the TypeScript runtime."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from operator import attrgetter, eq, itemgetter
from typing import Any

import numpy as np

from strategies.base import CappedStrategy
from strategies.contract import ContextBudget, ContextEntry

__all__ = [
    "LruStrategy", "create_lru_context_strategy", "evict_in_order", "evict_ranked", "rank", "rank_array", "reorder",
]

_TIME = attrgetter("last_accessed_at")
_ID = attrgetter("id")
_SIZE = attrgetter("size_bytes")

# Below these sizes a Python sort beats numpy's conversion overhead (measured, see the benchmarks).
NUMPY_FROM = 48
LRU_NUMPY_FROM = 400


def evict_in_order(ordered: Sequence[ContextEntry], total_bytes: int, budget: ContextBudget,
                   cap: int | None, count: int | None = None) -> list[str]:
    """Ids taken from the front of ``ordered`` until the rest fits ``budget`` and ``cap``.

    Reads ``ordered`` only through slices from the front, of doubling length: O(evicted) on a
    sequence that slices lazily (the manager's state view), O(n) at worst on a list. ``count``
    is ``len(ordered)``, when the caller knows it.

    >>> es = [ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abc")]
    >>> evict_in_order(es, 30, ContextBudget(max_bytes=15), None)
    ['a:0', 'b:0']
    >>> evict_in_order(es, 30, ContextBudget(max_bytes=100), 1)
    ['a:0', 'b:0']
    """
    if count is None:
        count = len(ordered)
    max_bytes = budget.max_bytes
    out: list[str] = []
    start = 0
    if cap is not None and count > cap:
        # The first count - cap entries go whatever the bytes: take them in one step.
        start = count - cap
        forced = ordered[:start]
        out = list(map(_ID, forced))
        total_bytes -= sum(map(_SIZE, forced))
    step = 4
    while total_bytes > max_bytes and start < count:
        for entry in ordered[start:start + step]:
            if total_bytes <= max_bytes:
                break
            out.append(entry.id)
            total_bytes -= entry.size_bytes
        start += step
        step *= 2
    return out


def rank(values: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """Indices that stably sort ``values``, and the sorted values (numpy for long integer lists).

    >>> rank([3, 1, 2, 1])
    ([1, 3, 2, 0], [1, 1, 2, 3])
    """
    if len(values) >= NUMPY_FROM:
        try:
            arr = np.array(values, dtype=np.int64)
        except (OverflowError, TypeError, ValueError):
            arr = None
        # int64 conversion truncates floats and parses strings: use it only when exact.
        if arr is not None and arr.tolist() == values:
            return rank_array(arr)
    order = sorted(range(len(values)), key=values.__getitem__)
    return order, [values[i] for i in order]


def reorder(state: Sequence[ContextEntry], order: Sequence[int]) -> Sequence[ContextEntry]:
    """``[state[i] for i in order]``, at C speed.

    >>> reorder("abc", [2, 0, 1]), reorder("abc", [1]), reorder("abc", [])
    (('c', 'a', 'b'), ('b',), ())
    """
    if len(order) < 2:
        return tuple(state[i] for i in order)
    return itemgetter(*order)(state)


def rank_array(arr: np.ndarray) -> tuple[list[int], list[Any]]:
    """`rank` for a numpy array: a stable argsort and the sorted values as a list."""
    order = np.argsort(arr, kind="stable")
    return order.tolist(), arr[order].tolist()


def evict_ranked(ordered: Sequence[ContextEntry], key_at: Callable[[int], Any],
                 tie_key: Callable[[ContextEntry], Any], total_bytes: int, budget: ContextBudget,
                 cap: int | None, keys: Sequence[Any] | None = None) -> list[str]:
    """Ids from the front of ``ordered`` until the rest fits; runs of equal keys go by ``tie_key``.

    ``ordered`` is stably sorted by a primary key only, and ``key_at(i)`` is the key of
    ``ordered[i]`` (``keys``, when given, is the list of those keys). Only the runs of equal
    keys actually reached are sorted, so this costs O(evicted) on top of the caller's sort,
    which can then use a cheap scalar key.

    >>> es = [ContextEntry("b:0", "b", 1, 10), ContextEntry("a:0", "a", 1, 10),
    ...       ContextEntry("c:0", "c", 2, 10)]
    >>> evict_ranked(es, [1, 1, 2].__getitem__, _ID, 30, ContextBudget(max_bytes=15), None)
    ['a:0', 'b:0']
    """
    n = len(ordered)
    max_bytes = budget.max_bytes
    count = n
    out: list[str] = []
    i = 0
    if cap is not None and n - cap > 1:
        # The first n - cap entries go whatever the bytes: settle the order of the runs of
        # equal keys among them, then take them in one step.
        forced = n - cap
        end = min(forced + 1, n)
        head = keys[:end] if keys is not None else list(map(key_at, range(end)))
        # Positions k with head[k] == head[k - 1], found at C speed.
        ties = list(compress(range(1, end), map(eq, head, head[1:])))
        if ties:
            ordered = list(ordered)
            settled = 0
            for k in ties:
                if k < settled:
                    continue
                stop = k + 1
                while stop < n and key_at(stop) == head[k]:
                    stop += 1
                ordered[k - 1:stop] = sorted(ordered[k - 1:stop], key=tie_key)
                settled = stop
        taken = ordered[:forced]
        out = list(map(_ID, taken))
        total_bytes -= sum(map(_SIZE, taken))
        count -= forced
        i = forced
    while i < n and (total_bytes > max_bytes or (cap is not None and count > cap)):
        key = key_at(i)
        j = i + 1
        while j < n and key_at(j) == key:
            j += 1
        if j == i + 1:
            entry = ordered[i]
            out.append(entry.id)
            total_bytes -= entry.size_bytes
            count -= 1
        else:
            for entry in sorted(ordered[i:j], key=tie_key):
                if total_bytes <= max_bytes and (cap is None or count <= cap):
                    break
                out.append(entry.id)
                total_bytes -= entry.size_bytes
                count -= 1
        i = j
    return out


class LruStrategy(CappedStrategy):
    """Evict the least recently accessed entries until the rest fits.

    Order: ``last_accessed_at`` ascending, ties by ``id``. The entry cap is the tighter of
    ``max_entries`` and ``budget.max_entries``. Cost: O(1) when the state already fits and
    carries ``total_bytes``; O(k) on a ``recency_sorted`` state; O(n log n) otherwise.

    >>> lru = LruStrategy(max_entries=100)
    >>> state = [ContextEntry("b:0", "b", 2, 40), ContextEntry("a:0", "a", 1, 40),
    ...          ContextEntry("c:0", "c", 3, 40)]
    >>> lru.evict(state, ContextBudget(max_bytes=80))
    ['a:0']
    """

    __slots__ = ()

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        if state.__class__ is tuple or state.__class__ is list:
            return CappedStrategy.evict(self, state, budget)
        try:
            in_order, total = state.recency_sorted, state.total_bytes
        except AttributeError:
            in_order = False
        if not in_order or total is None:
            return CappedStrategy.evict(self, state, budget)
        # A recency-sorted state (the manager's, every turn): the skeleton's fit test and
        # `evict_in_order` in one call, since LRU is what most replays run.
        cap, budget_cap = self.max_entries, budget.max_entries
        if budget_cap is not None and (cap is None or budget_cap < cap):
            cap = budget_cap
        if cap is None:
            return [] if total <= budget.max_bytes else evict_in_order(state, total, budget, None)
        count = len(state)
        if total <= budget.max_bytes and count <= cap:
            return []
        return evict_in_order(state, total, budget, cap, count)

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        if getattr(state, "recency_sorted", False):
            return evict_in_order(state, total, budget, cap)
        # Sorting on the integer time alone is about twice as fast as on (time, id);
        # evict_ranked orders the runs of equal times it reaches by id.
        if len(state) < LRU_NUMPY_FROM:
            ordered = sorted(state, key=_TIME)
            return evict_ranked(ordered, lambda i: ordered[i].last_accessed_at, _ID, total, budget, cap)
        order, keys = rank(list(map(_TIME, state)))
        return evict_ranked(reorder(state, order), keys.__getitem__, _ID, total, budget, cap, keys)


def create_lru_context_strategy(max_entries: int | None = 100) -> LruStrategy:
    """The LRU strategy of DESIGN §1, with an entry cap of ``max_entries`` (``None``: no cap)."""
    return LruStrategy(max_entries)
