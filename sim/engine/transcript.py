"""The transcript model: an append-only context shed by a policy (docs/design.md §8).

Every event appends an item, in order: a file read adds a copy even while an older one is in the
window. Before each call to the model (each turn end) the policy (`strategies.policy`) may
replace items: compact a stretch of history into a summary, mask old tool results. Replays give
a `TurnLog` with the same fields as the managed model's (`sim.engine.rules.Managed`), so both
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
  item an edit removed, if that call is within the cache's lifetime;
- where the edits put a summary in the window (a `Replace` or `Append` of role ``summary`` with tokens
  > 0: an LLM writes it), the agent first makes a summarization call (``summary_calls`` 1): its prompt
  is the window before the edits (``summary_prompt_bytes``), it reads from the cache what the turn
  end's call would have read with no edits (``summary_cache_read_bytes``: the previous call's prompt,
  within the lifetime) and outputs the summaries (``summary_output_bytes``); it is then the previous
  call of the turn end's own call, whose prompt it shares up to the first item an edit changed.
  Masking placeholders and forgetting without a summary make no such call.

What an event adds is the event vocabulary's (`traces.vocabulary.transcript_adds`): a read or an
output, its cost (a re-read adds its copy again); an edit or a write whose tool-call input and
returned text the stream holds (`accompanied_changes`: an import with the conversation), nothing,
since those two events carry it; another edit, or a write of a file the arm had not touched, the
tool's confirmation (`CONFIRMATION_BYTES` of output, not the file: its content is in the tool
call's input); a write over a file the arm had, the file (Claude Code answers an overwrite with a
``cat -n`` of the new content: the bundled sessions' Write results reach 25,666 characters); a
message, a tool call's input or the overhead, its cost. An item's role and kind are its event's
(`transcript_events`; a confirmation is ``output``). Item tokens are reference bytes over the
reference ratio, rounded; what the policy answers in tokens is converted back.

A policy's answer is read once into plain values (`strategies.policy.read_edits`), which are judged
and then applied; the items it is shown are read-only. The edits of one call are judged whole
before any is applied: a `Replace` names distinct items of the transcript, none of the overhead,
and puts at most the tokens it removes; an ``attached`` `Append` copies a revision an earlier item
held, at most as large; together they never leave the window larger than it was. A call that
raises (a write to an item included), leaves or answers otherwise breaks the contract (strict:
`ContractViolation`; lenient: counted, nothing applied).

``admit``'s answer must be an integer from 0 to the item's tokens; another answer, or a call that
fails, breaks the contract too (reported at the turn's end; the item enters whole).

Each step is O(1); a call's edits cost O(items after the first one they change), so the prompt
cache's accounting is O(1) amortised per call for policies that change the end of the transcript.
`Transcript` is the specification, a model of the replay core (`sim.engine.core.Replay`); the compiled
engine's transcript model (``sim/engine/_transcript.c``) applies the same rules, and the tests compare the two
(``tests/test_transcript_engine.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from ctxbench.sim.engine.arm import ArmReplay, _compiled_tables, _core_columns, _use_compiled
from ctxbench.sim.engine.compiled import TranscriptArgs, run
from ctxbench.sim.engine.core import PromptCache, Replay, TurnEnd, Violations, failed_call, plain, timed_call
from ctxbench.sim.engine.measures import TURN_FIELDS, TurnLog
from ctxbench.sim.engine.rules import ArmStream, Resolved
from ctxbench.sim.engine.settings import DEFAULT_SETTINGS, ReplaySettings
from ctxbench.strategies.adapter import Adapter, adapt
from ctxbench.strategies.calls import call_limit_for
from ctxbench.strategies.policy import ROLES, Replace, Request, TranscriptItem, Window, judge_edits, read_edits
from ctxbench.traces.tokens import KINDS
from ctxbench.traces.vocabulary import (CONFIRMATION, CONFIRMATION_BYTES, CONFIRMATION_KIND, CONTENT, accompanied_changes,
                               kind_codes, role_codes, transcript_adds)

__all__ = ["CONFIRMATION_BYTES", "replay_transcript", "TranscriptView", "accompanied_changes", "transcript_events",
           "Transcript"]

_EVICTABLE = frozenset(("result", "attached"))   # what `turn_bytes` and `occupancy_bytes` count
_CONFIRMATION_KIND = KINDS.index(CONFIRMATION_KIND)


def transcript_events(stream: ArmStream) -> dict[str, np.ndarray]:
    """What the transcript model reads of each event of ``stream``, from the event vocabulary (`traces.vocabulary`),
    made once per stream: ``role`` (an index into `strategies.policy.ROLES`), ``kind`` (into `KINDS`: the
    stream's kind, else the op's own; ``output`` where the event adds the tool's confirmation) and ``adds``
    (`traces.vocabulary.transcript_adds`)."""
    cache = stream.__dict__.setdefault("_transcript_events", {})
    if not cache:
        ops, paths = plain(stream.ops), stream.paths
        adds = transcript_adds(ops, paths)
        kinds = kind_codes(ops, paths) if stream.kinds is None \
            else np.asarray(stream.kinds, np.int64)
        kinds = np.where(adds == CONFIRMATION, _CONFIRMATION_KIND, kinds).astype(np.int64)
        cache.update(role=role_codes(ops, paths, ROLES), kind=kinds, adds=adds.astype(np.int64))
    return cache


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


class Transcript:
    """The append-only transcript of one arm under a policy: the model `sim.engine.core.Replay` drives
    (`holds`, `place`, `end_turn`). Its state: the items in order, their bytes and prefix sums, what
    each holds."""

    def __init__(self, stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float,
                 confirmation: int, settings: ReplaySettings = DEFAULT_SETTINGS, *, name: str, session: str) -> None:
        adapter = adapt(policy)
        self.stream, self.resolved, self.policy = stream, resolved, adapter.target
        events = transcript_events(stream)
        self.roles, self.kinds, self.adds = (events[c].tolist() for c in ("role", "kind", "adds"))
        self.paths = stream.paths
        self.max_bytes, self.reference, self.confirmation = max_bytes, reference, confirmation
        self.max_tokens = round(max_bytes / reference)
        self.violations = Violations(name, session, stream.arm, settings.strict, adapter.noun)
        self.cache = PromptCache(settings.cache_ttl_ms)
        self.limit = call_limit_for(adapter.target, settings.evict_timeout_ms)
        limited = adapter.limited(self.limit)
        self.edit, self.admit = limited.call, limited.admit
        self.admit_problem: str | None = None      # how admit first broke the contract this turn
        self.items: list[TranscriptItem] = []
        self.sizes: list[int] = []                # bytes of each item
        self.cum: list[int] = [0]                 # cum[k]: bytes of items[:k]
        self.index_of: dict[str, int] = {}        # id -> its place in `items`
        self.refs: dict[str, int] = {}            # revision -> copies holding it in the window
        self.seen: dict[str, int] = {}            # revision -> the most tokens a copy of it had
        self.bytes = 0
        self.evictable = 0
        self.calls = 0                            # turn ends so far: the number of the open call
        self.made = 0                             # items the policy made
        self.compactions = 0

    # ----- the items ------------------------------------------------------------------------
    def _size(self, tokens: int) -> int:
        return round(tokens * self.reference)

    def holds(self, entry: int) -> bool:
        """Whether an item holding revision ``entry`` is in the window."""
        return self.refs.get(self.resolved.ids[entry], 0) > 0

    def place(self, i: int) -> None:
        """Step ``i``'s event appends its item (`traces.vocabulary.transcript_adds`: its content, the tool's
        confirmation, or nothing)."""
        r = self.resolved
        event = r.event[i]
        place = r.place[i]
        ref = r.ids[place] if place >= 0 else ""
        adds = self.adds[event]
        size = r.place_bytes[i] if adds == CONTENT else self.confirmation if adds == CONFIRMATION else 0
        role, kind = ROLES[self.roles[event]], KINDS[self.kinds[event]]
        item = TranscriptItem(str(event), role, kind, round(size / self.reference), self.calls, self.paths[event], ref)
        if self.admit is not None:
            tokens = self._admitted(item)
            if tokens < item.tokens:
                item = TranscriptItem(item.id, role, kind, tokens, self.calls, item.path, ref)
                size = round(tokens * self.reference)
        self._append(item, size)

    def _admitted(self, item: TranscriptItem) -> int:
        """What ``admit`` lets ``item`` take: an integer from 0 to its tokens; anything else (or a call that
        fails) breaks the contract, reported at the turn's end, and the item enters whole."""
        try:
            tokens = self.admit(item)
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
            elif type(edit) is not Request:   # an Append (a Request says what the summarization call read)
                self.made += 1
                holds = edit.role == "attached" and edit.tokens >= self.seen[edit.ref]
                path = edit.ref.rpartition(":")[0] if edit.role == "attached" else ""
                new = TranscriptItem(f"p{self.made}", edit.role, "prose" if edit.role == "summary" else "code",
                                     edit.tokens, turn, path, edit.ref if holds else "")
                self._append(new, self._size(edit.tokens))
        # The prefix sums from the first place changed on.
        self.cum[first:] = accumulate(self.sizes[first:], initial=self.cum[first])
        self.cache.change(first)
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

    def _requested(self, request: Request, edits) -> tuple[int, int, int]:
        """The summarization call's prompt as ``request`` says (see the module docstring): its bytes, how many
        leading items of the window it holds as they stand, and the bytes of the items the edits remove that its
        trimming left out."""
        n = len(self.items)
        held = [True] * n if request.ids is None else [False] * n
        if request.ids is not None:
            for item_id in request.ids:
                held[self.index_of[item_id]] = True
        total = self._size(request.tokens) + sum(size for size, h in zip(self.sizes, held) if h)
        trimmed = []
        if request.fit:   # the oldest items but the overhead leave it while it is larger than the window
            for at in range(n):
                if total <= self.max_bytes:
                    break
                if held[at] and self.items[at].role != "overhead":
                    held[at] = False
                    trimmed.append(at)
                    total -= self.sizes[at]
        shared = next((at for at in range(n) if not held[at]), n)
        removed = {i for edit in edits if type(edit) is Replace for i in edit.ids}
        dropped = sum(self.sizes[at] for at in trimmed if self.items[at].id in removed)
        return total, shared, dropped

    def end_turn(self, turn: int, ts_ms: int) -> tuple[TurnEnd, list[str]]:
        """A call to the model: the policy edits the transcript; what the call measured, and the items removed."""
        calls = self.calls
        self.calls += 1
        window_bytes, before = self.bytes, self.evictable
        window = Window(self.max_tokens, round(window_bytes / self.reference), calls, self.compactions)
        view = TranscriptView(self.items)
        edits, violation, elapsed = timed_call(self.edit, view, window)
        view.close()
        removed, compacted, summary_calls, summary_read, summary_bytes = [], 0, 0, 0, 0
        summary_prompt = summary_dropped = 0
        if violation is None and not (type(edits) is list and not edits):   # the usual answer: no edits
            edits = read_edits(edits)   # read once into plain values: those are judged and applied
            problem = judge_edits(edits, self._item, self.seen)
            violation = None if problem is None else problem[1]
            if violation is None:
                summaries = [edit.tokens for edit in edits
                             if type(edit) is not Request and edit.role == "summary" and edit.tokens > 0]
                if summaries:   # an LLM writes them: first the summarization call, on the window before the edits
                    summary_calls, summary_bytes = 1, sum(map(self._size, summaries))
                    request = next((edit for edit in edits if type(edit) is Request), None)
                    shared = len(self.items)
                    summary_prompt = window_bytes
                    if request is not None:
                        summary_prompt, shared, summary_dropped = self._requested(request, edits)
                    if shared == len(self.items):   # it holds the window as it stands: the next call reads through it
                        summary_read = self.cache.read(ts_ms, len(self.items), self.cum.__getitem__)
                    else:
                        summary_read = self.cache.read_aside(ts_ms, shared, self.cum.__getitem__)
                removed, compacted = self._apply(edits, calls)
                self.compactions += compacted
        if violation is None and self.admit_problem is not None:
            violation = self.admit_problem
        self.admit_problem = None
        if violation is not None:
            self.violations.report(turn, violation)
        now = self.bytes
        cached = self.cache.read(ts_ms, len(self.items), self.cum.__getitem__)
        return TurnEnd(evictions=len(removed), evicted_bytes=window_bytes - now if window_bytes > now else 0,
                       turn_bytes=before, occupancy_bytes=self.evictable, entries=len(self.items), evict_ns=elapsed,
                       violations=0 if violation is None else 1, pinned_bytes=now - self.evictable,
                       over_window=int(now > self.max_bytes or summary_prompt > self.max_bytes), cache_read_bytes=cached,
                       compactions=compacted, window_bytes=window_bytes, summary_calls=summary_calls,
                       summary_prompt_bytes=summary_prompt, summary_cache_read_bytes=summary_read,
                       summary_output_bytes=summary_bytes, summary_dropped_bytes=summary_dropped), removed


def replay_transcript(stream: ArmStream, resolved: Resolved, policy, max_bytes: int, reference: float,
                      settings: ReplaySettings = DEFAULT_SETTINGS, *, confirmation: int | None = None,
                      strategy_name: str = "", session: str = "", compiled: bool | None = None) -> ArmReplay:
    """Replay one arm as an append-only transcript under ``policy`` (an object, a spec or its
    `strategies.adapter.Adapter`) and ``settings`` in a window of ``max_bytes`` reference bytes (``reference``
    bytes per token); an edit's or a write's result costs ``confirmation`` reference bytes (default
    `CONFIRMATION_BYTES`). On the compiled engine where it is built (``sim/engine/_transcript.c``, the same
    rules), else on this module's specification."""
    confirmation = CONFIRMATION_BYTES if confirmation is None else confirmation
    adapter = adapt(policy)
    name = strategy_name or repr(adapter.target)
    if _use_compiled(compiled):
        return _replay_compiled(stream, resolved, adapter, max_bytes, reference, confirmation, settings, name, session)
    model = Transcript(stream, _plain_resolved(resolved), adapter, max_bytes, reference, confirmation, settings,
                       name=name, session=session)
    replay = Replay(model.resolved, model).run()
    return ArmReplay(replay.log(), model.violations.messages, 0, 0, [item.id for item in model.items])


def _refusal(edits, items: list[TranscriptItem], seen: dict[str, int]) -> str | None:
    """Why `judge_edits` refuses edits (read by `read_edits`) on these items, for the compiled engine's violation."""
    by_id = {item.id: item for item in items}
    problem = judge_edits(edits, by_id.get, seen)
    return None if problem is None else problem[1]


def _replay_compiled(stream: ArmStream, resolved: Resolved, adapter: Adapter, max_bytes: int, reference: float,
                     confirmation: int, settings: ReplaySettings, name: str, session: str) -> ArmReplay:
    events = transcript_events(stream)
    violations = Violations(name, session, stream.arm, settings.strict, adapter.noun)
    limit = call_limit_for(adapter.target, settings.evict_timeout_ms)
    limited = adapter.limited(limit)
    args = TranscriptArgs(
        "transcript", **_core_columns(resolved), rows=np.empty((len(resolved.ends), len(TURN_FIELDS)), np.int64),
        ids=resolved.ids if type(resolved.ids) is list else list(resolved.ids), paths=resolved.paths,
        entries=_compiled_tables(resolved)["entries"], cache_ttl_ms=int(settings.cache_ttl_ms), violations=violations,
        failed=failed_call, role_of=events["role"], kind_of=events["kind"], adds_of=events["adds"],
        event_paths=stream.paths if type(stream.paths) is list else list(stream.paths), roles=ROLES, kinds=KINDS,
        edit=limited.call, admit=limited.admit, read=read_edits, judge=_refusal, view_class=TranscriptView, window_type=Window,
        confirmation=int(confirmation), reference=float(reference), max_bytes=int(max_bytes))
    with limit or contextlib.nullcontext():
        evicted, items = run(args)
    return ArmReplay(TurnLog(args.rows, evicted), violations.messages, 0, 0, items)


def _plain_resolved(resolved: Resolved) -> Resolved:
    """``resolved`` with its columns as lists (numpy's scalars would slow every step)."""
    columns = ("entry_slot", "slot", "need", "need_bytes", "miss", "place", "place_bytes", "ts_ms", "count", "event",
               "ends", "end_turns", "end_ts")
    return Resolved(resolved.arm, resolved.paths, resolved.slots, resolved.ids,
                    *(plain(getattr(resolved, c)) for c in columns))
