"""The compiled kernels of lru and importance against their Python code: same ids, same order, every input."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.strategies import compiled
from ctxbench.strategies.check import over_budget_state
from ctxbench.strategies.contract import ContextBudget, ContextEntry, ContextState
from ctxbench.strategies.importance import ImportanceStrategy
from ctxbench.strategies.lru import LruStrategy

pytestmark = pytest.mark.skipif(compiled.evict_order is None, reason="the compiled kernels are not built")

DIFFERENTIAL = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLASSES = {"lru": (LruStrategy, compiled.LRU), "importance": (ImportanceStrategy, compiled.IMPORTANCE)}
INT64 = 2 ** 63


def answer(strategy, state, budget):
    """The strategy's answer, or the type and message of what it raised."""
    try:
        return list(strategy.evict(state, budget))
    except Exception as exc:  # both paths must fail alike
        return (type(exc).__name__, str(exc))


@st.composite
def states(draw, max_size: int = 300) -> list[ContextEntry]:
    """States with many ties in time, size and score, duplicate ids sometimes, and times that span int64."""
    n = draw(st.integers(0, max_size))
    wide = draw(st.booleans())
    times = st.integers(-INT64, INT64 - 1) if wide else st.integers(0, draw(st.sampled_from([0, 3, 50, 10 ** 6])))
    sizes = st.integers(0, 2 ** 40) if wide else st.sampled_from([0, 1, 2, 100, 4_096, 70_000])
    counts = st.none() | st.integers(-3, 6) | (st.integers(-INT64, INT64 - 1) if wide else st.integers(0, 9))
    names = st.integers(0, max(1, n if draw(st.booleans()) else n // 4))
    return [ContextEntry(f"f{p}.py:{r}", f"f{p}.py", draw(times), draw(sizes), draw(counts))
            for p, r in ((draw(names), draw(st.integers(0, 2))) for _ in range(n))]


@st.composite
def requests(draw) -> tuple[list[ContextEntry], ContextBudget, int | None]:
    state = draw(states())
    total = sum(e.size_bytes for e in state)
    n = len(state)
    max_bytes = draw(st.sampled_from([0, total, total + 1, total // 2, total * 19 // 20, total * 199 // 200])
                     | st.integers(0, total + 2))
    budget = ContextBudget(max_bytes, draw(st.none() | st.integers(0, n + 1)))
    own = draw(st.none() | st.integers(0, n + 1) | st.just(100))
    return state, budget, own


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CLASSES))
@DIFFERENTIAL
@given(requests(), st.sampled_from(["tuple", "list", "state", "state-wrong-total"]))
def test_kernel_answers_as_the_python_code(name, request_, container):
    state, budget, own = request_
    klass, kind = CLASSES[name]
    if container == "tuple":
        arg = tuple(state)
    elif container == "list":
        arg = list(state)
    else:
        total = sum(e.size_bytes for e in state) + (0 if container == "state" else 37)
        arg = ContextState(state, total_bytes=total)
    assert answer(klass(own, compiled=True), arg, budget) == answer(klass(own, compiled=False), arg, budget)
    if container in ("tuple", "list"):
        cap = min(c for c in (own, budget.max_entries, INT64) if c is not None)
        # Plain int fields within int64: the kernel answers itself, so the comparison above is not vacuous.
        assert compiled.evict_order(kind, arg, budget.max_bytes, None if cap == INT64 else cap, None) is not None


class Shifty(int):
    """An int whose subclass the kernel does not take: the Python code answers instead."""


class Tagged(str):
    """A str subclass, likewise."""


class Derived(ContextEntry):
    __slots__ = ()


def _odd_states() -> list[tuple[str, list[ContextEntry]]]:
    base = [ContextEntry(f"f{i}.py:0", f"f{i}.py", 1_000 + (i * 7) % 5, 10 + i, i % 3) for i in range(40)]

    def swap(i, klass=ContextEntry, **fields):
        out = list(base)
        e = out[i]
        values = dict(id=e.id, path=e.path, last_accessed_at=e.last_accessed_at, size_bytes=e.size_bytes,
                      access_count=e.access_count)
        out[i] = klass(**{**values, **fields})
        return out

    return [
        ("float time", swap(3, last_accessed_at=1_001.5)),
        ("bool size", swap(4, size_bytes=True)),
        ("int subclass time", swap(5, last_accessed_at=Shifty(1_002))),
        ("huge time", swap(6, last_accessed_at=2 ** 70)),
        ("negative size", swap(7, size_bytes=-5)),
        ("str subclass id", swap(8, id=Tagged("f8.py:0"))),
        ("float count", swap(9, access_count=2.0)),
        ("huge count", swap(10, access_count=-(2 ** 64))),
        ("entry subclass", swap(11, klass=Derived)),
        ("sizes over int64", swap(12, size_bytes=INT64 - 1) + [ContextEntry("big:0", "big", 5, INT64 - 1)]),
    ]


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize(("label", "state"), _odd_states(), ids=[label for label, _ in _odd_states()])
def test_inputs_outside_the_kernel_fall_back_to_the_python_code(name, label, state):
    klass, kind = CLASSES[name]
    total = sum(e.size_bytes for e in state)
    budget = ContextBudget(total * 3 // 4 if total > 0 else 0)
    if "count" not in label or name == "importance":  # lru never reads counts
        assert compiled.evict_order(kind, state, budget.max_bytes, 20, None) is None
    assert answer(klass(20, compiled=True), state, budget) == answer(klass(20, compiled=False), state, budget)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_budgets_outside_the_kernel_fall_back(name):
    klass, kind = CLASSES[name]
    state = [ContextEntry(f"f{i}.py:0", f"f{i}.py", i, 100) for i in range(10)]
    assert compiled.evict_order(kind, state, 450.0, None, None) is None
    assert compiled.evict_order(kind, state, 2 ** 64, None, None) is None
    assert compiled.evict_order(kind, state, 450, -1, None) is None
    assert compiled.evict_order(kind, (e for e in state), 450, None, None) is None
    for budget in (ContextBudget(450.0), ContextBudget(2 ** 64), ContextBudget(450, 3)):
        assert answer(klass(None, compiled=True), state, budget) == answer(klass(None, compiled=False), state, budget)


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("n", [1_000, 10_000])
@pytest.mark.parametrize("own", [None, 100, 5_000])
def test_large_over_budget_states(name, n, own):
    """Heap, heap then sort, and sort from the start (the cap forces most entries out), at scale."""
    klass, _ = CLASSES[name]
    state, budget = over_budget_state(n, np.random.default_rng([n, 17]))
    for b in (budget, ContextBudget(budget.max_bytes // 2), ContextBudget(0)):
        fast = klass(own, compiled=True).evict(state, b)
        assert fast == klass(own, compiled=False).evict(state, b)
        assert fast


def test_scores_tie_across_counts_of_zero():
    """A count of 0 scores 0.0 whatever the recency: the zeros leave by time, then id."""
    state = [ContextEntry("b:0", "b", 5, 10, 0), ContextEntry("a:0", "a", 5, 10, 0),
             ContextEntry("c:0", "c", 1, 10, 0), ContextEntry("d:0", "d", 9, 10, 3)]
    fast = ImportanceStrategy(None, compiled=True).evict(state, ContextBudget(10))
    assert fast == ["c:0", "a:0", "b:0"] == ImportanceStrategy(None, compiled=False).evict(state, ContextBudget(10))


def test_repr_leaves_the_kernel_out_of_the_options():
    assert repr(LruStrategy(50, compiled=True)) == repr(LruStrategy(50, compiled=False)) == "LruStrategy(max_entries=50)"


def test_pickles_keep_the_choice_and_drop_a_kernel_not_built_where_loaded(monkeypatch):
    import pickle

    import ctxbench.strategies.base

    for compiled_ in (True, False):
        back = pickle.loads(pickle.dumps(ImportanceStrategy(7, compiled=compiled_)))
        assert back.compiled is compiled_ and back.max_entries == 7
    data = pickle.dumps(LruStrategy(50, compiled=True))
    monkeypatch.setattr(ctxbench.strategies.base, "evict_order", None)
    back = pickle.loads(data)
    assert not back.compiled and back.max_entries == 50
    state = [ContextEntry(f"f{i}:0", f"f{i}", i, 10) for i in range(5)]
    assert back.evict(state, ContextBudget(25)) == ["f0:0", "f1:0", "f2:0"]


class Annotated(LruStrategy):
    """A user's subclass without slots: its own attributes live in a __dict__."""


def test_pickles_of_a_subclass_with_a_dict_keep_its_attributes():
    import pickle

    strategy = Annotated(9)
    strategy.note = "kept"
    back = pickle.loads(pickle.dumps(strategy))
    assert (back.note, back.max_entries, back.compiled) == ("kept", 9, strategy.compiled)


def test_compiled_true_needs_a_kernel():
    from ctxbench.strategies.lfu import LfuStrategy

    with pytest.raises(ValueError, match="no compiled kernel"):
        LfuStrategy(compiled=True)


def test_kernel_reads_nothing_it_is_not_given():
    """The kernel neither keeps nor changes its input: same answer twice, state untouched."""
    state, budget = over_budget_state(300, np.random.default_rng(5))
    before: Sequence[ContextEntry] = list(state)
    first = compiled.evict_order(compiled.IMPORTANCE, state, budget.max_bytes, 100, None)
    assert first == compiled.evict_order(compiled.IMPORTANCE, state, budget.max_bytes, 100, None)
    assert list(state) == before
