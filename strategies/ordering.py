"""Eviction in a ranked order: the plain rule every built-in pure strategy follows, and its fast forms."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import compress
from operator import attrgetter, eq, itemgetter
from typing import Any

import numpy as np

from ctxbench.strategies.contract import ContextBudget, ContextEntry

__all__ = [
    "NUMPY_FROM", "QUICKSORT_FROM", "evict_by_key", "evict_in_order", "evict_ranked", "int64_array", "rank",
    "rank_array", "reorder", "stable_argsort",
]

_ID = attrgetter("id")
_SIZE = attrgetter("size_bytes")
# struct converts an int beyond 30 bits to a native long in half the instructions of "q".
_INT64 = "l" if struct.calcsize("l") == 8 else "q"

# Below this size a Python sort beats numpy's conversion overhead (measured, see the benchmarks).
NUMPY_FROM = 36
# From this many values numpy's timsort ("stable") falls behind its default sort (measured).
QUICKSORT_FROM = 1_000


def evict_by_key(state: Sequence[ContextEntry], budget: ContextBudget, key: Callable[[ContextEntry], Any],
                 cap: int | None) -> list[str]:
    """The rule of every built-in pure strategy, plainly: sort ``state`` by ``key`` and evict from the
    front while the rest holds more than ``budget.max_bytes`` bytes or more than ``cap`` entries.

    The sort is stable, and ``cap`` is the entry cap in force (``None``: none). Each strategy's
    definition is this walk with its key; its optimised code must give the same ids in the same order.

    >>> es = [ContextEntry("a:0", "a", 3, 10), ContextEntry("b:0", "b", 1, 10), ContextEntry("c:0", "c", 2, 10)]
    >>> evict_by_key(es, ContextBudget(max_bytes=15), _ID, None), evict_by_key(es, ContextBudget(100), _ID, 1)
    (['a:0', 'b:0'], ['a:0', 'b:0'])
    """
    bytes_left, entries_left = sum(e.size_bytes for e in state), len(state)
    out = []
    for entry in sorted(state, key=key):
        if bytes_left <= budget.max_bytes and (cap is None or entries_left <= cap):
            break
        out.append(entry.id)
        bytes_left -= entry.size_bytes
        entries_left -= 1
    return out


def evict_in_order(ordered: Sequence[ContextEntry], total_bytes: int, budget: ContextBudget,
                   cap: int | None, count: int | None = None) -> list[str]:
    """Ids taken from the front of ``ordered`` until the rest fits ``budget`` and ``cap``: the walk of
    `evict_by_key` on entries already sorted, ``total_bytes`` in all.

    Reads ``ordered`` only through slices from the front, of doubling length: O(evicted) on a
    sequence that slices lazily (the replay engine's state view), O(n) at worst on a list. ``count``
    is the number of entries in the state, ``len(ordered)`` by default; when ``ordered`` holds
    only the state's front, the answer is complete only if it is shorter than ``ordered``.

    >>> es = [ContextEntry(f"{p}:0", p, t, 10) for t, p in enumerate("abc")]
    >>> evict_in_order(es, 30, ContextBudget(max_bytes=15), None)
    ['a:0', 'b:0']
    >>> evict_in_order(es, 30, ContextBudget(max_bytes=100), 1)
    ['a:0', 'b:0']
    """
    if count is None:
        count = len(ordered)
    max_bytes = budget.max_bytes
    out: list[str] = []
    start = 0
    if cap is not None and count > cap:
        # The first count - cap entries go whatever the bytes: take them in one step.
        start = count - cap
        forced = ordered[:start]
        out = list(map(_ID, forced))
        total_bytes -= sum(map(_SIZE, forced))
    step = 4
    while total_bytes > max_bytes and start < count:
        for entry in ordered[start:start + step]:
            if total_bytes <= max_bytes:
                break
            out.append(entry.id)
            total_bytes -= entry.size_bytes
        start += step
        step *= 2
    return out


def rank(values: Sequence[Any]) -> tuple[list[int], Sequence[Any]]:
    """Indices that stably sort ``values``, and the sorted values (an array when numpy sorted them,
    for long integer lists).

    >>> rank([3, 1, 2, 1])
    ([1, 3, 2, 0], [1, 1, 2, 3])
    """
    arr = int64_array(values) if len(values) >= NUMPY_FROM else None
    if arr is not None:
        return rank_array(arr[0])
    order = sorted(range(len(values)), key=values.__getitem__)
    return order, [values[i] for i in order]


def int64_array(values: Sequence[Any], rows: int = 1) -> np.ndarray | None:
    """``values`` as a read-only int64 array of ``rows`` rows, or ``None`` unless every value is an
    integer that fits.

    One `struct.pack`: half the instructions of ``np.array`` on a list of Python ints, and exact
    (floats and strings are refused, not truncated or parsed).

    >>> int64_array([1, 2, 3, -4], 2).tolist(), int64_array([1.0, 2]), int64_array([2 ** 63])
    ([[1, 2], [3, -4]], None, None)
    """
    try:
        packed = struct.pack(f"{len(values)}{_INT64}", *values)
    except struct.error:
        return None
    return np.frombuffer(packed, _INT64).reshape(rows, -1)


def reorder(state: Sequence[ContextEntry], order: Sequence[int]) -> Sequence[ContextEntry]:
    """``[state[i] for i in order]``, at C speed.

    >>> reorder("abc", [2, 0, 1]), reorder("abc", [1]), reorder("abc", [])
    (('c', 'a', 'b'), ('b',), ())
    """
    if len(order) < 2:
        return tuple(state[i] for i in order)
    return itemgetter(*order)(state)


def rank_array(arr: np.ndarray) -> tuple[list[int], np.ndarray]:
    """`rank` for a numpy array: a stable argsort as a list, and the sorted values."""
    order = stable_argsort(arr)
    return order.tolist(), arr[order]


def stable_argsort(arr: np.ndarray) -> np.ndarray:
    """``arr.argsort(kind="stable")``, from `QUICKSORT_FROM` values by numpy's default sort, 2 to 5
    times faster than its timsort at 10,000: on (value, position) packed in one int64 where the
    integers allow, else on the values and then on (run of equal values, position). O(n log n).

    >>> stable_argsort(np.array([2.0, 1.0, 2.0, 1.0] * 300))[:3].tolist()
    [1, 3, 5]
    """
    n = len(arr)
    if n < QUICKSORT_FROM:
        return arr.argsort(kind="stable")
    if arr.dtype.kind == "i":
        low = int(arr.min())
        if (int(arr.max()) - low + 1) * n < 2 ** 63:
            # Unique keys: any sort of them is stable.
            packed = arr - low
            packed *= n
            packed += np.arange(n)
            return packed.argsort()
    order = arr.argsort()
    ascending = arr[order]
    if ascending[-1] != ascending[-1]:  # NaNs sort last and equal nothing: no runs to find
        return arr.argsort(kind="stable")
    same = ascending[1:] == ascending[:-1]
    if same.any():
        run = np.zeros(n, np.int64)
        np.cumsum(~same, out=run[1:])
        run *= n
        run += order
        order = order[run.argsort()]
    return order


def evict_ranked(ordered: Sequence[ContextEntry], key_at: Callable[[int], Any],
                 tie_key: Callable[[ContextEntry], Any], total_bytes: int, budget: ContextBudget,
                 cap: int | None, keys: Sequence[Any] | None = None, count: int | None = None) -> list[str]:
    """Ids from the front of ``ordered`` until the rest fits; runs of equal keys go by ``tie_key``: the
    walk of `evict_by_key` on entries sorted by a primary key only.

    ``ordered`` is stably sorted by a primary key only, and ``key_at(i)`` is the key of
    ``ordered[i]`` (``keys``, when given, holds those keys, a list or an array). Only the runs of equal
    keys actually reached are sorted, so this costs O(evicted) on top of the caller's sort,
    which can then use a cheap scalar key. ``count`` is the number of entries in the state
    when ``ordered`` holds only its front (whole runs of equal keys); the answer is then
    complete only if it is shorter than ``ordered``.

    >>> es = [ContextEntry("b:0", "b", 1, 10), ContextEntry("a:0", "a", 1, 10),
    ...       ContextEntry("c:0", "c", 2, 10)]
    >>> evict_ranked(es, [1, 1, 2].__getitem__, _ID, 30, ContextBudget(max_bytes=15), None)
    ['a:0', 'b:0']
    """
    n = len(ordered)
    max_bytes = budget.max_bytes
    if count is None:
        count = n
    out: list[str] = []
    i = 0
    if cap is not None and count - cap > 1:
        # The first count - cap entries go whatever the bytes: settle the order of the runs
        # of equal keys among them, then take them in one step.
        forced = count - cap
        end = min(forced + 1, n)
        head = keys[:end] if keys is not None else list(map(key_at, range(end)))
        # Positions k with head[k] == head[k - 1], found at C speed.
        if isinstance(head, np.ndarray):  # as `rank_array` gives them
            ties = (np.flatnonzero(head[1:] == head[:-1]) + 1).tolist()
        else:
            ties = list(compress(range(1, end), map(eq, head, head[1:])))
        if ties:
            ordered = list(ordered)
            settled = 0
            for k in ties:
                if k < settled:
                    continue
                stop = k + 1
                while stop < n and key_at(stop) == head[k]:
                    stop += 1
                ordered[k - 1:stop] = sorted(ordered[k - 1:stop], key=tie_key)
                settled = stop
        taken = ordered[:forced]
        out = [e.id for e in taken]   # comprehensions: faster than map(attrgetter) on slots
        total_bytes -= sum([e.size_bytes for e in taken])
        count -= forced
        i = forced
    while i < n and (total_bytes > max_bytes or (cap is not None and count > cap)):
        key = key_at(i)
        j = i + 1
        while j < n and key_at(j) == key:
            j += 1
        if j == i + 1:
            entry = ordered[i]
            out.append(entry.id)
            total_bytes -= entry.size_bytes
            count -= 1
        else:
            for entry in sorted(ordered[i:j], key=tie_key):
                if total_bytes <= max_bytes and (cap is None or count <= cap):
                    break
                out.append(entry.id)
                total_bytes -= entry.size_bytes
                count -= 1
        i = j
    return out
