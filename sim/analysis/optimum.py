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

from ctxbench.sim.analysis.bracket import ArmFuture, bound_metrics, session_futures
from ctxbench.sim.analysis.labels import BRACKET_EXACT
from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.engine.measures import METRIC_COLUMNS
from ctxbench.sim.engine.replay import ResolvedSession, check_bytes_per_token
from ctxbench.sim.engine.rules import Compaction, Resolved
from ctxbench.sim.engine.settings import OptimumLimits
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.stateful import StatefulContextStrategy
from ctxbench.traces.tokens import TokenRatios

__all__ = ["OptimumLimits", "ArmOptimum", "solve_arm", "compacted_pinned", "ScheduleStrategy", "OBJECTIVES",
           "optimum_result", "optimum_columns"]

OBJECTIVES = ("bytes", "misses")   # fewest re-read bytes; fewest capacity misses


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
    problem = (starts[undecided], stops[undecided], sizes[undecided], weights[undecided], room, entry_room)
    chosen, upper_kept, _ = _solve_program(*problem, integer, limits.time_limit_s)
    proven = integer and int(problem[3][chosen].sum()) >= upper_kept
    if not proven:
        # The relaxation rounded down, then filled greedily in the order of its values: often better than an
        # integer program stopped at its time limit, and the schedule when no integer program is built.
        rounded, relaxed_upper, values = _solve_program(*problem, False, limits.time_limit_s)
        rounded = _greedy_fill(rounded, np.argsort(-values, kind="stable"), *problem)
        if int(problem[3][rounded].sum()) > int(problem[3][chosen].sum()) or not integer:
            chosen = rounded
        upper_kept = min(upper_kept, relaxed_upper)
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


_ROW_MODEL_NONZEROS = 2_000_000   # above it the integer program is written as a flow (O(intervals) non-zeros)


def _solve_program(starts, stops, sizes, weights, room, entry_room, integer: bool,
                   time_limit_s: float) -> tuple[np.ndarray, int, np.ndarray]:
    """Keep the intervals of most weight within ``room`` (and ``entry_room``): the chosen mask (the
    intervals kept whole), a proven upper bound on the weight any choice keeps, and the solution's values."""
    import highspy

    n = len(starts)
    points, index = np.unique(np.concatenate([starts, stops]), return_inverse=True)
    first, last = index[:n], index[n:]
    seg_room = np.minimum.reduceat(room[:points[-1]], points[:-1])
    seg_entries = None if entry_room is None else np.minimum.reduceat(entry_room[:points[-1]], points[:-1])
    spans = int((last - first).sum())
    if integer and spans * (1 + (seg_entries is not None)) <= _ROW_MODEL_NONZEROS:
        model = _row_model(first, last, sizes, seg_room, seg_entries)
    else:
        model = _flow_model(first, last, sizes, seg_room, seg_entries)
    rows, cols, values, row_lower, row_upper, extra_upper = model
    num_col = n + len(extra_upper)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = num_col, len(row_upper)
    lp.col_cost_ = np.concatenate([weights.astype(float), np.zeros(len(extra_upper))])
    lp.col_lower_ = np.zeros(num_col)
    lp.col_upper_ = np.concatenate([np.ones(n), extra_upper])
    lp.row_lower_, lp.row_upper_ = row_lower, row_upper
    lp.sense_ = highspy.ObjSense.kMaximize
    order = np.lexsort((rows, cols))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.searchsorted(cols[order], np.arange(num_col + 1)).astype(np.int32)
    lp.a_matrix_.index_ = rows[order].astype(np.int32)
    lp.a_matrix_.value_ = values[order].astype(float)
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n + [highspy.HighsVarType.kContinuous] * len(extra_upper)
    with _solver_output_discarded():
        h = highspy.Highs()
        for option, value in (("output_flag", False), ("threads", 1), ("time_limit", float(time_limit_s)), ("random_seed", 0),
                              ("mip_rel_gap", 0.0), ("mip_abs_gap", 0.5)):   # integer weights: a gap under 1 proves it
            h.setOptionValue(option, value)
        h.passModel(lp)
        h.run()
    info = h.getInfo()
    solution = (np.asarray(h.getSolution().col_value[:n]) if info.primal_solution_status == 2   # feasible
                else np.zeros(n))
    chosen = solution > 0.5 if integer else solution > 1 - 1e-9
    bound = info.mip_dual_bound if integer else info.objective_function_value
    if not integer and h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        bound = math.nan
    if not math.isfinite(bound):
        bound = float(weights.sum())
    # The bound up to the solver's tolerances, then an integer (the weights are integers).
    upper_kept = int(math.floor(bound + 1e-6 + 1e-12 * abs(bound)))
    return chosen, min(upper_kept, int(weights.sum())), solution


def _greedy_fill(chosen, order, starts, stops, sizes, weights, room, entry_room) -> np.ndarray:
    """``chosen`` with every further interval, taken in ``order``, that still fits every turn end of its span."""
    chosen = chosen.copy()
    load = _per_turn(len(room), starts[chosen], stops[chosen], sizes[chosen])
    count = _per_turn(len(room), starts[chosen], stops[chosen], np.ones(int(chosen.sum()), np.int64))
    for i in order:
        if chosen[i]:
            continue
        span = slice(starts[i], stops[i])
        if (load[span] + sizes[i] <= room[span]).all() and (entry_room is None or
                                                            (count[span] < entry_room[span]).all()):
            chosen[i] = True
            load[span] += sizes[i]
            count[span] += 1
    return chosen


def _row_model(first, last, sizes, seg_room, seg_entries):
    """One knapsack row per stretch of turn ends that cannot hold every interval spanning it (and one per
    stretch over the entry cap): the form whose cuts the solver exploits best."""
    n, segments = len(first), len(seg_room)
    lengths = last - first
    column = np.repeat(np.arange(n), lengths)
    row = np.repeat(first, lengths) + (np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths))
    parts = [(row, column, sizes[column].astype(float), np.bincount(row, sizes[column], segments), seg_room)]
    if seg_entries is not None:
        parts.append((row, column, np.ones(len(row)), np.bincount(row, minlength=segments), seg_entries))
    rows, cols, values, upper, offset = [], [], [], [], 0
    for r, c, v, cover, limit in parts:
        binding = cover > limit
        renumber = np.cumsum(binding) - 1 + offset
        keep = binding[r]
        rows.append(renumber[r[keep]])
        cols.append(c[keep])
        values.append(v[keep])
        upper.append(limit[binding].astype(float))
        offset += int(binding.sum())
    upper = np.concatenate(upper)
    return (np.concatenate(rows), np.concatenate(cols), np.concatenate(values), np.full(len(upper), -np.inf), upper,
            np.zeros(0))


def _flow_model(first, last, sizes, seg_room, seg_entries):
    """The program as a flow along the turn ends (FOO): one balance row per breakpoint, one flow column per
    stretch bounded by its room; O(intervals) non-zeros, and a min-cost flow when relaxed."""
    n, segments = len(first), len(seg_room)
    nodes = segments + 1
    limits = [seg_room] + ([seg_entries] if seg_entries is not None else [])
    rows, cols, values = [], [], []
    for b, (amount, limit) in enumerate(zip([sizes.astype(float), np.ones(n)], limits)):
        # Interval i adds its amount at its first breakpoint and takes it out at its last.
        rows += [b * nodes + first, b * nodes + last]
        cols += [np.arange(n), np.arange(n)]
        values += [amount, -amount]
        # Stretch j's flow leaves breakpoint j and enters breakpoint j + 1.
        flow = n + b * segments + np.arange(segments)
        rows += [b * nodes + np.arange(segments), b * nodes + np.arange(1, nodes)]
        cols += [flow, flow]
        values += [-np.ones(segments), np.ones(segments)]
    extra_upper = np.maximum(np.concatenate(limits).astype(float), 0.0)
    zeros = np.zeros(len(limits) * nodes)
    return (np.concatenate(rows), np.concatenate(cols), np.concatenate(values), zeros, zeros, extra_upper)


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
    as they are when the engine calls the strategy: they depend on the trace alone. Where a summary of more than
    0 bytes is written, the strategy is called before compaction (its entries must fit the summarization call's
    window beside the conversation), so those turn ends count the pinned content before it.

    >>> from ctxbench.sim.engine.rules import ArmStream, resolve
    >>> r = resolve(ArmStream.from_turns([5, 5, 5], ["m1", "m2", "m3"], [50, 50, 50], [0, 1, 2], [0, 1, 2]))
    >>> compacted_pinned(r, Compaction(trigger_bytes=100, summary_bytes=10, conversation=[1, 1, 1]))
    [50, 100, 60]
    >>> compacted_pinned(r, Compaction(trigger_bytes=100, summary_bytes=0, conversation=[1, 1, 1]))
    [50, 0, 50]
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
            if compaction.summary_bytes == 0:   # no summarization call: compaction comes before the strategy
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
                   max_directories: int | None = None,
                   objectives: Sequence[str] = OBJECTIVES) -> tuple[dict, dict[str, dict[str, ArmOptimum]]]:
    """The ``opt:exact`` row of one (session, budget[, claim mode]) and each arm's solutions by objective.

    Re-read bytes and capacity misses are each the optimum of their own program, summed over the
    arms (each arm has its own context and budget). ``opt_exact`` says whether both are proven;
    ``reread_bytes_lower`` and ``capacity_misses_lower`` are the proven bounds (equal when exact).
    A ``belady`` row (`sim.analysis.bracket.belady_size_replay` of the same session and budget)
    improves an unproven upper value. ``compaction_for_arm`` gives the optimum of a managed context
    whose conversation is compacted (``STRATEGY+POLICY``); with ``max_directories`` the optimum
    leaves that cap out and is a bound only (never exact). ``objectives=("bytes",)`` solves re-read
    bytes alone (the row's capacity misses are then those of the bytes schedule, an upper value).
    """
    limits = limits or OptimumLimits()
    started = time.perf_counter()
    if futures is None:
        futures = session_futures(session)
    if compaction_for_arm is not None:
        futures = {arm: replace(f, pinned=compacted_pinned(session.arms[arm], compaction_for_arm(arm)))
                   for arm, f in futures.items()}
    unknown = set(objectives) - set(OBJECTIVES)
    if "bytes" not in objectives or unknown:
        raise ValueError(f"objectives must include 'bytes' and be among {OBJECTIVES}, got {tuple(objectives)}")
    solutions = {arm: {objective: solve_arm(f, budget, objective, limits) for objective in objectives}
                 for arm, f in futures.items()}
    if "misses" not in objectives:   # the bytes schedule's own misses: achievable, not proven least
        for arm, s in solutions.items():
            kept = s["bytes"].kept
            s["misses"] = ArmOptimum(kept, int((~kept).sum()), 0, "bytes-schedule", 0, 0.0)
    value = {o: sum(s[o].value for s in solutions.values()) for o in OBJECTIVES}
    bound = {o: sum(s[o].bound for s in solutions.values()) for o in OBJECTIVES}
    methods = sorted({s[o].method for s in solutions.values() for o in objectives})
    if belady is not None and compaction_for_arm is None:
        value["bytes"] = min(value["bytes"], int(belady["reread_bytes"]))
        value["misses"] = min(value["misses"], int(belady["capacity_misses"]))
    exact = all(value[o] == bound[o] for o in objectives) and max_directories is None
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
