"""Conformance checker: does a strategy keep the contract of DESIGN §1, and how fast is it?

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
"""

from __future__ import annotations

import contextlib
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

from strategies.base import CappedStrategy
from strategies.calls import LEAVES, TIME_LIMIT, CallLimit, call_failure, call_limit_for
from strategies.contract import (
    ContextBudget,
    ContextEntry,
    ContextState,
    ContextStrategy,
    answer_base,
    answer_ids,
    dump_request,
    shown,
)
from strategies.registry import FunctionStrategy, make
from strategies.stateful import is_pure

__all__ = [
    "KINDS",
    "CheckFailure",
    "CheckReport",
    "Latency",
    "Request",
    "check_strategy",
    "context_requests",
    "over_budget_state",
]

KINDS: dict[str, str] = {
    "raises": "evict returns without raising",
    "leaves": "evict returns instead of leaving (sys.exit, a KeyboardInterrupt of its own, another BaseException)",
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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, with the example parsed."""
        return {"kind": self.kind, "property": KINDS.get(self.kind, ""), "message": self.message,
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
    """Calls a strategy as the checker does: ``reset()`` first if it is stateful, under the optional limit."""

    def __init__(self, strategy: ContextStrategy, limit: CallLimit | None) -> None:
        self.strategy, self.limit = strategy, limit
        self._reset = None if is_pure(strategy) else strategy.reset  # a fresh history for every call
        self._in = "evict"   # the method running, for the message of a failure

    def _once(self, state: Sequence[ContextEntry], budget: ContextBudget) -> Any:
        if self._reset is not None:
            self._in = "reset"
            self._reset()
        self._in = "evict"
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


def _unexpected(kind: str | None, found: dict[str, str], otherwise: str, message: str) -> None:
    """A failed repeated call: leaving or running past the limit is its own kind, raising is ``otherwise``."""
    found.setdefault(kind if kind in (LEAVES, TIME_LIMIT) else otherwise, message)


def _violations(call: _Caller, req: Request) -> dict[str, str]:
    """Every kind of violation the strategy shows on ``req``, each with a one-line explanation."""
    found: dict[str, str] = {}
    arg = _fresh(req.state)
    budget_arg = copy.copy(req.budget)
    result, kind, error = call(arg, budget_arg)
    if kind is not None:
        return {kind: error}
    if arg != list(req.state):
        after = [getattr(e, "id", e) for e in arg]
        if after != [e.id for e in req.state]:
            found["mutates-input"] = (f"evict changed the state list it was given: ids before "
                                      f"{_short([e.id for e in req.state])}, after {_short(after)}")
        else:
            changed = next(a for a, b in zip(arg, req.state) if a != b)
            found["mutates-input"] = f"evict changed entry {changed.id!r} of its input to {changed!r}"
    elif budget_arg != req.budget:
        found["mutates-input"] = f"evict changed its budget to {budget_arg!r}"
    ids = _ids(result, req.state)
    if ids is None:
        found["bad-return"] = f"evict {answer_ids(result, len(req.state))[1]}"
        return found
    if len(ids) > len(req.state):   # `ids` holds one more than the state: the rest was not read
        found["bad-return"] = f"evict returned {_length(result):,} ids for a state of {len(req.state):,} entries"
        return found
    strings = [i for i in ids if type(i) is str]
    if len(strings) != len(ids):
        bad = next(i for i in ids if type(i) is not str)
        found["non-string"] = f"evict returned {shown(bad)} ({type(bad).__name__}) among its ids {_short(ids)}"
    known = {e.id for e in req.state}
    unknown = [i for i in strings if i not in known]
    if unknown:
        found["unknown-id"] = f"evicted {unknown[0]!r}, which is not in the state {_short(sorted(known))}"
    seen: set[str] = set()
    dup = next((i for i in strings if i in seen or seen.add(i)), None)
    if dup is not None:
        found["duplicate"] = f"evicted {dup!r} twice: {_short(ids)}"
    gone = set(strings)
    left = [e for e in req.state if e.id not in gone]
    left_bytes = sum(e.size_bytes for e in left)
    if left_bytes > req.budget.max_bytes:
        found["over-budget"] = (f"after evicting {_short(ids)}, {left_bytes} bytes remain in "
                                f"{len(left)} entries > max_bytes {req.budget.max_bytes}")
    if req.budget.max_entries is not None and len(left) > req.budget.max_entries:
        found["over-entries"] = (f"after evicting {_short(ids)}, {len(left)} entries remain "
                                 f"> max_entries {req.budget.max_entries}")

    again, kind, error = call(req.as_container(), copy.copy(req.budget))
    if kind is not None:
        _unexpected(kind, found, "nondeterministic",
                    f"first call returned {_short(ids)}, then on a repeated call {error}")
        return found
    again_ids = _ids(again, req.state)
    if again_ids != ids:
        where = "" if req.container == "list" else f" (on the same state as a {req.container})"
        found["nondeterministic"] = (f"first call returned {_short(ids)}, a repeated call{where} "
                                     f"returned {_short(again_ids if again_ids is not None else [again])}")
        return found
    reordered = [(req.recency_sorted(), "as a recency-sorted ContextState in the order")]
    if req.shuffle != tuple(range(len(req.state))):
        reordered.insert(0, (tuple(_fresh(req.state[i] for i in req.shuffle)), "in the order"))
    for state, how in reordered:
        moved, kind, error = call(state, copy.copy(req.budget))
        moved_ids = None if kind is not None else _ids(moved, state)
        if kind is not None or moved_ids != ids:
            what = error if kind is not None else f"returned {_short(moved_ids or [moved])}"
            _unexpected(kind, found, "order-dependent",
                        f"returned {_short(ids)} for the state as given, but {what} for the "
                        f"same entries {how} {_short([e.id for e in state])}")
            break
    return found


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


def _search(call: _Caller, examples: int, seed: int) -> dict[str, tuple[Request, str]]:
    """Explore ``examples`` requests, then shrink one example of each kind found."""
    first: dict[str, tuple[Request, str]] = {}

    def record(req: Request) -> bool:
        for kind, message in _violations(call, req).items():
            first.setdefault(kind, (req, message))
        return False

    try:
        find(context_requests(), record, settings=_settings(examples, shrink=False), random=Random(seed))
    except NoSuchExample:
        pass
    out: dict[str, tuple[Request, str]] = {}
    for kind, fallback in first.items():
        try:
            req = find(context_requests(), lambda r, k=kind: k in _violations(call, r),
                       settings=_settings(examples, shrink=True), random=Random(seed))
            req = _drop_entries(call, kind, req)
            out[kind] = (req, _violations(call, req)[kind])
        except Exception:  # a flaky strategy cannot be shrunk: keep the first example seen
            out[kind] = fallback
    return out


def _drop_entries(call: _Caller, kind: str, req: Request) -> Request:
    """Remove entries one at a time while ``kind`` still shows.

    Hypothesis's shrinker usually gets there alone, but not always (it can stop at a local
    minimum); this pass makes "no entry can go" part of what a minimal example means.
    """
    i = 0
    while i < len(req.state):
        smaller = Request(req.state[:i] + req.state[i + 1:], req.budget,
                          tuple(j - (j > i) for j in req.shuffle if j != i), req.container)
        if kind in _violations(call, smaller):
            req = smaller
        else:
            i += 1
    return req


# --- hash-seed independence ------------------------------------------------------------------

_WORKER = """\
import contextlib, json, sys
from strategies.calls import call_limit_for, recording_interrupts
from strategies.check import _Caller, _encoded
from strategies.contract import load_request
from strategies.registry import make
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


def _answer(call: _Caller, req: Request) -> Any:
    return _encoded(call, _fresh(req.state), copy.copy(req.budget))


def _child_hashseed(seed: int) -> str:
    ours = os.environ.get("PYTHONHASHSEED")
    child = seed % 4_294_967_295 + 1
    return str(child + 1 if str(child) == ours else child)


def _answers_elsewhere(spec: str, requests: list[Request], hashseed: str, limit: CallLimit | None) -> list[Any]:
    """The answers of ``spec`` to ``requests`` in a fresh interpreter with ``PYTHONHASHSEED``."""
    env = dict(os.environ, PYTHONHASHSEED=hashseed,
               PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str)))
    job = json.dumps({"spec": spec, "requests": [json.loads(r.json()) for r in requests],
                      "evict_timeout_ms": None if limit is None else limit.ms})
    proc = subprocess.run([sys.executable, "-c", _WORKER], input=job, capture_output=True, text=True,
                          env=env, timeout=_HASHSEED_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the subprocess failed: {last}")
    return json.loads(proc.stdout)["answers"]


def _smaller(req: Request) -> list[Request]:
    """The requests with one entry of ``req`` left out."""
    n = len(req.state)
    return [Request(req.state[:i] + req.state[i + 1:], req.budget, tuple(range(n - 1))) for i in range(n)]


def _differs(call: _Caller, req: Request, theirs: Any) -> bool:
    if not isinstance(theirs, list):   # an error or a refused answer there: nothing to compare
        return False
    ours = _answer(call, req)
    return isinstance(ours, list) and ours != theirs


def _shrink_hashseed(call: _Caller, spec: str, req: Request, theirs: Any, hashseed: str,
                     rounds: int = 8) -> tuple[Request, Any]:
    """Drop entries while the answer still differs in the other process (one subprocess a round)."""
    for _ in range(rounds):
        smaller = _smaller(req)
        if not smaller:
            break
        answers = _answers_elsewhere(spec, smaller, hashseed, call.limit)
        nxt = next(((r, a) for r, a in zip(smaller, answers) if _differs(call, r, a)), None)
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


def _check_hashseed(call: _Caller, spec: str | None, why: str, seed: int, report: CheckReport) -> None:
    if spec is None:
        report.skipped["hash-seed"] = why
        return
    batch = _fixed_requests(seed)
    hashseed = _child_hashseed(seed)
    try:
        # The batch in one subprocess; only a request answered differently is shrunk (a subprocess a level),
        # so a strategy that conforms is asked each request once.
        theirs = _answers_elsewhere(spec, batch, hashseed, call.limit)
        for req, their in zip(batch, theirs):
            if not _differs(call, req, their):
                continue
            req, their = _shrink_hashseed(call, spec, req, their, hashseed)
            report.failures.append(CheckFailure(
                "hash-seed",
                f"returned {_short(_answer(call, req))} here (PYTHONHASHSEED="
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
        call._reset()
    t0 = time.perf_counter_ns()
    call.strategy.evict(state, budget)
    return time.perf_counter_ns() - t0


def _latency(call: _Caller, n: int, seed: int) -> Latency:
    """p50/p99 of ``evict`` on an over-budget plain tuple of ``n`` entries, within a time budget.

    The garbage collector is paused while timing, as `timeit` does, so a collection triggered
    by other allocations does not land in one strategy's tail. The times are wall-clock: once
    more than 1% of calls overlap a timer interrupt (calls longer than about 1% of the tick
    period, 10 µs at 1 kHz), p99 includes what the interrupt costs the machine. Under a
    per-call limit, its timer is armed and disarmed outside the timed interval.
    """
    state, budget = over_budget_state(n, np.random.default_rng([seed, n]))
    max_calls, budget_s = (2_000, 0.5) if n <= 1_000 else (100, 2.0)
    samples: list[int] = []
    result = None
    timed = _timed if call.limit is None else functools.partial(call.limit.call, _timed)
    collecting = gc.isenabled()
    gc.disable()
    try:
        result, kind, error = call(state, budget)   # warm-up, and the answer whose length is reported
        if kind is not None:
            return Latency(n, 0, None, None, None, error=error)
        for _ in range(2):
            timed(call, state, budget)
        start = time.perf_counter()
        while len(samples) < max_calls and (time.perf_counter() - start < budget_s or len(samples) < 3):
            samples.append(timed(call, state, budget))
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
    simulator, `strategies.calls.CallLimit`). Raises `strategies.errors.StrategyLoadError` when a
    spec cannot be loaded; every violation found is reported in the returned `CheckReport`,
    never raised.

    >>> check_strategy("lru", examples=20, latency=False).ok
    True
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive integer, got {examples!r}")
    strategy = make(strategy_or_spec)
    if isinstance(strategy_or_spec, str):
        spec, why, label = strategy_or_spec.strip(), "", strategy_or_spec.strip()
    else:
        spec, why = _spec_of(strategy_or_spec)
        label = spec or repr(strategy)
    report = CheckReport(strategy=label, examples=examples, seed=seed, pure=is_pure(strategy),
                         compiled=isinstance(strategy, CappedStrategy) and strategy.compiled)
    limit = call_limit_for(strategy, evict_timeout_ms)
    call = _Caller(strategy, limit)
    with limit or contextlib.nullcontext():
        found = _search(call, examples, seed)
        report.checked.extend(k for k in KINDS if k != "hash-seed" and (k != TIME_LIMIT or limit is not None))
        for kind in KINDS:
            if kind in found:
                req, message = found[kind]
                report.failures.append(CheckFailure(kind, message, req.json()))
        if not hash_seed:
            report.skipped["hash-seed"] = "not requested (hash_seed=False)"
        elif "nondeterministic" in found:
            report.skipped["hash-seed"] = "the strategy already answers differently on a repeated call"
        elif TIME_LIMIT in found or "bad-return" in found:
            # Answers past the limit or refused unread are not compared: asking again would cost time for nothing.
            failed = TIME_LIMIT if TIME_LIMIT in found else "bad-return"
            report.skipped["hash-seed"] = f"the strategy already fails {failed}: its answers are not compared"
        else:
            _check_hashseed(call, spec, why, seed, report)
        if latency:
            report.latency = [_latency(call, n, seed) for n in LATENCY_SIZES]
    return report
