"""The pure strategy library (lfu, size, segmented, outputs-first, gdsf): contract and hand-worked answers."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_contract import StrategyContract

from ctxbench.strategies.contract import ContextBudget, ContextEntry, ContextState
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.gdsf import create_gdsf_context_strategy, gdsf_definition, gdsf_priorities
from ctxbench.strategies.lfu import create_lfu_context_strategy
from ctxbench.strategies.outputs_first import create_outputs_first_context_strategy
from ctxbench.strategies.registry import builtin_names, describe, make
from ctxbench.strategies.segmented import create_segmented_context_strategy, protected_ids
from ctxbench.strategies.size import create_size_context_strategy

PURE = ("lfu", "size", "segmented", "outputs-first", "gdsf")
FACTORIES = (create_lfu_context_strategy, create_size_context_strategy, create_segmented_context_strategy,
             create_outputs_first_context_strategy, create_gdsf_context_strategy)


# --- the shared contract, for each strategy and a small entry cap --------------------------------

class TestLfuContract(StrategyContract):
    spec, entry_cap = "lfu", 100


class TestSizeContract(StrategyContract):
    spec, entry_cap = "size?max_entries=3", 3


class TestSegmentedContract(StrategyContract):
    spec, entry_cap = "segmented?protected=0.5", 100


class TestOutputsFirstContract(StrategyContract):
    spec, entry_cap = "outputs-first?max_entries=2", 2


class TestGdsfContract(StrategyContract):
    spec, entry_cap = "gdsf", 100


class TestGdsfSmallCapNoAgingContract(StrategyContract):
    spec, entry_cap = "gdsf?max_entries=3&aging=0", 3


def E(name: str, t: int, size: int, count: int | None = None) -> ContextEntry:
    return ContextEntry(f"{name}:0", name, t, size, count)


def evict(spec: str, state, max_bytes: int, max_entries: int | None = None) -> list[str]:
    return list(make(spec).evict(state, ContextBudget(max_bytes, max_entries)))


# --- registration ----------------------------------------------------------------------------------

def test_registered_as_builtins_with_descriptions():
    names, descriptions = builtin_names(), describe()
    for name in PURE:
        assert name in names and descriptions[name]


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize(("own", "budget_cap", "left"), [(2, None, 2), (3, 1, 1), (1, 3, 1), (None, None, 4),
                                                         (0, None, 0), (100, 0, 0)])
def test_tighter_entry_cap_wins(factory, own, budget_cap, left):
    state = [E("a", 4, 30, 1), E("b", 1, 20, 3), E("c", 3, 40, 2), E("d", 2, 10, 1)]
    assert len(state) - len(factory(max_entries=own).evict(state, ContextBudget(10_000, budget_cap))) == left


@pytest.mark.parametrize("factory", FACTORIES)
def test_nothing_evicted_when_it_fits_and_plain_tuples_work(factory):
    state = (E("a", 4, 30, 1), E("b", 1, 20, 3))
    assert factory().evict(state, ContextBudget(50)) == []
    assert factory().evict(ContextState(state), ContextBudget(50, 2)) == []
    assert len(factory().evict(state, ContextBudget(49))) >= 1


@pytest.mark.parametrize("spec", ["lfu?max_entries=-1", "segmented?protected=1.5", "segmented?threshold=0",
                                  "outputs-first?prefix=", "gdsf?aging=-1", "gdsf?aging=true"])
def test_bad_options_are_load_errors(spec):
    with pytest.raises(StrategyLoadError, match="cannot build"):
        make(spec)


# --- lfu -------------------------------------------------------------------------------------------

def test_lfu_fewest_accesses_then_least_recent_then_id():
    state = [E("hub", 1, 10, 9), E("new-once", 9, 10, 1), E("old-once", 2, 10, 1), E("b", 5, 10, 2),
             E("a", 5, 10, 2)]
    assert evict("lfu", state, 0) == ["old-once:0", "new-once:0", "a:0", "b:0", "hub:0"]
    assert evict("lfu", state, 30) == ["old-once:0", "new-once:0"]


def test_lfu_without_counts_is_lru():
    state = [E("c", 3, 10), E("a", 1, 10), E("b", 2, 10)]
    assert evict("lfu", state, 10) == evict("lru", state, 10) == ["a:0", "b:0"]


# --- size --------------------------------------------------------------------------------------------

def test_size_largest_first_ties_by_recency_then_id():
    state = [E("small", 1, 5), E("big-new", 9, 50), E("big-old", 2, 50), E("mid-b", 3, 20), E("mid-a", 3, 20)]
    assert evict("size", state, 0) == ["big-old:0", "big-new:0", "mid-a:0", "mid-b:0", "small:0"]
    assert evict("size", state, 45) == ["big-old:0", "big-new:0"]


def test_size_under_an_entry_cap_still_drops_the_largest():
    state = [E("small", 1, 5), E("big", 9, 50), E("mid", 3, 20)]
    assert evict("size?max_entries=2", state, 10_000) == ["big:0"]


# --- segmented ---------------------------------------------------------------------------------------

SEGMENTED_STATE = [E("hub-a", 1, 30, 3), E("hub-b", 5, 30, 2), E("once", 3, 30, 1)]  # 90 bytes


def test_segmented_once_used_before_re_used():
    # At 80 bytes the protected share is 0.8 x 80 = 64 bytes: both hubs (60) are protected, so the
    # once-used file goes although it is newer than hub-a (LRU would drop hub-a).
    assert sorted(protected_ids(SEGMENTED_STATE, 64, None)) == ["hub-a:0", "hub-b:0"]
    assert evict("segmented", SEGMENTED_STATE, 80) == ["once:0"]
    assert evict("lru", SEGMENTED_STATE, 80) == ["hub-a:0"]


def test_segmented_protected_share_demotes_the_oldest_re_used():
    # protected = 0.5 of 60 bytes = 30: only the most recent hub stays protected; hub-a is demoted and,
    # being older than 'once', goes first.
    assert sorted(protected_ids(SEGMENTED_STATE, 30, None)) == ["hub-b:0"]
    assert evict("segmented?protected=0.5", SEGMENTED_STATE, 60) == ["hub-a:0"]
    assert evict("segmented?protected=0.5", SEGMENTED_STATE, 30) == ["hub-a:0", "once:0"]


def test_segmented_threshold_and_entry_share():
    # share 48 bytes: with threshold 2 hub-b is protected and hub-a demoted; with 3 only hub-a is re-used.
    assert evict("segmented", SEGMENTED_STATE, 60) == ["hub-a:0"]
    assert evict("segmented?threshold=3", SEGMENTED_STATE, 60) == ["once:0"]
    # the protected share of a cap of 2 entries is floor(0.5 x 2) = 1 entry: the newest hub.
    assert sorted(protected_ids(SEGMENTED_STATE, 1_000, 1)) == ["hub-b:0"]
    assert evict("segmented?protected=0.5&max_entries=2", SEGMENTED_STATE, 1_000) == ["hub-a:0"]


def test_segmented_protected_zero_is_lru():
    assert evict("segmented?protected=0", SEGMENTED_STATE, 30) == evict("lru", SEGMENTED_STATE, 30)


# --- outputs-first -----------------------------------------------------------------------------------

def test_outputs_go_first_then_files_lru():
    state = [E("a.py", 1, 10), E("tool://bash/2", 9, 10), E("tool://grep/1", 4, 10), E("b.py", 2, 10)]
    assert evict("outputs-first", state, 0) == ["tool://grep/1:0", "tool://bash/2:0", "a.py:0", "b.py:0"]
    assert evict("outputs-first", state, 25) == ["tool://grep/1:0", "tool://bash/2:0"]


def test_outputs_prefix_option():
    state = [E("a.py", 1, 10), E("out/log", 9, 10)]
    assert evict("outputs-first?prefix=out/", state, 10) == ["out/log:0"]
    assert evict("outputs-first", state, 10) == ["a.py:0"]


# --- gdsf --------------------------------------------------------------------------------------------

def test_gdsf_priorities_by_hand():
    # slot 100 bytes; V = f*s/(s+100): hub 4*100/200 = 2, big 1*300/400 = 0.75, small 1*100/200 = 0.5,
    # empty 0. Ranks (accessed at or before): hub 1, big 2, small 4 (t=3 twice), empty 4 -> of 4 entries;
    # aging 1: L = V_max * rank / n = 2 * rank / 4.
    state = [E("hub", 1, 100, 4), E("big", 2, 300, 1), E("small", 3, 100, 1), E("empty", 3, 0, 1)]
    assert gdsf_priorities(state, 100.0) == pytest.approx([2.5, 1.75, 2.5, 2.0])
    assert gdsf_priorities(state, 100.0, aging=0) == pytest.approx([2.0, 0.75, 0.5, 0.0])
    assert gdsf_priorities(state, 0.0, aging=0) == pytest.approx([4.0, 1.0, 1.0, 0.0])
    assert gdsf_priorities([]) == []


def test_gdsf_outputs_first_even_when_recent():
    state = [E("old.py", 1, 100, 1), E("tool://bash/9", 50, 100, 1)]
    assert gdsf_priorities(state)[1] == 0.0
    assert evict("gdsf", state, 100) == ["tool://bash/9:0"]


def test_gdsf_keeps_a_frequent_file_that_lru_drops():
    state = [E("router.ts", 1, 4_000, 6), E("walk1.ts", 2, 4_000, 1), E("walk2.ts", 3, 4_000, 1)]
    assert evict("gdsf", state, 8_000) == ["walk1.ts:0"]
    assert evict("lru", state, 8_000) == ["router.ts:0"]


def test_gdsf_aging_trades_frequency_for_recency():
    state = [E("hub", 1, 1_000, 3), E("fresh", 9, 1_000, 1)]
    assert evict("gdsf?aging=0", state, 1_000) == ["fresh:0"]
    assert evict("gdsf?aging=100", state, 1_000) == ["hub:0"]


def test_gdsf_under_an_entry_cap_drops_small_files_first():
    # Only the entry cap binds: evicting a small file costs fewer re-read bytes per freed slot.
    state = [E("big", 1, 50_000, 1), E("small", 1, 500, 1), E("mid", 1, 5_000, 1)]
    assert evict("gdsf?max_entries=2&aging=0", state, 1_000_000) == ["small:0"]
    # Without a cap, only bytes matter and the value per byte is about the frequency: ties go by id.
    assert evict("gdsf?max_entries=none&aging=0", state, 50_500) == ["big:0"]


def test_gdsf_is_order_independent_with_equal_times():
    state = [E("b", 5, 10, 1), E("a", 5, 10, 1), E("c", 5, 10, 1)]
    for order in (state, state[::-1]):
        assert evict("gdsf", order, 10) == ["a:0", "b:0"]


def test_gdsf_against_lru_and_importance_on_the_default_suite():
    """The claim of the README, at 200K tokens of the whole window (calibrated ratios): gdsf re-reads
    less than importance on every preset, and less than lru on claude-code-like, hub-and-spoke, long,
    mixed and refactor; lru re-reads less on debug-loop and file-walk."""
    from ctxbench.sim.analysis.grid import run_grid
    from ctxbench.sim.engine.suite import build_suite

    results = run_grid(build_suite("default"), ["gdsf", "lru", "importance"], (200_000,), workers=1,
                       keep_turns=False, progress=False).results
    tokens = results.groupby(["trace", "strategy"])["reread_tokens"].sum().unstack()
    assert (tokens["gdsf"] < tokens["importance"]).all(), tokens.to_dict()
    gdsf_wins = set(tokens.index[tokens["gdsf"] < tokens["lru"]])
    assert gdsf_wins == {"claude-code-like", "hub-and-spoke", "long", "mixed", "refactor"}, tokens.to_dict()
    assert set(tokens.index) - gdsf_wins == {"debug-loop", "file-walk"}


def test_gdsf_numpy_path_gives_the_same_priorities_and_answer():
    from ctxbench.strategies.gdsf import _priorities_array

    rng = np.random.default_rng(8)
    n = 600
    paths = [f"{'tool://bash/' if i % 3 == 0 else 'src/'}{i}" for i in range(n)]
    state = [ContextEntry(f"{p}:0", p, int(rng.integers(0, 50)), int(rng.integers(0, 5_000)),
                          None if i % 7 == 0 else int(rng.integers(1, 9))) for i, p in enumerate(paths)]
    assert _priorities_array(state, 761.5, 1.0, "tool://").tolist() == gdsf_priorities(state, 761.5)
    budget = ContextBudget(200_000)
    assert make("gdsf").evict(state, budget) == gdsf_definition(state, budget)   # numpy path (600 entries)
