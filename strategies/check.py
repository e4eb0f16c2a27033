"""The strategy contract of the conformance checker: does a strategy keep docs/design.md §1, and how fast is it?

`check_strategy` runs the checker's core (`strategies.checker.run_check`) with the contract defined here:
states and budgets drawn by hypothesis (`context_requests`), the named checks of `KINDS` made on the calls
of one request, an answer written as its ids, and the latency of ``evict`` on over-budget states of 100
and 10,000 entries. Each kind found is shrunk to a minimal example, given in the TypeScript JSON form of
`strategies.contract.dump_request` so it can be replayed on either side; hash-seed independence is tested
by answering a fixed batch of requests again in a subprocess with another ``PYTHONHASHSEED``.

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
``ctxbench run`` replays it: a process that ends during a call (``os._exit``, a crash, a signal)
*leaves*, and the next call starts a fresh one.
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from ctxbench.strategies.adapter import Adapter, adapt
from ctxbench.strategies.base import CappedStrategy
from ctxbench.strategies.calls import LEAVES, RAISES, TIME_LIMIT
from ctxbench.strategies.checker import (HASHSEED_BATCH, Caller, CheckFailure, CheckReport, Contract, Latency,
                                answer_length, run_check, sampled_latency, search_violations)
from ctxbench.strategies.contract import (
    ContextBudget,
    ContextEntry,
    ContextState,
    ContextStrategy,
    answer_ids,
    dump_request,
    load_request,
    min_cap,
    shown,
)

__all__ = [
    "KINDS",
    "CONTRACT",
    "CheckFailure",
    "CheckReport",
    "Latency",
    "Request",
    "check_request",
    "check_strategy",
    "context_requests",
    "over_budget_state",
    "sampled_latency",
    "search_violations",
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


def _fixed_requests(seed: int, count: int = HASHSEED_BATCH) -> list[Request]:
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

def _ids(result: Any, state: Sequence[ContextEntry]) -> list[Any] | None:
    """The answer's ids (`answer_ids`; ``str`` subclasses read as plain strings), or None when refused."""
    ids = answer_ids(result, len(state))[0]
    return None if ids is None else [str.__str__(i) if issubclass(type(i), str) else i for i in ids]


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

    def __init__(self, call: Caller, req: Request, entry_cap: int | None = None) -> None:
        self.call, self.req, self.entry_cap = call, req, entry_cap
        self.state, self.budget = _fresh(req.state), copy.copy(req.budget)   # as the first call leaves them
        self.result, self.kind, self.error = call("evict", self.state, self.budget)

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
        again, kind, error = self.call("evict", self.req.as_container(), copy.copy(self.req.budget))
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
            moved, kind, error = self.call("evict", state, copy.copy(req.budget))
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
        return f"evict returned {answer_length(t.result):,} ids for a state of {len(t.req.state):,} entries"
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


def _violations(call: Caller, req: Request, entry_cap: int | None = None) -> dict[str, str]:
    """Every kind of violation the strategy shows on ``req``, each with a one-line explanation."""
    trial = _Trial(call, req, entry_cap)
    return {kind: message for kind, check in _CHECKS if (message := check(trial)) is not None}


def check_request(strategy: ContextStrategy, req: Request, *, entry_cap: int | None = None) -> dict[str, str]:
    """The checks `check_strategy` makes on each generated request, on ``req``: every kind of violation
    (`KINDS` but ``hash-seed``) ``strategy`` shows, with its message. A stateful strategy is reset before
    each call; ``entry_cap``, the strategy's own cap, tightens ``over-entries``."""
    return _violations(Caller(strategy, reset=_reset(adapt(strategy))), req, entry_cap)


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


# --- an answer as JSON, compared across processes -----------------------------------------------

def _encoded(call: Caller, req: Request) -> Any:
    """An answer as JSON, to compare across processes: its ids, ``{"error": kind}``, or None if refused."""
    state = _fresh(req.state)
    result, kind, _ = call("evict", state, copy.copy(req.budget))
    if kind is not None:
        return {"error": kind}
    ids = _ids(result, state)
    return None if ids is None else [i if type(i) is str else shown(i) for i in ids]


def _smaller(req: Request) -> list[Request]:
    """The requests with one entry of ``req`` left out."""
    n = len(req.state)
    return [Request(req.state[:i] + req.state[i + 1:], req.budget, tuple(range(n - 1))) for i in range(n)]


# --- latency ------------------------------------------------------------------------------------

def _timed(call: Caller, state: Sequence[ContextEntry], budget: ContextBudget) -> int:
    """Nanoseconds of one ``evict`` (after the ``reset`` of a stateful strategy, which is not timed)."""
    if call.reset is not None:
        call.entering("reset")
        call.reset()
        call.entering("evict")
    t0 = time.perf_counter_ns()
    call.target.evict(state, budget)
    return time.perf_counter_ns() - t0


def _latency(call: Caller, n: int, seed: int) -> Latency:
    """p50/p99 of ``evict`` on an over-budget plain tuple of ``n`` entries (`sampled_latency`).

    Under a per-call limit, its timer is armed and disarmed outside the timed interval.
    """
    state, budget = over_budget_state(n, np.random.default_rng([seed, n]))
    timed = _timed if call.limit is None else functools.partial(call.limit.call, _timed)

    def first() -> tuple[Any, str | None, str | None]:
        outcome = call("evict", state, budget)   # warm-up, and the answer whose length is reported
        if outcome[1] is None:
            for _ in range(2):
                timed(call, state, budget)
        return outcome

    return sampled_latency(n, first, lambda: timed(call, state, budget))


# --- entry point ---------------------------------------------------------------------------------

def _reset(adapter: Adapter):
    """What to call before each call: a stateful strategy's ``reset`` (a fresh history every time), else None."""
    return adapter.hooks.reset if adapter.stateful else None


def _describe(adapter: Adapter) -> tuple[bool, bool]:
    return not adapter.stateful, isinstance(adapter.target, CappedStrategy) and adapter.target.compiled


def _to_json(req: Request) -> Any:
    return json.loads(req.json())


def _from_json(request: Any) -> Request:
    state, budget = load_request(request)
    return Request(tuple(state), budget, tuple(range(len(state))))


CONTRACT = Contract(
    noun="strategy", method="evict", kinds=KINDS, name="ctxbench.strategies.check:CONTRACT",
    requests=context_requests, minimise=_drop_entries, fixed_requests=_fixed_requests, smaller=_smaller,
    to_json=_to_json, from_json=_from_json,
    violations=_violations, encode=_encoded, shown=_short, latency=_latency,
    reset=_reset, describe=_describe,
)
"""The strategy contract, the parameters of the checker's core (`strategies.checker.run_check`)."""


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
    return run_check(CONTRACT, strategy_or_spec, examples=examples, latency=latency, seed=seed, hash_seed=hash_seed,
                     evict_timeout_ms=evict_timeout_ms)
