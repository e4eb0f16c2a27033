"""A lazy, read-only view of the manager's context that a strategy receives as its state."""

from __future__ import annotations

from collections.abc import Sequence, ValuesView
from itertools import islice

from sim.compiled import ENABLED, _fastpath
from strategies.contract import ContextEntry

__all__ = ["StateView"]

_CLOSED = "this state was only valid during the evict call that received it"


class ViewSlots:
    """`StateView`'s slots and sequence protocol in Python: the reference of the compiled base."""

    __slots__ = ("_values", "_items", "total_bytes")

    def __init__(self, values: ValuesView[ContextEntry] | None = None, total_bytes: int | None = None) -> None:
        self._values: ValuesView[ContextEntry] | None = values
        self._items: tuple[ContextEntry, ...] | None = None
        self.total_bytes = total_bytes

    def _tuple(self) -> tuple[ContextEntry, ...]:
        items = self._items
        if items is None:
            if self._values is None:
                raise RuntimeError(_CLOSED)
            items = self._items = tuple(self._values)
        return items

    def close(self) -> None:
        """End the view's validity (entries already copied stay readable)."""
        self._values = None

    def __len__(self) -> int:
        values = self._values
        if values is not None:
            return len(values)
        if self._items is None:
            raise RuntimeError(_CLOSED)
        return len(self._items)

    def __getitem__(self, index):
        if index.__class__ is slice and self._items is None and self._values is not None:
            start, stop, step = index.start or 0, index.stop, index.step
            if start >= 0 and (stop is None or stop >= 0) and (step is None or step == 1):
                # A leading run (what LRU-like strategies take) without copying the whole state.
                return tuple(islice(self._values, start, stop))
        return self._tuple()[index]

    def __iter__(self):
        return iter(self._tuple())


class StateView(_fastpath.StateViewBase if ENABLED else ViewSlots, Sequence):
    """The resident entries in ``(last_accessed_at, id)`` order, with ``total_bytes`` precomputed.

    The entries are copied into a tuple only when a strategy first iterates or indexes the view,
    so a strategy that only needs ``len(state)`` and ``state.total_bytes`` (every built-in, when
    the context fits) costs O(1) per turn, and a slice ``state[i:j]`` taken before that costs
    O(j) (LRU takes the oldest few entries so). The view is valid during the ``evict`` call; the
    manager closes it afterwards, and a strategy that keeps it and reads it later gets an error
    rather than a silently changed state. (The manager sets the three slots directly, without
    ``__init__``, and clears ``_values`` itself after the call.)

    Where the compiled fast path is built, the slots and the sequence protocol are in C
    (``StateViewBase``): ``len``, indexing and iteration then cost no Python call.
    """

    __slots__ = ()
    recency_sorted = True

    def __repr__(self) -> str:
        return f"StateView({list(self._tuple())!r}, total_bytes={self.total_bytes})"
