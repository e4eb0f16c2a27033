"""Outputs-first eviction: drop tool outputs (``tool://...``) before files, least recent first."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxbench.strategies.base import KeyOrderedStrategy
from ctxbench.strategies.contract import ContextBudget, ContextEntry

__all__ = ["OutputsFirstStrategy", "create_outputs_first_context_strategy", "outputs_first_key", "OUTPUT_PREFIX"]

OUTPUT_PREFIX = "tool://"


def outputs_first_key(prefix: str = OUTPUT_PREFIX) -> Callable[[ContextEntry], tuple[bool, int, str]]:
    """Outputs-first's eviction key, its definition: ``(not an output, last_accessed_at, id)``, where
    outputs are the entries whose ``path`` starts with ``prefix``.

    >>> key = outputs_first_key()
    >>> key(ContextEntry("tool://bash/1:0", "tool://bash/1", 5, 40)), key(ContextEntry("a.py:0", "a.py", 1, 40))
    ((False, 5, 'tool://bash/1:0'), (True, 1, 'a.py:0'))
    """
    return lambda e: (not e.path.startswith(prefix), e.last_accessed_at, e.id)


class OutputsFirstStrategy(KeyOrderedStrategy):
    """Evict tool outputs before files; LRU within each group: `evict_by_key` with `outputs_first_key`.

    Source: the trace semantics of docs/design.md §2 — an ``output`` (test log, grep hits, command
    output) enters the context but is never needed again as such (a repeated command is a new
    output), so dropping it never causes a re-read, whereas a dropped file may have to be read
    again. Outputs are the entries whose ``path`` starts with ``prefix`` (``tool://``). Within
    each group the order is LRU: ``last_accessed_at`` ascending, then ``id``. The entry cap is
    the tighter of ``max_entries`` and ``budget.max_entries``. Cost: O(1) when the state fits
    and carries ``total_bytes``; O(n log n) otherwise.

    >>> of = OutputsFirstStrategy()
    >>> state = [ContextEntry("a.py:0", "a.py", 1, 40), ContextEntry("tool://bash/1:0", "tool://bash/1", 5, 40),
    ...          ContextEntry("b.py:0", "b.py", 3, 40)]
    >>> of.evict(state, ContextBudget(max_bytes=40))
    ['tool://bash/1:0', 'a.py:0']
    """

    __slots__ = ("prefix",)

    def __init__(self, max_entries: int | None = 100, prefix: str = OUTPUT_PREFIX) -> None:
        super().__init__(max_entries)
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
        self.prefix = prefix

    def order_key(self, state: Sequence[ContextEntry], budget: ContextBudget,
                  cap: int | None) -> Callable[[ContextEntry], tuple[bool, int, str]]:
        return outputs_first_key(self.prefix)


def create_outputs_first_context_strategy(max_entries: int | None = 100,
                                          prefix: str = OUTPUT_PREFIX) -> OutputsFirstStrategy:
    """Outputs-first eviction; ``prefix`` marks tool outputs (default ``tool://``)."""
    return OutputsFirstStrategy(max_entries, prefix)
