"""Replay throughput per built-in strategy at 200K tokens, and the harness's own cost per event.

Goals (issue 4): >= 300,000 events/s per core with lru at 200K tokens on the default suite;
harness cost <= 3 µs per event (a strategy that evicts nothing, at an unbounded budget); 2
workers >= 1.7x one worker on the default suite. Replays are timed on the whole default suite
(on the compiled engine and its Python specification side by side) and on one long session. Run timed with
``pytest tests/benchmarks/test_bench_replay.py --benchmark-enable``; events/s are in
``extra_info``.
"""

from __future__ import annotations

import pytest

from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, replay_session, split_sessions
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.registry import builtin_names

UNBOUNDED = ContextBudget(2**62)


class EvictNothing:
    """The harness alone: a strategy that returns no ids."""

    def evict(self, state, budget):
        return []


@pytest.fixture(scope="module")
def session() -> SessionTrace:
    """One seeded `long` session (3,000 tool calls over a large repository)."""
    generate = pytest.importorskip("ctxbench.traces.generate").generate
    (st,) = split_sessions(generate("long", sessions=1, seed=4))
    return st


@pytest.fixture(scope="module")
def default_suite() -> list[SessionTrace]:
    """Every session of the default suite (70 sessions over 7 presets), as `ctxbench run` replays them."""
    from ctxbench.sim.engine.suite import build_suite
    return [st for name, df in build_suite("default").items() for st in split_sessions(df, name)]


def _replay_all(sessions, strategy, budget, compiled=None) -> list[dict]:
    return [replay_session(st, strategy, budget, compiled=compiled).row for st in sessions]


def _rate(benchmark, events: int) -> None:
    if benchmark.stats is not None:   # None when benchmarks are disabled (the default test run)
        benchmark.extra_info["events_per_s"] = round(events / benchmark.stats.stats.min)
        benchmark.extra_info["us_per_event"] = round(benchmark.stats.stats.min / events * 1e6, 3)


@pytest.mark.parametrize("spec", builtin_names())
def test_bench_replay_session(benchmark, session, spec):
    benchmark.group = "replay one long session at 200K tokens"
    result = benchmark(replay_session, session, spec, budget_for_tokens(200_000))
    row = result.row
    assert row["events"] == len(session)
    assert row["violations"] == 0
    assert row["hits"] + row["misses"] == row["accesses"] > 0
    assert row["evictions"] > 0 and row["peak_bytes"] <= row["budget_bytes"]
    _rate(benchmark, len(session))


def test_bench_harness_cost(benchmark, session):
    benchmark.group = "harness cost: evict nothing, unbounded budget"
    result = benchmark(replay_session, session, EvictNothing(), UNBOUNDED)
    row = result.row
    assert row["evictions"] == 0 and row["capacity_misses"] == 0 and row["violations"] == 0
    assert row["misses"] == row["compulsory_misses"] > 0
    assert row["evict_calls"] == row["turns"] == len(set(session.turns))
    _rate(benchmark, len(session))


@pytest.mark.parametrize("path", ["compiled", "specification"])
def test_bench_default_suite_lru(benchmark, default_suite, path):
    if path == "compiled" and not BUILT:
        pytest.skip("the compiled engine is not built")
    benchmark.group = "default suite"
    rows = benchmark(_replay_all, default_suite, "lru", budget_for_tokens(200_000), compiled=path == "compiled")
    events = sum(len(st) for st in default_suite)
    assert sum(r["events"] for r in rows) == events and len(rows) == len(default_suite) == 70
    assert sum(r["evictions"] for r in rows) > 0 and all(r["violations"] == 0 for r in rows)
    _rate(benchmark, events)


def test_bench_default_suite_harness(benchmark, default_suite):
    benchmark.group = "default suite"
    rows = benchmark(_replay_all, default_suite, EvictNothing(), UNBOUNDED)
    assert all(r["evictions"] == 0 and r["capacity_misses"] == 0 for r in rows)
    assert sum(r["evict_calls"] for r in rows) == sum(len(set(st.turns)) for st in default_suite)
    _rate(benchmark, sum(len(st) for st in default_suite))


@pytest.mark.parametrize("workers", [1, 2])
def test_bench_default_suite_workers(benchmark, default_suite, workers):
    benchmark.group = "default suite, every built-in strategy (ctxbench run's grid)"
    grid = benchmark.pedantic(run_grid, (default_suite, builtin_names()), {"workers": workers, "progress": False},
                              rounds=3, iterations=1)
    assert len(grid.results) == len(default_suite) * len(builtin_names())
    assert (grid.results["violations"] == 0).all() and grid.results["evictions"].sum() > 0
    _rate(benchmark, sum(len(st) for st in default_suite) * len(builtin_names()))
