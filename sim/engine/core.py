"""The replay core, written to be read: one loop, one tally and one row builder for every model of the
context (docs/design.md §5).

A replay walks an arm's resolved steps (`sim.engine.rules.Resolved`) in order. At each step the core
asks the **model** whether the entry the step needs is in the window (`Model.holds`) and tallies the
need (`Tally`, counted in `Replay.steps`), then hands the model the step's placement (`Model.place`); at each turn end the model
does what a turn end does (`Model.end_turn`: call the strategy or the policy, remove what it answers)
and says what it measured (`TurnEnd`); the core writes the turn's row from the tally and that, by the
names `sim.engine.measures.TURN_FIELDS` declares. Two models plug in: the managed context
(`sim.engine.rules.Managed`) and the append-only transcript (`sim.engine.transcript.Transcript`).

What the models share is here too: the prompt cache's accounting (`PromptCache`), a timed call into
user code (`timed_call`) and how a contract violation is reported (`Violations`). The compiled core
(``sim/engine/_engine.c``) has the same loop, tally, row and plug-ins, and the tests compare the two.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from operator import attrgetter
from time import perf_counter_ns
from typing import NamedTuple, Protocol

from ctxbench.sim.engine.measures import END_FIELDS, KEY_FIELDS, TALLY_FIELDS, TURN_FIELDS, EvictedIds, TurnLog
from ctxbench.sim.errors import ContractViolation
from ctxbench.strategies.calls import call_failure
from ctxbench.strategies.contract import answer_base, shown

__all__ = ["NO_NEED", "COMPULSORY", "INVALIDATION", "CAPACITY", "MISSES", "Tally", "TurnEnd", "turn_row", "Model",
           "Replay", "PromptCache", "Violations", "timed_call", "failed_call", "violation_message", "shown_answer",
           "plain"]

#: How a needed entry that is not in the window is missed (the resolver's classes, `sim.engine.rules`).
#: CAPACITY: the arm held this very revision before, so only an eviction can have removed it.
MISSES = ("no-need", "compulsory", "invalidation", "capacity")
NO_NEED, COMPULSORY, INVALIDATION, CAPACITY = range(len(MISSES))


class Tally:
    """The open turn's counts of needs, one attribute per `TALLY_FIELDS` name (counted by `Replay.steps`)."""

    __slots__ = TALLY_FIELDS

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Start a new turn."""
        for name in TALLY_FIELDS:
            setattr(self, name, 0)


class TurnEnd(NamedTuple):
    """What a model measured at a turn end: the `END_FIELDS` of the turn's row (see their comments)."""

    evictions: int
    evicted_bytes: int
    turn_bytes: int
    occupancy_bytes: int
    entries: int
    evict_ns: int
    violations: int
    pinned_bytes: int
    over_window: int
    cache_read_bytes: int
    compactions: int
    window_bytes: int
    summary_calls: int = 0
    summary_prompt_bytes: int = 0
    summary_cache_read_bytes: int = 0
    summary_output_bytes: int = 0
    summary_dropped_bytes: int = 0


if TurnEnd._fields != END_FIELDS or TURN_FIELDS != KEY_FIELDS + TALLY_FIELDS + END_FIELDS:
    raise ImportError("sim/engine/core.py: TurnEnd and the row must have the fields sim/engine/measures.py declares")

_TALLIED = attrgetter(*TALLY_FIELDS)


def turn_row(turn: int, ts_ms: int, tally: Tally, end: TurnEnd) -> tuple[int, ...]:
    """The turn's row in `TURN_FIELDS` order: its key, the tally's fields and the model's measures (`TurnEnd`, whose
    fields are `END_FIELDS`), each by name."""
    return (turn, ts_ms, *_TALLIED(tally), *end)


class Model(Protocol):
    """What a model of the context does (the managed context, the transcript)."""

    #: The per-call time limit of the user code it calls (installed once for the whole replay), if any.
    limit: contextlib.AbstractContextManager | None

    def holds(self, entry: int) -> bool:
        """Whether entry ``entry`` is in the window now."""

    def place(self, step: int) -> None:
        """Apply resolved step ``step``'s placement (its need is tallied already)."""

    def end_turn(self, turn: int, ts_ms: int) -> tuple[TurnEnd, list[str]]:
        """Close a turn: what the model measured, and the ids it removed, in order."""


class Replay:
    """The one loop: resolved steps through a model, one tally, one row per turn end.

    `step` and `end_turn` drive it event by event (`sim.engine.turn_by_turn`); `run` replays a whole
    resolved arm.
    """

    def __init__(self, resolved, model: Model) -> None:
        self.resolved, self.model = resolved, model
        self.tally = Tally()
        self.rows: list[tuple[int, ...]] = []
        self.evicted: list[str] = []          # the ids removed at turn ends, in order
        self.evicted_turns: list[int] = []    # and the turn each left at

    def step(self, i: int) -> None:
        """Apply resolved step ``i``: tally its need, then its placement."""
        self.steps(i, i + 1)

    def end_turn(self, turn: int, ts_ms: int) -> None:
        """Close a turn: the model's turn end, then the turn's row."""
        end, evicted = self.model.end_turn(turn, ts_ms)
        if evicted:
            self.evicted += evicted
            self.evicted_turns += [turn] * len(evicted)
        tally = self.tally
        self.rows.append(turn_row(turn, ts_ms, tally, end))
        if tally.accesses:   # else nothing was counted
            tally.clear()

    def steps(self, start: int, stop: int) -> None:
        """Apply resolved steps ``start`` to ``stop``: each one's need is a hit when the model holds its entry,
        else a miss of the class the resolver gave it, counted in the tally; then the model places it."""
        r, t = self.resolved, self.tally
        need_of, need_bytes, miss = r.need, r.need_bytes, r.miss
        holds, place = self.model.holds, self.model.place
        for i in range(start, stop):
            need = need_of[i]
            if need >= 0:
                nbytes = need_bytes[i]
                t.accesses += 1
                t.accessed_bytes += nbytes
                if holds(need):
                    t.hits += 1
                else:
                    t.miss_bytes += nbytes
                    if miss[i] == CAPACITY:
                        t.capacity += 1
                        t.capacity_bytes += nbytes
                    elif miss[i] == INVALIDATION:
                        t.invalidation += 1
                        t.invalidation_bytes += nbytes
                    else:
                        t.compulsory += 1
            place(i)

    def run(self) -> "Replay":
        """Replay every step and turn end of the resolved arm, the model's time limit installed once."""
        r = self.resolved
        with self.model.limit or contextlib.nullcontext():
            done = 0
            for stop, turn, ts in zip(r.ends, r.end_turns, r.end_ts):
                self.steps(done, stop)
                self.end_turn(turn, ts)
                done = stop
            self.steps(done, len(r.slot))   # steps after the last turn end
        return self

    def log(self) -> TurnLog:
        """The per-turn log so far."""
        return TurnLog.from_rows(self.rows, EvictedIds(self.evicted_turns, self.evicted))


class PromptCache:
    """The prompt cache across calls (each turn end is a call): a call reads from the cache the previous
    call's prompt up to its first change, nothing when the previous call is older than ``ttl_ms``.
    A model numbers the places of its prompt and says where it changed (`change`)."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.last: tuple[int, int] | None = None   # the previous call: (places in its prompt, time)
        self.changed_from: int | None = None       # the first place changed since then

    def change(self, place: int) -> None:
        """The prompt changed at ``place``."""
        if self.changed_from is None or place < self.changed_from:
            self.changed_from = place

    def read(self, ts_ms: int, places: int, prefix: Callable[[int], int]) -> int:
        """Bytes this call (at ``ts_ms``, its prompt ``places`` long) reads from the cache; ``prefix(k)``
        is the bytes the previous prompt held before place ``k``."""
        last, self.last = self.last, (places, ts_ms)
        changed, self.changed_from = self.changed_from, None
        if last is None or ts_ms - last[1] > self.ttl_ms:
            return 0
        return prefix(last[0] if changed is None else min(changed, last[0]))

    def read_aside(self, ts_ms: int, shared: int, prefix: Callable[[int], int]) -> int:
        """Bytes a call made aside reads from the cache: a call at ``ts_ms`` whose prompt holds the places before
        ``shared`` of the prompt as it is now, and nothing after them as they stand. It is not the previous call
        for the next one, which reads as if it had not been made."""
        last, changed = self.last, self.changed_from
        if last is None or ts_ms - last[1] > self.ttl_ms:
            return 0
        upto = last[0] if changed is None else min(changed, last[0])
        return prefix(min(upto, shared))


class Violations:
    """How one replay reports contract violations: strict, `ContractViolation` at the first; lenient,
    each counted in ``messages``."""

    def __init__(self, name: str, session: str, arm: str, strict: bool, noun: str = "strategy") -> None:
        self.name, self.session, self.arm, self.strict, self.noun = name, session, arm, strict, noun
        self.messages: list[str] = []

    def report(self, turn: int, what: str, answer=None) -> None:
        """A violation at ``turn``: ``what`` happened (and, for a strategy, what it answered)."""
        message = violation_message(self.name, self.session, self.arm, turn, what, answer, self.noun)
        if self.strict:
            raise ContractViolation(message)
        self.messages.append(message)


def timed_call(fn: Callable, *args) -> tuple[object, str | None, int]:
    """Call user code ``fn(*args)`` (an adapter's call, `strategies.adapter.Adapter`, limited or not), timed with
    a monotonic clock: ``(answer, None, ns)``, or ``(None, how it broke the contract, ns)`` when the call did
    not return (`failed_call`; a real interrupt goes on)."""
    started = perf_counter_ns()
    try:
        answer = fn(*args)
    except BaseException as exc:   # a call that fails breaks the contract; it does not crash the replay
        return None, failed_call(exc), perf_counter_ns() - started
    return answer, None, perf_counter_ns() - started


def failed_call(exc: BaseException, name: str | None = None) -> str:
    """How a call into user code (``name``: a hook) that ended in ``exc`` broke the contract; a real
    interrupt is raised again instead (`strategies.calls.call_failure`)."""
    text = call_failure(exc)[1]
    return text if name is None else f"{name} {text}"


def violation_message(strategy: str, session: str, arm: str, turn: int, what: str, answer,
                      noun: str = "strategy") -> str:
    """The message of a violation: who broke the contract (a ``noun``: strategy, policy), where, how, and what
    they returned."""
    return (f"{noun} {strategy!r}, session {session!r}{'' if arm == 'main' else f', arm {arm!r}'}, "
            f"turn {turn}: {what}{shown_answer(answer)}")


def shown_answer(answer) -> str:
    """`` (returned [...])`` with the first 8 ids of a list or tuple (`strategies.contract.shown`) and
    their number past 8; nothing for any other answer (the violation names its type) or for a call
    that failed (``None``): no code of the strategy's runs to report it."""
    base = answer_base(answer)
    if base is None:
        return ""
    first = ", ".join(map(shown, base.__getitem__(answer, slice(0, 8))))
    count = base.__len__(answer)
    return f" (returned {count:,} ids: [{first}, ...])" if count > 8 else f" (returned [{first}])"


def plain(column: Sequence) -> list:
    """A column as a list of Python values (numpy's scalars would slow every step)."""
    return column if type(column) is list else column.tolist() if hasattr(column, "tolist") else list(column)
