"""The exact offline optimum: brute force on small traces, achievability through the engine, the bracket's order."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from ctxbench.sim.analysis.bracket import belady_size_replay, pfoo_lower_bound, session_futures
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.analysis.labels import BRACKET_EXACT
from ctxbench.sim.analysis.optimum import (OptimumLimits, ScheduleStrategy, compacted_pinned, optimum_result, solve_arm)
from ctxbench.sim.engine.replay import (budget_for_tokens, compaction_rule, replay_session, resolve_session, split_sessions)
from ctxbench.sim.engine.suite import SUITES, build_suite
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.registry import CompactedStrategy, make


def _session(ops, paths, sizes, turns):
    frame = pd.DataFrame({"session": "s", "turn": turns, "ts_ms": range(len(ops)), "op": ops, "path": paths,
                          "size_bytes": sizes})
    return split_sessions(frame, "t")[0]


@hs.composite
def small_sessions(draw):
    """A session of a few files, outputs and pinned messages over a few turns, and a budget."""
    n = draw(hs.integers(2, 14))
    ops = draw(hs.lists(hs.sampled_from(["read", "read", "read", "edit", "output", "message"]),
                        min_size=n, max_size=n))
    files = draw(hs.lists(hs.integers(0, 4), min_size=n, max_size=n))
    paths = [f"m{i}" if op == "message" else f"tool://x/{i}" if op == "output" else f"f{files[i]}"
             for i, op in enumerate(ops)]
    sizes = draw(hs.lists(hs.integers(1, 60), min_size=n, max_size=n))
    turns = sorted(draw(hs.lists(hs.integers(0, 6), min_size=n, max_size=n)))
    max_bytes = draw(hs.integers(1, 160))
    max_entries = draw(hs.sampled_from([None, None, 0, 1, 2, 3]))
    return _session(ops, paths, sizes, turns), ContextBudget(max_bytes=max_bytes, max_entries=max_entries)


def _brute_force(f, budget: ContextBudget, objective: str) -> int:
    """The least objective over every keep/drop choice of the intervals that fits every turn end."""
    capacity = (np.maximum(budget.max_bytes - np.asarray(f.pinned, np.int64), 0) if f.pinned
                else np.full(f.turns, budget.max_bytes, np.int64))
    best = None
    for mask in itertools.product([False, True], repeat=len(f.starts)):
        load = np.zeros(f.turns, np.int64)
        count = np.zeros(f.turns, np.int64)
        for i, keep in enumerate(mask):
            if keep:
                load[f.starts[i]:f.stops[i]] += f.sizes[i]
                count[f.starts[i]:f.stops[i]] += 1
        if (load > capacity).any() or (budget.max_entries is not None and (count > budget.max_entries).any()):
            continue
        value = sum((f.sizes[i] if objective == "bytes" else 1) for i, keep in enumerate(mask) if not keep)
        best = value if best is None else min(best, value)
    return best


def _schedule_replay(resolved, futures, solutions, budget, objective, wrap=None):
    def strategy_for_arm(arm):
        schedule = ScheduleStrategy.from_solution(futures[arm], solutions[arm][objective].kept)
        return schedule if wrap is None else wrap(schedule)
    return replay_session(resolved, None, budget, strategy_name="schedule", bytes_per_token=1.0,
                          strategy_for_arm=strategy_for_arm)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_sessions())
def test_the_solver_equals_brute_force_and_its_schedule_achieves_it(case):
    st, budget = case
    resolved = resolve_session(st, tokens=1.0)
    futures = session_futures(resolved)
    f = futures["main"]
    row, solutions = optimum_result(resolved, budget, bytes_per_token=1.0, futures=futures)
    for objective, column in (("bytes", "reread_bytes"), ("misses", "capacity_misses")):
        solution = solutions["main"][objective]
        assert solution.exact
        assert solution.value == _brute_force(f, budget, objective)
        replayed = _schedule_replay(resolved, futures, solutions, budget, objective)
        assert replayed.row["violations"] == 0
        assert replayed.row[column] == solution.value == row[column]
    assert row["opt_exact"] and row["reread_bytes_lower"] == row["reread_bytes"]


@settings(max_examples=150, deadline=None)
@given(small_sessions())
def test_the_relaxation_bounds_the_optimum_and_its_rounding_is_feasible(case):
    st, budget = case
    resolved = resolve_session(st, tokens=1.0)
    f = session_futures(resolved)["main"]
    exact = solve_arm(f, budget)
    relaxed = solve_arm(f, budget, limits=OptimumLimits(max_intervals=0))
    assert relaxed.method in ("lp", "trivial")
    assert relaxed.bound <= exact.value <= relaxed.value
    assert pfoo_lower_bound(st, budget, bytes_per_token=1.0)["reread_bytes"] <= relaxed.bound


def test_a_hand_worked_session():
    # a, b, a, b of 60 bytes, one a turn, 100 bytes: keep a (60 re-read) or b (60); one miss either way.
    st = _session(["read"] * 4, ["a", "b", "a", "b"], [60] * 4, [0, 1, 2, 3])
    resolved = resolve_session(st, tokens=1.0)
    row, _ = optimum_result(resolved, ContextBudget(max_bytes=100), bytes_per_token=1.0)
    assert (row["reread_bytes"], row["capacity_misses"], row["opt_exact"]) == (60, 1, True)
    # A pinned message of 50 bytes at turn 1 leaves 50: neither interval fits through it.
    st = _session(["read", "message", "read", "read", "read"], ["a", "m", "b", "a", "b"], [60, 50, 60, 60, 60],
                  [0, 1, 1, 2, 3])
    row, _ = optimum_result(resolve_session(st, tokens=1.0), ContextBudget(max_bytes=100), bytes_per_token=1.0)
    assert (row["reread_bytes"], row["capacity_misses"]) == (120, 2)
    # One entry at most: the larger interval is kept for bytes, either one for misses.
    st = _session(["read"] * 4, ["a", "b", "a", "b"], [30, 20, 30, 20], [0, 1, 2, 3])
    row, _ = optimum_result(resolve_session(st, tokens=1.0), ContextBudget(max_bytes=1000, max_entries=1),
                            bytes_per_token=1.0)
    assert (row["reread_bytes"], row["capacity_misses"]) == (20, 1)


def test_compacted_pinned_is_what_the_strategy_is_called_beside():
    trace = build_suite(SUITES["default"])["claude-code-like"]
    st = split_sessions(trace, "claude-code-like")[0]
    resolved = resolve_session(st)
    budget = budget_for_tokens(100_000, None)
    spec = "lru+compaction"
    result = replay_session(resolved, spec, budget, strategy_name=spec)
    instance = make(spec)
    rule = compaction_rule(instance.policy, resolved, "main", budget, 2.07)
    pinned = compacted_pinned(resolved.arms["main"], rule)
    assert result.row["compactions"] > 0
    log = result.log.columns
    # Where a summarization call was made, the strategy was called before compaction: beside the pinned content
    # then, which with the entries it kept is that call's prompt.
    called = np.where(log["summary_calls"] > 0, log["summary_prompt_bytes"] - log["occupancy_bytes"],
                      log["pinned_bytes"])
    assert (log["summary_calls"] > 0).any() and (called != log["pinned_bytes"]).any()
    assert pinned == called.tolist()


def test_a_compacted_context_replays_its_optimum():
    trace = build_suite(SUITES["default"])["claude-code-like"]
    st = split_sessions(trace, "claude-code-like")[1]
    resolved = resolve_session(st)
    budget = budget_for_tokens(100_000, None)
    instance = make("lru+compaction")
    futures = session_futures(resolved)
    row, solutions = optimum_result(resolved, budget, futures=futures,
                                    compaction_for_arm=lambda arm: compaction_rule(instance.policy, resolved, arm,
                                                                                  budget, 2.07))
    compacted = {arm: f.__class__(**{**vars(f), "pinned": compacted_pinned(resolved.arms[arm], compaction_rule(
        instance.policy, resolved, arm, budget, 2.07))}) for arm, f in futures.items()}
    replayed = replay_session(resolved, None, budget, strategy_name="schedule", strategy_for_arm=lambda arm:
                              CompactedStrategy(ScheduleStrategy.from_solution(compacted[arm],
                                                                               solutions[arm]["bytes"].kept),
                                                instance.policy))
    assert row["opt_exact"]
    assert replayed.row["violations"] == 0 and replayed.row["reread_bytes"] == row["reread_bytes"]
    assert replay_session(resolved, "lru+compaction", budget).row["reread_bytes"] >= row["reread_bytes"]


def test_several_arms_sum_their_optima_and_replay_them():
    trace = build_suite(SUITES["multi-arm"])["parallel-hubs"]
    st = split_sessions(trace, "parallel-hubs")[0]
    resolved = resolve_session(st)
    budget = budget_for_tokens(25_000, None)
    futures = session_futures(resolved)
    row, solutions = optimum_result(resolved, budget, futures=futures)
    assert len(solutions) == 3 and row["arms"] == 3
    assert row["reread_bytes"] == sum(s["bytes"].value for s in solutions.values())
    replayed = replay_session(resolved, None, budget, strategy_name="schedule", strategy_for_arm=lambda arm:
                              ScheduleStrategy.from_solution(futures[arm], solutions[arm]["bytes"].kept))
    assert replayed.row["reread_bytes"] == row["reread_bytes"]


def test_the_grid_gives_each_managed_row_its_optimum():
    trace = build_suite(SUITES["quick"])["mixed"]
    grid = run_grid(trace, ["lru", "lru+compaction", "claude-code"], [25_000], bracket=True, workers=1,
                    keep_turns=False).results
    exact = grid[grid["strategy"] == BRACKET_EXACT]
    assert len(exact) == grid["session"].nunique() and exact["opt_exact"].all()
    lru = grid[grid["strategy"] == "lru"].set_index("session")
    assert (lru["opt_reread_tokens"] == exact.set_index("session")["reread_tokens"]).all()
    assert (lru["reread_tokens"] >= lru["opt_reread_tokens"]).all()
    compacted = grid[grid["strategy"] == "lru+compaction"]
    assert compacted["opt_reread_tokens"].notna().all()
    assert (compacted["reread_tokens"] >= compacted["opt_reread_tokens"]).all()
    assert grid.loc[grid["strategy"] == "claude-code", "opt_reread_tokens"].isna().all()


@pytest.mark.slow
@pytest.mark.parametrize("suite", sorted(SUITES))
def test_every_suite_keeps_the_bracket_in_order(suite):
    """PFOO-L <= FOO-L <= optimum <= Belady-Size on every session and budget, and no online strategy below the optimum."""
    s = SUITES[suite]
    strategies = ["lru", "importance", "lfu", "size", "segmented", "outputs-first", "gdsf", "fifo", "arc", "sieve",
                  "s3fifo"]
    for name, trace in build_suite(s).items():
        for st in split_sessions(trace, name):
            resolved = resolve_session(st)
            futures = session_futures(resolved)
            for tokens in s.budgets_tokens:
                budget = budget_for_tokens(tokens, None)
                row, _ = optimum_result(resolved, budget, futures=futures)
                assert row["opt_exact"], (name, st.session, tokens)
                lp = sum(solve_arm(f, budget, limits=OptimumLimits(max_intervals=0)).bound for f in futures.values())
                pfoo = pfoo_lower_bound(st, budget, futures=futures)["reread_bytes"]
                belady = belady_size_replay(resolved, budget, futures=futures).row["reread_bytes"]
                assert pfoo <= lp <= row["reread_bytes"] <= belady, (name, st.session, tokens)
                for spec in strategies:
                    got = replay_session(resolved, spec, budget).row["reread_bytes"]
                    assert got >= row["reread_bytes"], (spec, name, st.session, tokens)


def test_above_the_limit_the_optimum_is_a_bracket_never_exact():
    # a, b, a, b of 60 bytes in 100: the relaxation keeps 100 of the 120 bytes (a bound of 20 re-read);
    # rounded down it keeps nothing whole (120), and Belady-Size's 60 is the better schedule.
    frame = pd.DataFrame({"session": "s", "turn": [0, 1, 2, 3], "ts_ms": [0, 1, 2, 3], "op": "read",
                          "path": ["a", "b", "a", "b"], "size_bytes": 60})
    grid = run_grid(frame, ["lru"], [100], bytes_per_token=1.0, bracket=True, workers=1,
                    optimum=OptimumLimits(max_intervals=0)).results
    exact = grid[grid["strategy"] == BRACKET_EXACT].iloc[0]
    assert (exact["reread_bytes"], exact["reread_bytes_lower"], exact["opt_exact"]) == (60, 20, False)
    assert exact["opt_method"] == "lp"
    lru = grid[grid["strategy"] == "lru"].iloc[0]
    assert (lru["opt_reread_tokens"], lru["opt_lower_tokens"], lru["opt_exact"]) == (60.0, 20.0, False)
    from ctxbench.sim.analysis.ranking import ranked
    from ctxbench.sim.presentation.summary_text import describe_gap
    row = ranked(grid, 100).set_index("strategy").loc["lru"]
    assert describe_gap(row) == "2.00–6.00× optimal (bracket)"


@pytest.mark.parametrize("args, message", [(["--opt-time-limit", "0"], "--opt-time-limit"),
                                           (["--opt-time-limit", "nan"], "--opt-time-limit"),
                                           (["--opt-max-intervals", "-1"], "--opt-max-intervals")])
def test_run_refuses_absurd_solver_limits(args, message, tmp_path, capsys):
    from ctxbench.sim.cli import main
    assert main(["run", "--preset", "mixed", "--sessions", "1", "--out", str(tmp_path / "r"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
