"""Timing of ``evict`` for the built-ins on full, over-budget states of 10 to 10,000 entries.

Goals (issue 2): at 100 entries p99 <= 20 µs for lru and <= 40 µs for importance; from
1,000 to 10,000 entries the cost grows by no more than ~15x. Each case runs the compiled kernel
and the Python code side by side (`ctxbench check SPEC` gives p50/p99 of single calls). Run timed
with ``pytest tests/benchmarks --benchmark-enable``.
"""

from __future__ import annotations

import numpy as np
import pytest

from ctxbench.strategies import compiled
from ctxbench.strategies.check import over_budget_state
from ctxbench.strategies.contract import ContextState, remaining_fits
from ctxbench.strategies.registry import make

SIZES = [10, 100, 1_000, 10_000]
PATHS = ["compiled", "python"] if compiled.evict_order is not None else ["python"]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("spec", ["lru", "importance", "lru?max_entries=none", "importance?max_entries=none"])
def test_bench_evict(benchmark, spec, path, n):
    state, budget = over_budget_state(n, np.random.default_rng(n))
    built = make(spec)
    strategy = type(built)(built.max_entries, compiled=path == "compiled")
    benchmark.group = f"evict {spec}, n={n}"
    evicted = benchmark(strategy.evict, state, budget)
    cap = strategy.max_entries
    assert evicted and len(set(evicted)) == len(evicted)
    assert remaining_fits(state, budget, evicted, cap)
    # Minimal: putting back the last one evicted breaks the budget.
    assert not remaining_fits(state, budget, evicted[:-1], cap)


@pytest.mark.parametrize("n", [100, 10_000])
def test_bench_evict_lru_recency_sorted_state(benchmark, n):
    """The replay engine's fast path: a ContextState already ordered by recency, with its total."""
    state, budget = over_budget_state(n, np.random.default_rng(n))
    ordered = ContextState(sorted(state, key=lambda e: (e.last_accessed_at, e.id)), recency_sorted=True)
    strategy = make("lru?max_entries=none")
    benchmark.group = "evict lru, recency-sorted ContextState"
    evicted = benchmark(strategy.evict, ordered, budget)
    assert evicted == strategy.evict(state, budget)
