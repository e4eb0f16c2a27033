"""Segmented LRU from access counts: once-used entries go before re-used ones (SLRU-like)."""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence
from operator import attrgetter

from ctxbench.strategies.base import KeyOrderedStrategy
from ctxbench.strategies.contract import MAX_ENTRIES, ContextBudget, ContextEntry
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["SegmentedStrategy", "create_segmented_context_strategy", "protected_ids", "segmented_key"]

_RECENT_FIRST = attrgetter("last_accessed_at", "id")


def protected_ids(state: Sequence[ContextEntry], max_bytes: int, max_count: int | None,
                  threshold: int = 2) -> set[str]:
    """Ids of the protected segment: re-used entries, most recent first, within its share.

    An entry is re-used when its ``access_count`` is at least ``threshold`` (absent counts are
    once-used). Re-used entries join the segment from the most recent down while the segment
    holds at most ``max_bytes`` bytes and ``max_count`` entries; the rest are demoted.

    >>> es = [ContextEntry("a:0", "a", 1, 30, 3), ContextEntry("b:0", "b", 2, 30, 2),
    ...       ContextEntry("c:0", "c", 3, 30, 1)]
    >>> sorted(protected_ids(es, 40, None))
    ['b:0']
    """
    reused = [e for e in state if e.access_count is not None and e.access_count >= threshold]
    reused.sort(key=_RECENT_FIRST, reverse=True)
    out: set[str] = set()
    used = 0
    for entry in reused:
        if (max_count is not None and len(out) >= max_count) or used + entry.size_bytes > max_bytes:
            break
        out.add(entry.id)
        used += entry.size_bytes
    return out


def segmented_key(protected: Container[str]) -> Callable[[ContextEntry], tuple[bool, int, str]]:
    """Segmented's eviction key, its definition: ``(in protected, last_accessed_at, id)``, probationary
    entries first and LRU within each segment; ``protected`` holds the ids of the protected segment.

    >>> key = segmented_key({"hub:0"})
    >>> key(ContextEntry("hub:0", "hub", 1, 50, 4)), key(ContextEntry("walk:0", "walk", 2, 50, 1))
    ((True, 1, 'hub:0'), (False, 2, 'walk:0'))
    """
    return lambda e: (e.id in protected, e.last_accessed_at, e.id)


class SegmentedStrategy(KeyOrderedStrategy):
    """Evict from a probationary segment (once-used entries) before a protected one (re-used):
    `evict_by_key` with `segmented_key` of the `protected_ids`.

    Segmented LRU of Karedla, Love & Wherry, "Caching Strategies to Improve Disk System
    Performance", IEEE Computer 27(3), 1994, expressed from the entry fields: an entry is in the
    protected segment when its ``access_count`` is at least ``threshold`` (default 2: it was used
    again), and the protected segment holds at most ``protected`` (default 0.8) of the byte
    budget and of the entry cap, filled from the most recent re-used entry down (see
    `protected_ids`). Re-used entries that do not fit are demoted to probation, at their own
    recency rather than at its MRU end as in the original (the pure contract has no insertion
    history). Eviction order: probationary entries LRU first, then protected ones LRU first; ties
    by ``id``. The entry cap is the tighter of ``max_entries`` and ``budget.max_entries``.
    Cost: O(1) when the state fits and carries ``total_bytes``; O(n log n) otherwise.

    >>> slru = SegmentedStrategy()
    >>> state = [ContextEntry("hub:0", "hub", 1, 50, access_count=4),
    ...          ContextEntry("walk1:0", "walk1", 2, 50, access_count=1),
    ...          ContextEntry("walk2:0", "walk2", 3, 50, access_count=1)]
    >>> slru.evict(state, ContextBudget(max_bytes=100))   # LRU would drop the hub
    ['walk1:0']
    """

    __slots__ = ("protected", "threshold")
    TUNABLE = declare(MAX_ENTRIES,
                      Tunable("protected", "float", 0, 1, (0.1, 0.95), doc="the protected segment's share of the budget"),
                      Tunable("threshold", "int", 1, MAX_OPTION_INT, (1, 8), doc="accesses that make an entry protected"))

    def __init__(self, max_entries: int | None = 100, protected: float = 0.8, threshold: int = 2) -> None:
        super().__init__(max_entries)
        self.protected = self.TUNABLE["protected"].check(protected)
        self.threshold = self.TUNABLE["threshold"].check(threshold)

    def order_key(self, state: Sequence[ContextEntry], budget: ContextBudget,
                  cap: int | None) -> Callable[[ContextEntry], tuple[bool, int, str]]:
        return segmented_key(protected_ids(state, math.floor(self.protected * budget.max_bytes),
                                           None if cap is None else math.floor(self.protected * cap), self.threshold))


def create_segmented_context_strategy(max_entries: int | None = 100, protected: float = 0.8,
                                      threshold: int = 2) -> SegmentedStrategy:
    """SLRU-like eviction; ``protected`` is the protected segment's share of the budget."""
    return SegmentedStrategy(max_entries, protected, threshold)
