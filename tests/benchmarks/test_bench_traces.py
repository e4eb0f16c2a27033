"""Throughput of trace generation and statistics.

Goals (issues 3 and 17): generation >= 500,000 events/s and ``stats`` >= 2,000,000 events/s, every
event counted (with the conversation a tool call is about 2.7 events: its input, its result, and
the messages and overhead around them). Run timed with ``pytest tests/benchmarks/test_bench_traces.py
--benchmark-enable``; events/s = the ``events`` extra info ÷ the mean time. Untimed (the default)
each body runs once on a smaller trace.
"""

from __future__ import annotations

import pytest

from ctxbench.traces.generate import generate
from ctxbench.traces.stats import stats

TOOL_OPS = ("read", "edit", "write", "output")


def _tool_calls(benchmark, timed: int, untimed: int) -> int:
    return timed if not benchmark.disabled else untimed


@pytest.mark.parametrize("preset, conversation", [("mixed", True), ("long", True), ("mixed", False)])
def test_bench_generate(benchmark, preset, conversation):
    per_session = 250 if preset == "mixed" else 3000
    sessions = max(1, _tool_calls(benchmark, 400_000, 24_000) // per_session)
    benchmark.group = "generate"
    df = benchmark.pedantic(generate, args=(preset, sessions, 1), kwargs={"conversation": conversation},
                            rounds=3, iterations=1)
    benchmark.extra_info["events"] = len(df)
    benchmark.extra_info["tool_calls"] = sessions * per_session
    assert df["op"].isin(TOOL_OPS).sum() == sessions * per_session and df["session"].nunique() == sessions
    assert (len(df) > 2 * sessions * per_session) == conversation


def test_bench_generate_unchecked(benchmark):
    """The generator alone, without the schema validation of its output."""
    sessions = _tool_calls(benchmark, 400_000, 24_000) // 250
    benchmark.group = "generate"
    df = benchmark.pedantic(generate, args=("mixed", sessions, 1), kwargs={"check": False}, rounds=3, iterations=1)
    benchmark.extra_info["events"] = len(df)
    assert df["op"].isin(TOOL_OPS).sum() == sessions * 250


@pytest.mark.parametrize("preset", ["mixed", "long"])
def test_bench_stats(benchmark, preset):
    per_session = 250 if preset == "mixed" else 3000
    sessions = max(1, _tool_calls(benchmark, 800_000, 24_000) // per_session)
    trace = generate(preset, sessions=sessions, seed=2)
    benchmark.group = "stats"
    benchmark.extra_info["events"] = len(trace)
    result = benchmark.pedantic(stats, args=(trace,), rounds=3, iterations=1)
    assert result["overall"]["events"] == len(trace) and len(result["sessions"]) == sessions
    assert result["overall"]["reuse_distance"]["count"] > sessions * per_session // 4
    assert (result["window"]["sessions"]["tool_calls"] == per_session).all()
