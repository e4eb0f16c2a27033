"""What the per-call time limit (``--evict-timeout-ms``) costs: the same work with it off and on.

Two groups, each timed with the limit off and on side by side: one ``evict`` call of lru on a
100-entry state (the limit's cost per call, about two ``setitimer`` system calls), and a replay
of one long session with lru at 200K tokens (its cost per turn within a whole replay). Run timed
with ``pytest tests/benchmarks/test_bench_call_limit.py --benchmark-enable``.
"""

from __future__ import annotations

import numpy as np
import pytest

from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, replay_session, split_sessions
from ctxbench.strategies.calls import CallLimit
from ctxbench.strategies.check import over_budget_state
from ctxbench.strategies.registry import make

LIMIT_MS = 1_000
MODES = {"off": None, "on": LIMIT_MS}


@pytest.fixture(scope="module")
def session() -> SessionTrace:
    """One seeded `long` session (3,000 tool calls over a large repository)."""
    generate = pytest.importorskip("ctxbench.traces.generate").generate
    (st,) = split_sessions(generate("long", sessions=1, seed=4))
    return st


@pytest.mark.parametrize("mode", MODES)
def test_bench_one_evict_call(benchmark, mode):
    benchmark.group = "one lru evict call on 100 entries, time limit off / on"
    state, budget = over_budget_state(100, np.random.default_rng(0))
    evict = make("lru").evict
    if MODES[mode] is None:
        ids = benchmark(evict, state, budget)
    else:
        with CallLimit(MODES[mode]) as limit:   # the handler installed once, as for a replay
            ids = benchmark(limit.call, evict, state, budget)
    assert ids == evict(state, budget) and ids


@pytest.mark.parametrize("mode", MODES)
def test_bench_replay_with_time_limit(benchmark, session, mode):
    benchmark.group = "replay one long session with lru at 200K tokens, time limit off / on"
    result = benchmark(replay_session, session, "lru", budget_for_tokens(200_000), evict_timeout_ms=MODES[mode])
    reference = replay_session(session, "lru", budget_for_tokens(200_000))
    assert result.log.digest() == reference.log.digest() and result.row["violations"] == 0
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_turn"] = round(benchmark.stats.stats.min / len(result.log) * 1e6, 3)
