"""Importance eviction: frequency × recency ÷ size, lowest score first."""

from __future__ import annotations

from collections.abc import Sequence

from strategies.contract import ContextBudget, ContextEntry, check_max_entries, min_cap
from strategies.lru import evict_in_order

__all__ = ["ImportanceStrategy", "create_importance_context_strategy", "importance_scores"]


def importance_scores(state: Sequence[ContextEntry]) -> list[float]:
    """Score each entry: ``frequency * recency / size``.

    - ``frequency`` = ``access_count``, or 1 when it is absent (then the score is a
      recency/size proxy).
    - ``recency`` = ``(t - t_min + 1) / (t_max - t_min + 1)`` over the current state's
      ``last_accessed_at`` values: the most recent entry gets 1, the oldest gets
      ``1 / (span + 1)``, never 0. The ``+ 1`` keeps every entry's recency positive, so a
      hub file read many times is never scored 0 just for being the oldest, and a state whose
      entries share one timestamp gives everyone recency 1.
    - ``size`` = ``max(size_bytes, 1)``, so an empty file does not divide by zero.

    A file read 8 times outranks a once-read file of the same size and similar recency:

    >>> hub = ContextEntry("hub.py:0", "hub.py", 1_000, 4_000, access_count=8)
    >>> once = ContextEntry("leaf.py:0", "leaf.py", 1_010, 4_000, access_count=1)
    >>> [round(s, 6) for s in importance_scores([hub, once])]
    [0.000182, 0.00025]
    >>> hub_recent = ContextEntry("hub.py:0", "hub.py", 1_010, 4_000, access_count=8)
    >>> importance_scores([hub_recent, once])[0] > importance_scores([hub_recent, once])[1]
    True
    """
    if not state:
        return []
    times = [e.last_accessed_at for e in state]
    t_min = min(times)
    span = max(times) - t_min + 1
    return [
        (1 if e.access_count is None else e.access_count)
        * ((e.last_accessed_at - t_min + 1) / span)
        / max(e.size_bytes, 1)
        for e in state
    ]


class ImportanceStrategy:
    """Evict the lowest ``frequency × recency ÷ size`` first (see `importance_scores`).

    Ties break by ``(last_accessed_at, id)``, so the order never depends on input order.
    Cost: O(1) when the state fits and carries ``total_bytes``; O(n log n) otherwise.

    >>> imp = ImportanceStrategy()
    >>> state = [ContextEntry("hub:0", "hub", 1, 100, access_count=9),
    ...          ContextEntry("leaf:0", "leaf", 2, 100, access_count=1)]
    >>> imp.evict(state, ContextBudget(max_bytes=100))
    ['leaf:0']
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
        scores = importance_scores(state)
        order = sorted(range(len(state)),
                       key=lambda i: (scores[i], state[i].last_accessed_at, state[i].id))
        return evict_in_order([state[i] for i in order], total, budget, cap)

    def __repr__(self) -> str:
        return f"ImportanceStrategy(max_entries={self.max_entries})"


def create_importance_context_strategy(max_entries: int | None = 100) -> ImportanceStrategy:
    """The importance strategy of DESIGN §1, with an entry cap of ``max_entries``."""
    return ImportanceStrategy(max_entries)
