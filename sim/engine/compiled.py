"""The compiled engine (``sim/engine/_engine.c``): whether it is built and runs, checked when it is imported
against the declaration of the per-turn row (`sim.engine.measures`) and the event vocabulary
(`traces.vocabulary`, the policy contract's roles): a drift fails loudly."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from ctxbench.sim.engine.core import MISSES
from ctxbench.sim.engine.measures import END_FIELDS, KEY_FIELDS, TALLY_FIELDS, EvictedIds
from ctxbench.strategies.adapter import adapt
from ctxbench.strategies.compiled import pure_python_requested
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.lru import LruStrategy
from ctxbench.strategies.policy import ITEM_SLOTS, ROLES, Append, Replace, Request, TranscriptItem
from ctxbench.traces.vocabulary import ADDS, ENGINE_OPS

__all__ = ["BUILT", "ENABLED", "engine", "StateView", "CoreArgs", "ManagedArgs", "TranscriptArgs", "NATIVE_NONE",
           "NATIVE_LRU", "NATIVE_BELADY_SIZE", "native_kernel", "register_kernel", "run", "check_fields",
           "check_vocabulary", "check_args"]

#: The kernels the compiled engine runs itself instead of calling a strategy's ``evict`` (`native_kernel`).
NATIVE_NONE, NATIVE_LRU, NATIVE_BELADY_SIZE = 0, 1, 2


@dataclass
class CoreArgs:
    """What every compiled replay gives the core (``core_args`` in ``sim/engine/_engine.c``): the model to plug in,
    the resolved steps and turn ends (`sim.engine.rules.Resolved`, int64 columns), the table of rows to fill, the
    entries' ids and the slots' paths, the prompt cache's lifetime, and how violations are reported."""

    model: str
    slot: np.ndarray
    need: np.ndarray
    need_bytes: np.ndarray
    miss: np.ndarray
    place: np.ndarray
    place_bytes: np.ndarray
    ts_ms: np.ndarray
    count: np.ndarray
    event: np.ndarray
    entry_slot: np.ndarray
    ends: np.ndarray
    end_turns: np.ndarray
    end_ts: np.ndarray
    rows: np.ndarray
    ids: list
    paths: list
    entries: dict
    cache_ttl_ms: int
    violations: object          # sim.engine.core.Violations
    failed: Callable            # sim.engine.core.failed_call


@dataclass
class ManagedArgs(CoreArgs):
    """The managed model's own (``managed_args`` in ``sim/engine/_managed.c``; `sim.engine.rules.Managed`)."""

    evict: Callable
    hooks: object | None
    reset_failure: str | None
    budget: ContextBudget
    max_bytes: int
    max_entries: int | None
    answer_ids: Callable
    describe: Callable
    dirs: np.ndarray | None
    max_directories: int | None
    trigger: int | None
    summary: int | None
    conversation: np.ndarray | None
    trim: int | None
    native: int
    native_cap: int | None


@dataclass
class TranscriptArgs(CoreArgs):
    """The transcript model's own (``transcript_args`` in ``sim/engine/_transcript.c``;
    `sim.engine.transcript.Transcript`)."""

    role_of: np.ndarray
    kind_of: np.ndarray
    adds_of: np.ndarray
    event_paths: list
    roles: tuple
    kinds: tuple
    edit: Callable
    admit: Callable | None
    read: Callable
    judge: Callable
    view_class: type
    window_type: type
    confirmation: int
    reference: float
    max_bytes: int


#: Per class (exactly that class, never a subclass, which may answer otherwise): what makes its kernel's arguments.
_KERNELS: dict[type, Callable] = {
    LruStrategy: lambda strategy, resolved: {"native": NATIVE_LRU, "native_cap": strategy.max_entries},
}


def register_kernel(cls: type, arguments: Callable) -> None:
    """Let the compiled engine run a kernel of its own for strategies of exactly ``cls``: ``arguments(strategy,
    resolved)`` gives the kernel's `ManagedArgs` fields (``native`` and its own), or None where it does not apply."""
    _KERNELS[cls] = arguments


def native_kernel(strategy, resolved=None) -> dict:
    """The `ManagedArgs` fields of the kernel the compiled engine runs itself for ``strategy`` (an object or its
    `strategies.adapter.Adapter`) on ``resolved`` (`NATIVE_LRU` for the built-in LRU with its entry cap; what
    `register_kernel` added), else ``native`` `NATIVE_NONE`: the strategy's ``evict`` is called once per turn end
    and its hooks as entries come and go (always, for an adapter whose calls are observed: recorded, counted)."""
    adapter = adapt(strategy)
    arguments = None if adapter.observed else _KERNELS.get(type(adapter.target))
    found = None if arguments is None else arguments(adapter.target, resolved)
    return {"native": NATIVE_NONE, "native_cap": None, **(found or {})}


def run(args: CoreArgs) -> tuple[EvictedIds, object]:
    """One replay on the compiled core: the ids removed at turn ends, and what the model gives
    (the rows are written into ``args.rows``)."""
    ids, turns, result = engine.replay(args)
    return EvictedIds(np.frombuffer(turns, np.int64), ids), result


def check_fields(module) -> None:
    """Raise ImportError unless the compiled engine records the declared per-turn fields, in their groups and order."""
    for name, declared in (("KEY_FIELDS", KEY_FIELDS), ("TALLY_FIELDS", TALLY_FIELDS), ("END_FIELDS", END_FIELDS)):
        compiled = tuple(getattr(module, name, ()))
        if compiled != declared:
            raise ImportError(f"sim/engine/_engine.c records the per-turn {name} {compiled}, but "
                              f"sim/engine/measures.py declares {declared}: rebuild, or make them agree")


def check_vocabulary(module) -> None:
    """Raise ImportError unless the compiled engine's op codes, what an event adds, its miss classes and the roles of
    a transcript are the vocabulary's (`traces.vocabulary`, `sim.engine.core.MISSES`, `strategies.policy.ROLES`)."""
    for name, declared in (("OPS", ENGINE_OPS), ("ADDS", ADDS), ("MISSES", MISSES), ("ROLES", ROLES)):
        compiled = tuple(getattr(module, name, ()))
        if compiled != declared:
            raise ImportError(f"sim/engine/_engine.c has {name} {compiled}, but the vocabulary declares {declared}: "
                              f"rebuild, or make them agree")


def check_args(module) -> None:
    """Raise ImportError unless the fields the compiled engine reads are those `CoreArgs`, `ManagedArgs` and
    `TranscriptArgs` declare, in order."""
    core = tuple(f.name for f in fields(CoreArgs))
    declared = {"core": core, "managed": tuple(f.name for f in fields(ManagedArgs))[len(core):],
                "transcript": tuple(f.name for f in fields(TranscriptArgs))[len(core):]}
    compiled = {name: tuple(names) for name, names in getattr(module, "ARGS", {}).items()}
    if compiled != declared:
        raise ImportError(f"sim/engine/_engine.c reads the arguments {compiled}, but sim/engine/compiled.py declares "
                          f"{declared}: rebuild, or make them agree")


try:
    from ctxbench.sim.engine import _engine as engine
except ImportError:   # not built (no C compiler at install): the specification runs instead
    engine = None

#: Whether the compiled engine is built, and whether it runs by default (``CTXBENCH_PURE_PYTHON`` unset or 0).
BUILT = engine is not None
ENABLED = BUILT and not pure_python_requested()

if engine is not None:
    check_fields(engine)
    check_vocabulary(engine)
    check_args(engine)

    class StateView(engine.StateViewBase, Sequence):
        """The resident entries in ``(last_accessed_at, id)`` order, with ``total_bytes``, read from
        the compiled engine's context; valid only during the ``evict`` call that receives it.
        Entries are made when first read: ``len`` costs O(1), a leading slice ``state[:k]`` O(k)."""

        __slots__ = ()
        recency_sorted = True

        def __repr__(self) -> str:
            return f"StateView({list(self._tuple())!r}, total_bytes={self.total_bytes})"

    engine.bind(ContextEntry, ContextBudget, StateView)
    engine.bind_transcript(TranscriptItem, ITEM_SLOTS, Replace, Append, Request)
else:
    StateView = None
