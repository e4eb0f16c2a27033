"""Replay one arm: resolve its events once, then replay them under any strategy and budget, on the
compiled engine where it is built and the specification (`sim.engine.rules`) elsewhere."""

from __future__ import annotations

import contextlib
import posixpath
from dataclasses import dataclass, field

import numpy as np

from ctxbench.sim.engine import rules
from ctxbench.sim.engine.compiled import ENABLED, NATIVE_NONE, ManagedArgs, engine, native_kernel, run
from ctxbench.sim.engine.core import Violations, failed_call
from ctxbench.sim.engine.interned import InternedPaths
from ctxbench.sim.engine.measures import CACHE_TTL_MS, TURN_FIELDS, TurnLog
from ctxbench.sim.engine.rules import INVALIDATE, ArmStream, Compaction, Resolved
from ctxbench.sim.engine.settings import DEFAULT_SETTINGS, ReplaySettings
from ctxbench.strategies.adapter import adapt
from ctxbench.strategies.calls import call_limit_for
from ctxbench.strategies.contract import ContextBudget, answer_ids

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
    paths = stream.paths
    if isinstance(paths, InternedPaths):   # codes into the names: each name's slot is found once
        paths = (paths.codes.astype(np.int64), paths.names)
    elif not isinstance(paths, list):
        paths = list(paths)
    steps, ids, paths, slots, entries = engine.resolve(ops, paths, sizes, costs, _int64(stream.ts_ms), out,
                                                       entry_slot)
    ends = _int64(stream.ends)
    if steps < n:   # steps before each turn end: other arms' changes (INVALIDATE) are none
        ends = np.r_[0, np.cumsum(ops != INVALIDATE)][ends]
    resolved = Resolved(stream.arm, paths, slots, ids, entry_slot[:len(ids)],
                        *(column[:steps] for column in out), ends=ends,
                        end_turns=_int64(stream.end_turns), end_ts=_int64(stream.end_ts))
    resolved.__dict__["_compiled"] = {"entries": entries}   # what `_compiled_tables` would make
    return resolved


def _directories(resolved: Resolved) -> np.ndarray:
    """Each slot's directory, numbered in name order; -1 for resources that are not files (``://``)."""
    names = [None if "://" in p else posixpath.dirname(p) for p in resolved.paths]
    number = {d: k for k, d in enumerate(sorted({d for d in names if d is not None}))}
    return np.array([-1 if d is None else number[d] for d in names], dtype=np.int64)


def replay_arm(resolved: Resolved, strategy, budget: ContextBudget, settings: ReplaySettings = DEFAULT_SETTINGS, *,
               strategy_name: str = "", session: str = "", compaction: Compaction | None = None,
               compiled: bool | None = None) -> ArmReplay:
    """Replay a resolved arm under ``strategy`` (an object, a spec or its `strategies.adapter.Adapter`), ``budget``
    and ``settings`` (the rules of `sim.engine.rules.Managed`), its conversation compacted as ``compaction`` says
    (`sim.engine.rules.Compaction`; None: never)."""
    adapter = adapt(strategy)
    name = strategy_name or repr(adapter.target)
    if not _use_compiled(compiled):
        lists = Resolved(resolved.arm, resolved.paths, resolved.slots, resolved.ids,
                         *(_list(getattr(resolved, c)) for c in ("entry_slot",) + _STEP_COLUMNS + ("event",)
                           + _END_COLUMNS))
        replayed, model = rules.replay(lists, adapter, budget, settings, strategy_name=name, session=session,
                                       compaction=compaction)
        return ArmReplay(replayed.log(), model.violations.messages, model.oversize, model.directory_evictions,
                         model.resident_ids())
    violations = Violations(name, session, resolved.arm, settings.strict, adapter.noun)
    limit = call_limit_for(adapter.target, settings.evict_timeout_ms)
    kernel = native_kernel(adapter, resolved)
    limited = adapter.limited(limit)
    hooks, reset_failure = None, None
    if limited.hooks is not None and kernel["native"] == NATIVE_NONE:
        hooks = limited.hooks
        try:
            hooks.reset()
        except BaseException as exc:   # reported at the first turn's end, as any hook's failure
            reset_failure = failed_call(exc, "reset")
    max_directories = settings.max_directories
    cache = _compiled_tables(resolved)
    if max_directories is not None and "dirs" not in cache:
        cache["dirs"] = _directories(resolved)
    args = ManagedArgs(
        "managed", **_core_columns(resolved), rows=np.empty((len(resolved.ends), len(TURN_FIELDS)), np.int64),
        ids=resolved.ids, paths=resolved.paths, entries=cache["entries"], cache_ttl_ms=settings.cache_ttl_ms,
        violations=violations, failed=failed_call, evict=limited.call, hooks=hooks, reset_failure=reset_failure,
        budget=budget, max_bytes=budget.max_bytes, max_entries=budget.max_entries, answer_ids=answer_ids,
        describe=rules.describe_violation, dirs=cache.get("dirs") if max_directories is not None else None,
        max_directories=max_directories, trigger=None if compaction is None else compaction.trigger_bytes,
        summary=None if compaction is None else compaction.summary_bytes,
        conversation=None if compaction is None else _int64(compaction.conversation),
        trim=None if compaction is None else int(compaction.trim), **kernel)
    with limit or contextlib.nullcontext():   # the time limit's handler, installed once
        evicted, (oversize, directory_evictions, resident) = run(args)
    return ArmReplay(TurnLog(args.rows, evicted), violations.messages, oversize, directory_evictions, resident)


def _compiled_tables(resolved: Resolved) -> dict:
    """What the compiled engine reads of a resolution besides its columns, made once: each entry's index by id."""
    cache = resolved.__dict__.setdefault("_compiled", {})
    if "entries" not in cache:
        cache["entries"] = {entry_id: e for e, entry_id in enumerate(resolved.ids)}
    return cache


def _core_columns(resolved: Resolved) -> dict[str, np.ndarray]:
    """The resolved steps and turn ends as the compiled core reads them (`sim.engine.compiled.CoreArgs`)."""
    return {c: _int64(getattr(resolved, c)) for c in _STEP_COLUMNS + ("event", "entry_slot") + _END_COLUMNS}
