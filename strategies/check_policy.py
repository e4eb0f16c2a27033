"""The policy contract of the conformance checker (`strategies.policy`): does a policy keep its contract, how fast is it?

`check_policy` runs the checker's core (`strategies.checker.run_check`) with the contract defined here:
transcripts and windows drawn by hypothesis (`transcript_requests`), the named checks of `POLICY_KINDS` made
on the calls of one request, each kind found shrunk to a minimal example in the JSON form of the ``cmd:``
protocol (`strategies.policy.items_to_json`), an answer written as its edits in that form, and the latency of
``edit`` on full transcripts of 100 and 10,000 items. The edits are judged by the same function as every
replay (`strategies.policy.judge_edits`), so a policy that passes is not refused by ``ctxbench run``. As for
strategies (`strategies.check`), each kind is one small function of a `_Trial`, run from the table `_CHECKS`.
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from ctxbench.strategies.adapter import POLICY, Adapter
from ctxbench.strategies.calls import LEAVES, RAISES, TIME_LIMIT
from ctxbench.strategies.checker import HASHSEED_BATCH, Caller, CheckReport, Contract, Latency, run_check, sampled_latency
from ctxbench.strategies.policy import (ROLES, TranscriptItem, Window, edits_to_json, items_to_json, judge_edits,
                               read_edits, request_from_json)

__all__ = ["POLICY_KINDS", "CONTRACT", "PolicyRequest", "transcript_requests", "check_policy_request", "check_policy"]

POLICY_KINDS: dict[str, str] = {
    "raises": "edit returns without raising",
    "leaves": "edit returns instead of leaving (sys.exit, a KeyboardInterrupt of its own, another BaseException, "
              "ending its process)",
    "time-limit": "edit returns within the per-call time limit (checked with --evict-timeout-ms)",
    "bad-return": "edit returns a list or tuple of Replace, Append and Request edits",
    "bad-edit": "each edit has a role and a token count the contract allows",
    "unknown-item": "every replaced id is an item of the transcript",
    "duplicate": "no item is replaced twice",
    "overhead": "the overhead is never replaced",
    "grows": "a Replace puts at most the tokens it removes",
    "bad-attach": "an attached copy is of a revision an item held, at most as large",
    "window-grows": "the edits of one call never leave the window larger",
    "bad-request": "a Request names items of the transcript once each, comes at most once and with a summary",
    "nondeterministic": "a repeated call gives the same edits",
    "mutates-input": "the transcript and the window are left untouched",
    "admit": "admit gives an item at most its own tokens, an integer >= 0",
    "hash-seed": "another PYTHONHASHSEED gives the same edits",
}
"""Each kind of violation the policy checker looks for, with the property it stands for."""

_JUDGED = ("bad-return", "bad-edit", "unknown-item", "duplicate", "overhead", "grows", "bad-attach", "window-grows",
           "bad-request")


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

def _fresh(req: PolicyRequest) -> tuple[list[TranscriptItem], Window]:
    return [copy.copy(i) for i in req.items], copy.copy(req.window)


class _Trial:
    """The calls the checks of one request look at: the first, made at once; a repeated call and the
    ``admit`` calls, each made once when a check first needs them."""

    def __init__(self, call: Caller, req: PolicyRequest) -> None:
        self.call, self.req = call, req
        self.items, self.window = _fresh(req)
        self.result, self.kind, self.error = call("edit", self.items, self.window)
        self.read = None if self.kind is not None else read_edits(self.result)   # read once, as a replay reads it

    @functools.cached_property
    def judged(self) -> tuple[str, str] | None:
        """How the first answer, as a replay reads it (`read_edits`), breaks the contract (`judge_edits`), or None."""
        if self.kind is not None:
            return None
        by_id = {i.id: i for i in self.req.items}
        return judge_edits(self.read, by_id.get, _seen(self.req.items))

    @functools.cached_property
    def repeated(self) -> tuple[str, str] | None:
        """How a repeated call broke the contract: (kind, message)."""
        if self.kind is not None or self.judged is not None:
            return None
        again, kind, error = self.call("edit", *_fresh(self.req))
        if kind is not None:
            return (kind if kind in (LEAVES, TIME_LIMIT) else "nondeterministic"), \
                f"first call returned {_shown(self.result)}, then on a repeated call {error}"
        if read_edits(again) != self.read:
            return "nondeterministic", f"first call returned {_shown(self.result)}, a repeated call {_shown(again)}"
        return None

    @functools.cached_property
    def admitted(self) -> tuple[str, str] | None:
        """How ``admit`` broke its contract on the request's items: (kind, message)."""
        if not callable(getattr(self.call.target, "admit", None)):
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


def _violations(call: Caller, req: PolicyRequest) -> dict[str, str]:
    trial = _Trial(call, req)
    return {kind: message for kind, check in _CHECKS if (message := check(trial)) is not None}


def check_policy_request(policy, req: PolicyRequest) -> dict[str, str]:
    """Every kind of violation (`POLICY_KINDS` but ``hash-seed``) ``policy`` shows on ``req``, with its message."""
    return _violations(Caller(policy), req)


def _encoded(call: Caller, req: PolicyRequest) -> Any:
    """An answer as plain JSON, to compare across processes: its edits as a replay reads them (`read_edits`: a
    ``str`` subclass as the string it holds), or ``{"error": kind}``."""
    result, kind, _ = call("edit", *_fresh(req))
    if kind is not None:
        return {"error": kind}
    try:
        return json.loads(json.dumps(edits_to_json(read_edits(result))["edits"]))
    except (AttributeError, TypeError, ValueError):
        return {"error": "bad-return"}


def _latency(call: Caller, n: int, seed: int) -> Latency:
    """p50/p99 of ``edit`` on a full transcript of ``n`` items (`_full_transcript`; `sampled_latency`)."""
    req = _full_transcript(n, np.random.default_rng([seed, n]))

    def sample() -> int:
        items, window = _fresh(req)   # copied outside the timed interval
        t0 = time.perf_counter_ns()
        call.target.edit(items, window)
        return time.perf_counter_ns() - t0

    return sampled_latency(n, lambda: call("edit", *_fresh(req)), sample)


# --- the contract ----------------------------------------------------------------------------------

def _fixed_requests(seed: int, count: int = HASHSEED_BATCH) -> list[PolicyRequest]:
    """A reproducible batch of requests, smallest first, windows on both sides of the usual thresholds."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        req = _full_transcript(4 + k * 4, rng)
        scale = (0.5, 0.9, 1.0, 1.3)[k % 4]
        out.append(PolicyRequest(req.items, Window(max(1, int(req.window.tokens / scale)), req.window.tokens, k)))
    return out


def _smaller(req: PolicyRequest) -> list[PolicyRequest]:
    """The requests with one item of ``req`` but the overhead left out."""
    return [PolicyRequest(req.items[:i] + req.items[i + 1:], req.window) for i, item in enumerate(req.items)
            if item.role != "overhead"]


def _to_json(req: PolicyRequest) -> Any:
    return items_to_json(req.items, req.window)


def _from_json(request: Any) -> PolicyRequest:
    items, window = request_from_json(request)
    return PolicyRequest(tuple(items), window)


def _shown_edits(edits: Any) -> str:
    return json.dumps(edits)[:200]


def _refusal(adapter: Adapter) -> str | None:
    return None if adapter.kind == POLICY else "is not a context policy (it has no edit)"


CONTRACT = Contract(
    noun="policy", method="edit", kinds=POLICY_KINDS, name="ctxbench.strategies.check_policy:CONTRACT",
    requests=transcript_requests, minimise=None, fixed_requests=_fixed_requests, smaller=_smaller,
    to_json=_to_json, from_json=_from_json, violations=_violations, encode=_encoded, shown=_shown_edits,
    latency=_latency, refusal=_refusal,
)
"""The policy contract, the parameters of the checker's core (`strategies.checker.run_check`)."""


def check_policy(policy_or_spec: Any, *, examples: int = 200, latency: bool = True, seed: int = 0,
                 hash_seed: bool = True, evict_timeout_ms: int | None = None) -> CheckReport:
    """Check a transcript policy (spec string or object) against its contract (`POLICY_KINDS`).

    ``examples`` requests are generated per search; ``latency=False`` skips the timing and
    ``hash_seed=False`` the subprocess run under another ``PYTHONHASHSEED``; ``evict_timeout_ms``
    limits every call (``time-limit``), in that subprocess too. A spec of code ctxbench does not ship runs
    in a process of its own, where a process that ends during a call fails ``leaves``; a ``cmd:`` program
    that runs past its ``timeout_ms`` fails ``time-limit``, one that exits ``leaves``. Raises
    `StrategyLoadError` when the spec cannot be loaded or is not a policy; every violation is reported,
    never raised.

    >>> check_policy("observation-masking", examples=20, latency=False, hash_seed=False).ok
    True
    """
    return run_check(CONTRACT, policy_or_spec, examples=examples, latency=latency, seed=seed, hash_seed=hash_seed,
                     evict_timeout_ms=evict_timeout_ms)
