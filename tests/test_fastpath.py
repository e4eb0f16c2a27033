"""The compiled fast path against the Python reference: same logs, states and counters on every path."""

import os
import random
import re
import signal
import sys
import time
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.manager as manager_module
from sim.errors import ContractViolation
from sim.manager import OP_CODES, TURN_FIELDS, CodingContextManager
from sim.replay import SessionTrace, replay_session
from sim.state_view import ViewSlots
from strategies.calls import TimeLimitExceeded, noted_signal, recording_interrupts
from strategies.contract import ContextBudget
from strategies.registry import make
from strategies.stateful import StatefulContextStrategy
from test_manager import budgets, traces

pytestmark = pytest.mark.skipif(manager_module._fastpath is None, reason="the compiled fast path is not built")

DIFFERENTIAL = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TIMELESS = [i for i, name in enumerate(TURN_FIELDS) if name != "evict_ns"]
SCALARS = ("_bytes", "_last_ts", "_last_id", "_ordered", "_tail_unsorted", "oversize", "directory_evictions",
           "_tally", "_revision", "_current_id", "_size", "_count", "_absent_reason", "violation_messages")


class Chaos:
    """LRU, except on drawn turns, where it answers one of the ways the contract can be broken."""

    FAULTS = ("unknown", "duplicate", "non-string", "none", "set", "tuple", "generator", "raise", "nothing",
              "numpy", "list-subclass", "valid-then-unknown", "exit", "interrupt", "generator-exit",
              "time-limit", "too-long", "endless", "lying-list", "tuple-subclass", "str-subclass", "odd-object",
              "huge-int")

    def __init__(self, seed: int, rate: float) -> None:
        self.rng, self.rate, self.lru = random.Random(seed), rate, make("lru?max_entries=none")

    def evict(self, state, budget):
        answer = self.lru.evict(state, budget)
        if self.rng.random() >= self.rate:
            return answer
        fault = self.rng.choice(self.FAULTS)
        ids = [e.id for e in state]
        some = ids[: self.rng.randint(0, len(ids))]
        if fault == "unknown":
            return answer + ["nowhere:0"]
        if fault == "duplicate":
            return answer + answer[:1] + some[:1] + some[:1]
        if fault == "non-string":
            return [7] + answer
        if fault == "none":
            return None
        if fault == "set":
            return set(answer)
        if fault == "tuple":
            return tuple(some)
        if fault == "generator":
            return (i for i in some)
        if fault == "raise":
            raise ValueError("chaos")
        if fault == "nothing":
            return []
        if fault == "numpy":
            return np.array(some, dtype=object)
        if fault == "list-subclass":
            return type("Ids", (list,), {})(some)
        if fault in LEAVE:
            raise LEAVE[fault]()
        if fault == "too-long":
            return answer + ["nowhere:0"] * (len(ids) + 1)
        if fault == "endless":
            return iter(lambda: "nowhere:0", None)
        if fault == "lying-list":
            return LyingList(answer)
        if fault == "tuple-subclass":
            return type("Ids", (tuple,), {})(some)
        if fault == "str-subclass":
            return [LyingId(i) for i in answer] + [LyingId("nowhere:0")]
        if fault == "odd-object":
            return [object()] + answer
        if fault == "huge-int":
            return [10 ** 5000] + answer
        return some[:1] + ["a:99"] + some[1:]


LEAVE = {"exit": lambda: SystemExit(0), "interrupt": KeyboardInterrupt, "generator-exit": GeneratorExit,
         "time-limit": lambda: TimeLimitExceeded(25)}


class LyingList(list):
    """A list whose own methods leave: the manager reads the items it holds."""

    def __iter__(self):
        raise SystemExit(1)

    def __len__(self):
        raise SystemExit(2)


class LyingId(str):
    """An id whose comparison and repr leave: the manager reads the plain string it holds."""

    def __eq__(self, other):
        raise SystemExit(3)

    def __repr__(self):
        raise SystemExit(4)

    __hash__ = str.__hash__


class StatefulChaos(StatefulContextStrategy):
    """Chaos, with hooks that raise or leave on drawn calls."""

    def __init__(self, seed: int, rate: float) -> None:
        self.chaos, self.rng, self.rate = Chaos(seed, rate), random.Random(seed + 1), rate

    def _maybe_fail(self):
        if self.rng.random() < self.rate / 4:
            fault = self.rng.choice(["raise", *LEAVE])
            raise ValueError("hook chaos") if fault == "raise" else LEAVE[fault]()

    def reset(self):
        self._maybe_fail()

    def on_insert(self, entry):
        self._maybe_fail()

    def on_access(self, entry):
        self._maybe_fail()

    def on_remove(self, entry_id, evicted):
        self._maybe_fail()

    def evict(self, state, budget):
        return self.chaos.evict(state, budget)


@pytest.fixture(autouse=True)
def _interrupts_recorded():
    """As under the CLI: a KeyboardInterrupt with no signal noted is the strategy's own."""
    with recording_interrupts():
        yield


def snapshot(m: CodingContextManager):
    """Everything the manager holds, but the timings."""
    log = m.log
    held = {name: getattr(m, name) for name in SCALARS}
    held["violation_messages"] = [re.sub(" at 0x[0-9a-f]+", "", message) for message in m.violation_messages]
    return log.table[:, TIMELESS].tolist(), log.evicted_ids, list(m._entries.items()), held


def pair(make_strategy, budget, **options):
    return [CodingContextManager(make_strategy(), budget, session="s", compiled=compiled, **options)
            for compiled in (False, True)]


def drive(managers, turns, columns):
    """Apply ``turns`` to each manager, as columns or turn by turn; the outcome of each."""
    outcomes = []
    for m in managers:
        try:
            if columns:
                flat = [(t, e) for t, events in enumerate(turns) for e in events]
                m.apply_events([OP_CODES[e[0]] for _, e in flat], [e[1] for _, e in flat], [e[2] for _, e in flat],
                               [e[3] for _, e in flat], [t for t, _ in flat])
            else:
                for t, events in enumerate(turns):
                    m.apply_turn(t, events)
            outcomes.append(None)
        except (ContractViolation, ValueError, KeyboardInterrupt) as exc:
            outcomes.append(re.sub(" at 0x[0-9a-f]+", "", f"{type(exc).__name__}: {exc}"))
    return outcomes


@DIFFERENTIAL
@given(traces(max_turns=40), budgets(), st.sampled_from(["lru", "importance", "gdsf", "fifo", "arc", "sieve",
                                                         "s3fifo", "lru?max_entries=2"]),
       st.booleans(), st.none() | st.integers(1, 3))
def test_builtin_strategies_same_on_both_paths(turns, budget, spec, columns, max_directories):
    managers = pair(lambda: make(spec), budget, max_directories=max_directories)
    assert len(set(drive(managers, turns, columns))) == 1
    python, compiled = map(snapshot, managers)
    assert compiled == python


@DIFFERENTIAL
@given(traces(max_turns=40), budgets(), st.integers(0, 2**32), st.sampled_from([0.2, 0.7]), st.booleans(),
       st.booleans(), st.sampled_from([Chaos, StatefulChaos]))
def test_contract_breaking_answers_same_on_both_paths(turns, budget, seed, rate, strict, columns, chaos):
    managers = [CodingContextManager(chaos(seed, rate), budget, session="s", strict=strict, compiled=compiled)
                for compiled in (False, True)]
    outcomes = drive(managers, turns, columns)
    assert outcomes[0] == outcomes[1]
    if outcomes[0] is None:   # after a strict violation the two stop at the same point, mid-turn
        assert snapshot(managers[1]) == snapshot(managers[0])


class NotesASignal:
    """LRU that, on its ``call``-th call, receives a real signal (noted) while it runs and then ``ends``."""

    def __init__(self, call: int, ends: str) -> None:
        self.call, self.ends, self.calls, self.lru = call, ends, 0, make("lru?max_entries=none")

    def evict(self, state, budget):
        self.calls += 1
        if self.calls - 1 != self.call:
            return self.lru.evict(state, budget)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)   # the handler interrupts the sleep at once
        except KeyboardInterrupt:
            if self.ends == "swallows-and-raises":
                raise ValueError("not an interrupt, says the strategy") from None
            if self.ends == "swallows-and-exits":
                sys.exit(0)
            raise
        raise AssertionError("the signal did not arrive")


@pytest.mark.parametrize("ends", ["passes-it-on", "swallows-and-raises", "swallows-and-exits"])
@pytest.mark.parametrize("strict", [True, False])
def test_a_real_interrupt_during_evict_stops_both_paths_alike(ends, strict):
    turns = [[("read", f"f{t % 5}", 30, t)] for t in range(8)]
    outcomes, snapshots = [], []
    for compiled in (False, True):
        with recording_interrupts():   # a fresh record for each path
            m = CodingContextManager(NotesASignal(3, ends), ContextBudget(70), session="s", strict=strict,
                                     compiled=compiled)
            with pytest.raises(KeyboardInterrupt):
                drive_raw(m, turns)
            assert noted_signal() == signal.SIGINT
        outcomes.append(m.log.table[:, TIMELESS].tolist())
        snapshots.append(snapshot(m))
    assert len(outcomes[0]) == 3 and snapshots[1] == snapshots[0]


@pytest.mark.parametrize("strict", [True, False])
def test_a_call_past_the_time_limit_is_the_same_violation_on_both_paths(strict):
    turns = [[("read", f"f{t % 5}", 30, t)] for t in range(8)]
    managers = pair(lambda: make("broken_strategies:breaks?call=3&fault=sleep"), ContextBudget(70),
                    strict=strict, evict_timeout_ms=20)
    outcomes = drive(managers, turns, columns=True)
    assert outcomes[0] == outcomes[1]
    python, compiled = map(snapshot, managers)
    assert compiled == python
    assert "turn 3: ran past the per-call time limit of 20 ms" in (outcomes[0] or python[3]["violation_messages"][0])


def drive_raw(m, turns):
    for t, events in enumerate(turns):
        m.apply_turn(t, events)


def test_unknown_op_and_bad_numbers_leave_the_same_state():
    managers = pair(lambda: make("lru"), ContextBudget(100))
    for m in managers:
        m.apply_events([0, 2], ["a", "b"], [10, 20], [1, 2])
        with pytest.raises(ValueError, match="unknown op code 9"):
            m.apply_events([0, 9], ["a", "c"], [10, 5], [3, 4])
        m.end_turn(0, 4)
    assert snapshot(managers[1]) == snapshot(managers[0])
    with pytest.raises(TypeError):
        managers[1].apply_events([0], ["a"], ["ten"], [5])


def test_multi_arm_sessions_same_on_both_paths(monkeypatch):
    rng = np.random.default_rng(3)
    n = 400
    session = SessionTrace("s", sorted(rng.integers(0, 120, n).tolist()), rng.integers(0, 4, n).tolist(),
                           [f"src/{i}.py" for i in rng.integers(0, 12, n)], rng.integers(1, 40, n).tolist(),
                           list(range(n)), arms=rng.choice(["main", "helper", "other"], n).tolist(),
                           lines_changed=rng.integers(0, 5, n).tolist())
    rows = {}
    for compiled in (False, True):
        monkeypatch.setattr(manager_module, "COMPILED", compiled)
        for spec in ("lru", "sieve"):
            result = replay_session(session, spec, ContextBudget(150))
            rows[compiled, spec] = ({k: v for k, v in result.row.items() if "_ns" not in k and k != "replay_s"},
                                    result.log.table[:, TIMELESS].tolist())
    for spec in ("lru", "sieve"):
        assert rows[True, spec] == rows[False, spec]
        assert rows[True, spec][0]["invalidation_misses"] > 0


def test_log_packed_in_chunks_is_the_same(monkeypatch):
    monkeypatch.setattr(manager_module, "_CHUNK_BYTES", 3 * manager_module._ROW.size)
    manager_module._fastpath.bind(manager_module.ContextEntry, manager_module.StateView, 3,
                                  manager_module.call_failure, manager_module.answer_ids)
    try:
        turns = [[("read", f"f{t % 7}", 30, t)] for t in range(50)]
        managers = pair(lambda: make("lru"), ContextBudget(100))
        drive(managers, turns, columns=True)
        assert len(managers[1]._packed) > 10
        assert snapshot(managers[1]) == snapshot(managers[0])
    finally:
        manager_module._fastpath.bind(manager_module.ContextEntry, manager_module.StateView,
                                      manager_module._ROWS_PER_CHUNK, manager_module.call_failure,
                                      manager_module.answer_ids)


def test_compiled_is_the_default_and_can_be_turned_off():
    assert CodingContextManager(make("lru"), ContextBudget(1)).compiled == manager_module.COMPILED
    assert not CodingContextManager(make("lru"), ContextBudget(1), compiled=False).compiled


PythonView = type("PythonView", (ViewSlots, Sequence), {"__slots__": ()})
view_operations = st.lists(st.one_of(
    st.just(("len",)), st.just(("iter",)), st.just(("close",)), st.just(("tuple",)),
    st.tuples(st.just("index"), st.integers(-8, 8)),
    st.tuples(st.just("slice"), st.none() | st.integers(-8, 8), st.none() | st.integers(-8, 8),
              st.sampled_from([None, 1, 2, -1])),
    st.tuples(st.just("contains"), st.integers(0, 8))), max_size=8)


def _outcome(view, operation):
    name, *args = operation
    try:
        if name == "len":
            return len(view)
        if name == "iter":
            return list(view)
        if name == "close":
            return view.close()
        if name == "tuple":
            return view._tuple()
        if name == "index":
            return view[args[0]]
        if name == "slice":
            return view[slice(*args)]
        return args[0] in view
    except (IndexError, RuntimeError, ValueError) as exc:
        return type(exc).__name__, str(exc)


@DIFFERENTIAL
@given(st.integers(0, 6), view_operations)
def test_compiled_view_behaves_as_the_python_view(size, operations):
    from sim.state_view import StateView
    values = {k: k for k in range(size)}.values()
    python, compiled = PythonView(values, size), StateView(values, size)
    assert type(compiled).__bases__[0] is manager_module._fastpath.StateViewBase
    for operation in operations:
        assert _outcome(compiled, operation) == _outcome(python, operation), operation
    assert (compiled.total_bytes, compiled.recency_sorted) == (python.total_bytes, True)
