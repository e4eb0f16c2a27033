"""Conformance checker of transcript policies (`strategies.policy`): does a policy keep its contract, how fast is it?

`check_policy` draws transcripts and windows with hypothesis (seeded, no example database), calls
``edit`` on each and looks for every kind of violation in `POLICY_KINDS`, each shrunk to a minimal
example in the JSON form of the ``cmd:`` protocol (`strategies.policy.items_to_json`). The edits
are judged by the same function as every replay (`strategies.policy.judge_edits`), so a policy that
passes is not refused by ``ctxbench run``. As for strategies (`strategies.check`), each kind is one
small function of a `_Trial`, run from the table `_CHECKS`; code ctxbench does not ship runs in a
process of its own (`strategies.isolation.StrategyProcess`); a repeated batch is answered under
another ``PYTHONHASHSEED`` in a subprocess; latency is ``edit`` on full transcripts of 100 and
10,000 items.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from ctxbench.strategies.calls import LEAVES, RAISES, TIME_LIMIT, CallLimit, LimitedSubject, call_failure
from ctxbench.strategies.check import (_HASHSEED_BATCH, _HASHSEED_TIMEOUT_S, LATENCY_SIZES, CheckFailure, CheckReport, Latency,
                              _child_hashseed, sampled_latency, search_violations)
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.isolation import StrategyEnded, StrategyProcess, check_loads, loads_code
from ctxbench.strategies.policy import ROLES, TranscriptItem, Window, edits_to_json, is_policy, items_to_json, judge_edits
from ctxbench.strategies.registry import make

__all__ = ["POLICY_KINDS", "PolicyRequest", "transcript_requests", "check_policy_request", "check_policy"]

POLICY_KINDS: dict[str, str] = {
    "raises": "edit returns without raising",
    "leaves": "edit returns instead of leaving (sys.exit, a KeyboardInterrupt of its own, another BaseException, "
              "ending its process)",
    "time-limit": "edit returns within the per-call time limit (checked with --evict-timeout-ms)",
    "bad-return": "edit returns a list or tuple of Replace and Append edits",
    "bad-edit": "each edit has a role and a token count the contract allows",
    "unknown-item": "every replaced id is an item of the transcript",
    "duplicate": "no item is replaced twice",
    "overhead": "the overhead is never replaced",
    "grows": "a Replace puts at most the tokens it removes",
    "bad-attach": "an attached copy is of a revision an item held, at most as large",
    "window-grows": "the edits of one call never leave the window larger",
    "nondeterministic": "a repeated call gives the same edits",
    "mutates-input": "the transcript and the window are left untouched",
    "admit": "admit gives an item at most its own tokens, an integer >= 0",
    "hash-seed": "another PYTHONHASHSEED gives the same edits",
}
"""Each kind of violation the policy checker looks for, with the property it stands for."""

_JUDGED = ("bad-return", "bad-edit", "unknown-item", "duplicate", "overhead", "grows", "bad-attach", "window-grows")


@dataclass(frozen=True)
class PolicyRequest:
    """One generated call: a transcript (overhead first, when it has one) and the window."""

    items: tuple[TranscriptItem, ...]
    window: Window

    def json(self) -> str:
        """The request as a ``cmd:`` policy receives it."""
        return json.dumps(items_to_json(self.items, self.window))


def _seen(items: Sequence[TranscriptItem]) -> dict[str, int]:
    seen: dict[str, int] = {}
    for item in items:
        if item.ref:
            seen[item.ref] = max(seen.get(item.ref, 0), item.tokens)
    return seen


# --- generated requests ----------------------------------------------------------------------

_BODY_ROLES = tuple(r for r in ROLES if r != "overhead")
_FILES = tuple(f"src/m{i}.py" for i in range(6))


@st.composite
def _item(draw, index: int) -> TranscriptItem:
    role = draw(st.sampled_from(_BODY_ROLES))
    tokens = draw(st.integers(0, 40) | st.integers(0, 60_000))
    path, ref = "", ""
    if role in ("result", "attached"):
        if draw(st.booleans()):
            path = draw(st.sampled_from(_FILES))
            ref = f"{path}:{draw(st.integers(0, 2))}"
        else:
            path = f"tool://bash/{index}"
    kind = {"result": "code" if ref else "output", "attached": "code", "call": "json",
            "thinking": "thinking"}.get(role, "prose")
    return TranscriptItem(str(index), role, kind, tokens, draw(st.integers(0, 3)) + index // 3, path, ref)


@st.composite
def transcript_requests(draw, max_items: int = 24) -> PolicyRequest:
    """Hypothesis strategy for `PolicyRequest`: an optional overhead, then messages, tool calls, results
    (files read more than once among them), summaries and placeholders; a window from a little above
    nothing to twice the transcript, so that thresholds fall on both sides."""
    n = draw(st.integers(0, max_items))
    items = [draw(_item(i)) for i in range(n)]
    if draw(st.booleans()):
        items.insert(0, TranscriptItem("overhead", "overhead", "overhead", draw(st.integers(0, 30_000)), 0))
    total = sum(i.tokens for i in items)
    window = Window(draw(st.integers(1, 2 * total + 10)), total, n, draw(st.integers(0, 3)))
    return PolicyRequest(tuple(items), window)


def _full_transcript(n: int, rng: np.random.Generator) -> PolicyRequest:
    """A transcript of ``n`` items (overhead, then calls and results, a message now and then) filling its window."""
    items = [TranscriptItem("overhead", "overhead", "overhead", 26_000, 0)]
    for i in range(1, n):
        if i % 2:
            items.append(TranscriptItem(str(i), "call" if i % 7 else "assistant", "json", int(rng.integers(20, 400)),
                                        i // 2))
        else:
            path = f"src/pkg{i % 40}/mod{i % 200}.py"
            items.append(TranscriptItem(str(i), "result", "code", int(rng.lognormal(6.5, 1.2)), i // 2, path,
                                        f"{path}:0"))
    total = sum(i.tokens for i in items)
    return PolicyRequest(tuple(items), Window(total, total, n // 2))


# --- one call, judged --------------------------------------------------------------------------

class _Caller:
    """Calls a policy's ``edit`` (and ``admit``) as the checker does, under the optional limit."""

    def __init__(self, policy, limit: CallLimit | None, method: Any = None) -> None:
        self.policy, self.limit, self.method = policy, limit, method
        self._in = "edit"

    def _enter(self, name: str) -> None:
        self._in = name
        if self.method is not None:
            self.method.value = name.encode()

    def __call__(self, name: str, *args) -> tuple[Any, str | None, str | None]:
        """``policy.<name>(*args)``, or None, the kind of failure and what happened."""
        self._enter(name)
        method = getattr(self.policy, name)
        try:
            return (method(*args) if self.limit is None else self.limit.call(method, *args)), None, None
        except BaseException as exc:   # any way out of a policy is a finding; a real interrupt is passed on
            kind, text = call_failure(exc)
            return None, kind, f"{self._in} {text}"


def _fresh(req: PolicyRequest) -> tuple[list[TranscriptItem], Window]:
    return [copy.copy(i) for i in req.items], copy.copy(req.window)


class _Trial:
    """The calls the checks of one request look at: the first, made at once; a repeated call and the
    ``admit`` calls, each made once when a check first needs them."""

    def __init__(self, call: _Caller, req: PolicyRequest) -> None:
        self.call, self.req = call, req
        self.items, self.window = _fresh(req)
        self.result, self.kind, self.error = call("edit", self.items, self.window)

    @functools.cached_property
    def judged(self) -> tuple[str, str] | None:
        """How the first answer breaks the contract (`judge_edits`), or None."""
        if self.kind is not None:
            return None
        by_id = {i.id: i for i in self.req.items}
        return judge_edits(self.result, by_id.get, _seen(self.req.items))

    @functools.cached_property
    def repeated(self) -> tuple[str, str] | None:
        """How a repeated call broke the contract: (kind, message)."""
        if self.kind is not None or self.judged is not None:
            return None
        again, kind, error = self.call("edit", *_fresh(self.req))
        if kind is not None:
            return (kind if kind in (LEAVES, TIME_LIMIT) else "nondeterministic"), \
                f"first call returned {_shown(self.result)}, then on a repeated call {error}"
        if list(again) != list(self.result):
            return "nondeterministic", f"first call returned {_shown(self.result)}, a repeated call {_shown(again)}"
        return None

    @functools.cached_property
    def admitted(self) -> tuple[str, str] | None:
        """How ``admit`` broke its contract on the request's items: (kind, message)."""
        if not callable(getattr(self.call.policy, "admit", None)):
            return None
        for item in self.req.items:
            tokens, kind, error = self.call("admit", copy.copy(item))
            if kind is not None:
                return kind, error
            if type(tokens) is not int or not 0 <= tokens <= item.tokens:
                return "admit", f"admit gave {tokens!r:.40} for item {item.id!r} of {item.tokens} tokens"
        return None

    def failed(self, kind: str) -> str | None:
        """The message of the call that failed as ``kind`` (leaving or running past the limit: any call)."""
        if self.kind is not None:
            return self.error if self.kind == kind else None
        for problem in (self.repeated, self.admitted):
            if problem is not None and problem[0] == kind:
                return problem[1]
        return None


def _shown(edits: Any, limit: int = 4) -> str:
    if not isinstance(edits, (list, tuple)):
        return f"{type(edits).__name__} {edits!r:.60}"
    text = ", ".join(repr(e) for e in list(edits)[:limit])
    return f"[{text}{', ...' if len(edits) > limit else ''}]"


def _returns_without_raising(t: _Trial) -> str | None:
    """edit returns without raising."""
    return t.failed(RAISES)


def _returns_instead_of_leaving(t: _Trial) -> str | None:
    """edit returns instead of leaving."""
    return t.failed(LEAVES)


def _returns_within_the_time_limit(t: _Trial) -> str | None:
    """edit returns within the per-call time limit."""
    return t.failed(TIME_LIMIT)


def _judged_as(kind: str) -> Callable[[_Trial], str | None]:
    def check(t: _Trial) -> str | None:
        return t.judged[1] if t.judged is not None and t.judged[0] == kind else None
    check.__doc__ = POLICY_KINDS[kind]
    return check


def _leaves_its_input_untouched(t: _Trial) -> str | None:
    """The transcript and the window are left untouched."""
    if t.kind is not None:
        return None
    if t.items != list(t.req.items):
        return "edit changed the transcript it was given"
    return f"edit changed its window to {t.window!r}" if t.window != t.req.window else None


def _answers_the_same_again(t: _Trial) -> str | None:
    """A repeated call gives the same edits."""
    return t.repeated[1] if t.repeated is not None and t.repeated[0] == "nondeterministic" else None


def _admits_at_most_an_items_tokens(t: _Trial) -> str | None:
    """admit gives an item at most its own tokens."""
    return t.admitted[1] if t.admitted is not None and t.admitted[0] == "admit" else None


#: One check per kind of violation but ``hash-seed``, in the order they are looked for.
_CHECKS: tuple[tuple[str, Callable[[_Trial], str | None]], ...] = (
    ("raises", _returns_without_raising),
    ("mutates-input", _leaves_its_input_untouched),
    *((kind, _judged_as(kind)) for kind in _JUDGED),
    ("nondeterministic", _answers_the_same_again),
    ("admit", _admits_at_most_an_items_tokens),
    ("leaves", _returns_instead_of_leaving),
    ("time-limit", _returns_within_the_time_limit),
)


def _violations(call: _Caller, req: PolicyRequest) -> dict[str, str]:
    trial = _Trial(call, req)
    return {kind: message for kind, check in _CHECKS if (message := check(trial)) is not None}


def check_policy_request(policy, req: PolicyRequest) -> dict[str, str]:
    """Every kind of violation (`POLICY_KINDS` but ``hash-seed``) ``policy`` shows on ``req``, with its message."""
    return _violations(_Caller(policy, None), req)


def _encoded(call: _Caller, req: PolicyRequest) -> Any:
    """An answer as JSON, to compare across processes: its edits, or ``{"error": kind}``."""
    result, kind, _ = call("edit", *_fresh(req))
    if kind is not None:
        return {"error": kind}
    try:
        return edits_to_json(result)["edits"]
    except (AttributeError, TypeError):
        return {"error": "bad-return"}


def _latency(call: _Caller, n: int, seed: int) -> Latency:
    """p50/p99 of ``edit`` on a full transcript of ``n`` items (`_full_transcript`; `sampled_latency`)."""
    req = _full_transcript(n, np.random.default_rng([seed, n]))

    def sample() -> int:
        items, window = _fresh(req)   # copied outside the timed interval
        t0 = time.perf_counter_ns()
        call.policy.edit(items, window)
        return time.perf_counter_ns() - t0

    return sampled_latency(n, lambda: call("edit", *_fresh(req)), sample)


class _Subject(LimitedSubject):
    """The policy under check, called in this process."""

    def __init__(self, policy, evict_timeout_ms: int | None, method: Any = None) -> None:
        super().__init__(policy, evict_timeout_ms)
        self.call = _Caller(policy, self.limit, method)

    def describe(self) -> bool:
        """Whether the policy is a policy at all (the parent's check of what it loaded)."""
        return is_policy(self.call.policy)

    def violations(self, req: PolicyRequest) -> dict[str, str]:
        return _violations(self.call, req)

    def answer(self, req: PolicyRequest) -> Any:
        return _encoded(self.call, req)

    def latency(self, n: int, seed: int) -> Latency:
        return _latency(self.call, n, seed)


def _subject_there(evict_timeout_ms: int | None, policy, method: Any) -> _Subject:
    return _Subject(policy, evict_timeout_ms, method).__enter__()


class _IsolatedSubject:
    """The policy under check in a process of its own: a process that ends is a call that leaves."""

    def __init__(self, spec: str, evict_timeout_ms: int | None) -> None:
        check_loads(spec)
        self.process = StrategyProcess(spec, functools.partial(_subject_there, evict_timeout_ms))
        self.evict_timeout_ms = evict_timeout_ms
        self.limited = evict_timeout_ms is not None
        try:
            policy = self.process.call("describe")
        except StrategyEnded as ended:
            self.process.close()
            raise StrategyLoadError(f"cannot build policy {spec!r}: loading it ended the process "
                                    f"({ended.status})") from None
        if not policy:
            self.process.close()
            raise StrategyLoadError(f"{spec!r} is not a context policy (it has no edit)")

    def __enter__(self) -> "_IsolatedSubject":
        return self

    def __exit__(self, *exc) -> None:
        self.process.close()

    def violations(self, req: PolicyRequest) -> dict[str, str]:
        try:
            return self.process.call("violations", req)
        except StrategyEnded as ended:
            return {LEAVES: f"{ended.what}: a policy must return, not leave"}

    def answer(self, req: PolicyRequest) -> Any:
        try:
            return self.process.call("answer", req)
        except StrategyEnded:
            return {"error": LEAVES}

    def latency(self, n: int, seed: int) -> Latency:
        try:
            return self.process.call("latency", n, seed)
        except StrategyEnded as ended:
            return Latency(n, 0, None, None, None, error=f"{ended.what}: a policy must return, not leave")


# --- the search ------------------------------------------------------------------------------------

_WORKER = """\
import json, sys
from ctxbench.strategies.check_policy import PolicyRequest, _Caller, _encoded
from ctxbench.strategies.calls import recording_interrupts
from ctxbench.strategies.policy import request_from_json
from ctxbench.strategies.registry import make
job = json.load(sys.stdin)
call = _Caller(make(job["spec"]), None)
answers = []
with recording_interrupts():
    for request in job["requests"]:
        items, window = request_from_json(request)
        answers.append(_encoded(call, PolicyRequest(tuple(items), window)))
json.dump({"answers": answers}, sys.stdout)
"""


def _fixed_requests(seed: int, count: int = _HASHSEED_BATCH) -> list[PolicyRequest]:
    """A reproducible batch of requests, smallest first, windows on both sides of the usual thresholds."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        req = _full_transcript(4 + k * 4, rng)
        scale = (0.5, 0.9, 1.0, 1.3)[k % 4]
        out.append(PolicyRequest(req.items, Window(max(1, int(req.window.tokens / scale)), req.window.tokens, k)))
    return out


def _check_hashseed(subject, spec: str | None, seed: int, report: CheckReport) -> None:
    if spec is None:
        report.skipped["hash-seed"] = ("the policy was given as an object, which cannot be re-created in a "
                                       "subprocess; pass a spec string to run this check")
        return
    batch = _fixed_requests(seed)
    hashseed = _child_hashseed(seed)
    env = dict(os.environ, PYTHONHASHSEED=hashseed,
               PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str)))
    job = json.dumps({"spec": spec, "requests": [items_to_json(r.items, r.window) for r in batch]})
    try:
        proc = subprocess.run([sys.executable, "-c", _WORKER], input=job, capture_output=True, text=True, env=env,
                              timeout=_HASHSEED_TIMEOUT_S, check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}, no output"])[-1]
            raise RuntimeError(f"the subprocess failed: {last}")
        theirs = json.loads(proc.stdout)["answers"]
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        report.skipped["hash-seed"] = f"could not run {spec!r} in a subprocess: {exc}"
        return
    for req, their in zip(batch, theirs):
        ours = subject.answer(req)
        if isinstance(ours, list) and isinstance(their, list) and ours != their:
            report.failures.append(CheckFailure(
                "hash-seed", f"returned {json.dumps(ours)[:200]} here but {json.dumps(their)[:200]} with "
                             f"PYTHONHASHSEED={hashseed}", req.json(), POLICY_KINDS["hash-seed"]))
            break
    report.checked.append("hash-seed")


def check_policy(policy_or_spec: Any, *, examples: int = 200, latency: bool = True, seed: int = 0,
                 hash_seed: bool = True, evict_timeout_ms: int | None = None) -> CheckReport:
    """Check a transcript policy (spec string or object) against its contract (`POLICY_KINDS`).

    ``examples`` requests are generated per search; ``latency=False`` skips the timing and
    ``hash_seed=False`` the subprocess run under another ``PYTHONHASHSEED``; ``evict_timeout_ms``
    limits every call (``time-limit``). A spec of code ctxbench does not ship runs in a process of
    its own, where a process that ends during a call fails ``leaves``. Raises `StrategyLoadError`
    when the spec cannot be loaded or is not a policy; every violation is reported, never raised.

    >>> check_policy("observation-masking", examples=20, latency=False, hash_seed=False).ok
    True
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive integer, got {examples!r}")
    spec = policy_or_spec.strip() if isinstance(policy_or_spec, str) else None
    if spec is not None and loads_code(spec):
        subject = _IsolatedSubject(spec, evict_timeout_ms)
    else:
        policy = make(policy_or_spec)
        if not is_policy(policy):
            raise StrategyLoadError(f"{spec or policy!r} is not a context policy (it has no edit)")
        subject = _Subject(policy, evict_timeout_ms)
    with subject:
        report = CheckReport(strategy=spec or repr(policy_or_spec), examples=examples, seed=seed)
        found = search_violations(subject.violations, examples, seed, transcript_requests())
        report.checked.extend(k for k in POLICY_KINDS if k != "hash-seed" and (k != TIME_LIMIT or subject.limited))
        report.failures.extend(CheckFailure(kind, found[kind][1], found[kind][0].json(), POLICY_KINDS[kind])
                               for kind in POLICY_KINDS if kind in found)
        if not hash_seed:
            report.skipped["hash-seed"] = "not requested (hash_seed=False)"
        elif "nondeterministic" in found:
            report.skipped["hash-seed"] = "the policy already answers differently on a repeated call"
        else:
            _check_hashseed(subject, spec, seed, report)
        if latency:
            report.latency = [subject.latency(n, seed) for n in LATENCY_SIZES]
    return report
