"""The strategy contract: context entries, budgets, the `ContextStrategy` protocol and JSON interop."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.tunable import Tunable

__all__ = [
    "ContextEntry",
    "ContextBudget",
    "ContextState",
    "ContextStrategy",
    "EvictFunction",
    "entry_from_json",
    "entry_to_json",
    "budget_from_json",
    "budget_to_json",
    "load_request",
    "dump_request",
    "parse_json",
    "remaining_fits",
    "min_cap",
    "check_max_entries",
    "MAX_ENTRIES",
    "answer_ids",
    "answer_base",
    "shown",
]


@dataclass(frozen=True, slots=True)
class ContextEntry:
    """One resource held in an agent's context: a revision of a file or a tool output."""

    id: str
    path: str
    last_accessed_at: int
    size_bytes: int
    access_count: int | None = None


def _fill_entry_slots(cls: type) -> None:
    """Give the frozen ``cls`` an ``__init__`` that fills its slots through their descriptors: the
    same fields and defaults as the generated one at half its cost (every replayed event makes an
    entry)."""
    set_id, set_path, set_accessed, set_size, set_count = (
        getattr(cls, name).__set__ for name in ("id", "path", "last_accessed_at", "size_bytes", "access_count"))

    def __init__(self, id: str, path: str, last_accessed_at: int, size_bytes: int,
                 access_count: int | None = None) -> None:
        set_id(self, id)
        set_path(self, path)
        set_accessed(self, last_accessed_at)
        set_size(self, size_bytes)
        set_count(self, access_count)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = __init__


_fill_entry_slots(ContextEntry)


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """What the context may hold after eviction: bytes, and optionally a number of entries."""

    max_bytes: int
    max_entries: int | None = None


class ContextState(tuple):
    """A state tuple that also carries totals the replay engine already knows.

    Strategies may read ``total_bytes`` and ``recency_sorted`` (entries ordered by
    ``(last_accessed_at, id)`` ascending) as a fast path; every strategy must also accept a
    plain tuple or list, so these are hints, never requirements.

    >>> s = ContextState([ContextEntry("a:0", "a", 1, 10)], recency_sorted=True)
    >>> len(s), s.total_bytes, s.recency_sorted
    (1, 10, True)
    """

    total_bytes: int
    recency_sorted: bool

    def __new__(cls, entries: Iterable[ContextEntry] = (), *, total_bytes: int | None = None,
                recency_sorted: bool = False) -> "ContextState":
        self = super().__new__(cls, entries)
        self.total_bytes = sum(e.size_bytes for e in self) if total_bytes is None else total_bytes
        self.recency_sorted = recency_sorted
        return self


@runtime_checkable
class ContextStrategy(Protocol):
    """Anything with a pure ``evict(state, budget)`` returning ids to evict, in eviction order."""

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> Sequence[str]: ...


EvictFunction = Callable[[Sequence[ContextEntry], ContextBudget], Sequence[str]]


def remaining_fits(state: Sequence[ContextEntry], budget: ContextBudget, evicted: Iterable[str],
                   entry_cap: int | None = None) -> bool:
    """Whether what is left of ``state`` after ``evicted`` fits the budget (and ``entry_cap``)."""
    gone = set(evicted)
    left = [e for e in state if e.id not in gone]
    cap = min_cap(budget.max_entries, entry_cap)
    if cap is not None and len(left) > cap:
        return False
    return sum(e.size_bytes for e in left) <= budget.max_bytes


#: The entry cap every capped strategy takes: what it accepts, and what ``ctxbench tune`` searches.
MAX_ENTRIES = Tunable("max_entries", "int", 0, MAX_OPTION_INT, (10, 1000), none=True, log=True,
                      doc="entries the context may hold (none: no cap)")


def check_max_entries(max_entries: int | None) -> int | None:
    """Validate a factory's ``max_entries`` option: an integer from 0 to 2**50 (`strategies.limits`), or ``None``."""
    return MAX_ENTRIES.check(max_entries)


def min_cap(*caps: int | None) -> int | None:
    """The tightest of several optional entry caps (``None`` means no cap)."""
    present = [c for c in caps if c is not None]
    return min(present) if present else None


def answer_base(answer: Any) -> type | None:
    """``list`` or ``tuple``: what an answer is read as (a subclass as its base); None for any other answer."""
    kind = type(answer)
    return list if issubclass(kind, list) else tuple if issubclass(kind, tuple) else None


def answer_ids(answer: Any, state_size: int) -> tuple[list | tuple | None, str | None]:
    """The ids of an ``evict`` answer that are read, as a plain list or tuple; or ``None`` and why not.

    The one rule for the shape of an answer, which the simulator and the checker both apply
    before reading any of it: it must be a ``list`` or a ``tuple`` (a subclass is read as the
    list or tuple it holds; none of its own methods is called). Anything else (a generator, a
    set, a string, ``None``, a numpy array) is refused unread. Of a list or tuple, at most
    ``state_size + 1`` ids are read: more ids than the state has entries cannot all be right,
    so the first ``state_size + 1`` already show a violation (an id repeated, one not in the
    state, or one that is not a string), and the rest is never looked at. What each id must be
    is judged item by item afterwards.

    >>> answer_ids(("a:0",), 1)
    (('a:0',), None)
    >>> answer_ids(iter(["a:0"]), 1)
    (None, 'returned list_iterator, not a list or tuple of ids')
    >>> answer_ids(["a:0"] * 10_000_000, 1)
    (['a:0', 'a:0'], None)
    """
    kind = type(answer)
    if (kind is list or kind is tuple) and len(answer) <= state_size + 1:
        return answer, None
    base = answer_base(answer)
    if base is None:
        return None, f"returned {kind.__name__}, not a list or tuple of ids"
    return base.__getitem__(answer, slice(0, state_size + 1)), None


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` (shortened) for values of built-in scalar types, ``<TypeName>`` for others.

    For messages about a strategy's answer: another object's ``repr`` is the strategy's own code.

    >>> shown("a:0"), shown(7), shown(object())
    ("'a:0'", '7', '<object>')
    """
    kind = type(value)
    if kind is int and value.bit_length() > 128:
        return f"<int of {value.bit_length()} bits>"
    if kind in (str, int, float, bool, bytes, type(None)):
        text = repr(value)
        return text if len(text) <= limit else text[:limit - 3] + "..."
    return f"<{kind.__name__}>"


# --- JSON interop, in the TypeScript runtime's field names -------------------------------

_ENTRY_FIELDS = {"id": str, "path": str, "lastAccessedAt": int, "sizeBytes": int}


def _require_int(value: Any, where: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StrategyInputError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise StrategyInputError(f"{where}: expected an integer, got {value!r}")
        value = int(value)
    if minimum is not None and value < minimum:
        raise StrategyInputError(f"{where}: must be >= {minimum}, got {value}")
    return value


def entry_from_json(obj: Mapping[str, Any], where: str = "entry") -> ContextEntry:
    """Build a `ContextEntry` from its TypeScript JSON form (``id, path, lastAccessedAt, ...``)."""
    if not isinstance(obj, Mapping):
        raise StrategyInputError(f"{where}: expected an object, got {type(obj).__name__}")
    for name in _ENTRY_FIELDS:
        if name not in obj:
            raise StrategyInputError(f"{where}: missing field {name!r}")
    for name in ("id", "path"):
        if not isinstance(obj[name], str):
            raise StrategyInputError(f"{where}.{name}: expected a string, got {obj[name]!r}")
    count = obj.get("accessCount")
    return ContextEntry(
        id=obj["id"],
        path=obj["path"],
        last_accessed_at=_require_int(obj["lastAccessedAt"], f"{where}.lastAccessedAt"),
        size_bytes=_require_int(obj["sizeBytes"], f"{where}.sizeBytes", minimum=0),
        access_count=None if count is None else _require_int(count, f"{where}.accessCount", minimum=0),
    )


def entry_to_json(entry: ContextEntry) -> dict[str, Any]:
    """The TypeScript JSON form of an entry; ``accessCount`` is omitted when absent."""
    out: dict[str, Any] = {
        "id": entry.id,
        "path": entry.path,
        "lastAccessedAt": entry.last_accessed_at,
        "sizeBytes": entry.size_bytes,
    }
    if entry.access_count is not None:
        out["accessCount"] = entry.access_count
    return out


def budget_from_json(obj: Mapping[str, Any], where: str = "budget") -> ContextBudget:
    """Build a `ContextBudget` from ``{"maxBytes": ..., "maxEntries": ...}``."""
    if not isinstance(obj, Mapping):
        raise StrategyInputError(f"{where}: expected an object, got {type(obj).__name__}")
    if "maxBytes" not in obj:
        raise StrategyInputError(f"{where}: missing field 'maxBytes'")
    entries = obj.get("maxEntries")
    return ContextBudget(
        max_bytes=_require_int(obj["maxBytes"], f"{where}.maxBytes", minimum=0),
        max_entries=None if entries is None else _require_int(entries, f"{where}.maxEntries", minimum=0),
    )


def budget_to_json(budget: ContextBudget) -> dict[str, Any]:
    """The TypeScript JSON form of a budget; ``maxEntries`` is omitted when absent."""
    out: dict[str, Any] = {"maxBytes": budget.max_bytes}
    if budget.max_entries is not None:
        out["maxEntries"] = budget.max_entries
    return out


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``, where a value nested too deeply is a ``json.JSONDecodeError`` too, not a
    RecursionError (the same rule as `traces.safejson`, which this package may not import)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("a value nested too deeply to parse", "", 0) from None


def load_request(text: str | Mapping[str, Any]) -> tuple[tuple[ContextEntry, ...], ContextBudget]:
    """Parse ``{"state": [...], "budget": {...}}`` as written by the TypeScript runtime.

    >>> state, budget = load_request('{"state": [{"id": "a.ts:0", "path": "a.ts", '
    ...     '"lastAccessedAt": 5, "sizeBytes": 12, "accessCount": 2}], "budget": {"maxBytes": 10}}')
    >>> state[0].access_count, budget
    (2, ContextBudget(max_bytes=10, max_entries=None))
    """
    if isinstance(text, str):
        try:
            obj = parse_json(text)
        except json.JSONDecodeError as exc:
            raise StrategyInputError(f"request is not valid JSON: {exc}") from None
    else:
        obj = text
    if not isinstance(obj, Mapping) or "state" not in obj or "budget" not in obj:
        raise StrategyInputError('request must be an object with "state" and "budget"')
    raw_state = obj["state"]
    if not isinstance(raw_state, list):
        raise StrategyInputError("request.state: expected an array")
    state = tuple(entry_from_json(e, f"state[{i}]") for i, e in enumerate(raw_state))
    return state, budget_from_json(obj["budget"])


def dump_request(state: Iterable[ContextEntry], budget: ContextBudget) -> str:
    """Serialise a state and budget as one line of TypeScript-compatible JSON."""
    return json.dumps(
        {"state": [entry_to_json(e) for e in state], "budget": budget_to_json(budget)},
        separators=(",", ":"),
    )
