"""Import Claude Code transcripts (``*.jsonl``, one JSON object per line), streaming, as traces.

Layout: ``<session>.jsonl`` is a session (arm ``main``); ``<session>/subagents/agent-<id>.jsonl``
is the subagent ``<id>`` of that session, imported as arm ``<id>``.

Mapping (DESIGN §2):

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
  (``is_error``) -> ``output`` ``tool://<tool>/<n>``, size = bytes of the result text.
- With ``include_messages``, assistant text and thinking -> ``output`` ``message://text/<n>``
  and ``message://thinking/<n>`` in their message's turn.
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

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.errors import TraceError
from traces.importers._jsonstream import json_lines, open_text
from traces.importers._text import count_lines, iso_ms, nbytes, text_of, window_id
from traces.importers.builder import FinishedSession, SessionBuilder
from traces.importers.report import FileReport, ImportReport
from traces.schema import DEFAULT_ARM

__all__ = ["FORMAT", "SUFFIXES", "session_files", "read_files", "looks_like"]

FORMAT = "claude-code"
SUFFIXES = (".jsonl",)
SUBAGENT_DIR = "subagents"
#: Record types Claude Code writes; a file with none of them is not a transcript.
RECORD_TYPES = frozenset({"user", "assistant", "system", "result"})
BOOKKEEPING_TYPES = frozenset({"summary", "progress", "file-history-snapshot", "queue-operation"})
_NUMBERED_LINE = re.compile(r"^ *(\d+)(?:→|\t)", re.M)
_REMINDER = "<system-reminder>"


def looks_like(record: dict) -> bool:
    """Whether one parsed line looks like a Claude Code transcript record."""
    kind = record.get("type")
    if kind in BOOKKEEPING_TYPES:
        return True
    return kind in RECORD_TYPES and any(k in record for k in ("sessionId", "uuid", "parentUuid", "message"))


def session_files(files: Iterable[Path]) -> dict[str, list[tuple[str, Path]]]:
    """Group transcript files by session: ``{session: [(arm, file), ...]}``, main arm first."""
    groups: dict[str, list[tuple[str, Path]]] = {}
    for f in files:
        if f.parent.name == SUBAGENT_DIR and f.parent.parent.name:
            session = f.parent.parent.name
            arm = f.stem[len("agent-"):] if f.stem.startswith("agent-") and len(f.stem) > 6 else f.stem
        else:
            session, arm = f.stem, DEFAULT_ARM
        groups.setdefault(session, []).append((arm, f))
    for arms in groups.values():
        arms.sort(key=lambda pair: (pair[0] != DEFAULT_ARM, pair[0], str(pair[1])))
    return groups


def read_files(files: Iterable[Path], *, include_messages: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import transcript files, one finished session at a time (sessions in id order)."""
    groups = session_files(files)
    for session in sorted(groups):
        builder = SessionBuilder(session)
        sizes: dict[str, int] = {}  # last known size of each file, shared by the session's arms
        for arm, path in groups[session]:
            file_report = report.file(path, FORMAT, session, arm)
            _Reader(builder, arm, sizes, include_messages, file_report).read(path)
        yield builder.finish()


@dataclass(slots=True)
class _Call:
    """A tool call waiting for its result: where it goes and the parts of its input we need."""

    turn: int
    slot: int
    ts: int
    tool: str
    info: dict[str, Any]


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
            info["edits"] = [(nbytes(e.get("old_string")), nbytes(e.get("new_string")),
                              count_lines(e.get("old_string")), count_lines(e.get("new_string")))
                             for e in (edits if isinstance(edits, list) else []) if isinstance(e, dict)]
        return info
    return {}


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
    for e in edits:
        if not isinstance(e, dict):
            return None
        old = e.get("oldString", e.get("old_string"))
        new = e.get("newString", e.get("new_string"))
        if not isinstance(old, str) or not isinstance(new, str):
            return None
        text = text.replace(old, new) if e.get("replaceAll", e.get("replace_all")) else text.replace(old, new, 1)
    return text


class _Reader:
    """Reads one transcript file into a session builder."""

    def __init__(self, builder: SessionBuilder, arm: str, sizes: dict[str, int], include_messages: bool,
                 report: FileReport) -> None:
        self.builder = builder
        self.sizes = sizes
        self.include_messages = include_messages
        self.report = report
        self.file_arm = arm
        self.arms: dict[str, int] = {}
        self.turns: dict[str, int] = {}
        self.pending: dict[str, _Call] = {}
        self.last_ts = 0

    def arm(self, record: dict) -> int:
        # older transcripts keep subagent messages inline in the main file, flagged isSidechain
        name = self.file_arm
        if name == DEFAULT_ARM and record.get("isSidechain") is True:
            name = str(record.get("agentId") or "sidechain")
        if name not in self.arms:
            self.arms[name] = self.builder.add_arm(name)
        return self.arms[name]

    def read(self, path: Path) -> None:
        recognised = 0
        with open_text(path) as fh:
            try:
                for number, record in json_lines(fh, self.report):
                    if not isinstance(record.get("type"), str):
                        self.report.skip(number)
                        continue
                    recognised += looks_like(record)
                    self.record(number, record)
            except OSError as exc:
                raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if self.report.records and not recognised:
            raise TraceError(f"{path}: not a Claude Code transcript (no line is a Claude Code record)")
        if self.pending:
            self.report.notes["no_result"] += len(self.pending)

    def record(self, number: int, record: dict) -> None:
        kind = record["type"]
        if kind not in ("user", "assistant", "system"):
            return  # bookkeeping (progress, snapshots, queue operations) and record kinds added later
        ts = iso_ms(record.get("timestamp"))
        if ts is None:
            self.report.notes["missing_timestamp"] += 1
            ts = self.last_ts
        self.last_ts = ts
        if kind == "system":
            if record.get("subtype") == "compact_boundary":
                meta = record.get("compactMetadata") if isinstance(record.get("compactMetadata"), dict) else {}
                self.builder.compaction(self.arm(record), ts, trigger=meta.get("trigger"),
                                        pre_tokens=meta.get("preTokens"))
            return
        message = record.get("message")
        if not isinstance(message, dict):
            self.report.skip(number)
            return
        if kind == "assistant":
            self.assistant(number, record, message, ts)
        else:
            self.user(record, message)

    def assistant(self, number: int, record: dict, message: dict, ts: int) -> None:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            self.report.skip(number)
            return
        arm = self.arm(record)
        key = str(message.get("id") or record.get("uuid") or f"line {number}")

        def turn() -> int:
            if key not in self.turns:
                self.turns[key] = self.builder.new_turn(arm, ts)
            return self.turns[key]

        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                call_id, tool, args = block.get("id"), block.get("name"), block.get("input")
                if not isinstance(call_id, str) or not isinstance(tool, str):
                    continue
                self.pending[call_id] = _Call(turn(), self.builder.reserve(), ts, tool,
                                              _call_info(tool, args if isinstance(args, dict) else {}))
            elif kind in ("text", "thinking") and self.include_messages:
                text = block.get(kind)
                if isinstance(text, str) and text:
                    self.builder.add(turn(), "output", f"message://{kind}/", nbytes(text), ts, numbered=True)
        usage = message.get("usage")
        if isinstance(usage, dict) and key in self.turns:
            tokens = sum(v for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                         if isinstance(v := usage.get(k), int))
            self.builder.set_usage(self.turns[key], tokens)

    def user(self, record: dict, message: dict) -> None:
        content = message.get("content")
        if not isinstance(content, list):
            return  # a typed prompt
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        structured = record.get("toolUseResult") if len(results) == 1 else None
        for block in results:
            call = self.pending.pop(block.get("tool_use_id"), None)
            if call is None:
                self.report.notes["orphan_result"] += 1
                continue
            self.result(call, block, structured)

    def output(self, call: _Call, text: str) -> None:
        self.builder.add(call.turn, "output", f"tool://{call.tool.lower()}/", nbytes(text), call.ts,
                         numbered=True, slot=call.slot)

    def result(self, call: _Call, block: dict, structured: object) -> None:
        text = text_of(block.get("content"))
        if block.get("is_error") is True:
            self.report.notes["failed_call"] += 1
            self.output(call, text)
        elif call.tool == "Read":
            self.read_result(call, text, structured)
        elif call.tool in ("Edit", "MultiEdit"):
            self.edit_result(call, structured)
        elif call.tool == "Write":
            self.write_result(call, structured)
        else:
            self.output(call, text)

    def read_result(self, call: _Call, text: str, structured: object) -> None:
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
            self.report.notes["failed_call"] += 1
            self.output(call, text)
            return
        if partial:
            resource = window_id(path, first, last)
        else:
            resource = path
            self.sizes[path] = size
        self.builder.add(call.turn, "read", resource, size, call.ts, slot=call.slot)

    def edit_result(self, call: _Call, structured: object) -> None:
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
            self.output(call, "")
            return
        self.sizes[path] = max(0, size)
        self.builder.add(call.turn, "edit", path, max(0, size), call.ts, lines=lines, slot=call.slot)

    def write_result(self, call: _Call, structured: object) -> None:
        info = call.info
        path, size, lines = info["path"], info["size"], info["lines"]
        if isinstance(structured, dict):
            if isinstance(structured.get("filePath"), str):
                path = structured["filePath"]
            if isinstance(structured.get("content"), str):
                size, lines = nbytes(structured["content"]), count_lines(structured["content"])
        if not path:
            self.output(call, "")
            return
        self.sizes[path] = size
        self.builder.add(call.turn, "write", path, size, call.ts, lines=lines, slot=call.slot)
