"""The skeleton the built-in pure strategies share: an entry cap and the nothing-to-evict fast path."""

from __future__ import annotations

from collections.abc import Sequence
from strategies.contract import ContextBudget, ContextEntry, check_max_entries

__all__ = ["CappedStrategy"]

class CappedStrategy:
    """A pure strategy with its own entry cap (``max_entries``, default 100, ``None``: no cap).

    `evict` returns nothing when the state already fits both ``budget.max_bytes`` and the
    tighter of the two entry caps (O(1) when the state carries ``total_bytes``); otherwise it
    asks the subclass's `evict_over` for the eviction order. ``repr`` shows every option.
    """

    __slots__ = ("max_entries",)

    def __init__(self, max_entries: int | None = 100) -> None:
        self.max_entries = check_max_entries(max_entries)

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        cap, budget_cap = self.max_entries, budget.max_entries   # `min_cap`, inlined: called every turn
        if budget_cap is not None and (cap is None or budget_cap < cap):
            cap = budget_cap
        # Plain containers first: an attribute lookup that fails costs more than the test.
        total = None if state.__class__ is tuple or state.__class__ is list else getattr(state, "total_bytes", None)
        if total is None:
            total = sum([e.size_bytes for e in state])   # faster than map(attrgetter) on slots
        if total <= budget.max_bytes and (cap is None or len(state) <= cap):
            return []
        return self.evict_over(state, budget, total, cap)

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        """Ids to evict from a state of ``total`` bytes that is over ``budget`` or ``cap``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        names = [n for klass in reversed(type(self).__mro__) for n in klass.__dict__.get("__slots__", ())]
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"
