"""FIFO eviction (Belady 1966): first in, first out; hits change nothing. Stateful."""

from __future__ import annotations

from ctxbench.strategies.history import HistoryStrategy, Node, Queue

__all__ = ["FifoStrategy", "create_fifo_context_strategy"]


class FifoStrategy(HistoryStrategy):
    """First in, first out: evict the entry that entered the context first; hits change nothing.

    The classic FIFO replacement (Belady, "A study of replacement algorithms for a
    virtual-storage computer", IBM Systems Journal 5(2), 1966). Stateful: insertion order is
    history the pure contract does not carry. A new revision of a resident file (an edit)
    keeps its place; an evicted file that is read again enters at the back of the queue. With
    the adaptations of `HistoryStrategy` (evict before insert, bytes and entry cap).

    >>> from ctxbench.strategies.contract import ContextBudget, ContextEntry
    >>> fifo, budget = FifoStrategy(), ContextBudget(max_bytes=20)
    >>> a, b, c = (ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abc"))
    >>> fifo.on_insert(a); fifo.on_insert(b); fifo.evict([a, b], budget)
    []
    >>> a = ContextEntry("a:0", "a", 3, 10, access_count=2)
    >>> fifo.on_access(a)            # a hit: FIFO ignores it
    >>> fifo.on_insert(c); fifo.evict([b, a, c], budget)   # 'a' entered first, so it goes
    ['a:0']
    """

    def _reset_policy(self) -> None:
        super()._reset_policy()
        self._queue = Queue()

    def _admit(self, node: Node) -> None:
        self._queue.push(node)

    def _hit(self, node: Node) -> None:
        pass

    def _victim(self) -> Node:
        node = self._queue.oldest
        self._queue.remove(node)
        return node


def create_fifo_context_strategy(max_entries: int | None = 100) -> FifoStrategy:
    """FIFO (stateful) with an entry cap of ``max_entries`` (``None``: no cap)."""
    return FifoStrategy(max_entries)
