"""TurnByTurnContext: hand-worked traces, every violation class, hooks, and replay properties."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.sim.errors import ContractViolation
from ctxbench.sim.engine.measures import TURN_FIELDS
from ctxbench.sim.engine.rules import OP_CODES
from ctxbench.sim.engine.turn_by_turn import TurnByTurnContext
from engine_paths import compiled_or_not, replay_turns
from ctxbench.sim.engine.replay import SessionTrace, replay_session
from ctxbench.strategies.calls import recording_interrupts
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.registry import make
from ctxbench.strategies.stateful import StatefulContextStrategy

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def manager(strategy="lru?max_entries=none", max_bytes=100, max_entries=None, strict=True):
    """A manager on session "s" whose strategy is named by its spec (or its repr)."""
    obj = make(strategy)
    return TurnByTurnContext(obj, ContextBudget(max_bytes, max_entries), strict=strict, session="s",
                                strategy_name=strategy if isinstance(strategy, str) else None)


def run_turns(m, turns):
    """Apply ``turns`` (a list of event lists), numbering turns 0, 1, ..."""
    for t, events in enumerate(turns):
        m.apply_turn(t, events)
    return m


def col(m, name):
    return m.log.columns[name].tolist()


def reads(*specs, ts0=0):
    """One turn per ``(path, size)``, a read each, at ts 0, 1, 2, ..."""
    return [[("read", p, size, ts0 + i)] for i, (p, size) in enumerate(specs)]


class Recorder:
    """A pure strategy that delegates to ``inner`` and remembers every state it was given."""

    def __init__(self, inner="lru?max_entries=none"):
        self.inner = make(inner)
        self.states: list[tuple[ContextEntry, ...]] = []

    def evict(self, state, budget):
        self.states.append(tuple(state))
        return self.inner.evict(state, budget)


# ----- hand-worked traces ------------------------------------------------------------------

def test_lru_hand_worked():
    # Budget 100 bytes, every file 40 bytes; one read per turn at ts = turn.
    # t0 a: compulsory           -> {a}        40
    # t1 b: compulsory           -> {a,b}      80
    # t2 c: compulsory, 120>100  -> evict a (oldest) -> {b,c} 80
    # t3 b: hit (b now newest)   -> {c,b}      80
    # t4 a: capacity miss, 120   -> evict c    -> {b,a} 80
    # t5 c: capacity miss, 120   -> evict b    -> {a,c} 80
    m = run_turns(manager(), reads(("a", 40), ("b", 40), ("c", 40), ("b", 40), ("a", 40), ("c", 40)))
    assert col(m, "hits") == [0, 0, 0, 1, 0, 0]
    assert col(m, "compulsory") == [1, 1, 1, 0, 0, 0]
    assert col(m, "capacity") == [0, 0, 0, 0, 1, 1]
    assert col(m, "capacity_bytes") == [0, 0, 0, 0, 40, 40]
    assert col(m, "evictions") == [0, 0, 1, 0, 1, 1]
    assert m.log.evicted_ids == {2: ["a:0"], 4: ["c:0"], 5: ["b:0"]}
    assert col(m, "turn_bytes") == [40, 80, 120, 80, 120, 120]
    assert col(m, "occupancy_bytes") == [40, 80, 80, 80, 80, 80]
    assert m.resident_ids() == ["a:0", "c:0"]


def test_importance_hand_worked():
    # score = access_count * recency / size, recency = (1 + entries accessed earlier) / n (the
    # strategy's docstring); budget 100. The margins are wide, so min-max time scaling
    # ((t - tmin + 1) / (tmax - tmin + 1)) would pick the same victims.
    # t0..t3: hub (30 B) read four times -> hub ts 3, count 4.
    # t4 big (50 B): compulsory -> 80.   t5 z (30 B): compulsory -> 110 > 100, evict one:
    #   hub 4*(1/3)/30 = .044   big 1*(2/3)/50 = .013   z 1*(3/3)/30 = .033   -> evict big
    #   (LRU evicts the hub here: see the last assertion.)
    # t6 big again: capacity miss, count 2 -> 110:
    #   hub 4*(1/3)/30 = .044   z 1*(2/3)/30 = .022   big 2*(3/3)/50 = .04    -> evict z
    trace = reads(("hub", 30), ("hub", 30), ("hub", 30), ("hub", 30), ("big", 50), ("z", 30), ("big", 50))
    m = run_turns(manager("importance?max_entries=none"), trace)
    assert col(m, "hits") == [0, 1, 1, 1, 0, 0, 0]
    assert col(m, "compulsory") == [1, 0, 0, 0, 1, 1, 0]
    assert col(m, "capacity") == [0, 0, 0, 0, 0, 0, 1]
    assert col(m, "capacity_bytes") == [0, 0, 0, 0, 0, 0, 50]
    assert m.log.evicted_ids == {5: ["big:0"], 6: ["z:0"]}
    assert m.resident_ids() == ["hub:0", "big:0"]
    lru = run_turns(manager(), trace)
    assert lru.log.evicted_ids[5] == ["hub:0"]


def test_eviction_only_at_the_turn_boundary():
    # One turn: a(60), b(60), a again (a hit: nothing is evicted mid-turn although 120 > 100).
    # At the turn's end LRU order is b (ts 1), a (ts 2): b goes.
    m = manager()
    m.apply_turn(0, [("read", "a", 60, 0), ("read", "b", 60, 1), ("read", "a", 60, 2)])
    assert col(m, "accesses") == [3]
    assert col(m, "hits") == [1]
    assert col(m, "compulsory") == [2]
    assert col(m, "turn_bytes") == [120]
    assert col(m, "occupancy_bytes") == [60]
    assert m.log.evicted_ids == {0: ["b:0"]}
    assert len(m.log) == 1   # one evict call for the turn


def test_many_events_one_evict_call():
    rec = Recorder()
    m = TurnByTurnContext(rec, ContextBudget(1_000), session="s")
    m.apply_turn(0, [("read", f"f{i}", 10, i) for i in range(5)])
    m.apply_turn(1, [("read", "f0", 10, 9), ("output", "tool://bash/1", 5, 9)])
    assert len(rec.states) == 2
    assert [len(s) for s in rec.states] == [5, 6]


def test_edit_bumps_revision_and_needs_the_current_one():
    m = manager(max_bytes=1_000)
    m.apply_turn(0, [("read", "a", 10, 0)])
    assert m.resident_ids() == ["a:0"]
    m.apply_turn(1, [("edit", "a", 12, 1)])            # a hit on a:0, then a:1 replaces it
    assert m.resident_ids() == ["a:1"]
    assert col(m, "hits") == [0, 1]
    m.apply_turn(2, [("edit", "a", 15, 2), ("read", "a", 15, 3)])
    assert m.resident_ids() == ["a:2"]
    assert col(m, "hits") == [0, 1, 2]
    assert m.occupancy_bytes == 15


def test_edit_of_a_path_not_in_context_is_a_miss_and_reread():
    m = manager(max_bytes=50)
    # Never seen: compulsory miss of revision 0 (size unknown: the new size is used), then b:1.
    m.apply_turn(0, [("edit", "b", 20, 0)])
    assert (col(m, "compulsory"), col(m, "miss_bytes"), m.resident_ids()) == ([1], [20], ["b:1"])
    # Evicted, then edited: a capacity miss for the known size (20), then the new revision (30).
    m.apply_turn(1, [("read", "c", 45, 1)])            # 65 > 50: b goes
    m.apply_turn(2, [("edit", "b", 30, 2)])            # 75 > 50: c goes
    assert col(m, "capacity") == [0, 0, 1]
    assert col(m, "capacity_bytes") == [0, 0, 20]
    assert m.resident_ids() == ["b:2"]


def test_write_needs_no_read_and_outputs_never_miss():
    m = manager(max_bytes=1_000)
    m.apply_turn(0, [("write", "new.py", 30, 0), ("output", "tool://bash/1", 200, 0)])
    assert (col(m, "accesses"), col(m, "compulsory")) == ([0], [0])
    assert m.resident_ids() == ["new.py:0", "tool://bash/1:0"]
    m.apply_turn(1, [("write", "new.py", 35, 1), ("output", "tool://bash/1", 50, 1)])
    assert m.resident_ids() == ["new.py:1", "tool://bash/1:1"]   # a repeated output path: new revision
    assert (col(m, "accesses"), m.occupancy_bytes) == ([0, 0], 85)
    m.apply_turn(2, [("read", "new.py", 35, 2)])
    assert col(m, "hits") == [0, 0, 1]


def test_write_after_eviction_is_not_a_miss():
    m = manager(max_bytes=50)
    run_turns(m, reads(("a", 40), ("b", 40)))           # a evicted at t1
    m.apply_turn(2, [("write", "a", 10, 2)])
    m.apply_turn(3, [("read", "a", 10, 3)])
    assert col(m, "capacity") == [0, 0, 0, 0]
    assert col(m, "hits")[3] == 1


def test_access_count_survives_eviction():
    rec = Recorder()
    m = TurnByTurnContext(rec, ContextBudget(50), session="s")
    run_turns(m, reads(("a", 40), ("a", 40), ("a", 40), ("b", 40), ("a", 40)))
    # a read 3 times, evicted at t3 (b newer), read a 4th time at t4: count 4 (b's is 1).
    last = {e.path: e for e in rec.states[-1]}
    assert last["a"].access_count == 4
    assert last["b"].access_count == 1
    assert col(m, "capacity")[4] == 1


def test_state_entries_are_real_context_entries_in_ts_id_order():
    rec = Recorder()
    m = TurnByTurnContext(rec, ContextBudget(1_000), session="s")
    # Three events share ts 5 and arrive out of id order; the state is (ts, id) ordered.
    m.apply_turn(0, [("read", "c", 1, 5), ("read", "a", 2, 5), ("output", "b", 3, 5)])
    m.apply_turn(1, [("read", "z", 4, 6), ("read", "a", 2, 6)])
    first, second = rec.states
    assert [e.id for e in first] == ["a:0", "b:0", "c:0"]
    assert [e.id for e in second] == ["b:0", "c:0", "a:0", "z:0"]
    assert first[0] == ContextEntry("a:0", "a", 5, 2, 1)
    assert second[2] == ContextEntry("a:0", "a", 6, 2, 2)
    assert all(type(e) is ContextEntry for e in first + second)
    assert hash(second[2]) == hash(ContextEntry("a:0", "a", 6, 2, 2))


def test_time_going_backwards_is_still_ordered():
    rec = Recorder()
    m = TurnByTurnContext(rec, ContextBudget(1_000), session="s")
    m.apply_turn(0, [("read", "a", 1, 10), ("read", "b", 1, 3), ("read", "c", 1, 7)])
    assert [e.id for e in rec.states[0]] == ["b:0", "c:0", "a:0"]


def test_read_with_another_size_is_a_new_revision():
    m = manager(max_bytes=1_000)
    m.apply_turn(0, [("read", "a", 10, 0)])
    m.apply_turn(1, [("read", "a", 12, 1)])            # changed outside the trace: compulsory
    assert (col(m, "compulsory"), col(m, "hits")) == ([1, 1], [0, 0])
    assert m.resident_ids() == ["a:1"]
    assert m.occupancy_bytes == 12
    # Evicted, then read with yet another size: compulsory (a revision never resident), not capacity.
    m2 = manager(max_bytes=50)
    run_turns(m2, reads(("a", 40), ("b", 40), ("a", 41)))
    assert (col(m2, "compulsory"), col(m2, "capacity")) == ([1, 1, 1], [0, 0, 0])


def test_oversize_entry_counted_and_evicted():
    m = manager(max_bytes=100)
    m.apply_turn(0, [("read", "a", 40, 0)])
    # A 500-byte log enters, is read back twice in the turn (hits, not new entries): one oversize.
    m.apply_turn(1, [("output", "log", 500, 1), ("read", "log", 500, 2), ("read", "log", 500, 3)])
    assert m.oversize == 1
    assert col(m, "hits") == [0, 2]
    assert col(m, "turn_bytes") == [40, 540]
    assert col(m, "occupancy_bytes") == [40, 0]          # LRU empties the context: a, then the log
    assert m.log.evicted_ids[1] == ["a:0", "log:0"]
    m.apply_turn(2, [("read", "log", 500, 4)])           # it enters again: a capacity miss, oversize 2
    assert (m.oversize, col(m, "capacity")) == (2, [0, 0, 1])
    result = replay_session(SessionTrace("s", [0, 1, 1], [0, 3, 0], ["a", "log", "log"], [40, 500, 500],
                                         [0, 1, 2]), "lru", ContextBudget(100))
    assert result.row["oversize_entries"] == 1
    assert result.row["peak_turn_bytes"] == 540 and result.row["peak_bytes"] == 40


# ----- contract violations -----------------------------------------------------------------

class BreaksOnce:
    """LRU, except that on turn ``bad_turn`` (the call with that index) it misbehaves as ``how``."""

    def __init__(self, how, bad_turn=2):
        self.how, self.bad_turn, self.calls, self.lru = how, bad_turn, 0, make("lru?max_entries=none")

    def evict(self, state, budget):
        call, self.calls = self.calls, self.calls + 1
        ids = self.lru.evict(state, budget)
        if call != self.bad_turn:
            return ids
        if self.how == "unknown":
            return ["nope.py:0"]
        if self.how == "stale":
            return [ids[0].rpartition(":")[0] + ":99"]
        if self.how == "duplicate":
            return ids + ids[:1]
        if self.how == "non-string":
            return [7]
        if self.how == "raises":
            raise RuntimeError("boom")
        if self.how == "over-budget":
            return []
        if self.how == "none":
            return None
        if self.how == "string":
            return ids[0]
        if self.how == "set":
            return set(ids)
        if self.how == "generator":
            return (i for i in ids)
        if self.how == "numpy":
            return np.array(ids, dtype=str)
        if self.how == "too-long":
            return ids + ["x:0"] * 10_000
        if self.how in LEAVES:
            raise LEAVES[self.how][0]
        raise AssertionError(self.how)


#: Ways to leave evict, each with what the message says.
LEAVES = {
    "exit": (SystemExit(0), "raised SystemExit(0) (sys.exit)"),
    "system-exit-text": (SystemExit("bye"), "raised SystemExit('bye') (sys.exit)"),
    "interrupt": (KeyboardInterrupt(), "raised KeyboardInterrupt itself (no Ctrl-C or signal arrived)"),
    "generator-exit": (GeneratorExit(), "raised GeneratorExit, a BaseException"),
}


VIOLATIONS = {
    "unknown": "not in the state",
    "stale": "not in the state",
    "duplicate": "twice",
    "non-string": "non-string id 7",
    "raises": "raised RuntimeError: boom",
    "over-budget": "over the budget",
    "none": "turn 2: returned NoneType, not a list or tuple of ids",
    "string": "turn 2: returned str, not a list or tuple of ids",
    "set": "turn 2: returned set, not a list or tuple of ids",
    "generator": "turn 2: returned generator, not a list or tuple of ids",
    "numpy": "turn 2: returned ndarray, not a list or tuple of ids",
    "too-long": "turn 2: returned id 'x:0', which is not in the state (returned 10,001 ids: ['a:0', 'x:0', "
                "'x:0', 'x:0', 'x:0', 'x:0', 'x:0', 'x:0', ...])",
    **{how: text for how, (_, text) in LEAVES.items()},
}
TRACE = reads(("a", 40), ("b", 40), ("c", 40), ("d", 40), ("a", 40), ("e", 40), ("b", 40))


@pytest.fixture(autouse=True)
def _interrupts_recorded():
    """As under the CLI: a KeyboardInterrupt with no signal noted is the strategy's own."""
    with recording_interrupts():
        yield


@pytest.mark.parametrize("how", sorted(VIOLATIONS))
def test_violation_strict_names_strategy_session_turn(how):
    m = TurnByTurnContext(BreaksOnce(how), ContextBudget(100), session="sess-9", strategy_name="broken")
    with pytest.raises(ContractViolation) as err:
        run_turns(m, TRACE)
    text = str(err.value)
    assert "strategy 'broken'" in text and "session 'sess-9'" in text and "turn 2" in text
    assert VIOLATIONS[how] in text


@pytest.mark.parametrize("how", sorted(VIOLATIONS))
def test_violation_lenient_counted_budget_restored_rest_unaffected(how):
    m = TurnByTurnContext(BreaksOnce(how), ContextBudget(100), session="s", strict=False)
    run_turns(m, TRACE)
    ref = run_turns(manager(max_bytes=100), TRACE)
    assert col(m, "violations") == [0, 0, 1, 0, 0, 0, 0]
    assert len(m.violation_messages) == 1 and VIOLATIONS[how] in m.violation_messages[0]
    assert max(col(m, "occupancy_bytes")) <= 100
    # The restore drops the oldest entries, which is what LRU does: the run is LRU's, turn for turn.
    for name in ("hits", "compulsory", "capacity", "occupancy_bytes", "evictions"):
        assert col(m, name) == col(ref, name), name
    assert m.log.evicted_ids == ref.log.evicted_ids


def test_over_max_entries_is_a_violation():
    class KeepAll:
        def evict(self, state, budget):
            return []

    m = TurnByTurnContext(KeepAll(), ContextBudget(10_000, max_entries=2), session="s", strict=False)
    run_turns(m, reads(("a", 1), ("b", 1), ("c", 1), ("d", 1)))
    assert col(m, "violations") == [0, 0, 1, 1]
    assert col(m, "entries") == [1, 2, 2, 2]
    assert m.resident_ids() == ["c:0", "d:0"]
    strict = TurnByTurnContext(KeepAll(), ContextBudget(10_000, max_entries=2), session="s")
    with pytest.raises(ContractViolation, match="turn 2: left 3 bytes in 3 entries, over the budget"):
        run_turns(strict, reads(("a", 1), ("b", 1), ("c", 1)))


class _Lru:
    """LRU, whose answer ``wrap`` turns into another container of the same ids."""

    def __init__(self, wrap):
        self.lru, self.wrap = make("lru?max_entries=none"), wrap

    def evict(self, state, budget):
        return self.wrap(self.lru.evict(state, budget))


class _LyingList(list):
    """A list whose own methods lie: the replay engine reads the items it holds, never these."""

    def __iter__(self):
        raise SystemExit(4)

    def __len__(self):
        return 0


class _Id(str):
    """A str subclass whose comparison leaves: the replay engine reads the plain string it holds."""

    def __eq__(self, other):
        raise SystemExit(5)

    __hash__ = str.__hash__


@pytest.mark.parametrize("wrap", [tuple, _LyingList, lambda ids: type("Ids", (tuple,), {})(ids),
                                  lambda ids: [_Id(i) for i in ids]],
                         ids=["tuple", "lying-list", "tuple-subclass", "str-subclass-ids"])
@compiled_or_not
def test_list_and_tuple_subclasses_and_str_subclass_ids_are_read_as_plain(wrap, compiled):
    replayed = replay_turns(_Lru(wrap), ContextBudget(100), TRACE, compiled=compiled)
    ref = run_turns(manager(max_bytes=100), TRACE)
    assert replayed.log.digest() == ref.log_digest()
    assert all(type(i) is str for ids in replayed.log.evicted_ids.values() for i in ids)


@pytest.mark.parametrize("answer", [np.array(["a:0"]), iter(["a:0"]), {"a:0": 1}, b"a:0", range(1)])
def test_answers_other_than_a_list_or_tuple_are_refused_whole(answer):
    m = TurnByTurnContext(_Lru(lambda ids: answer if ids else ids), ContextBudget(100), session="s",
                             strict=False)
    run_turns(m, reads(("a", 60), ("b", 60)))
    assert col(m, "violations") == [0, 1]
    assert f"returned {type(answer).__name__}, not a list or tuple of ids" in m.violation_messages[0]
    assert m.resident_ids() == ["b:0"]   # the budget restored by LRU, nothing of the answer applied


@compiled_or_not
def test_no_more_ids_are_read_than_one_past_the_state(compiled):
    # Two entries: three ids are read, all unknown; "a:0", the fourth, is never read, so a stays.
    replayed = replay_turns(_Lru(lambda ids: ["x:0", "y:0", "z:0", "a:0"] if ids is not None else ids),
                            ContextBudget(1_000), [[("read", "a", 10, 0), ("read", "b", 10, 0)]], compiled=compiled,
                            strict=False, strategy_name="liar")
    assert replayed.resident_ids == ["a:0", "b:0"] and replayed.log.evictions.tolist() == [0]
    assert replayed.violation_messages == ["strategy 'liar', session 's', turn 0: returned id "
                                           "'x:0', which is not in the state (returned ['x:0', 'y:0', 'z:0', 'a:0'])"]


def test_an_endless_generator_is_refused_unread():
    def endless():
        while True:
            yield "a:0"

    m = TurnByTurnContext(_Lru(lambda ids: endless() if ids else ids), ContextBudget(100), session="s")
    with pytest.raises(ContractViolation, match="turn 1: returned generator, not a list or tuple of ids"):
        run_turns(m, reads(("a", 60), ("b", 60)))


def test_state_kept_after_evict_gives_an_error():
    class Keeper:
        def __init__(self, read_it):
            self.read_it, self.kept = read_it, []

        def evict(self, state, budget):
            self.kept.append(state)
            if self.read_it:
                return [e.id for e in state][:0]
            return []

    lazy = Keeper(read_it=False)
    m = TurnByTurnContext(lazy, ContextBudget(1_000), session="s")
    run_turns(m, reads(("a", 1), ("b", 1)))
    for probe in (len, list, lambda s: s[0]):
        with pytest.raises(RuntimeError, match="only valid during the evict call"):
            probe(lazy.kept[0])
    # What a strategy already read stays what it read: never the context as it is now.
    eager = Keeper(read_it=True)
    m = TurnByTurnContext(eager, ContextBudget(1_000), session="s")
    run_turns(m, reads(("a", 1), ("b", 1)))
    assert [e.id for e in eager.kept[0]] == ["a:0"]
    assert len(eager.kept[0]) == 1


# ----- stateful hooks ----------------------------------------------------------------------

class RecordingStateful(StatefulContextStrategy):
    """LRU that records every hook call and evict call, in order."""

    def __init__(self, fail_in=None):
        self.calls = []
        self.fail_in = fail_in
        self.lru = make("lru?max_entries=none")

    def reset(self):
        self.calls.append(("reset",))

    def on_insert(self, entry):
        self.calls.append(("insert", entry.id))
        if self.fail_in == "on_insert" and entry.path == "b":
            raise ValueError("bad hook")

    def on_access(self, entry):
        self.calls.append(("access", entry.id, entry.access_count))

    def on_remove(self, entry_id, evicted):
        self.calls.append(("remove", entry_id, evicted))

    def evict(self, state, budget):
        ids = self.lru.evict(state, budget)
        self.calls.append(("evict", tuple(ids)))
        return ids


def test_stateful_hooks_called_in_order():
    s = RecordingStateful()
    m = TurnByTurnContext(s, ContextBudget(50), session="s")
    m.apply_turn(0, [("read", "a", 20, 0), ("read", "a", 20, 1)])
    m.apply_turn(1, [("edit", "a", 25, 2)])
    m.apply_turn(2, [("read", "b", 30, 3)])           # 55 > 50: a:1 evicted
    m.apply_turn(3, [("output", "b", 5, 4)])          # replaces b:0 (not an eviction)
    assert s.calls == [
        ("reset",),
        ("insert", "a:0"), ("access", "a:0", 2), ("evict", ()),
        ("remove", "a:0", False), ("insert", "a:1"), ("evict", ()),
        ("insert", "b:0"), ("evict", ("a:1",)), ("remove", "a:1", True),
        ("remove", "b:0", False), ("insert", "b:1"), ("evict", ()),
    ]
    assert m.log.columns["hits"].tolist() == [1, 1, 0, 0]


def test_raising_hook_is_a_violation():
    m = TurnByTurnContext(RecordingStateful(fail_in="on_insert"), ContextBudget(1_000), session="s",
                             strategy_name="rec")
    m.apply_turn(0, [("read", "a", 1, 0)])
    with pytest.raises(ContractViolation, match="'rec'.*turn 1: on_insert raised ValueError: bad hook"):
        m.apply_turn(1, [("read", "b", 1, 1)])
    lenient = TurnByTurnContext(RecordingStateful(fail_in="on_insert"), ContextBudget(1_000), session="s",
                                   strict=False)
    run_turns(lenient, reads(("a", 1), ("b", 1), ("c", 1)))
    assert col(lenient, "violations") == [0, 1, 0]


# ----- invalidation ------------------------------------------------------------------------

def test_invalidate_gives_invalidation_misses():
    m = manager(max_bytes=1_000)
    m.apply_turn(0, [("read", "a", 10, 0), ("read", "b", 10, 0)])
    m.invalidate("a", 12)                       # another arm changed a
    assert m.resident_ids() == ["a:0", "b:0"]   # the stale revision stays until replaced
    m.invalidate("never-seen", 5)               # not held by this arm: its first read is compulsory
    m.apply_turn(1, [("read", "a", 12, 1), ("read", "never-seen", 5, 1)])
    assert col(m, "invalidation") == [0, 1]
    assert col(m, "compulsory") == [2, 1]
    assert m.log.columns["invalidation_bytes"].tolist() == [0, 12]
    assert m.resident_ids() == ["b:0", "a:1", "never-seen:0"]
    assert col(m, "capacity_bytes") == [0, 0]


def test_invalidate_after_eviction_is_invalidation_not_capacity():
    m = manager(max_bytes=50)
    run_turns(m, reads(("a", 40), ("b", 40)))   # a evicted
    m.invalidate("a", 30)
    m.apply_turn(2, [("read", "a", 30, 2)])
    assert (col(m, "invalidation"), col(m, "capacity")) == ([0, 0, 1], [0, 0, 0])
    assert m.resident_ids() == ["a:1"]
    assert m.occupancy_bytes == 30


# ----- properties --------------------------------------------------------------------------

OPS = ("read", "edit", "write", "output")


@st.composite
def traces(draw, max_turns=25):
    """Random turns over a few paths, with ties in ts, size changes and every op."""
    paths = [f"src/{c}.py" for c in "abcdefg"] + ["tool://bash/1"]
    sizes = {p: draw(st.integers(0, 90)) for p in paths}
    turns, ts = [], 0
    for _ in range(draw(st.integers(1, max_turns))):
        events = []
        for _ in range(draw(st.integers(0, 4))):
            ts += draw(st.sampled_from([0, 0, 1, 7, -3]))   # time may even go backwards
            op = draw(st.sampled_from(OPS))
            path = draw(st.sampled_from(paths))
            if op != "read" or draw(st.integers(0, 9)) == 0:
                sizes[path] = draw(st.integers(0, 90))
            events.append((op, path, sizes[path], ts))
        turns.append(events)
    return turns


def budgets():
    return st.builds(ContextBudget, st.integers(0, 250), st.none() | st.integers(0, 6))


class Reference:
    """An independent, deliberately simple model of docs/design.md §3 for one arm (no invalidation)."""

    def __init__(self, strategy, budget):
        self.strategy, self.budget = strategy, budget
        self.rev, self.size, self.count, self.resident, self.evicted = {}, {}, {}, {}, set()
        self.rows, self.evicted_ids = [], {}

    def _new(self, path, size):
        self.rev[path] = self.rev.get(path, -1) + 1
        self.size[path] = size
        self.evicted.discard(path)

    def _need(self, path, size, row):
        if path not in self.rev or self.size[path] != size:
            self._new(path, size)
        current = f"{path}:{self.rev[path]}"
        row["acc"] += 1
        if path in self.resident and self.resident[path].id == current:
            row["hit"] += 1
        elif path in self.evicted:
            row["cap"] += 1
        else:
            row["comp"] += 1
        self.evicted.discard(path)

    def turn(self, t, events):
        row = {"acc": 0, "hit": 0, "comp": 0, "cap": 0}
        for op, path, size, ts in events:
            self.count[path] = self.count.get(path, 0) + 1
            if op == "read":
                self._need(path, size, row)
            else:
                if op == "edit":
                    self._need(path, self.size.get(path, size), row)
                self._new(path, size)
            entry_id = f"{path}:{self.rev[path]}"
            self.resident[path] = ContextEntry(entry_id, path, ts, self.size[path], self.count[path])
        state = tuple(sorted(self.resident.values(), key=lambda e: (e.last_accessed_at, e.id)))
        ids = list(self.strategy.evict(state, self.budget))
        for entry_id in ids:
            path = entry_id.rpartition(":")[0]
            del self.resident[path]
            if entry_id == f"{path}:{self.rev[path]}":
                self.evicted.add(path)
        if ids:
            self.evicted_ids[t] = ids
        self.rows.append((row["acc"], row["hit"], row["comp"], row["cap"],
                          sum(e.size_bytes for e in self.resident.values()), len(self.resident)))


@PROPERTY
@given(traces(), budgets(), st.sampled_from(["lru", "lru?max_entries=none", "importance?max_entries=none"]))
def test_manager_matches_the_reference_model(turns, budget, spec):
    m = TurnByTurnContext(make(spec), budget, session="s")
    ref = Reference(make(spec), budget)
    for t, events in enumerate(turns):
        m.apply_turn(t, events)
        ref.turn(t, events)
    log = m.log.columns
    got = list(zip(*(log[c].tolist() for c in ("accesses", "hits", "compulsory", "capacity",
                                                "occupancy_bytes", "entries"))))
    assert got == ref.rows
    assert m.log.evicted_ids == ref.evicted_ids


@PROPERTY
@given(traces(), budgets(), st.sampled_from(["lru", "importance", "lru?max_entries=3"]))
def test_invariants_after_every_turn(turns, budget, spec):
    rec = Recorder(spec)
    m = TurnByTurnContext(rec, budget, session="s")
    run_turns(m, turns)
    log = m.log.columns
    assert (log["occupancy_bytes"] <= budget.max_bytes).all()
    if budget.max_entries is not None:
        assert (log["entries"] <= budget.max_entries).all()
    assert (log["violations"] == 0).all()
    assert (log["hits"] + log["compulsory"] + log["capacity"] + log["invalidation"] == log["accesses"]).all()
    needing = [sum(op in ("read", "edit") for op, *_ in events) for events in turns]
    assert log["accesses"].tolist() == needing
    assert (log["evicted_bytes"] == log["turn_bytes"] - log["occupancy_bytes"]).all()
    for state in rec.states:
        assert list(state) == sorted(state, key=lambda e: (e.last_accessed_at, e.id))
        assert len({e.path for e in state}) == len(state)


@settings(max_examples=15, deadline=None)
@given(traces(), budgets())
def test_same_inputs_same_digest(turns, budget):
    digests = {run_turns(manager("importance", budget.max_bytes, budget.max_entries), turns).log_digest()
               for _ in range(3)}
    assert len(digests) == 1


DIGEST_CHILD = r"""
import sys
from ctxbench.sim.engine.turn_by_turn import TurnByTurnContext
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.registry import make
out = []
for spec in ("lru", "importance"):
    m = TurnByTurnContext(make(spec), ContextBudget(3_000, 12), session="s")
    for t in range(300):
        k, j = (t * 7919) % 41, (t * 3) % 41
        m.apply_turn(t, [("read", f"pkg/m{k}.py", 100 + 13 * k, t * 10),
                         ("output", f"tool://bash/{t % 5}", 250, t * 10),
                         ("edit" if t % 9 == 0 else "read", f"pkg/m{j}.py", 100 + 13 * j, t * 10)])
    out.append(m.log_digest())
print(" ".join(out))
"""


def test_digest_identical_across_processes_and_hash_seeds():
    root = Path(__file__).resolve().parent.parent
    seen = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", DIGEST_CHILD], capture_output=True, text=True, env=env,
                              cwd=root, timeout=120)
        assert done.returncode == 0, done.stderr
        seen.add(done.stdout.strip())
    assert len(seen) == 1
    here = io.StringIO()   # and this process (its own hash seed) agrees
    with contextlib.redirect_stdout(here):
        exec(DIGEST_CHILD, {})
    assert here.getvalue().strip() in seen


class Fifo(StatefulContextStrategy):
    """First in, first out: its answer depends on the history its hooks saw."""

    def reset(self):
        self.order = []

    def on_insert(self, entry):
        self.order.append((entry.id, entry.size_bytes))

    def on_remove(self, entry_id, evicted):
        self.order = [(i, s) for i, s in self.order if i != entry_id]

    def evict(self, state, budget):
        total, out = sum(e.size_bytes for e in state), []
        for entry_id, size in self.order:
            if total <= budget.max_bytes:
                break
            out.append(entry_id)
            total -= size
        return out


def test_stateful_object_gets_one_history_per_arm():
    session = SessionTrace("s", list(range(8)), [0] * 8, list("abcabcab"), [40] * 8, list(range(8)),
                           arms=["main", "helper"] * 4)
    one_object = replay_session(session, Fifo(), ContextBudget(50))
    per_arm = replay_session(session, Fifo(), ContextBudget(50), strategy_for_arm=lambda arm: Fifo())
    assert one_object.row["violations"] == 0
    assert one_object.row["log_hash"] == per_arm.row["log_hash"]
    assert one_object.row["capacity_misses"] > 0


@given(st.lists(st.lists(st.tuples(st.sampled_from(["read", "edit", "write", "output"]),
                                   st.sampled_from(["a.py", "b.py", "src/c.py", "tool://x"]),
                                   st.integers(0, 60)), min_size=1, max_size=4), max_size=25),
       st.sampled_from(["lru", "importance", "fifo", "gdsf"]))
def test_columns_replay_equals_turn_by_turn(turns, spec):
    events = [[(op, path, size, t) for op, path, size in turn] for t, turn in enumerate(turns)]
    by_turn = run_turns(manager(spec, max_bytes=90, max_entries=3, strict=False), events)
    flat = [event for turn in events for event in turn]
    columns = manager(spec, max_bytes=90, max_entries=3, strict=False)
    columns.apply_events([OP_CODES[op] for op, *_ in flat], [e[1] for e in flat], [e[2] for e in flat],
                         [e[3] for e in flat], [t for t, turn in enumerate(events) for _ in turn])
    assert columns.log_digest() == by_turn.log_digest()
    timeless = [i for i, name in enumerate(TURN_FIELDS) if name != "evict_ns"]
    assert np.array_equal(columns.log.table[:, timeless], by_turn.log.table[:, timeless])
    assert columns.resident_ids() == by_turn.resident_ids()


def test_unknown_op_code_is_an_error():
    m = manager()
    with pytest.raises(ValueError, match="unknown op code 7"):
        m.apply_events([7], ["a.py"], [1], [0])
    with pytest.raises(KeyError):
        m.apply_event("delete", "a.py", 1, 0)
