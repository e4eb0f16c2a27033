"""The exact offline optimum of the managed model: an integer program over each arm's reuse intervals."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from sim.analysis.bracket import ArmFuture, bound_metrics, session_futures
from sim.analysis.labels import BRACKET_EXACT
from sim.engine.claims import ClaimConfig
from sim.engine.measures import METRIC_COLUMNS
from sim.engine.replay import ResolvedSession, check_bytes_per_token
from sim.engine.rules import Compaction, Resolved
from strategies.contract import ContextBudget, ContextEntry
from strategies.stateful import StatefulContextStrategy
from traces.tokens import TokenRatios

__all__ = ["OptimumLimits", "ArmOptimum", "solve_arm", "compacted_pinned", "ScheduleStrategy", "OBJECTIVES",
           "optimum_result", "optimum_columns"]

OBJECTIVES = ("bytes", "misses")   # fewest re-read bytes; fewest capacity misses


@dataclass(frozen=True)
class OptimumLimits:
    """When the exact program is attempted: at most ``max_intervals`` undecided intervals in an arm
    (above it only the LP relaxation is solved), and ``time_limit_s`` per program (HiGHS stops there
    and keeps its best schedule and its proven bound)."""

    max_intervals: int = 50_000
    time_limit_s: float = 20.0

    def __post_init__(self) -> None:
        if isinstance(self.max_intervals, bool) or not isinstance(self.max_intervals, int) or self.max_intervals < 0:
            raise ValueError(f"max_intervals must be an integer >= 0, got {self.max_intervals!r}")
        if not (isinstance(self.time_limit_s, (int, float)) and not isinstance(self.time_limit_s, bool)
                and 0 < self.time_limit_s <= 86_400):
            raise ValueError(f"time_limit_s must be a number of seconds in (0, 86400], got {self.time_limit_s!r}")


@dataclass
class ArmOptimum:
    """One arm's answer for one objective: a schedule that achieves ``value`` and a proven ``bound``.

    ``kept[i]`` says whether reuse interval ``i`` of the `ArmFuture` is kept through (a hit).
    ``value`` is the objective of that schedule (re-read bytes or capacity misses), ``bound`` a
    proven lower bound on every schedule's; ``exact`` when they are equal. ``method``: ``trivial``
    (no choice was left once forced intervals were fixed), ``exact`` (the integer program, solved to
    optimality), ``incumbent`` (the program stopped at its time limit), ``lp`` (the relaxation only,
    rounded down to the intervals it keeps whole).
    """

    kept: np.ndarray
    value: int
    bound: int
    method: str
    undecided: int
    solve_s: float

    @property
    def exact(self) -> bool:
        return self.value == self.bound


def _capacities(f: ArmFuture, budget: ContextBudget) -> np.ndarray:
    """What the strategy's entries may hold at each turn end: the window less what is pinned, at least 0."""
    if f.pinned:
        return np.maximum(budget.max_bytes - np.asarray(f.pinned, np.int64), 0)
    return np.full(f.turns, budget.max_bytes, np.int64)


def _range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(values[lo[i]:hi[i]])`` for each ``i`` (every range non-empty), by a sparse table: O((T + n) log T)."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append(np.minimum(prev[:-width], prev[width:]))
        width *= 2
    length = hi - lo
    level = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(len(lo), values.dtype)
    for k in np.unique(level):
        at = level == k
        row = table[k]
        out[at] = np.minimum(row[lo[at]], row[hi[at] - (1 << k)])
    return out


def _per_turn(turns: int, starts: np.ndarray, stops: np.ndarray, amounts: np.ndarray) -> np.ndarray:
    """The sum of ``amounts`` of the intervals spanning each turn end."""
    diff = np.zeros(turns + 1, np.int64)
    np.add.at(diff, starts, amounts)
    np.add.at(diff, stops, -amounts)
    return np.cumsum(diff)[:-1]


def _fits(kept: np.ndarray, starts, stops, sizes, capacity: np.ndarray, max_entries: int | None) -> bool:
    """Whether keeping the ``kept`` intervals respects every turn end's capacity (and entry cap), exactly."""
    turns = len(capacity)
    if not kept.any():
        return True
    load = _per_turn(turns, starts[kept], stops[kept], sizes[kept])
    if (load > capacity).any():
        return False
    if max_entries is not None:
        count = _per_turn(turns, starts[kept], stops[kept], np.ones(int(kept.sum()), np.int64))
        if (count > max_entries).any():
            return False
    return True


def solve_arm(f: ArmFuture, budget: ContextBudget, objective: str = "bytes",
              limits: OptimumLimits = OptimumLimits()) -> ArmOptimum:
    """The fewest re-read bytes (``objective="bytes"``) or capacity misses (``"misses"``) of any schedule.

    A reuse interval ``i`` (turns ``s_i < e_i``, ``size_i`` bytes) hits only if its entry is kept
    through the turn ends ``s_i .. e_i - 1``; at turn end ``k`` the kept entries hold at most the
    window less what is pinned there, and number at most ``max_entries``. Nothing else constrains a
    schedule (entries needed within a turn, outputs and writes may all leave at its end), so the
    optimum keeps the set of intervals of greatest weight (``size_i``, or 1 for misses) that fits
    every turn end: a multidimensional knapsack over interval rows, solved as an integer program by
    HiGHS (Huangfu and Hall, "Parallelizing the dual revised simplex method", Math. Prog. Comp. 2018).

    The program is written as a flow along the turn ends (FOO: Berger, Beckmann and Harchol-Balter,
    SIGMETRICS 2018): one variable per interval, one per stretch of turn ends over which the set of
    spanning intervals is constant (bounded by the stretch's least capacity), and one balance row per
    breakpoint, so it has O(intervals) non-zeros; its LP relaxation is FOO-L. Before solving, an
    interval larger than the least capacity over its span is dropped and one whose span never runs
    short whatever is kept is kept; the rest are ``undecided``. Above ``limits.max_intervals``
    undecided intervals only the relaxation is solved. Every schedule returned is checked against the
    capacities in exact integers.

    Reads of a, b, a, b (60 bytes each), one per turn, in 100 bytes: one of the two intervals misses.

    >>> f = ArmFuture("main", turns=4, starts=[0, 1], stops=[2, 3], sizes=[60, 60])
    >>> r = solve_arm(f, ContextBudget(max_bytes=100))
    >>> r.value, r.bound, r.exact, r.kept.tolist()
    (60, 60, True, [True, False])
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    started = time.perf_counter()
    n = len(f.starts)
    starts = np.asarray(f.starts, np.int64)
    stops = np.asarray(f.stops, np.int64)
    sizes = np.asarray(f.sizes, np.int64)
    weights = sizes if objective == "bytes" else np.ones(n, np.int64)
    kept = np.zeros(n, bool)
    if n == 0:
        return ArmOptimum(kept, 0, 0, "trivial", 0, time.perf_counter() - started)
    capacity = _capacities(f, budget)
    max_entries = budget.max_entries
    if max_entries == 0:
        possible = np.zeros(n, bool)
    else:
        possible = sizes <= _range_min(capacity, starts, stops)
    # Kept for sure: every turn end of the span holds all the intervals that can be kept there.
    load = _per_turn(f.turns, starts[possible], stops[possible], sizes[possible])
    short = capacity - load
    if max_entries is not None:
        count = _per_turn(f.turns, starts[possible], stops[possible], np.ones(int(possible.sum()), np.int64))
        short = np.minimum(short, max_entries - count)
    sure = possible & (_range_min(short, starts, stops) >= 0)
    kept[sure] = True
    undecided = np.flatnonzero(possible & ~sure)
    total = int(weights.sum())
    if not len(undecided):
        value = total - int(weights[kept].sum())
        return ArmOptimum(kept, value, value, "trivial", 0, time.perf_counter() - started)
    # What the undecided intervals may use: the capacity less what the sure ones take.
    room = capacity - _per_turn(f.turns, starts[sure], stops[sure], sizes[sure])
    entry_room = None
    if max_entries is not None:
        entry_room = max_entries - _per_turn(f.turns, starts[sure], stops[sure], np.ones(int(sure.sum()), np.int64))
    integer = len(undecided) <= limits.max_intervals
    chosen, upper_kept = _solve_program(starts[undecided], stops[undecided], sizes[undecided], weights[undecided],
                                        room, entry_room, integer, limits.time_limit_s)
    trial = kept.copy()
    trial[undecided[chosen]] = True
    if _fits(trial, starts, stops, sizes, capacity, max_entries):
        kept = trial
    fixed = int(weights[sure].sum())
    value = total - int(weights[kept].sum())
    bound = max(0, total - fixed - upper_kept)
    bound = min(bound, value)
    if not integer:
        method = "lp"
    else:
        method = "exact" if bound == value else "incumbent"
    return ArmOptimum(kept, value, bound, method, len(undecided), time.perf_counter() - started)


def _solve_program(starts, stops, sizes, weights, room, entry_room, integer: bool,
                   time_limit_s: float) -> tuple[np.ndarray, int]:
    """Keep the intervals of most weight within ``room`` (and ``entry_room``): the chosen mask and a
    proven upper bound on the weight any choice keeps."""
    from scipy import sparse
    from scipy.optimize import Bounds, LinearConstraint, milp

    n = len(starts)
    points, index = np.unique(np.concatenate([starts, stops]), return_inverse=True)
    first, last = index[:n], index[n:]
    segments = len(points) - 1
    seg_room = np.minimum.reduceat(room[:points[-1]], points[:-1])
    rows_per_flow = len(points)
    blocks = 2 if entry_room is not None else 1
    # Interval i: +size at its first breakpoint's row, -size at its last's (and +1/-1 in the entry flow).
    interval_rows = [first, last] + ([rows_per_flow + first, rows_per_flow + last] if blocks == 2 else [])
    ones = np.ones(n)
    interval_vals = [sizes.astype(float), -sizes.astype(float)] + ([ones, -ones] if blocks == 2 else [])
    # Flow along segment j leaves breakpoint j and enters breakpoint j + 1.
    seg = np.arange(segments)
    flow_rows = [np.stack([b * rows_per_flow + seg, b * rows_per_flow + seg + 1], axis=1) for b in range(blocks)]
    col_rows = np.concatenate([np.stack(interval_rows, axis=1).ravel()] + [r.ravel() for r in flow_rows])
    col_vals = np.concatenate([np.stack(interval_vals, axis=1).ravel(), np.tile([-1.0, 1.0], segments * blocks)])
    col_start = np.r_[np.arange(n + 1) * 2 * blocks, 2 * blocks * n + 2 * np.arange(1, segments * blocks + 1)]
    upper = [np.ones(n), seg_room.astype(float)]
    if entry_room is not None:
        upper.append(np.minimum.reduceat(entry_room[:points[-1]], points[:-1]).astype(float))
    upper = np.concatenate(upper)
    num_col = len(upper)
    matrix = sparse.csc_array((col_vals, col_rows, col_start), shape=(blocks * rows_per_flow, num_col))
    cost = -np.concatenate([weights.astype(float), np.zeros(num_col - n)])   # milp minimises
    with _solver_output_discarded():
        result = milp(cost, integrality=np.r_[np.full(n, int(integer)), np.zeros(num_col - n)],
                      bounds=Bounds(np.zeros(num_col), np.maximum(upper, 0.0)),
                      constraints=LinearConstraint(matrix, 0.0, 0.0),
                      options={"time_limit": float(time_limit_s), "mip_rel_gap": 0.0, "presolve": True})
    solution = result.x[:n] if result.x is not None else np.zeros(n)
    chosen = solution > 0.5 if integer else solution > 1 - 1e-9
    bound = -getattr(result, "mip_dual_bound", math.nan) if integer else -result.fun
    if integer and result.status == 0 and not math.isfinite(bound):
        bound = -result.fun
    if not math.isfinite(bound):
        bound = float(weights.sum())
    # The bound up to HiGHS's tolerances, then an integer (the weights are integers).
    upper_kept = int(math.floor(bound + 1e-6 + 1e-12 * abs(bound)))
    return chosen, min(upper_kept, int(weights.sum()))


@contextlib.contextmanager
def _solver_output_discarded():
    """Discard what the solver's compiled code writes to file descriptor 1 (HiGHS prints some
    diagnostics there whatever its options say), so that ctxbench's own output stays parseable."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def compacted_pinned(resolved: Resolved, compaction: Compaction) -> list[int]:
    """The pinned bytes at each turn end of an arm whose conversation is compacted (`rules.Compaction`),
    as the engine leaves them before it calls the strategy: they depend on the trace alone.

    >>> from sim.engine.rules import ArmStream, resolve
    >>> r = resolve(ArmStream.from_turns([5, 5, 5], ["m1", "m2", "m3"], [50, 50, 50], [0, 1, 2], [0, 1, 2]))
    >>> compacted_pinned(r, Compaction(trigger_bytes=100, summary_bytes=10, conversation=[1, 1, 1]))
    [50, 10, 60]
    """
    slot = np.asarray(resolved.slot, np.int64)
    place = np.asarray(resolved.place_bytes, np.int64)
    pinned_step = np.where(slot < 0, place, 0)
    conversation_step = np.where((slot < 0) & (np.asarray(compaction.conversation, np.int64) != 0), place, 0)
    pinned_at = np.r_[0, np.cumsum(pinned_step)][np.asarray(resolved.ends, np.int64)].tolist()
    conversation_at = np.r_[0, np.cumsum(conversation_step)][np.asarray(resolved.ends, np.int64)].tolist()
    out = []
    removed = 0           # bytes compaction has taken out of the window so far
    since = 0             # the conversation bytes counted at the last compaction
    summary = 0           # the summary in the window (0 before the first compaction)
    for pinned, conversation in zip(pinned_at, conversation_at):
        now = pinned - removed
        held = summary + conversation - since
        if now >= compaction.trigger_bytes and held > compaction.summary_bytes:
            removed += held - compaction.summary_bytes
            summary, since = compaction.summary_bytes, conversation
            now = pinned - removed
        out.append(now)
    return out


class ScheduleStrategy(StatefulContextStrategy):
    """Replays a schedule of kept reuse intervals: at each turn end, evicts every entry no kept
    interval spans. Replaying `solve_arm`'s schedule through the engine achieves its value."""

    def __init__(self, keep: Mapping[int, Sequence[str]]) -> None:
        self._keep = {turn: frozenset(ids) for turn, ids in keep.items()}
        self.reset()

    @classmethod
    def from_solution(cls, f: ArmFuture, kept: np.ndarray) -> "ScheduleStrategy":
        """The schedule keeping interval ``i`` of ``f`` through its turn ends when ``kept[i]``."""
        keep: dict[int, list[str]] = {}
        for i in np.flatnonzero(kept):
            for turn in range(f.starts[i], f.stops[i]):
                keep.setdefault(turn, []).append(f.entries[i])
        return cls(keep)

    def reset(self) -> None:
        self._now = 0

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        keep = self._keep.get(self._now, frozenset())
        self._now += 1
        return [e.id for e in state if e.id not in keep]

    def __repr__(self) -> str:
        return f"ScheduleStrategy({len(self._keep)} turn ends)"


def optimum_result(session: ResolvedSession, budget: ContextBudget, *,
                   bytes_per_token: "float | TokenRatios | None" = None,
                   futures: Mapping[str, ArmFuture] | None = None, belady: Mapping | None = None,
                   limits: OptimumLimits | None = None,
                   compaction_for_arm: Callable[[str], Compaction] | None = None,
                   max_directories: int | None = None) -> tuple[dict, dict[str, dict[str, ArmOptimum]]]:
    """The ``opt:exact`` row of one (session, budget[, claim mode]) and each arm's solutions by objective.

    Re-read bytes and capacity misses are each the optimum of their own program, summed over the
    arms (each arm has its own context and budget). ``opt_exact`` says whether both are proven;
    ``reread_bytes_lower`` and ``capacity_misses_lower`` are the proven bounds (equal when exact).
    A ``belady`` row (`sim.analysis.bracket.belady_size_replay` of the same session and budget)
    improves an unproven upper value. ``compaction_for_arm`` gives the optimum of a managed context
    whose conversation is compacted (``STRATEGY+POLICY``); with ``max_directories`` the optimum
    leaves that cap out and is a bound only (never exact).
    """
    limits = limits or OptimumLimits()
    started = time.perf_counter()
    if futures is None:
        futures = session_futures(session)
    if compaction_for_arm is not None:
        futures = {arm: replace(f, pinned=compacted_pinned(session.arms[arm], compaction_for_arm(arm)))
                   for arm, f in futures.items()}
    solutions = {arm: {objective: solve_arm(f, budget, objective, limits) for objective in OBJECTIVES}
                 for arm, f in futures.items()}
    value = {o: sum(s[o].value for s in solutions.values()) for o in OBJECTIVES}
    bound = {o: sum(s[o].bound for s in solutions.values()) for o in OBJECTIVES}
    methods = sorted({s[o].method for s in solutions.values() for o in OBJECTIVES})
    if belady is not None and compaction_for_arm is None:
        value["bytes"] = min(value["bytes"], int(belady["reread_bytes"]))
        value["misses"] = min(value["misses"], int(belady["capacity_misses"]))
    exact = all(value[o] == bound[o] for o in OBJECTIVES) and max_directories is None
    st = session.session
    row = {"trace": st.trace, "session": st.session, "strategy": BRACKET_EXACT, "model": "managed", "pure": None,
           "budget_bytes": budget.max_bytes, "events": len(st), "arms": len(futures),
           **{c: math.nan for c in METRIC_COLUMNS},
           **bound_metrics(futures, value["misses"], value["bytes"], bytes_per_token),
           "opt_exact": exact, "reread_bytes_lower": bound["bytes"],
           "reread_tokens_lower": bound["bytes"] / check_bytes_per_token(bytes_per_token),
           "capacity_misses_lower": bound["misses"],
           "opt_method": "+".join(methods),
           "opt_undecided": sum(s["bytes"].undecided for s in solutions.values())}
    if st.arms is not None:
        row["claims"] = (session.claims or ClaimConfig()).mode
    row["replay_s"] = time.perf_counter() - started
    row["log_hash"] = None
    return row, solutions


def optimum_columns(row: Mapping) -> dict:
    """The columns a strategy's row carries of its optimum: ``opt_reread_tokens`` (the optimum, or the best
    schedule found when not proven), ``opt_lower_tokens`` (a proven lower bound) and ``opt_exact``."""
    return {"opt_reread_tokens": row["reread_tokens"], "opt_lower_tokens": row["reread_tokens_lower"],
            "opt_exact": bool(row["opt_exact"])}
