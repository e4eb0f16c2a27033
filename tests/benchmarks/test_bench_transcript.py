"""Transcript replay throughput under each context policy (goal, issue 18: >= 300,000 events/s on one core).

One seeded ``long`` session with the whole window (an overhead, a message per turn, each tool call's input:
8,653 events over 2,652 calls, `whole_window.conversational`) replayed at 200K tokens through
`replay_session`, on the compiled transcript model and on its Python specification. Run timed with
``pytest tests/benchmarks/test_bench_transcript.py --benchmark-enable``; events/s are in ``extra_info``.
No timed asserts.
"""

from __future__ import annotations

import pytest

from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.engine.replay import budget_for_tokens, replay_session, resolve_session, split_sessions
from ctxbench.strategies.registry import builtin_names
from whole_window import conversational

PATHS = [True, False] if BUILT else [False]


@pytest.fixture(scope="module")
def session():
    generate = pytest.importorskip("ctxbench.traces.generate").generate
    (st,) = split_sessions(conversational(generate("long", sessions=1, seed=4)))
    return st


def _rate(benchmark, events: int) -> None:
    if benchmark.stats is not None:   # None when benchmarks are disabled (the default test run)
        benchmark.extra_info["events_per_s"] = round(events / benchmark.stats.stats.min)
        benchmark.extra_info["us_per_event"] = round(benchmark.stats.stats.min / events * 1e6, 3)


@pytest.mark.parametrize("compiled", PATHS, ids=lambda c: "compiled" if c else "specification")
@pytest.mark.parametrize("spec", builtin_names(kind="policy") + ["lru+compaction"])
def test_bench_transcript_replay(benchmark, session, spec, compiled):
    benchmark.group = "replay a long whole-window session at 200K tokens"
    resolved = resolve_session(session, compiled=compiled)
    budget = budget_for_tokens(200_000, resolved.tokens)
    result = benchmark(replay_session, resolved, spec, budget, compiled=compiled)
    assert result.row["events"] == len(session) and result.row["turns"] > 2_000
    _rate(benchmark, len(session))
