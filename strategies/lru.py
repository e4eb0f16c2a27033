"""Least-recently-used eviction, the default strategy of the TypeScript runtime."""

from __future__ import annotations

from collections.abc import Sequence
from math import isqrt
from operator import attrgetter

from ctxbench.strategies.base import CappedStrategy
from ctxbench.strategies.compiled import LRU
from ctxbench.strategies.contract import ContextBudget, ContextEntry, min_cap
from ctxbench.strategies.ordering import evict_by_key, evict_in_order, evict_ranked, rank, reorder

__all__ = ["LruStrategy", "create_lru_context_strategy", "lru_definition", "lru_key", "oldest_front"]

_TIME = attrgetter("last_accessed_at")
_ID = attrgetter("id")

# Below this size a Python sort of the times beats numpy's conversion overhead (measured).
LRU_NUMPY_FROM = 400
# From this many entries LRU sorts only a front of the oldest ones, about FRONT_SPAN times the
# share that must go (measured; about 1% of fronts or fewer fall short on `over_budget_state` states).
FRONT_FROM = 64
FRONT_SPAN = 3


def lru_key(entry: ContextEntry) -> tuple[int, str]:
    """LRU's eviction key: ``(last_accessed_at, id)``, least recently accessed first.

    >>> sorted([ContextEntry("b:0", "b", 1, 10), ContextEntry("a:0", "a", 1, 10)], key=lru_key)[0].id
    'a:0'
    """
    return (entry.last_accessed_at, entry.id)


def lru_definition(state: Sequence[ContextEntry], budget: ContextBudget, max_entries: int | None = 100) -> list[str]:
    """LRU by its definition (docs/design.md §1): sort by ``last_accessed_at`` ascending, ties by ``id``, and
    evict the oldest until the rest fits ``budget.max_bytes`` and the tighter of ``max_entries`` and
    ``budget.max_entries`` (`evict_by_key` with `lru_key`).

    >>> state = [ContextEntry("b:0", "b", 2, 40), ContextEntry("a:0", "a", 1, 40), ContextEntry("c:0", "c", 3, 40)]
    >>> lru_definition(state, ContextBudget(max_bytes=40)), lru_definition(state, ContextBudget(100), 1)
    (['a:0', 'b:0'], ['a:0', 'b:0'])
    """
    return evict_by_key(state, budget, lru_key, min_cap(max_entries, budget.max_entries))


class LruStrategy(CappedStrategy):
    """Evict the least recently accessed entries until the rest fits: `lru_definition`, at speed.

    Order: ``last_accessed_at`` ascending, ties by ``id``. The entry cap is the tighter of
    ``max_entries`` and ``budget.max_entries``. Each path gives `lru_definition`'s answer:
    O(1) when the state already fits and carries ``total_bytes``; O(k) for k evicted on a
    ``recency_sorted`` state; otherwise O(n + k log n) in the compiled kernel, and in Python
    O(n + m log m) on a list or tuple of which a small share must go (m, a few times that share:
    `oldest_front`), else O(n log n) (the times sorted by numpy from `LRU_NUMPY_FROM` entries).

    >>> lru = LruStrategy(max_entries=100)
    >>> state = [ContextEntry("b:0", "b", 2, 40), ContextEntry("a:0", "a", 1, 40),
    ...          ContextEntry("c:0", "c", 3, 40)]
    >>> lru.evict(state, ContextBudget(max_bytes=80))
    ['a:0']
    """

    __slots__ = ()
    KERNEL = LRU

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        if state.__class__ is tuple or state.__class__ is list:
            return CappedStrategy.evict(self, state, budget)
        try:
            in_order, total = state.recency_sorted, state.total_bytes
        except AttributeError:
            in_order = False
        if not in_order or total is None:
            return CappedStrategy.evict(self, state, budget)
        # A recency-sorted state (the replay engine's, every turn): the skeleton's fit test and
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
        if not (state.__class__ is tuple or state.__class__ is list) and getattr(state, "recency_sorted", False):
            return evict_in_order(state, total, budget, cap)
        n = len(state)
        if n >= FRONT_FROM and isinstance(state, (tuple, list)):  # any Sequence need not slice
            front = oldest_front(state, total, budget, cap)
            if front is not None:
                out = _evict_by_time(front, total, budget, cap, n)
                if len(out) < len(front):
                    return out
                # The front ran out before the rest fit (about 1% of fronts or fewer): sort everything.
        return _evict_by_time(state, total, budget, cap, n)

    def definition(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        return lru_definition(state, budget, self.max_entries)


def _evict_by_time(entries: Sequence[ContextEntry], total: int, budget: ContextBudget, cap: int | None,
                   count: int) -> list[str]:
    """LRU's answer from ``entries``: all ``count`` entries of the state, or a front of them."""
    if len(entries) >= LRU_NUMPY_FROM:
        order, keys = rank([e.last_accessed_at for e in entries])
        return evict_ranked(reorder(entries, order), keys.__getitem__, _ID, total, budget, cap, keys, count)
    # Sorting on the integer time alone is about twice as fast as on (time, id);
    # evict_ranked orders the runs of equal times it reaches by id.
    ordered = sorted(entries, key=_TIME)
    if len({e.last_accessed_at for e in ordered}) == len(ordered):  # no equal times: the order is final
        return evict_in_order(ordered, total, budget, cap, count)
    keys = [e.last_accessed_at for e in ordered]
    return evict_ranked(ordered, keys.__getitem__, _ID, total, budget, cap, keys, count)


def oldest_front(state: Sequence[ContextEntry], total_bytes: int, budget: ContextBudget,
                 cap: int | None) -> list[ContextEntry] | None:
    """The entries accessed at or before a pivot time: a front a few times as large as what must go.

    The pivot is an order statistic of the times of a sample of max(16, √n) entries, chosen by
    the larger of the shares of bytes and of entries over the budget; ``None`` when that share
    is too large for a front to pay off. The front, in state order, is a prefix of the
    ``(last_accessed_at, id)`` order, so when it suffices, sorting it instead of the state
    answers in O(n + m log m) for a front of m entries. O(n).

    >>> es = [ContextEntry(f"{t}:0", str(t), t, 10) for t in range(40, 0, -1)]
    >>> [e.last_accessed_at for e in oldest_front(es, 400, ContextBudget(max_bytes=390), None)]
    [8, 7, 6, 5, 4, 3, 2, 1]
    """
    n = len(state)
    over = (total_bytes - budget.max_bytes) / total_bytes if total_bytes > 0 else 1.0
    if cap is not None and n - cap > over * n:
        over = (n - cap) / n
    sample = sorted([e.last_accessed_at for e in state[::n // max(16, isqrt(n)) or 1]])
    k = int(FRONT_SPAN * over * len(sample)) + 2
    if 2 * k >= len(sample):
        return None
    pivot = sample[k]
    return [e for e in state if e.last_accessed_at <= pivot]


def create_lru_context_strategy(max_entries: int | None = 100) -> LruStrategy:
    """The LRU strategy of docs/design.md §1, with an entry cap of ``max_entries`` (``None``: no cap)."""
    return LruStrategy(max_entries)
