"""The conformance checker's core: one search, one caller, one hash-seed check and one report, for any contract.

A `Contract` says what is checked: how requests are drawn, which named checks judge the calls made on one
request, how an answer is written as JSON to be compared across processes, and how latency is timed. The
strategy contract is `strategies.check`'s, the policy contract `strategies.check_policy`'s. `run_check` does
the rest the same way for both:

- the subject is called in this process, or, for code ctxbench does not ship (an import path, an entry
  point), in a process of its own as a run runs it (`strategies.isolation.StrategyProcess`): a process that
  ends during a call *leaves*, and the next call starts a fresh one. A ``cmd:`` program starts afresh for
  each request after a failure, so that one failure is not every later request's;
- every call goes through a `Caller`: under the optional per-call limit, judged by
  `strategies.calls.call_failure` (a real Ctrl-C stops the check);
- hypothesis draws ``examples`` requests (seeded, no example database) and shrinks one example of each kind
  of violation found;
- a fixed batch of requests is answered again in a fresh interpreter under another ``PYTHONHASHSEED`` and
  the same per-call limit (`answer_batch`), a request answered differently shrunk entry by entry;
- the latency of the contract's method is timed on two sizes (`sampled_latency`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import inspect
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from random import Random
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis.errors import NoSuchExample

from ctxbench.strategies.adapter import Adapter, adapt
from ctxbench.strategies.calls import LEAVES, TIME_LIMIT, LimitedSubject, call_failure, call_limit_for, recording_interrupts
from ctxbench.strategies.contract import answer_base
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.external import ExternalProcess
from ctxbench.strategies.isolation import StrategyEnded, StrategyProcess, check_loads, loads_code
from ctxbench.strategies.registry import FunctionStrategy, make
from ctxbench.strategies.supervisor import supervised

__all__ = ["Contract", "contract_named", "CheckFailure", "CheckReport", "Latency", "Caller", "run_check",
           "search_violations", "sampled_latency", "answer_length", "answer_batch", "LATENCY_SIZES", "HASHSEED_BATCH"]

LATENCY_SIZES = (100, 10_000)
HASHSEED_BATCH = 48
HASHSEED_TIMEOUT_S = 120


@dataclass(frozen=True)
class Contract:
    """What is checked of a strategy or a policy: the parameters of `run_check`.

    ``noun`` (strategy, policy) and ``method`` (evict, edit) name it in messages; ``kinds`` maps each kind of
    violation to the property it stands for; ``name`` is ``module:attribute`` of this object, for the
    hash-seed subprocess. Requests: ``requests()`` a hypothesis strategy of them, ``minimise(judge, kind,
    req)`` a last shrinking pass (or None), ``fixed_requests(seed)`` the hash-seed batch, ``smaller(req)`` the
    requests one entry smaller, ``to_json`` and ``from_json`` a request as the subprocess reads it. Calls:
    ``violations(caller, req)`` the named checks on one request (kind -> message), ``encode(caller, req)``
    the answer as plain JSON (or ``{"error": kind}``), ``shown(answer)`` an encoded answer in a message,
    ``latency(caller, n, seed)`` the `Latency` of ``n`` entries. The subject: ``refusal(target)`` why it
    cannot be checked against this contract (None: it can), ``reset(target)`` what to call before every
    call (a stateful strategy's ``reset``; None), ``describe(target)`` whether it is pure and a compiled kernel;
    each of the three is given the subject's `strategies.adapter.Adapter`.
    """

    noun: str
    method: str
    kinds: dict[str, str]
    name: str
    requests: Callable[[], Any]
    minimise: Callable | None
    fixed_requests: Callable[[int], list]
    smaller: Callable[[Any], list]
    to_json: Callable[[Any], Any]
    from_json: Callable[[Any], Any]
    violations: Callable[["Caller", Any], dict[str, str]]
    encode: Callable[["Caller", Any], Any]
    shown: Callable[[Any], str]
    latency: Callable[["Caller", int, int], "Latency"]
    refusal: Callable[[Adapter], str | None] = lambda adapter: None
    reset: Callable[[Adapter], Callable | None] = lambda adapter: None
    describe: Callable[[Adapter], tuple[bool, bool]] = lambda adapter: (True, False)

    def __reduce__(self):
        # By name, as the subprocess finds it: a subject's own process gets the contract whatever it holds.
        return contract_named, (self.name,)


def contract_named(name: str) -> Contract:
    """The contract at ``module:attribute``."""
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


# --- the report -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckFailure:
    """One kind of violation, with a minimal example and what went wrong on it."""

    kind: str
    message: str
    example: str | None = None  # the request in the JSON form the contract gives it (`Contract.to_json`)
    property: str = ""          # the property it breaks (`Contract.kinds`)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, with the example parsed."""
        return {"kind": self.kind, "property": self.property, "message": self.message,
                "example": None if self.example is None else json.loads(self.example)}


@dataclass(frozen=True)
class Latency:
    """Latency of one call on one size of request, in nanoseconds (``error`` if it could not be timed)."""

    entries: int
    calls: int
    p50_ns: int | None
    p99_ns: int | None
    max_ns: int | None
    evicted: int | None = None
    error: str | None = None


@dataclass
class CheckReport:
    """The outcome of a check: failures (empty when it conforms), latency and notes."""

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


# --- one call, judged -------------------------------------------------------------------------------

class Caller:
    """Calls the subject as the checker does: ``reset()`` first when given (a stateful strategy: every call on
    a fresh history), under the optional per-call limit.

    The method running is kept in ``running`` for the message of a failure, and in ``method`` (a shared
    ``ctypes`` char array) too when given, where the parent of the subject's own process reads it."""

    def __init__(self, target: Any, limit=None, method: Any = None, reset: Callable | None = None) -> None:
        self.target, self.limit, self.method, self.reset = target, limit, method, reset
        self.running = ""

    def entering(self, name: str) -> None:
        """Note that the subject's ``name`` method is about to run."""
        self.running = name
        if self.method is not None:
            self.method.value = name.encode()

    def _once(self, name: str, *args: Any) -> Any:
        if self.reset is not None:
            self.entering("reset")
            self.reset()
        self.entering(name)
        return getattr(self.target, name)(*args)

    def __call__(self, name: str, *args: Any) -> tuple[Any, str | None, str | None]:
        """``target.<name>(*args)``, or ``None``, the kind of failure (`call_failure`) and what happened
        (``"evict raised ..."``)."""
        try:
            if self.limit is None:
                return self._once(name, *args), None, None
            return self.limit.call(self._once, name, *args), None, None
        except BaseException as exc:  # any way out of the subject is a finding; a real interrupt is passed on
            kind, text = call_failure(exc)
            return None, kind, f"{self.running} {text}"


# --- the subject ------------------------------------------------------------------------------------

class _Subject(LimitedSubject):
    """The subject called in this process: requests judged, answers encoded, latency timed. A ``with`` block
    installs the per-call limit's handler once."""

    def __init__(self, contract: Contract, target: Any, evict_timeout_ms: int | None, method: Any = None) -> None:
        super().__init__(target, evict_timeout_ms)
        self.contract = contract
        adapter = adapt(target)
        self.call = Caller(target, self.limit, method, contract.reset(adapter))
        self.pure, self.compiled = contract.describe(adapter)
        self.refusal = contract.refusal(adapter)

    def describe(self) -> tuple[str | None, bool, bool, bool]:
        """Why the subject cannot be checked (None: it can), whether it is pure, a compiled kernel, and limited."""
        return self.refusal, self.pure, self.compiled, self.limited

    def _afresh(self) -> None:
        if isinstance(self.call.target, ExternalProcess):
            self.call.target.recover()   # one request's failure is not every later request's

    def violations(self, req: Any) -> dict[str, str]:
        self._afresh()
        return self.contract.violations(self.call, req)

    def answer(self, req: Any) -> Any:
        self._afresh()
        return self.contract.encode(self.call, req)

    def latency(self, n: int, seed: int) -> Latency:
        self._afresh()
        return self.contract.latency(self.call, n, seed)


def _subject_there(contract: Contract, evict_timeout_ms: int | None, target: Any, method: Any) -> _Subject:
    """The subject in its own process, its limit's handler installed for the process's life."""
    return _Subject(contract, target, evict_timeout_ms, method).__enter__()


class _IsolatedSubject:
    """The subject in a process of its own (`strategies.isolation.StrategyProcess`), as a run runs code ctxbench
    does not ship: a process that ends is a call that leaves, and the next call starts a fresh one."""

    def __init__(self, contract: Contract, spec: str, evict_timeout_ms: int | None) -> None:
        check_loads(spec)   # a factory that raises or ends its process is a load error, as in a run
        self.contract, self.evict_timeout_ms = contract, evict_timeout_ms
        self.process = StrategyProcess(spec, functools.partial(_subject_there, contract, evict_timeout_ms),
                                       noun=contract.noun)
        try:
            refusal, self.pure, self.compiled, self.limited = self.process.call("describe")
        except StrategyEnded as ended:
            self.process.close()
            raise StrategyLoadError(f"cannot build {contract.noun} {spec!r}: loading it ended the process "
                                    f"({ended.status})") from None
        if refusal is not None:
            self.process.close()
            raise StrategyLoadError(f"{spec!r} {refusal}")

    def __enter__(self) -> "_IsolatedSubject":
        return self

    def __exit__(self, *exc) -> None:
        self.process.close()

    def _left(self, ended: StrategyEnded) -> str:
        return f"{ended.what}: a {self.contract.noun} must return, not leave"

    def violations(self, req: Any) -> dict[str, str]:
        """The named checks of ``req``, or ``leaves`` when the subject's process ended."""
        try:
            return self.process.call("violations", req)
        except StrategyEnded as ended:
            return {LEAVES: self._left(ended)}

    def answer(self, req: Any) -> Any:
        """The answer to ``req`` as JSON, ``{"error": "leaves"}`` when the subject's process ended."""
        try:
            return self.process.call("answer", req)
        except StrategyEnded:
            return {"error": LEAVES}

    def latency(self, n: int, seed: int) -> Latency:
        """The latency on ``n`` entries, or its error when the subject's process ended."""
        try:
            return self.process.call("latency", n, seed)
        except StrategyEnded as ended:
            return Latency(n, 0, None, None, None, error=self._left(ended))


def _subject_of(contract: Contract, target_or_spec: Any, evict_timeout_ms: int | None):
    """The subject (in a process of its own for code ctxbench does not ship), the spec that re-creates it in
    another process (or None, and why not) and its label in the report."""
    if isinstance(target_or_spec, str):
        spec, why = target_or_spec.strip(), ""
        if loads_code(spec):
            return _IsolatedSubject(contract, spec, evict_timeout_ms), spec, why, spec
        subject = _Subject(contract, make(spec), evict_timeout_ms)
    else:
        subject = _Subject(contract, make(target_or_spec), evict_timeout_ms)
        spec, why = _spec_of(contract, target_or_spec)
    if subject.refusal is not None:
        raise StrategyLoadError(f"{spec or subject.call.target!r} {subject.refusal}")
    return subject, spec, why, spec or repr(subject.call.target)


def _spec_of(contract: Contract, obj: Any) -> tuple[str | None, str]:
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
    return None, (f"the {contract.noun} was given as an object ({type(obj).__name__}), which cannot be "
                  f"re-created in a subprocess; pass a spec string to run this check")


# --- the search ---------------------------------------------------------------------------------------

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


def search_violations(judge: Callable, examples: int, seed: int, requests,
                      minimise: Callable | None = None) -> dict[str, tuple]:
    """Explore ``examples`` requests drawn from ``requests`` (a hypothesis strategy), then shrink one example
    of each kind ``judge`` finds (``minimise(judge, kind, req)`` after hypothesis's shrinker)."""
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


# --- hash-seed independence ----------------------------------------------------------------------------

#: What the subprocess runs: the answers on the stdout ctxbench reads, whatever the subject prints (to stderr).
_WORKER = """\
import json, os, sys
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
from ctxbench.strategies.checker import answer_batch
json.dump({"answers": answer_batch(json.load(sys.stdin))}, answers)
"""


def answer_batch(job: dict) -> list:
    """The answers (`Contract.encode`) of ``make(job["spec"])`` to ``job["requests"]`` under the contract
    ``job["contract"]`` and the per-call limit ``job["evict_timeout_ms"]``: what the hash-seed subprocess runs."""
    contract = contract_named(job["contract"])
    target = make(job["spec"])
    call = Caller(target, call_limit_for(target, job["evict_timeout_ms"]), reset=contract.reset(adapt(target)))
    with recording_interrupts(), (call.limit or contextlib.nullcontext()):
        return [contract.encode(call, contract.from_json(request)) for request in job["requests"]]


def _child_hashseed(seed: int) -> str:
    ours = os.environ.get("PYTHONHASHSEED")
    child = seed % 4_294_967_295 + 1
    return str(child + 1 if str(child) == ours else child)


def _answers_elsewhere(contract: Contract, spec: str, requests: list, hashseed: str,
                       evict_timeout_ms: int | None) -> list[Any]:
    """The answers of ``spec`` to ``requests`` in a fresh interpreter with ``PYTHONHASHSEED``; `RuntimeError`
    in one line when it cannot give them."""
    env = dict(os.environ, PYTHONHASHSEED=hashseed,
               PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str)))
    job = json.dumps({"contract": contract.name, "spec": spec, "requests": [contract.to_json(r) for r in requests],
                      "evict_timeout_ms": evict_timeout_ms})
    # Under the supervisor of `cmd:` programs: what the strategy starts there ends with the interpreter, so
    # that nothing it leaves holds the pipes read here open.
    proc = subprocess.Popen(supervised([sys.executable, "-c", _WORKER]), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(job, timeout=HASHSEED_TIMEOUT_S)
    except BaseException as exc:
        proc.terminate()   # the supervisor ends the whole tree
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise RuntimeError(f"it gave no answers within {HASHSEED_TIMEOUT_S} s") from None
        raise
    if proc.returncode != 0 or not out.strip():   # a subject may end it with status 0
        ended = f"exit status {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
        last = (err.strip().splitlines() or [f"{ended}, no output"])[-1]
        raise RuntimeError(f"the subprocess failed: {last[:300]}")
    return json.loads(out)["answers"]


def _differs(subject, req: Any, theirs: Any) -> bool:
    if not isinstance(theirs, list):   # an error or a refused answer there: nothing to compare
        return False
    ours = subject.answer(req)
    return isinstance(ours, list) and ours != theirs


def _shrink_hashseed(contract: Contract, subject, spec: str, req: Any, theirs: Any, hashseed: str,
                     limit_ms: int | None, rounds: int = 8) -> tuple[Any, Any]:
    """Drop entries while the answer still differs in the other process (one subprocess a round)."""
    for _ in range(rounds):
        smaller = contract.smaller(req)
        if not smaller:
            break
        answers = _answers_elsewhere(contract, spec, smaller, hashseed, limit_ms)
        nxt = next(((r, a) for r, a in zip(smaller, answers) if _differs(subject, r, a)), None)
        if nxt is None:
            break
        req, theirs = nxt
    return req, theirs


def _check_hashseed(contract: Contract, subject, spec: str | None, why: str, seed: int, report: CheckReport) -> None:
    if spec is None:
        report.skipped["hash-seed"] = why
        return
    batch = contract.fixed_requests(seed)
    hashseed = _child_hashseed(seed)
    limit_ms = subject.evict_timeout_ms if subject.limited else None
    try:
        # The batch in one subprocess; only a request answered differently is shrunk (a subprocess a level),
        # so a subject that conforms is asked each request once.
        theirs = _answers_elsewhere(contract, spec, batch, hashseed, limit_ms)
        for req, their in zip(batch, theirs):
            if not _differs(subject, req, their):
                continue
            req, their = _shrink_hashseed(contract, subject, spec, req, their, hashseed, limit_ms)
            report.failures.append(CheckFailure(
                "hash-seed",
                f"returned {contract.shown(subject.answer(req))} here (PYTHONHASHSEED="
                f"{os.environ.get('PYTHONHASHSEED', 'random')}) but {contract.shown(their)} with "
                f"PYTHONHASHSEED={hashseed}", req.json(), contract.kinds["hash-seed"]))
            break
    except (OSError, RuntimeError, ValueError) as exc:
        report.skipped["hash-seed"] = f"could not run {spec!r} in a subprocess: {exc}"
        return
    report.checked.append("hash-seed")


def _hashseed_skipped(contract: Contract, found: dict[str, tuple], requested: bool) -> str | None:
    """Why the answers are not compared under another PYTHONHASHSEED, or None when they are."""
    if not requested:
        return "not requested (hash_seed=False)"
    if "nondeterministic" in found:
        return f"the {contract.noun} already answers differently on a repeated call"
    # Answers past the limit or refused unread are not compared: asking again would cost time for nothing.
    failed = next((kind for kind in (TIME_LIMIT, "bad-return") if kind in found), None)
    return None if failed is None else f"the {contract.noun} already fails {failed}: its answers are not compared"


# --- latency -----------------------------------------------------------------------------------------

def sampled_latency(n: int, first: Callable[[], tuple[Any, str | None, str | None]],
                    sample: Callable[[], int]) -> Latency:
    """The `Latency` of ``n`` entries from ``first()`` (the untimed first call: its result, failure
    kind and message; ``evicted`` is the length of its answer) and then ``sample()`` (nanoseconds of one
    call), repeated within a time budget.

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
                   evicted=answer_length(result))


def answer_length(result: Any) -> int | None:
    """How many items a list or tuple answer holds (its own ``__len__`` is not called); None for another answer."""
    base = answer_base(result)
    return None if base is None else base.__len__(result)


# --- the check ------------------------------------------------------------------------------------------

def run_check(contract: Contract, target_or_spec: Any, *, examples: int = 200, latency: bool = True, seed: int = 0,
              hash_seed: bool = True, evict_timeout_ms: int | None = None) -> CheckReport:
    """Check a strategy or a policy (spec string or object) against ``contract``: see the module docstring.

    Raises `strategies.errors.StrategyLoadError` when a spec cannot be loaded (its factory raising or ending
    its process included) or the subject is refused by the contract; every violation found is reported in
    the returned `CheckReport`, never raised."""
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive integer, got {examples!r}")
    subject, spec, why, label = _subject_of(contract, target_or_spec, evict_timeout_ms)
    with subject:
        report = CheckReport(strategy=label, examples=examples, seed=seed, pure=subject.pure,
                             compiled=subject.compiled)
        found = search_violations(subject.violations, examples, seed, contract.requests(), contract.minimise)
        report.checked.extend(k for k in contract.kinds if k != "hash-seed" and (k != TIME_LIMIT or subject.limited))
        report.failures.extend(CheckFailure(kind, found[kind][1], found[kind][0].json(), contract.kinds[kind])
                               for kind in contract.kinds if kind in found)
        skipped = _hashseed_skipped(contract, found, hash_seed)
        if skipped:
            report.skipped["hash-seed"] = skipped
        else:
            _check_hashseed(contract, subject, spec, why, seed, report)
        if latency:
            report.latency = [subject.latency(n, seed) for n in LATENCY_SIZES]
    return report
