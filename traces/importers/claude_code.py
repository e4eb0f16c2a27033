"""Import Claude Code transcripts (``*.jsonl``, one JSON object per line), streaming, as traces.

Layout: ``<session>.jsonl`` is a session (arm ``main``); ``<session>/subagents/agent-<id>.jsonl``
is the subagent ``<id>`` of that session, imported as arm ``<id>``.

Mapping (docs/design.md §2):

- A tool turn is one assistant message (``message.id``) with ``tool_use`` blocks; Claude Code
  writes one line per content block, so lines sharing a message id form one turn. Results come
  in later ``user`` lines as ``tool_result`` blocks (matched by ``tool_use_id``) and, structured,
  in the line's ``toolUseResult``.
- ``Read`` -> ``read`` of ``file_path``; size = UTF-8 bytes of the file content returned (the
  structured ``file.content``, else the result text without Claude Code's ``N→`` line-number
  prefixes). A read that returns only part of the file (``offset``/``limit``, or a file longer
  than the read limit) is the resource ``path#L<first>-<last>``.
- ``Edit`` / ``MultiEdit`` -> ``edit``; size = the file after the edit, computed from the
  structured result (``originalFile`` with the replacements applied, else the structured patch
  applied to the last known size); without a structured result it is estimated from the
  old/new strings and the last known size of the file (or the new strings alone) and counted.
- ``Write`` -> ``write``, size = bytes written.
- Any other tool (Bash, Grep, Glob, WebFetch, WebSearch, Task, ...) and any failed call
  (``is_error``) -> ``output`` ``tool://<tool>/<n>``, size = bytes of the result text; with the
  conversation, WebFetch and WebSearch results carry the content kind ``prose`` (column ``kind``).
- The conversation (unless ``conversation=False``, ``--no-conversation``): every assistant
  message is a turn; its text -> ``message`` ``msg://assistant/<n>``, its visible thinking ->
  ``msg://thinking/<n>`` (signatures are not counted), each ``tool_use`` input ->
  ``call`` ``call://<tool>/<n>`` sized as its ``tool_use`` block's JSON (type, id, name and
  input: an Edit's old/new strings, a Write's content, a command line); user text (prompts, reminders, isMeta
  records) -> ``msg://user/<n>`` and the compaction summary (``isCompactSummary``) ->
  ``msg://summary/<n>``, in the arm's latest turn; the text an Edit, MultiEdit or Write
  returns (a confirmation with a ``cat -n`` snippet) -> ``output`` ``tool://<tool>/<n>``
  beside the file event. Each arm (the session, each subagent) opens
  with an ``overhead`` event ``overhead://system``: the first assistant message's
  ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens`` less the tokens of
  the content before it, in bytes at the overhead kind's ratio. After a compaction the window
  restarts with the summary, and what the first call after it holds beyond the summary and the
  arm's overhead (context Claude Code re-attaches: recent files, plans, todos) is an
  ``overhead://compaction/<n>`` event. Claude Code's own copies of results (``toolUseResult``)
  never reach the model and are not counted; queued messages and hook output that the
  transcript does not show are not imported.
- ``lines_changed``: for edits the larger of lines removed and lines added (from the structured
  patch, else from the old/new strings); for writes the lines written.
- ``ts_ms``: the ISO ``timestamp`` of the line that made the call; ``usage_input_tokens``: the
  turn's ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``.
- ``compact_boundary`` system lines mark the next event of their arm (``compact_before``) and are
  listed in ``df.attrs["compactions"]`` with their trigger and pre-compaction token count.

Lines that are not JSON objects (corrupt, truncated) are skipped and counted; calls that never
get a result are dropped and counted. Images inside results count no bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxbench.traces.importers._jsonstream import json_lines, reading
from ctxbench.traces.importers._text import count_lines, nbytes, text_of, window_id
from ctxbench.traces.importers.builder import (MAX_USAGE_TOKENS, Call, FinishedSession, SessionBuilder, SessionReader,
                                      usage_tokens)
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from ctxbench.traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "sniff", "read", "session_files", "looks_like", "call_size"]

FORMAT = "claude-code"
LABEL = "Claude Code"
KIND = "a Claude Code transcript"
SUFFIXES = (".jsonl",)
HELP = """\
Claude Code transcripts (~/.claude/projects/<project>/*.jsonl); a directory is
walked: <session>.jsonl is a session, <session>/subagents/agent-<id>.jsonl is
its arm <id>. Read/Edit/MultiEdit/Write become read/edit/write events, every
other tool an output (tool://<tool>/<n>); a partial read is its own resource
(path#L<first>-<last>). With the conversation: messages, thinking, each call's
input and each window's overhead (from its first recorded usage). Real input
tokens per turn go to the extra column usage_input_tokens; compactions to the
column compact_before and the metadata."""
SUBAGENT_DIR = "subagents"
#: Tools whose results are prose (web pages as markdown, search results): their outputs' kind.
PROSE_TOOLS = {"WebFetch": "prose", "WebSearch": "prose"}
#: Record types Claude Code writes; a file with none of them is not a transcript.
RECORD_TYPES = frozenset({"user", "assistant", "system", "result"})
BOOKKEEPING_TYPES = frozenset({"summary", "progress", "file-history-snapshot", "queue-operation"})
_NUMBERED_LINE = re.compile(r"^ *(\d+)(?:→|\t)", re.M)
_REMINDER = "<system-reminder>"


def looks_like(record: dict) -> bool:
    """Whether one parsed line looks like a Claude Code transcript record."""
    kind = record.get("type")
    if not isinstance(kind, str):
        return False
    if kind in BOOKKEEPING_TYPES:
        return True
    return kind in RECORD_TYPES and any(key in record for key in ("sessionId", "uuid", "parentUuid", "message"))


def sniff(head: Head) -> bool:
    """Whether a log's head is a Claude Code transcript: one of its first lines is a Claude Code record."""
    return head.record is not None and looks_like(head.record)


def session_files(files: Iterable[Path]) -> dict[tuple[str, str], list[tuple[str, Path]]]:
    """Group transcript files by session: ``{(session, project folder): [(arm, file), ...]}``, main arm first.

    A session is its file's name within its project folder (subagents under ``<session>/subagents/``),
    so two projects' transcripts of the same name are two sessions (`assemble` renames the second id).
    """
    groups: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    for file in files:
        if file.parent.name == SUBAGENT_DIR and file.parent.parent.name:
            key = (file.parent.parent.name, str(file.parent.parent.parent))
            arm = file.stem[len("agent-"):] if file.stem.startswith("agent-") and len(file.stem) > 6 else file.stem
        else:
            key, arm = (file.stem, str(file.parent)), DEFAULT_ARM
        groups.setdefault(key, []).append((arm, file))
    for arms in groups.values():
        arms.sort(key=lambda pair: (pair[0] != DEFAULT_ARM, pair[0], str(pair[1])))
    return groups


def read(files: Iterable[Path], *, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import transcript files, one finished session at a time (sessions in id order, then by folder)."""
    groups = session_files(files)
    for key in sorted(groups):
        session = key[0]
        builder = SessionBuilder(session)
        sizes: dict[str, int] = {}  # last known size of each file, shared by the session's arms
        for arm, path in groups[key]:
            file_report = report.file(path, FORMAT, session, arm)
            _Reader(builder, arm, sizes, conversation, file_report).read(path)
        yield builder.finish()


def _call_info(tool: str, args: dict) -> dict[str, Any]:
    """The parts of a tool input the event needs (sizes rather than whole bodies)."""
    if tool in ("Read", "Edit", "MultiEdit", "Write"):
        info: dict[str, Any] = {"path": args.get("file_path") if isinstance(args.get("file_path"), str) else ""}
        if tool == "Read":
            info["offset"], info["limit"] = args.get("offset"), args.get("limit")
        elif tool == "Write":
            info["size"], info["lines"] = nbytes(args.get("content")), count_lines(args.get("content"))
        else:
            edits = [args] if tool == "Edit" else args.get("edits")
            info["edits"] = [(nbytes(edit.get("old_string")), nbytes(edit.get("new_string")),
                              count_lines(edit.get("old_string")), count_lines(edit.get("new_string")))
                             for edit in (edits if isinstance(edits, list) else []) if isinstance(edit, dict)]
        return info
    return {}


#: The ``model`` of the messages Claude Code writes itself (API errors, interruptions): no model made them.
SYNTHETIC_MODEL = "<synthetic>"
#: The keys of a ``tool_use`` block that the model's window holds (Claude Code adds its own, ``caller``).
CALL_KEYS = ("type", "id", "name", "input")


def call_size(block: dict) -> int:
    """Bytes of a tool call as the window holds it: its ``tool_use`` block (type, id, name, input) as JSON.

    >>> call_size({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}, "caller": {}})
    76
    """
    return nbytes(json.dumps({key: block[key] for key in CALL_KEYS if key in block}, ensure_ascii=False))


def _patch_counts(patch: object) -> tuple[int, int, int] | None:
    """Lines added, lines removed and the byte change of a structured patch, or None if absent."""
    if not isinstance(patch, list):
        return None
    added = removed = delta = 0
    for hunk in patch:
        for line in (hunk.get("lines") if isinstance(hunk, dict) else None) or []:
            if not isinstance(line, str):
                continue
            if line.startswith("+"):
                added += 1
                delta += nbytes(line)  # the marker's byte stands for the line's newline
            elif line.startswith("-"):
                removed += 1
                delta -= nbytes(line)
    return added, removed, delta


def _apply_edits(original: str, edits: object) -> str | None:
    """The file after applying structured edits (``oldString``/``old_string`` pairs) in order."""
    if not isinstance(edits, list):
        return None
    text = original
    for edit in edits:
        if not isinstance(edit, dict):
            return None
        old = edit.get("oldString", edit.get("old_string"))
        new = edit.get("newString", edit.get("new_string"))
        if not isinstance(old, str) or not isinstance(new, str):
            return None
        replace_all = edit.get("replaceAll", edit.get("replace_all"))
        text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    return text


class _Reader(SessionReader):
    """Reads one transcript file into a session builder."""

    def __init__(self, builder: SessionBuilder, arm: str, sizes: dict[str, int], conversation: bool,
                 report: FileReport) -> None:
        super().__init__(builder, report, conversation, sizes)
        self.file_arm = arm

    def record_arm(self, record: dict) -> int:
        """The arm of a record: the file's, or a subagent's inline in the main file."""
        # older transcripts keep subagent messages inline in the main file, flagged isSidechain
        name = self.file_arm
        if name == DEFAULT_ARM and record.get("isSidechain") is True:
            name = str(record.get("agentId") or "sidechain")
        return self.arm(name)

    def read(self, path: Path) -> None:
        """Read the file's lines into the builder."""
        with reading(path) as fh:
            for number, record in json_lines(fh, self.report):
                if not isinstance(record.get("type"), str):
                    self.report.skip(number)
                    continue
                self.recognised += looks_like(record)
                self.record(number, record)
        self.report.check_recognised(self.recognised, "not a Claude Code transcript (no line is a Claude Code record)")
        self.count_unanswered()
        self.settle_overheads()

    def record(self, number: int, record: dict) -> None:
        """One line of the transcript: a compaction, an assistant message with calls, or their results."""
        kind = record["type"]
        if kind not in ("user", "assistant", "system"):
            return  # bookkeeping (progress, snapshots, queue operations) and record kinds added later
        ts = self.timestamp(record.get("timestamp"))
        if kind == "system":
            if record.get("subtype") == "compact_boundary":
                meta = record.get("compactMetadata") if isinstance(record.get("compactMetadata"), dict) else {}
                arm = self.record_arm(record)
                self.builder.compaction(arm, ts, trigger=meta.get("trigger"), pre_tokens=meta.get("preTokens"))
                if self.conversation:
                    self.open_window(arm, ts, after_compaction=True)
            return
        message = record.get("message")
        if not isinstance(message, dict):
            self.report.skip(number)
            return
        if kind == "assistant":
            self.assistant(number, record, message, ts)
        else:
            self.user(record, message, ts)

    def assistant(self, number: int, record: dict, message: dict, ts: int) -> None:
        """An assistant line: its tool calls (awaiting results) and, with the conversation, its text,
        thinking and calls' inputs, in its message's turn."""
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            self.report.skip(number)
            return
        arm = self.record_arm(record)
        key = str(message.get("id") or record.get("uuid") or f"line {number}")
        usage = message.get("usage")
        counts = ([usage[name] for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                   if usage.get(name) is not None] if isinstance(usage, dict) else [])
        tokens = sum(usage_tokens(count) or 0 for count in counts)
        if any(usage_tokens(count) is None for count in counts) or tokens > MAX_USAGE_TOKENS:
            self.report.skip(number)     # a count that is not one: the line's usage is not used
            tokens = 0

        def turn() -> int:
            """The message's turn, opened when its first event comes."""
            return self.turn(key, arm, ts)

        if self.conversation:
            self.user_turn(arm, ts)               # the window opens before its first call
            self.measure_overhead(arm, tokens)    # the call's input, before its own blocks enter the window
            turn()                                # every call is a turn
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                call_id, tool, args = block.get("id"), block.get("name"), block.get("input")
                if not isinstance(call_id, str) or not isinstance(tool, str):
                    continue
                self.call_input(turn(), tool.lower(), call_size(block), ts)
                info = _call_info(tool, args if isinstance(args, dict) else {})
                self.expect(call_id, self.call(turn(), ts, tool, info))
            elif kind == "text":
                self.message(turn(), "assistant", block.get("text"), ts)
            elif kind == "thinking":
                self.message(turn(), "thinking", block.get("thinking"), ts)
        if tokens and key in self.turns:
            self.builder.set_usage(self.turns[key], tokens)
        if key in self.turns and message.get("model") != SYNTHETIC_MODEL:
            self.set_model(self.turns[key], message.get("model"))

    def user(self, record: dict, message: dict, ts: int) -> None:
        """A user line: the tool results it carries, each matched to its call, and, with the
        conversation, its text (a compaction summary's as ``msg://summary/<n>``)."""
        content = message.get("content")
        role = "summary" if record.get("isCompactSummary") is True else "user"
        if isinstance(content, str):
            if self.keeps_message(content):
                self.user_message(self.record_arm(record), content, ts, role=role)
            return  # a typed prompt
        if not isinstance(content, list):
            return
        results = [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]
        structured = record.get("toolUseResult") if len(results) == 1 else None
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                call = self.answer(block.get("tool_use_id"))
                if call is None:
                    self.report.notes["orphan_result"] += 1
                    continue
                self.result(call, block, structured)
            elif block.get("type") == "text" and self.keeps_message(block.get("text")):
                self.user_message(self.record_arm(record), block["text"], ts, role=role)

    def output(self, call: Call, size: int, *, tool: str | None = None, kind: str = "", text: object = None) -> None:
        """The call's result as an output named after its tool in lower case (``tool://bash/<n>``)."""
        super().output(call, size, tool=call.tool.lower() if tool is None else tool, kind=kind, text=text)

    def result(self, call: Call, block: dict, structured: object) -> None:
        """The event of a call's result, by tool."""
        text = text_of(block.get("content"))
        if block.get("is_error") is True:
            self.failed(call, nbytes(text))
        elif call.tool == "Read":
            self.read_result(call, text, structured)
        elif call.tool in ("Edit", "MultiEdit"):
            self.edit_result(call, text, structured)
        elif call.tool == "Write":
            self.write_result(call, text, structured)
        else:
            self.output(call, nbytes(text), kind=PROSE_TOOLS.get(call.tool, ""))

    def read_result(self, call: Call, text: str, structured: object) -> None:
        """A Read: the file, or the line window it returned, sized by the content."""
        info = call.info
        path = info["path"]
        file = structured.get("file") if isinstance(structured, dict) and structured.get("type") == "text" else None
        if isinstance(file, dict) and isinstance(file.get("content"), str):
            content = file["content"]
            size = nbytes(content)
            first = file.get("startLine") if isinstance(file.get("startLine"), int) else 1
            shown = file.get("numLines") if isinstance(file.get("numLines"), int) else count_lines(content)
            last = first + shown - 1
            total = file.get("totalLines")
            partial = first > 1 or (isinstance(total, int) and last < total)
            path = file.get("filePath") if isinstance(file.get("filePath"), str) else path
        else:  # no structured result: a read with offset or limit counts as partial
            offset, limit = info["offset"], info["limit"]
            numbers = _NUMBERED_LINE.findall(text)
            if numbers:
                body = _NUMBERED_LINE.sub("", text)
                cut = body.find(_REMINDER)
                size = nbytes(body if cut == -1 else body[:cut].rstrip("\n"))
                first, last = int(numbers[0]), int(numbers[-1])
            else:  # an image, a notebook, an empty file: the result text is what came back
                size = nbytes(text)
                first = offset if isinstance(offset, int) and offset > 0 else 1
                last = first + limit - 1 if isinstance(limit, int) and limit > 0 else first
            shown = last - first + 1
            partial = first > 1 or offset is not None or limit is not None
        if not path or shown <= 0:  # no path, or an offset past the end: no file content came back
            self.failed(call, nbytes(text))
            return
        if partial:
            resource = window_id(path, first, last)
        else:
            resource = path
            self.sizes[path] = size
        self.file_event(call, "read", resource, size)

    def edit_result(self, call: Call, text: str, structured: object) -> None:
        """An Edit or MultiEdit, sized by the file after it (computed, else estimated and counted)."""
        info = call.info
        path = info["path"]
        size = lines = None
        if isinstance(structured, dict):
            if isinstance(structured.get("filePath"), str):
                path = structured["filePath"]
            original = structured.get("originalFile", structured.get("originalFileContents"))
            edits = [structured] if call.tool == "Edit" else structured.get("edits")
            if isinstance(original, str):
                after = _apply_edits(original, edits)
                size = None if after is None else nbytes(after)
            elif original is None and "originalFile" in structured and call.tool == "Edit":
                size = nbytes(structured.get("newString"))  # an edit that created the file
            counts = _patch_counts(structured.get("structuredPatch"))
            if counts is not None:
                added, removed, delta = counts
                lines = max(added, removed)
                if size is None and path in self.sizes:
                    size = self.sizes[path] + delta
        if size is None:
            self.report.notes["estimated_size"] += 1
            delta = sum(new - old for old, new, _, _ in info["edits"])
            base = self.sizes.get(path)
            size = base + delta if base is not None else sum(new for _, new, _, _ in info["edits"])
        if lines is None:
            lines = sum(max(old, new) for _, _, old, new in info["edits"])
        if not path:
            self.output(call, 0)
            return
        self.sizes[path] = max(0, size)
        self.file_event(call, "edit", path, max(0, size), lines=lines)
        self.confirmation(call, nbytes(text))

    def write_result(self, call: Call, text: str, structured: object) -> None:
        """A Write, sized by the bytes written."""
        info = call.info
        path, size, lines = info["path"], info["size"], info["lines"]
        if isinstance(structured, dict):
            if isinstance(structured.get("filePath"), str):
                path = structured["filePath"]
            if isinstance(structured.get("content"), str):
                size, lines = nbytes(structured["content"]), count_lines(structured["content"])
        if not path:
            self.output(call, 0)
            return
        self.sizes[path] = size
        self.file_event(call, "write", path, size, lines=lines)
        self.confirmation(call, nbytes(text))
