"""S3-FIFO eviction (Yang et al., SOSP'23): a small probationary FIFO, a main FIFO and a ghost FIFO. Stateful."""

from __future__ import annotations

import math

from ctxbench.strategies.history import Ghosts, HistoryStrategy, Node, Queue
from ctxbench.strategies.contract import MAX_ENTRIES
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["S3FifoNode", "S3FifoStrategy", "create_s3fifo_context_strategy"]

_SMALL, _MAIN = 0, 1
_MAX_FREQ = 3


class S3FifoNode(Node):
    """A tracked entry of S3-FIFO, with its 2-bit hit frequency and the queue it enters when admitted."""

    __slots__ = ("freq", "target")

    def __init__(self, entry_id: str, path: str, size: int) -> None:
        super().__init__(entry_id, path, size)
        self.freq = 0            # hits since insertion, at most _MAX_FREQ
        self.target = _SMALL     # S, or M after a ghost hit


class S3FifoStrategy(HistoryStrategy):
    """S3-FIFO: quick demotion of one-hit entries through a small FIFO queue.

    Yang, Zhang, Qiu, Yue & Vinayak, "FIFO Queues are All You Need for Cache Eviction",
    SOSP 2023 (Algorithm 1). New entries enter the small queue S, or the main queue M when
    their path is in the ghost queue G. Hits raise a 2-bit frequency (capped at 3). When S holds
    at least ``small`` of the cache, its oldest entry is evicted into G (paths only) unless it
    was hit at least ``move_threshold`` times, in which case it moves to M (and M, when over its
    share, evicts). M is a FIFO with reinsertion: an entry with frequency > 0 goes back to the
    head with frequency − 1; one with frequency 0 is evicted.

    ``move_threshold`` defaults to 1 (promote when the entry was used again while in S), as
    in the paper's illustration; libCacheSim's default is 2. Adapted to a context window (see
    `HistoryStrategy` for the common rules):

    - the cache size is the byte budget and the entry cap together: S is "full" at
      ``small × max_bytes`` bytes or ``small × cap`` entries, M over its share above
      ``(1 − small) × max_bytes`` bytes or ``cap − floor(small × cap)`` entries;
    - G remembers at most ``ghost × max_bytes`` bytes and ``ghost × cap`` entries of paths
      (``ghost`` = 0.9, as in libCacheSim), oldest dropped first; a ghost is matched by path,
      so a file read again at a new revision still counts;
    - victims are taken until both the byte budget and the entry cap hold; a new revision of a
      resident file (an edit) is a hit and keeps its queue and place.

    Stateful: not replay-pure.

    >>> from ctxbench.strategies.contract import ContextBudget, ContextEntry
    >>> s3, budget = S3FifoStrategy(), ContextBudget(max_bytes=30)
    >>> e = {p: ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abcd")}
    >>> for p in "abc": s3.on_insert(e[p])
    >>> s3.evict([e["a"], e["b"], e["c"]], budget)
    []
    >>> s3.on_access(e["a"])          # a is used again while in S: it moves to M, b goes
    >>> s3.on_insert(e["d"]); s3.evict(list(e.values()), budget)
    ['b:0']
    """

    NODE = S3FifoNode
    TUNABLE = declare(MAX_ENTRIES,
                      Tunable("small", "float", 0, 1, (0.01, 0.5), doc="the small queue's share of the budget"),
                      Tunable("ghost", "float", 0, 1, (0.1, 1.0), doc="the ghost queue's size, as a share of the main"),
                      Tunable("move_threshold", "int", 1, MAX_OPTION_INT, (1, 4),
                              doc="hits in the small queue that move an entry to the main"))

    def __init__(self, max_entries: int | None = 100, small: float = 0.1, ghost: float = 0.9,
                 move_threshold: int = 1) -> None:
        self.small = self.TUNABLE["small"].check(small)
        self.ghost = self.TUNABLE["ghost"].check(ghost)
        self.move_threshold = self.TUNABLE["move_threshold"].check(move_threshold)
        super().__init__(max_entries)

    def _reset_policy(self) -> None:
        super()._reset_policy()
        self._s, self._m, self._g = Queue(), Queue(), Ghosts()

    def _on_arrival(self, node: S3FifoNode) -> None:
        node.target = _MAIN if self._g.pop(node.path) is not None else _SMALL

    def _admit(self, node: S3FifoNode) -> None:
        (self._m if node.target == _MAIN else self._s).push(node)

    def _hit(self, node: S3FifoNode) -> None:
        node.freq = min(node.freq + 1, _MAX_FREQ)

    def _small_full(self) -> bool:
        cap = self._cap
        return (self._s.bytes >= self.small * self._budget.max_bytes
                or (cap is not None and self._s.count >= self.small * cap))

    def _main_over(self) -> bool:
        cap = self._cap
        return (self._m.bytes > (1 - self.small) * self._budget.max_bytes
                or (cap is not None and self._m.count > cap - math.floor(self.small * cap)))

    def _victim(self) -> S3FifoNode:
        s, m = self._s, self._m
        while s.count and (not m.count or self._small_full()):
            node = s.oldest
            s.remove(node)
            if node.freq >= self.move_threshold:
                m.push(node)
                if self._main_over():
                    return self._evict_main()
            else:
                self._g.add(node.path, node.size)
                self._trim()
                return node
        return self._evict_main()

    def _evict_main(self) -> S3FifoNode:
        m = self._m
        while True:
            node = m.oldest
            m.remove(node)
            if node.freq == 0:
                return node
            node.freq -= 1
            m.push(node)

    def _trim(self) -> None:
        g, cap = self._g, self._cap
        while len(g) and (g.bytes > self.ghost * self._budget.max_bytes
                          or (cap is not None and len(g) > self.ghost * cap)):
            g.drop_oldest()

    def __repr__(self) -> str:
        return (f"S3FifoStrategy(max_entries={self.max_entries}, small={self.small}, ghost={self.ghost}, "
                f"move_threshold={self.move_threshold})")


def create_s3fifo_context_strategy(max_entries: int | None = 100, small: float = 0.1, ghost: float = 0.9,
                                   move_threshold: int = 1) -> S3FifoStrategy:
    """S3-FIFO (stateful); ``small`` is the small queue's share of the budget."""
    return S3FifoStrategy(max_entries, small, ghost, move_threshold)
