"""Every built-in pure strategy gives its plain definition's answer on every path: same ids, same order."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.sim.engine.rules import StateView
from ctxbench.strategies import compiled as kernels
from ctxbench.strategies.base import CappedStrategy, KeyOrderedStrategy
from ctxbench.strategies.contract import ContextBudget, ContextEntry, ContextState, min_cap
from ctxbench.strategies.gdsf import GdsfStrategy, gdsf_definition
from ctxbench.strategies.importance import ImportanceStrategy, importance_definition
from ctxbench.strategies.lfu import LfuStrategy, lfu_key
from ctxbench.strategies.lru import FRONT_FROM, LRU_NUMPY_FROM, LruStrategy, lru_definition, lru_key
from ctxbench.strategies.ordering import NUMPY_FROM, QUICKSORT_FROM, evict_by_key
from ctxbench.strategies.outputs_first import OutputsFirstStrategy, outputs_first_key
from ctxbench.strategies.segmented import SegmentedStrategy, protected_ids, segmented_key
from ctxbench.strategies.size import SizeStrategy, size_key

# Both implementations where the kernels are built: the compiled one, and the Python code.
COMPILED = [True, False] if kernels.evict_order is not None else [False]


# --- each strategy, its options, and its definition written out independently of the class ---------

@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[int | None], CappedStrategy]    # the strategy, given its own entry cap
    define: Callable[[Sequence[ContextEntry], ContextBudget, int | None], list[str]]


def _cap(budget: ContextBudget, own: int | None) -> int | None:
    return min_cap(own, budget.max_entries)


def _segmented(protected: float, threshold: int):
    def define(state, budget, own):
        cap = _cap(budget, own)
        keep = protected_ids(state, math.floor(protected * budget.max_bytes),
                             None if cap is None else math.floor(protected * cap), threshold)
        return evict_by_key(state, budget, segmented_key(keep), cap)
    return define


CASES = [
    *(Case(f"lru, compiled={c}", lambda own, c=c: LruStrategy(own, compiled=c), lru_definition) for c in COMPILED),
    *(Case(f"importance, compiled={c}", lambda own, c=c: ImportanceStrategy(own, compiled=c), importance_definition)
      for c in COMPILED),
    Case("lfu", LfuStrategy, lambda s, b, own: evict_by_key(s, b, lfu_key, _cap(b, own))),
    Case("size", SizeStrategy, lambda s, b, own: evict_by_key(s, b, size_key, _cap(b, own))),
    Case("outputs-first", OutputsFirstStrategy,
         lambda s, b, own: evict_by_key(s, b, outputs_first_key(), _cap(b, own))),
    Case("outputs-first?prefix=src/m1", lambda own: OutputsFirstStrategy(own, "src/m1"),
         lambda s, b, own: evict_by_key(s, b, outputs_first_key("src/m1"), _cap(b, own))),
    Case("segmented", SegmentedStrategy, _segmented(0.8, 2)),
    Case("segmented?protected=0.5&threshold=3", lambda own: SegmentedStrategy(own, 0.5, 3), _segmented(0.5, 3)),
    Case("segmented?protected=1&threshold=1", lambda own: SegmentedStrategy(own, 1, 1), _segmented(1.0, 1)),
    Case("segmented?protected=0", lambda own: SegmentedStrategy(own, 0), _segmented(0.0, 2)),
    Case("gdsf", GdsfStrategy, gdsf_definition),
    Case("gdsf?aging=0", lambda own: GdsfStrategy(own, 0), lambda s, b, own: gdsf_definition(s, b, own, 0)),
    Case("gdsf?aging=3.5&prefix=src/m1", lambda own: GdsfStrategy(own, 3.5, "src/m1"),
         lambda s, b, own: gdsf_definition(s, b, own, 3.5, "src/m1")),
]


# --- every kind of state a strategy may be given -------------------------------------------------------

class BareTuple(tuple):
    """A tuple subclass without ``total_bytes``: the skeleton sums, the kernel gets a plain tuple."""


class PlainSequence(Sequence):
    """A `Sequence` that is neither a tuple nor a list and carries no totals."""

    def __init__(self, entries: Sequence[ContextEntry]) -> None:
        self._entries = tuple(entries)

    def __getitem__(self, index):
        return self._entries[index]

    def __len__(self) -> int:
        return len(self._entries)


def _by_recency(state: Sequence[ContextEntry]) -> list[ContextEntry]:
    return sorted(state, key=lru_key)


CONTAINERS: dict[str, Callable[[Sequence[ContextEntry]], Sequence[ContextEntry]]] = {
    "tuple": tuple,
    "list": list,
    "ContextState": ContextState,
    "ContextState, recency-sorted": lambda s: ContextState(_by_recency(s), recency_sorted=True),
    "tuple subclass without total_bytes": BareTuple,
    "Sequence without total_bytes": PlainSequence,
    "the replay engine's StateView": lambda s: StateView({e.id: e for e in _by_recency(s)}.values(),
                                                   sum(e.size_bytes for e in s)),
}


def assert_every_path_gives_the_definition(state: tuple[ContextEntry, ...], budget: ContextBudget,
                                           own: int | None) -> None:
    for case in CASES:
        expected = case.define(state, budget, own)
        strategy = case.build(own)
        assert strategy.definition(state, budget) == expected, (case.name, "definition")
        for container_name, container in CONTAINERS.items():
            got = strategy.evict(container(state), budget)
            assert got == expected, (case.name, container_name, budget, own)


# --- generated requests: ties in time, size and count, huge integers, budgets around the total -----------

def _path(i: int) -> str:
    return f"tool://bash/{i}" if i % 3 == 0 else f"src/m{i}.py"


def _entry(i: int, rev: int, t: int, size: int, count: int | None) -> ContextEntry:
    return ContextEntry(f"{_path(i)}:{rev}", _path(i), t, size, count)


INT64 = 2 ** 63
_TIMES = (st.integers(0, 3) | st.sampled_from([-INT64, INT64 - 1, INT64, 2 ** 70])
          | st.integers(-INT64, INT64 - 1) | st.integers(1_700_000_000_000, 1_700_000_000_100))
_SIZES = st.sampled_from([0, 1, 2, 10, 100]) | st.integers(0, 2 ** 24) | st.sampled_from([2 ** 53 + 1, 2 ** 62, 2 ** 64])
_COUNTS = st.none() | st.integers(0, 4) | st.sampled_from([2 ** 53 + 1, INT64 - 1, INT64, 2 ** 70])
_SMALL_STATES = st.lists(st.tuples(st.integers(0, 3), _TIMES, _SIZES, _COUNTS), max_size=14).map(
    lambda rows: tuple(_entry(i, *row) for i, row in enumerate(rows)))


def _budget_bytes(draw, total: int) -> int:
    """0, half, a random share, or just below, at or above the total."""
    kind = draw(st.sampled_from(["at", "below", "above", "zero", "half", "share"]))
    if kind == "at":
        return total
    if kind == "below":
        return max(0, total - draw(st.integers(1, 64)))
    if kind == "above":
        return total + draw(st.integers(1, 8))
    if kind == "zero":
        return 0
    if kind == "half":
        return total // 2
    return draw(st.integers(0, total)) if total else 0


def _entry_cap(draw, n: int) -> int | None:
    return draw(st.sampled_from([None, 0, 1, max(n - 1, 0), n, n // 2, n + 1, 7, 100]))


@st.composite
def small_requests(draw):
    """A state of up to 14 entries, drawn field by field, a budget and the strategy's own cap."""
    state = draw(_SMALL_STATES)
    total = sum(e.size_bytes for e in state)
    budget = ContextBudget(_budget_bytes(draw, total), _entry_cap(draw, len(state)))
    return state, budget, _entry_cap(draw, len(state))


# Sizes on both sides of each switch between implementations.
_THRESHOLDS = sorted({k + d for k in (NUMPY_FROM, FRONT_FROM, LRU_NUMPY_FROM, QUICKSORT_FROM) for d in (-1, 0, 1)})
_TIME_KINDS = {
    "four": lambda r: r.randrange(4),
    "duplicated": lambda r: 2 ** 40 + r.randrange(12),
    "spread": lambda r: 1_700_000_000_000 + r.randrange(10 ** 6),
    "beyond int64": lambda r: r.choice([r.randrange(-INT64, INT64), INT64 + r.randrange(3)]),
}
_SIZE_KINDS = {
    "few": lambda r: r.choice([0, 1, 100, 1000, 4096]),
    "spread": lambda r: r.randrange(2 ** 20),
    "overflowing": lambda r: r.choice([0, 1, 2 ** 62, 2 ** 63]),
}
_COUNT_KINDS = {
    "few": lambda r: r.randrange(5),
    "absent": lambda r: None,
    "some absent": lambda r: r.choice([None, 1, 2]),
    "huge": lambda r: r.choice([0, 3, 2 ** 53 + 1, INT64]),
}


@st.composite
def large_requests(draw):
    """A state of 35 to 1,001 entries built from a seed, in the shapes that switch paths."""
    n = draw(st.sampled_from(_THRESHOLDS))
    times, sizes, counts = (draw(st.sampled_from(sorted(kinds))) for kinds in (_TIME_KINDS, _SIZE_KINDS, _COUNT_KINDS))
    rnd = random.Random(draw(st.integers(0, 2 ** 32)))
    order = list(range(n))
    rnd.shuffle(order)
    state = tuple(_entry(i, rnd.randrange(3), _TIME_KINDS[times](rnd), _SIZE_KINDS[sizes](rnd),
                         _COUNT_KINDS[counts](rnd)) for i in order)
    total = sum(e.size_bytes for e in state)
    budget = ContextBudget(_budget_bytes(draw, total), _entry_cap(draw, n))
    return state, budget, _entry_cap(draw, n)


PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(PROPERTY, max_examples=300)
@given(small_requests())
def test_small_states_match_the_definitions(request):
    assert_every_path_gives_the_definition(*request)


@pytest.mark.slow
@settings(PROPERTY, max_examples=150)
@given(large_requests())
def test_large_states_match_the_definitions(request):
    assert_every_path_gives_the_definition(*request)


@st.composite
def front_requests(draw):
    """A state of 64 to 1,200 entries of which only a small share must go: LRU sorts a front of it."""
    n = draw(st.integers(FRONT_FROM, 1_200))
    rnd = random.Random(draw(st.integers(0, 2 ** 32)))
    times = [rnd.randrange(draw(st.sampled_from([4, 50, 10 ** 6]))) for _ in range(n)]
    if draw(st.booleans()):   # sizes at random
        sizes = [rnd.choice([1, 100, 4096]) for _ in range(n)]
    else:   # the oldest 90% hold 1 byte each: a front sized by the share of bytes over is too short
        newest = sorted(times)[n * 9 // 10]
        sizes = [1 if t < newest else 1_000 for t in times]
    state = tuple(rnd.sample([_entry(i, 0, t, size, None) for i, (t, size) in enumerate(zip(times, sizes))], n))
    total = sum(e.size_bytes for e in state)
    over = draw(st.integers(1, max(1, total // 20)))
    return state, ContextBudget(total - over, draw(st.sampled_from([None, n - 1, n - n // 30]))), None


# 100, not 200: the draws' branches (two size shapes, three time spreads, three entry caps) are 18, each hit
# several times; each example replays up to 1,200 entries twice, and 200 made this the suite's slowest test
@settings(PROPERTY, max_examples=100)
@given(front_requests())
def test_lru_fronts_match_the_definition(request):
    state, budget, own = request
    for container in (tuple, list):
        assert LruStrategy(own, compiled=False).evict(container(state), budget) == lru_definition(state, budget, own)


# --- hand-worked cases: the definitions themselves --------------------------------------------------------

def E(name: str, t: int, size: int, count: int | None = None) -> ContextEntry:
    return ContextEntry(f"{name}:0", name, t, size, count)


def test_evict_by_key_stops_as_soon_as_bytes_and_entries_fit():
    state = [E("a", 1, 30), E("b", 2, 30), E("c", 3, 30)]
    by_time = lru_key
    assert evict_by_key(state, ContextBudget(90), by_time, None) == []
    assert evict_by_key(state, ContextBudget(89), by_time, None) == ["a:0"]
    assert evict_by_key(state, ContextBudget(90), by_time, 1) == ["a:0", "b:0"]
    assert evict_by_key(state, ContextBudget(0), by_time, 3) == ["a:0", "b:0", "c:0"]
    assert evict_by_key([], ContextBudget(0), by_time, 0) == []


def test_lru_definition_by_hand():
    # Equal times go by id; the budget's cap is tighter than the strategy's own.
    state = [E("z", 1, 10), E("y", 1, 10), E("x", 2, 10), E("w", 3, 10)]
    assert lru_definition(state, ContextBudget(20)) == ["y:0", "z:0"]
    assert lru_definition(state, ContextBudget(100, 1), max_entries=3) == ["y:0", "z:0", "x:0"]


def test_importance_definition_by_hand():
    # times 2, 3, 3, 0 -> recency 2/4, 3/4, 3/4, 1/4; scores hub 8*0.5/100 = 0.04, leaf 0.75/100,
    # big 2*0.75/400 = 0.00375, old 0.25/50 = 0.005: big, old, leaf, hub.
    state = [E("hub", 2, 100, 8), E("leaf", 3, 100, 1), E("big", 3, 400, 2), E("old", 0, 50, 1)]
    assert importance_definition(state, ContextBudget(0)) == ["big:0", "old:0", "leaf:0", "hub:0"]
    assert importance_definition(state, ContextBudget(250)) == ["big:0"]


def test_gdsf_definition_by_hand():
    # cap 4 of 400 bytes: slot 100; V hub 4*100/200 = 2, big 300/400 = 0.75, small 100/200 = 0.5, empty 0;
    # ranks 1, 2, 4, 4 of 4: H = V + 2 * rank / 4 -> hub 2.5, big 1.75, small 2.5, empty 2.0.
    state = [E("hub", 1, 100, 4), E("big", 2, 300, 1), E("small", 3, 100, 1), E("empty", 3, 0, 1)]
    assert gdsf_definition(state, ContextBudget(400), max_entries=4) == ["big:0"]
    # cap 1: slot 400; V hub 0.8, big 3/7, small 0.2, empty 0; H = V + 0.2 * rank -> hub 1.0, big 0.83,
    # small 1.0, empty 0.8: empty, big, then hub before small (equal H, older).
    assert gdsf_definition(state, ContextBudget(400, 1)) == ["empty:0", "big:0", "hub:0"]
    assert gdsf_definition([E("tool://bash/1", 9, 10, 5), E("a.py", 1, 10, 1)], ContextBudget(10)) \
        == ["tool://bash/1:0"]


def test_the_four_key_ordered_strategies_share_one_base():
    for strategy in (LfuStrategy, SizeStrategy, OutputsFirstStrategy, SegmentedStrategy):
        assert issubclass(strategy, KeyOrderedStrategy)
        assert "evict_over" not in vars(strategy) and "definition" not in vars(strategy)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_empty_and_fitting_states(case):
    for state, budget in (((), ContextBudget(0)), ((), ContextBudget(0, 0)),
                          ((E("a", 1, 10),), ContextBudget(10, 1))):
        assert case.build(100).evict(state, budget) == case.define(state, budget, 100) == []
