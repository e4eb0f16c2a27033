"""opt:schedule (sim/analysis/schedule.py): the cheapest compaction schedule equals the least cost over every
schedule replayed on the engine, its segment costs are the engine's for any schedule, and the schedule policy
replays it at the reported cost."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxbench.sim.analysis.schedule import (ScheduleError, SegmentInputs, cheapest_at_rereads, cheapest_schedule,
                                            optimal_schedule, schedule_cost, schedule_rereads, segment_inputs,
                                            session_schedules)
from ctxbench.sim.engine.measures import summarise
from ctxbench.sim.engine.replay import resolve_session, split_sessions
from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.engine.transcript import replay_transcript
from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.policies.schedule import SchedulePolicy, parse_calls
from ctxbench.strategies.registry import make
from ctxbench.traces.generate import generate

REF = 2.8


def arms(preset: str, seed: int, events: int):
    """The arms of one generated session cut to its first ``events`` events."""
    df = generate(preset, sessions=1, seed=seed).iloc[:events]
    for session in split_sessions(df):
        resolved = resolve_session(session)
        for arm, steps in resolved.arms.items():
            yield resolved.streams[arm], steps


def replayed(stream, steps, policy, max_bytes, replay_settings):
    log = replay_transcript(stream, steps, policy, max_bytes, REF, replay_settings).log
    return summarise(log, max_bytes, REF, cache_ttl_ms=int(replay_settings.cache_ttl_ms))


def test_a_hand_worked_three_call_arm():
    # B = 100, 300, 500 bytes; A = 60 (overhead 50, summary 10); the cache read at 0.1, a write at 1.25.
    inputs = SegmentInputs(np.array([100, 300, 500]), np.array([False, True, True]), first=1, after=60, lead=50,
                           summary=10, max_bytes=1000, write_price=1.25)
    # No compaction: 1.25*100 + (0.1*100 + 1.25*200) + (0.1*300 + 1.25*200) = 665.
    assert schedule_cost(inputs, ()) == pytest.approx(665)
    # At call 1: calls 0 and 1's summarization call cost 125 + 260; the call after it 1.25*60 - 1.15*50 + 5*10
    # = 67.5; call 2's prompt 260 reads 60: 6 + 250 = 256. In all 708.5.
    assert schedule_cost(inputs, (1,)) == pytest.approx(708.5)
    assert cheapest_schedule(inputs).calls == ()
    assert cheapest_schedule(inputs).cost_bytes == pytest.approx(665)
    # A window of 400 bytes leaves call 2 (500) out unless call 1 compacts: then the prompt is 260.
    small = SegmentInputs(**{**inputs.__dict__, "max_bytes": 400})
    assert schedule_cost(small, ()) is None
    assert cheapest_schedule(small).calls == (1,)
    assert cheapest_schedule(small).cost_bytes == pytest.approx(708.5)
    # Call 0's history is smaller than a summary: no compaction there.
    assert schedule_cost(inputs, (0,)) is None
    # A need of 40 bytes in call 2's turn whose revision entered before call 1 ends: a re-read after a compaction
    # at call 1 (and only then); a weight of 2 per re-read byte makes that schedule cost 708.5 + 80.
    needs = SegmentInputs(**{**inputs.__dict__, "need_bytes": np.array([40]), "need_from": np.array([1]),
                             "need_call": np.array([2])})
    assert schedule_rereads(needs, (1,)) == 40 and schedule_rereads(needs, ()) == 0
    wide = SegmentInputs(**{**needs.__dict__, "max_bytes": 10_000})
    assert cheapest_schedule(wide, 2.0).calls == ()
    narrow = SegmentInputs(**{**needs.__dict__, "max_bytes": 400})
    assert (cheapest_schedule(narrow, 2.0).cost_bytes, cheapest_schedule(narrow, 2.0).reread_bytes) == \
        (pytest.approx(708.5), 40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 40), events=st.integers(8, 26), room=st.floats(0.0, 1.2),
       summary=st.sampled_from([200, 1_000, 4_000]), ttl=st.sampled_from([-1, 0, 300_000]),
       preset=st.sampled_from(["claude-code-like", "debug-loop"]))
def test_the_optimum_is_the_least_cost_of_every_schedule_replayed(seed, events, room, summary, ttl, preset):
    replay_settings = ReplaySettings(cache_ttl_ms=ttl)
    for stream, steps in arms(preset, seed, events):
        # A window from the one after a compaction to past the whole session's, so that some schedules overflow.
        wide = segment_inputs(stream, steps, 10**9, REF, summary, replay_settings)
        assume(len(wide.window) - wide.first <= 9)
        max_bytes = int(wide.after + room * (int(wide.window[-1]) - wide.after))
        inputs = segment_inputs(stream, steps, max_bytes, REF, summary, replay_settings)
        calls = range(inputs.first, len(inputs.window))
        costs = {}
        for k in range(len(calls) + 1):
            for schedule in combinations(calls, k):
                row = replayed(stream, steps, SchedulePolicy(schedule, summary), max_bytes, replay_settings)
                segment = schedule_cost(inputs, schedule)
                # The segment rule is the engine's, for every schedule: the same cost, the same feasibility.
                assert (segment is None) == (not row["feasible"])
                assert schedule_rereads(inputs, schedule) == row["reread_bytes"]
                if segment is not None:
                    assert segment / REF == pytest.approx(row["cost_tokens"], rel=1e-9)
                    costs[schedule] = (row["cost_tokens"], row["reread_tokens"])
        for weight in (0.0, 0.5, 3.0):
            best = cheapest_schedule(inputs, weight)
            if not costs:
                assert best.cost_bytes is None
                continue
            objective = {k: cost + weight * reread for k, (cost, reread) in costs.items()}
            least = min(objective.values())
            assert (best.cost_bytes + weight * best.reread_bytes) / REF == pytest.approx(least, rel=1e-9)
            assert objective[best.calls] == pytest.approx(least, rel=1e-9)
            assert best.reread_bytes / REF == pytest.approx(costs[best.calls][1], rel=1e-12)
        # At each schedule's own re-reads the bracket holds the least cost of the schedules with no more re-reads.
        for cost, reread in set(costs.values()):
            at = cheapest_at_rereads(inputs, round(reread * REF))
            truth = min(c for c, r in costs.values() if r <= reread * (1 + 1e-12))
            assert at.lower / REF <= truth * (1 + 1e-9) and at.upper / REF >= truth * (1 - 1e-9)
            if at.exact:
                assert at.upper / REF == pytest.approx(truth, rel=1e-9)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 40), window=st.sampled_from([150_000, 200_000]),
       trigger=st.sampled_from([None, 60_000, 100_000]), ttl=st.sampled_from([-1, 300_000]))
def test_the_optimum_is_never_above_claude_code_and_replays_at_its_cost(seed, window, trigger, ttl):
    replay_settings = ReplaySettings(cache_ttl_ms=ttl)
    max_bytes = int(window * REF)
    spec = "claude-code?recent_files=0&summary_tokens=4000" + ("" if trigger is None else f"&trigger_tokens={trigger}")
    for stream, steps in arms("claude-code-like", seed, 10_000):
        policy = replayed(stream, steps, make(spec), max_bytes, replay_settings)
        best, row = optimal_schedule(stream, steps, max_bytes, REF, 4_000, replay_settings, REF, read_tokens=25_000)
        if policy["feasible"]:
            assert row is not None and row["feasible"]
            assert row["cost_tokens"] <= policy["cost_tokens"] * (1 + 1e-12)
            inputs = segment_inputs(stream, steps, max_bytes, REF, 4_000, replay_settings, 25_000)
            at = cheapest_at_rereads(inputs, policy["reread_bytes"])
            assert at.lower / REF <= policy["cost_tokens"] * (1 + 1e-12)
            assert at.schedule.reread_bytes <= policy["reread_bytes"]
        if row is not None:
            assert row["cost_tokens"] == pytest.approx(best.cost_bytes / REF, rel=1e-9)
            again = replayed(stream, steps, make("schedule?at=" + ":".join(map(str, best.calls))
                                                             + "&summary_tokens=4000&read_tokens=25000"),
                             max_bytes, replay_settings)
            assert again["cost_tokens"] == row["cost_tokens"]


def test_the_golden_optimum_of_a_seeded_session():
    (stream, steps), = arms("claude-code-like", 5, 10_000)
    best, row = optimal_schedule(stream, steps, int(200_000 * REF), REF, 1_000, bytes_per_token=REF)
    assert best.calls == (1, 14, 20, 41, 65, 82, 99, 119, 131, 143, 149, 173, 188)
    assert row["cost_tokens"] == pytest.approx(1_037_437.875, rel=1e-9)


def test_the_schedule_policy_reads_its_calls():
    assert parse_calls("7:3:7") == (3, 7)
    assert parse_calls([4, 1]) == (1, 4)
    assert parse_calls(5) == (5,)
    with pytest.raises(StrategyInputError, match="at"):
        parse_calls("3:x")
    with pytest.raises(StrategyInputError, match="at"):
        parse_calls([-1])
    assert repr(make("schedule?at=2:9")) == "SchedulePolicy(at='2:9', summary_tokens=4000)"


def test_a_summary_of_no_tokens_is_refused_by_name():
    (stream, steps), = arms("claude-code-like", 5, 40)
    with pytest.raises(ScheduleError, match="summary_tokens"):
        segment_inputs(stream, steps, 10**9, REF, 0)


@pytest.mark.parametrize("preset, seed", [("claude-code-like", 3), ("refactor", 8)])
def test_a_sessions_schedules_replay_through_replay_session_at_their_cost(preset, seed):
    from ctxbench.sim.engine.replay import budget_for_tokens, replay_session

    session, = split_sessions(generate(preset, sessions=1, seed=seed))
    resolved = resolve_session(session)
    budget = budget_for_tokens(150_000, resolved.tokens)
    (arm, (best, row)), = session_schedules(resolved, budget, 4_000, read_tokens=25_000).items()
    assert best.calls and row["feasible"]
    spec = "schedule?at=" + ":".join(map(str, best.calls)) + "&read_tokens=25000"
    result = replay_session(resolved, spec, budget)
    assert result.row["cost_tokens"] == pytest.approx(row["cost_tokens"], rel=1e-12)
    assert result.row["reread_tokens"] == pytest.approx(row["reread_tokens"], rel=1e-12)
