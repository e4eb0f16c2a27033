"""`CodingContextManager`: applies a session's events to a context and calls the strategy per turn.

Semantics (DESIGN §3), with the decisions the design leaves open written down here:

- One revision of a path is resident at a time; its id is ``f"{path}:{revision}"``.
- ``read``: a hit when the current revision is resident. A read whose size differs from the
  known size of the current revision means the file changed outside the trace's own edits (a
  formatter, ``git checkout``): that is a new revision, and needing it is a compulsory miss.
- ``edit``: needs the current revision first (hit, or a miss that re-reads it; the bytes of
  that miss are the known size of the revision, or the new size when the path was never seen),
  then a new revision of ``size_bytes`` replaces it.
- ``write``: a new revision enters without a read; ``output``: a tool result enters; neither is
  ever a miss. A repeated output path is a new revision of it.
- Misses are **compulsory** (this revision was never resident), **capacity** (it was resident
  and a strategy evicted it) or **invalidation** (another arm changed the file while this arm
  held an older revision; see `invalidate`). Re-read cost counts capacity misses only. The
  first read after an invalidation needs the other arm's revision at whatever size it reads
  (one invalidation miss; the revision then has that size).
- ``access_count`` = events on the path so far in the session, surviving eviction.
- After every turn the strategy is called once, timed with ``perf_counter_ns``; what it returns
  is removed. The context may exceed the budget within a turn, never after it.
- Contract violations raise `ContractViolation` naming strategy, session and turn (strict), or
  are counted (lenient): the valid part of the answer is applied, then the oldest entries (LRU
  order) are dropped until the budget holds, so one bad answer cannot inflate the numbers of the
  turns after it. They are, in the order they are judged:

  1. *The call.* ``evict``, a stateful hook or ``reset`` that raises, or that leaves (``sys.exit``,
     a `KeyboardInterrupt` the strategy raised itself, any other `BaseException`), or that runs
     past the optional per-call limit (``evict_timeout_ms``): `strategies.calls.call_failure`
     decides, and passes a real Ctrl-C or signal on instead. A hook's or ``reset``'s failure is
     reported at the end of the turn it happened in (``reset``'s: the first turn).
  2. *The shape of the answer*, before any of it is read: a list or tuple
     (`strategies.contract.answer_ids`; subclasses are read as the list or tuple they hold). Any
     other answer (a generator, a set, a string, ``None``, a numpy array) is refused whole: none
     of it is applied. Of a list or tuple, at most one id more than the state has entries is
     read: a longer answer has shown its violation by then, and the rest is never looked at.
  3. *Each id* read: a string (a ``str`` subclass is read as the plain string it holds) naming
     an entry of the state, not named twice.
  4. *What is left*: at most ``max_bytes`` and ``budget.max_entries``.

  Messages show at most the first 8 ids of an answer, and ``repr`` only of built-in scalar
  values (`strategies.contract.shown`): nothing of the strategy's own code runs to report it.
- ``evict_timeout_ms`` (optional, off by default) limits each call into an in-process strategy
  (`strategies.calls.CallLimit`: ``SIGALRM`` raised in the strategy's Python code; compiled code is
  stopped only when it returns to Python; main thread only). `cmd:` strategies keep their own
  ``timeout_ms`` and are not limited twice. The limit's own cost is part of each timed call.
- ``max_directories`` (optional) caps the distinct directories of resident files: after the
  strategy's answer, the manager evicts whole directories, least recently used first, and
  counts those evictions separately (``directory_evictions``).
- An entry larger than the whole budget is counted as ``oversize`` when it enters (a hit on it
  within the turn is not a new entry); the strategy must evict it at the turn's end like any other
  entry.

`apply_events` and `end_turn` run in compiled code (``sim/_fastpath.c``) when it is built, unless
``CTXBENCH_PURE_PYTHON=1`` or ``compiled=False``; the Python methods here are the reference it is
tested against (identical logs, states and counters). Without a C compiler ctxbench installs and
runs the same, on the Python path only.
"""

from __future__ import annotations

import hashlib
import posixpath
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import attrgetter
from time import perf_counter_ns

import numpy as np

from sim.compiled import ENABLED, _fastpath
from sim.errors import ContractViolation
from sim.state_view import StateView
from strategies.calls import call_failure, call_limit_for
from strategies.contract import ContextBudget, ContextEntry, answer_base, answer_ids, shown
from strategies.stateful import StatefulContextStrategy

__all__ = ["CodingContextManager", "TurnLog", "OP_CODES", "READ", "EDIT", "WRITE", "OUTPUT"]

READ, EDIT, WRITE, OUTPUT = 0, 1, 2, 3
OP_CODES = {"read": READ, "edit": EDIT, "write": WRITE, "output": OUTPUT}

# Why the current revision of a path is not resident (absent: never seen, or resident).
_EVICTED, _INVALIDATED = 1, 2
_ID = attrgetter("id")


class _UnfrozenEntry:
    """`ContextEntry`'s slot layout without its frozen ``__setattr__``.

    The manager builds one entry per event. The frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``; filling an `_UnfrozenEntry` with plain attribute stores and
    then assigning ``__class__ = ContextEntry`` (CPython allows it between classes of identical
    layout) gives an equal, equally hashing, frozen entry at about a third of the cost.
    """

    __slots__ = ContextEntry.__slots__


def _check_entry_layout() -> None:
    probe = object.__new__(_UnfrozenEntry)
    probe.id, probe.path, probe.last_accessed_at, probe.size_bytes, probe.access_count = "a:0", "a", 1, 2, 3
    probe.__class__ = ContextEntry
    if ContextEntry.__slots__ != ("id", "path", "last_accessed_at", "size_bytes", "access_count") \
            or probe != ContextEntry("a:0", "a", 1, 2, 3):
        raise ImportError("ContextEntry's fields changed: update the manager's entry construction")


_check_entry_layout()


def _new_entry(entry_id: str, path: str, ts: int, size: int, count: int) -> ContextEntry:
    """``ContextEntry(entry_id, path, ts, size, count)``, built as `_UnfrozenEntry` describes."""
    entry = object.__new__(_UnfrozenEntry)
    entry.id = entry_id
    entry.path = path
    entry.last_accessed_at = ts
    entry.size_bytes = size
    entry.access_count = count
    entry.__class__ = ContextEntry
    return entry


#: Whether new managers use the compiled fast path by default.
COMPILED = ENABLED


TURN_FIELDS = ("turn", "ts_ms", "accesses", "hits", "compulsory", "capacity", "invalidation",
               "accessed_bytes", "miss_bytes", "capacity_bytes", "invalidation_bytes", "evictions",
               "evicted_bytes", "turn_bytes", "occupancy_bytes", "entries", "evict_ns", "violations")


# The counts of events within a turn (fields 2 to 10 of a row), kept in a list while the turn is open.
TALLY_FIELDS = TURN_FIELDS[2:11]
_ACC, _HIT, _COMP, _CAP, _INV, _ACC_B, _MISS_B, _CAP_B, _INV_B = range(len(TALLY_FIELDS))
_NO_TALLY = (0,) * len(TALLY_FIELDS)
_ROWS_PER_CHUNK = 4096
_ROW = struct.Struct(f"{len(TURN_FIELDS)}q")      # one turn's row: int64 fields, native byte order
_CHUNK_BYTES = _ROWS_PER_CHUNK * _ROW.size        # row bytes recorded before they are packed


@dataclass
class TurnLog:
    """Per-turn records of the manager: one int64 row per turn, one column per `TURN_FIELDS` name.

    ``table`` holds the rows; ``columns`` maps each field to its column (a view of ``table``).
    """

    table: np.ndarray
    evicted_ids: dict[int, list[str]] = field(default_factory=dict)
    columns: dict[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.columns = {name: self.table[:, i] for i, name in enumerate(TURN_FIELDS)}

    @classmethod
    def concat(cls, logs: Sequence["TurnLog"]) -> "TurnLog":
        """Logs of several arms, one after the other."""
        evicted: dict[int, list[str]] = {}
        for log in logs:
            for turn, ids in log.evicted_ids.items():
                evicted.setdefault(turn, []).extend(ids)
        return cls(np.concatenate([log.table for log in logs]), evicted)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self) -> int:
        return len(self.table)

    def digest(self) -> str:
        """SHA-256 over each turn's number, hits, misses by class and evicted ids."""
        h = hashlib.sha256()
        for start in range(0, len(self.table), 1 << 16):   # in blocks: no copy of a long log at once
            h.update(np.ascontiguousarray(self.table[start:start + (1 << 16), _DIGEST_COLUMNS], dtype="<i8"))
        evicted = self.evicted_ids
        h.update("".join([f"{turn}:{','.join(evicted[turn])}\n" for turn in sorted(evicted)]).encode())
        return h.hexdigest()


_new_view = StateView.__new__
_DIGEST_COLUMNS = [TURN_FIELDS.index(c) for c in ("turn", "hits", "compulsory", "capacity", "invalidation")]

if _fastpath is not None:
    _fastpath.bind(ContextEntry, StateView, _ROWS_PER_CHUNK, call_failure, answer_ids)


class CodingContextManager:
    """Tracks one arm's context under a strategy and a budget, turn by turn.

    >>> from strategies import ContextBudget, make
    >>> m = CodingContextManager(make("lru"), ContextBudget(max_bytes=100), session="s")
    >>> m.apply_turn(0, [("read", "a.py", 60, 0)])
    >>> m.apply_turn(1, [("read", "b.py", 60, 1)])   # a.py is evicted at the turn's end
    >>> m.apply_turn(2, [("read", "a.py", 60, 2)])   # so this is a capacity miss
    >>> m.log.capacity.tolist(), m.log.evictions.tolist(), m.resident_ids()
    ([0, 0, 1], [0, 1, 1], ['a.py:0'])
    """

    def __init__(self, strategy, budget: ContextBudget, *, strict: bool = True, session: str = "",
                 strategy_name: str | None = None, arm: str = "main", max_directories: int | None = None,
                 compiled: bool | None = None, evict_timeout_ms: int | None = None) -> None:
        if not isinstance(budget, ContextBudget):
            raise TypeError(f"budget must be a ContextBudget, got {type(budget).__name__}")
        if max_directories is not None and (isinstance(max_directories, bool) or not isinstance(max_directories, int)
                                            or max_directories < 1):
            raise ValueError(f"max_directories must be a positive integer or None, got {max_directories!r}")
        self.max_directories = max_directories
        self.directory_evictions = 0
        self.strategy = strategy
        self.budget = budget
        self.strict = strict
        self.session = session
        self.arm = arm
        self.strategy_name = strategy_name or repr(strategy)
        #: The per-call time limit (``with manager.call_limit:`` installs its handler for a whole replay).
        self.call_limit = call_limit_for(strategy, evict_timeout_ms)
        self._hooks = strategy if isinstance(strategy, StatefulContextStrategy) else None
        self._hook_error: str | None = None
        if self._hooks is not None:
            self._hook("reset")
        self._entries: dict[str, ContextEntry] = {}   # path -> resident entry, in (ts, id) order
        self._resident = self._entries.values()         # the live view every turn's state wraps
        self._bytes = 0
        self._max_bytes = budget.max_bytes
        self._max_count = sys.maxsize if budget.max_entries is None else budget.max_entries
        self._plain = self._hooks is None and max_directories is None   # no hooks, no directory cap
        self._ordered = True           # False: some entry arrived out of (ts, id) order
        self._tail_unsorted = False    # only the entries sharing the latest ts are out of id order
        self._last_ts, self._last_id = -(2**63), ""   # the greatest (ts, id) placed so far
        self._evict = strategy.evict if self.call_limit is None else partial(self.call_limit.call, strategy.evict)
        self._revision: dict[str, int] = {}
        self._current_id: dict[str, str] = {}          # path -> id of its current revision
        self._size: dict[str, int] = {}                 # known size of each path's current revision
        self._count: dict[str, int] = {}
        self._absent_reason: dict[str, int] = {}
        self._row_bytes = bytearray()  # the rows of turns closed since the last packing, as `_ROW`s
        self._packed: list[np.ndarray] = []   # earlier rows, packed `_ROWS_PER_CHUNK` turns at a time
        self._evicted_ids: dict[int, list[str]] = {}
        self.violation_messages: list[str] = []
        self.oversize = 0
        self._tally = list(_NO_TALLY)  # the open turn's counts, in `TALLY_FIELDS` order
        if compiled and _fastpath is None:
            raise ValueError("the compiled fast path is not built (sim/_fastpath.c); pass compiled=None or False")
        self.compiled = COMPILED if compiled is None else bool(compiled)

    # ----- queries -------------------------------------------------------------------------
    @property
    def occupancy_bytes(self) -> int:
        """Bytes resident right now."""
        return self._bytes

    @property
    def log(self) -> TurnLog:
        """The per-turn log so far (its table is the manager's own, so it is read-only)."""
        if self._row_bytes or not self._packed:
            self._pack_rows()
        packed = self._packed
        if len(packed) > 1:
            # One table, filled chunk by chunk and freeing each: the peak is the table plus one chunk.
            table = np.empty((sum(map(len, packed)), len(TURN_FIELDS)), dtype=np.int64)
            at = 0
            while packed:
                chunk = packed.pop(0)
                table[at:at + len(chunk)] = chunk
                at += len(chunk)
            packed.append(table)
        packed[0].flags.writeable = False
        return TurnLog(packed[0], self._evicted_ids)

    def resident_ids(self) -> list[str]:
        """Ids resident right now, in recency order."""
        return [e.id for e in self._entries.values()]

    def state(self) -> StateView:
        """The state a strategy sees now: valid until the context next changes."""
        if not self._ordered or self._tail_unsorted:
            self._sort()
        return StateView(self._entries.values(), self._bytes)

    def _sort(self) -> None:
        """Restore ``(last_accessed_at, id)`` order: the tail of latest-ts entries, or everything.

        Events arrive in time order, so usually only entries sharing the latest timestamp (one
        turn's events) are out of id order: sorting that tail costs O(k log k), not O(n log n).
        """
        if not self._ordered:
            # In place: the replay loop holds the dict.
            ordered = sorted(self._entries.items(), key=lambda kv: (kv[1].last_accessed_at, kv[1].id))
            self._entries.clear()
            self._entries.update(ordered)
            self._ordered = True
            if self._entries:
                last = self._entries[next(reversed(self._entries))]
                self._last_ts, self._last_id = last.last_accessed_at, last.id
        else:
            self._sort_tail()
        self._tail_unsorted = False

    def _sort_tail(self) -> None:
        """Sort by id the entries sharing the latest ts (always a contiguous suffix of the dict)."""
        entries, last_ts = self._entries, self._last_ts
        tail = []
        for path in reversed(entries):
            if entries[path].last_accessed_at != last_ts:
                break
            tail.append(path)
        for entry in sorted([entries.pop(path) for path in tail], key=_ID):
            entries[entry.path] = entry
        self._tail_unsorted = False

    def _order(self, ts: int, entry_id: str) -> None:
        """Note where an entry about to be appended falls in ``(ts, id)`` order."""
        if ts > self._last_ts:
            if self._tail_unsorted and self._ordered:
                self._sort_tail()   # the group of the previous ts is no longer the tail: settle it now
            self._last_ts, self._last_id = ts, entry_id
        elif ts == self._last_ts:
            if entry_id >= self._last_id:
                self._last_id = entry_id
            else:
                self._tail_unsorted = True
        else:
            self._ordered = False

    def log_digest(self) -> str:
        """SHA-256 of the event log: per turn, hits, misses by class and the evicted ids."""
        return self.log.digest()

    # ----- events --------------------------------------------------------------------------
    def _hook(self, name: str, *args) -> None:
        """Call a stateful strategy's hook; a failure (`call_failure`) is a violation reported at the turn's end."""
        try:
            if self.call_limit is None:
                getattr(self._hooks, name)(*args)
            else:
                self.call_limit.call(getattr(self._hooks, name), *args)
        except BaseException as exc:   # judged by `call_failure`, which passes a real interrupt on
            failure = call_failure(exc)[1]
            if self._hook_error is None:
                self._hook_error = f"{name} {failure}"

    def _new_revision(self, path: str, size: int) -> str:
        rev = self._revision[path] = self._revision.get(path, -1) + 1
        entry_id = self._current_id[path] = f"{path}:{rev}"
        self._size[path] = size
        return entry_id

    def _need(self, path: str, size: int) -> str:
        """Account for needing the current revision of ``path`` (hit or miss); return its id."""
        entry_id = self._current_id.get(path)
        tally = self._tally
        tally[_ACC] += 1
        tally[_ACC_B] += size
        if entry_id is None:   # a path never seen: a compulsory miss
            tally[_COMP] += 1
            tally[_MISS_B] += size
            return self._new_revision(path, size)
        if self._size[path] != size:
            if self._absent_reason.get(path) == _INVALIDATED:
                # The other arm's revision, as this read sees it: its size is the read's.
                self._size[path] = size
            else:
                # The file changed outside the trace's own edits: a revision never seen before.
                entry_id = self._new_revision(path, size)
                self._absent_reason.pop(path, None)
        entry = self._entries.get(path)
        if entry is not None and entry.id == entry_id:
            tally[_HIT] += 1
            return entry_id
        reason = self._absent_reason.pop(path, None)
        tally[_MISS_B] += size
        if reason == _EVICTED:
            tally[_CAP] += 1
            tally[_CAP_B] += size
        elif reason == _INVALIDATED:
            tally[_INV] += 1
            tally[_INV_B] += size
        else:
            tally[_COMP] += 1
        return entry_id

    def apply_events(self, ops: Sequence[int], paths: Sequence[str], sizes: Sequence[int],
                     ts_ms: Sequence[int], turns: Sequence[int] | None = None) -> None:
        """Apply events given as columns of op codes, paths, sizes and times, in order.

        With ``turns``, a change of turn number closes the turn (one strategy call), and so does
        the end of the columns; without, the turn stays open for `end_turn`. The common event,
        a read of the resident current revision, is handled here without a call.
        """
        if self.compiled:
            _fastpath.apply_events(self, ops, paths, sizes, ts_ms, turns)
            return
        entries, current, counts, tally, hooks = self._entries, self._current_id, self._count, self._tally, self._hooks
        new_entry = _new_entry
        other, end = self._apply_other, self.end_turn
        closing = turns is not None
        if not closing:
            turns = repeat(None)
        elif len(turns) == 0:
            return
        this_turn, last = turns[0] if closing else None, 0
        for turn, op, path, size, ts in zip(turns, ops, paths, sizes, ts_ms):
            if turn != this_turn:
                end(this_turn, last)
                this_turn = turn
            last = ts
            if op == READ:
                old = entries.get(path)
                if old is not None and old.size_bytes == size and old.id == current[path]:
                    tally[_ACC] += 1
                    tally[_HIT] += 1
                    tally[_ACC_B] += size
                    entry_id = old.id
                    del entries[path]
                    if ts > self._last_ts and not self._tail_unsorted:
                        self._last_ts, self._last_id = ts, entry_id
                    else:
                        self._order(ts, entry_id)
                    count = counts[path] = counts[path] + 1
                    entries[path] = entry = new_entry(entry_id, path, ts, size, count)
                    if hooks is not None:
                        self._hook("on_access", entry)
                    continue
            other(op, path, size, ts)
        if closing:
            end(this_turn, last)

    def apply_event(self, op: str | int, path: str, size_bytes: int, ts_ms: int) -> None:
        """Apply one event (op name or code) within the current turn."""
        self.apply_events((OP_CODES[op] if isinstance(op, str) else op,), (path,), (size_bytes,), (ts_ms,))

    def _apply_other(self, code: int, path: str, size_bytes: int, ts_ms: int) -> None:
        """Every event but a hit: a read that misses, an edit, a write, an output.

        The event's entry goes to the recency end, replacing the path's resident revision if any.
        """
        count = self._count[path] = self._count.get(path, 0) + 1
        if code == READ:
            entry_id = self._need(path, size_bytes)
            size = self._size[path]
        else:
            if code == EDIT:
                known = self._size.get(path)
                self._need(path, size_bytes if known is None else known)
            elif code != WRITE and code != OUTPUT:
                raise ValueError(f"unknown op code {code!r}")
            entry_id, size = self._new_revision(path, size_bytes), size_bytes
            self._absent_reason.pop(path, None)
        entries = self._entries
        old = entries.pop(path, None)
        refreshed = False
        if old is not None:
            self._bytes -= old.size_bytes
            refreshed = old.id == entry_id
            if self._hooks is not None and not refreshed:
                self._hook("on_remove", old.id, False)
        # The dict stays in (ts, id) order while entries arrive in that order; else sort lazily.
        if ts_ms > self._last_ts and not self._tail_unsorted:
            self._last_ts, self._last_id = ts_ms, entry_id
        else:
            self._order(ts_ms, entry_id)
        entries[path] = entry = _new_entry(entry_id, path, ts_ms, size, count)
        self._bytes += size
        if size > self._max_bytes and not refreshed:
            self.oversize += 1
        if self._hooks is not None:
            self._hook("on_access" if refreshed else "on_insert", entry)

    def invalidate(self, path: str, size_bytes: int) -> None:
        """Another arm changed ``path`` to a new revision of ``size_bytes``.

        A resident older revision stays in context (stale) until evicted or replaced; the next
        access of ``path`` is an invalidation miss.
        """
        self._new_revision(path, size_bytes)
        if path in self._entries or self._absent_reason.get(path) in (_EVICTED, _INVALIDATED):
            self._absent_reason[path] = _INVALIDATED

    def apply_turn(self, turn: int, events: Sequence[tuple[str | int, str, int, int]]) -> None:
        """Apply one tool turn's events ``(op, path, size_bytes, ts_ms)``, then evict once."""
        ts = 0
        for op, path, size, ts in events:
            self.apply_event(op, path, size, ts)
        self.end_turn(turn, ts)

    def end_turn(self, turn: int, ts_ms: int) -> None:
        """Close the current turn: call the strategy once, remove its answer, record the turn."""
        if self.compiled:
            _fastpath.end_turn(self, turn, ts_ms)
            return
        turn_bytes = self._bytes
        if not self._ordered or self._tail_unsorted:
            self._sort()
        state = _new_view(StateView)   # `StateView(values, turn_bytes)` without the __init__ frame
        state._values, state._items, state.total_bytes = self._resident, None, turn_bytes
        t0 = perf_counter_ns()
        try:
            answer = self._evict(state, self.budget)
            elapsed = perf_counter_ns() - t0
        except BaseException as exc:  # judged by `call_failure`, which passes a real interrupt on
            elapsed = perf_counter_ns() - t0
            state._values = None
            answer, raised = None, call_failure(exc)[1]
        else:
            raised = None
        state._values = None   # `state.close()`, without a call: the view is valid during `evict` only
        kind = type(answer)
        if raised is not None or kind is list and not answer:
            evicted: list[str] | None = None
            violation = raised
        else:
            evicted = []
            size = len(self._entries)
            if (kind is list or kind is tuple) and len(answer) <= size + 1:
                ids, problem = answer, None   # `answer_ids`, without the call: it would read it all
            else:
                ids, problem = answer_ids(answer, size)
            violation = problem if ids is None else self._remove(ids, evicted)
        violated = 0
        if violation is not None or not self._plain or self._bytes > self._max_bytes \
                or len(self._entries) > self._max_count:
            if evicted is None:
                evicted = []
            violated = self._settle_turn(turn, answer, violation, evicted)
        left, count = self._bytes, len(self._entries)
        removed = 0
        if evicted:
            removed = len(evicted)
            earlier = self._evicted_ids.get(turn)
            if earlier is None:
                self._evicted_ids[turn] = evicted
            else:
                earlier.extend(evicted)
        tally = self._tally
        rows = self._row_bytes
        rows += _ROW.pack(turn, ts_ms, *tally, removed, turn_bytes - left, turn_bytes, left, count, elapsed, violated)
        tally[:] = _NO_TALLY
        if len(rows) >= _CHUNK_BYTES:
            self._pack_rows()

    def _settle_turn(self, turn: int, answer, violation: str | None, evicted: list[str]) -> int:
        """After an answer that breaks the contract, or with hooks or a directory cap: report the
        violation and restore the budget, cap directories (``evicted`` grows); 1 if violated."""
        budget = self.budget
        if self._hook_error is not None:   # a hook (of the turn's events or of `_remove`) raised
            violation = violation or self._hook_error
            self._hook_error = None
        left, count = self._bytes, len(self._entries)
        if violation is None and (left > budget.max_bytes or
                                  (budget.max_entries is not None and count > budget.max_entries)):
            violation = (f"left {left} bytes in {count} entries, over the budget "
                         f"(max_bytes={budget.max_bytes}, max_entries={budget.max_entries})")
        if violation is not None:
            self._violation(turn, violation, answer)
            self._restore_budget(evicted)
        if self.max_directories is not None:
            self._limit_directories(evicted)
        return 0 if violation is None else 1

    def _pack_rows(self) -> None:
        """Move the rows recorded so far into an int64 chunk, so the buffer they grow in stays small."""
        self._packed.append(np.frombuffer(bytes(self._row_bytes), dtype=np.int64).reshape(-1, len(TURN_FIELDS)))
        self._row_bytes.clear()

    def _remove(self, ids: list | tuple, evicted: list[str]) -> str | None:
        """Remove ``ids`` (a plain list or tuple, see `answer_ids`); return a description of the first violation."""
        problem = None
        entries, current, reason, hooks = self._entries, self._current_id, self._absent_reason, self._hooks
        removed = 0
        for entry_id in ids:
            if type(entry_id) is not str:
                if not issubclass(type(entry_id), str):
                    problem = problem or f"returned a non-string id {shown(entry_id)}"
                    continue
                entry_id = str.__str__(entry_id)   # the plain string: none of the subclass's methods run
            path = entry_id.rpartition(":")[0]
            entry = entries.get(path)
            if entry is None or entry.id != entry_id:
                # A duplicate is an id this answer already removed.
                problem = problem or (f"returned id {entry_id!r} twice" if entry_id in evicted
                                      else f"returned id {entry_id!r}, which is not in the state")
                continue
            # `_evict_path`, inlined: most turns with an answer remove one or two entries.
            del entries[path]
            removed += entry.size_bytes
            entry_id = entry.id
            if entry_id == current[path]:
                reason[path] = _EVICTED
            if hooks is not None:
                self._hook("on_remove", entry_id, True)
            evicted.append(entry_id)
        self._bytes -= removed
        return problem

    def _evict_path(self, path: str, entry: ContextEntry) -> None:
        del self._entries[path]
        self._bytes -= entry.size_bytes
        if entry.id == self._current_id[path]:
            self._absent_reason[path] = _EVICTED
        if self._hooks is not None:
            self._hook("on_remove", entry.id, True)

    def _limit_directories(self, evicted: list[str]) -> None:
        """Evict whole directories, least recently used first, until at most `max_directories` remain.

        Only files count (paths without ``://``); a directory's recency is that of its most
        recently accessed resident file, ties broken by name. O(n) per turn, plus the evictions.
        """
        latest: dict[str, int] = {}
        members: dict[str, list[str]] = {}
        for path, entry in self._entries.items():
            if "://" in path:
                continue
            directory = posixpath.dirname(path)
            members.setdefault(directory, []).append(path)
            if entry.last_accessed_at > latest.get(directory, -(2**63)):
                latest[directory] = entry.last_accessed_at
        excess = len(members) - self.max_directories
        if excess <= 0:
            return
        for directory in sorted(latest, key=lambda d: (latest[d], d))[:excess]:
            for path in members[directory]:
                entry = self._entries[path]
                self._evict_path(path, entry)
                evicted.append(entry.id)
                self.directory_evictions += 1

    def _restore_budget(self, evicted: list[str]) -> None:
        budget = self.budget
        for path, entry in list(self._entries.items()):
            if self._bytes <= budget.max_bytes and (budget.max_entries is None
                                                    or len(self._entries) <= budget.max_entries):
                break
            self._evict_path(path, entry)
            evicted.append(entry.id)

    def _violation(self, turn: int, what: str, answer) -> None:
        message = (f"strategy {self.strategy_name!r}, session {self.session!r}"
                   f"{'' if self.arm == 'main' else f', arm {self.arm!r}'}, turn {turn}: {what}{_shown_answer(answer)}")
        if self.strict:
            raise ContractViolation(message)
        self.violation_messages.append(message)


def _shown_answer(answer) -> str:
    """`` (returned [...])`` with the first 8 ids of a list or tuple (see `shown`) and their number past 8;
    nothing for any other answer (the violation names its type) or for a call that raised (``None``)."""
    base = answer_base(answer)
    if base is None:
        return ""
    first = ", ".join(map(shown, base.__getitem__(answer, slice(0, 8))))
    count = base.__len__(answer)
    return f" (returned {count:,} ids: [{first}, ...])" if count > 8 else f" (returned [{first}])"
