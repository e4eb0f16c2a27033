"""SIEVE eviction (Zhang et al., NSDI'24): a FIFO queue, a visited bit and a moving hand. Stateful."""

from __future__ import annotations

from ctxbench.strategies.history import HistoryStrategy, Node, Queue

__all__ = ["SieveNode", "SieveStrategy", "create_sieve_context_strategy"]


class SieveNode(Node):
    """A tracked entry of SIEVE, with its visited bit (hit since the hand last passed)."""

    __slots__ = ("visited",)

    def __init__(self, entry_id: str, path: str, size: int) -> None:
        super().__init__(entry_id, path, size)
        self.visited = False


class SieveStrategy(HistoryStrategy):
    """SIEVE: lazy promotion and quick demotion with one FIFO queue.

    Zhang, Yang, Yue, Vigfusson & Rashmi, "SIEVE is Simpler than LRU: an Efficient Turn-Key
    Eviction Algorithm for Web Caches", NSDI 2024. New entries enter at the head of a FIFO
    queue with the visited bit clear; a hit sets the bit. To evict, the hand starts where it
    last stopped (the tail, the oldest entry, at first) and moves towards the head: a visited
    entry has its bit cleared and stays where it is; the first unvisited one is evicted and the
    hand stays at its newer neighbour. Past the head, the hand wraps to the tail.

    Adapted to a context window (see `HistoryStrategy`): entries are evicted one at a time
    until both the byte budget and the entry cap hold, so a large entry frees as much as many
    small ones; entries that arrived during the turn are admitted after the eviction that makes
    room for them, as in a cache. A new revision of a resident file (an edit) keeps its place
    and sets the bit. Stateful: not replay-pure.

    >>> from ctxbench.strategies.contract import ContextBudget, ContextEntry
    >>> sieve, budget = SieveStrategy(), ContextBudget(max_bytes=20)
    >>> a, b, c = (ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abc"))
    >>> sieve.on_insert(a); sieve.on_insert(b); sieve.evict([a, b], budget)
    []
    >>> sieve.on_access(a)           # visited: the hand will spare it once
    >>> sieve.on_insert(c); sieve.evict([a, b, c], budget)
    ['b:0']
    """

    NODE = SieveNode

    def _reset_policy(self) -> None:
        super()._reset_policy()
        self._queue = Queue()
        self._hand: SieveNode | None = None

    def _admit(self, node: SieveNode) -> None:
        self._queue.push(node)

    def _hit(self, node: SieveNode) -> None:
        node.visited = True

    def _victim(self) -> SieveNode:
        queue = self._queue
        node = self._hand or queue.oldest
        while node.visited:
            node.visited = False
            node = node.newer or queue.oldest
        self._hand = node.newer
        queue.remove(node)
        return node

    def _discard(self, node: SieveNode) -> None:
        if self._hand is node:
            self._hand = node.newer
        super()._discard(node)


def create_sieve_context_strategy(max_entries: int | None = 100) -> SieveStrategy:
    """SIEVE (stateful) with an entry cap of ``max_entries`` (``None``: no cap)."""
    return SieveStrategy(max_entries)
