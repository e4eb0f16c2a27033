"""Least-recently-used eviction, the default strategy of the TypeScript runtime."""

from __future__ import annotations

from collections.abc import Sequence

from strategies.contract import ContextBudget, ContextEntry, check_max_entries, min_cap

__all__ = ["LruStrategy", "create_lru_context_strategy", "evict_in_order"]


def _recency_key(entry: ContextEntry) -> tuple[int, str]:
    return (entry.last_accessed_at, entry.id)


def evict_in_order(ordered: Sequence[ContextEntry], total_bytes: int, budget: ContextBudget,
                   cap: int | None) -> list[str]:
    """Ids taken from the front of ``ordered`` until the rest fits ``budget`` and ``cap``.

    >>> es = [ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abc")]
    >>> evict_in_order(es, 30, ContextBudget(max_bytes=15), None)
    ['a:0', 'b:0']
    """
    count = len(ordered)
    out: list[str] = []
    for entry in ordered:
        if total_bytes <= budget.max_bytes and (cap is None or count <= cap):
            break
        out.append(entry.id)
        total_bytes -= entry.size_bytes
        count -= 1
    return out


class LruStrategy:
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

    __slots__ = ("max_entries",)

    def __init__(self, max_entries: int | None = 100) -> None:
        self.max_entries = check_max_entries(max_entries)

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        cap = min_cap(self.max_entries, budget.max_entries)
        total = getattr(state, "total_bytes", None)
        if total is None:
            total = sum(e.size_bytes for e in state)
        if total <= budget.max_bytes and (cap is None or len(state) <= cap):
            return []
        ordered = state if getattr(state, "recency_sorted", False) else sorted(state, key=_recency_key)
        return evict_in_order(ordered, total, budget, cap)

    def __repr__(self) -> str:
        return f"LruStrategy(max_entries={self.max_entries})"


def create_lru_context_strategy(max_entries: int | None = 100) -> LruStrategy:
    """The LRU strategy of DESIGN §1, with an entry cap of ``max_entries`` (``None``: no cap)."""
    return LruStrategy(max_entries)
