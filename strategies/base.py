"""The skeletons of the built-in pure strategies: entry cap, nothing-to-evict fast path, kernel, key order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ctxbench.strategies.compiled import ENABLED as KERNELS_ENABLED, evict_order
from ctxbench.strategies.contract import MAX_ENTRIES, ContextBudget, ContextEntry, check_max_entries, min_cap
from ctxbench.strategies.ordering import evict_by_key, evict_in_order
from ctxbench.strategies.tunable import declare

__all__ = ["CappedStrategy", "KeyOrderedStrategy"]


class CappedStrategy:
    """A pure strategy with its own entry cap (``max_entries``, default 100, ``None``: no cap).

    `evict` returns nothing when the state already fits both ``budget.max_bytes`` and the
    tighter of the two entry caps (O(1) when the state carries ``total_bytes``); otherwise it
    asks the subclass's `evict_over` for the eviction order. A subclass whose order a compiled
    kernel implements names it in ``KERNEL``; the kernel then answers whatever input it handles
    exactly (same ids, same order), and `evict_over` the rest. ``compiled=False`` keeps to the
    Python code; ``None`` uses the kernel when it is built and ``CTXBENCH_PURE_PYTHON`` is unset.
    ``repr`` shows every option. `definition` gives the answer by the strategy's plain definition,
    which `evict` must equal on every input (the tests compare them).
    """

    __slots__ = ("max_entries", "_kernel")
    #: The `strategies.compiled` kernel that computes `evict_over`'s answer, if any.
    KERNEL: ClassVar[int | None] = None
    #: What ``ctxbench tune`` may set (`strategies.tunable`).
    TUNABLE: ClassVar = declare(MAX_ENTRIES)

    def __init__(self, max_entries: int | None = 100, *, compiled: bool | None = None) -> None:
        self.max_entries = check_max_entries(max_entries)
        if compiled and (self.KERNEL is None or evict_order is None):
            raise ValueError(f"{type(self).__name__} has no compiled kernel built; pass compiled=None or False")
        self._kernel = self.KERNEL if (KERNELS_ENABLED if compiled is None else compiled) else None

    @property
    def compiled(self) -> bool:
        """Whether `evict` runs the compiled kernel (for inputs it handles)."""
        return self._kernel is not None

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        cap, budget_cap = self.max_entries, budget.max_entries   # `min_cap`, inlined: called every turn
        if budget_cap is not None and (cap is None or budget_cap < cap):
            cap = budget_cap
        # Plain containers first: an attribute lookup that fails costs more than the test.
        plain = state.__class__ is tuple or state.__class__ is list
        total = None if plain else getattr(state, "total_bytes", None)
        if total is not None and total <= budget.max_bytes and (cap is None or len(state) <= cap):
            return []
        if self._kernel is not None:
            out = evict_order(self._kernel, state if plain else tuple(state), budget.max_bytes, cap, total)
            if out is not None:
                return out
        if total is None:
            total = sum([e.size_bytes for e in state])   # faster than map(attrgetter) on slots
            if total <= budget.max_bytes and (cap is None or len(state) <= cap):
                return []
        return self.evict_over(state, budget, total, cap)

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        """Ids to evict from a state of ``total`` bytes that is over ``budget`` or ``cap`` (Python)."""
        raise NotImplementedError

    def definition(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        """Ids to evict by this strategy's plain definition: the rule written to be read, no fast path."""
        raise NotImplementedError

    def __setstate__(self, state: tuple[dict | None, dict | None]) -> None:
        instance, slots = state   # what pickle's default reduction gives for an object with slots
        if instance:
            self.__dict__.update(instance)
        for name, value in (slots or {}).items():
            setattr(self, name, value)
        if evict_order is None:  # unpickled where the kernels are not built (another worker's install)
            self._kernel = None

    def __repr__(self) -> str:
        names = [n for klass in reversed(type(self).__mro__) for n in klass.__dict__.get("__slots__", ())
                 if not n.startswith("_")]
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"


class KeyOrderedStrategy(CappedStrategy):
    """A strategy that sorts the state by a key and evicts from the front in that order.

    A subclass defines only `order_key`, the key of one call; its definition is `evict_by_key`
    with that key, and `evict` gives the same answer through the `CappedStrategy` skeleton and
    `evict_in_order`. O(1) when the state fits and carries ``total_bytes``; O(n log n) otherwise.
    """

    __slots__ = ()

    def order_key(self, state: Sequence[ContextEntry], budget: ContextBudget,
                  cap: int | None) -> Callable[[ContextEntry], Any]:
        """The eviction key for ``state`` under ``budget`` and the entry cap ``cap`` in force."""
        raise NotImplementedError

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        return evict_in_order(sorted(state, key=self.order_key(state, budget, cap)), total, budget, cap)

    def definition(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        cap = min_cap(self.max_entries, budget.max_entries)
        return evict_by_key(state, budget, self.order_key(state, budget, cap), cap)
