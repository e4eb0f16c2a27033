"""The stateful policies (fifo, sieve, s3fifo, arc): hand-worked traces through TurnByTurnContext, libCacheSim."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_contract import StrategyContract

from ctxbench.sim.engine.turn_by_turn import TurnByTurnContext
from ctxbench.sim.engine.replay import SessionTrace, replay_session
from ctxbench.strategies.arc import create_arc_context_strategy
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.fifo import create_fifo_context_strategy
from ctxbench.strategies.registry import builtin_names, describe, make
from ctxbench.strategies.s3fifo import create_s3fifo_context_strategy
from ctxbench.strategies.sieve import create_sieve_context_strategy
from ctxbench.strategies.stateful import is_pure

STATEFUL = ("fifo", "sieve", "s3fifo", "arc")
READ, EDIT = 0, 1


# --- the shared contract: each call from a fresh history (the mixin builds a new instance per call,
# the conformance checker calls reset() before each call) ------------------------------------------

class TestFifoContract(StrategyContract):
    spec, entry_cap = "fifo", 100


class TestSieveContract(StrategyContract):
    spec, entry_cap = "sieve?max_entries=3", 3


class TestS3FifoContract(StrategyContract):
    spec, entry_cap = "s3fifo", 100


class TestArcContract(StrategyContract):
    spec, entry_cap = "arc?max_entries=2", 2


def test_registered_as_stateful_builtins():
    names, descriptions = builtin_names(), describe()
    for name in STATEFUL:
        assert name in names and descriptions[name].startswith("stateful")
        assert not is_pure(make(name))


@pytest.mark.parametrize(("name", "fields"), [
    ("fifo", set()), ("sieve", {"visited"}), ("s3fifo", {"freq", "target"}), ("arc", {"target"}),
])
def test_each_policy_tracks_only_its_own_fields(name, fields):
    strategy = make(name)
    strategy.on_insert(ContextEntry("a:0", "a", 1, 10))
    node = strategy._nodes["a:0"]
    own = {slot for klass in type(node).__mro__ for slot in getattr(klass, "__slots__", ())}
    assert own - {"id", "path", "size", "queue", "older", "newer"} == fields


# --- driving TurnByTurnContext -----------------------------------------------------------------------------

def drive(strategy, reads: str, max_bytes: int, size: int = 10) -> TurnByTurnContext:
    """One read per turn of the file named by each character; every file ``size`` bytes."""
    m = TurnByTurnContext(strategy, ContextBudget(max_bytes))
    for turn, name in enumerate(reads):
        m.apply_turn(turn, [("read", name, size, turn)])
    return m


def evictions(m: TurnByTurnContext) -> list[str]:
    """The evicted paths, turn after turn, one string per evicted entry (``-`` for none)."""
    log = m.log
    return ["".join(i.partition(":")[0] for i in log.evicted_ids.get(t, [])) or "-" for t in log.turn.tolist()]


def test_fifo_ignores_hits():
    # Room for two. 'a' is hit at turn 2 but entered first, so FIFO evicts it at turn 3 (LRU: 'b').
    m = drive(create_fifo_context_strategy(), "abac", 20)
    assert evictions(m) == ["-", "-", "-", "a"]
    assert evictions(drive(make("lru"), "abac", 20)) == ["-", "-", "-", "b"]


def test_fifo_edit_keeps_the_place_of_its_file():
    m = TurnByTurnContext(create_fifo_context_strategy(), ContextBudget(20))
    m.apply_turn(0, [("read", "a", 10, 0)])
    m.apply_turn(1, [("read", "b", 10, 1)])
    m.apply_turn(2, [("edit", "a", 10, 2)])   # a new revision of 'a', still the oldest entry
    m.apply_turn(3, [("read", "c", 10, 3)])
    assert m.log.evicted_ids[3] == ["a:1"]


def test_sieve_visited_bit_and_hand():
    # Room for three: a b c enter; 'a' is hit (visited). 'd' arrives: the hand starts at the tail,
    # spares 'a' (clearing its bit) and evicts 'b'; it stays at 'c'. 'e' arrives: the hand evicts 'c'
    # where it stopped, although 'a' is now unvisited and older (restarting at the tail would take 'a').
    m = drive(create_sieve_context_strategy(), "abcade", 30)
    assert evictions(m) == ["-", "-", "-", "-", "b", "c"]
    assert m.resident_ids() == ["a:0", "d:0", "e:0"]


def test_sieve_hand_wraps_around():
    # Every entry visited: the hand clears them all, wraps to the tail and evicts the oldest.
    m = drive(create_sieve_context_strategy(), "abcabcd", 30)
    assert evictions(m)[-1] == "a"


def test_sieve_edit_sets_the_visited_bit():
    m = TurnByTurnContext(create_sieve_context_strategy(), ContextBudget(20))
    m.apply_turn(0, [("read", "a", 10, 0)])
    m.apply_turn(1, [("read", "b", 10, 1)])
    m.apply_turn(2, [("edit", "a", 10, 2)])
    m.apply_turn(3, [("read", "c", 10, 3)])
    assert m.log.evicted_ids[3] == ["b:0"]


def test_s3fifo_promotes_reused_entries_from_small_to_main():
    # Room for ten; the small queue is "full" at one entry. 'a' is read twice, then a scan of new
    # files passes: 'a' moves to the main queue at the first eviction and survives the whole scan,
    # while each scanned file leaves through the small queue. LRU drops 'a' after ten new files.
    scan = "bcdefghijklmnopqrst"
    m = drive(create_s3fifo_context_strategy(), "aa" + scan, 100)
    assert "a:0" in m.resident_ids()
    assert evictions(m)[11:] == list("bcdefghijk")
    assert "a:0" not in drive(make("lru"), "aa" + scan, 100).resident_ids()


def test_s3fifo_move_threshold():
    m = drive(create_s3fifo_context_strategy(move_threshold=2), "aabcdefghijk", 100)
    assert evictions(m)[11] == "a"   # one hit is not enough with threshold 2


def test_s3fifo_ghost_hit_enters_main():
    # Room for ten. 'a' leaves through the small queue into the ghost queue when 'k' arrives; read
    # again at turn 11, it enters the main queue and outlives a scan of eleven new files, which
    # leave through the small queue. LRU drops 'a' again after ten newer files.
    reads = "abcdefghijk" + "a" + "lmnopqrstuv"
    m = drive(create_s3fifo_context_strategy(), reads, 100)
    assert evictions(m)[10:] == list("abcdefghijklm")
    assert "a:0" in m.resident_ids()
    assert "a:0" not in drive(make("lru"), reads, 100).resident_ids()


def test_arc_ghost_hits_adapt_the_target():
    arc = create_arc_context_strategy()
    m = drive(arc, "abac", 20)               # 'a' is hit (T2); 'c' arrives and REPLACE evicts 'b' from T1
    assert evictions(m)[-1] == "b" and arc.target_bytes == 0
    m.apply_turn(4, [("read", "b", 10, 4)])  # a hit in ghost list B1: T1 was too small, p grows by b's size
    assert arc.target_bytes == 10
    assert m.log.evicted_ids[4] == ["a:0"]   # T1 (10 bytes) is not above p: REPLACE takes T2's LRU, 'a', into B2
    m.apply_turn(5, [("read", "a", 10, 5)])  # a hit in B2: T2 was too small, p shrinks
    assert arc.target_bytes == 0
    assert m.log.evicted_ids[5] == ["c:0"]


def test_arc_protects_frequent_entries_from_a_scan():
    # 'a' and 'b' are used twice (T2); a long scan of once-read files only cycles through T1.
    m = drive(create_arc_context_strategy(), "abab" + "cdefghij", 40)
    assert {"a:0", "b:0"} <= set(m.resident_ids())
    assert not {"a:0", "b:0"} <= set(drive(make("lru"), "abab" + "cdefghij", 40).resident_ids())


@pytest.mark.parametrize("name", STATEFUL)
def test_replays_are_deterministic_and_flagged_not_pure(name):
    rng = np.random.default_rng(3)
    n = 300
    paths = [f"src/f{k}.py" for k in rng.zipf(1.4, n) % 40]
    ops = rng.choice([READ, READ, READ, EDIT], n).tolist()
    sizes = rng.integers(100, 3_000, n).tolist()
    session = SessionTrace("s", list(range(n)), ops, paths, sizes, list(range(n)))
    strategy = make(name)   # one object, two replays: reset() clears its history in between
    first = replay_session(session, strategy, ContextBudget(8_000))
    again = replay_session(session, strategy, ContextBudget(8_000))
    assert first.row["log_hash"] == again.row["log_hash"]
    assert first.row["violations"] == 0 and first.row["evictions"] > 0
    assert first.row["pure"] is False


@pytest.mark.parametrize("name", STATEFUL)
def test_answers_a_state_it_never_saw(name):
    # Without hooks (as in `ctxbench check`), the entries are taken as new, in recency order.
    strategy = make(name)
    state = [ContextEntry("b:0", "b", 2, 10), ContextEntry("a:0", "a", 1, 10), ContextEntry("big:0", "big", 3, 99)]
    assert strategy.evict(state, ContextBudget(20)) == ["big:0"]   # larger than the budget: never admitted
    assert make(name).evict(state, ContextBudget(15)) == ["big:0", "a:0"]
    # A later call with other entries forgets the ones that are gone ('big'), keeps the history of 'b'.
    assert strategy.evict([ContextEntry("c:0", "c", 5, 10), ContextEntry("b:0", "b", 2, 10)],
                          ContextBudget(10)) == ["b:0"]


@pytest.mark.parametrize("name", STATEFUL)
def test_entry_cap_is_the_tighter_one(name):
    state = [ContextEntry(f"{p}:0", p, t, 1) for t, p in enumerate("abcd")]
    assert len(make(f"{name}?max_entries=2").evict(state, ContextBudget(100))) == 2
    assert len(make(f"{name}?max_entries=3").evict(state, ContextBudget(100, 1))) == 3
    assert make(f"{name}?max_entries=none").evict(state, ContextBudget(100)) == []


# --- the same hits as libCacheSim on unit-size, one-access-per-turn traces ---------------------------

@pytest.mark.parametrize(("name", "reference"), [("fifo", "FIFO"), ("sieve", "Sieve"), ("arc", "ARC")])
def test_same_hits_as_libcachesim(name, reference):
    lcs = pytest.importorskip("libcachesim")
    for seed in range(12):
        rng = np.random.default_rng(seed)
        capacity = int(rng.integers(2, 12))
        keys = (rng.zipf(1.3, 300) % 30).tolist()
        m = drive(make(f"{name}?max_entries=none"), "".join(chr(0x100 + k) for k in keys), capacity, size=1)
        cache = getattr(lcs, reference)(capacity)
        theirs = []
        for k in keys:
            req = lcs.Request()
            req.obj_id, req.obj_size = k + 1, 1
            theirs.append(int(cache.get(req)))
        assert m.log.hits.tolist() == theirs, (name, seed)
