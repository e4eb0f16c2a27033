"""Least-frequently-used eviction: fewest accesses first, least recent among equals."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxbench.strategies.base import KeyOrderedStrategy
from ctxbench.strategies.contract import ContextBudget, ContextEntry

__all__ = ["LfuStrategy", "create_lfu_context_strategy", "lfu_key"]


def lfu_key(entry: ContextEntry) -> tuple[int, int, str]:
    """LFU's eviction key, its definition: ``(access_count, last_accessed_at, id)``; an absent count counts as 1.

    >>> lfu_key(ContextEntry("a:0", "a", 7, 10)), lfu_key(ContextEntry("b:0", "b", 2, 10, access_count=3))
    ((1, 7, 'a:0'), (3, 2, 'b:0'))
    """
    count = entry.access_count
    return (1 if count is None else count, entry.last_accessed_at, entry.id)


class LfuStrategy(KeyOrderedStrategy):
    """Evict the entries with the fewest accesses first (LFU): `evict_by_key` with `lfu_key`.

    LFU as surveyed by Karedla, Love & Wherry, "Caching Strategies to Improve Disk System
    Performance", IEEE Computer 27(3), 1994. Frequency is the entry's ``access_count`` (the
    replay engine counts accesses of the path over the whole session, so a file keeps its count
    across evictions, like LFU with a persistent frequency table); equal counts go least
    recent first, then by ``id``. Without ``access_count`` every entry counts 1 and this is
    LRU. The entry cap is the tighter of ``max_entries`` and ``budget.max_entries``.
    Cost: O(1) when the state fits and carries ``total_bytes``; O(n log n) otherwise.

    >>> lfu = LfuStrategy()
    >>> state = [ContextEntry("hub:0", "hub", 1, 50, access_count=5),
    ...          ContextEntry("leaf:0", "leaf", 9, 50, access_count=1),
    ...          ContextEntry("mid:0", "mid", 5, 50, access_count=2)]
    >>> lfu.evict(state, ContextBudget(max_bytes=100))
    ['leaf:0']
    """

    __slots__ = ()

    def order_key(self, state: Sequence[ContextEntry], budget: ContextBudget,
                  cap: int | None) -> Callable[[ContextEntry], tuple[int, int, str]]:
        return lfu_key


def create_lfu_context_strategy(max_entries: int | None = 100) -> LfuStrategy:
    """LFU with an entry cap of ``max_entries`` (``None``: no cap)."""
    return LfuStrategy(max_entries)
