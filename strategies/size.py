"""Largest-first eviction (the SIZE policy): drop the biggest entries, least recent among equals."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxbench.strategies.base import KeyOrderedStrategy
from ctxbench.strategies.contract import ContextBudget, ContextEntry

__all__ = ["SizeStrategy", "create_size_context_strategy", "size_key"]


def size_key(entry: ContextEntry) -> tuple[int, int, str]:
    """SIZE's eviction key, its definition: ``(-size_bytes, last_accessed_at, id)``, largest first.

    >>> size_key(ContextEntry("big:0", "big", 9, 80)) < size_key(ContextEntry("a:0", "a", 1, 10))
    True
    """
    return (-entry.size_bytes, entry.last_accessed_at, entry.id)


class SizeStrategy(KeyOrderedStrategy):
    """Evict the largest entries first, so that as few entries as possible leave: `evict_by_key`
    with `size_key`.

    The SIZE policy of Williams, Abrams, Standridge, Abdulla & Fox, "Removal Policies in
    Network Caches for World-Wide Web Documents", SIGCOMM 1996. Equal sizes go least recent
    first, then by ``id``. It maximises the number of entries kept, not the bytes: a large hub
    file goes before any small one, so expect many re-read tokens. The entry cap is the
    tighter of ``max_entries`` and ``budget.max_entries``; when only the cap binds, the largest
    entries still go first. Cost: O(1) when the state fits and carries ``total_bytes``;
    O(n log n) otherwise.

    >>> size = SizeStrategy()
    >>> state = [ContextEntry("a:0", "a", 1, 10), ContextEntry("big:0", "big", 9, 80),
    ...          ContextEntry("b:0", "b", 2, 30)]
    >>> size.evict(state, ContextBudget(max_bytes=60))
    ['big:0']
    """

    __slots__ = ()

    def order_key(self, state: Sequence[ContextEntry], budget: ContextBudget,
                  cap: int | None) -> Callable[[ContextEntry], tuple[int, int, str]]:
        return size_key


def create_size_context_strategy(max_entries: int | None = 100) -> SizeStrategy:
    """Largest-first eviction with an entry cap of ``max_entries`` (``None``: no cap)."""
    return SizeStrategy(max_entries)
