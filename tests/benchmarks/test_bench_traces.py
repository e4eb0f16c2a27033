"""Throughput of trace generation and statistics.

Goals (issue 3): generation >= 500,000 events/s and ``stats`` >= 2,000,000 events/s. Run timed
with ``pytest tests/benchmarks/test_bench_traces.py --benchmark-enable``; events/s = the
``events`` extra info ÷ the mean time. Untimed (the default) each body runs once on a
smaller trace.
"""

from __future__ import annotations

import pytest

from traces.generate import generate
from traces.stats import stats


def _events(benchmark, timed: int, untimed: int) -> int:
    return timed if not benchmark.disabled else untimed


@pytest.mark.parametrize("preset", ["mixed", "long"])
def test_bench_generate(benchmark, preset):
    per_session = 250 if preset == "mixed" else 3000
    events = _events(benchmark, 1_000_000, 60_000)
    sessions = max(1, events // per_session)
    benchmark.group = "generate"
    benchmark.extra_info["events"] = sessions * per_session
    df = benchmark.pedantic(generate, args=(preset, sessions, 1), rounds=3, iterations=1)
    assert len(df) == sessions * per_session and df["session"].nunique() == sessions


def test_bench_generate_unchecked(benchmark):
    """The generator alone, without the schema validation of its output."""
    sessions = _events(benchmark, 1_000_000, 60_000) // 250
    benchmark.group = "generate"
    benchmark.extra_info["events"] = sessions * 250
    df = benchmark.pedantic(generate, args=("mixed", sessions, 1), kwargs={"check": False}, rounds=3, iterations=1)
    assert len(df) == sessions * 250


@pytest.mark.parametrize("preset", ["mixed", "long"])
def test_bench_stats(benchmark, preset):
    per_session = 250 if preset == "mixed" else 3000
    sessions = max(1, _events(benchmark, 2_000_000, 60_000) // per_session)
    trace = generate(preset, sessions=sessions, seed=2)
    benchmark.group = "stats"
    benchmark.extra_info["events"] = len(trace)
    result = benchmark.pedantic(stats, args=(trace,), rounds=3, iterations=1)
    assert result["overall"]["events"] == len(trace) and len(result["sessions"]) == sessions
    assert result["overall"]["reuse_distance"]["count"] > len(trace) // 4
