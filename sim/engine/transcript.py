"""The transcript model: an append-only context shed by a policy (docs/design.md §8).

Every event appends an item, in order: a file read adds a copy even while an older one is in the
window. Before each call to the model (each turn end) the policy (`strategies.policy`) may
replace items: compact a stretch of history into a summary, mask old tool results. Replays give
a `TurnLog` with the same fields as the managed model's (`sim.engine.rules.Context`), so both
are measured by the same metrics:

- a need (a read or an edit) hits when an item holding that revision is in the window; a
  revision that was in the window and left it (the policy removed every copy) is missed as
  capacity (re-fetched), else compulsory or invalidation as the resolver classed it;
- ``window_bytes`` is the window before the policy's edits, ``turn_bytes`` and
  ``occupancy_bytes`` its tool results (files and outputs, and files re-attached) before and
  after them, ``pinned_bytes`` the rest after them (overhead, messages, tool inputs, summaries,
  placeholders); ``evictions`` the items the edits removed (their ids are the turn's evicted
  ids) and ``evicted_bytes`` what the window shrank by; ``entries`` the items; ``evict_ns`` the
  policy's call; ``compactions`` 1 when an edit replaced a stretch of several items or put a
  summary in place of history;
  ``over_window`` 1 when the window after the edits is larger than the window size; the prompt
  cache (``cache_read_bytes``) as in the managed model: the previous call's prompt up to the first
  item an edit removed, if that call is within the cache's lifetime.

What an event adds: a read or an output, its cost (a re-read adds its copy again); an edit or a
write whose tool-call input and returned text the stream holds (`accompanied_changes`: an import
with the conversation), nothing, since those two events carry it; another edit, or a write of a new file, the tool's
confirmation (`CONFIRMATION_BYTES` of output, not the file: its content is in the tool call's
input); a write over a file the arm had, the file (Claude Code answers an overwrite with a
``cat -n`` of the new content: the bundled sessions' Write results reach 25,666 characters); a
message, a tool call's input or the overhead, its cost. Item tokens are reference bytes over the
reference ratio, rounded; what the policy answers in tokens is converted back.

The edits of one call are judged whole before any is applied: a `Replace` names distinct items
of the transcript, none of the overhead, and puts at most the tokens it removes; an ``attached``
`Append` copies a revision an earlier item held, at most as large; together they never leave the
window larger than it was. A call that raises, leaves or answers otherwise breaks the contract
(strict: `ContractViolation`; lenient: counted, nothing applied).

``admit``'s answer must be an integer from 0 to the item's tokens; another answer, or a call that
fails, breaks the contract too (reported at the turn's end; the item enters whole).

Each step is O(1); a call's edits cost O(items after the first one they change), so the prompt
cache's accounting is O(1) amortised per call for policies that change the end of the transcript.
`_Transcript` is the specification; the compiled engine (``engine.transcript`` in
``sim/engine/_engine.c``) applies the same rules, and the tests compare the two
(``tests/test_transcript_engine.py``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from itertools import accumulate
from time import perf_counter_ns

import numpy as np

from ctxbench.sim.engine.arm import ArmReplay, _int64, _use_compiled
from ctxbench.sim.engine.compiled import engine
from ctxbench.sim.engine.measures import CACHE_TTL_MS, TURN_FIELDS, TurnLog
from ctxbench.sim.engine.rules import (CALL, CAPACITY, EDIT, INVALIDATION, MESSAGE, OUTPUT, OVERHEAD, READ, WRITE, ArmStream,
                              Resolved, failed_call, violation_message)
from ctxbench.sim.errors import ContractViolation
from ctxbench.strategies.calls import call_limit_for
from ctxbench.strategies.policy import ROLES, Append, Replace, TranscriptItem, Window, judge_edits
from ctxbench.traces.tokens import KINDS

__all__ = ["CONFIRMATION_BYTES", "replay_transcript", "TranscriptView", "accompanied_changes"]

#: What an edit's or a write's tool result adds to a transcript, in bytes of tool output: the
#: median Edit and Write result of the bundled Claude Code sessions (127 and 130 characters).
CONFIRMATION_BYTES = 130

_ROLE_OF_OP = {READ: "result", EDIT: "result", WRITE: "result", OUTPUT: "result", CALL: "call",
               OVERHEAD: "overhead"}
_KIND_OF_OP = {READ: "code", EDIT: "output", WRITE: "output", OUTPUT: "output", CALL: "json", OVERHEAD: "overhead"}
_EVICTABLE = frozenset(("result", "attached"))   # what `turn_bytes` and `occupancy_bytes` count
_MESSAGE_ROLES = {"user": "user", "thinking": "thinking"}


def accompanied_changes(ops: Sequence[int], paths: Sequence[str]) -> np.ndarray:
    """Which events are an edit or a write whose tool-call input (``call://T/N``) the stream holds and
    whose returned text (``tool://T/N``) follows it: an import with the conversation carries both, so
    the change itself adds nothing to the transcript.

    >>> accompanied_changes([CALL, EDIT, OUTPUT, EDIT], ["call://edit/1", "a.py", "tool://edit/1", "a.py"]).tolist()
    [False, True, False, False]
    """
    calls = {path[7:] for op, path in zip(ops, paths) if op == CALL and path.startswith("call://")}
    out = np.zeros(len(ops), dtype=bool)
    for i in range(len(ops) - 1):
        if (ops[i] == EDIT or ops[i] == WRITE) and ops[i + 1] == OUTPUT and paths[i + 1].startswith("tool://") \
                and paths[i + 1][7:] in calls:
            out[i] = True
    return out


def _message_role(path: str) -> str:
    """``user``, ``thinking`` or ``assistant`` (any other message) from a ``msg://ROLE/N`` path."""
    return _MESSAGE_ROLES.get(path[6:path.find("/", 6)] if path.startswith("msg://") else "", "assistant")


class _Closed:
    """What a closed `TranscriptView` reads: nothing."""

    def _closed(self, *args):
        raise RuntimeError("this transcript was only valid during the call that received it")

    __len__ = __getitem__ = __iter__ = __reversed__ = _closed


_CLOSED = _Closed()


class TranscriptView(Sequence):
    """The transcript's items in order, read-only, valid only during the policy's call (an iterator taken
    from it reads the transcript as it is when it is read)."""

    __slots__ = ("_items",)

    def __init__(self, items: list[TranscriptItem]) -> None:
        self._items = items

    def close(self) -> None:
        """End the view's validity."""
        self._items = _CLOSED

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        found = self._items[index]
        return tuple(found) if type(index) is slice else found

    def __iter__(self):
        return iter(self._items)

    def __reversed__(self):
        return reversed(self._items)


class _Transcript:
    """The replay's state: the items in order, their bytes and prefix sums, what each holds."""

    def __init__(self, stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float,
                 confirmation: int, *, strict: bool, name: str, session: str, cache_ttl_ms: int,
                 evict_timeout_ms: int | None) -> None:
        self.stream, self.resolved, self.policy = stream, resolved, policy
        self.ops, self.paths = _plain(stream.ops), stream.paths
        self.kinds = None if stream.kinds is None else _plain(stream.kinds)
        self.silent = accompanied_changes(self.ops, self.paths).tolist()
        self.max_bytes, self.reference, self.confirmation = max_bytes, reference, confirmation
        self.max_tokens = round(max_bytes / reference)
        self.strict, self.name, self.session, self.cache_ttl_ms = strict, name, session, cache_ttl_ms
        self.limit = call_limit_for(policy, evict_timeout_ms)
        self.admit = getattr(policy, "admit", None)
        self.admit_problem: str | None = None      # how admit first broke the contract this turn
        self.items: list[TranscriptItem] = []
        self.sizes: list[int] = []                # bytes of each item
        self.cum: list[int] = [0]                 # cum[k]: bytes of items[:k]
        self.index_of: dict[str, int] = {}        # id -> its place in `items`
        self.refs: dict[str, int] = {}            # revision -> copies holding it in the window
        self.seen: dict[str, int] = {}            # revision -> the most tokens a copy of it had
        self.bytes = 0
        self.evictable = 0
        self.changed_from: int | None = None      # the first place an edit changed since the last call
        self.last_call: tuple[int, int] | None = None   # the previous call: (items, time)
        self.made = 0                             # items the policy made
        self.compactions = 0
        self.rows: list[tuple] = []
        self.evicted_ids: dict[int, list[str]] = {}
        self.violation_messages: list[str] = []
        self.tally = [0] * 9                      # measures.TALLY_FIELDS

    # ----- the items ------------------------------------------------------------------------
    def _tokens(self, size: int) -> int:
        return round(size / self.reference)

    def _size(self, tokens: int) -> int:
        return round(tokens * self.reference)

    def steps(self, start: int, stop: int, turn: int) -> None:
        """Apply resolved steps ``start`` to ``stop``: each one's need, then the item it appends."""
        r, tally, refs, ops, paths, kinds = self.resolved, self.tally, self.refs, self.ops, self.paths, self.kinds
        admit, reference, confirmation, silent = self.admit, self.reference, self.confirmation, self.silent
        for i in range(start, stop):
            event = r.event[i]
            op = ops[event]
            need = r.need[i]
            if need >= 0:
                nb = r.need_bytes[i]
                tally[0] += 1
                tally[5] += nb
                if refs.get(r.ids[need], 0) > 0:
                    tally[1] += 1
                else:
                    tally[6] += nb
                    miss = r.miss[i]
                    if miss == CAPACITY:
                        tally[3] += 1
                        tally[7] += nb
                    elif miss == INVALIDATION:
                        tally[4] += 1
                        tally[8] += nb
                    else:
                        tally[2] += 1
            place = r.place[i]
            ref = r.ids[place] if place >= 0 else ""
            path = paths[event]
            if op == MESSAGE:
                role = _message_role(path)
                kind = "thinking" if role == "thinking" else "prose"
            else:
                role, kind = _ROLE_OF_OP[op], _KIND_OF_OP[op]
            if kinds is not None:
                kind = KINDS[kinds[event]]
            if silent[event]:
                size = 0
            elif op == EDIT or (op == WRITE and ref.endswith(":0")):
                size = confirmation
            else:
                size = r.place_bytes[i]
            item = TranscriptItem(str(event), role, kind, round(size / reference), turn, path, ref)
            if admit is not None:
                tokens = self._admitted(item)
                if tokens < item.tokens:
                    item = TranscriptItem(item.id, role, kind, tokens, turn, path, ref)
                    size = round(tokens * reference)
            self._append(item, size)

    def _admitted(self, item: TranscriptItem) -> int:
        """What ``admit`` lets ``item`` take: an integer from 0 to its tokens; anything else (or a call that
        fails) breaks the contract, reported at the turn's end, and the item enters whole."""
        try:
            tokens = self.admit(item) if self.limit is None else self.limit.call(self.admit, item)
        except BaseException as exc:   # judged at the turn's end; a real interrupt goes on
            problem = failed_call(exc, "admit")
        else:
            if type(tokens) is int and 0 <= tokens <= item.tokens:
                return tokens
            problem = f"admit gave {tokens!r:.40} for item {item.id!r} of {item.tokens} tokens"
        if self.admit_problem is None:
            self.admit_problem = problem
        return item.tokens

    def _append(self, item: TranscriptItem, size: int) -> None:
        self.index_of[item.id] = len(self.items)
        self.items.append(item)
        self.sizes.append(size)
        self.cum.append(self.cum[-1] + size)
        self.bytes += size
        if item.role in _EVICTABLE:
            self.evictable += size
        ref = item.ref
        if ref:
            self.refs[ref] = self.refs.get(ref, 0) + 1
            if item.tokens > self.seen.get(ref, -1):
                self.seen[ref] = item.tokens

    # ----- the policy -----------------------------------------------------------------------
    def _item(self, item_id: str) -> TranscriptItem | None:
        at = self.index_of.get(item_id)
        return None if at is None else self.items[at]

    def _apply(self, edits, turn: int) -> tuple[list[str], int]:
        """Apply judged edits: the ids removed, and whether history was compacted (see the module docstring)."""
        removed: list[str] = []
        compacted = 0
        first = len(self.items)
        for edit in edits:
            if type(edit) is Replace:
                ids = edit.ids
                places = [self.index_of[ids[0]]] if len(ids) == 1 else sorted(self.index_of[i] for i in ids)
                removed.extend(edit.ids)
                compacted |= len(places) > 1 or (edit.role == "summary" and edit.tokens > 0)
                first = min(first, places[0])
                new = None
                if edit.tokens:
                    self.made += 1
                    new = TranscriptItem(f"p{self.made}", edit.role, "prose", edit.tokens, turn)
                for at in places:
                    self._forget(at)
                if len(places) == 1 and new is not None:   # in place: nothing moves
                    self._put(places[0], new, self._size(edit.tokens))
                else:
                    self._restructure(places, new)
            else:
                self.made += 1
                holds = edit.role == "attached" and edit.tokens >= self.seen[edit.ref]
                path = edit.ref.rpartition(":")[0] if edit.role == "attached" else ""
                new = TranscriptItem(f"p{self.made}", edit.role, "prose" if edit.role == "summary" else "code",
                                     edit.tokens, turn, path, edit.ref if holds else "")
                self._append(new, self._size(edit.tokens))
        # The prefix sums from the first place changed on.
        self.cum[first:] = accumulate(self.sizes[first:], initial=self.cum[first])
        if self.changed_from is None or first < self.changed_from:
            self.changed_from = first
        return removed, compacted

    def _forget(self, at: int) -> None:
        """Item ``at`` leaves the window (its place is refilled or removed by the caller)."""
        item, size = self.items[at], self.sizes[at]
        del self.index_of[item.id]
        self.bytes -= size
        if item.role in _EVICTABLE:
            self.evictable -= size
        if item.ref:
            self.refs[item.ref] -= 1

    def _put(self, at: int, item: TranscriptItem, size: int) -> None:
        self.items[at], self.sizes[at] = item, size
        self.index_of[item.id] = at
        self.bytes += size
        if item.role in _EVICTABLE:
            self.evictable += size

    def _restructure(self, places: list[int], new: TranscriptItem | None) -> None:
        """Remove the items at ``places`` (ascending); ``new``, if any, takes the first one's place."""
        out = set(places)
        first = places[0]
        items, sizes = self.items[:first], self.sizes[:first]
        if new is not None:
            items.append(new)
            sizes.append(self._size(new.tokens))
        for at in range(first, len(self.items)):
            if at not in out:
                items.append(self.items[at])
                sizes.append(self.sizes[at])
        self.items, self.sizes = items, sizes
        for at in range(first, len(items)):
            self.index_of[items[at].id] = at
        if new is not None:
            self.bytes += sizes[first]
            if new.role in _EVICTABLE:
                self.evictable += sizes[first]

    def end_turn(self, turn: int, ts_ms: int, calls: int) -> None:
        """A call to the model: the policy edits the transcript, then the call's row is recorded."""
        window_bytes, before = self.bytes, self.evictable
        window = Window(self.max_tokens, round(window_bytes / self.reference), calls, self.compactions)
        view = TranscriptView(self.items)
        started = perf_counter_ns()
        try:
            edits = self.policy.edit(view, window) if self.limit is None else self.limit.call(
                self.policy.edit, view, window)
            violation = None
        except BaseException as exc:   # a policy that fails breaks the contract; a real interrupt goes on
            edits, violation = (), failed_call(exc)
        elapsed = perf_counter_ns() - started
        view.close()
        removed, compacted = (), 0
        if violation is None and not (type(edits) is list and not edits):   # the usual answer: no edits
            problem = judge_edits(edits, self._item, self.seen)
            violation = None if problem is None else problem[1]
            if violation is None:
                removed, compacted = self._apply(edits, calls)
                if removed:
                    self.evicted_ids.setdefault(turn, []).extend(removed)
                self.compactions += compacted
        if violation is None and self.admit_problem is not None:
            violation = self.admit_problem
        self.admit_problem = None
        if violation is not None:
            message = violation_message(self.name, self.session, self.stream.arm, turn, violation, None)
            if self.strict:
                raise ContractViolation(message)
            self.violation_messages.append(message)
        t = self.tally
        now = self.bytes
        self.rows.append((turn, ts_ms, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], len(removed),
                          window_bytes - now if window_bytes > now else 0, before, self.evictable, len(self.items),
                          elapsed, 0 if violation is None else 1, now - self.evictable, int(now > self.max_bytes),
                          self._cached_prefix(ts_ms), compacted, window_bytes))
        if t[0]:
            self.tally = [0] * 9

    def _cached_prefix(self, ts_ms: int) -> int:
        """Bytes of this call's prompt read from the cache: the previous call's up to its first change."""
        last, self.last_call = self.last_call, (len(self.items), ts_ms)
        changed, self.changed_from = self.changed_from, None
        if last is None or ts_ms - last[1] > self.cache_ttl_ms:
            return 0
        return self.cum[last[0] if changed is None else min(changed, last[0])]


def _plain(column) -> list:
    return column.tolist() if hasattr(column, "tolist") else list(column)


def replay_transcript(stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float, *,
                      confirmation: int | None = None, strict: bool = True, strategy_name: str = "",
                      session: str = "", cache_ttl_ms: int = CACHE_TTL_MS, evict_timeout_ms: int | None = None,
                      compiled: bool | None = None) -> ArmReplay:
    """Replay one arm as an append-only transcript under ``policy`` in a window of ``max_bytes``
    reference bytes (``reference`` bytes per token); an edit's or a write's result costs
    ``confirmation`` reference bytes (default `CONFIRMATION_BYTES`). On the compiled engine where it is
    built (``engine.transcript``, the same rules), else on this module's specification."""
    confirmation = CONFIRMATION_BYTES if confirmation is None else confirmation
    name = strategy_name or repr(policy)
    if _use_compiled(compiled):
        return _replay_compiled(stream, resolved, policy, max_bytes, reference, confirmation, strict, name, session,
                                cache_ttl_ms, evict_timeout_ms)
    state = _Transcript(stream, _plain_resolved(resolved), policy, max_bytes, reference, confirmation, strict=strict,
                        name=name, session=session, cache_ttl_ms=cache_ttl_ms, evict_timeout_ms=evict_timeout_ms)
    r = state.resolved
    with state.limit or contextlib.nullcontext():
        done = 0
        for calls, (ends, turn, ts) in enumerate(zip(r.ends, r.end_turns, r.end_ts)):
            state.steps(done, ends, calls)
            state.end_turn(turn, ts, calls)
            done = ends
        state.steps(done, len(r.slot), len(r.ends))
    return ArmReplay(TurnLog.from_rows(state.rows, state.evicted_ids), state.violation_messages, 0, 0,
                     [item.id for item in state.items])


def _event_columns(stream: ArmStream, resolved: Resolved) -> dict:
    """What the compiled transcript reads of each event and entry, made once per stream and resolution:
    each event's role and kind (indices into `ROLES` and `KINDS`, as `_Transcript.steps` finds them) and op,
    each entry's index by id and whether it is a path's first revision."""
    cache = resolved.__dict__.setdefault("_transcript", {})
    if cache.get("stream") is not stream:
        ops = _plain(stream.ops)
        roles, kinds = [], []
        given = None if stream.kinds is None else _plain(stream.kinds)
        for event, op in enumerate(ops):
            if op == MESSAGE:
                role = _message_role(stream.paths[event])
                kind = "thinking" if role == "thinking" else "prose"
            else:
                role, kind = _ROLE_OF_OP.get(op, "result"), _KIND_OF_OP.get(op, "output")
            roles.append(ROLES.index(role))
            kinds.append(KINDS.index(kind) if given is None else given[event])
        op = np.array(ops, np.int64)
        op[accompanied_changes(ops, stream.paths)] = -1   # the compiled engine's code for "adds nothing"
        cache.update(stream=stream, role=np.array(roles, np.int64), kind=np.array(kinds, np.int64), op=op, paths=list(stream.paths),
                     entries={entry_id: e for e, entry_id in enumerate(resolved.ids)},
                     first=np.array([i.endswith(":0") for i in resolved.ids], np.int64))
    return cache


def _normalised(edits) -> list:
    """Edits ``judge_edits`` accepts, in the plain types the compiled engine reads (str and tuple subclasses
    as the plain values they hold; a summary's ref, which nothing reads, as ``""``)."""
    out = []
    for edit in edits:
        if type(edit) is Replace:
            out.append(Replace(tuple(str.__str__(i) for i in edit.ids), edit.tokens, str.__str__(edit.role)))
        else:
            ref = str.__str__(edit.ref) if str.__str__(edit.role) == "attached" else ""
            out.append(Append(str.__str__(edit.role), edit.tokens, ref))
    return out


def _judged(edits, items: list[TranscriptItem], seen: dict[str, int]) -> tuple[str | None, list | None]:
    """`judge_edits` for the compiled engine: the violation's message, or the edits to apply."""
    by_id = {item.id: item for item in items}
    problem = judge_edits(edits, by_id.get, seen)
    return (problem[1], None) if problem is not None else (None, _normalised(edits))


def _replay_compiled(stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float,
                     confirmation: int, strict: bool, name: str, session: str, cache_ttl_ms: int,
                     evict_timeout_ms: int | None) -> ArmReplay:
    columns = _event_columns(stream, resolved)
    messages: list[str] = []

    def violation(turn: int, what: str) -> None:
        message = violation_message(name, session, stream.arm, turn, what, None)
        if strict:
            raise ContractViolation(message)
        messages.append(message)

    limit = call_limit_for(policy, evict_timeout_ms)
    edit, admit = policy.edit, getattr(policy, "admit", None)
    if limit is not None:
        edit = functools.partial(limit.call, edit)
        admit = None if admit is None else functools.partial(limit.call, admit)
    rows = np.empty((len(resolved.ends), len(TURN_FIELDS)), np.int64)
    steps = tuple(_int64(getattr(resolved, c)) for c in ("need", "need_bytes", "miss", "place", "place_bytes", "event"))
    ends = tuple(_int64(getattr(resolved, c)) for c in ("ends", "end_turns", "end_ts"))
    with limit or contextlib.nullcontext():
        evicted, items = engine.transcript(
            steps, ends, columns["role"], columns["kind"], columns["op"], columns["paths"], list(resolved.ids),
            columns["entries"], columns["first"], ROLES, KINDS, edit, admit, _judged, failed_call, violation,
            TranscriptView, Window, int(confirmation), float(reference), int(max_bytes), int(cache_ttl_ms), rows)
    return ArmReplay(TurnLog(rows, evicted), messages, 0, 0, items)


def _plain_resolved(resolved: Resolved) -> Resolved:
    """``resolved`` with its columns as lists (numpy's scalars would slow every step)."""
    columns = ("entry_slot", "slot", "need", "need_bytes", "miss", "place", "place_bytes", "ts_ms", "count", "event",
               "ends", "end_turns", "end_ts")
    return Resolved(resolved.arm, resolved.paths, resolved.slots, resolved.ids,
                    *(_plain(getattr(resolved, c)) for c in columns))


if engine is not None:
    engine.bind_transcript(TranscriptItem, Replace, Append)
