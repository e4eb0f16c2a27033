"""Replay a trace's sessions against a strategy under a budget and summarise each session."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.engine.arm import ArmReplay, replay_arm, resolve_arm
from ctxbench.sim.engine.measures import TurnLog, summarise
from ctxbench.sim.engine.rules import ArmStream, Compaction, Resolved
from ctxbench.sim.engine.transcript import replay_transcript
from ctxbench.sim.errors import InputError
from ctxbench.sim.engine.interned import InternedPaths
from ctxbench.sim.engine.workspace import ARM_STAT_FIELDS, Workspace
from ctxbench.sim.engine.settings import ReplaySettings, check_bytes_per_token, positive_float, settings_of
from ctxbench.strategies.adapter import COMBINED, POLICY, Adapter, adapt, label_of
from ctxbench.strategies.contract import ContextBudget
from ctxbench.traces.model_ratios import session_model, session_ratios
from ctxbench.traces.schema import OPS, category_labels, validate
from ctxbench.traces.tokens import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN, TokenRatios, as_ratios
from ctxbench.traces.vocabulary import CALL, CONFIRMATION_BYTES, CONFIRMATION_KIND, KINDS, MESSAGE, OUTPUT, kind_codes

__all__ = ["SessionTrace", "InternedPaths", "SessionResult", "ResolvedSession", "split_sessions", "resolve_session", "replay_session",
           "iter_sessions", "replay", "budget_for_tokens", "check_bytes_per_token", "strategy_label", "MIN_BYTES_PER_TOKEN",
           "MAX_BYTES_PER_TOKEN", "MAX_BUDGET_BYTES", "compaction_rule"]


@dataclass
class SessionTrace:
    """One session's events: int64 columns (given as any sequence of ints) and its paths, interned
    (`InternedPaths`, made from any sequence of str), ready for the engine and cheap to pickle."""

    session: str
    turns: np.ndarray
    ops: np.ndarray
    paths: InternedPaths
    sizes: np.ndarray
    ts_ms: np.ndarray
    arms: list[str] | None = None
    trace: str = ""
    lines_changed: np.ndarray | None = None
    kinds: np.ndarray | None = None   # each event's content kind, an index into `traces.tokens.KINDS`
    model: str = ""   # the model that made most of its calls (`traces.model_ratios.session_model`); "" unknown
    exact_tokens: np.ndarray | None = None   # each event's exact tokens, counted at import (0: by its kind's ratio)

    def __post_init__(self) -> None:
        for name in ("turns", "ops", "sizes", "ts_ms") + (("lines_changed",) if self.lines_changed is not None else ()):
            setattr(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.int64))
        self.paths = InternedPaths.of(self.paths)
        self.kinds = (_kinds(self.ops, self.paths) if self.kinds is None
                      else np.ascontiguousarray(self.kinds, dtype=np.int8))
        if self.exact_tokens is not None:
            self.exact_tokens = np.ascontiguousarray(self.exact_tokens, dtype=np.int64)
            if not self.exact_tokens.any():
                self.exact_tokens = None

    def costs(self, tokens: "TokenRatios | float | None" = None) -> np.ndarray | None:
        """What each event takes of the window in reference bytes under ``tokens`` (`traces.tokens.as_ratios`):
        an event counted exactly at import its tokens, any other its size at its kind's ratio; ``None`` where
        every event's cost is its size (one ratio for every kind, nothing counted exactly)."""
        ratios = as_ratios(tokens)
        if self.exact_tokens is None and ratios.is_uniform:
            return None
        return ratios.costs(self.sizes, self.kinds, self.exact_tokens)

    def __len__(self) -> int:
        return len(self.ops)

    def turn_slices(self) -> Iterator[tuple[int, int, int]]:
        """``(turn, start, stop)`` for each run of events sharing a turn number."""
        turns = np.asarray(self.turns)
        if not len(turns):
            return iter(())
        starts = np.flatnonzero(np.r_[True, turns[1:] != turns[:-1]])
        stops = np.r_[starts[1:], len(turns)]
        return zip(turns[starts].tolist(), starts.tolist(), stops.tolist())


def _kinds(ops: np.ndarray, paths: InternedPaths, given: np.ndarray | None = None) -> np.ndarray:
    """Each event's content kind (`traces.vocabulary.kind_codes`), a message's decided once per distinct path."""
    messages = ops == MESSAGE
    out = kind_codes(np.where(messages, OUTPUT, ops), (), given)
    if messages.any():
        by_name = kind_codes(np.full(len(paths.names), MESSAGE), paths.names)
        unkinded = messages if given is None else messages & (np.asarray(given) == 0)
        out[unkinded] = by_name[paths.codes[unkinded]]
    return out


@dataclass
class SessionResult:
    """Metrics of one (session, strategy, budget) replay, with its per-turn log."""

    row: dict
    log: TurnLog
    violation_messages: list[str] = field(default_factory=list)
    arms: list[dict] = field(default_factory=list)
    arm_logs: dict[str, TurnLog] = field(default_factory=dict)
    thrashing: list[dict] = field(default_factory=list)
    escalations: list[dict] = field(default_factory=list)


def split_sessions(df: pd.DataFrame, trace: str = "", *, check: bool = True) -> list[SessionTrace]:
    """Cut a trace into `SessionTrace` objects, in order of first appearance."""
    return list(iter_sessions(df, trace, check=check))


def iter_sessions(chunks: "pd.DataFrame | Iterable[pd.DataFrame]", trace: str = "", *,
                  check: bool = True) -> Iterator[SessionTrace]:
    """The sessions of a trace given as one frame, or as frames of whole sessions in order (such as a
    `traces.io.TraceReader` yields, validated already), one `SessionTrace` at a time; each session's
    paths are interned (`InternedPaths`). ``check`` validates a single frame first."""
    if isinstance(chunks, pd.DataFrame):
        chunks = [validate(chunks, source=trace or "trace") if check else chunks]
    for df in chunks:
        yield from _sessions_of(df, trace)


def _sessions_of(df: pd.DataFrame, trace: str) -> Iterator[SessionTrace]:
    """The sessions of one frame of whole sessions in canonical dtypes."""
    if not len(df):
        return
    session_codes = df["session"].cat.codes.to_numpy()
    session_names = df["session"].cat.categories
    op_codes = df["op"].cat.codes.to_numpy()
    assert tuple(df["op"].cat.categories) == OPS
    path_codes = df["path"].cat.codes.to_numpy()
    path_names = category_labels(df["path"])
    arm_codes = df["arm"].cat.codes.to_numpy()
    arm_names = category_labels(df["arm"])
    lines = df["lines_changed"].to_numpy()
    given_kinds = df["kind"].cat.codes.to_numpy() if "kind" in df.columns else None
    models = df["model"].astype(str).to_numpy(dtype=object) if "model" in df.columns else None
    exact = df["exact_tokens"].to_numpy() if "exact_tokens" in df.columns else None
    turns = df["turn"].to_numpy()
    sizes = df["size_bytes"].to_numpy()
    ts = df["ts_ms"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, session_codes[1:] != session_codes[:-1], True])
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        arms = arm_codes[start:stop]
        single_arm = bool((arms == arms[0]).all())
        local, distinct = pd.factorize(path_codes[start:stop])
        paths = InternedPaths(local, path_names[distinct].tolist())
        ops = op_codes[start:stop]
        yield SessionTrace(
            session=str(session_names[session_codes[start]]),
            turns=turns[start:stop],
            ops=ops,
            paths=paths,
            sizes=sizes[start:stop],
            ts_ms=ts[start:stop],
            arms=None if single_arm and arm_names[arms[0]] == "main" else arm_names[arms].tolist(),
            trace=trace,
            lines_changed=None if single_arm else lines[start:stop],
            kinds=_kinds(ops.astype(np.int64), paths, None if given_kinds is None else given_kinds[start:stop]),
            model="" if models is None else _model_of(turns[start:stop], models[start:stop]),
            exact_tokens=None if exact is None else exact[start:stop],
        )


def _model_of(turns: np.ndarray, models: np.ndarray) -> str:
    """A session's model from its rows: each turn's model counted once (`traces.model_ratios.session_model`)."""
    first = np.r_[True, turns[1:] != turns[:-1]] if len(turns) else np.zeros(0, dtype=bool)
    return session_model(models[first].tolist())


MAX_BUDGET_BYTES = 2**53


def budget_for_tokens(budget_tokens: int | float, bytes_per_token: "float | TokenRatios | None" = None,
                      max_entries: int | None = None, *, option: str = "budget",
                      per_token_option: str = "bytes per token") -> ContextBudget:
    """The byte budget for a token budget: ``floor(budget_tokens * bytes_per_token)``, in reference
    bytes (``bytes_per_token`` may be `traces.tokens.TokenRatios`; ``None``: the calibrated defaults).

    A budget below one byte or above 2**53 bytes, or an absurd bytes-per-token
    (`check_bytes_per_token`), raises `InputError` naming the option (``option`` and
    ``per_token_option``) and the value that is wrong.

    >>> budget_for_tokens(200_000, 3.8)
    ContextBudget(max_bytes=760000, max_entries=None)
    """
    per_token = check_bytes_per_token(bytes_per_token, per_token_option)
    tokens = positive_float(budget_tokens)
    if tokens is None:
        raise InputError(f"{option} must be a positive number of tokens, got {budget_tokens!r:.40}")
    if tokens * per_token > MAX_BUDGET_BYTES:
        raise InputError(f"{option} {tokens:g} is absurdly large: {tokens * per_token:.3g} bytes at "
                         f"{per_token:g} bytes per token, more than 2**53")
    max_bytes = int(tokens * per_token)
    if max_bytes < 1:
        raise InputError(f"{option} {tokens:g} is less than one byte at {per_token:g} bytes per token")
    return ContextBudget(max_bytes=max_bytes, max_entries=max_entries)


strategy_label = label_of


@dataclass
class ResolvedSession:
    """A session resolved once under a claim configuration and token ratios, shared by every
    strategy's and policy's replay and the optimal bounds: each arm's event stream and resolved
    steps, and the workspace when several arms share it."""

    session: SessionTrace
    claims: ClaimConfig | None
    arms: dict[str, Resolved]
    workspace: Workspace | None = None
    tokens: TokenRatios | None = None
    streams: dict[str, ArmStream] = field(default_factory=dict)


def resolve_session(st: SessionTrace, claims: ClaimConfig | None = None, *,
                    compiled: bool | None = None, tokens: "TokenRatios | float | None" = None) -> ResolvedSession:
    """Resolve each arm of ``st`` (through a `Workspace` under ``claims`` when it has arms), its
    events costing what ``tokens`` says (`SessionTrace.costs`)."""
    ratios = as_ratios(tokens)
    costs = st.costs(ratios)
    if st.arms is None:
        stream = ArmStream.from_turns(st.ops, st.paths, st.sizes, st.ts_ms, st.turns, costs=costs,
                                      kinds=st.kinds)
        return ResolvedSession(st, None, {"main": resolve_arm(stream, compiled=compiled)}, tokens=ratios,
                               streams={"main": stream})
    workspace = Workspace(claims or ClaimConfig())
    workspace.replay(st.turn_slices(), st.ops, st.paths.tolist(), st.sizes, st.ts_ms, st.arms, st.lines_changed,
                     costs, st.kinds)
    arms = {arm: resolve_arm(workspace.streams[arm], compiled=compiled) for arm in sorted(workspace.streams)}
    return ResolvedSession(st, claims, arms, workspace, ratios, dict(workspace.streams))


def replay_session(st: SessionTrace | ResolvedSession, strategy="lru", budget: ContextBudget | None = None,
                   settings: ReplaySettings | None = None, *, strategy_name: str | None = None,
                   claims: ClaimConfig | None = None, strategy_for_arm=None, compiled: bool | None = None,
                   strict: bool | None = None, bytes_per_token: "float | TokenRatios | None" = None,
                   max_directories: int | None = None, evict_timeout_ms: int | None = None,
                   cache_ttl_ms: int | None = None) -> SessionResult:
    """Replay one session under ``settings`` (`sim.engine.settings.ReplaySettings`); ``strategy`` is a spec
    (built fresh for each arm), an object or its adapter (`strategies.adapter.adapt`).

    An eviction strategy replays the managed context (`sim.engine.arm.replay_arm`); a transcript
    policy (`strategies.policy`) the append-only transcript (`sim.engine.transcript`); a
    ``STRATEGY+POLICY`` combination (`strategies.registry.CompactedStrategy`) the managed context
    with its conversation compacted as the policy compacts it (`sim.engine.rules.Compaction`).
    The row's ``model`` says which: ``managed`` or ``transcript``.

    ``st`` may be resolved already (`resolve_session`, which ``claims`` then does not change).
    ``strategy_for_arm(arm)``, when given, builds each arm's strategy (or its adapter) instead (an offline
    policy such as Belady-Size must know whose future it serves).

    A session with several arms runs through a `Workspace` under ``claims`` (default: claims
    disabled); its row then also carries the protocol's costs summed over arms, and
    ``SessionResult.arms`` one row per arm.

    ``settings.tokens`` is one ratio for every content kind, `traces.tokens.TokenRatios`, or ``None``
    for the calibrated defaults (a resolved session keeps the ratios it was resolved with). The keywords
    ``strict``, ``bytes_per_token`` (``tokens``), ``max_directories``, ``evict_timeout_ms`` and
    ``cache_ttl_ms`` change those of ``settings`` for this call.
    """
    started = time.perf_counter()
    settings = settings_of(settings, strict=strict, tokens=bytes_per_token, max_directories=max_directories,
                           evict_timeout_ms=evict_timeout_ms, cache_ttl_ms=cache_ttl_ms)
    resolved = (st if isinstance(st, ResolvedSession)
                else resolve_session(st, claims, compiled=compiled, tokens=settings.tokens))
    bytes_per_token = check_bytes_per_token(resolved.tokens if isinstance(st, ResolvedSession) else settings.tokens)
    budget = budget or budget_for_tokens(200_000, bytes_per_token)
    name = strategy_name or label_of(strategy)
    adapters: list[Adapter] = []
    replays: dict[str, ArmReplay] = {}
    for arm, arm_steps in resolved.arms.items():
        adapter = _arm_adapter(arm, strategy, strategy_for_arm, adapters)
        adapters.append(adapter)
        with contextlib.ExitStack() as stack:
            if isinstance(adapter.target, contextlib.AbstractContextManager):
                stack.enter_context(adapter.target)   # a strategy that holds resources (an external process)
            if adapter.kind == POLICY:
                replays[arm] = replay_transcript(
                    _stream(resolved, arm), arm_steps, adapter, budget.max_bytes, bytes_per_token, settings,
                    confirmation=_confirmation(resolved.tokens), strategy_name=name,
                    session=resolved.session.session, compiled=compiled)
            else:
                compaction = (compaction_rule(adapter.policy, resolved, arm, budget, bytes_per_token)
                              if adapter.kind == COMBINED else None)
                replays[arm] = replay_arm(arm_steps, adapter, budget, settings, strategy_name=name,
                                          session=resolved.session.session, compiled=compiled, compaction=compaction)
    model = "transcript" if any(a.kind == POLICY for a in adapters) else "managed"
    result = _session_result(resolved.session, name, adapters, replays, budget, bytes_per_token,
                             time.perf_counter() - started, model, settings.cache_ttl_ms)
    if resolved.workspace is not None:
        _add_workspace_results(result, resolved.workspace, replays, budget, bytes_per_token, settings.cache_ttl_ms)
    return result


def _stream(resolved: ResolvedSession, arm: str) -> ArmStream:
    """The event stream of ``arm`` (rebuilt for a session resolved without its streams)."""
    if arm not in resolved.streams:
        st = resolved.session
        resolved.streams[arm] = ArmStream.from_turns(st.ops, st.paths.tolist(), st.sizes, st.ts_ms, st.turns,
                                                     costs=st.costs(resolved.tokens), kinds=st.kinds)
    return resolved.streams[arm]


def _confirmation(tokens: TokenRatios | None) -> int:
    """What an edit's or a write's confirmation costs in reference bytes (it is tool output)."""
    return int(as_ratios(tokens).costs([CONFIRMATION_BYTES], [KINDS.index(CONFIRMATION_KIND)])[0])


def compaction_rule(policy, resolved: ResolvedSession, arm: str, budget: ContextBudget,
                bytes_per_token: float) -> Compaction:
    """How ``policy`` compacts the conversation of a managed context of ``budget``, in reference bytes.

    The trigger and the summary are held to `MAX_BUDGET_BYTES` (2**53), more than any trace's pinned
    content (2**51 at most), so both engines take every value the same way: one above it never fires.
    """
    trigger, summary, *trims = policy.managed_compaction(int(budget.max_bytes / bytes_per_token))
    steps = resolved.arms[arm]
    ops = np.asarray(_stream(resolved, arm).ops, dtype=np.int64)[np.asarray(steps.event, dtype=np.int64)]
    conversation = ((ops == MESSAGE) | (ops == CALL)).astype(np.int64)
    return Compaction(_held(trigger * bytes_per_token), _held(summary * bytes_per_token), conversation,
                      bool(trims and trims[0]))


def _held(value: float) -> int:
    """``value`` (reference bytes) as an integer between 0 and `MAX_BUDGET_BYTES`."""
    return int(min(max(value, 0), MAX_BUDGET_BYTES))


def _arm_adapter(arm: str, strategy, strategy_for_arm, earlier: list[Adapter]) -> Adapter:
    """The adapter of the strategy that replays ``arm``, given those of the arms before it."""
    if strategy_for_arm is not None:
        return adapt(strategy_for_arm(arm))
    if isinstance(strategy, str) or not earlier:
        return adapt(strategy)
    if earlier[0].stateful:
        # Each arm's history is its own: a stateful object is copied for every arm after the first.
        return adapt(copy.deepcopy(strategy))
    return earlier[0]


def _session_result(session: SessionTrace, name: str, adapters: list[Adapter], replays: dict[str, ArmReplay],
                    budget: ContextBudget, bytes_per_token: float, elapsed: float, model: str,
                    cache_ttl_ms: int) -> SessionResult:
    """The session's row (its arms' logs together), log and violations."""
    arm_logs = {arm: r.log for arm, r in replays.items()}
    log = next(iter(arm_logs.values())) if len(arm_logs) == 1 else TurnLog.concat(list(arm_logs.values()))
    row = {
        "trace": session.trace,
        "session": session.session,
        "strategy": name,
        "model": model,
        "pure": not any(a.stateful for a in adapters),
        "budget_bytes": budget.max_bytes,
        "events": len(session),
        "arms": len(replays),
        **summarise(log, budget.max_bytes, bytes_per_token, sum(r.oversize for r in replays.values()), cache_ttl_ms),
        "directory_evictions": sum(r.directory_evictions for r in replays.values()),
        "replay_s": elapsed,
        "log_hash": log.digest(),
    }
    messages = [msg for r in replays.values() for msg in r.violation_messages]
    return SessionResult(row=row, log=log, violation_messages=messages, arm_logs=arm_logs)


def _add_workspace_results(result: SessionResult, workspace: Workspace, replays: dict[str, ArmReplay],
                           budget: ContextBudget, bytes_per_token: float, cache_ttl_ms: int) -> None:
    """Protocol costs in the session row, and one row per arm."""
    totals = {name: sum(getattr(s, name) for s in workspace.stats.values()) for name in ARM_STAT_FIELDS}
    result.row.update(claims=workspace.claims.mode, **totals,
                      escalations=len(workspace.table.escalations))
    for arm, replayed in replays.items():
        result.arms.append({
            "trace": result.row["trace"], "session": result.row["session"], "strategy": result.row["strategy"],
            "claims": workspace.claims.mode, "arm": arm,
            **summarise(replayed.log, budget.max_bytes, bytes_per_token, replayed.oversize, cache_ttl_ms),
            **{name: getattr(workspace.stats[arm], name) for name in ARM_STAT_FIELDS},
        })
    result.thrashing = [dict(vars(e)) for e in workspace.table.events]
    result.escalations = [dict(vars(e)) for e in workspace.table.escalations]


def replay(trace: pd.DataFrame, strategy="lru", budget_tokens: float = 200_000,
           settings: ReplaySettings | None = None, **changes) -> pd.DataFrame:
    """Replay every session of ``trace`` under a strategy or a policy; one metrics row per session. Each session
    counts with ``settings.tokens`` when given (one ratio or `traces.tokens.TokenRatios`), else its model
    family's ratios (`traces.model_ratios`); ``changes`` are `replay_session`'s keywords."""
    settings = settings_of(settings, tokens=changes.pop("bytes_per_token", None), **changes)
    rows = []
    for st in split_sessions(trace):
        ratios = session_ratios(st.model, settings.tokens)[1]
        result = replay_session(st, strategy, budget_for_tokens(budget_tokens, ratios), settings.replace(tokens=ratios))
        rows.append({**result.row, "budget_tokens": budget_tokens})
    return pd.DataFrame(rows)
