"""The replay rules, written to be read: the specification the compiled engine is tested against.

A replay has two phases (docs/design.md §3, §5):

1. **Resolve** one arm's events, whatever the strategy: which revision of a path each event
   needs, its size, how a miss of it would be classed, which entry it leaves in the context,
   and the entry's access count. `Resolver` does it event by event, `resolve` for a whole
   `ArmStream`, into a `Resolved` table shared by every strategy, budget and the optimal bounds.
2. **Replay** the resolved steps through the replay core (`sim.engine.core.Replay`: one loop, one
   tally, one row) and a model of the context. This module's model is the managed context
   (`Managed`): residency and recency, one ``evict`` call per turn end, contract violations, the
   prompt cache, compaction; the append-only transcript is the other (`sim.engine.transcript`).

Nothing here is tuned for speed beyond keeping each step O(1) and each turn end O(n); this
module is also what runs where the compiled engine (``sim/engine/_engine.c``) is not built.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from itertools import islice
from dataclasses import dataclass, field

import numpy as np

from ctxbench.sim.engine.core import (CAPACITY, COMPULSORY, INVALIDATION, NO_NEED, PromptCache, Replay, TurnEnd, Violations,
                             failed_call, plain, shown_answer, timed_call, violation_message)
from ctxbench.strategies.calls import call_limit_for
from ctxbench.strategies.contract import ContextBudget, ContextEntry, answer_ids, shown
from ctxbench.sim.engine.settings import DEFAULT_SETTINGS, ReplaySettings
from ctxbench.strategies.adapter import adapt
from ctxbench.traces.vocabulary import (CALL, EDIT, INVALIDATE, MESSAGE, OP_CODE, OUTPUT, OVERHEAD, PINNED_CODES, READ,
                               WRITE)

__all__ = ["READ", "EDIT", "WRITE", "OUTPUT", "MESSAGE", "CALL", "OVERHEAD", "INVALIDATE", "OP_CODES", "PINNED_OPS",
           "NO_NEED", "COMPULSORY", "INVALIDATION", "CAPACITY", "VIOLATIONS", "SHAPE", "NON_STRING", "DUPLICATE",
           "UNKNOWN", "RAISED", "HOOK_RAISED", "OVER_BUDGET", "ArmStream", "Resolved", "Resolver", "resolve",
           "Compaction", "Managed", "StateView", "replay", "failed_call", "describe_violation", "violation_message",
           "shown_answer"]

#: Op codes by name: the event vocabulary's (`traces.vocabulary`), which the engine also speaks.
OP_CODES = OP_CODE
#: What enters the window and stays, never evicted by a strategy: the conversation (messages), tool
#: calls' inputs, and the fixed overhead (system prompt, tool definitions, project instructions).
PINNED_OPS = PINNED_CODES

#: Ways an answer breaks the contract, each with its message (`describe_violation`).
VIOLATIONS = ("shape", "non-string", "duplicate", "unknown", "raised", "hook-raised", "over-budget")
SHAPE, NON_STRING, DUPLICATE, UNKNOWN, RAISED, HOOK_RAISED, OVER_BUDGET = range(len(VIOLATIONS))


@dataclass
class ArmStream:
    """One arm's events in the order they happen, and the arm's turn ends.

    ``ops`` may hold ``INVALIDATE``: another arm changed the path to a new revision of that size.
    Turn end ``k`` closes after the first ``ends[k]`` events; it is turn number ``end_turns[k]``
    at time ``end_ts[k]``. ``costs`` are what the events take of the window, in the budget's
    unit (`traces.tokens`: bytes at the reference ratio); ``None``: their sizes. ``kinds``, each
    event's content kind (an index into `traces.tokens.KINDS`), is what the transcript model
    (`sim.engine.transcript`) tells a policy; ``None``: the op's own.
    """

    arm: str
    ops: Sequence[int]
    paths: Sequence[str]
    sizes: Sequence[int]
    ts_ms: Sequence[int]
    ends: list[int] = field(default_factory=list)
    end_turns: list[int] = field(default_factory=list)
    end_ts: list[int] = field(default_factory=list)
    costs: Sequence[int] | None = None
    kinds: Sequence[int] | None = None

    @classmethod
    def from_turns(cls, ops: Sequence[int], paths: Sequence[str], sizes: Sequence[int], ts_ms: Sequence[int],
                   turns: Sequence[int], arm: str = "main", costs: Sequence[int] | None = None,
                   kinds: Sequence[int] | None = None) -> "ArmStream":
        """One arm's columns; a turn closes where the turn number changes, and after the last event.

        >>> s = ArmStream.from_turns([0, 0, 0], ["a", "b", "a"], [1, 1, 1], [5, 6, 9], [0, 0, 3])
        >>> s.ends.tolist(), s.end_turns.tolist(), s.end_ts.tolist()
        ([2, 3], [0, 3], [6, 9])
        """
        turns = np.asarray(turns)
        ends = np.r_[np.flatnonzero(turns[1:] != turns[:-1]) + 1, len(turns)] if len(turns) else np.array([], int)
        last = ends - 1
        return cls(arm, ops, paths, sizes, ts_ms, ends, turns[last], np.asarray(ts_ms)[last], costs, kinds)

    def end_turn(self, events: int, turn: int, ts_ms: int) -> None:
        """Close a turn after the first ``events`` events."""
        self.ends.append(events)
        self.end_turns.append(turn)
        self.end_ts.append(ts_ms)


@dataclass
class Resolved:
    """One arm's events resolved (`Resolver`): one step per own event, tables of paths and entries.

    Step ``i`` touches path slot ``slot[i]``: it needs entry ``need[i]`` (-1: nothing) of
    ``need_bytes[i]``, missed as ``miss[i]`` if not resident, then entry ``place[i]`` of
    ``place_bytes[i]`` is resident in the slot, last accessed at ``ts_ms[i]``, its access count
    ``count[i]``, made from event ``event[i]`` of the stream. A pinned step (a message, a tool call's input, the overhead) has slot, need and
    place -1: its ``place_bytes`` join the window for good. Bytes are costs (`ArmStream`). Entry ``e`` is ``ids[e]`` of slot ``entry_slot[e]``; slot ``s`` is ``paths[s]``,
    and ``slots`` maps each path to its slot.
    Turn end ``k`` closes after the first ``ends[k]`` steps.
    """

    arm: str = "main"
    paths: list[str] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    entry_slot: list[int] = field(default_factory=list)
    slot: list[int] = field(default_factory=list)
    need: list[int] = field(default_factory=list)
    need_bytes: list[int] = field(default_factory=list)
    miss: list[int] = field(default_factory=list)
    place: list[int] = field(default_factory=list)
    place_bytes: list[int] = field(default_factory=list)
    ts_ms: list[int] = field(default_factory=list)
    count: list[int] = field(default_factory=list)
    event: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    end_turns: list[int] = field(default_factory=list)
    end_ts: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.slot)


class _PathState:
    """What the resolver knows of one path in one arm."""

    __slots__ = ("current", "known_size", "known_cost", "revisions", "placed", "invalid", "count")

    def __init__(self) -> None:
        self.current = -1        # the entry of the current revision (-1: none yet)
        self.known_size = 0      # its size
        self.known_cost = 0      # and its cost
        self.revisions = 0       # revisions made so far
        self.placed = -1         # the entry the path's last step placed (-1: none yet)
        self.invalid = False     # another arm changed it while this arm held it
        self.count = 0           # this arm's events on it


class Resolver:
    """The revision rules of one arm, event by event, appending each step to ``resolved``.

    - A path's first revision is ``path:0``; an edit, a write or an output makes the next one.
    - A read needs the current revision. One whose size differs from the current revision's
      known size met a change made outside the trace's own edits: a new revision, compulsory.
    - An edit needs the current revision at its known size (the new size if the path was never
      seen), then places a new revision; a write or an output places one without a need.
    - A needed revision is missed as CAPACITY if this arm held it before (so it was evicted),
      as INVALIDATION if another arm changed the path while this arm held it (``INVALIDATE``;
      the first read after that needs the other arm's revision at the size it reads), else as
      COMPULSORY.
    - The access count of a path counts this arm's events on it.
    - ``INVALIDATE``: another arm changed the path to a new revision of the event's size.
    - Sizes decide revisions; costs (equal to sizes unless given) are what is counted.
    - A message, a tool call's input or the overhead is a pinned step.
    """

    def __init__(self, arm: str = "main") -> None:
        self.resolved = Resolved(arm)
        self._path_states: list[_PathState] = []   # by slot
        self._events = 0

    def slot(self, path: str) -> int:
        """The slot of ``path``, made on first sight."""
        slot = self.resolved.slots.get(path)
        if slot is None:
            slot = self.resolved.slots[path] = len(self.resolved.paths)
            self.resolved.paths.append(path)
            self._path_states.append(_PathState())
        return slot

    def _new_revision(self, slot: int, p: _PathState, size: int, cost: int) -> int:
        r = self.resolved
        entry = len(r.ids)
        r.ids.append(f"{r.paths[slot]}:{p.revisions}")
        r.entry_slot.append(slot)
        p.revisions += 1
        p.current = entry
        p.known_size, p.known_cost = size, cost
        return entry

    def _needed(self, slot: int, p: _PathState, size: int, cost: int) -> tuple[int, int]:
        """The entry a need of ``slot`` at ``size`` bytes is for, and how it would miss."""
        if p.current < 0:
            return self._new_revision(slot, p, size, cost), COMPULSORY
        entry = p.current
        if size != p.known_size:
            if p.invalid:
                p.known_size, p.known_cost = size, cost   # the other arm's revision, as this read sees it
            else:
                entry = self._new_revision(slot, p, size, cost)
        if p.placed == entry:
            return entry, CAPACITY
        if p.invalid:
            p.invalid = False
            return entry, INVALIDATION
        return entry, COMPULSORY

    def event(self, op: int, path: str, size: int, ts_ms: int, cost: int | None = None) -> None:
        """Resolve one event of this arm into the next step (``cost``: its size unless given)."""
        cost = size if cost is None else cost
        self._events += 1
        if op in PINNED_OPS:
            self._append(-1, -1, 0, NO_NEED, -1, cost, ts_ms, 0)
            return
        slot = self.resolved.slots.get(path)
        if slot is None:
            slot = self.slot(path)
        p = self._path_states[slot]
        if op == INVALIDATE:   # another arm changed the path to a new revision of `size` bytes
            self._new_revision(slot, p, size, cost)
            if p.placed >= 0:
                p.invalid = True
            return
        p.count += 1
        if op == READ:
            need, miss = self._needed(slot, p, size, cost)
            need_bytes, place = cost, need
        elif op == EDIT or op == WRITE or op == OUTPUT:
            need, miss, need_bytes = -1, NO_NEED, 0
            if op == EDIT:
                seen = p.current >= 0
                need_bytes = p.known_cost if seen else cost
                need, miss = self._needed(slot, p, p.known_size if seen else size, need_bytes)
            place = self._new_revision(slot, p, size, cost)
            p.invalid = False
        else:
            raise ValueError(f"unknown op code {op!r}")
        p.placed = place
        self._append(slot, need, need_bytes, miss, place, cost, ts_ms, p.count)

    def _append(self, slot: int, need: int, need_bytes: int, miss: int, place: int, place_bytes: int, ts_ms: int,
                count: int) -> None:
        r = self.resolved
        r.slot.append(slot)
        r.need.append(need)
        r.need_bytes.append(need_bytes)
        r.miss.append(miss)
        r.place.append(place)
        r.place_bytes.append(place_bytes)
        r.ts_ms.append(ts_ms)
        r.count.append(count)
        r.event.append(self._events - 1)

    def end_turn(self, turn: int, ts_ms: int) -> None:
        """Close a turn after the steps resolved so far."""
        r = self.resolved
        r.ends.append(len(r.slot))
        r.end_turns.append(turn)
        r.end_ts.append(ts_ms)


def resolve(stream: ArmStream) -> Resolved:
    """Resolve a whole arm.

    >>> r = resolve(ArmStream.from_turns([0, 1, 0], ["a", "a", "a"], [5, 7, 7], [0, 1, 2], [0, 1, 2]))
    >>> r.ids, r.need, r.miss, r.place
    (['a:0', 'a:1'], [0, 0, 1], [1, 3, 3], [0, 1, 1])
    """
    resolver = Resolver(stream.arm)
    ops, paths, sizes, ts_ms = (plain(c) for c in (stream.ops, stream.paths, stream.sizes, stream.ts_ms))
    costs = sizes if stream.costs is None else plain(stream.costs)
    done = 0
    for events, turn, ts in zip(*(plain(c) for c in (stream.ends, stream.end_turns, stream.end_ts))):
        for i in range(done, events):
            resolver.event(ops[i], paths[i], sizes[i], ts_ms[i], costs[i])
        resolver.end_turn(turn, ts)
        done = events
    for i in range(done, len(ops)):   # events after the last turn end
        resolver.event(ops[i], paths[i], sizes[i], ts_ms[i], costs[i])
    return resolver.resolved


class StateView(Sequence):
    """The resident entries in ``(last_accessed_at, id)`` order, with ``total_bytes``.

    Valid only during the ``evict`` call that receives it: it reads the context itself, copying
    the entries into a tuple only when indexed or iterated; ``len`` and a leading slice
    ``state[:k]`` read no more than that.
    """

    __slots__ = ("_entries", "_copy", "total_bytes")
    recency_sorted = True

    def __init__(self, entries, total_bytes: int) -> None:
        self._entries = entries
        self._copy: tuple[ContextEntry, ...] | None = None
        self.total_bytes = total_bytes

    def _tuple(self) -> tuple[ContextEntry, ...]:
        if self._copy is None:
            if self._entries is None:
                raise RuntimeError("this state was only valid during the evict call that received it")
            self._copy = tuple(self._entries)
        return self._copy

    def close(self) -> None:
        """End the view's validity (entries already copied stay readable)."""
        self._entries = None

    def __len__(self) -> int:
        return len(self._tuple() if self._entries is None else self._entries)

    def __getitem__(self, index):
        if (isinstance(index, slice) and self._copy is None and self._entries is not None
                and (index.start or 0) >= 0 and (index.stop is None or index.stop >= 0) and index.step in (None, 1)):
            if type(self._entries) is _Resident:
                return self._entries.front(index.start or 0, index.stop)
            return tuple(islice(self._entries, index.start or 0, index.stop))
        return self._tuple()[index]

    def __iter__(self):
        return iter(self._tuple())

    def __repr__(self) -> str:
        return f"StateView({list(self._tuple())!r}, total_bytes={self.total_bytes})"


class _PrefixSums:
    """Sums of values by position with point updates (a Fenwick tree: O(log n) each), room for
    ``size`` positions made at once and doubled (in O(n)) when a position past them arrives.
    Here: the bytes removed from the prompt, by the position they had entered at."""

    def __init__(self, size: int = 0) -> None:
        self._values = [0] * max(size, 64)
        self._tree = self._built(self._values)

    def add(self, position: int, value: int) -> None:
        """Add ``value`` at ``position``."""
        if position >= len(self._values):
            self._values += [0] * max(position + 1 - len(self._values), len(self._values))
            self._tree = self._built(self._values)
        self._values[position] += value
        tree, i = self._tree, position + 1
        n = len(tree)
        while i < n:
            tree[i] += value
            i += i & -i

    def before(self, position: int) -> int:
        """The sum of the values at positions below ``position``."""
        tree, total, i = self._tree, 0, min(position, len(self._tree) - 1)
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    @staticmethod
    def _built(values: list[int]) -> list[int]:
        tree = [0, *values]
        for i in range(1, len(tree)):
            parent = i + (i & -i)
            if parent < len(tree):
                tree[parent] += tree[i]
        return tree


@dataclass(frozen=True)
class Compaction:
    """Compaction of a managed context's conversation (``STRATEGY+compaction``, docs/design.md §8).

    At a turn end where the pinned content has reached ``trigger_bytes``, every message and tool
    call so far (``conversation[i]`` is 1 for such a step; the previous summary too) is replaced
    by one summary of ``summary_bytes`` at the end of the prompt, provided they take more than
    that; the overhead and the strategy's entries stay. With ``trim``, a summarization call larger
    than the window loses its oldest steps but the overhead until it fits (as Claude Code and Codex
    trim their compaction requests).
    """

    trigger_bytes: int
    summary_bytes: int
    conversation: Sequence[int]
    trim: bool = False


class _Resident:
    """The resident entries as `ContextEntry` objects in recency order, made when first read (what a
    `StateView` reads)."""

    __slots__ = ("_model",)

    def __init__(self, model: "Managed") -> None:
        self._model = model

    def __len__(self) -> int:
        return len(self._model.resident)

    def __iter__(self) -> Iterator[ContextEntry]:
        return map(self._model.entry, self._model.resident)

    def front(self, start: int, stop: int | None) -> tuple[ContextEntry, ...]:
        """The entries from ``start`` to ``stop`` (a leading run: those before ``start`` are not made)."""
        return tuple(map(self._model.entry, islice(self._model.resident, start, stop)))


class Managed:
    """The managed context of one arm under a strategy and a budget: the model `sim.engine.core.Replay`
    drives (`holds`, `place`, `end_turn`).

    - A need is a hit when its entry is resident, else a miss of its resolved class.
    - The placed entry then is resident in its slot, replacing another revision of the path
      (which leaves without being evicted). An entry entering larger than ``max_bytes`` counts
      as ``oversize``.
    - A pinned step (a message, a tool call's input, the overhead) stays in the window for good,
      unseen by the strategy: at each turn end the strategy's budget is the window
      (``budget.max_bytes``) less what is pinned, at least 0; a turn whose pinned content alone
      exceeds the window counts as ``over_window`` (where a real agent must compact).
    - At each turn end the strategy is called once, timed, with the resident entries in
      ``(last_accessed_at, id)`` order; what it answers is removed. Within a turn the context
      may exceed the budget, never after it.
    - Contract violations, in the order they are judged: the call (``evict``, a stateful hook
      or ``reset`` that raises, leaves (``sys.exit``, its own ``KeyboardInterrupt``, any other
      ``BaseException``) or runs past ``evict_timeout_ms``: `strategies.calls.call_failure`,
      which passes a real interrupt on); the answer's shape (a list or tuple, read as
      `strategies.contract.answer_ids` reads it: anything else is refused unread, and at most
      one id more than the state holds is read); each id (a string naming a resident entry,
      not named twice; a ``str`` subclass is read as the plain string); what is left (at most
      ``max_bytes`` and ``max_entries``). Strict: `ContractViolation` naming strategy, session,
      arm and turn; lenient: counted, the valid part applied, then the oldest entries dropped
      until the budget holds.
    - ``max_directories`` caps the distinct directories of resident files (paths without
      ``://``): after the answer, whole directories leave, least recently used first.
    - Stateful strategies' hooks are called in event order; a hook that fails is a violation
      reported at the turn's end (``reset``'s, at the first turn's).
    - ``evict_timeout_ms`` (off by default) limits each call into an in-process strategy
      (`strategies.calls.CallLimit`).
    - With ``compaction`` (`Compaction`), a turn end whose pinned content reached its trigger replaces
      the conversation by a summary (``compactions`` 1). An LLM writes a summary of more than 0 bytes:
      the agent makes a summarization call (``summary_calls`` 1) on the window before compaction, which
      must fit the window like any call, so the strategy is called first, its budget the window less
      what is pinned before compaction; the summarization call's prompt is then the window
      (``summary_prompt_bytes``: pinned and resident), it reads from the prompt cache the previous
      call's prompt up to the first eviction (``summary_cache_read_bytes``), outputs the summary
      (``summary_output_bytes``), and is the previous call of the turn end's own call. A turn end whose
      pinned content alone is larger than the window has that call over it (``over_window``). A
      summary of 0 bytes makes no call: compaction comes first, then the strategy.
    - Each turn end is a call to the model whose prompt is the window (the pinned content and the
      resident entries, in the order they entered it: a hit does not move an entry; a new
      revision enters at the end). The prompt cache (``cache_ttl_ms`` of trace time, 5 minutes
      by default) holds the previous call's prompt: this call reads from it the longest prefix
      left unchanged (``cache_read_bytes``), nothing once the previous call is older than the
      lifetime; what an eviction or a new revision removes from the middle ends that prefix.

    The context is kept in plain values (per resident slot: its entry, time, size and access count);
    `ContextEntry` objects are made only when a strategy or a hook reads them and are never read back,
    so nothing a strategy does to them changes the replay.
    """

    def __init__(self, resolved: Resolved, strategy, budget: ContextBudget, settings: ReplaySettings = DEFAULT_SETTINGS,
                 *, strategy_name: str = "", session: str = "", compaction: Compaction | None = None) -> None:
        self.resolved = resolved
        self.adapter = adapt(strategy)
        self.strategy = self.adapter.target
        self.budget = budget
        self.strategy_name = strategy_name or repr(self.strategy)
        self.session = session
        self.arm = resolved.arm
        self.violations = Violations(self.strategy_name, session, resolved.arm, settings.strict, self.adapter.noun)
        self.max_directories = settings.max_directories
        self.limit = call_limit_for(self.strategy, settings.evict_timeout_ms)
        limited = self.adapter.limited(self.limit)
        self.evict, self.hooks = limited.call, limited.hooks
        cache_ttl_ms = settings.cache_ttl_ms
        # slot -> (entry, last accessed at, size, access count), in (last_accessed_at, id) order
        self.resident: dict[int, tuple[int, int, int, int]] = {}
        self._objects: dict[int, ContextEntry] = {}   # slot -> its resident entry's ContextEntry, once made
        self._state_entries = _Resident(self)         # what the state a strategy is given reads
        self.resident_bytes = 0
        self.pinned_bytes = 0
        self._turn_budget = budget   # the strategy's budget while nothing is pinned
        self.cache = PromptCache(cache_ttl_ms)
        self._last_steps = self._last_prompt = 0   # the previous call's steps and prompt bytes
        self.placed = [0]                  # bytes placed in the prompt by the steps before each step
        self.removed = _PrefixSums(len(resolved))     # bytes removed from the prompt, by the step they had entered at
        self.entered: dict[int, int] = {}  # slot -> the step its resident entry entered at
        self.compaction = compaction
        self.conversation_bytes = 0        # pinned messages and tool calls (and a summary) in the window
        self._compacted_upto = 0           # the steps before it hold no conversation left to compact
        self._summary: tuple[int, int] | None = None   # the summary in the window: (position, bytes)
        self.in_order = True
        self.last_order = (-(2**63), "")   # (last_accessed_at, id) of the latest entry placed
        self.oversize = 0
        self.directory_evictions = 0
        self.hook_error: str | None = None
        self._hook("reset")

    # ----- entries -------------------------------------------------------------------------
    def entry(self, slot: int) -> ContextEntry:
        """The `ContextEntry` of resident ``slot``, made on first use and kept until it changes."""
        made = self._objects.get(slot)
        if made is None:
            entry, ts, size, count = self.resident[slot]
            r = self.resolved
            made = self._objects[slot] = ContextEntry(r.ids[entry], r.paths[slot], ts, size, count)
        return made

    def recency(self, slot: int) -> tuple[int, str]:
        """The ``(last_accessed_at, id)`` of resident ``slot``: the order a strategy sees."""
        return self.resident[slot][1], self.resolved.ids[self.resident[slot][0]]

    def _hook(self, name: str, *args) -> None:
        if self.hooks is None:
            return
        try:
            getattr(self.hooks, name)(*args)
        except BaseException as exc:   # judged; a real interrupt goes on
            failure = failed_call(exc, name)
            if self.hook_error is None:
                self.hook_error = failure

    # ----- steps ---------------------------------------------------------------------------
    def holds(self, entry: int) -> bool:
        """Whether ``entry`` is resident."""
        held = self.resident.get(self.resolved.entry_slot[entry])
        return held is not None and held[0] == entry

    def place(self, i: int) -> None:
        """Step ``i``'s entry is resident in its slot, or its pinned content joins the window."""
        r = self.resolved
        slot, place, size = r.slot[i], r.place[i], r.place_bytes[i]
        if slot < 0:
            self.pinned_bytes += size
            self.placed.append(self.placed[-1] + size)
            if self.compaction is not None and self.compaction.conversation[i]:
                self.conversation_bytes += size
            return
        old = self.resident.get(slot)
        refreshed = old is not None and old[0] == place
        # A refreshed entry keeps its place in the prompt unless its size changed: then its item
        # was rewritten, so it leaves the prompt where it was and enters again here.
        moved = not refreshed or old[2] != size
        if old is not None:
            del self.resident[slot]
            self._objects.pop(slot, None)
            self.resident_bytes -= old[2]
            if moved:
                self._leave_prompt(slot, old[2])
            if not refreshed and self.hooks is not None:
                self._hook("on_remove", r.ids[old[0]], False)
        self.placed.append(self.placed[-1] + (size if moved else 0))
        if moved:
            self.entered[slot] = i
        ts = r.ts_ms[i]
        order = (ts, r.ids[place])
        if order < self.last_order:
            self.in_order = False
        self.last_order = order
        self.resident[slot] = (place, ts, size, r.count[i])
        self.resident_bytes += size
        if not refreshed and size > self.budget.max_bytes:
            self.oversize += 1
        if self.hooks is not None:
            self._hook("on_access" if refreshed else "on_insert", self.entry(slot))

    # ----- turn ends -----------------------------------------------------------------------
    def end_turn(self, turn: int, ts_ms: int) -> tuple[TurnEnd, list[str]]:
        """Call the strategy once, remove its answer, settle violations; what the turn end measured."""
        if not self.in_order:
            self.resident = {slot: self.resident[slot] for slot in sorted(self.resident, key=self.recency)}
            self.in_order = True
            self.last_order = self.recency(next(reversed(self.resident)))
        turn_bytes = self.resident_bytes
        window = self.pinned_bytes + turn_bytes
        compacts = self.compaction is not None and self._compacts()
        # A summary an LLM writes is written by a call on the window before compaction, which must fit it too: the
        # strategy's budget then is the window less what is pinned before compaction, and compaction follows.
        late = compacts and self.compaction.summary_bytes > 0
        summary = self._compact(ts_ms, window) if compacts and not late else None
        budget = self._strategy_budget() if self.pinned_bytes else self.budget
        state = StateView(self._state_entries, turn_bytes)
        answer, raised, elapsed = timed_call(self.evict, state, budget)
        state.close()
        evicted: list[str] = []
        if raised is not None:
            violation = RAISED, raised
        elif type(answer) is list and not answer:   # the usual answer: nothing to remove
            violation = None
        else:
            violation = self._remove_answer(answer, evicted)
        if violation is None and self.hook_error is not None:
            violation = HOOK_RAISED, self.hook_error
        self.hook_error = None
        if violation is None and self._over_budget(budget):
            violation = OVER_BUDGET, (self.resident_bytes, len(self.resident))
        if violation is not None:
            self.violations.report(turn, describe_violation(*violation, budget), answer)
            self._restore_budget(evicted, budget)
        if self.max_directories is not None:
            self._limit_directories(evicted)
        summary_prompt = self.pinned_bytes + self.resident_bytes if late else 0
        dropped = 0
        if late:
            shared = None
            if self.compaction.trim and summary_prompt > self.budget.max_bytes:
                summary_prompt, shared, dropped = self._trimmed(summary_prompt)
            summary = self._compact(ts_ms, summary_prompt, shared)
        cached = self._call(ts_ms, self.pinned_bytes + self.resident_bytes)
        calls, summary_read, summary_bytes = (0, 0, 0) if summary is None else summary
        return TurnEnd(evictions=len(evicted), evicted_bytes=turn_bytes - self.resident_bytes, turn_bytes=turn_bytes,
                       occupancy_bytes=self.resident_bytes, entries=len(self.resident), evict_ns=elapsed,
                       violations=int(violation is not None), pinned_bytes=self.pinned_bytes,
                       over_window=int(max(self.pinned_bytes, summary_prompt) > self.budget.max_bytes),
                       cache_read_bytes=cached, compactions=int(summary is not None), window_bytes=window,
                       summary_calls=calls, summary_prompt_bytes=summary_prompt, summary_cache_read_bytes=summary_read,
                       summary_output_bytes=summary_bytes, summary_dropped_bytes=dropped), evicted

    def _trimmed(self, prompt: int) -> tuple[int, int, int]:
        """The summarization call's prompt of ``prompt`` bytes trimmed to the window: its oldest steps but the
        overhead leave it while it is larger; its bytes, the steps it holds as they stand (those before the first
        that left) and the bytes of conversation (and earlier summary) it left out. O(steps)."""
        c, r, steps = self.compaction, self.resolved, len(self.placed) - 1
        summary_at = -1 if self._summary is None else self._summary[0]
        shared, dropped, before = None, 0, 0
        for i in range(steps):
            if prompt <= self.budget.max_bytes:
                break
            after = self.placed[i + 1] - self.removed.before(i + 1)
            size, before = after - before, after
            if size <= 0 or (r.slot[i] < 0 and not c.conversation[i] and i != summary_at):   # gone, or overhead
                continue
            shared = i if shared is None else shared
            prompt -= size
            if c.conversation[i] or i == summary_at:
                dropped += size
        return prompt, steps if shared is None else shared, dropped

    def _call(self, ts_ms: int, prompt: int) -> int:
        """A call to the model at ``ts_ms`` whose prompt is the window as it is now (``prompt`` bytes): what it
        reads from the prompt cache; it is then the previous call."""
        steps = len(self.placed) - 1
        cached = self.cache.read(ts_ms, steps, self._prompt_before)
        self._last_steps, self._last_prompt = steps, prompt
        return cached

    def _compacts(self) -> bool:
        """Whether this turn end compacts: the pinned content reached the trigger and the conversation is larger
        than its summary (`Compaction`)."""
        c = self.compaction
        return self.pinned_bytes >= c.trigger_bytes and self.conversation_bytes > c.summary_bytes

    def _compact(self, ts_ms: int, window: int, shared: int | None = None) -> tuple[int, int, int]:
        """Replace the conversation by a summary (`Compaction`): the summarization call made first (a summary of
        more than 0 bytes: an LLM writes it), as ``(calls, what it read from the cache, the summary's bytes)``; its
        prompt is ``window``, the window before compaction (after the strategy's eviction), or, trimmed, the
        steps before ``shared`` as they stand and not all after them: a call made aside (`PromptCache.read_aside`)."""
        c = self.compaction
        if c.summary_bytes <= 0:
            call = (0, 0, 0)
        elif shared is None:
            call = (1, self._call(ts_ms, window), c.summary_bytes)
        else:
            call = (1, self.cache.read_aside(ts_ms, shared, self._prompt_before), c.summary_bytes)
        r, steps = self.resolved, len(self.placed) - 1
        first = None
        for i in range(self._compacted_upto, steps):
            if c.conversation[i]:
                self.removed.add(i, r.place_bytes[i])
                first = i if first is None else first
        self._compacted_upto = steps
        if self._summary is not None:
            position, size = self._summary
            self.removed.add(position, size)
            first = position if first is None else min(first, position)
        self.removed.add(steps - 1, -c.summary_bytes)   # the summary enters at the end
        self._summary = (steps - 1, c.summary_bytes)
        self.pinned_bytes += c.summary_bytes - self.conversation_bytes
        self.conversation_bytes = c.summary_bytes
        self.cache.change(first)
        return call

    def _strategy_budget(self) -> ContextBudget:
        """What the evictable entries may hold after this turn: the window less what is pinned."""
        left = max(0, self.budget.max_bytes - self.pinned_bytes)
        if left != self._turn_budget.max_bytes:
            self._turn_budget = ContextBudget(left, self.budget.max_entries)
        return self._turn_budget

    def _over_budget(self, budget: ContextBudget) -> bool:
        cap = budget.max_entries
        return self.resident_bytes > budget.max_bytes or (cap is not None and len(self.resident) > cap)

    def _leave_prompt(self, slot: int, size: int) -> None:
        """The entry of ``slot`` leaves the prompt: the cached prefix ends where it was."""
        position = self.entered.pop(slot)
        self.removed.add(position, size)
        self.cache.change(position)

    def _prompt_before(self, position: int) -> int:
        """Bytes of the previous call's prompt before step ``position``: the whole of it at or past its end."""
        if position >= self._last_steps:
            return self._last_prompt
        return self.placed[position] - self.removed.before(position)

    def _evict(self, slot: int, evicted: list[str]) -> None:
        entry, _, size, _ = self.resident.pop(slot)
        self._objects.pop(slot, None)
        self.resident_bytes -= size
        self._leave_prompt(slot, size)
        entry_id = self.resolved.ids[entry]
        evicted.append(entry_id)
        if self.hooks is not None:
            self._hook("on_remove", entry_id, True)

    def _remove_answer(self, answer, evicted: list[str]) -> tuple[int, object] | None:
        """Remove the ids of ``answer``; return the first violation as ``(code, detail)``, if any."""
        ids, problem = answer_ids(answer, len(self.resident))
        if problem is not None:
            return SHAPE, problem
        first = None
        r = self.resolved
        for entry_id in ids:
            if type(entry_id) is not str:
                if not isinstance(entry_id, str):
                    first = first or (NON_STRING, entry_id)
                    continue
                entry_id = str.__str__(entry_id)   # the plain string: none of the subclass's methods run
            slot = r.slots.get(entry_id.rpartition(":")[0])
            held = self.resident.get(slot)
            if held is None or r.ids[held[0]] != entry_id:
                first = first or (DUPLICATE if entry_id in evicted else UNKNOWN, entry_id)
                continue
            self._evict(slot, evicted)
        return first

    def _restore_budget(self, evicted: list[str], budget: ContextBudget) -> None:
        for slot in list(self.resident):
            if not self._over_budget(budget):
                break
            self._evict(slot, evicted)

    def _limit_directories(self, evicted: list[str]) -> None:
        """Evict whole directories, least recently used first, until at most `max_directories` remain.

        A directory's recency is that of its most recently accessed resident file, ties by name.
        """
        members: dict[str, list[int]] = {}
        latest: dict[str, int] = {}
        paths = self.resolved.paths
        for slot, (_, ts, _, _) in self.resident.items():
            path = paths[slot]
            if "://" in path:
                continue
            directory = posixpath.dirname(path)
            members.setdefault(directory, []).append(slot)
            latest[directory] = max(latest.get(directory, ts), ts)
        excess = len(members) - self.max_directories
        for directory in sorted(latest, key=lambda d: (latest[d], d))[:max(excess, 0)]:
            for slot in members[directory]:
                self._evict(slot, evicted)
                self.directory_evictions += 1

    # ----- queries -------------------------------------------------------------------------
    def resident_ids(self) -> list[str]:
        """Ids resident now, in ``(last_accessed_at, id)`` order."""
        ids = self.resolved.ids
        return [ids[self.resident[slot][0]] for slot in sorted(self.resident, key=self.recency)]


def describe_violation(code: int, detail, budget: ContextBudget) -> str:
    """What a violation ``(code, detail)`` of the contract was, in words."""
    if code in (SHAPE, RAISED, HOOK_RAISED):
        return detail
    if code == NON_STRING:
        return f"returned a non-string id {shown(detail)}"
    if code == DUPLICATE:
        return f"returned id {detail!r} twice"
    if code == UNKNOWN:
        return f"returned id {detail!r}, which is not in the state"
    left, count = detail
    return (f"left {left} bytes in {count} entries, over the budget "
            f"(max_bytes={budget.max_bytes}, max_entries={budget.max_entries})")


def replay(resolved: Resolved, strategy, budget: ContextBudget, settings: ReplaySettings = DEFAULT_SETTINGS,
           **options) -> tuple[Replay, Managed]:
    """Replay a resolved arm under ``strategy``, ``budget`` and ``settings`` (`Managed`'s options): the core's
    replay (the log) and the model (counters, violations, what is resident at the end)."""
    model = Managed(resolved, strategy, budget, settings, **options)
    return Replay(resolved, model).run(), model
