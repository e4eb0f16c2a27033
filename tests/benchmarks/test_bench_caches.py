"""ctxbench's whole lru replay against the plain caches it is measured beside, and the offline Belady-Size bound
against the lru replay, each group timed side by side in one run (issue 25: ctxbench at >= 2x a cachetools loop and
>= 1x libcachesim's Python binding on `ctxbench bench`'s trace; Belady-Size at most 3x the lru replay at 1M turns).

Run timed with ``pytest tests/benchmarks/test_bench_caches.py --benchmark-enable`` (or ``make bench``); the groups
"lru on the bench trace" and "Belady-Size and lru at 1M turns" hold the figures to compare, events/s in
``extra_info``. No timed asserts. With benchmarks disabled (the default test run) each body runs once, on a trace a
hundred times shorter.
"""

from __future__ import annotations

import math
from importlib.util import find_spec

import numpy as np
import pytest

from ctxbench.sim.analysis.bracket import belady_size_replay
from ctxbench.sim.cli.commands.bench import (LRU_SPEC, libcachesim_requests, run_cachetools, run_ctxbench, run_libcachesim,
                                    zipf_read_session)
from ctxbench.sim.engine.replay import budget_for_tokens, replay_session
from ctxbench.strategies.contract import ContextBudget

MAX_BYTES = budget_for_tokens(200_000).max_bytes


def _events(benchmark, timed: int) -> int:
    return timed if benchmark.enabled else timed // 100


def _rate(benchmark, events: int) -> None:
    if benchmark.stats is not None:
        benchmark.extra_info["events_per_s"] = round(events / benchmark.stats.stats.min)


@pytest.fixture(scope="module")
def traces():
    made = {}

    def trace(events: int):
        if events not in made:
            made[events] = zipf_read_session(events, 4_000, MAX_BYTES, np.random.default_rng(0))
        return made[events]
    return trace


@pytest.mark.parametrize("runner", ["ctxbench", "cachetools", "libcachesim"])
def test_bench_lru_against_caches(benchmark, traces, runner):
    benchmark.group = "lru on the bench trace (100,000 Zipf reads)"
    st = traces(_events(benchmark, 100_000))
    if runner != "ctxbench" and find_spec(runner) is None:
        pytest.skip(f"{runner} is not installed")
    if runner == "ctxbench":
        misses = benchmark(run_ctxbench, st, MAX_BYTES)
    elif runner == "cachetools":
        misses = benchmark(run_cachetools, st.paths, st.sizes.tolist(), MAX_BYTES)
    else:
        misses = benchmark(run_libcachesim, libcachesim_requests(st), MAX_BYTES)
    assert misses == run_ctxbench(st, MAX_BYTES) and 0 < misses[0] < len(st)
    _rate(benchmark, len(st))


@pytest.mark.parametrize("replay", ["lru", "belady-size"])
def test_bench_belady_size_against_lru(benchmark, traces, replay):
    benchmark.group = "Belady-Size and lru at 1M turns of the bench trace"
    st = traces(_events(benchmark, 1_000_000))
    budget = ContextBudget(MAX_BYTES)
    if replay == "lru":
        result = benchmark.pedantic(replay_session, (st, LRU_SPEC, budget), rounds=3, iterations=1)
    else:
        result = benchmark.pedantic(belady_size_replay, (st, budget), rounds=3, iterations=1)
    lru = replay_session(st, LRU_SPEC, budget).row
    assert result.row["turns"] == len(st) and result.row["violations"] == 0
    assert result.row["misses"] <= lru["misses"] and not math.isnan(result.row["miss_rate"])
    _rate(benchmark, len(st))
