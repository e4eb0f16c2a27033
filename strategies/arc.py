"""ARC eviction (Megiddo & Modha, FAST'03): recency and frequency lists balanced by ghost hits. Stateful."""

from __future__ import annotations

from ctxbench.strategies.history import Ghosts, HistoryStrategy, Node, Queue

__all__ = ["ArcNode", "ArcStrategy", "create_arc_context_strategy"]

_T1, _T2 = 1, 2


class ArcNode(Node):
    """A tracked entry of ARC, with the list it goes to when admitted (T1, or T2 after a ghost hit)."""

    __slots__ = ("target",)

    def __init__(self, entry_id: str, path: str, size: int) -> None:
        super().__init__(entry_id, path, size)
        self.target = _T1


class ArcStrategy(HistoryStrategy):
    """Adaptive Replacement Cache.

    Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003. T1 holds
    entries used once since they entered, T2 entries used again (both LRU lists); B1 and B2
    remember the paths recently evicted from each (ghosts, no content). A miss whose path is in
    B1 says T1 was too small: the target size ``p`` of T1 grows; a miss in B2 shrinks it. Such a
    path re-enters straight into T2. REPLACE evicts the LRU end of T1 while T1 is above ``p``
    (or at ``p`` when the miss was a B2 ghost hit), else the LRU end of T2.

    Adapted to a context window (see `HistoryStrategy` for the common rules):

    - sizes are bytes: the cache size ``c`` is ``budget.max_bytes``, ``p`` is in bytes, and a
      ghost hit moves ``p`` by ``max(1, |B2| / |B1|)`` (resp. ``|B1| / |B2|``) times the
      entry's size, the ratios taken in bytes, like size-aware ARC variants;
    - the directory bounds hold in bytes and in entries: ``T1 + B1`` at most ``c`` bytes and
      the entry cap, all four lists at most ``2c`` bytes and twice the cap; B1 is trimmed for
      the first bound, B2 (then B1) for the second;
    - victims are taken until both the byte budget and the entry cap hold; a new revision of a
      resident file (an edit) is a hit, and a ghost is matched by path, so an evicted file read
      again at a new revision still counts as a ghost hit.

    Stateful: not replay-pure.

    >>> from ctxbench.strategies.contract import ContextBudget, ContextEntry
    >>> arc, budget = ArcStrategy(), ContextBudget(max_bytes=20)
    >>> e = {p: ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abc")}
    >>> arc.on_insert(e["a"]); arc.on_insert(e["b"]); arc.evict([e["a"], e["b"]], budget)
    []
    >>> arc.on_access(e["b"])         # b moves to T2; a stays alone in T1
    >>> arc.on_insert(e["c"]); arc.evict([e["a"], e["b"], e["c"]], budget)
    ['a:0']
    >>> arc.on_remove("a:0", True); arc.on_insert(e["a"])   # a ghost hit in B1: p grows
    >>> arc.target_bytes
    10.0
    """

    NODE = ArcNode

    def _reset_policy(self) -> None:
        super()._reset_policy()
        self._t1, self._t2 = Queue(), Queue()
        self._b1, self._b2 = Ghosts(), Ghosts()
        self._p = 0.0
        self._ghost_b2 = False

    @property
    def target_bytes(self) -> float:
        """ARC's ``p``: the bytes T1 aims at."""
        return self._p

    def _on_arrival(self, node: ArcNode) -> None:
        b1, b2, size = self._b1.bytes, self._b2.bytes, node.size
        self._ghost_b2 = False
        node.target = _T1
        if self._b1.pop(node.path) is not None:
            self._p += max(1.0, b2 / b1 if b1 else 1.0) * size
            node.target = _T2
        elif self._b2.pop(node.path) is not None:
            self._p = max(0.0, self._p - max(1.0, b1 / b2 if b2 else 1.0) * size)
            node.target = _T2
            self._ghost_b2 = True

    def _admit(self, node: ArcNode) -> None:
        (self._t2 if node.target == _T2 else self._t1).push(node)

    def _hit(self, node: ArcNode) -> None:
        if node.queue is None:
            node.target = _T2
        else:
            node.queue.remove(node)
            self._t2.push(node)

    def _victim(self) -> ArcNode:
        t1, t2 = self._t1, self._t2
        p = self._p = min(self._p, float(self._budget.max_bytes))
        if t1.count and (t1.bytes > p or (self._ghost_b2 and t1.bytes == p) or not t2.count):
            node = t1.oldest
            t1.remove(node)
            self._b1.add(node.path, node.size)
        else:
            node = t2.oldest
            t2.remove(node)
            self._b2.add(node.path, node.size)
        return node

    def _trim(self) -> None:
        c, cap = self._budget.max_bytes, self._cap
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        while len(b1) and (t1.bytes + b1.bytes > c or (cap is not None and t1.count + len(b1) > cap)):
            b1.drop_oldest()
        while len(b1) + len(b2) and (t1.bytes + t2.bytes + b1.bytes + b2.bytes > 2 * c or
                                     (cap is not None and t1.count + t2.count + len(b1) + len(b2) > 2 * cap)):
            (b2 if len(b2) else b1).drop_oldest()


def create_arc_context_strategy(max_entries: int | None = 100) -> ArcStrategy:
    """ARC (stateful) with an entry cap of ``max_entries`` (``None``: no cap)."""
    return ArcStrategy(max_entries)
