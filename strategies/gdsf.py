"""GreedyDual-Size-Frequency-style eviction from entry fields: lowest ``clock + frequency × cost ÷ footprint`` first."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from ctxbench.strategies.base import CappedStrategy
from ctxbench.strategies.contract import MAX_ENTRIES, ContextBudget, ContextEntry, min_cap
from ctxbench.strategies.ordering import evict_by_key, evict_ranked, rank, rank_array
from ctxbench.strategies.outputs_first import OUTPUT_PREFIX
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["GdsfStrategy", "create_gdsf_context_strategy", "gdsf_definition", "gdsf_priorities"]

_SIZE = attrgetter("size_bytes")
_TIME = attrgetter("last_accessed_at")
_COUNT = attrgetter("access_count")
_TIE = attrgetter("last_accessed_at", "id")
_EXACT = 2 ** 53  # integers below this are exact in float64
_NUMPY_FROM = 400  # below this, Python lists beat numpy's conversion overhead


def gdsf_definition(state: Sequence[ContextEntry], budget: ContextBudget, max_entries: int | None = 100,
                    aging: float = 1.0, prefix: str = OUTPUT_PREFIX) -> list[str]:
    """GDSF-style eviction by its definition: lowest priority ``H = L + V`` first, ties by
    ``(last_accessed_at, id)``, until the rest fits the byte budget and the tighter of ``max_entries``
    and ``budget.max_entries`` (`evict_by_key`). Source: see `GdsfStrategy`.

    - ``V = frequency × cost ÷ footprint``: frequency is ``access_count`` (1 when absent); the
      cost of evicting a file is the bytes of re-reading it, ``size_bytes``; a tool output
      (``path`` starting with ``prefix``) costs 0, since outputs are never re-read; the
      footprint is ``size_bytes + slot_bytes``, the share of both budgets the entry holds, where
      ``slot_bytes`` is the byte budget per entry slot, ``max_bytes ÷ cap`` (0 without a cap or
      at a cap of 0). So ``V = f × s ÷ (s + slot_bytes)``: about ``f`` for a file much larger
      than a slot (only bytes matter), about ``f × s ÷ slot_bytes`` for a small one (only the
      slot matters). An empty file has ``V = 0``.
    - A tool output has ``H = 0``: dropping a zero-cost entry never costs anything, whenever it
      leaves, so outputs go before every file.
    - ``L`` stands in for GDSF's inflation clock, which the pure contract cannot keep: the clock
      rises with every eviction, i.e. with the traffic since an entry was last used, so it is
      derived from ``last_accessed_at`` as ``L = aging × V_max × rank ÷ n``, where ``rank`` is the
      number of entries accessed at or before this one and ``V_max`` the largest ``V`` in the
      state. A rank, not the raw time, so that long pauses between turns do not age entries.

    >>> hub = ContextEntry("hub.py:0", "hub.py", 1, 4_000, access_count=6)
    >>> walk = ContextEntry("w.py:0", "w.py", 2, 4_000, access_count=1)
    >>> log = ContextEntry("tool://bash/3:0", "tool://bash/3", 3, 4_000, access_count=1)
    >>> gdsf_definition([hub, walk, log], ContextBudget(max_bytes=8_000, max_entries=2))   # H 4.0, 2.5, 0.0
    ['tool://bash/3:0']
    """
    if not state:
        return []
    cap = min_cap(max_entries, budget.max_entries)
    slot_bytes = budget.max_bytes / cap if cap else 0.0
    times = sorted(e.last_accessed_at for e in state)

    def value(entry: ContextEntry) -> float:
        if entry.path.startswith(prefix) or entry.size_bytes <= 0:
            return 0.0
        frequency = 1 if entry.access_count is None else entry.access_count
        return frequency * entry.size_bytes / (entry.size_bytes + slot_bytes)

    clock_per_rank = aging * max(map(value, state)) / len(state)

    def priority(entry: ContextEntry) -> float:
        if entry.path.startswith(prefix):
            return 0.0
        return value(entry) + clock_per_rank * bisect_right(times, entry.last_accessed_at)

    return evict_by_key(state, budget, lambda e: (priority(e), e.last_accessed_at, e.id), cap)


def gdsf_priorities(state: Sequence[ContextEntry], slot_bytes: float = 0.0, aging: float = 1.0,
                    prefix: str = OUTPUT_PREFIX) -> list[float]:
    """The priority ``H`` of `gdsf_definition` of each entry, in state order, for a byte budget of
    ``slot_bytes`` per entry slot.

    >>> hub = ContextEntry("hub.py:0", "hub.py", 1, 4_000, access_count=6)
    >>> walk = ContextEntry("w.py:0", "w.py", 2, 4_000, access_count=1)
    >>> log = ContextEntry("tool://bash/3:0", "tool://bash/3", 3, 4_000, access_count=1)
    >>> [round(h, 2) for h in gdsf_priorities([hub, walk, log], slot_bytes=4_000)]
    [4.0, 2.5, 0.0]
    """
    n = len(state)
    if not n:
        return []
    outputs, values = [], []
    for e in state:
        output = e.path.startswith(prefix)
        outputs.append(output)
        size, count = e.size_bytes, e.access_count
        values.append(0.0 if output or size <= 0 else (1 if count is None else count) * size / (size + slot_bytes))
    rank_of = {}  # time -> entries accessed at or before it
    for i, t in enumerate(sorted(map(_TIME, state)), 1):
        rank_of[t] = i
    scale = aging * max(values) / n
    return [0.0 if output else v + scale * rank_of[e.last_accessed_at] for v, e, output in zip(values, state, outputs)]


def _priorities_array(state: Sequence[ContextEntry], slot_bytes: float, aging: float,
                      prefix: str) -> np.ndarray | None:
    """`gdsf_priorities` in numpy, bit for bit, or ``None`` when a value is too large for that.

    The same IEEE operations run in the same order on the same float64 values, so the result is
    identical as long as every ``access_count × size_bytes`` is an exact float64.
    """
    counts = [1 if c is None else c for c in map(_COUNT, state)]
    try:
        c = np.array(counts, dtype=np.int64)
        s = np.array(list(map(_SIZE, state)), dtype=np.int64)
        t = np.array(list(map(_TIME, state)), dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        return None
    if c.min() < 0 or s.min() < 0 or float(c.max()) * float(s.max()) >= _EXACT:
        return None
    outputs = np.fromiter((e.path.startswith(prefix) for e in state), dtype=bool, count=len(state))
    files = ~outputs & (s > 0)
    values = np.zeros(len(state))
    values[files] = (c[files] * s[files]).astype(np.float64) / (s[files] + slot_bytes)
    scale = aging * float(values.max()) / len(state)
    ranks = np.searchsorted(np.sort(t), t, side="right")
    return np.where(outputs, 0.0, values + scale * ranks)


class GdsfStrategy(CappedStrategy):
    """Evict the lowest GreedyDual-Size-Frequency priority first: `gdsf_definition`, at speed.

    After Cherkasova, "Improving WWW Proxies Performance with Greedy-Dual-Size-Frequency
    Caching Policy", HP Labs HPL-98-69R1, 1998 (GreedyDual-Size: Cao & Irani, USITS 1997):
    priority ``H = L + frequency × cost ÷ size``. Adapted to a context window: the cost is the
    re-read bytes (0 for tool outputs, which are never re-read), the size is the footprint in
    both budgets (bytes plus a byte-equivalent of one entry slot, ``max_bytes ÷ cap``), and the
    clock ``L`` is derived from recency because a pure strategy has no history (the docstring of
    `gdsf_definition` gives the exact formula). ``aging`` weighs recency against frequency
    (0: frequency only). Ties by ``(last_accessed_at, id)``. The entry cap is the tighter of
    ``max_entries`` and ``budget.max_entries``. Cost: O(1) when the state fits and carries
    ``total_bytes``; O(n log n) otherwise (the priorities by `gdsf_priorities`, or by numpy from
    400 entries).

    >>> gdsf = GdsfStrategy()
    >>> state = [ContextEntry("hub.py:0", "hub.py", 1, 300, access_count=6),
    ...          ContextEntry("w.py:0", "w.py", 2, 300, access_count=1),
    ...          ContextEntry("tool://bash/3:0", "tool://bash/3", 3, 300, access_count=1)]
    >>> gdsf.evict(state, ContextBudget(max_bytes=400))   # the output, then the once-read file
    ['tool://bash/3:0', 'w.py:0']
    """

    __slots__ = ("aging", "prefix")
    TUNABLE = declare(MAX_ENTRIES, Tunable("aging", "float", 0, float("inf"), (0, 4),
                                           doc="weight of recency (the clock) against frequency"))

    def __init__(self, max_entries: int | None = 100, aging: float = 1.0, prefix: str = OUTPUT_PREFIX) -> None:
        super().__init__(max_entries)
        aging = self.TUNABLE["aging"].check(aging)
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
        self.aging = float(aging)
        self.prefix = prefix

    def evict_over(self, state: Sequence[ContextEntry], budget: ContextBudget, total: int,
                   cap: int | None) -> list[str]:
        slot = budget.max_bytes / cap if cap else 0.0
        h = _priorities_array(state, slot, self.aging, self.prefix) if len(state) >= _NUMPY_FROM else None
        # A stable sort on the priority alone; evict_ranked orders equal priorities by (time, id).
        order, keys = rank(gdsf_priorities(state, slot, self.aging, self.prefix)) if h is None else rank_array(h)
        return evict_ranked(list(map(state.__getitem__, order)), keys.__getitem__, _TIE, total, budget, cap, keys)

    def definition(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        return gdsf_definition(state, budget, self.max_entries, self.aging, self.prefix)


def create_gdsf_context_strategy(max_entries: int | None = 100, aging: float = 1.0,
                                 prefix: str = OUTPUT_PREFIX) -> GdsfStrategy:
    """GDSF-style eviction; ``aging`` weighs recency against frequency (default 1)."""
    return GdsfStrategy(max_entries, aging, prefix)
