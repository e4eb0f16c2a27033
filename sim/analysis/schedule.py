"""opt:schedule: the exact cheapest schedule of whole-history compactions of one arm (docs/design.md §8)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxbench.sim.engine.measures import (CACHE_READ_PRICE, DEFAULT_BYTES_PER_TOKEN, OUTPUT_PRICE, cache_write_price,
                                          summarise)
from ctxbench.sim.engine.rules import DEFAULT_SETTINGS, ArmStream, Resolved, ReplaySettings
from ctxbench.sim.engine.replay import ResolvedSession, check_bytes_per_token
from ctxbench.sim.engine.replay import _confirmation as confirmation_bytes
from ctxbench.sim.engine.replay import _stream as arm_stream
from ctxbench.sim.engine.transcript import replay_transcript
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.policies.common import history
from ctxbench.strategies.policies.schedule import SchedulePolicy

__all__ = ["ScheduleError", "Schedule", "SegmentInputs", "segment_inputs", "cheapest_schedule", "schedule_cost",
           "schedule_rereads", "optimal_schedule", "AtRereads", "cheapest_at_rereads", "session_schedules",
           "cheapest_schedules", "FRONTIER_WEIGHTS", "FrontierPoint", "frontier", "session_inputs"]


class ScheduleError(ValueError):
    """An arm whose compactions do not cost by segment (the restriction of docs/design.md §8)."""


class _FirstWhole:
    """A policy that never edits and notes the first call whose history holds ``tokens`` or more (the replay every
    schedule shares; the history only grows in it, so every later call's holds as much)."""

    def __init__(self, tokens: int, schedule: SchedulePolicy) -> None:
        self.tokens = tokens
        self.first: int | None = None
        self.admit = schedule.admit   # items enter as under every schedule of the family

    def edit(self, items, window):
        if self.first is None and sum(i.tokens for i in history(items)) >= self.tokens:
            self.first = window.turn
        return []


@dataclass(frozen=True)
class SegmentInputs:
    """What a schedule's cost is made of, per call k of an arm, in reference bytes: ``window`` the window with no
    compaction (B_k, nondecreasing); ``gap_ok`` whether call k reads the cache of call k-1 (within the lifetime;
    False for call 0 and with no cache); ``first`` the first call whose history holds a whole summary (earlier ones
    may not compact); ``after`` the window right after a compaction (overhead and summary, A); ``lead`` what the
    call after the summarization call reads from the cache (the overhead before the summary); ``summary`` the
    summary's bytes; ``max_bytes`` the window's size; ``write_price`` what a byte written to the cache costs (1,
    uncached, with no cache). Each need that a compaction can make a re-read has ``need_bytes``, the last call
    ``need_call`` it comes before (its step is in that call's turn) and ``need_from`` the first call after its
    revision last entered: it is a re-read exactly when the last compaction before it is at a call from
    ``need_from`` to ``need_call - 1`` (its every copy then left the window)."""

    window: np.ndarray
    gap_ok: np.ndarray
    first: int
    after: int
    lead: int
    summary: int
    max_bytes: int
    write_price: float
    need_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    need_from: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    need_call: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def segment_inputs(stream: ArmStream, resolved: Resolved, max_bytes: int, reference: float, summary_tokens: int,
                   settings: ReplaySettings = DEFAULT_SETTINGS, read_tokens: int | None = None,
                   confirmation: int | None = None) -> SegmentInputs:
    """The per-call inputs of every schedule's cost, from two replays on the engine: one that never compacts and
    one that compacts at every call it may (reads capped at ``read_tokens``, `SchedulePolicy`; ``confirmation``
    as `replay_transcript` takes it); `ScheduleError`
    where the window after a compaction is not the same at every call (overhead entering after the history),
    which breaks the segments' independence, or where ``summary_tokens`` is below 1."""
    if type(summary_tokens) is not int or summary_tokens < 1:
        raise ScheduleError(f"summary_tokens must be an integer >= 1 (a compaction with no summary makes no "
                            f"summarization call, outside the family), got {summary_tokens!r:.40}")
    recorder = _FirstWhole(summary_tokens, SchedulePolicy((), summary_tokens, read_tokens))
    plain = replay_transcript(stream, resolved, recorder, max_bytes, reference, settings,
                              confirmation=confirmation).log.columns
    n = len(plain["window_bytes"])
    window = plain["window_bytes"].astype(np.int64)
    ttl = int(settings.cache_ttl_ms)
    ts = np.asarray(resolved.end_ts, dtype=np.int64)[:n]
    gap_ok = np.zeros(n, bool)
    if ttl >= 0 and n > 1:
        gap_ok[1:] = np.diff(ts) <= ttl
    first = n if recorder.first is None else recorder.first
    after = lead = 0
    if first < n:
        every = SchedulePolicy(range(first, n), summary_tokens, read_tokens)
        probe = replay_transcript(stream, resolved, every, max_bytes, reference, settings,
                                  confirmation=confirmation).log.columns
        prompts = (probe["occupancy_bytes"] + probe["pinned_bytes"])[first:]
        leads = probe["cache_read_bytes"][first:]
        if prompts.min() != prompts.max() or leads.min() != leads.max():
            raise ScheduleError(f"arm {stream.arm!r}: the window after a compaction is not the same at every call "
                                f"({int(prompts.min())} to {int(prompts.max())} bytes): overhead enters after the "
                                "history, and a compaction's cost depends on more than its segment")
        after, lead = int(prompts[0]), int(leads[0])
    need_bytes, need_from, need_call = _needs(resolved)
    return SegmentInputs(window, gap_ok, first, after, lead, round(summary_tokens * reference), int(max_bytes),
                         cache_write_price(ttl) if ttl >= 0 else 1.0, need_bytes, need_from, need_call)


def _needs(resolved: Resolved) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The needs a compaction can make re-reads (`SegmentInputs`): every step's item holds the revision it
    places, whatever it adds (`Transcript.place`), so a need of a revision placed before is held exactly when a
    step placed it since the last compaction."""
    ends = np.asarray(resolved.ends, dtype=np.int64)
    last: dict[int, int] = {}
    rows = []
    for step, (need, size, place) in enumerate(zip(resolved.need, resolved.need_bytes, resolved.place)):
        if need >= 0 and need in last:
            rows.append((size, last[need], step))
        if place >= 0:
            last[place] = step
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    size, placed, step = (np.array(c, dtype=np.int64) for c in zip(*rows))
    # A compaction at call k removes what steps before ends[k] placed; the need's step is in call need_call's turn.
    need_from = np.searchsorted(ends, placed, side="right")
    need_call = np.searchsorted(ends, step, side="right")
    keep = need_from < need_call
    return size[keep], need_from[keep], need_call[keep]


@dataclass(frozen=True)
class Schedule:
    """The calls a cheapest schedule compacts at, its cost in reference-byte input equivalents and its re-read
    bytes (both None: no schedule keeps every call in the window)."""

    calls: tuple[int, ...]
    cost_bytes: float | None
    reread_bytes: int | None = None


def _prefix(inputs: SegmentInputs) -> tuple[np.ndarray, np.ndarray]:
    """Prefix sums over calls of a plain call's cost at no shift (PB) and its slope in the shift (PC): call u after
    a compaction at i costs ``wp*P_u + (0.1 - wp)*g_u*P_{u-1}`` with ``P_u = B_u + (A - B_i)``."""
    wp, g = inputs.write_price, inputs.gap_ok.astype(float)
    b = inputs.window.astype(float)
    prev = np.concatenate(([0.0], b[:-1]))
    base = wp * b + (CACHE_READ_PRICE - wp) * g * prev
    slope = wp + (CACHE_READ_PRICE - wp) * g
    return np.concatenate(([0.0], np.cumsum(base))), np.concatenate(([0.0], np.cumsum(slope)))


def _tail(inputs: SegmentInputs) -> float:
    """The call after a summarization call: the prompt A, reading from the cache the overhead before the summary
    (0 with no cache), and the summary's output."""
    wp = inputs.write_price
    return wp * inputs.after + (CACHE_READ_PRICE - wp) * inputs.lead + OUTPUT_PRICE * inputs.summary


def cheapest_schedule(inputs: SegmentInputs, weight: float = 0.0) -> Schedule:
    """The schedule of least cost plus ``weight`` per re-read byte with every call in the window
    (`cheapest_schedules` for one weight)."""
    return cheapest_schedules(inputs, (weight,))[0]


def cheapest_schedules(inputs: SegmentInputs, weights: Sequence[float]) -> list[Schedule]:
    """For each of ``weights``, the schedule of least cost plus that weight per re-read byte with every call in
    the window: a shortest path over calls, a segment from a compaction at i (or the start) to one at j costing
    its plain calls and j's summarization call (each O(1) from prefix sums, since a plain call's prompt is B_u
    shifted by A - B_i), then the call after it, and the re-reads of its needs (a difference array over i,
    added to as j grows). O(n²) per weight for n calls, the weights side by side in one pass."""
    b, n, m = inputs.window.astype(float), len(inputs.window), inputs.max_bytes
    w = np.asarray(weights, dtype=float).reshape(-1, 1)
    if n == 0:
        return [Schedule((), 0.0, 0) for _ in range(len(w))]
    pb, pc = _prefix(inputs)
    tail = _tail(inputs)
    # Node 0 is the start; node k+1 a compaction at call k; shift[node] = A - B_i (0 at the start).
    best = np.full((len(w), n + 1), np.inf)
    parent = np.full((len(w), n + 1), -1)
    best[:, 0] = 0.0
    shift = np.concatenate(([0.0], inputs.after - b))
    ends = np.arange(0, n + 1)                    # each node's first plain call
    first = inputs.first if inputs.after <= m else n
    # reread[node] after adding the needs of calls up to j: the bytes of those in (node's call, j] it re-reads.
    order = np.argsort(inputs.need_call, kind="stable")
    calls_of, from_of = inputs.need_call[order], inputs.need_from[order]
    bytes_of = inputs.need_bytes[order].astype(float)
    delta = np.zeros(n + 2)
    reread = np.zeros(n + 1)
    at = 0
    rows = np.arange(len(w))

    def add_needs(upto: int) -> np.ndarray:
        nonlocal at, reread
        added = at
        while at < len(calls_of) and calls_of[at] <= upto:
            delta[from_of[at] + 1] += bytes_of[at]
            delta[calls_of[at] + 1] -= bytes_of[at]
            at += 1
        if at > added:
            reread = np.cumsum(delta)[:n + 1]
        return reread

    for j in range(n):
        reread = add_needs(j)
        if j < first:
            continue
        d, start = shift[:j + 1], ends[:j + 1]
        seg = (pb[j + 1] - pb[start]) + d * (pc[j + 1] - pc[start]) + tail
        seg = np.where(b[j] + d <= m, seg, np.inf)
        total = best[:, :j + 1] + seg + w * reread[:j + 1]
        k = np.argmin(total, axis=1)
        best[:, j + 1], parent[:, j + 1] = total[rows, k], k
    reread = add_needs(n)
    last = np.where(b[n - 1] + shift <= m, (pb[n] - pb[ends]) + shift * (pc[n] - pc[ends]), np.inf)
    total = best + last + w * reread
    out = []
    for row in rows:
        k = int(np.argmin(total[row]))
        if not np.isfinite(total[row, k]):
            out.append(Schedule((), None, None))
            continue
        calls = []
        while k > 0:
            calls.append(k - 1)
            k = int(parent[row, k])
        calls = tuple(reversed(calls))
        out.append(Schedule(calls, schedule_cost(inputs, calls), schedule_rereads(inputs, calls)))
    return out


def schedule_rereads(inputs: SegmentInputs, calls) -> int:
    """The re-read bytes of the schedule compacting at ``calls`` (ascending): the needs whose last compaction
    before them is at or after ``need_from``."""
    at = np.asarray(calls, dtype=np.int64)
    if not len(at) or not len(inputs.need_call):
        return 0
    k = np.searchsorted(at, inputs.need_call, side="left") - 1
    last = np.where(k >= 0, at[np.maximum(k, 0)], -1)
    return int(inputs.need_bytes[(k >= 0) & (last >= inputs.need_from)].sum())


def schedule_cost(inputs: SegmentInputs, calls) -> float | None:
    """The cost of the schedule compacting at ``calls`` (ascending) by the segment rule; None where a call is
    outside the window or a compaction comes before ``first``."""
    b, n, m = inputs.window.astype(float), len(inputs.window), inputs.max_bytes
    pb, pc = _prefix(inputs)
    cost, i, d = 0.0, -1, 0.0
    for j in calls:
        if j < inputs.first or j >= n or inputs.after > m or b[j] + d > m:
            return None
        cost += (pb[j + 1] - pb[i + 1]) + d * (pc[j + 1] - pc[i + 1]) + _tail(inputs)
        i, d = j, inputs.after - b[j]
    if n and b[n - 1] + d > m:
        return None
    return cost + (pb[n] - pb[i + 1]) + d * (pc[n] - pc[i + 1])


def optimal_schedule(stream: ArmStream, resolved: Resolved, max_bytes: int, reference: float, summary_tokens: int,
                     settings: ReplaySettings = DEFAULT_SETTINGS, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
                     read_tokens: int | None = None, confirmation: int | None = None) -> tuple[Schedule, dict | None]:
    """The cheapest schedule of one arm and the metrics row of its replay as a `SchedulePolicy` on the engine
    (None where no schedule is feasible); `ScheduleError` where the replay's cost is not the schedule's."""
    inputs = segment_inputs(stream, resolved, max_bytes, reference, summary_tokens, settings, read_tokens,
                            confirmation)
    best = cheapest_schedule(inputs)
    if best.cost_bytes is None:
        return best, None
    log = replay_transcript(stream, resolved, SchedulePolicy(best.calls, summary_tokens, read_tokens), max_bytes,
                            reference, settings, confirmation=confirmation).log
    row = summarise(log, max_bytes, bytes_per_token, cache_ttl_ms=int(settings.cache_ttl_ms))
    expected = best.cost_bytes / bytes_per_token
    if not row["feasible"] or abs(row["cost_tokens"] - expected) > 1e-6 * max(1.0, expected):
        raise ScheduleError(f"arm {stream.arm!r}: the schedule {best.calls} costs {row['cost_tokens']:.1f} replayed "
                            f"but {expected:.1f} by its segments")
    return best, row


#: The weights on a re-read byte every session is solved at (`frontier`): 0 and 15 from 10^-3 to 10^4 evenly on a
#: log scale; one weight for every session, so the sums over sessions at a weight are points of the suite's hull.
FRONTIER_WEIGHTS = (0.0, *(float(w) for w in np.geomspace(1e-3, 1e4, 15)))


@dataclass(frozen=True)
class FrontierPoint:
    """The cheapest schedules of a session's arms at one ``weight`` on re-read bytes: their total ``cost_bytes``
    and ``reread_bytes`` (None: no schedule keeps every call of some arm in the window) and each arm's."""

    weight: float
    cost_bytes: float | None
    reread_bytes: int | None
    schedules: tuple[Schedule, ...]


def frontier(arms: Sequence[SegmentInputs], weights: Sequence[float] = FRONTIER_WEIGHTS) -> list[FrontierPoint]:
    """A session's cheapest schedules at each of ``weights`` (one weight for all its arms: their Lagrangian
    optima add up to the session's), each point on the lower convex hull of (re-reads, cost) over its
    schedules."""
    solved = [cheapest_schedules(inputs, weights) for inputs in arms]
    points = []
    for k, weight in enumerate(weights):
        schedules = tuple(by_arm[k] for by_arm in solved)
        feasible = all(s.cost_bytes is not None for s in schedules)
        points.append(FrontierPoint(float(weight), sum(s.cost_bytes for s in schedules) if feasible else None,
                                    sum(s.reread_bytes for s in schedules) if feasible else None, schedules))
    return points


@dataclass(frozen=True)
class AtRereads:
    """The cheapest schedule with at most ``reread_bytes`` of re-reads: ``lower`` the Lagrangian bound (the lower
    convex hull of (re-reads, cost) over schedules at that many re-reads), ``upper`` the cost of ``schedules``
    (one per arm), the cheapest hull vertex found within the re-reads (None: none found), ``exact`` whether the
    two meet."""

    reread_bytes: int
    lower: float | None
    upper: float | None
    schedules: tuple[Schedule, ...] | None
    exact: bool

    @property
    def schedule(self) -> Schedule | None:
        """The schedule of a one-arm session."""
        return None if self.schedules is None else self.schedules[0]


def cheapest_at_rereads(arms: SegmentInputs | Sequence[SegmentInputs], reread_bytes: int, rounds: int = 3,
                        per_round: int = 16, most_weight: float = 1e4,
                        known: Sequence[FrontierPoint] = ()) -> AtRereads:
    """The cheapest schedule of a session (one `SegmentInputs` per arm) with no more than ``reread_bytes`` of
    re-reads in all, exact where a hull vertex reaches it, else bracketed: each weight tried gives a lower bound
    (its optimum's cost plus weight times its re-reads less the allowance) and, within the allowance, an upper
    one. The weights: ``known`` points (`frontier`) or `FRONTIER_WEIGHTS` and ``most_weight``, then ``rounds``
    of ``per_round`` evenly between the two weights whose optima straddle the allowance, each round in one
    pass (`cheapest_schedules`)."""
    arms = [arms] if isinstance(arms, SegmentInputs) else list(arms)
    points = list(known) or frontier(arms, FRONTIER_WEIGHTS)
    if all(p.weight < most_weight for p in points):
        points += frontier(arms, (most_weight,))
    if points[0].cost_bytes is None:
        return AtRereads(reread_bytes, None, None, None, False)
    for _ in range(rounds):
        low = max((p.weight for p in points if p.reread_bytes > reread_bytes), default=None)
        high = min((p.weight for p in points if p.reread_bytes <= reread_bytes), default=None)
        if low is None or high is None or high <= low:
            break
        points += frontier(arms, np.linspace(low, high, per_round + 2)[1:-1])
    lower = max(p.cost_bytes + p.weight * (p.reread_bytes - reread_bytes) for p in points)
    within = [p for p in points if p.reread_bytes <= reread_bytes]
    found = min(within, key=lambda p: p.cost_bytes, default=None)
    upper = None if found is None else found.cost_bytes
    exact = upper is not None and upper <= lower * (1 + 1e-12) + 1e-9
    return AtRereads(reread_bytes, max(lower, 0.0), upper, None if found is None else found.schedules, exact)


def session_inputs(resolved: ResolvedSession, budget: ContextBudget, summary_tokens: int,
                   settings: ReplaySettings = DEFAULT_SETTINGS, read_tokens: int | None = None) -> tuple[SegmentInputs, ...]:
    """Each arm's `segment_inputs` under the window, token ratio and confirmation
    `sim.engine.replay.replay_session` replays a policy of that session with; `ScheduleError` as it raises."""
    bytes_per_token = check_bytes_per_token(resolved.tokens)
    return tuple(segment_inputs(arm_stream(resolved, arm), steps, budget.max_bytes, bytes_per_token, summary_tokens,
                                settings, read_tokens, confirmation_bytes(resolved.tokens))
                 for arm, steps in resolved.arms.items())


def session_schedules(resolved: ResolvedSession, budget: ContextBudget, summary_tokens: int,
                      settings: ReplaySettings = DEFAULT_SETTINGS,
                      read_tokens: int | None = None) -> dict[str, tuple[Schedule, dict | None]]:
    """Each arm's cheapest schedule and its replay's metrics row, under the window, token ratio and confirmation
    `sim.engine.replay.replay_session` replays a policy of that session with (its arms' costs add up)."""
    bytes_per_token = check_bytes_per_token(resolved.tokens)
    return {arm: optimal_schedule(arm_stream(resolved, arm), steps, budget.max_bytes, bytes_per_token,
                                  summary_tokens, settings, bytes_per_token, read_tokens,
                                  confirmation_bytes(resolved.tokens))
            for arm, steps in resolved.arms.items()}
