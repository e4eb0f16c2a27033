"""The compiled engine against its specification (sim/engine/rules.py): the same resolution, logs,
counters, hook calls and violations on random streams, for every kind of strategy and answer."""

import random
import re
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_paths import engine_options
from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.engine import compiled as compiled_module
from ctxbench.sim.engine.arm import replay_arm, resolve_arm
from ctxbench.sim.engine.measures import TURN_FIELDS
from ctxbench.sim.engine.rules import (CALL, EDIT, INVALIDATE, MESSAGE, OUTPUT, OVERHEAD, READ, WRITE, ArmStream,
                                       Compaction)
from ctxbench.sim.errors import ContractViolation
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.registry import make
from ctxbench.strategies.stateful import StatefulContextStrategy

pytestmark = pytest.mark.skipif(not compiled_module.BUILT, reason="the compiled engine is not built")

DIFFERENTIAL = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TIMELESS = [i for i, name in enumerate(TURN_FIELDS) if name != "evict_ns"]
STEP_COLUMNS = ("slot", "need", "need_bytes", "miss", "place", "place_bytes", "ts_ms", "count", "event", "entry_slot",
                "ends", "end_turns", "end_ts")


@st.composite
def streams(draw, max_events=60, arms=False, window=True):
    """A random arm's events over a few paths: ties in time, size changes, every op, turns of 0-4
    events, and (``arms``) other arms' changes; (``window``) pinned content and costs that are not
    the sizes."""
    paths = [f"src/{c}.py" for c in "abcde"] + ["lib/x/f.py", "tool://bash/1"]
    sizes = {p: draw(st.integers(0, 90)) for p in paths}
    ops = [READ, EDIT, WRITE, OUTPUT] + ([INVALIDATE] if arms else []) + ([MESSAGE, CALL, OVERHEAD] if window else [])
    scaled = window and draw(st.booleans())
    stream = ArmStream("main", [], [], [], [], costs=[] if scaled else None)
    ts = 0
    for turn in range(draw(st.integers(1, max_events // 3))):
        own = 0
        for _ in range(draw(st.integers(0, 4))):
            ts += draw(st.sampled_from([0, 0, 1, 7, -3]))   # time may even go backwards
            op, path = draw(st.sampled_from(ops)), draw(st.sampled_from(paths))
            if op in (MESSAGE, CALL, OVERHEAD):
                path = f"msg://{len(stream.ops)}"
                sizes[path] = draw(st.integers(0, 60))
            elif op != READ or draw(st.integers(0, 9)) == 0:
                sizes[path] = draw(st.integers(0, 90))
            for column, value in zip((stream.ops, stream.paths, stream.sizes, stream.ts_ms),
                                     (op, path, sizes[path], ts)):
                column.append(value)
            if scaled:   # a cost per event, as bytes scaled by a kind's ratio would give
                stream.costs.append(sizes[path] * draw(st.sampled_from([1, 2, 3])) // 2)
            own += op != INVALIDATE
        if own or draw(st.booleans()):
            stream.end_turn(len(stream.ops), turn, ts)
    return stream


def budgets():
    return st.builds(ContextBudget, st.integers(0, 250), st.none() | st.integers(0, 6))


def both(stream: ArmStream):
    """The stream resolved by the specification and by the compiled engine."""
    return resolve_arm(stream, compiled=False), resolve_arm(stream, compiled=True)


def outcome(resolved, make_strategy, budget, **options):
    """Everything a replay gives but timings, or the error that stopped it."""
    try:
        settings, rest = engine_options(options)
        r = replay_arm(resolved, make_strategy(), budget, settings, session="s", **rest)
    except (ContractViolation, ValueError) as exc:
        return re.sub(" at 0x[0-9a-f]+", "", f"{type(exc).__name__}: {exc}")
    messages = [re.sub(" at 0x[0-9a-f]+", "", m) for m in r.violation_messages]
    return r.log.table[:, TIMELESS].tolist(), r.log.evicted_ids, r.oversize, r.directory_evictions, messages


def compare(stream, make_strategy, budget, **options):
    spec, fast = both(stream)
    python = outcome(spec, make_strategy, budget, compiled=False, **options)
    compiled = outcome(fast, make_strategy, budget, compiled=True, **options)
    assert compiled == python
    return python


@DIFFERENTIAL
@given(streams(arms=True))
def test_resolution_is_the_same(stream):
    spec, fast = both(stream)
    for name in STEP_COLUMNS:
        assert np.array_equal(getattr(spec, name), getattr(fast, name)), name
    assert (spec.ids, spec.paths, spec.slots) == (fast.ids, fast.paths, fast.slots)


@DIFFERENTIAL
@given(streams(arms=True), budgets(),
       st.sampled_from(["lru", "importance", "lfu", "size", "segmented", "outputs-first", "gdsf", "fifo", "arc",
                        "sieve", "s3fifo", "lru?max_entries=2"]),
       st.none() | st.integers(1, 3), st.sampled_from([0, 5, 300_000]))
def test_builtin_strategies_replay_the_same(stream, budget, spec, max_directories, cache_ttl_ms):
    result = compare(stream, lambda: make(spec), budget, max_directories=max_directories, cache_ttl_ms=cache_ttl_ms)
    assert not isinstance(result, str)   # built-ins keep the contract


@settings(DIFFERENTIAL, max_examples=100)
@given(streams(), budgets(), st.sampled_from(["lru", "gdsf"]), st.integers(0, 150), st.integers(0, 40),
       st.sampled_from([-1, 0, 5, 300_000]))
def test_a_compacted_conversation_and_its_summarization_calls_replay_the_same(stream, budget, spec, trigger, summary,
                                                                             cache_ttl_ms):
    conversation = [int(stream.ops[e] in (MESSAGE, CALL)) for e in resolve_arm(stream, compiled=False).event]
    compare(stream, lambda: make(spec), budget, compaction=Compaction(trigger, summary, conversation),
            cache_ttl_ms=cache_ttl_ms)


class Chaos:
    """LRU, except on drawn turns, where it answers one of the ways the contract can be broken."""

    FAULTS = ("unknown", "duplicate", "non-string", "none", "set", "tuple", "generator", "raise", "nothing",
              "numpy", "list-subclass", "str-subclass", "valid-then-unknown", "keep-all", "dict")

    def __init__(self, seed: int, rate: float) -> None:
        self.rng, self.rate, self.lru = random.Random(seed), rate, make("lru?max_entries=none")

    def evict(self, state, budget):
        answer = self.lru.evict(state, budget)
        if self.rng.random() >= self.rate:
            return answer
        fault = self.rng.choice(self.FAULTS)
        ids = [e.id for e in state]
        some = ids[: self.rng.randint(0, len(ids))]
        match fault:
            case "unknown":
                return answer + ["nowhere:0"]
            case "duplicate":
                return answer + answer[:1] + some[:1] + some[:1]
            case "non-string":
                return [7] + answer
            case "none":
                return None
            case "set":
                return set(answer)
            case "tuple":
                return tuple(some)
            case "generator":
                return (i for i in some)
            case "raise":
                raise ValueError("chaos")
            case "nothing":
                return []
            case "numpy":
                return np.array(some, dtype=object)
            case "list-subclass":
                return type("Ids", (list,), {"__iter__": lambda self: iter(list.__iter__(self))})(some)
            case "str-subclass":
                return [type("Id", (str,), {})(i) for i in answer]
            case "keep-all":
                return []
            case "dict":
                return dict.fromkeys(answer)
        return some[:1] + ["src/a.py:99"] + some[1:]


@DIFFERENTIAL
@given(streams(), budgets(), st.integers(0, 2**32), st.sampled_from([0.2, 0.7]), st.booleans())
def test_contract_breaking_answers_are_judged_the_same(stream, budget, seed, rate, strict):
    compare(stream, lambda: Chaos(seed, rate), budget, strict=strict)


class Recording(StatefulContextStrategy):
    """A stateful strategy that logs every hook call (and may raise in one), evicting like LRU."""

    def __init__(self, raise_in: str | None = None, at: int = 3) -> None:
        self.raise_in, self.at = raise_in, at
        self.lru = make("lru")
        self.calls: list[tuple] = []

    def reset(self) -> None:
        self.calls = []

    def _log(self, name, *args) -> None:
        self.calls.append((name, *args))
        if name == self.raise_in and len(self.calls) % self.at == 0:
            raise KeyError(f"{name} fails")

    def on_insert(self, entry: ContextEntry) -> None:
        self._log("on_insert", entry)

    def on_access(self, entry: ContextEntry) -> None:
        self._log("on_access", entry)

    def on_remove(self, entry_id: str, evicted: bool) -> None:
        self._log("on_remove", entry_id, evicted)

    def evict(self, state, budget):
        self._log("evict", tuple(state), state.total_bytes)
        return self.lru.evict(state, budget)


@DIFFERENTIAL
@given(streams(arms=True), budgets(), st.sampled_from([None, "on_insert", "on_access", "on_remove"]),
       st.booleans(), st.none() | st.integers(1, 3))
def test_hooks_see_the_same_calls(stream, budget, raise_in, strict, max_directories):
    spec, fast = both(stream)
    seen = []
    for resolved, compiled in ((spec, False), (fast, True)):
        strategy = Recording(raise_in)
        try:
            replay_arm(resolved, strategy, budget, ReplaySettings(strict=strict, max_directories=max_directories),
                       compiled=compiled, strategy_name="recording")
            error = None
        except ContractViolation as exc:
            error = str(exc)
        seen.append((strategy.calls, error))
    assert seen[0] == seen[1]


def test_a_genuine_interrupt_in_a_hook_propagates():
    class Interrupted(Recording):
        def on_insert(self, entry):
            raise KeyboardInterrupt

    stream = ArmStream.from_turns([READ], ["a"], [5], [0], [0])
    for compiled in (False, True):
        with pytest.raises(KeyboardInterrupt):
            replay_arm(resolve_arm(stream, compiled=compiled), Interrupted(), ContextBudget(100), compiled=compiled)


def _view_of(stream, budget, compiled):
    """What a strategy reading its state in every way sees, per turn."""
    seen = []

    class Probe:
        kept = None

        def evict(self, state, budget):
            Probe.kept = state
            seen.append((len(state), state.total_bytes, state.recency_sorted, isinstance(state, Sequence),
                         state[:2], state[1:3], state[:0], state[::2] if len(state) else (), list(state),
                         state[-1] if len(state) else None, state.count(state[0]) if len(state) else 0,
                         state.index(state[-1]) if len(state) else None, tuple(reversed(state))))
            return make("lru").evict(state, budget)

    replay_arm(resolve_arm(stream, compiled=compiled), Probe(), budget, compiled=compiled)
    return seen, Probe.kept


@DIFFERENTIAL
@given(streams(), budgets())
def test_the_state_view_reads_the_same(stream, budget):
    python, kept_python = _view_of(stream, budget, False)
    compiled, kept_compiled = _view_of(stream, budget, True)
    assert compiled == python
    for kept in (kept_python, kept_compiled):   # after its call, a view that was read stays readable
        if kept is not None:
            assert len(kept) == python[-1][0] and list(kept) == python[-1][8]


def test_a_view_kept_unread_after_its_call_is_closed():
    kept = []

    class Keeper:
        def evict(self, state, budget):
            kept.append(state)
            return []

    stream = ArmStream.from_turns([READ, READ], ["a", "b"], [5, 5], [0, 1], [0, 1])
    for compiled in (False, True):
        kept.clear()
        replay_arm(resolve_arm(stream, compiled=compiled), Keeper(), ContextBudget(100), compiled=compiled)
        with pytest.raises(RuntimeError, match="only valid during the evict call"):
            len(kept[0])
        with pytest.raises(RuntimeError, match="only valid during the evict call"):
            kept[0][0]


def test_the_compiled_view_cannot_be_made_by_hand():
    with pytest.raises(TypeError, match="made by the replay engine only"):
        compiled_module.StateView()


def test_the_compiled_engine_is_checked_against_the_declared_row():
    engine = compiled_module.engine
    compiled_module.check_fields(engine)
    groups = {name: getattr(engine, name) for name in ("KEY_FIELDS", "TALLY_FIELDS", "END_FIELDS")}
    for name, drifted in (("END_FIELDS", groups["END_FIELDS"][:-1]),
                          ("TALLY_FIELDS", groups["TALLY_FIELDS"][1::-1] + groups["TALLY_FIELDS"][2:])):
        with pytest.raises(ImportError, match=f"{name}.*declares"):
            compiled_module.check_fields(SimpleNamespace(**{**groups, name: drifted}))


def test_the_compiled_engine_is_checked_against_the_declared_arguments():
    engine = compiled_module.engine
    compiled_module.check_args(engine)
    args = dict(engine.ARGS)
    with pytest.raises(ImportError, match="reads the arguments"):
        compiled_module.check_args(SimpleNamespace(ARGS={**args, "managed": args["managed"][:-1]}))
    with pytest.raises(ImportError, match="reads the arguments"):
        compiled_module.check_args(SimpleNamespace(ARGS={**args, "core": args["core"][1:] + args["core"][:1]}))


def test_inconsistent_resolved_columns_are_refused():
    resolved = resolve_arm(ArmStream.from_turns([READ, READ], ["a", "b"], [5, 5], [0, 1], [0, 1]), compiled=True)
    resolved.slot = resolved.slot.copy()
    resolved.slot[1] = 99
    with pytest.raises(ValueError, match="inconsistent"):
        replay_arm(resolved, make("lru"), ContextBudget(100), compiled=True)


def test_the_compiled_engine_takes_int64_columns_only():
    n = 1
    out = tuple(np.empty(n, np.int64) for _ in range(9))
    with pytest.raises(TypeError, match="sizes must be an int64 array"):
        compiled_module.engine.resolve(np.zeros(n, np.int64), ["a"], np.zeros(n, np.float64), np.zeros(n, np.int64),
                                       np.zeros(n, np.int64), out, np.empty(2 * n, np.int64))


class LruByCall(type(make("lru"))):
    """The built-in LRU, but not exactly its class: the compiled engine calls its evict instead of its kernel."""

    __slots__ = ()


@DIFFERENTIAL
@given(streams(arms=True), budgets(), st.sampled_from([None, 1, 3]))
def test_the_lru_kernel_inside_the_engine_answers_as_its_evict_would(stream, budget, max_entries):
    from ctxbench.sim.engine.compiled import NATIVE_LRU, NATIVE_NONE, native_kernel

    assert native_kernel(make(f"lru?max_entries={max_entries or 'none'}"))["native"] == NATIVE_LRU
    assert native_kernel(LruByCall(max_entries))["native"] == NATIVE_NONE
    resolved = resolve_arm(stream, compiled=True)
    native = outcome(resolved, lambda: make(f"lru?max_entries={max_entries or 'none'}"), budget, compiled=True)
    called = outcome(resolved, lambda: LruByCall(max_entries), budget, compiled=True)
    assert native == called


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(-2**62, 2**62), min_size=len(TURN_FIELDS), max_size=len(TURN_FIELDS)),
                min_size=1, max_size=40))
def test_the_log_totals_in_one_pass_are_their_definition(rows):
    from ctxbench.sim.engine.measures import log_totals_numpy

    table = np.array(rows, dtype=np.int64)
    sums, peaks, prompts, reads, peak_prompt = compiled_module.engine.log_totals(table)
    occupancy, pinned = TURN_FIELDS.index("occupancy_bytes"), TURN_FIELDS.index("pinned_bytes")
    exact_prompts = [r[occupancy] + r[pinned] for r in rows]
    assert list(sums) == [sum(column) for column in zip(*rows)] and list(peaks) == [max(c) for c in zip(*rows)]
    assert prompts == sum(exact_prompts) and reads == sum(r[TURN_FIELDS.index("cache_read_bytes")] for r in rows)
    assert peak_prompt == max(exact_prompts)
    if all(-2**63 <= p < 2**63 for p in exact_prompts):   # numpy's int64 prompt column holds them
        assert (list(sums), list(peaks), prompts, reads, peak_prompt) == tuple(
            list(x) if isinstance(x, list) else x for x in log_totals_numpy(table))


@DIFFERENTIAL
@given(streams(arms=True), budgets())
def test_the_belady_size_kernel_inside_the_engine_is_its_definition(stream, budget):
    from ctxbench.sim.analysis.bracket import BeladySizeStrategy, arm_needs
    from ctxbench.sim.engine.compiled import NATIVE_BELADY_SIZE, NATIVE_NONE, native_kernel

    fast, spec = resolve_arm(stream, compiled=True), resolve_arm(stream, compiled=False)
    assert native_kernel(BeladySizeStrategy(resolved=fast), fast)["native"] == NATIVE_BELADY_SIZE
    assert native_kernel(BeladySizeStrategy(arm_needs(fast)), fast)["native"] == NATIVE_NONE
    kernel = outcome(fast, lambda: BeladySizeStrategy(resolved=fast), budget, compiled=True, strict=False)
    called = outcome(fast, lambda: BeladySizeStrategy(arm_needs(fast)), budget, compiled=True, strict=False)
    definition = outcome(spec, lambda: BeladySizeStrategy(resolved=spec), budget, compiled=False, strict=False)
    assert kernel == called == definition
