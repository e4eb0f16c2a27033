"""The stateful extension: strategies that keep history, driven by hooks. Not replay-pure.

The pure contract (`strategies.contract.ContextStrategy`) forbids hidden state, which rules out
classic history-based policies (FIFO queues, ghost lists, visited bits). A
`StatefulContextStrategy` may keep such state: the replay engine calls its hooks as entries enter,
are hit and leave the context, then calls ``evict(state, budget)`` once per turn exactly as it
does for pure strategies, with the same accounting. Results of stateful strategies are flagged
``pure = False`` everywhere they are reported, because their answer depends on the past and not
only on the state they are given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ctxbench.strategies.contract import ContextBudget, ContextEntry

__all__ = ["StatefulContextStrategy", "is_pure"]


class StatefulContextStrategy(ABC):
    """Base class for history-keeping strategies; the replay engine drives the hooks in event order."""

    pure = False

    def reset(self) -> None:
        """Forget all history; called before each replay of a session."""

    def on_insert(self, entry: ContextEntry) -> None:
        """``entry`` entered the context (a miss, a write, an output, or a new revision)."""

    def on_access(self, entry: ContextEntry) -> None:
        """``entry`` was in context and was used again (a hit); ``entry`` carries the new fields."""

    def on_remove(self, entry_id: str, evicted: bool) -> None:
        """``entry_id`` left the context: evicted by this strategy, or replaced by a new revision."""

    @abstractmethod
    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> Sequence[str]:
        """Ids to evict, in eviction order, so that the rest fits ``budget``."""


def is_pure(strategy: object) -> bool:
    """Whether ``strategy`` follows the pure contract (everything but stateful strategies does)."""
    return not isinstance(strategy, StatefulContextStrategy)
