"""The transcript model: an append-only context shed by a policy (docs/design.md §8).

Every event appends an item, in order: a file read adds a copy even while an older one is in the
window. Before each call to the model (each turn end) the policy (`strategies.policy`) may
replace items: compact a stretch of history into a summary, mask old tool results. Replays give
a `TurnLog` with the same fields as the managed model's (`sim.engine.rules.Context`), so both
are measured by the same metrics:

- a need (a read or an edit) hits when an item holding that file revision is in the window; a
  revision that was in the window and left it (the policy removed every copy) is missed as
  capacity (re-fetched), else compulsory or invalidation as the resolver classed it;
- ``turn_bytes`` is the window before the policy's edits, ``occupancy_bytes`` the tool results
  after them (files and outputs), ``pinned_bytes`` the rest (overhead, messages, tool inputs,
  summaries, placeholders); ``evictions`` and ``evicted_bytes`` what the edits removed (net);
  ``entries`` the items; ``evict_ns`` the policy's call; ``compactions`` 1 when an edit
  replaced a stretch of several items; ``cache_read_bytes`` as in the managed model.

What an event adds: a read or an output, its cost; an edit or a write, the cost of its tool
result (``ArmStream.transcript_costs``: the confirmation the tool printed, not the file); a
message, a tool call's input or the overhead, its cost. Item tokens are reference bytes over the
reference ratio, rounded; what the policy answers in tokens is converted back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter_ns

from sim.engine.arm import ArmReplay
from sim.engine.measures import TurnLog
from sim.engine.rules import (CALL, CAPACITY, EDIT, INVALIDATION, MESSAGE, OUTPUT, OVERHEAD, READ, WRITE, ArmStream,
                              Resolved, _PrefixSums, failed_call, violation_message)
from sim.errors import ContractViolation
from strategies.calls import call_limit_for
from strategies.policy import APPENDABLE, REPLACEABLE, Append, Replace, TranscriptItem, Window

__all__ = ["replay_transcript", "TranscriptView"]

_ROLE_OF_OP = {READ: "result", EDIT: "result", WRITE: "result", OUTPUT: "result", CALL: "call",
               OVERHEAD: "overhead"}
_EVICTABLE = ("result", "attached")   # what `occupancy_bytes` counts


def _message_role(path: str) -> str:
    for role in ("user", "assistant", "thinking"):
        if path.startswith(f"msg://{role}/"):
            return role
    return "user"


class TranscriptView(Sequence):
    """The transcript's items in order, read-only, valid only during the policy's call."""

    def __init__(self, items: list[TranscriptItem]) -> None:
        self._items: list[TranscriptItem] | None = items

    def _open(self) -> list[TranscriptItem]:
        if self._items is None:
            raise RuntimeError("this transcript was only valid during the call that received it")
        return self._items

    def close(self) -> None:
        self._items = None

    def __len__(self) -> int:
        return len(self._open())

    def __getitem__(self, index):
        found = self._open()[index]
        return tuple(found) if isinstance(index, slice) else found

    def __iter__(self):
        return iter(tuple(self._open()))

    def __reversed__(self):
        return reversed(tuple(self._open()))


@dataclass
class _Live:
    """One item of the window: what it is, its bytes, and where it entered the prompt."""

    item: TranscriptItem
    size: int
    position: int


class _Transcript:
    """The replay's state: the items in order, what each holds, and the prompt cache."""

    def __init__(self, stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float, *,
                 strict: bool, name: str, session: str, cache_ttl_ms: int, evict_timeout_ms: int | None) -> None:
        self.stream, self.resolved, self.policy = stream, resolved, policy
        self.max_bytes, self.reference = max_bytes, reference
        self.strict, self.name, self.session, self.cache_ttl_ms = strict, name, session, cache_ttl_ms
        self.limit = call_limit_for(policy, evict_timeout_ms)
        self.admit = getattr(policy, "admit", None)
        self.items: list[TranscriptItem] = []
        self.index_of: dict[str, int] = {}        # id -> its place in `items`
        self.live: dict[str, _Live] = {}          # id -> the item's state
        self.refs: dict[str, int] = {}            # file revision -> copies in the window
        self.seen: dict[str, int] = {}            # file revision -> the most tokens a copy of it had
        self.bytes = 0
        self.evictable = 0
        self.prompt = _PrefixSums()
        self.positions = 0
        self.changed_from: int | None = None
        self.last_call: tuple[int, int] | None = None
        self.made = 0                             # items the policy made
        self.compactions = 0
        self.rows: list[tuple] = []
        self.violation_messages: list[str] = []
        self.tally = [0] * 9                      # measures.TALLY_FIELDS

    # ----- the items ------------------------------------------------------------------------
    def _tokens(self, size: int) -> int:
        return round(size / self.reference)

    def _size(self, tokens: int) -> int:
        return round(tokens * self.reference)

    def _enter(self, item: TranscriptItem, size: int, position: int) -> None:
        self.live[item.id] = _Live(item, size, position)
        self.bytes += size
        if item.role in _EVICTABLE:
            self.evictable += size
        if item.ref:
            self.refs[item.ref] = self.refs.get(item.ref, 0) + 1
            self.seen[item.ref] = max(self.seen.get(item.ref, 0), item.tokens)
        self.prompt.add(position, size)

    def _leave(self, item_id: str) -> _Live:
        live = self.live.pop(item_id)
        self.bytes -= live.size
        if live.item.role in _EVICTABLE:
            self.evictable -= live.size
        if live.item.ref:
            self.refs[live.item.ref] -= 1
        self.prompt.add(live.position, -live.size)
        if self.changed_from is None or live.position < self.changed_from:
            self.changed_from = live.position
        return live

    def step(self, i: int, turn: int) -> None:
        """Apply resolved step ``i``: its need, then the item it appends."""
        r, s = self.resolved, self.stream
        event = r.event[i]
        op, path = s.ops[event], s.paths[event]
        need = r.need[i]
        ref = r.ids[r.place[i]] if r.place[i] >= 0 and op in (READ, EDIT, WRITE) else ""
        if need >= 0:
            t, nb = self.tally, r.need_bytes[i]
            t[0] += 1
            t[5] += nb
            if self.refs.get(r.ids[need], 0) > 0:
                t[1] += 1
            else:
                t[6] += nb
                if r.miss[i] == CAPACITY:
                    t[3] += 1
                    t[7] += nb
                elif r.miss[i] == INVALIDATION:
                    t[4] += 1
                    t[8] += nb
                else:
                    t[2] += 1
        size = s.transcript_costs[event] if s.transcript_costs is not None else r.place_bytes[i]
        role = _message_role(path) if op == MESSAGE else _ROLE_OF_OP[op]
        kind = s.kinds[event] if s.kinds is not None else ""
        item = TranscriptItem(str(event), role, kind, self._tokens(size), turn, path, ref)
        if self.admit is not None:
            tokens = self.admit(item)
            if tokens < item.tokens:
                item = TranscriptItem(item.id, role, kind, tokens, turn, path, ref)
                size = self._size(tokens)
        self._append(item, size)

    def _append(self, item: TranscriptItem, size: int) -> None:
        self.index_of[item.id] = len(self.items)
        self.items.append(item)
        self._enter(item, size, self.positions)
        self.positions += 1

    # ----- the policy -----------------------------------------------------------------------
    def _apply(self, edits, turn: int) -> tuple[int, int, str | None]:
        """Apply the edits; return the items removed, whether a stretch was compacted, and the
        first violation of the contract (the edits after it are not applied)."""
        if not isinstance(edits, (list, tuple)):
            return 0, 0, f"returned {type(edits).__name__}, not a list or tuple of edits"
        removed = compacted = 0
        for k, edit in enumerate(edits):
            if isinstance(edit, Replace):
                ids = edit.ids
                if not isinstance(ids, tuple) or not ids or len(set(ids)) != len(ids):
                    return removed, compacted, f"edit {k}: Replace needs distinct ids, got {ids!r:.80}"
                bad = next((i for i in ids if i not in self.live or self.live[i].item.role == "overhead"), None)
                if bad is not None:
                    what = "the overhead" if bad in self.live else "not in the transcript"
                    return removed, compacted, f"edit {k}: replaces {bad!r}, {what}"
                if not isinstance(edit.tokens, int) or edit.tokens < 0 or edit.role not in REPLACEABLE:
                    return removed, compacted, f"edit {k}: tokens must be >= 0 and role one of {REPLACEABLE}"
                gone = [self._leave(i) for i in ids]
                removed += len(ids)
                compacted |= len(ids) > 1
                first = min(gone, key=lambda g: g.position)
                new = None
                if edit.tokens:
                    self.made += 1
                    new = TranscriptItem(f"p{self.made}", edit.role, "prose", edit.tokens, turn)
                    self._enter(new, self._size(edit.tokens), first.position)
                if len(ids) == 1 and new is not None:   # in place: nothing moves
                    at = self.index_of.pop(first.item.id)
                    self.items[at] = new
                    self.index_of[new.id] = at
                else:
                    out = set(ids)
                    self.items = [new if item is first.item else item for item in self.items
                                  if item.id not in out or (item is first.item and new is not None)]
                    self.index_of = {item.id: at for at, item in enumerate(self.items)}
            elif isinstance(edit, Append):
                if edit.role not in APPENDABLE or not isinstance(edit.tokens, int) or edit.tokens < 0:
                    return removed, compacted, f"edit {k}: Append needs a role of {APPENDABLE} and tokens >= 0"
                if edit.role == "attached" and (edit.ref not in self.seen or edit.tokens > self.seen[edit.ref]):
                    return removed, compacted, (f"edit {k}: attaches {edit.ref!r}, which no earlier item held"
                                                if edit.ref not in self.seen else
                                                f"edit {k}: attaches {edit.ref!r} larger than it was")
                self.made += 1
                new = TranscriptItem(f"p{self.made}", edit.role, "prose" if edit.role == "summary" else "code",
                                     edit.tokens, turn, "", edit.ref if edit.role == "attached" else "")
                self._append(new, self._size(edit.tokens))
            else:
                return removed, compacted, f"edit {k} is {type(edit).__name__}, not Replace or Append"
        return removed, compacted, None

    def end_turn(self, turn: int, ts_ms: int, calls: int) -> None:
        """A call to the model: the policy edits the transcript, then the call's row is recorded."""
        before = self.bytes
        window = Window(self._tokens(self.max_bytes), self._tokens(before), calls, self.compactions)
        view = TranscriptView(self.items)
        started = perf_counter_ns()
        try:
            edits = self.policy.edit(view, window) if self.limit is None else self.limit.call(
                self.policy.edit, view, window)
            failure = None
        except BaseException as exc:   # a policy that fails breaks the contract; a real interrupt goes on
            edits, failure = (), failed_call(exc)
        elapsed = perf_counter_ns() - started
        view.close()
        removed, compacted, problem = (0, 0, None) if failure else self._apply(edits, calls)
        violation = failure or problem
        if violation is not None:
            message = violation_message(self.name, self.session, self.stream.arm, turn, violation, None)
            if self.strict:
                raise ContractViolation(message)
            self.violation_messages.append(message)
        self.compactions += compacted
        cached = self._cached_prefix(ts_ms)
        t = self.tally
        self.rows.append((turn, ts_ms, *t, removed, before - self.bytes, before, self.evictable, len(self.items),
                          elapsed, int(violation is not None), self.bytes - self.evictable,
                          int(self.bytes > self.max_bytes), cached, int(compacted)))
        self.tally = [0] * 9

    def _cached_prefix(self, ts_ms: int) -> int:
        last, self.last_call = self.last_call, (self.positions, ts_ms)
        changed, self.changed_from = self.changed_from, None
        if last is None or ts_ms - last[1] > self.cache_ttl_ms:
            return 0
        return self.prompt.before(last[0] if changed is None else min(changed, last[0]))


def replay_transcript(stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float, *,
                      strict: bool = True, strategy_name: str = "", session: str = "", cache_ttl_ms: int = 300_000,
                      evict_timeout_ms: int | None = None) -> ArmReplay:
    """Replay one arm as an append-only transcript under ``policy`` in a window of ``max_bytes``
    reference bytes (``reference`` bytes per token)."""
    state = _Transcript(stream, resolved, policy, max_bytes, reference, strict=strict,
                        name=strategy_name or repr(policy), session=session, cache_ttl_ms=cache_ttl_ms,
                        evict_timeout_ms=evict_timeout_ms)
    with state.limit or contextlib.nullcontext():
        done = 0
        for calls, (ends, turn, ts) in enumerate(zip(resolved.ends, resolved.end_turns, resolved.end_ts)):
            for i in range(done, ends):
                state.step(i, calls)
            state.end_turn(turn, ts, calls)
            done = ends
        for i in range(done, len(resolved.slot)):
            state.step(i, len(resolved.ends))
    return ArmReplay(TurnLog.from_rows(state.rows), state.violation_messages, 0, 0,
                     [item.id for item in state.items])
