"""The bookkeeping of the history-keeping (stateful) policies: tracked nodes, FIFO queues, ghost lists."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import ClassVar

from ctxbench.strategies.contract import MAX_ENTRIES, ContextBudget, ContextEntry, check_max_entries, min_cap
from ctxbench.strategies.stateful import StatefulContextStrategy
from ctxbench.strategies.tunable import declare

__all__ = ["Ghosts", "HistoryStrategy", "Node", "Queue"]

_SIZE = attrgetter("size_bytes")
_RECENCY = attrgetter("last_accessed_at", "id")


class Node:
    """One tracked entry: its id, path and size, and its links in a `Queue`.

    A policy that keeps more per entry subclasses it with those fields and names the subclass
    in `HistoryStrategy.NODE`.
    """

    __slots__ = ("id", "path", "size", "queue", "older", "newer")

    def __init__(self, entry_id: str, path: str, size: int) -> None:
        self.id, self.path, self.size = entry_id, path, size
        self.queue: Queue | None = None
        self.older: Node | None = None
        self.newer: Node | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, size={self.size})"


class Queue:
    """A doubly linked list of nodes, newest at the head, with its byte and entry totals.

    >>> q = Queue(); a, b = Node("a:0", "a", 5), Node("b:0", "b", 7)
    >>> q.push(a); q.push(b); [n.id for n in q], q.bytes, len(q)
    (['a:0', 'b:0'], 12, 2)
    >>> q.remove(a); q.oldest.id, q.bytes
    ('b:0', 7)
    """

    __slots__ = ("oldest", "newest", "bytes", "count")

    def __init__(self) -> None:
        self.oldest: Node | None = None
        self.newest: Node | None = None
        self.bytes = 0
        self.count = 0

    def push(self, node: Node) -> None:
        """Put ``node`` (in no queue) at the newest end."""
        node.queue, node.older, node.newer = self, self.newest, None
        if self.newest is None:
            self.oldest = node
        else:
            self.newest.newer = node
        self.newest = node
        self.bytes += node.size
        self.count += 1

    def remove(self, node: Node) -> None:
        """Unlink ``node`` from this queue."""
        if node.older is None:
            self.oldest = node.newer
        else:
            node.older.newer = node.newer
        if node.newer is None:
            self.newest = node.older
        else:
            node.newer.older = node.older
        node.queue = node.older = node.newer = None
        self.bytes -= node.size
        self.count -= 1

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Node]:
        """Oldest to newest."""
        node = self.oldest
        while node is not None:
            yield node
            node = node.newer


class HistoryStrategy(StatefulContextStrategy):
    """Shared bookkeeping of the history policies (FIFO, SIEVE, S3-FIFO, ARC). Not replay-pure.

    Entries are tracked by id; an entry replaced by a new revision (``on_remove(id, False)``
    then ``on_insert`` of the same path, an edit) keeps its place and counts as a hit.
    Subclasses implement ``_admit(node)``, ``_hit(node)`` and ``_victim() -> Node``, may
    override ``_on_arrival(node)``, ``_discard(node)`` and ``_trim()``, and name in ``NODE`` the
    `Node` subclass that holds their per-entry fields.

    Adaptation to a context window, common to every history policy:

    - **Evict before insert.** A cache evicts to make room and then inserts the new object;
      the replay engine instead inserts during the turn and calls ``evict`` at its end. So entries
      that arrived since the last ``evict`` call are *pending*: the policy first evicts
      admitted entries until the pending ones fit, then admits them. Only when the pending
      entries alone exceed the budget does it evict among them, by its own order.
    - **Byte budget and entry cap.** Victims are taken one at a time until the context holds
      at most ``budget.max_bytes`` bytes and the entry cap (the tighter of ``max_entries`` and
      ``budget.max_entries``); each policy sizes its queues in bytes (see its docstring).
    - **Oversize entries.** A pending entry larger than the whole byte budget is dropped first
      and never admitted, as a cache does not admit an object larger than itself.
    - **Robust to a state it did not see arrive.** Before evicting, the tracked entries are
      reconciled with ``state``: unknown entries become pending in ``(last_accessed_at, id)``
      order, tracked ones absent from ``state`` are forgotten. Driven by the replay engine this is
      a no-op; it lets the strategy answer correctly on any state (e.g. in ``ctxbench check``).
    """

    #: The node type of this policy's tracked entries.
    NODE: ClassVar[type[Node]] = Node
    #: What ``ctxbench tune`` may set (`strategies.tunable`).
    TUNABLE: ClassVar = declare(MAX_ENTRIES)

    def __init__(self, max_entries: int | None = 100) -> None:
        self.max_entries = check_max_entries(max_entries)
        self.reset()

    # ----- hooks (StatefulContextStrategy) -------------------------------------------------
    def reset(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._pending: dict[str, Node] = {}
        self._replaced: Node | None = None
        self._reset_policy()

    def on_insert(self, entry: ContextEntry) -> None:
        node = self._replaced
        self._replaced = None
        if node is not None and node.path == entry.path:
            self._rename(node, entry.id, entry.size_bytes)
            self._hit(node)
            return
        if node is not None:
            self._forget(node)
        old = self._nodes.get(entry.id)
        if old is not None:
            self._forget(old)
        node = self.NODE(entry.id, entry.path, entry.size_bytes)
        self._nodes[entry.id] = node
        self._pending[entry.id] = node
        self._arrive(node)

    def on_access(self, entry: ContextEntry) -> None:
        node = self._nodes.get(entry.id)
        if node is not None:
            if node.size != entry.size_bytes:
                self._resize(node, entry.size_bytes)
            self._hit(node)

    def on_remove(self, entry_id: str, evicted: bool) -> None:
        if self._replaced is not None:
            self._forget(self._replaced)
            self._replaced = None
        node = self._nodes.get(entry_id)
        if node is None:
            return  # already dropped when this strategy chose it
        if evicted:
            self._forget(node)
        else:
            self._replaced = node  # a new revision of its path follows at once

    # ----- eviction ------------------------------------------------------------------------
    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        if self._replaced is not None:
            self._forget(self._replaced)
            self._replaced = None
        cap = min_cap(self.max_entries, budget.max_entries)
        self._budget, self._cap = budget, cap
        total = getattr(state, "total_bytes", None)
        if total is None:
            total = sum(map(_SIZE, state))
        if total <= budget.max_bytes and (cap is None or len(state) <= cap):
            self._admit_pending()
            self._trim()
            return []
        self._sync(state)
        out: list[str] = []
        max_bytes = budget.max_bytes
        for node in [n for n in self._pending.values() if n.size > max_bytes]:
            self._forget(node)
            out.append(node.id)
        while self._over(cap) and len(self._pending) < len(self._nodes):
            out.append(self._take(self._victim()))
        self._admit_pending()
        while self._over(cap) and self._nodes:
            out.append(self._take(self._victim()))
        self._trim()
        return out

    def _over(self, cap: int | None) -> bool:
        return self._tracked_bytes > self._budget.max_bytes or (cap is not None and len(self._nodes) > cap)

    def _take(self, node: Node) -> str:
        """Drop a victim the policy has already unlinked; return its id."""
        del self._nodes[node.id]
        self._tracked_bytes -= node.size
        return node.id

    def _admit_pending(self) -> None:
        pending = self._pending
        self._pending = {}
        for node in pending.values():
            self._admit(node)

    def _sync(self, state: Sequence[ContextEntry]) -> None:
        present = {e.id: e for e in state}
        for node in [n for n in self._nodes.values() if n.id not in present]:
            self._forget(node)
        unknown = [e for e in present.values() if e.id not in self._nodes]
        if not getattr(state, "recency_sorted", False):
            unknown.sort(key=_RECENCY)
        for entry in unknown:
            self.on_insert(entry)
        for entry in present.values():
            node = self._nodes[entry.id]
            if node.size != entry.size_bytes:
                self._resize(node, entry.size_bytes)

    def _rename(self, node: Node, new_id: str, size: int) -> None:
        del self._nodes[node.id]
        if self._pending.pop(node.id, None) is not None:
            self._pending[new_id] = node
        node.id = new_id
        self._nodes[new_id] = node
        if node.size != size:
            self._resize(node, size)

    def _resize(self, node: Node, size: int) -> None:
        self._tracked_bytes += size - node.size
        if node.queue is not None:
            node.queue.bytes += size - node.size
        node.size = size

    def _arrive(self, node: Node) -> None:
        self._tracked_bytes += node.size
        self._on_arrival(node)

    def _forget(self, node: Node) -> None:
        """Stop tracking ``node`` without recording it as evicted by this policy."""
        if self._nodes.get(node.id) is node:
            del self._nodes[node.id]
            self._tracked_bytes -= node.size
        self._pending.pop(node.id, None)
        if node.queue is not None:
            self._discard(node)

    # ----- policy interface ----------------------------------------------------------------
    def _reset_policy(self) -> None:
        self._tracked_bytes = 0
        self._budget = ContextBudget(max_bytes=0)
        self._cap: int | None = None

    def _on_arrival(self, node: Node) -> None:
        """A new entry is pending (ghost lookups happen here)."""

    def _trim(self) -> None:
        """Called at the end of every ``evict`` call, with the budget known (ghost trimming)."""

    def _admit(self, node: Node) -> None:
        raise NotImplementedError

    def _hit(self, node: Node) -> None:
        raise NotImplementedError

    def _victim(self) -> Node:
        """Choose the next victim among admitted entries and unlink it from the queues."""
        raise NotImplementedError

    def _discard(self, node: Node) -> None:
        """Unlink ``node`` from the policy's queues (it left for another reason)."""
        node.queue.remove(node)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_entries={self.max_entries})"


class Ghosts:
    """Paths recently evicted, oldest first, with their sizes and byte total (no content).

    >>> g = Ghosts(); g.add("a", 5); g.add("b", 7); g.pop("a"), g.bytes, len(g)
    (5, 7, 1)
    """

    __slots__ = ("sizes", "bytes")

    def __init__(self) -> None:
        self.sizes: OrderedDict[str, int] = OrderedDict()
        self.bytes = 0

    def add(self, path: str, size: int) -> None:
        """Record ``path`` as the newest ghost."""
        self.pop(path)
        self.sizes[path] = size
        self.bytes += size

    def pop(self, path: str) -> int | None:
        """Remove ``path``; its recorded size, or ``None`` when it was not a ghost."""
        size = self.sizes.pop(path, None)
        if size is not None:
            self.bytes -= size
        return size

    def drop_oldest(self) -> None:
        """Forget the oldest ghost."""
        _, size = self.sizes.popitem(last=False)
        self.bytes -= size

    def __contains__(self, path: str) -> bool:
        return path in self.sizes

    def __len__(self) -> int:
        return len(self.sizes)
