"""Conformance checker: does a strategy keep the contract of docs/design.md §1, and how fast is it?

`check_strategy` draws states and budgets with hypothesis (seeded, no example database, so
a run is reproducible), calls ``evict`` on each and looks for every kind of violation in
`KINDS`. Each kind found is shrunk to a minimal example, given in the TypeScript JSON form
of `strategies.contract.dump_request` so it can be replayed on either side. Hash-seed
independence is tested by answering a fixed batch of requests again in a subprocess with
another ``PYTHONHASHSEED``; latency is the p50/p99 of ``evict`` on over-budget states of
100 and 10,000 entries.

A call is judged as the simulator judges it (`strategies.calls.call_failure`): an `Exception`
*raises*, any other `BaseException` (``sys.exit``, a `KeyboardInterrupt` of the strategy's own)
*leaves*, and with a per-call limit (``evict_timeout_ms``) a call past it is *time-limit*; a
real Ctrl-C stops the check. The shape of an answer is the simulator's rule too
(`strategies.contract.answer_ids`): a list or tuple, judged before any of it is read, of which
at most one id more than the state has entries is read. An answer longer than the state fails
``bad-return`` at once (the simulator names the first wrong id among those it read instead):
an endless generator or ten million ids cost no more than the strategy's own call.

Each kind is one small function of a `_Trial` (the calls made on one request), run from the table
`_CHECKS`; `check_request` runs them on one request, as the contract-test mixin does. Code
ctxbench does not ship (an import path, an entry point) is checked in a process of its own, as
``ctxbench run`` replays it (`strategies.isolation.StrategyProcess`): a process that ends during a call
(``os._exit``, a crash, a signal) *leaves*, and the next call starts a fresh one.
"""

from __future__ import annotations

import copy
import functools
import gc
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from random import Random
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from ctxbench.strategies.base import CappedStrategy
from ctxbench.strategies.calls import LEAVES, RAISES, TIME_LIMIT, CallLimit, LimitedSubject, call_failure
from ctxbench.strategies.contract import (
    ContextBudget,
    ContextEntry,
    ContextState,
    ContextStrategy,
    answer_base,
    answer_ids,
    dump_request,
    min_cap,
    shown,
)
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.isolation import StrategyEnded, StrategyProcess, check_loads, loads_code
from ctxbench.strategies.registry import FunctionStrategy, make
from ctxbench.strategies.stateful import is_pure

__all__ = [
    "KINDS",
    "CheckFailure",
    "CheckReport",
    "Latency",
    "Request",
    "check_request",
    "check_strategy",
    "context_requests",
    "over_budget_state",
]

KINDS: dict[str, str] = {
    "raises": "evict returns without raising",
    "leaves": "evict returns instead of leaving (sys.exit, a KeyboardInterrupt of its own, another BaseException, "
              "ending its process)",
    "time-limit": "evict returns within the per-call time limit (checked with --evict-timeout-ms)",
    "bad-return": "evict returns a list or tuple of at most as many ids as the state has entries",
    "non-string": "every evicted id is a string",
    "unknown-id": "every evicted id is in the state",
    "duplicate": "no id is evicted twice",
    "nondeterministic": "a repeated call gives the same answer",
    "order-dependent": "a shuffled state gives the same answer",
    "mutates-input": "the state and the budget are left untouched",
    "over-budget": "what remains fits budget.max_bytes",
    "over-entries": "what remains fits budget.max_entries",
    "hash-seed": "another PYTHONHASHSEED gives the same answer",
}
"""Each kind of violation the checker looks for, with the property it stands for."""

LATENCY_SIZES = (100, 10_000)
_HASHSEED_BATCH = 48
_HASHSEED_TIMEOUT_S = 120
_CONTAINERS = ("list", "tuple", "context-state")


def _fresh(entries: Iterable[ContextEntry]) -> list[ContextEntry]:
    """New entry objects with the same values, so a strategy that mutates one harms no other call."""
    return [copy.copy(e) for e in entries]


@dataclass(frozen=True)
class Request:
    """One generated call: a state, a budget, a shuffle of the state and a container type to repeat it in."""

    state: tuple[ContextEntry, ...]
    budget: ContextBudget
    shuffle: tuple[int, ...]
    container: str = "list"

    def as_container(self) -> Sequence[ContextEntry]:
        """A fresh copy of the state in this request's container type."""
        entries = _fresh(self.state)
        if self.container == "list":
            return entries
        if self.container == "tuple":
            return tuple(entries)
        return ContextState(entries)

    def recency_sorted(self) -> ContextState:
        """A fresh copy of the state sorted by ``(last_accessed_at, id)`` and flagged so."""
        return ContextState(sorted(_fresh(self.state), key=lambda e: (e.last_accessed_at, e.id)),
                            recency_sorted=True)

    def json(self) -> str:
        """The state and budget as the TypeScript runtime writes them."""
        return dump_request(self.state, self.budget)


@dataclass(frozen=True)
class CheckFailure:
    """One kind of violation, with a minimal example and what went wrong on it."""

    kind: str
    message: str
    example: str | None = None  # {"state": [...], "budget": {...}} as dump_request writes it
    property: str = ""          # the property it breaks, where it is not `KINDS`' (a policy's check)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, with the example parsed."""
        return {"kind": self.kind, "property": self.property or KINDS.get(self.kind, ""), "message": self.message,
                "example": None if self.example is None else json.loads(self.example)}


@dataclass(frozen=True)
class Latency:
    """Latency of ``evict`` on one state size, in nanoseconds (``error`` if it could not be timed)."""

    entries: int
    calls: int
    p50_ns: int | None
    p99_ns: int | None
    max_ns: int | None
    evicted: int | None = None
    error: str | None = None


@dataclass
class CheckReport:
    """The outcome of `check_strategy`: failures (empty when it conforms), latency and notes."""

    strategy: str
    examples: int
    seed: int
    failures: list[CheckFailure] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    pure: bool = True  # False: a stateful strategy, reset() before every call
    compiled: bool = False  # a built-in running its compiled kernel (`strategies.base.CappedStrategy.compiled`)

    @property
    def ok(self) -> bool:
        """Whether no violation was found."""
        return not self.failures

    def failure(self, kind: str) -> CheckFailure | None:
        """The failure of ``kind``, if any."""
        return next((f for f in self.failures if f.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form of the whole report."""
        return {
            "strategy": self.strategy,
            "ok": self.ok,
            "examples": self.examples,
            "seed": self.seed,
            "pure": self.pure,
            "compiled": self.compiled,
            "checked": list(self.checked),
            "skipped": dict(self.skipped),
            "failures": [f.to_dict() for f in self.failures],
            "latency": [asdict(lat) for lat in self.latency],
        }


# --- generated requests -------------------------------------------------------------------

def _path(i: int) -> str:
    return f"tool://bash/{i}" if i % 8 == 7 else f"src/m{i}.py"


def _entry(i: int, rev: int, t: int, size: int, count: int | None) -> ContextEntry:
    path = _path(i)
    return ContextEntry(f"{path}:{rev}", path, t, size, count)


# Built once: constructing hypothesis strategies inside a draw costs more than the draw.
_ENTRIES = st.builds(
    _entry,
    st.integers(0, 63),
    st.integers(0, 3),
    st.integers(0, 16) | st.integers(0, 2 ** 42),
    st.integers(0, 64) | st.integers(0, 2 ** 24),
    st.none() | st.integers(0, 16),
)
_CONTAINER = st.sampled_from(_CONTAINERS)


@functools.lru_cache(maxsize=None)
def _entry_lists(max_entries: int) -> st.SearchStrategy[list[ContextEntry]]:
    return st.lists(_ENTRIES, max_size=max_entries, unique_by=lambda e: e.path)


@st.composite
def context_requests(draw: Callable[..., Any], max_entries: int = 16) -> Request:
    """Hypothesis strategy for `Request`: unique ``{path}:{rev}`` ids, ties likely, any budget.

    Times and sizes come mostly from small ranges so that ties in recency, size and score
    are common, and sometimes from large ones; ``access_count`` is sometimes absent. The
    budget ranges from 0 to just above the state's total, with an optional entry cap.
    """
    entries = draw(_entry_lists(max_entries))
    n = len(entries)
    total = sum(e.size_bytes for e in entries)
    budget = ContextBudget(
        max_bytes=draw(st.integers(0, total + 8)),
        max_entries=draw(st.none() | st.integers(0, n + 1)),
    )
    shuffle = tuple(draw(st.permutations(range(n)))) if n > 1 else tuple(range(n))
    return Request(tuple(entries), budget, shuffle, draw(_CONTAINER))


def _fixed_requests(seed: int, count: int = _HASHSEED_BATCH) -> list[Request]:
    """A reproducible batch of small requests, smallest first, with many ties."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        n = 2 + k * 10 // count
        idx = rng.choice(64, size=n, replace=False)
        times = rng.integers(0, 4, n)
        sizes = rng.choice([0, 1, 10, 100], size=n)
        counts = rng.integers(0, 4, n)
        absent = rng.random(n) < 0.3
        entries = tuple(
            ContextEntry(f"{_path(int(i))}:{int(rng.integers(0, 3))}", _path(int(i)), int(t), int(s),
                         None if a else int(c))
            for i, t, s, c, a in zip(idx, times, sizes, counts, absent))
        total = sum(e.size_bytes for e in entries)
        cap = None if rng.random() < 0.5 else int(rng.integers(0, n + 1))
        out.append(Request(entries, ContextBudget(int(rng.integers(0, total + 1)), cap), tuple(range(n))))
    return out


def over_budget_state(n: int, rng: np.random.Generator) -> tuple[tuple[ContextEntry, ...], ContextBudget]:
    """A full context of ``n`` entries (heavy-tailed sizes, some ties) and a budget 5% below it."""
    times = 1_700_000_000_000 + np.sort(rng.integers(0, 3_600_000, n))
    sizes = np.maximum(rng.lognormal(7.5, 1.2, n), 1).astype(np.int64)
    counts = rng.geometric(0.4, n)
    paths = [f"src/pkg{i // 50}/mod{i}.py" for i in range(n)]
    state = tuple(ContextEntry(f"{paths[i]}:{int(rng.integers(0, 4))}", paths[i], int(times[i]),
                               int(sizes[i]), int(counts[i])) for i in rng.permutation(n))
    return state, ContextBudget(max_bytes=int(sizes.sum() * 0.95))


# --- one call, judged --------------------------------------------------------------------

class _Caller:
    """Calls a strategy as the checker does: ``reset()`` first if it is stateful, under the optional limit.

    The method running is kept in ``_in`` for the message of a failure, and in ``method`` (a shared
    ``ctypes`` char array) too when given, where the parent of the strategy's own process reads it."""

    def __init__(self, strategy: ContextStrategy, limit: CallLimit | None, method: Any = None) -> None:
        self.strategy, self.limit, self.method = strategy, limit, method
        self._reset = None if is_pure(strategy) else strategy.reset  # a fresh history for every call
        self._in = "evict"

    def entering(self, name: str) -> None:
        """Note that the strategy's ``name`` method is about to run."""
        self._in = name
        if self.method is not None:
            self.method.value = name.encode()

    def _once(self, state: Sequence[ContextEntry], budget: ContextBudget) -> Any:
        if self._reset is not None:
            self.entering("reset")
            self._reset()
        self.entering("evict")
        return self.strategy.evict(state, budget)

    def __call__(self, state: Sequence[ContextEntry], budget: ContextBudget) -> tuple[Any, str | None, str | None]:
        """The answer, or ``None``, the kind of failure (`call_failure`) and what happened ("evict raised ...")."""
        try:
            if self.limit is None:
                return self._once(state, budget), None, None
            return self.limit.call(self._once, state, budget), None, None
        except BaseException as exc:  # any way out of a strategy is a finding; a real interrupt is passed on
            kind, text = call_failure(exc)
            return None, kind, f"{self._in} {text}"


def _ids(result: Any, state: Sequence[ContextEntry]) -> list[Any] | None:
    """The answer's ids (`answer_ids`; ``str`` subclasses read as plain strings), or None when refused."""
    ids = answer_ids(result, len(state))[0]
    return None if ids is None else [str.__str__(i) if issubclass(type(i), str) else i for i in ids]


def _length(result: Any) -> int | None:
    """How many ids a list or tuple answer holds (its own ``__len__`` is not called); None for another answer."""
    base = answer_base(result)
    return None if base is None else base.__len__(result)


def _short(ids: Sequence[Any], limit: int = 12) -> str:
    shown_ids = ", ".join(shown(i) for i in list(ids)[:limit])
    return f"[{shown_ids}{', ...' if len(ids) > limit else ''}]"


def _later(kind: str, otherwise: str) -> str:
    """The kind of a failed call after the first: leaving or running past the limit is its own, raising is ``otherwise``."""
    return kind if kind in (LEAVES, TIME_LIMIT) else otherwise


class _Trial:
    """The calls the checks of one request look at: the first, made at once; a repeated call and calls on
    the same entries reordered, each made once, when a check first needs it (and only when the answer
    before it could be judged)."""

    def __init__(self, call: _Caller, req: Request, entry_cap: int | None = None) -> None:
        self.call, self.req, self.entry_cap = call, req, entry_cap
        self.state, self.budget = _fresh(req.state), copy.copy(req.budget)   # as the first call leaves them
        self.result, self.kind, self.error = call(self.state, self.budget)

    @functools.cached_property
    def ids(self) -> list[Any] | None:
        """The first answer's ids, or None when the call failed or its answer is refused."""
        return None if self.kind is not None else _ids(self.result, self.req.state)

    @functools.cached_property
    def judged(self) -> list[Any] | None:
        """The first answer's ids when they can be judged: no more than the state's entries."""
        return self.ids if self.ids is not None and len(self.ids) <= len(self.req.state) else None

    @functools.cached_property
    def strings(self) -> list[str]:
        """The judged ids that are strings."""
        return [i for i in self.judged if type(i) is str]

    @functools.cached_property
    def left(self) -> list[ContextEntry]:
        """The entries a judged answer keeps."""
        gone = set(self.strings)
        return [e for e in self.req.state if e.id not in gone]

    @functools.cached_property
    def repeated(self) -> tuple[str, str] | None:
        """How a repeated call (on the state in the request's container) broke the contract: (kind, message)."""
        ids = self.judged
        if ids is None:
            return None
        again, kind, error = self.call(self.req.as_container(), copy.copy(self.req.budget))
        if kind is not None:
            return _later(kind, "nondeterministic"), f"first call returned {_short(ids)}, then on a repeated call {error}"
        again_ids = _ids(again, self.req.state)
        if again_ids == ids:
            return None
        where = "" if self.req.container == "list" else f" (on the same state as a {self.req.container})"
        return "nondeterministic", (f"first call returned {_short(ids)}, a repeated call{where} "
                                    f"returned {_short(again_ids if again_ids is not None else [again])}")

    @functools.cached_property
    def reordered(self) -> tuple[str, str] | None:
        """How a call on the same entries in another order (shuffled, then recency-sorted) broke the contract,
        after a repeated call that did not: (kind, message)."""
        ids, req = self.judged, self.req
        if ids is None or self.repeated is not None:
            return None
        orders = [(req.recency_sorted(), "as a recency-sorted ContextState in the order")]
        if req.shuffle != tuple(range(len(req.state))):
            orders.insert(0, (tuple(_fresh(req.state[i] for i in req.shuffle)), "in the order"))
        for state, how in orders:
            moved, kind, error = self.call(state, copy.copy(req.budget))
            moved_ids = None if kind is not None else _ids(moved, state)
            if kind is not None or moved_ids != ids:
                what = error if kind is not None else \
                    f"returned {_short(moved_ids if moved_ids is not None else [moved])}"
                return _later(kind, "order-dependent"), (f"returned {_short(ids)} for the state as given, but {what} "
                                                         f"for the same entries {how} {_short([e.id for e in state])}")
        return None

    def failed(self, kind: str) -> str | None:
        """The message of the call that failed as ``kind`` (leaving or running past the limit: any call)."""
        if self.kind is not None:
            return self.error if self.kind == kind else None
        if kind not in (LEAVES, TIME_LIMIT):
            return None
        return next((problem[1] for problem in (self.repeated, self.reordered) if problem and problem[0] == kind), None)


def _returns_without_raising(t: _Trial) -> str | None:
    """evict returns without raising."""
    return t.failed(RAISES)


def _leaves_its_input_untouched(t: _Trial) -> str | None:
    """The state and the budget are left untouched."""
    if t.kind is not None:
        return None
    before = list(t.req.state)
    if t.state != before:
        after = [getattr(e, "id", e) for e in t.state]
        if after != [e.id for e in before]:
            return f"evict changed the state list it was given: ids before {_short([e.id for e in before])}, after " \
                   f"{_short(after)}"
        changed = next(a for a, b in zip(t.state, before) if a != b)
        return f"evict changed entry {changed.id!r} of its input to {changed!r}"
    return f"evict changed its budget to {t.budget!r}" if t.budget != t.req.budget else None


def _returns_a_list_no_longer_than_the_state(t: _Trial) -> str | None:
    """evict returns a list or tuple of at most as many ids as the state has entries."""
    if t.kind is not None:
        return None
    if t.ids is None:
        return f"evict {answer_ids(t.result, len(t.req.state))[1]}"
    if t.judged is None:   # `ids` holds one more than the state: the rest was not read
        return f"evict returned {_length(t.result):,} ids for a state of {len(t.req.state):,} entries"
    return None


def _evicts_strings(t: _Trial) -> str | None:
    """Every evicted id is a string."""
    if t.judged is None or len(t.strings) == len(t.judged):
        return None
    bad = next(i for i in t.judged if type(i) is not str)
    return f"evict returned {shown(bad)} ({type(bad).__name__}) among its ids {_short(t.judged)}"


def _evicts_ids_of_the_state(t: _Trial) -> str | None:
    """Every evicted id is in the state."""
    if t.judged is None:
        return None
    known = {e.id for e in t.req.state}
    unknown = next((i for i in t.strings if i not in known), None)
    return None if unknown is None else f"evicted {unknown!r}, which is not in the state {_short(sorted(known))}"


def _evicts_each_id_once(t: _Trial) -> str | None:
    """No id is evicted twice."""
    if t.judged is None:
        return None
    seen: set[str] = set()
    dup = next((i for i in t.strings if i in seen or seen.add(i)), None)
    return None if dup is None else f"evicted {dup!r} twice: {_short(t.judged)}"


def _leaves_what_fits_max_bytes(t: _Trial) -> str | None:
    """What remains fits budget.max_bytes."""
    if t.judged is None:
        return None
    left_bytes = sum(e.size_bytes for e in t.left)
    if left_bytes <= t.req.budget.max_bytes:
        return None
    return (f"after evicting {_short(t.judged)}, {left_bytes} bytes remain in {len(t.left)} entries "
            f"> max_bytes {t.req.budget.max_bytes}")


def _leaves_what_fits_max_entries(t: _Trial) -> str | None:
    """What remains fits budget.max_entries (and the strategy's own entry cap, when one is given)."""
    if t.judged is None:
        return None
    cap = min_cap(t.req.budget.max_entries, t.entry_cap)
    if cap is None or len(t.left) <= cap:
        return None
    name = "max_entries" if cap == t.req.budget.max_entries else "the strategy's entry cap"
    return f"after evicting {_short(t.judged)}, {len(t.left)} entries remain > {name} {cap}"


def _answers_the_same_again(t: _Trial) -> str | None:
    """A repeated call gives the same answer."""
    return t.repeated[1] if t.repeated is not None and t.repeated[0] == "nondeterministic" else None


def _answers_the_same_in_any_order(t: _Trial) -> str | None:
    """A shuffled (or recency-sorted) state gives the same answer."""
    return t.reordered[1] if t.reordered is not None and t.reordered[0] == "order-dependent" else None


def _returns_instead_of_leaving(t: _Trial) -> str | None:
    """evict returns instead of leaving (sys.exit, a KeyboardInterrupt of its own, another BaseException)."""
    return t.failed(LEAVES)


def _returns_within_the_time_limit(t: _Trial) -> str | None:
    """evict returns within the per-call time limit."""
    return t.failed(TIME_LIMIT)


#: One check per kind of violation but ``hash-seed`` (`_check_hashseed`), in the order they are looked for:
#: the first answer's, then the repeated and reordered calls' (a failed call is reported as what it did).
_CHECKS: tuple[tuple[str, Callable[[_Trial], str | None]], ...] = (
    ("raises", _returns_without_raising),
    ("mutates-input", _leaves_its_input_untouched),
    ("bad-return", _returns_a_list_no_longer_than_the_state),
    ("non-string", _evicts_strings),
    ("unknown-id", _evicts_ids_of_the_state),
    ("duplicate", _evicts_each_id_once),
    ("over-budget", _leaves_what_fits_max_bytes),
    ("over-entries", _leaves_what_fits_max_entries),
    ("nondeterministic", _answers_the_same_again),
    ("order-dependent", _answers_the_same_in_any_order),
    ("leaves", _returns_instead_of_leaving),
    ("time-limit", _returns_within_the_time_limit),
)


def _violations(call: _Caller, req: Request, entry_cap: int | None = None) -> dict[str, str]:
    """Every kind of violation the strategy shows on ``req``, each with a one-line explanation."""
    trial = _Trial(call, req, entry_cap)
    return {kind: message for kind, check in _CHECKS if (message := check(trial)) is not None}


def check_request(strategy: ContextStrategy, req: Request, *, entry_cap: int | None = None) -> dict[str, str]:
    """The checks `check_strategy` makes on each generated request, on ``req``: every kind of violation
    (`KINDS` but ``hash-seed``) ``strategy`` shows, with its message. A stateful strategy is reset before
    each call; ``entry_cap``, the strategy's own cap, tightens ``over-entries``."""
    return _violations(_Caller(strategy, None), req, entry_cap)


class _Subject(LimitedSubject):
    """The strategy under check, called in this process: requests judged, answers encoded, latency timed.
    A ``with`` block installs the per-call limit's handler once."""

    def __init__(self, strategy: ContextStrategy, evict_timeout_ms: int | None, method: Any = None) -> None:
        super().__init__(strategy, evict_timeout_ms)
        self.call = _Caller(strategy, self.limit, method)
        self.pure = is_pure(strategy)
        self.compiled = isinstance(strategy, CappedStrategy) and strategy.compiled

    def describe(self) -> tuple[bool, bool, bool]:
        """Whether the strategy is pure, a compiled kernel, and under a per-call limit."""
        return self.pure, self.compiled, self.limited

    def violations(self, req: Request) -> dict[str, str]:
        """`_violations` of ``req``."""
        return _violations(self.call, req)

    def answer(self, req: Request) -> Any:
        """The answer to ``req`` as JSON (`_encoded`)."""
        return _encoded(self.call, _fresh(req.state), copy.copy(req.budget))

    def latency(self, n: int, seed: int) -> Latency:
        """`_latency` on ``n`` entries."""
        return _latency(self.call, n, seed)


def _subject_there(evict_timeout_ms: int | None, strategy: ContextStrategy, method: Any) -> _Subject:
    """The subject in the strategy's own process, its limit's handler installed for the process's life."""
    return _Subject(strategy, evict_timeout_ms, method).__enter__()


class _IsolatedSubject:
    """The strategy under check in a process of its own (`strategies.isolation.StrategyProcess`), as a run runs code
    ctxbench does not ship: a process that ends is a call that leaves, and the next call starts a fresh one."""

    def __init__(self, spec: str, evict_timeout_ms: int | None) -> None:

        check_loads(spec)   # a factory that raises or ends its process is a load error, as in a run
        self._ended = StrategyEnded
        self.process = StrategyProcess(spec, functools.partial(_subject_there, evict_timeout_ms))
        self.evict_timeout_ms = evict_timeout_ms
        try:
            self.pure, self.compiled, self.limited = self.process.call("describe")
        except StrategyEnded as ended:
            self.process.close()
            raise StrategyLoadError(f"cannot build strategy {spec!r}: loading it ended the process "
                                    f"({ended.status})") from None

    def __enter__(self) -> "_IsolatedSubject":
        return self

    def __exit__(self, *exc) -> None:
        self.process.close()

    def _left(self, ended) -> str:
        return f"{ended.what}: a strategy must return, not leave"

    def violations(self, req: Request) -> dict[str, str]:
        """`_violations` of ``req``, or ``leaves`` when the strategy's process ended."""
        try:
            return self.process.call("violations", req)
        except self._ended as ended:
            return {LEAVES: self._left(ended)}

    def answer(self, req: Request) -> Any:
        """The answer to ``req`` as JSON, ``{"error": "leaves"}`` when the strategy's process ended."""
        try:
            return self.process.call("answer", req)
        except self._ended:
            return {"error": LEAVES}

    def latency(self, n: int, seed: int) -> Latency:
        """`_latency` on ``n`` entries, or its error when the strategy's process ended."""
        try:
            return self.process.call("latency", n, seed)
        except self._ended as ended:
            return Latency(n, 0, None, None, None, error=self._left(ended))


# --- the search ------------------------------------------------------------------------------

def _settings(examples: int, shrink: bool) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        derandomize=True,
        deadline=None,
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )


def search_violations(judge: Callable, examples: int, seed: int, requests=None,
                      minimise: Callable | None = None) -> dict[str, tuple]:
    """Explore ``examples`` requests drawn from ``requests`` (a hypothesis strategy; the strategies'
    states by default), then shrink one example of each kind ``judge`` finds (``minimise(judge,
    kind, req)`` after hypothesis's shrinker)."""
    requests = context_requests() if requests is None else requests
    first: dict[str, tuple] = {}

    def record(req) -> bool:
        for kind, message in judge(req).items():
            first.setdefault(kind, (req, message))
        return False

    try:
        find(requests, record, settings=_settings(examples, shrink=False), random=Random(seed))
    except NoSuchExample:
        pass
    out: dict[str, tuple] = {}
    for kind, fallback in first.items():
        try:
            req = find(requests, lambda r, k=kind: k in judge(r),
                       settings=_settings(examples, shrink=True), random=Random(seed))
            if minimise is not None:
                req = minimise(judge, kind, req)
            out[kind] = (req, judge(req)[kind])
        except Exception:  # a flaky subject cannot be shrunk: keep the first example seen
            out[kind] = fallback
    return out


def _drop_entries(judge: Callable[[Request], dict[str, str]], kind: str, req: Request) -> Request:
    """Remove entries one at a time while ``kind`` still shows.

    Hypothesis's shrinker usually gets there alone, but not always (it can stop at a local
    minimum); this pass makes "no entry can go" part of what a minimal example means.
    """
    i = 0
    while i < len(req.state):
        smaller = Request(req.state[:i] + req.state[i + 1:], req.budget,
                          tuple(j - (j > i) for j in req.shuffle if j != i), req.container)
        if kind in judge(smaller):
            req = smaller
        else:
            i += 1
    return req


# --- hash-seed independence ------------------------------------------------------------------

_WORKER = """\
import contextlib, json, sys
from ctxbench.strategies.calls import call_limit_for, recording_interrupts
from ctxbench.strategies.check import _Caller, _encoded
from ctxbench.strategies.contract import load_request
from ctxbench.strategies.registry import make
job = json.load(sys.stdin)
strategy = make(job["spec"])
call = _Caller(strategy, call_limit_for(strategy, job["evict_timeout_ms"]))
with recording_interrupts(), (call.limit or contextlib.nullcontext()):
    answers = [_encoded(call, *load_request(request)) for request in job["requests"]]
json.dump({"answers": answers}, sys.stdout)
"""


def _encoded(call: _Caller, state: Sequence[ContextEntry], budget: ContextBudget) -> Any:
    """An answer as JSON, to compare across processes: its ids, ``{"error": kind}``, or None if refused."""
    result, kind, _ = call(list(state), budget)
    if kind is not None:
        return {"error": kind}
    ids = _ids(result, state)
    return None if ids is None else [i if type(i) is str else shown(i) for i in ids]


def _child_hashseed(seed: int) -> str:
    ours = os.environ.get("PYTHONHASHSEED")
    child = seed % 4_294_967_295 + 1
    return str(child + 1 if str(child) == ours else child)


def _answers_elsewhere(spec: str, requests: list[Request], hashseed: str, evict_timeout_ms: int | None) -> list[Any]:
    """The answers of ``spec`` to ``requests`` in a fresh interpreter with ``PYTHONHASHSEED``."""
    env = dict(os.environ, PYTHONHASHSEED=hashseed,
               PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str)))
    job = json.dumps({"spec": spec, "requests": [json.loads(r.json()) for r in requests],
                      "evict_timeout_ms": evict_timeout_ms})
    proc = subprocess.run([sys.executable, "-c", _WORKER], input=job, capture_output=True, text=True,
                          env=env, timeout=_HASHSEED_TIMEOUT_S, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():   # a strategy may end it with status 0
        ended = f"exit status {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
        last = (proc.stderr.strip().splitlines() or [f"{ended}, no output"])[-1]
        raise RuntimeError(f"the subprocess failed: {last}")
    return json.loads(proc.stdout)["answers"]


def _smaller(req: Request) -> list[Request]:
    """The requests with one entry of ``req`` left out."""
    n = len(req.state)
    return [Request(req.state[:i] + req.state[i + 1:], req.budget, tuple(range(n - 1))) for i in range(n)]


def _differs(subject: _Subject, req: Request, theirs: Any) -> bool:
    if not isinstance(theirs, list):   # an error or a refused answer there: nothing to compare
        return False
    ours = subject.answer(req)
    return isinstance(ours, list) and ours != theirs


def _shrink_hashseed(subject: _Subject, spec: str, req: Request, theirs: Any, hashseed: str,
                     rounds: int = 8) -> tuple[Request, Any]:
    """Drop entries while the answer still differs in the other process (one subprocess a round)."""
    for _ in range(rounds):
        smaller = _smaller(req)
        if not smaller:
            break
        answers = _answers_elsewhere(spec, smaller, hashseed, _limit_ms(subject))
        nxt = next(((r, a) for r, a in zip(smaller, answers) if _differs(subject, r, a)), None)
        if nxt is None:
            break
        req, theirs = nxt
    return req, theirs


def _spec_of(obj: Any) -> tuple[str | None, str]:
    """A spec that re-creates ``obj`` in another process, or ``None`` and the reason why not."""
    if inspect.isfunction(obj):
        module, qualname = obj.__module__, obj.__qualname__
        if module and module != "__main__" and "<" not in qualname:
            spec = f"{module}:{qualname}"
            try:
                made = make(spec)
            except Exception as exc:  # it cannot be re-created by spec: say why
                return None, f"{spec} does not load by name: {exc}"
            if isinstance(made, FunctionStrategy) and made.function is obj:
                return spec, ""
        return None, f"function {qualname} cannot be imported by name (defined in __main__ or inside a function)"
    return None, (f"the strategy was given as an object ({type(obj).__name__}), which cannot be "
                  f"re-created in a subprocess; pass a spec string to run this check")


def _limit_ms(subject: _Subject) -> int | None:
    return subject.evict_timeout_ms if subject.limited else None


def _check_hashseed(subject: _Subject, spec: str | None, why: str, seed: int, report: CheckReport) -> None:
    if spec is None:
        report.skipped["hash-seed"] = why
        return
    batch = _fixed_requests(seed)
    hashseed = _child_hashseed(seed)
    try:
        # The batch in one subprocess; only a request answered differently is shrunk (a subprocess a level),
        # so a strategy that conforms is asked each request once.
        theirs = _answers_elsewhere(spec, batch, hashseed, _limit_ms(subject))
        for req, their in zip(batch, theirs):
            if not _differs(subject, req, their):
                continue
            req, their = _shrink_hashseed(subject, spec, req, their, hashseed)
            report.failures.append(CheckFailure(
                "hash-seed",
                f"returned {_short(subject.answer(req))} here (PYTHONHASHSEED="
                f"{os.environ.get('PYTHONHASHSEED', 'random')}) but {_short(their)} with PYTHONHASHSEED={hashseed}",
                req.json()))
            break
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        report.skipped["hash-seed"] = f"could not run {spec!r} in a subprocess: {exc}"
        return
    report.checked.append("hash-seed")


# --- latency ------------------------------------------------------------------------------------

def _timed(call: _Caller, state: Sequence[ContextEntry], budget: ContextBudget) -> int:
    """Nanoseconds of one ``evict`` (after the ``reset`` of a stateful strategy, which is not timed)."""
    if call._reset is not None:
        call.entering("reset")
        call._reset()
        call.entering("evict")
    t0 = time.perf_counter_ns()
    call.strategy.evict(state, budget)
    return time.perf_counter_ns() - t0


def _latency(call: _Caller, n: int, seed: int) -> Latency:
    """p50/p99 of ``evict`` on an over-budget plain tuple of ``n`` entries (`sampled_latency`).

    Under a per-call limit, its timer is armed and disarmed outside the timed interval.
    """
    state, budget = over_budget_state(n, np.random.default_rng([seed, n]))
    timed = _timed if call.limit is None else functools.partial(call.limit.call, _timed)

    def first() -> tuple[Any, str | None, str | None]:
        outcome = call(state, budget)   # warm-up, and the answer whose length is reported
        if outcome[1] is None:
            for _ in range(2):
                timed(call, state, budget)
        return outcome

    return sampled_latency(n, first, lambda: timed(call, state, budget))


def sampled_latency(n: int, first: Callable[[], tuple[Any, str | None, str | None]],
                    sample: Callable[[], int]) -> Latency:
    """The `Latency` of ``n`` entries from ``first()`` (the untimed first call: its result, failure
    kind and message) and then ``sample()`` (nanoseconds of one call), repeated within a time budget.

    The garbage collector is paused while timing, as `timeit` does, so a collection triggered
    by other allocations does not land in one strategy's tail. The times are wall-clock: once
    more than 1% of calls overlap a timer interrupt (calls longer than about 1% of the tick
    period, 10 µs at 1 kHz), p99 includes what the interrupt costs the machine. A call that fails
    is reported in the `Latency`, not raised (a real interrupt is passed on).
    """
    max_calls, budget_s = (2_000, 0.5) if n <= 1_000 else (100, 2.0)
    samples: list[int] = []
    collecting = gc.isenabled()
    gc.disable()
    try:
        result, kind, error = first()
        if kind is not None:
            return Latency(n, 0, None, None, None, error=error)
        start = time.perf_counter()
        while len(samples) < max_calls and (time.perf_counter() - start < budget_s or len(samples) < 3):
            samples.append(sample())
    except BaseException as exc:  # reported, not raised (a real interrupt is passed on)
        return Latency(n, len(samples), None, None, None, error=call_failure(exc)[1])
    finally:
        if collecting:
            gc.enable()
    arr = np.asarray(samples)
    return Latency(n, len(samples), int(np.percentile(arr, 50)), int(np.percentile(arr, 99)), int(arr.max()),
                   evicted=_length(result))


# --- entry point ---------------------------------------------------------------------------------

def check_strategy(strategy_or_spec: Any, *, examples: int = 200, latency: bool = True,
                   seed: int = 0, hash_seed: bool = True, evict_timeout_ms: int | None = None) -> CheckReport:
    """Check a strategy (spec string, strategy object or plain function) against the contract.

    A stateful strategy (`strategies.stateful.StatefulContextStrategy`) is ``reset()``
    before every call, so it is held to the contract on a fresh history.
    ``examples`` requests are generated per search; ``latency=False`` skips the timing and
    ``hash_seed=False`` the subprocess run under another ``PYTHONHASHSEED``;
    ``evict_timeout_ms`` limits every call (the ``time-limit`` check; the limit is that of the
    simulator, `strategies.calls.CallLimit`). A spec of code ctxbench does not ship (an import path,
    an entry point) runs in a process of its own, as in a run: a process that ends during a call
    (``os._exit``, a crash, a signal) fails ``leaves``, and the next call starts a fresh one. Raises
    `strategies.errors.StrategyLoadError` when a spec cannot be loaded (its factory raising or ending
    its process included); every violation found is reported in the returned `CheckReport`, never raised.

    >>> check_strategy("lru", examples=20, latency=False).ok
    True
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive integer, got {examples!r}")
    subject, spec, why, label = _subject_of(strategy_or_spec, evict_timeout_ms)
    with subject:
        report = CheckReport(strategy=label, examples=examples, seed=seed, pure=subject.pure,
                             compiled=subject.compiled)
        found = search_violations(subject.violations, examples, seed, minimise=_drop_entries)
        report.checked.extend(k for k in KINDS if k != "hash-seed" and (k != TIME_LIMIT or subject.limited))
        report.failures.extend(CheckFailure(kind, found[kind][1], found[kind][0].json()) for kind in KINDS
                               if kind in found)
        skipped = _hashseed_skipped(found, hash_seed)
        if skipped:
            report.skipped["hash-seed"] = skipped
        else:
            _check_hashseed(subject, spec, why, seed, report)
        if latency:
            report.latency = [subject.latency(n, seed) for n in LATENCY_SIZES]
    return report


def _subject_of(strategy_or_spec: Any, evict_timeout_ms: int | None) -> tuple[Any, str | None, str, str]:
    """The strategy to check (in a process of its own for code ctxbench does not ship), the spec that re-creates
    it in another process (or None, and why not) and its label in the report."""
    if isinstance(strategy_or_spec, str):

        spec = strategy_or_spec.strip()
        if loads_code(spec):
            return _IsolatedSubject(spec, evict_timeout_ms), spec, "", spec
        return _Subject(make(spec), evict_timeout_ms), spec, "", spec
    strategy = make(strategy_or_spec)
    spec, why = _spec_of(strategy_or_spec)
    return _Subject(strategy, evict_timeout_ms), spec, why, spec or repr(strategy)


def _hashseed_skipped(found: dict[str, tuple[Request, str]], requested: bool) -> str | None:
    """Why the answers are not compared under another PYTHONHASHSEED, or None when they are."""
    if not requested:
        return "not requested (hash_seed=False)"
    if "nondeterministic" in found:
        return "the strategy already answers differently on a repeated call"
    # Answers past the limit or refused unread are not compared: asking again would cost time for nothing.
    failed = next((kind for kind in (TIME_LIMIT, "bad-return") if kind in found), None)
    return None if failed is None else f"the strategy already fails {failed}: its answers are not compared"
