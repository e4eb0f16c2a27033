"""The compiled transcript model gives exactly the specification's results (sim/engine/transcript.py): every row,
evicted id and final item, for every built-in policy, on generated sessions with and without a conversation, and
for policies that break the contract (lenient)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broken_policies
from whole_window import conversational
from engine_paths import engine_options
from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.engine.replay import resolve_session, split_sessions
from ctxbench.sim.engine.rules import OP_CODES, ArmStream
from ctxbench.sim.engine.arm import resolve_arm
from ctxbench.sim.engine.transcript import replay_transcript
from ctxbench.strategies.policy import Replace, Request
from ctxbench.strategies.registry import builtin_names, make

pytestmark = pytest.mark.skipif(not BUILT, reason="the compiled engine is not built")

TIMED = 16   # evict_ns


def both(stream, resolved, policy_factory, max_bytes, **options):
    settings, options = engine_options(options)
    out = [replay_transcript(stream, resolved, policy_factory(), max_bytes, 2.8, settings, compiled=c, strategy_name="p",
                             **options)
           for c in (False, True)]
    for replay in out:
        replay.log.table[:, TIMED] = 0
    return out


def assert_same(spec_replay, compiled_replay):
    assert np.array_equal(spec_replay.log.table, compiled_replay.log.table)
    assert spec_replay.log.evicted_ids == compiled_replay.log.evicted_ids
    assert spec_replay.resident_ids == compiled_replay.resident_ids
    assert spec_replay.violation_messages == compiled_replay.violation_messages


SPECS = builtin_names(kind="policy") + ["claude-code?trigger_tokens=3000&file_tokens=800", "observation-masking?n=1",
                                        "codex?trigger_fraction=0.1", "openhands-summarizing?max_size=6&keep_first=1",
                                        "clear-tool-uses?trigger_tokens=2000&keep=1",
                                        "claude-code?trigger_tokens=1500&overflow=fail", "gemini-cli?trigger_fraction=0.3"]


@pytest.mark.parametrize("preset", ["claude-code-like", "debug-loop", "parallel-hubs"])
@pytest.mark.parametrize("whole_window", [False, True], ids=["tools", "window"])
def test_every_policy_on_generated_sessions(preset, whole_window):
    from ctxbench.traces.generate import generate

    df = generate(preset, sessions=1, seed=5)
    for session in split_sessions(conversational(df) if whole_window and preset != "parallel-hubs" else df):
        resolved = resolve_session(session)
        for arm, steps in resolved.arms.items():
            stream = resolved.streams[arm]
            for spec in SPECS:
                for window in (200_000, 30_000):
                    assert_same(*both(stream, steps, lambda: make(spec), int(window * 2.8)))


class AdmitsBadly:
    """An admit that returns too much now and then, raises once, and an edit that masks the oldest result."""

    def __init__(self):
        self.calls = 0

    def admit(self, item):
        self.calls += 1
        if self.calls == 3:
            raise ValueError("no")
        return item.tokens + 1 if self.calls % 5 == 0 else item.tokens // 2

    def edit(self, items, window):
        results = [i for i in items if i.role == "result" and i.tokens > 1]
        return [Replace((results[0].id,), 1, "placeholder")] if len(results) > 3 else []


@pytest.mark.parametrize("factory", [broken_policies.Grows, broken_policies.Unknown, broken_policies.ReplacesOverhead,
                                     broken_policies.AttachesUnseen, broken_policies.Raises, broken_policies.Exits,
                                     broken_policies.BadAnswer, broken_policies.Flaky, AdmitsBadly])
def test_policies_that_break_the_contract_are_counted_alike(factory):
    from ctxbench.traces.generate import generate

    (session,) = split_sessions(conversational(generate("debug-loop", sessions=1, seed=2)))
    resolved = resolve_session(session)
    spec, compiled = both(resolved.streams["main"], resolved.arms["main"], factory, 200_000, strict=False)
    assert_same(spec, compiled)
    assert spec.log.violations.sum() > 0 or factory is broken_policies.Flaky


class RequestsPart:
    """Every third call, summarizes the older half of the history by a call sent every other item of it (and of
    the rest), its own text and, on even calls, trimmed to fit: the request's every shape, for both engines."""

    def __init__(self, tokens: int):
        self.tokens = tokens

    def edit(self, items, window):
        old = [i for i in items if i.role != "overhead"]
        if window.turn % 3 != 2 or len(old) < 2:
            return []
        replaced = old[:len(old) // 2]
        asked = tuple(i.id for i in items[::2])
        summary = min(5, sum(i.tokens for i in replaced))
        if summary == 0:
            return [Replace(tuple(i.id for i in replaced), 0)]
        return [Replace(tuple(i.id for i in replaced), summary, "summary"),
                Request(asked if window.turn % 2 else None, self.tokens, window.turn % 2 == 0)]


TURN = st.lists(st.tuples(st.sampled_from(["read", "edit", "write", "output", "message", "call"]),
                          st.sampled_from(["a", "b", "c", "tool://bash/1", "msg://user/1", "msg://thinking/2"]),
                          st.integers(0, 400)), min_size=1, max_size=4)


def drawn_stream(turns) -> ArmStream:
    """The stream of drawn turns (lists of (op, path, size)), turn k at k seconds."""
    stream = ArmStream("main", [], [], [], [])
    for number, events in enumerate(turns):
        for op, path, size in events:
            stream.ops.append(OP_CODES[op])
            stream.paths.append(path)
            stream.sizes.append(size)
            stream.ts_ms.append(number * 1000)
        stream.end_turn(len(stream.ops), number, number * 1000)
    return stream


@settings(max_examples=60, deadline=None)
@given(st.lists(TURN, min_size=1, max_size=12), st.sampled_from(SPECS), st.integers(50, 3_000),
       st.sampled_from([-1, 500, 1500]))
def test_random_streams(turns, spec, window, cache_ttl_ms):
    stream = drawn_stream(turns)
    resolved = resolve_arm(stream, compiled=False)
    assert_same(*both(stream, resolved, lambda: make(spec), window, strict=False, cache_ttl_ms=cache_ttl_ms))


@settings(max_examples=60, deadline=None)
@given(st.lists(TURN, min_size=1, max_size=12), st.integers(0, 300), st.integers(50, 3_000),
       st.sampled_from([-1, 500, 1500]))
def test_random_requests(turns, tokens, window, cache_ttl_ms):
    stream = drawn_stream(turns)
    resolved = resolve_arm(stream, compiled=False)
    assert_same(*both(stream, resolved, lambda: RequestsPart(tokens), window, strict=False, cache_ttl_ms=cache_ttl_ms))
