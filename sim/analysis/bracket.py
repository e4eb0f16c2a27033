"""The optimal bracket per (session, budget): PFOO-L lower bound, offline Belady-Size upper bound, gaps."""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.labels import BRACKET_EXACT, BRACKET_LABELS, BRACKET_LOWER, BRACKET_UPPER, is_bracket, policy_rows
from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.engine.compiled import NATIVE_BELADY_SIZE, register_kernel
from ctxbench.sim.engine.measures import METRIC_COLUMNS
from ctxbench.sim.engine.rules import CAPACITY, COMPULSORY, INVALIDATION, Resolved
from ctxbench.sim.engine.replay import (ResolvedSession, SessionResult, SessionTrace, check_bytes_per_token, replay_session,
                               resolve_session)
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.lru import evict_in_order
from ctxbench.strategies.stateful import StatefulContextStrategy
from ctxbench.traces.tokens import TokenRatios

__all__ = ["multiple", "BRACKET_LOWER", "BRACKET_UPPER", "BRACKET_EXACT", "BRACKET_LABELS", "is_bracket", "ArmFuture", "arm_future", "session_futures",
           "pfoo_lower_bound", "bound_metrics", "BeladySizeStrategy", "arm_needs", "belady_size_for", "belady_size_replay", "bracket_results",
           "bracket_gaps"]

_NEVER = 1 << 62   # turns until the next need of an entry never needed again


@dataclass
class ArmFuture:
    """What one arm needs and when, on the engine's own accounting (`sim.engine.rules`).

    A **reuse interval** spans two consecutive touches (placement or need) of the same revision
    of a path and is closed by a need (``read``/``edit``): a hit when the entry stays resident
    through every turn end in between, a capacity miss otherwise. Which revision an event needs,
    and whether a need is compulsory or an invalidation miss, never depends on eviction (only
    on the trace and, with several arms, on the workspace's claims), so the intervals are fixed
    by the trace. Turn ``k`` of an arm is its ``k``-th turn end: the ``k``-th call to its strategy.
    """

    arm: str
    turns: int = 0
    starts: list[int] = field(default_factory=list)   # turn of the touch opening each reuse interval
    stops: list[int] = field(default_factory=list)    # turn of the need closing it (> start)
    sizes: list[int] = field(default_factory=list)    # bytes of the entry (= re-read bytes on a miss)
    entries: list[str] = field(default_factory=list)  # the revision id each interval keeps
    # The turns each entry is needed in, ascending: need_turns[need_offsets[e]:need_offsets[e + 1]] for entry e of
    # `ids` (the resolved arm's); `needs` reads them by revision id.
    ids: list[str] = field(default_factory=list)
    need_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    need_turns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pinned: list[int] = field(default_factory=list)   # pinned bytes (conversation, overhead) at each turn end
    same_turn_hits: int = 0
    accesses: int = 0
    accessed_bytes: int = 0
    compulsory: int = 0
    compulsory_bytes: int = 0
    invalidation: int = 0
    invalidation_bytes: int = 0
    _needs: dict[str, list[int]] | None = field(default=None, repr=False, compare=False)

    @property
    def needs(self) -> dict[str, list[int]]:
        """Revision id -> the turns it is needed in, ascending (made when first read)."""
        if self._needs is None:
            offsets, turns = self.need_offsets.tolist(), self.need_turns.tolist()
            self._needs = {self.ids[e]: turns[offsets[e]:offsets[e + 1]] for e in range(len(offsets) - 1)
                           if offsets[e + 1] > offsets[e]}
        return self._needs


def arm_future(resolved: Resolved) -> ArmFuture:
    """An arm's `ArmFuture` from its resolved steps (`sim.engine.rules.Resolver`).

    >>> from ctxbench.sim.engine.rules import ArmStream, resolve
    >>> f = arm_future(resolve(ArmStream.from_turns([0, 0, 0], ["a", "b", "a"], [5, 7, 5], [0, 1, 2], [0, 1, 2])))
    >>> f.starts, f.stops, f.sizes, f.compulsory, f.needs["a:0"]
    ([0], [2], [5], 2, [0, 2])
    """
    f = ArmFuture(resolved.arm, turns=len(resolved.ends), ids=resolved.ids,
                  need_offsets=np.zeros(len(resolved.ids) + 1, np.int64))
    steps = len(resolved.slot)
    if not steps:
        return f
    slot, need = np.asarray(resolved.slot, np.int64), np.asarray(resolved.need, np.int64)
    need_bytes, miss = np.asarray(resolved.need_bytes, np.int64), np.asarray(resolved.miss, np.int64)
    turn = np.searchsorted(np.asarray(resolved.ends, np.int64), np.arange(steps), side="right")
    # Each step's previous step on the same path: the touch that opened its reuse interval.
    by_slot = np.lexsort((np.arange(steps), slot))
    previous = np.full(steps, -1)
    same = slot[by_slot[1:]] == slot[by_slot[:-1]]
    previous[by_slot[1:][same]] = by_slot[:-1][same]
    needs = need >= 0
    f.accesses, f.accessed_bytes = int(needs.sum()), int(need_bytes[needs].sum())
    for cls, count, size in ((COMPULSORY, "compulsory", "compulsory_bytes"),
                             (INVALIDATION, "invalidation", "invalidation_bytes")):
        chosen = needs & (miss == cls)
        setattr(f, count, int(chosen.sum()))
        setattr(f, size, int(need_bytes[chosen].sum()))
    reuse = np.flatnonzero(needs & (miss == CAPACITY))
    starts, stops = turn[previous[reuse]], turn[reuse]
    spans = starts != stops
    f.same_turn_hits = int((~spans).sum())
    f.starts, f.stops, f.sizes = starts[spans].tolist(), stops[spans].tolist(), need_bytes[reuse][spans].tolist()
    ids = resolved.ids
    f.entries = [ids[e] for e in need[reuse][spans].tolist()]
    ends = np.asarray(resolved.ends, np.int64)
    if len(ends) and (slot < 0).any():
        pinned = np.r_[0, np.cumsum(np.where(slot < 0, np.asarray(resolved.place_bytes, np.int64), 0))]
        f.pinned = pinned[ends].tolist()
    f.need_offsets, f.need_turns = _need_table(need, turn, len(ids))
    return f


def _need_table(need: np.ndarray, turn: np.ndarray, entries: int) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's need turns, ascending, from each step's need (-1: none) and turn end: (offsets, turns) with entry
    e's turns at turns[offsets[e]:offsets[e + 1]]."""
    needs = need >= 0
    needed, at = need[needs], turn[needs]
    by_entry = np.argsort(needed, kind="stable")   # each entry's needs stay in turn order
    return np.r_[0, np.cumsum(np.bincount(needed, minlength=entries))].astype(np.int64), at[by_entry]


def arm_needs(resolved: Resolved) -> dict[str, list[int]]:
    """Revision id -> the turn ends it is needed before, ascending (`ArmFuture.needs`, made without the rest of it)."""
    steps = len(resolved.slot)
    need = np.asarray(resolved.need, np.int64)
    turn = np.searchsorted(np.asarray(resolved.ends, np.int64), np.arange(steps), side="right")
    offsets, turns = _need_table(need, turn, len(resolved.ids))
    return ArmFuture(resolved.arm, ids=resolved.ids, need_offsets=offsets, need_turns=turns).needs


def session_futures(st: SessionTrace | ResolvedSession, claims: ClaimConfig | None = None,
                    tokens: "float | TokenRatios | None" = None) -> dict[str, ArmFuture]:
    """Each arm's `ArmFuture` (``st`` resolved under ``claims`` and ``tokens`` unless it is already).

    >>> st = SessionTrace("s", [0, 1, 2], [0, 0, 0], ["a", "b", "a"], [5, 7, 5], [0, 1, 2])
    >>> f = session_futures(st)["main"]
    >>> f.starts, f.stops, f.sizes, f.compulsory, f.needs["a:0"]
    ([0], [2], [5], 2, [0, 2])
    """
    resolved = st if isinstance(st, ResolvedSession) else resolve_session(st, claims, tokens=tokens)
    return {arm: arm_future(steps) for arm, steps in resolved.arms.items()}


def _arm_bound(f: ArmFuture, max_bytes: int) -> tuple[int, int]:
    """PFOO-L for one arm: lower bounds on (capacity misses, re-read bytes)."""
    if not f.starts:
        return 0, 0
    starts, stops = np.asarray(f.starts, np.int64), np.asarray(f.stops, np.int64)
    sizes = np.asarray(f.sizes, np.int64)
    fits = sizes <= max_bytes
    forced_misses, forced_bytes = int((~fits).sum()), int(sizes[~fits].sum())
    starts, stops, sizes = starts[fits], stops[fits], sizes[fits]
    if not len(sizes):
        return forced_misses, forced_bytes
    lengths = stops - starts
    big = float((sizes.astype(float) * lengths).sum()) >= 2.0**62
    dtype = object if big else np.int64  # exact Python integers on (absurdly) large traces
    cover = np.zeros(f.turns + 1, dtype)
    np.add.at(cover, starts, sizes.astype(dtype))
    np.add.at(cover, stops, -sizes.astype(dtype))
    cover = np.cumsum(cover)[:-1]
    # What a turn end can hold of the strategy's entries: the window less what is pinned there.
    capacity = (np.maximum(max_bytes - np.asarray(f.pinned, np.int64), 0) if f.pinned
                else np.full(f.turns, max_bytes, np.int64))
    space_time = (sum(min(int(c), int(m)) for c, m in zip(cover, capacity)) if big
                  else int(np.minimum(cover, capacity).sum()))
    costs = sizes.astype(dtype) * lengths.astype(dtype)

    by_cost = np.cumsum(np.sort(costs, kind="stable"))
    kept = int(np.searchsorted(by_cost, space_time, side="right"))
    misses = forced_misses + len(sizes) - kept

    order = np.argsort(lengths, kind="stable")
    by_length = np.cumsum(costs[order])
    whole = int(np.searchsorted(by_length, space_time, side="right"))
    kept_bytes = int(sizes[order][:whole].sum())
    if whole < len(sizes):  # the next interval, fractionally: its bytes per byte-turn are 1 / length
        left = space_time - (int(by_length[whole - 1]) if whole else 0)
        kept_bytes += left // int(lengths[order][whole])
    reread = forced_bytes + int(sizes.sum()) - kept_bytes
    return misses, reread


def pfoo_lower_bound(session: SessionTrace, budget: ContextBudget, *, claims: ClaimConfig | None = None,
                     bytes_per_token: "float | TokenRatios | None" = None,
                     futures: Mapping[str, ArmFuture] | None = None) -> dict:
    """PFOO-L lower bounds for one session under ``budget``, true for every strategy.

    PFOO-L: Berger, Beckmann and Harchol-Balter, "Practical Bounds on Optimal Caching with
    Variable Object Sizes", SIGMETRICS 2018. A reuse interval (`ArmFuture`) opened at turn
    ``s`` and closed at turn ``e > s`` hits only if its entry is resident after eviction at the
    turn ends ``s .. e-1``: it costs ``size × (e - s)`` byte-turns. One closed in the turn that
    opened it always hits (eviction happens only at turn ends) and costs nothing. The per-turn
    capacity ``resident ≤ capacity_k`` (``max_bytes`` less the content pinned at turn end ``k``:
    conversation, tool inputs, overhead) is relaxed to one space-time budget: the bytes kept,
    summed over turn ends, are at most ``Σ_k min(capacity_k, cover_k)``, ``cover_k`` being the
    bytes of all intervals spanning turn end ``k`` (the paper's budget × turns; the ``min`` only
    drops capacity no interval could use). Nothing else must be resident at a turn end: entries
    needed within a turn and what writes and outputs bring in may all be evicted at its end, so
    they take none of it. Relaxed as well: which intervals are kept together at a given turn end
    (any set whose byte-turns fit), that a policy decides online among what is resident, the
    entry cap ``max_entries`` and any cap of a strategy. Kept: an entry larger than
    ``max_bytes`` cannot span a turn end, so its intervals always miss. Every schedule the
    replay engine allows keeps a set of intervals within the space-time budget, hence

    - capacity misses ≥ intervals − the most intervals whose costs fit (greedy, cheapest
      ``size × length`` first, exact for a count);
    - re-read bytes ≥ interval bytes − the most bytes whose costs fit, the last interval taken
      fractionally (greedy, shortest first: the fractional-knapsack optimum), rounded up.

    Several arms: the sum of the per-arm bounds (each arm has its own context and budget).

    Keys: ``capacity_misses``, ``reread_bytes``, ``reread_tokens`` (bounds); ``accesses``,
    ``compulsory_misses``, ``invalidation_misses``, ``invalidation_bytes``, ``turns`` (exact);
    ``misses``, ``miss_rate``, ``capacity_miss_rate``, ``byte_miss_rate`` (bounds built from
    both). O(n log n) in the session's events.

    Reads of a, b, a, b (60 bytes each), one per turn, under 100 bytes: both reuse intervals
    span two turn ends (120 byte-turns each) but only 60 + 100 + 60 byte-turns are usable, so
    at least one of them misses; the byte bound takes 110 of the 120 bytes fractionally.

    >>> st = SessionTrace("s", [0, 1, 2, 3], [0] * 4, ["a", "b", "a", "b"], [60] * 4, [0, 1, 2, 3])
    >>> b = pfoo_lower_bound(st, ContextBudget(max_bytes=100))
    >>> b["capacity_misses"], b["reread_bytes"]
    (1, 10)
    """
    futures = futures if futures is not None else session_futures(session, claims, bytes_per_token)
    cap = reread = 0
    for f in futures.values():
        m, b = _arm_bound(f, budget.max_bytes)
        cap += m
        reread += b
    return bound_metrics(futures, cap, reread, bytes_per_token)


def bound_metrics(futures: Mapping[str, ArmFuture], capacity_misses: int, reread_bytes: int,
                  bytes_per_token: "float | TokenRatios | None" = None) -> dict:
    """A bound's metrics from its capacity misses and re-read bytes and the session's fixed counts."""
    bytes_per_token = check_bytes_per_token(bytes_per_token)
    fs = list(futures.values())
    accesses = sum(f.accesses for f in fs)
    comp, inv = sum(f.compulsory for f in fs), sum(f.invalidation for f in fs)
    accessed_bytes = sum(f.accessed_bytes for f in fs)
    miss_bytes = sum(f.compulsory_bytes + f.invalidation_bytes for f in fs) + reread_bytes
    misses = comp + inv + capacity_misses
    return {
        "accesses": accesses,
        "misses": misses,
        "compulsory_misses": comp,
        "capacity_misses": capacity_misses,
        "invalidation_misses": inv,
        "miss_rate": misses / accesses if accesses else 0.0,
        "capacity_miss_rate": capacity_misses / accesses if accesses else 0.0,
        "byte_miss_rate": miss_bytes / accessed_bytes if accessed_bytes else 0.0,
        "reread_bytes": reread_bytes,
        "reread_tokens": reread_bytes / bytes_per_token,
        "invalidation_bytes": sum(f.invalidation_bytes for f in fs),
        "turns": sum(f.turns for f in fs),
    }


class BeladySizeStrategy(StatefulContextStrategy):
    """Offline Belady-Size for one arm: knows at which of the arm's turns each revision is needed.

    A feasible policy replayed through the same replay engine, so its result is an upper bound on the
    optimum.
    "Now" is the turn being closed: the number of ``evict`` calls since `reset` (the replay engine
    calls it exactly once per turn end). At each turn end: every resident entry never needed
    again goes (keeping it can only crowd out later entries); then, while over budget, the
    entry with the largest ``size_bytes × (next need - now)``, ties by id. Deterministic.

    ``needs`` maps each revision to the turns it is needed in; made for a resolved arm (``resolved``,
    whose needs they then are, `arm_needs`), the compiled engine replays that arm with its own kernel
    of this definition (O(log n) per entry touched or leaving rather than a sort of the resident
    set per turn end; ``sim/engine/_managed.c``), which the tests hold to these results.
    """

    def __init__(self, needs: Mapping[str, Sequence[int]] | None = None, *, resolved: Resolved | None = None) -> None:
        if needs is None and resolved is None:
            raise TypeError("BeladySizeStrategy needs the turns each revision is needed in, or the resolved arm")
        self._given = needs
        #: The resolved arm whose future this is, if made for one: the compiled engine replays it with its kernel.
        self.resolved = resolved
        self.reset()

    @property
    def _needs(self) -> Mapping[str, Sequence[int]]:
        if self._given is None:
            self._given = arm_needs(self.resolved)
        return self._given

    def reset(self) -> None:
        self._now = 0
        self._resident: dict[str, int] = {}
        self._deaths: list[tuple[int, str]] = []   # heap of (last turn the entry is needed in, id)

    def on_insert(self, entry: ContextEntry) -> None:
        self._resident[entry.id] = entry.size_bytes
        turns = self._needs.get(entry.id)
        last = turns[-1] if turns else -1
        heapq.heappush(self._deaths, (max(last, self._now), entry.id))

    def on_remove(self, entry_id: str, evicted: bool) -> None:
        self._resident.pop(entry_id, None)

    def _distance(self, entry_id: str, now: int) -> int:
        turns = self._needs.get(entry_id, ())
        i = bisect_right(turns, now)
        return turns[i] - now if i < len(turns) else _NEVER

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list[str]:
        now = self._now
        self._now += 1
        total = getattr(state, "total_bytes", None)
        if total is None:
            total = sum(e.size_bytes for e in state)
        count = len(state)
        out: list[str] = []
        deaths, resident = self._deaths, self._resident
        while deaths and deaths[0][0] <= now:
            entry_id = heapq.heappop(deaths)[1]
            size = resident.pop(entry_id, None)
            if size is not None:
                out.append(entry_id)
                total -= size
                count -= 1
        cap = budget.max_entries
        if total <= budget.max_bytes and (cap is None or count <= cap):
            return out
        gone = set(out)
        ranked = sorted((e for e in state if e.id not in gone),
                        key=lambda e: (-e.size_bytes * self._distance(e.id, now), e.id))
        return out + evict_in_order(ranked, total, budget, cap, count)

    def __repr__(self) -> str:
        return f"BeladySizeStrategy({len(self._needs)} revisions)"


def _kernel(strategy: BeladySizeStrategy, resolved: Resolved | None) -> dict | None:
    """The compiled engine's own Belady-Size (which reads the needs from the resolution it replays) for ``strategy``
    on ``resolved``, where the strategy was made for that very resolution (`belady_size_replay`)."""
    return {"native": NATIVE_BELADY_SIZE} if resolved is not None and strategy.resolved is resolved else None


register_kernel(BeladySizeStrategy, _kernel)


def belady_size_for(session: SessionTrace | ResolvedSession, arm: str = "main", *,
                    claims: ClaimConfig | None = None,
                    futures: Mapping[str, ArmFuture] | None = None) -> BeladySizeStrategy:
    """A Belady-Size strategy that knows ``arm``'s future in ``session``."""
    futures = futures if futures is not None else session_futures(session, claims)
    return BeladySizeStrategy(futures[arm].needs)


def belady_size_replay(session: SessionTrace | ResolvedSession, budget: ContextBudget, *,
                       claims: ClaimConfig | None = None, bytes_per_token: "float | TokenRatios | None" = None,
                       futures: Mapping[str, ArmFuture] | None = None) -> SessionResult:
    """Replay ``session`` under Belady-Size (one instance per arm), labelled ``opt:belady-size``."""
    resolved = (session if isinstance(session, ResolvedSession)
                else resolve_session(session, claims, tokens=bytes_per_token))

    def strategy_for_arm(arm: str) -> BeladySizeStrategy:
        return BeladySizeStrategy(futures[arm].needs if futures is not None else None, resolved=resolved.arms[arm])

    return replay_session(resolved, None, budget, strategy_name=BRACKET_UPPER, strategy_for_arm=strategy_for_arm)


def bracket_results(session: SessionTrace | ResolvedSession, budget: ContextBudget, *,
                    claims: ClaimConfig | None = None,
                    bytes_per_token: "float | TokenRatios | None" = None) -> tuple[dict, SessionResult]:
    """The bracket of one (session, budget): the ``opt:lower`` row and the Belady-Size replay.

    The lower row has the replay rows' identifying columns and every metric column; the
    metrics PFOO-L does not define (evictions, occupancy, latency) are NaN.
    """
    started = time.perf_counter()
    resolved = (session if isinstance(session, ResolvedSession)
                else resolve_session(session, claims, tokens=bytes_per_token))
    bytes_per_token = check_bytes_per_token(resolved.tokens)
    st = resolved.session
    futures = session_futures(resolved)
    bound = pfoo_lower_bound(st, budget, bytes_per_token=bytes_per_token, futures=futures)
    row = {"trace": st.trace, "session": st.session, "strategy": BRACKET_LOWER, "model": "managed", "pure": None,
           "budget_bytes": budget.max_bytes, "events": len(st), "arms": len(futures),
           **{c: math.nan for c in METRIC_COLUMNS}, **bound}
    if st.arms is not None:
        row["claims"] = (resolved.claims or ClaimConfig()).mode
    row["replay_s"] = time.perf_counter() - started
    row["log_hash"] = None
    upper = belady_size_replay(resolved, budget, bytes_per_token=bytes_per_token, futures=futures)
    return row, upper


def bracket_gaps(results: pd.DataFrame, by: Sequence[str] | None = None) -> pd.DataFrame:
    """Each strategy's re-read cost against the optimum and the bracket, per ``by`` (default: strategy, budget, claims).

    Totals over the sessions that have both the strategy's row and the bracket's (rows match on
    trace, session, budget and claim mode): ``reread_tokens``, ``lower_tokens``,
    ``belady_tokens``; ``x_lower`` and ``x_belady`` are the strategy's total divided by each
    bound's ("lru re-reads 2.3× the lower bound"); ``excess_tokens`` is the strategy's total
    minus the lower bound's. With the optimum's rows (``opt:exact``, `sim.analysis.optimum`):
    ``optimum_tokens`` (the optimum's total, or the best schedule found where it is not proven),
    ``optimum_lower_tokens`` (its proven lower bound), ``x_opt`` (the strategy's total over
    ``optimum_tokens``), ``x_opt_high`` (over ``optimum_lower_tokens``; equal to ``x_opt`` when
    exact) and ``opt_exact`` (proven on every session). A zero bound gives a ratio of 1.0 when the
    strategy is zero too (it sits on the bound) and ``inf`` otherwise (the multiple is then
    undefined; read ``excess_tokens``). Empty when the results have no bracket rows. Context
    policies and compacted strategies (`sim.analysis.labels.policy_rows`) are left out: the bracket
    bounds the managed model without compaction.
    """
    results = results[~policy_rows(results)]
    keys = ["trace", "session", "budget_tokens"] + (["claims"] if "claims" in results.columns else [])
    group = list(by) if by is not None else ["strategy", *keys[2:]]
    has_exact = (results["strategy"] == BRACKET_EXACT).any()
    columns = [*group, "sessions", "reread_tokens", "lower_tokens", "belady_tokens", "x_lower", "x_belady",
               "excess_tokens"]
    if has_exact:
        columns += ["optimum_tokens", "optimum_lower_tokens", "x_opt", "x_opt_high", "opt_exact"]
    extra = ["reread_tokens_lower", "opt_exact"] if has_exact else []
    frame = results[list(dict.fromkeys(keys + group + ["strategy", "reread_tokens"] + extra))].copy()
    if "claims" in keys:
        frame["claims"] = frame["claims"].fillna("")
    lower = frame.loc[frame["strategy"] == BRACKET_LOWER, keys + ["reread_tokens"]]
    upper = frame.loc[frame["strategy"] == BRACKET_UPPER, keys + ["reread_tokens"]]
    if lower.empty or upper.empty:
        return pd.DataFrame(columns=columns)
    contenders = frame[~frame["strategy"].map(is_bracket).astype(bool)][list(dict.fromkeys(keys + group + ["reread_tokens"]))]
    both = (contenders
            .merge(lower.rename(columns={"reread_tokens": "lower_tokens"}), on=keys)
            .merge(upper.rename(columns={"reread_tokens": "belady_tokens"}), on=keys))
    sums = dict(sessions=("session", "size"), reread_tokens=("reread_tokens", "sum"),
                lower_tokens=("lower_tokens", "sum"), belady_tokens=("belady_tokens", "sum"))
    if has_exact:
        exact = frame.loc[frame["strategy"] == BRACKET_EXACT, keys + ["reread_tokens", "reread_tokens_lower",
                                                                      "opt_exact"]]
        both = both.merge(exact.rename(columns={"reread_tokens": "optimum_tokens",
                                                "reread_tokens_lower": "optimum_lower_tokens"}), on=keys)
        both["opt_exact"] = both["opt_exact"].astype(bool)
        sums.update(optimum_tokens=("optimum_tokens", "sum"), optimum_lower_tokens=("optimum_lower_tokens", "sum"),
                    opt_exact=("opt_exact", "all"))
    table = both.groupby(group, sort=True, observed=True).agg(**sums).reset_index()
    table["x_lower"] = multiple(table["reread_tokens"], table["lower_tokens"])
    table["x_belady"] = multiple(table["reread_tokens"], table["belady_tokens"])
    table["excess_tokens"] = table["reread_tokens"] - table["lower_tokens"]
    if has_exact:
        table["x_opt"] = multiple(table["reread_tokens"], table["optimum_tokens"])
        table["x_opt_high"] = multiple(table["reread_tokens"], table["optimum_lower_tokens"])
    if "claims" in group:
        table["claims"] = table["claims"].replace("", None)
    return table[columns]


def multiple(num: pd.Series, den: pd.Series) -> pd.Series:
    """``num / den``, with 0/0 = 1 (at the bound) and x/0 = inf."""
    num_index = num.index
    num, den = num.to_numpy(float), den.to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = num / den
    out[(den == 0) & (num == 0)] = 1.0
    return pd.Series(out, index=num_index)
