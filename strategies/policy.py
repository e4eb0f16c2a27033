"""The policy contract: how an agent sheds an append-only transcript (compaction, masking, clearing).

A real coding agent's context is a transcript: every message, tool call and tool result is
appended in order, and a file read twice is there twice. A **policy** decides, before each call
to the model, what to replace: a stretch of history by a summary (compaction), old tool results
by one-line placeholders (observation masking, tool-result clearing). It is pure like a
strategy: the same transcript and window give the same edits, nothing is mutated, no I/O.

A policy has these methods:

- ``edit(items, window) -> edits``: called once per model call, with the transcript in order
  (read-only, valid during the call) and the window; returns the edits to apply, in order
  (usually none), as a list or tuple. Each `Replace` removes the items it names and, unless
  ``tokens`` is 0, puts one item of its ``role`` and ``tokens`` where the first of them was;
  each `Append` adds an item at the end: a summary, or (``ref``: a revision an earlier item
  held) a copy of that content re-attached after a compaction, at most as large as it was (a
  copy smaller than the revision is its path only, and does not hold it). A summary is written
  by a summarization call made first; at most one `Request` says what that call's prompt holds
  where it is not the whole window before the edits: some items, text of the policy's own, and
  whether its oldest items leave it until it fits the window (as Codex trims its compaction
  request).
- ``admit(item) -> tokens``, optional: what an item takes when it enters (a tool that truncates
  its output: at most the item's tokens). By default every item enters whole.
- ``managed_compaction(window_tokens) -> (trigger_tokens, summary_tokens[, trims])``, optional: how
  the policy compacts a managed context's conversation (``STRATEGY+POLICY`` specs): when the pinned
  content reaches the trigger, into a summary of that size; ``trims`` (False when left out): whether
  a summarization call larger than the window loses its oldest steps until it fits.
- ``compaction_schedule() -> (summary_tokens, read_tokens, member)``, optional: the whole-history
  compaction schedules the policy is measured against (``opt:schedule``: each compaction writes a
  summary of ``summary_tokens``, a file read enters at most ``read_tokens``, None: whole) and whether
  its own compactions are such a schedule, or None.
- ``trigger(window_tokens) -> tokens``, optional: the window's size in tokens at which the policy
  first acts (compacts or clears), for a window of ``window_tokens``; ``ctxbench run`` refuses a
  ``trigger_tokens`` option above the window, and notes a default one above it.

The contract (checked by `strategies.check_policy` and by every replay): the same transcript
and window give the same edits; nothing is mutated; a `Replace` names distinct items of the
transcript, never the overhead, and puts at most the tokens it removes; an ``attached`` `Append`
names a revision an earlier item held, at most as large; the edits of one call never leave the
window larger than it was; a `Request` names distinct items of the transcript, comes with a summary
and at most once; the call returns (it does not raise or leave).

JSON (for ``cmd:`` policies): items are ``{"id", "role", "kind", "tokens", "turn", "path",
"ref"}``, the window ``{"maxTokens", "tokens", "turn", "compactions"}``, a reply
``{"edits": [{"replace": [ids], "tokens": N, "role": "summary"}, {"append": "attached",
"tokens": N, "ref": "src/a.py:2"}, {"request": null, "tokens": 0, "fit": true}]}`` (a request's
``null``: every item of the window; else a list of ids).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ctxbench.strategies.compiled import read_only_slot

__all__ = ["ROLES", "REPLACEABLE", "APPENDABLE", "TranscriptItem", "ITEM_SLOTS", "Window", "Replace", "Append",
           "Request", "Edit", "ContextPolicy", "is_policy", "read_edits", "judge_edits", "items_to_json", "request_from_json",
           "edits_to_json", "edits_from_json"]

#: What an item of a transcript is: the fixed overhead; the user's or the assistant's text; the
#: model's thinking; a tool call's input; a tool's result; a summary or a placeholder a policy put.
ROLES = ("overhead", "user", "assistant", "thinking", "call", "result", "summary", "placeholder", "attached")
#: Roles a policy may put in place of others: the overhead stays for the whole session.
REPLACEABLE = tuple(r for r in ROLES if r != "overhead")
#: Roles of the items a policy may append.
APPENDABLE = ("summary", "attached")


@dataclass(frozen=True, slots=True)
class TranscriptItem:
    """One item of a transcript.

    ``id`` is unique in the session; ``tokens`` what it takes of the window; ``turn`` the turn
    it entered in; ``path`` the file or resource it concerns (``""`` for text); ``ref`` for a
    result holding a file's content, the revision it holds (``"src/a.py:2"``), else ``""``;
    ``kind`` its content kind (`traces.tokens.KINDS`).
    """

    id: str
    role: str
    kind: str
    tokens: int
    turn: int
    path: str = ""
    ref: str = ""


@dataclass(frozen=True, slots=True)
class Window:
    """The window at a model call: its size, what the transcript takes of it, the turn, the
    compactions so far."""

    max_tokens: int
    tokens: int
    turn: int
    compactions: int = 0


@dataclass(frozen=True, slots=True)
class Replace:
    """Remove the items ``ids`` (in transcript order); unless ``tokens`` is 0, put one item of
    ``role`` and ``tokens`` where the first of them was."""

    ids: tuple[str, ...]
    tokens: int = 0
    role: str = "summary"


@dataclass(frozen=True, slots=True)
class Append:
    """Add an item of ``role`` and ``tokens`` at the end: a ``summary``, or an ``attached`` copy of
    the content of file revision ``ref`` (one an earlier item held; at most its size)."""

    role: str
    tokens: int
    ref: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """The prompt of the summarization call a summary is written by, where it is not the whole window before
    the edits: the items ``ids`` (in transcript order; None: every item), then ``tokens`` of text the policy
    adds (its instructions; digests of items it shows in part). With ``fit``, while the prompt is larger than
    the window its oldest items but the overhead leave it, one at a time."""

    ids: tuple[str, ...] | None = None
    tokens: int = 0
    fit: bool = False


Edit = Replace | Append | Request


def _fast_init(cls: type, init) -> None:
    """Make ``init`` (filling the slots through their descriptors: the same fields and defaults as the
    generated ``__init__`` at a fraction of its cost) the ``__init__`` of the frozen ``cls``: every replayed
    event makes an item, every model call a window."""
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init


def _item_init():
    set_id, set_role, set_kind, set_tokens, set_turn, set_path, set_ref = (
        getattr(TranscriptItem, name).__set__ for name in ("id", "role", "kind", "tokens", "turn", "path", "ref"))

    def __init__(self, id: str, role: str, kind: str, tokens: int, turn: int, path: str = "", ref: str = "") -> None:
        set_id(self, id)
        set_role(self, role)
        set_kind(self, kind)
        set_tokens(self, tokens)
        set_turn(self, turn)
        set_path(self, path)
        set_ref(self, ref)
    return __init__


def _window_init():
    set_max, set_tokens, set_turn, set_compactions = (
        getattr(Window, name).__set__ for name in ("max_tokens", "tokens", "turn", "compactions"))

    def __init__(self, max_tokens: int, tokens: int, turn: int, compactions: int = 0) -> None:
        set_max(self, max_tokens)
        set_tokens(self, tokens)
        set_turn(self, turn)
        set_compactions(self, compactions)
    return __init__


_fast_init(TranscriptItem, _item_init())
_fast_init(Window, _window_init())


def _read_only(cls: type) -> dict:
    """Make every slot of the frozen ``cls`` read-only, ``object.__setattr__`` included (`read_only_slot`), and
    pickle and copy it through its constructor; the slots' own descriptors, for code that fills them."""
    slots = {name: cls.__dict__[name] for name in cls.__slots__}
    for name, member in slots.items():
        setattr(cls, name, read_only_slot(cls, member))
    cls.__reduce__ = lambda self: (cls, tuple(getattr(self, name) for name in slots))
    return slots


#: The slots of `TranscriptItem` (its member descriptors): the compiled engine fills them when it makes an item.
#: A policy cannot change an item it is shown: every field is read-only (a write, even through
#: ``object.__setattr__``, raises AttributeError, and the call breaks the contract).
ITEM_SLOTS = _read_only(TranscriptItem)


@runtime_checkable
class ContextPolicy(Protocol):
    """Anything with ``edit(items, window)`` returning edits (see the module docstring)."""

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> Sequence[Edit]: ...


def is_policy(obj: object) -> bool:
    """Whether ``obj`` is a transcript policy (has ``edit``) rather than an eviction strategy.

    >>> is_policy(type("P", (), {"edit": lambda self, items, window: ()})())
    True
    """
    return callable(getattr(obj, "edit", None)) and not callable(getattr(obj, "evict", None))


def _plain_str(value):
    """A ``str`` subclass as the plain string it holds (none of its methods run); anything else as it is."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def _plain_tuple(value):
    """A ``tuple`` subclass as the plain tuple it holds, read through tuple's own methods; anything else as it is."""
    if type(value) is tuple or not isinstance(value, tuple):
        return value
    return tuple(tuple.__getitem__(value, k) for k in range(tuple.__len__(value)))


def _plain_edit(edit):
    """One edit read once into plain values (see `read_edits`)."""
    if type(edit) is Replace:
        ids = _plain_tuple(edit.ids)
        return Replace(tuple(map(_plain_str, ids)) if type(ids) is tuple else ids, edit.tokens, _plain_str(edit.role))
    if type(edit) is Append:
        role = _plain_str(edit.role)
        return Append(role, edit.tokens, _plain_str(edit.ref) if role == "attached" else "")
    if type(edit) is Request:
        ids = _plain_tuple(edit.ids)
        return Request(tuple(map(_plain_str, ids)) if type(ids) is tuple else ids, edit.tokens, edit.fit)
    return edit


def read_edits(answer):
    """A policy's answer read once into plain values, which are then both judged (`judge_edits`) and applied: a list
    or tuple (a subclass read through list's or tuple's own methods, none of its own running) of its edits, each
    `Replace` and `Append` copied with a ``str`` or ``tuple`` subclass in a field (an id included, as a strategy's ids
    are read) as the plain value it holds and a summary's ``ref``, which nothing reads, as ``""``.
    Anything else is returned as it is, for the judge to refuse unread.

    >>> class Twice(list):
    ...     def __iter__(self): return iter([])   # a second reading would see nothing
    >>> read_edits(Twice([Replace(("a",), 0)]))
    [Replace(ids=('a',), tokens=0, role='summary')]
    """
    base = list if isinstance(answer, list) else tuple if isinstance(answer, tuple) else None
    if base is None:
        return answer
    return [_plain_edit(base.__getitem__(answer, k)) for k in range(base.__len__(answer))]


def _count(value) -> bool:
    return type(value) is int and value >= 0


def judge_edits(edits, item_of: Callable[[str], TranscriptItem | None],
                seen: Mapping[str, int]) -> tuple[str, str] | None:
    """The first way ``edits`` (a policy's answer) break the contract, as ``(kind, message)``, or None.

    ``item_of(id)`` is the transcript's item of that id (None: no such item); ``seen`` maps each
    revision an item held to the most tokens a copy of it had. Kinds: ``bad-return`` (not a list or
    tuple of `Replace`, `Append` and `Request`), ``bad-edit`` (a role or a token count out of the contract),
    ``unknown-item``, ``duplicate`` (an item replaced twice), ``overhead`` (the overhead replaced),
    ``grows`` (a Replace putting more tokens than it removes), ``bad-attach`` (an attached copy of a
    revision no item held, or larger than it was), ``window-grows`` (the edits together grow the window),
    ``bad-request`` (a `Request` of unknown or repeated items, a second one, or one with no summary).

    >>> item = TranscriptItem("1", "result", "code", 10, 0)
    >>> judge_edits([Replace(("1",), 12)], {"1": item}.get, {})
    ('grows', 'edit 0: replaces 10 tokens by 12, more than it removes')
    """
    if not isinstance(edits, (list, tuple)):
        return "bad-return", f"returned {type(edits).__name__}, not a list or tuple of edits"
    gone: set[str] = set()
    net = 0
    request: int | None = None
    summary = False
    for k, edit in enumerate(edits):
        if type(edit) is Replace:
            ids = edit.ids
            if not isinstance(ids, tuple) or not ids:
                return "bad-edit", f"edit {k}: a Replace needs a non-empty tuple of ids, got {ids!r:.80}"
            removed = 0
            for item_id in ids:
                item = item_of(item_id) if type(item_id) is str else None
                if item is None:
                    return "unknown-item", f"edit {k}: replaces {item_id!r:.80}, which is not in the transcript"
                if item_id in gone:
                    return "duplicate", f"edit {k}: replaces {item_id!r} a second time"
                if item.role == "overhead":
                    return "overhead", f"edit {k}: replaces {item_id!r}, the overhead (which stays)"
                gone.add(item_id)
                removed += item.tokens
            if not _count(edit.tokens) or edit.role not in REPLACEABLE:
                return "bad-edit", (f"edit {k}: a Replace needs tokens >= 0 and a role of {', '.join(REPLACEABLE)}, "
                                    f"got {edit.tokens!r:.40} and {edit.role!r:.40}")
            if edit.tokens > removed:
                return "grows", f"edit {k}: replaces {removed} tokens by {edit.tokens}, more than it removes"
            net += edit.tokens - removed
            summary |= edit.role == "summary" and edit.tokens > 0
        elif type(edit) is Append:
            if edit.role not in APPENDABLE or not _count(edit.tokens):
                return "bad-edit", (f"edit {k}: an Append needs a role of {', '.join(APPENDABLE)} and tokens >= 0, "
                                    f"got {edit.role!r:.40} and {edit.tokens!r:.40}")
            if edit.role == "attached":
                if not isinstance(edit.ref, str) or edit.ref not in seen:
                    return "bad-attach", f"edit {k}: attaches {edit.ref!r:.80}, which no earlier item held"
                if edit.tokens > seen[edit.ref]:
                    return "bad-attach", f"edit {k}: attaches {edit.ref!r} at {edit.tokens} tokens, larger than it was"
            net += edit.tokens
            summary |= edit.role == "summary" and edit.tokens > 0
        elif type(edit) is Request:
            problem = _judge_request(k, edit, item_of, request)
            if problem is not None:
                return "bad-request", problem
            request = k
        else:
            return "bad-return", f"edit {k} is {type(edit).__name__}, not Replace, Append or Request"
    if request is not None and not summary:
        return "bad-request", f"edit {request}: a Request with no summary to write (a summary of tokens > 0)"
    if net > 0:
        return "window-grows", f"the edits grow the window by {net} tokens"
    return None


def _judge_request(k: int, request: Request, item_of: Callable[[str], TranscriptItem | None],
                   earlier: int | None) -> str | None:
    """How a `Request` breaks the contract (see `judge_edits`), or None."""
    if earlier is not None:
        return f"edit {k}: a second Request (edit {earlier} was one)"
    if not _count(request.tokens) or type(request.fit) is not bool:
        return (f"edit {k}: a Request needs tokens >= 0 and fit true or false, "
                f"got {request.tokens!r:.40} and {request.fit!r:.40}")
    ids = request.ids
    if ids is None:
        return None
    if not isinstance(ids, tuple):
        return f"edit {k}: a Request's ids are None or a tuple of ids, got {ids!r:.80}"
    named: set[str] = set()
    for item_id in ids:
        if type(item_id) is not str or item_of(item_id) is None:
            return f"edit {k}: requests {item_id!r:.80}, which is not in the transcript"
        if item_id in named:
            return f"edit {k}: requests {item_id!r} a second time"
        named.add(item_id)
    return None


def items_to_json(items: Sequence[TranscriptItem], window: Window) -> dict:
    """A request in the JSON shapes of the module docstring."""
    return {"items": [{"id": i.id, "role": i.role, "kind": i.kind, "tokens": i.tokens, "turn": i.turn,
                       "path": i.path, "ref": i.ref} for i in items],
            "window": {"maxTokens": window.max_tokens, "tokens": window.tokens, "turn": window.turn,
                       "compactions": window.compactions}}


def request_from_json(request: Mapping) -> tuple[list[TranscriptItem], Window]:
    """The items and window of a request in the JSON shapes (`items_to_json`'s inverse)."""
    items = [TranscriptItem(i["id"], i["role"], i["kind"], i["tokens"], i["turn"], i.get("path", ""), i.get("ref", ""))
             for i in request["items"]]
    w = request["window"]
    return items, Window(w["maxTokens"], w["tokens"], w["turn"], w.get("compactions", 0))


def edits_to_json(edits: Sequence[Edit]) -> dict:
    """A reply in the JSON shapes (`edits_from_json`'s inverse).

    >>> edits_to_json([Replace(("a",), 2, "placeholder"), Append("summary", 9)])
    {'edits': [{'replace': ['a'], 'tokens': 2, 'role': 'placeholder'}, {'append': 'summary', 'tokens': 9, 'ref': ''}]}
    >>> edits_to_json([Request(None, 0, True)])
    {'edits': [{'request': None, 'tokens': 0, 'fit': True}]}
    """
    return {"edits": [{"replace": list(e.ids), "tokens": e.tokens, "role": e.role} if isinstance(e, Replace)
                      else {"request": None if e.ids is None else list(e.ids), "tokens": e.tokens, "fit": e.fit}
                      if isinstance(e, Request) else {"append": e.role, "tokens": e.tokens, "ref": e.ref}
                      for e in edits]}


def edits_from_json(reply: object) -> list[Edit]:
    """The edits of a JSON reply, or ``ValueError`` naming what is wrong with it.

    >>> edits_from_json({"edits": [{"replace": ["a", "b"], "tokens": 5}, {"append": "attached", "tokens": 3,
    ...                                                                   "ref": "x:0"}]})
    [Replace(ids=('a', 'b'), tokens=5, role='summary'), Append(role='attached', tokens=3, ref='x:0')]
    """
    if not isinstance(reply, dict) or not isinstance(reply.get("edits"), list):
        raise ValueError('the reply is not {"edits": [...]}')
    out: list[Edit] = []
    for k, edit in enumerate(reply["edits"]):
        if not isinstance(edit, dict):
            raise ValueError(f"edit {k} is not an object")
        tokens = edit.get("tokens", 0)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ValueError(f"edit {k}: tokens must be an integer >= 0, got {tokens!r}")
        if isinstance(edit.get("replace"), list) and all(isinstance(i, str) for i in edit["replace"]):
            role = edit.get("role", "summary")
            if role not in REPLACEABLE:
                raise ValueError(f"edit {k}: role must be one of {', '.join(REPLACEABLE)}, got {role!r}")
            out.append(Replace(tuple(edit["replace"]), tokens, role))
        elif "request" in edit:
            ids, fit = edit["request"], edit.get("fit", False)
            if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
                raise ValueError(f"edit {k}: a request is null or a list of ids, got {ids!r:.80}")
            if not isinstance(fit, bool):
                raise ValueError(f"edit {k}: fit must be true or false, got {fit!r:.40}")
            out.append(Request(None if ids is None else tuple(ids), tokens, fit))
        elif edit.get("append") in APPENDABLE and isinstance(edit.get("ref", ""), str):
            out.append(Append(edit["append"], tokens, edit.get("ref", "")))
        else:
            raise ValueError(f'edit {k}: expected {{"replace": [ids], ...}}, '
                             f'{{"append": "summary" | "attached", ...}} or {{"request": null | [ids], ...}}')
    return out
