"""The event vocabulary, written once: ops and their codes, content kinds, the role an event takes in a
transcript, and what an event adds to the window.

Every other table derives from this one: the trace schema (`traces.schema`), the token ratios
(`traces.tokens`), the replay engine's op codes (``sim/engine``, whose compiled side is checked against
this module when it is imported) and the windows of `traces.window`.

- **Ops.** A trace's ``op`` is one of `OPS`; its code is its index (`OP_CODE`). The first four
  touch files and tool results (what a strategy may evict); the last three (`PINNED_OPS`) put
  content in the window for good. New ops only ever join at the end, so a code keeps its meaning.
  The engine has one op more, `INVALIDATE` (another arm changed the path), which no trace holds.
- **Kinds** (`KINDS`): what an event's content is, for its bytes per token (`traces.tokens`): the
  trace's ``kind`` where it gives one, else the op's own (`OP_KINDS`; a message is ``thinking``
  when its path is ``msg://thinking/...``, else ``prose``).
- **Roles** (`EVENT_ROLES`): what an event is in an agent's transcript: a tool's ``result`` (a read,
  edit, write or output), a tool ``call``'s input, the ``overhead``, or a message of the ``user``,
  the ``assistant`` or the model's ``thinking`` (by its ``msg://ROLE/N`` path).
- **What an event adds to a transcript** (`ADDS`, `transcript_adds`): its ``content``; the tool's
  ``confirmation`` (`CONFIRMATION_BYTES` of output) for an edit, or a write of a file the arm had
  not touched, since the content is in the tool call's input; or ``nothing``, for an edit or a
  write whose tool-call input and returned text are events of their own (`accompanied_changes`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["OPS", "OP_CODE", "READ", "EDIT", "WRITE", "OUTPUT", "MESSAGE", "CALL", "OVERHEAD", "INVALIDATE",
           "ENGINE_OPS", "PINNED_OPS", "PINNED_CODES", "CHANGE_CODES", "KINDS", "OP_KINDS", "EVENT_ROLES", "ADDS",
           "NOTHING", "CONTENT", "CONFIRMATION", "CONFIRMATION_BYTES", "CONFIRMATION_KIND", "kind_of", "kinds_of",
           "kind_codes", "role_of", "role_codes", "accompanied_changes", "transcript_adds"]

#: Operations, in code order (a code is an index).
OPS: tuple[str, ...] = ("read", "edit", "write", "output", "message", "call", "overhead")
OP_CODE: dict[str, int] = {op: code for code, op in enumerate(OPS)}
READ, EDIT, WRITE, OUTPUT = OP_CODE["read"], OP_CODE["edit"], OP_CODE["write"], OP_CODE["output"]
MESSAGE, CALL, OVERHEAD = OP_CODE["message"], OP_CODE["call"], OP_CODE["overhead"]
#: The engine's own op: another arm changed the path to a new revision of the event's size.
INVALIDATE = len(OPS)
ENGINE_OPS: tuple[str, ...] = OPS + ("invalidate",)
#: The ops whose content joins the window for good (no strategy may evict it): the conversation,
#: tool calls' inputs, the fixed overhead (system prompt, tool definitions, project instructions).
PINNED_OPS: tuple[str, ...] = ("message", "call", "overhead")
PINNED_CODES: tuple[int, ...] = tuple(OP_CODE[op] for op in PINNED_OPS)
#: The ops that change a file (what claims between arms govern).
CHANGE_CODES: tuple[int, ...] = (EDIT, WRITE)

#: Content kinds: file contents, tool results that are not files, the user's and the assistant's
#: text, the model's thinking, tool-call inputs (JSON), the fixed overhead.
KINDS: tuple[str, ...] = ("code", "output", "prose", "thinking", "json", "overhead")
#: Each op's own kind, where neither the trace nor the path says more.
OP_KINDS: dict[str, str] = {"read": "code", "edit": "code", "write": "code", "output": "output",
                            "message": "prose", "call": "json", "overhead": "overhead"}
# By engine op code; another arm's change (`INVALIDATE`) is a file's.
_OP_KIND_CODES = np.array([KINDS.index(OP_KINDS.get(op, "code")) for op in ENGINE_OPS], dtype=np.int8)
_THINKING = "msg://thinking/"

#: The roles an event takes in a transcript (the policy contract, `strategies.policy.ROLES`, adds
#: those a policy puts: summaries, placeholders, re-attached files).
EVENT_ROLES: tuple[str, ...] = ("overhead", "user", "assistant", "thinking", "call", "result")
_OP_ROLES = {"read": "result", "edit": "result", "write": "result", "output": "result", "call": "call",
             "overhead": "overhead"}
_MESSAGE_ROLES = {"user": "user", "thinking": "thinking"}

#: What an event adds to a transcript.
ADDS: tuple[str, ...] = ("nothing", "content", "confirmation")
NOTHING, CONTENT, CONFIRMATION = range(len(ADDS))
#: What an edit's or a write's tool result adds, in bytes of tool output: the median Edit and Write
#: result of the bundled Claude Code sessions (127 and 130 characters).
CONFIRMATION_BYTES = 130
CONFIRMATION_KIND = "output"


def kind_of(op: str, path: str) -> str:
    """The content kind of an event whose trace gives none.

    >>> kind_of("read", "src/a.py"), kind_of("message", "msg://thinking/3"), kind_of("message", "msg://user/0")
    ('code', 'thinking', 'prose')
    """
    if op == "message" and path.startswith(_THINKING):
        return "thinking"
    return OP_KINDS[op]


def kinds_of(ops: Sequence[str], paths: Sequence[str], given: Sequence | None = None) -> list[str]:
    """Each event's kind: the trace's ``kind`` where it has one, else `kind_of`."""
    if given is None:
        return [kind_of(op, path) for op, path in zip(ops, paths)]
    return [kind if isinstance(kind, str) and kind else kind_of(op, path)
            for op, path, kind in zip(ops, paths, given)]


def kind_codes(op_codes, paths: Sequence[str], given=None) -> np.ndarray:
    """Each event's kind as an index into `KINDS` (int8): ``given`` (indices into ``("",) + KINDS``,
    0 for none) where it names one, else the op's own (`kind_of`).

    >>> kind_codes([READ, OUTPUT, MESSAGE, MESSAGE], ["a.py", "tool://bash/0", "msg://user/0", "msg://thinking/1"]).tolist()
    [0, 1, 2, 3]
    """
    ops = np.asarray(op_codes, dtype=np.int64)
    out = _OP_KIND_CODES[ops] if len(ops) else np.zeros(0, dtype=np.int8)
    messages = np.flatnonzero(ops == MESSAGE)
    if len(messages):
        thinking = np.fromiter((paths[i].startswith(_THINKING) for i in messages), dtype=bool, count=len(messages))
        out[messages[thinking]] = KINDS.index("thinking")
    if given is not None:
        given = np.asarray(given, dtype=np.int64)
        out = np.where(given > 0, given - 1, out).astype(np.int8)
    return out


def role_of(op: int, path: str) -> str:
    """The role an event of op code ``op`` takes in a transcript (`EVENT_ROLES`).

    >>> role_of(READ, "a.py"), role_of(MESSAGE, "msg://user/2"), role_of(MESSAGE, "msg://summary/0")
    ('result', 'user', 'assistant')
    """
    if op == MESSAGE:
        return _MESSAGE_ROLES.get(path[6:path.find("/", 6)] if path.startswith("msg://") else "", "assistant")
    return _OP_ROLES[OPS[op]]


def role_codes(ops: Sequence[int], paths: Sequence[str], roles: Sequence[str] = EVENT_ROLES) -> np.ndarray:
    """Each event's role (`role_of`) as an index into ``roles``; the engine's `INVALIDATE` takes none (-1)."""
    index = {role: k for k, role in enumerate(roles)}
    return np.fromiter((-1 if op == INVALIDATE else index[role_of(op, path)] for op, path in zip(ops, paths)),
                       dtype=np.int64, count=len(ops))


def accompanied_changes(ops: Sequence[int], paths: Sequence[str]) -> np.ndarray:
    """Which events are an edit or a write whose tool-call input (``call://T/N``) the stream holds and
    whose returned text (``tool://T/N``) follows it: an import with the conversation carries both, so
    the change itself adds nothing to a transcript.

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


def transcript_adds(ops: Sequence[int], paths: Sequence[str]) -> np.ndarray:
    """What each event of one arm's stream (in order) adds to the arm's transcript, as a code of `ADDS`:
    ``nothing`` for an accompanied change (`accompanied_changes`) and for the engine's `INVALIDATE`;
    ``confirmation`` for any other edit and for a write of a path no earlier event of the stream
    touched; ``content`` for everything else (a read, an output, a write over a path the arm had,
    a message, a tool call's input, the overhead).

    >>> transcript_adds([WRITE, READ, WRITE, EDIT, MESSAGE], ["a", "a", "a", "b", "msg://user/0"]).tolist()
    [2, 1, 1, 2, 1]
    """
    out = np.full(len(ops), CONTENT, dtype=np.int8)
    touched: set[str] = set()
    pinned = set(PINNED_CODES)
    for i, (op, path) in enumerate(zip(ops, paths)):
        if op in pinned:
            continue
        if op == INVALIDATE:
            out[i] = NOTHING
        elif op == EDIT or (op == WRITE and path not in touched):
            out[i] = CONFIRMATION
        touched.add(path)
    out[accompanied_changes(ops, paths)] = NOTHING
    return out
