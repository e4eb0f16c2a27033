"""Eviction latency as a ratio to a reference strategy timed on the same states, in the same run."""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from ctxbench.strategies.isolation import StrategyEnded, loads_code, run_isolated
from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, replay_session
from ctxbench.strategies.calls import CallLimit, call_failure, call_limit_for
from ctxbench.strategies.contract import ContextBudget, ContextState
from ctxbench.sim.engine.settings import ReplaySettings, settings_of
from ctxbench.strategies.adapter import POLICY, Adapter, adapt
from ctxbench.strategies.registry import make

__all__ = ["REFERENCE", "LatencySettings", "LatencyRatio", "EndedNote", "latency_ratio", "time_interleaved",
           "measure_latency"]

REFERENCE = "lru"


@dataclass(frozen=True)
class LatencySettings:
    """How the latency microbenchmark samples: states per (strategy, budget), timed repeats."""

    states: int = 64
    repeats: int = 15
    sessions_per_trace: int = 1


@dataclass(frozen=True)
class LatencyRatio:
    """A strategy's ``evict`` time over the reference's on the same states, with its spread.

    ``ratio`` = sum over states of the fastest of the repeats, strategy over reference.
    ``spread`` = half the width of the 10th-90th percentile range of that ratio over repeats
    resampled with replacement (a seeded bootstrap), relative to ``ratio``: 0.02 means the
    figure moves about ±2% between runs.
    """

    ratio: float
    spread: float
    states: int
    repeats: int

    def to_dict(self) -> dict[str, float | int]:
        """JSON-ready form."""
        return {"ratio": round(self.ratio, 3), "spread": round(self.spread, 4), "states": self.states,
                "repeats": self.repeats}


def _min_ratio(t: np.ndarray, ref: np.ndarray) -> float:
    return float(t.min(axis=0).sum()) / float(ref.min(axis=0).sum())


def latency_ratio(times: Any, reference: Any, *, resamples: int = 200) -> LatencyRatio:
    """The ratio of two ``(repeats, states)`` timing arrays measured side by side.

    A busy machine only ever adds time, so each state counts its fastest repeat; the per-state
    minima are summed, so a strategy's slow states weigh what they cost.

    >>> r = latency_ratio([[20, 40], [20, 40], [90, 40]], [[10, 20], [10, 20], [10, 20]])
    >>> r.ratio, r.states, r.repeats
    (2.0, 2, 3)
    """
    t, ref = np.asarray(times, dtype=float), np.asarray(reference, dtype=float)
    if t.ndim != 2 or t.shape != ref.shape or t.size == 0:
        raise ValueError(f"timings must be two equal (repeats, states) arrays, got {t.shape} and {ref.shape}")
    if ref.min(axis=0).sum() <= 0:
        raise ValueError("the reference took no measurable time")
    ratio = _min_ratio(t, ref)
    rng = np.random.default_rng(0)
    boot = []
    for _ in range(resamples):
        pick = rng.integers(0, t.shape[0], size=t.shape[0])
        if ref[pick].min(axis=0).sum() > 0:
            boot.append(_min_ratio(t[pick], ref[pick]))
    low, high = np.percentile(boot, [10, 90]) if boot else (ratio, ratio)
    return LatencyRatio(ratio, float(high - low) / 2 / ratio, t.shape[1], t.shape[0])


@dataclass(frozen=True)
class _Recorded:
    """A state the strategy saw during a replay, and (stateful) a copy of it just before."""

    state: ContextState
    budget: ContextBudget
    snapshot: Any = None


class _Recording:
    """What an adapter's calls go through (`strategies.adapter.Adapter.through`) to keep the states of the chosen
    evict calls; a stateful strategy is copied just before each kept call."""

    def __init__(self, adapter: Adapter, keep: set[int]) -> None:
        self.adapter, self.keep, self.calls, self.recorded = adapter, keep, 0, []

    def __call__(self, evict, state, budget):
        if self.calls in self.keep:
            snapshot = copy.deepcopy(self.adapter.target) if self.adapter.stateful else None
            frozen = ContextState(state, total_bytes=state.total_bytes, recency_sorted=True)
            self.recorded.append(_Recorded(frozen, budget, snapshot))
        self.calls += 1
        return evict(state, budget)


def _record_states(adapter: Adapter, sessions: Sequence[SessionTrace], budget: ContextBudget, count: int,
                   settings: ReplaySettings) -> list[_Recorded]:
    """About ``count`` states, evenly spaced over the turns of ``sessions``, replayed with ``adapter``."""
    out: list[_Recorded] = []
    per_session = max(1, math.ceil(count / max(1, len(sessions))))
    for st in sessions:
        turns = sum(1 for _ in st.turn_slices())
        if not turns:
            continue
        keep = set(np.linspace(0, turns - 1, min(per_session, turns)).round().astype(int).tolist())
        recording = _Recording(adapter, keep)
        replay_session(st, adapter.through(recording), budget, settings.replace(strict=False))
        out.extend(recording.recorded)
    return out


def _time_pair(clock: Callable[[], int], first, second, state, budget) -> tuple[int, int]:
    """Clock ticks of ``first.evict`` then ``second.evict`` on the same state."""
    t0 = clock()
    first.evict(state, budget)
    t1 = clock()
    second.evict(state, budget)
    return t1 - t0, clock() - t1


def time_interleaved(recorded: Sequence, strategy, reference, repeats: int,
                     clock: Callable[[], int] = perf_counter_ns,
                     limit: CallLimit | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Time ``evict`` of ``strategy`` and ``reference`` on each recorded state, alternating who goes first.

    Returns two ``(repeats, states)`` arrays of clock ticks. A stateful strategy runs on a fresh
    copy of its recorded self for every call, so each call sees the history it had in the replay.
    The garbage collector is paused while timing; one untimed pass warms both up. ``limit``
    bounds each pair of calls (its timer is armed outside the timed calls, so it costs them nothing).
    """
    pair = _time_pair if limit is None else functools.partial(limit.call, _time_pair)
    n = len(recorded)
    copies = [[copy.deepcopy(r.snapshot) if r.snapshot is not None else strategy for r in recorded]
              for _ in range(repeats + 1)]
    t = np.zeros((repeats, n), dtype=np.int64)
    ref = np.zeros((repeats, n), dtype=np.int64)
    for i, r in enumerate(recorded):  # warm-up
        pair(clock, copies[repeats][i], reference, r.state, r.budget)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for rep in range(repeats):
            row = copies[rep]
            for i, r in enumerate(recorded):
                state, budget, s = r.state, r.budget, row[i]
                if (rep + i) & 1:
                    t[rep, i], ref[rep, i] = pair(clock, s, reference, state, budget)
                else:
                    ref[rep, i], t[rep, i] = pair(clock, reference, s, state, budget)
    finally:
        if enabled:
            gc.enable()
    return t, ref


def _latency_sessions(sessions: Sequence[SessionTrace], per_trace: int) -> list[SessionTrace]:
    """The first single-arm sessions of each trace."""
    taken: dict[str, int] = {}
    out = []
    for st in sessions:
        if st.arms is None and taken.get(st.trace, 0) < per_trace:
            taken[st.trace] = taken.get(st.trace, 0) + 1
            out.append(st)
    return out


class EndedNote(str):
    """The line of a (strategy, budget) whose strategy ended the process measuring its latency."""


def measure_latency(sessions: Sequence[SessionTrace], strategies: Sequence[str], budgets_tokens: Sequence[float],
                    latency: LatencySettings = LatencySettings(), settings: ReplaySettings | None = None, *,
                    clock: Callable[[], int] = perf_counter_ns) -> dict[tuple[str, float], LatencyRatio | str]:
    """Each strategy's ``evict`` time as a ratio to `REFERENCE` on the states of its own replay.

    For every (strategy, budget), the strategy replays a few single-arm sessions of the suite;
    ``latency.states`` of the states it was given are recorded; then it and the reference are
    timed on those same states, interleaved, ``latency.repeats`` times. The result, or a line
    saying why it could not be measured, per (strategy, budget). The reference itself is 1.0.
    ``settings`` (`sim.engine.settings.ReplaySettings`) give the replay's token ratios (``tokens``) and its
    per-call time limit (``evict_timeout_ms``, as in the replay, `sim.engine.turn_by_turn`); a strategy that runs
    past it, raises or leaves is not measured. Code ctxbench does not ship (`sim.analysis.grid.loads_code`)
    is measured in a process of its own: one that ends that process is not measured either, its
    line an `EndedNote`.
    """
    settings = settings_of(settings)
    chosen = _latency_sessions(sessions, latency.sessions_per_trace)
    reference = make(REFERENCE)
    out: dict[tuple[str, float], LatencyRatio | str] = {}
    for budget_tokens in budgets_tokens:
        budget = budget_for_tokens(budget_tokens, settings.tokens)
        for spec in strategies:
            key = (spec, budget_tokens)
            if spec == REFERENCE:
                out[key] = LatencyRatio(1.0, 0.0, 0, 0)
            elif not chosen:
                out[key] = "not measured: the suite has no single-arm session"
            elif loads_code(spec):
                try:
                    out[key] = run_isolated(spec, _measure, chosen, budget, latency, reference, clock, settings,
                                            pin=False)
                except StrategyEnded as ended:
                    out[key] = EndedNote(f"not measured: {ended.what}")
            else:
                out[key] = _measure(lambda arm, spec=spec: make(spec), chosen, budget, latency, reference, clock,
                                    settings)
    return out


def _measure(strategy_for_arm: Callable, sessions: Sequence[SessionTrace], budget: ContextBudget,
             latency: LatencySettings, reference, clock: Callable[[], int],
             settings: ReplaySettings) -> LatencyRatio | str:
    """One (strategy, budget)'s ratio to ``reference``, or why it could not be measured."""
    adapter = adapt(strategy_for_arm("main"))
    if adapter.kind == POLICY:
        return "not measured: a context policy has no evict (ctxbench check times its edit)"
    try:
        with contextlib.ExitStack() as stack:
            if isinstance(adapter.target, contextlib.AbstractContextManager):
                stack.enter_context(adapter.target)
            recorded = _record_states(adapter, sessions, budget, latency.states, settings)
            limit = call_limit_for(adapter.target, settings.evict_timeout_ms)
            if limit is not None:
                stack.enter_context(limit)
            times, ref = time_interleaved(recorded, adapter.target, reference, latency.repeats, clock, limit)
        return latency_ratio(times, ref)
    except BaseException as exc:  # a strategy that cannot be timed is reported (a real interrupt passed on)
        return f"not measured: {call_failure(exc)[1]}"
