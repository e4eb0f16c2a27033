"""The built-in strategies: the contract mixin, hand-worked answers, entry caps and JSON interop."""

from __future__ import annotations

import json

import numpy as np
import pytest
from strategy_contract import StrategyContract

from ctxbench.strategies import compiled as kernels
from ctxbench.strategies.contract import ContextBudget, ContextEntry, ContextState, dump_request, load_request
from ctxbench.strategies.importance import (
    ImportanceStrategy, create_importance_context_strategy, importance_definition, importance_scores,
)
from ctxbench.strategies.lru import LruStrategy, create_lru_context_strategy, lru_definition, oldest_front
from ctxbench.strategies.ordering import stable_argsort


# --- the contract, for each built-in and a few option settings ------------------------------

class TestLruContract(StrategyContract):
    spec = "lru"
    entry_cap = 100


class TestLruSmallCapContract(StrategyContract):
    entry_cap = 3

    def make_strategy(self):
        return create_lru_context_strategy(max_entries=3)


class TestImportanceContract(StrategyContract):
    spec = "importance"
    entry_cap = 100


class TestImportanceSmallCapContract(StrategyContract):
    spec = "importance?max_entries=2"
    entry_cap = 2


class TestLruPythonContract(StrategyContract):
    """The Python code, which answers whatever the compiled kernel does not."""

    entry_cap = 100

    def make_strategy(self):
        return LruStrategy(100, compiled=False)


class TestImportancePythonContract(StrategyContract):
    entry_cap = 100

    def make_strategy(self):
        return ImportanceStrategy(100, compiled=False)


# Both implementations where the kernels are built: the compiled one by default, and the Python code.
PATHS = [True, False] if kernels.evict_order is not None else [False]


def E(name: str, t: int, size: int, count: int | None = None) -> ContextEntry:
    return ContextEntry(f"{name}:0", name, t, size, count)


# --- hand-worked answers ------------------------------------------------------------------------

LRU_STATE = (E("a", 4, 30), E("b", 1, 20), E("c", 3, 40), E("d", 2, 10))  # 100 bytes


@pytest.mark.parametrize(("max_bytes", "expected"), [
    (100, []),
    (90, ["b:0"]),
    (70, ["b:0", "d:0"]),
    (50, ["b:0", "d:0", "c:0"]),
    (0, ["b:0", "d:0", "c:0", "a:0"]),
])
def test_lru_four_entries(max_bytes, expected):
    assert create_lru_context_strategy().evict(LRU_STATE, ContextBudget(max_bytes)) == expected


def test_lru_ties_break_by_id():
    state = [E("z", 1, 10), E("y", 1, 10), E("x", 2, 10)]
    assert create_lru_context_strategy().evict(state, ContextBudget(10)) == ["y:0", "z:0"]


# recency = (t - 0 + 1) / 4; scores: hub 8*0.75/100 = 0.06, leaf 1*1/100 = 0.01,
# big 2*1/400 = 0.005, old 1*0.25/50 = 0.005 -> old and big tie, old is older: old, big, leaf, hub.
IMPORTANCE_STATE = (E("hub", 2, 100, 8), E("leaf", 3, 100, 1), E("big", 3, 400, 2), E("old", 0, 50, 1))


def test_importance_scores_by_hand():
    # times 2, 3, 3, 0 -> sorted 0, 2, 3, 3 -> recency ranks (1+k)/4: hub 2/4, leaf 3/4, big 3/4, old 1/4
    # hub 8*0.5/100, leaf 1*0.75/100, big 2*0.75/400, old 1*0.25/50
    assert importance_scores(IMPORTANCE_STATE) == pytest.approx([0.04, 0.0075, 0.00375, 0.005])


# Lowest score first: big (0.00375), old (0.005), leaf (0.0075), hub (0.04); total 650 bytes.
@pytest.mark.parametrize(("max_bytes", "expected"), [
    (650, []),
    (600, ["big:0"]),
    (300, ["big:0"]),
    (200, ["big:0", "old:0"]),
    (100, ["big:0", "old:0", "leaf:0"]),
    (0, ["big:0", "old:0", "leaf:0", "hub:0"]),
])
def test_importance_four_entries(max_bytes, expected):
    assert create_importance_context_strategy().evict(IMPORTANCE_STATE, ContextBudget(max_bytes)) == expected


def test_importance_hub_outranks_once_read_file():
    # A context spanning ten minutes; the hub (10 reads) is 30 s older than a once-read file of
    # the same size, so their recency ranks are similar (11/12 vs 12/12) and frequency decides.
    older = [E(f"src/old{i}.ts", 60_000 * i, 1_000, 2) for i in range(10)]
    hub, leaf = E("src/router.ts", 570_000, 4_000, 10), E("src/leaf.ts", 600_000, 4_000, 1)
    state = [*older, hub, leaf]
    order = create_importance_context_strategy().evict(state, ContextBudget(0))
    assert order.index("src/leaf.ts:0") < order.index("src/router.ts:0")
    lru_order = create_lru_context_strategy().evict(state, ContextBudget(0))
    assert lru_order.index("src/router.ts:0") < lru_order.index("src/leaf.ts:0")


def test_importance_without_access_count_is_recency_over_size():
    state = [E("new-big", 3, 300), E("old-small", 1, 100), E("mid", 2, 100), E("tie-b", 2, 100), E("tie-a", 2, 100)]
    # recency/size: new-big 1/300, old-small (1/3)/100, mid/tie-* (2/3)/100 -> old-small, new-big, ties by id.
    expected = ["old-small:0", "new-big:0", "mid:0", "tie-a:0", "tie-b:0"]
    imp = create_importance_context_strategy()
    for order in (state, state[::-1], sorted(state, key=lambda e: e.id)):
        assert imp.evict(order, ContextBudget(0)) == expected


# --- entry caps ---------------------------------------------------------------------------------

@pytest.mark.parametrize("factory", [create_lru_context_strategy, create_importance_context_strategy])
@pytest.mark.parametrize(("own", "budget_cap", "left"), [
    (2, None, 2), (3, 1, 1), (1, 3, 1), (None, None, 4), (None, 2, 2), (0, None, 0), (100, 0, 0),
])
def test_tighter_entry_cap_wins(factory, own, budget_cap, left):
    strategy = factory(max_entries=own)
    evicted = strategy.evict(LRU_STATE, ContextBudget(10_000, budget_cap))
    assert len(LRU_STATE) - len(evicted) == left


def test_entry_cap_evicts_in_strategy_order():
    assert create_lru_context_strategy(max_entries=2).evict(LRU_STATE, ContextBudget(10_000)) == ["b:0", "d:0"]
    assert create_importance_context_strategy(max_entries=2).evict(IMPORTANCE_STATE, ContextBudget(10_000)) \
        == ["big:0", "old:0"]


@pytest.mark.parametrize("factory", [create_lru_context_strategy, create_importance_context_strategy])
@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_bad_max_entries_rejected(factory, bad):
    with pytest.raises(ValueError, match="max_entries"):
        factory(max_entries=bad)


@pytest.mark.parametrize("factory", [create_lru_context_strategy, create_importance_context_strategy])
def test_nothing_evicted_when_everything_fits(factory):
    assert factory().evict(LRU_STATE, ContextBudget(100, 4)) == []
    assert factory().evict(ContextState(LRU_STATE), ContextBudget(100)) == []


# --- the fast paths give the definition's answer --------------------------------------------------

def _random_state(rng, n, t_range, count_absent):
    times = rng.integers(0, t_range, n) + (2 ** 60 if t_range > 2 ** 40 else 1_700_000_000_000)
    sizes = rng.choice([0, 1, 100, 1000, 4096], size=n)
    counts = rng.integers(0, 5, n)
    return tuple(ContextEntry(f"f{i}.py:{i % 3}", f"f{i}.py", int(t), int(s), None if count_absent and i % 2 else int(c))
                 for i, t, s, c in zip(rng.permutation(n), times, sizes, counts))


@pytest.mark.parametrize("n", [35, 36, 63, 64, 130, 399, 400, 999, 1_000, 1_200])
@pytest.mark.parametrize("t_range", [5, 10 ** 6, 2 ** 50])
@pytest.mark.parametrize("compiled", PATHS)
def test_fast_paths_match_the_definition(n, t_range, compiled):
    rng = np.random.default_rng([n, t_range % 1000])
    for trial in range(4):
        state = _random_state(rng, n, t_range, count_absent=trial % 2 == 1)
        total = sum(e.size_bytes for e in state)
        own = [None, 100, n // 3, 7][trial]
        for budget in (ContextBudget(total // 2), ContextBudget(int(total * 0.97), n // 2), ContextBudget(0),
                       ContextBudget(int(total * 0.97)), ContextBudget(int(total * 0.995))):
            for container in (state, list(state), ContextState(state)):
                assert LruStrategy(own, compiled=compiled).evict(container, budget) \
                    == lru_definition(state, budget, own)
                assert ImportanceStrategy(own, compiled=compiled).evict(container, budget) \
                    == importance_definition(state, budget, own)



def test_lru_front_too_small_falls_back_to_a_full_sort():
    # The 90 oldest entries hold 1 byte each: a front sized by their count holds too few bytes.
    state = tuple(ContextEntry(f"f{i}.py:0", f"f{i}.py", 1_000 + i, 1 if i < 90 else 1_000) for i in range(100))[::-1]
    total = sum(e.size_bytes for e in state)
    budget = ContextBudget(total - 50)
    assert len(oldest_front(state, total, budget, None)) < 50
    assert create_lru_context_strategy(None).evict(state, budget) == lru_definition(state, budget, None)


def test_lru_front_with_equal_times_goes_by_id():
    rng = np.random.default_rng(7)
    state = tuple(ContextEntry(f"f{i}.py:0", f"f{i}.py", int(rng.integers(0, 8)), 10) for i in rng.permutation(200))
    budget = ContextBudget(sum(e.size_bytes for e in state) - 95)
    assert oldest_front(state, 2_000, budget, None) is not None
    assert create_lru_context_strategy(None).evict(state, budget) == lru_definition(state, budget, None)


@pytest.mark.parametrize("values", [
    np.arange(3_000) % 7, np.arange(3_000) * -(2 ** 50), np.repeat([0.5, -0.0, 0.0, np.inf], 500),
    np.where(np.arange(2_000) % 3, 1.0, np.nan), np.random.default_rng(3).random(1_500).round(2),
])
def test_stable_argsort_is_numpys_stable_argsort(values):
    assert stable_argsort(values).tolist() == values.argsort(kind="stable").tolist()

# --- JSON interop with the TypeScript runtime ---------------------------------------------------

TS_PAYLOAD = """{
  "state": [
    {"id": "src/router.ts:3", "path": "src/router.ts", "lastAccessedAt": 1717000000000, "sizeBytes": 5120, "accessCount": 7},
    {"id": "src/util.ts:0", "path": "src/util.ts", "lastAccessedAt": 1717000005000, "sizeBytes": 2048},
    {"id": "tool://bash/17:0", "path": "tool://bash/17", "lastAccessedAt": 1717000001000, "sizeBytes": 9000, "accessCount": 1}
  ],
  "budget": {"maxBytes": 8000, "maxEntries": 2}
}"""


def test_typescript_request_round_trips_and_feeds_both_builtins():
    state, budget = load_request(TS_PAYLOAD)
    assert state[0] == ContextEntry("src/router.ts:3", "src/router.ts", 1717000000000, 5120, 7)
    assert state[1].access_count is None and budget == ContextBudget(8000, 2)
    assert json.loads(dump_request(state, budget)) == json.loads(TS_PAYLOAD)
    assert create_lru_context_strategy().evict(state, budget) == ["src/router.ts:3", "tool://bash/17:0"]
    # importance, recency ranks router 1/3, bash 2/3, util 3/3: router 7*(1/3)/5120 = 4.6e-4,
    # bash (2/3)/9000 = 7.4e-5, util 1/2048 = 4.9e-4: the big once-used output goes first, and
    # evicting it alone meets both the byte and the entry limit.
    assert create_importance_context_strategy().evict(state, budget) == ["tool://bash/17:0"]
    assert create_importance_context_strategy().evict(state, ContextBudget(12_000)) == ["tool://bash/17:0"]
    assert create_lru_context_strategy().evict(state, ContextBudget(12_000)) == ["src/router.ts:3"]
