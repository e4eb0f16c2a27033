"""Replay one arm: resolve its events once, then replay them under any strategy and budget, on the
compiled engine where it is built and the specification (`sim.engine.rules`) elsewhere."""

from __future__ import annotations

import contextlib
import functools
import posixpath
from dataclasses import dataclass, field

import numpy as np

from ctxbench.sim.engine import rules
from ctxbench.sim.engine.compiled import ENABLED, engine
from ctxbench.sim.engine.measures import CACHE_TTL_MS, TURN_FIELDS, TurnLog
from ctxbench.sim.engine.rules import INVALIDATE, ArmStream, Compaction, Resolved
from ctxbench.sim.errors import ContractViolation
from ctxbench.strategies.calls import CallLimit, call_limit_for
from ctxbench.strategies.contract import ContextBudget, answer_ids
from ctxbench.strategies.stateful import StatefulContextStrategy

__all__ = ["ArmReplay", "resolve_arm", "replay_arm", "CACHE_TTL_MS"]

_STEP_COLUMNS = ("slot", "need", "need_bytes", "miss", "place", "place_bytes", "ts_ms", "count")
_END_COLUMNS = ("ends", "end_turns", "end_ts")


@dataclass
class ArmReplay:
    """What one arm's replay gave: its per-turn log, the violations counted, counters, and the ids
    resident at the end (in recency order)."""

    log: TurnLog
    violation_messages: list[str] = field(default_factory=list)
    oversize: int = 0
    directory_evictions: int = 0
    resident_ids: list[str] = field(default_factory=list)


def _use_compiled(compiled: bool | None) -> bool:
    if compiled and engine is None:
        raise ValueError("the compiled engine is not built (sim/engine/_engine.c); pass compiled=None or False")
    return ENABLED if compiled is None else bool(compiled)


def _int64(values) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _list(values) -> list:
    return values if isinstance(values, list) else np.asarray(values).tolist()


def resolve_arm(stream: ArmStream, *, compiled: bool | None = None) -> Resolved:
    """``stream`` resolved (`sim.engine.rules.Resolver`): its columns are int64 arrays when the compiled
    engine resolved it, lists otherwise; `replay_arm` takes either."""
    if not _use_compiled(compiled):
        return rules.resolve(stream)
    ops = _int64(stream.ops)
    n = len(ops)
    out = tuple(np.empty(n, np.int64) for _ in _STEP_COLUMNS + ("event",))
    entry_slot = np.empty(2 * n, np.int64)
    sizes = _int64(stream.sizes)
    costs = sizes if stream.costs is None else _int64(stream.costs)
    paths = stream.paths if isinstance(stream.paths, list) else list(stream.paths)
    steps, ids, paths, slots, entries = engine.resolve(ops, paths, sizes, costs, _int64(stream.ts_ms), out,
                                                       entry_slot)
    own = np.r_[0, np.cumsum(ops != INVALIDATE)]   # steps before each event: other arms' changes are none
    resolved = Resolved(stream.arm, paths, slots, ids, entry_slot[:len(ids)],
                        *(column[:steps] for column in out), ends=own[_int64(stream.ends)],
                        end_turns=_int64(stream.end_turns), end_ts=_int64(stream.end_ts))
    resolved.__dict__["_compiled"] = {"entries": entries}
    return resolved


def _directories(resolved: Resolved) -> np.ndarray:
    """Each slot's directory, numbered in name order; -1 for resources that are not files (``://``)."""
    names = [None if "://" in p else posixpath.dirname(p) for p in resolved.paths]
    number = {d: k for k, d in enumerate(sorted({d for d in names if d is not None}))}
    return np.array([-1 if d is None else number[d] for d in names], dtype=np.int64)


class _LimitedHooks:
    """A stateful strategy's hooks, each call through a `CallLimit`."""

    def __init__(self, hooks: StatefulContextStrategy, limit: CallLimit) -> None:
        self.hooks, self.limit = hooks, limit

    def on_insert(self, entry) -> None:
        self.limit.call(self.hooks.on_insert, entry)

    def on_access(self, entry) -> None:
        self.limit.call(self.hooks.on_access, entry)

    def on_remove(self, entry_id: str, evicted: bool) -> None:
        self.limit.call(self.hooks.on_remove, entry_id, evicted)


def replay_arm(resolved: Resolved, strategy, budget: ContextBudget, *, strict: bool = True,
               strategy_name: str = "", session: str = "", max_directories: int | None = None,
               evict_timeout_ms: int | None = None, cache_ttl_ms: int = CACHE_TTL_MS,
               compaction: Compaction | None = None, compiled: bool | None = None) -> ArmReplay:
    """Replay a resolved arm under ``strategy`` and ``budget`` (the rules of `sim.engine.rules.Context`),
    its conversation compacted as ``compaction`` says (`sim.engine.rules.Compaction`; None: never)."""
    name = strategy_name or repr(strategy)
    if not _use_compiled(compiled):
        lists = Resolved(resolved.arm, resolved.paths, resolved.slots, resolved.ids,
                         *(_list(getattr(resolved, c)) for c in ("entry_slot",) + _STEP_COLUMNS + ("event",)
                           + _END_COLUMNS))
        context = rules.replay(lists, strategy, budget, strict=strict, strategy_name=name, session=session,
                               max_directories=max_directories, evict_timeout_ms=evict_timeout_ms,
                               cache_ttl_ms=cache_ttl_ms, compaction=compaction)
        return ArmReplay(context.log(), context.violation_messages, context.oversize, context.directory_evictions,
                         context.resident_ids())
    messages: list[str] = []

    def violation(turn: int, code: int, detail, answer, turn_budget: ContextBudget) -> None:
        message = rules.violation_message(name, session, resolved.arm, turn,
                                          rules.describe_violation(code, detail, turn_budget), answer)
        if strict:
            raise ContractViolation(message)
        messages.append(message)

    limit = call_limit_for(strategy, evict_timeout_ms)
    evict, hooks, reset_failure = strategy.evict, None, None
    if isinstance(strategy, StatefulContextStrategy):
        hooks = strategy if limit is None else _LimitedHooks(strategy, limit)
        try:
            strategy.reset() if limit is None else limit.call(strategy.reset)
        except BaseException as exc:   # reported at the first turn's end, as any hook's failure
            reset_failure = rules.failed_call(exc, "reset")
    if limit is not None:
        evict = functools.partial(limit.call, strategy.evict)
    cache = resolved.__dict__.setdefault("_compiled", {})
    if "entries" not in cache:
        cache["entries"] = {entry_id: e for e, entry_id in enumerate(resolved.ids)}
    if max_directories is not None and "dirs" not in cache:
        cache["dirs"] = _directories(resolved)
    rows = np.empty((len(resolved.ends), len(TURN_FIELDS)), np.int64)
    with limit or contextlib.nullcontext():   # the time limit's handler, installed once
        evicted, oversize, directory_evictions, resident = engine.replay(
            tuple(_int64(getattr(resolved, c)) for c in _STEP_COLUMNS),
            tuple(_int64(getattr(resolved, c)) for c in _END_COLUMNS),
            resolved.ids, resolved.paths, cache["entries"], _int64(resolved.entry_slot),
            cache.get("dirs") if max_directories is not None else None, max_directories, evict, hooks, budget,
            budget.max_bytes, budget.max_entries, answer_ids, rules.failed_call, violation, reset_failure, rows,
            cache_ttl_ms, None if compaction is None else compaction.trigger_bytes,
            None if compaction is None else compaction.summary_bytes,
            None if compaction is None else _int64(compaction.conversation))
    return ArmReplay(TurnLog(rows, evicted), messages, oversize, directory_evictions, resident)
