"""Import OpenHands event logs (an exported JSON array of events, or evaluation ``output.jsonl``).

Inputs:

- ``*.json``: a JSON array of events (a conversation's exported trajectory), read element by
  element; or an object holding the events in ``history`` (or ``events``), read whole. One
  session per file, named after the file.
- ``*.jsonl``: evaluation output, one JSON record per line with the events in ``history``; one
  session per line, named by the record's ``instance_id`` (else ``<file>:<line>``).

Events follow OpenHands' serialisation: ``id``, ``timestamp`` (ISO), ``source`` (``agent``,
``user``, ``environment``); actions carry ``action`` and ``args``, observations carry
``observation``, ``content``, ``extras`` and ``cause`` (the id of the action they answer).

Mapping (DESIGN §2): each agent action that expects an observation is a call; actions of one
model response (``tool_call_metadata.model_response.id``) form one turn, otherwise each is its
own turn. Sizes are UTF-8 bytes.

- ``read`` (and ``edit`` with ``command: view``) -> ``read`` of ``args.path``, size = the
  observation content; a line range (``view_range``, or ``start``/``end`` other than the whole
  file) is the resource ``path#L<first>-<last>``.
- ``edit`` with ``command: create`` -> ``write``; other edits -> ``edit``, size = the file after
  the edit (``extras.new_content``), else estimated (and counted): the last known size plus the
  change, or the observation content.
- ``write`` -> ``write``, size = ``args.content``.
- ``run``, ``run_ipython``, ``browse`` and any other action -> ``output`` ``tool://<action>/<n>``;
  an ``error`` observation for a file action -> ``output`` (counted as a failed call).
- With ``include_messages``: agent ``message`` -> ``message://text/<n>``, ``think`` and the
  ``thought`` of an action -> ``message://thinking/<n>``.
- ``usage_input_tokens`` = ``tool_call_metadata.model_response.usage.prompt_tokens`` when present.

Events that are not JSON objects are skipped and counted; a truncated array ends at the break.
Delegated sub-agents share the stream and are not separated into arms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.errors import TraceError
from traces.importers._jsonstream import json_array_items, json_lines, load_document, open_text
from traces.importers._text import count_lines, iso_ms, nbytes, text_of, window_id
from traces.importers.builder import FinishedSession, SessionBuilder
from traces.importers.report import FileReport, ImportReport
from traces.schema import DEFAULT_ARM

__all__ = ["FORMAT", "SUFFIXES", "read_files", "looks_like_event", "looks_like_record"]

FORMAT = "openhands"
SUFFIXES = (".json", ".jsonl")
#: Agent actions that never get an observation.
NO_OBSERVATION = frozenset({"message", "think", "finish", "reject", "change_agent_state", "null", "system",
                            "recall", "condensation", "condensation_request", "summarize", "delegate_finish"})
#: Observations that answer no agent call.
NOT_RESULTS = frozenset({"agent_state_changed", "null", "recall", "user_rejected", "condense", "think"})
_CAT_N_LINE = re.compile(r"^ *(\d+)\t", re.M)
_EVENT_KEYS = ("action", "observation")


def looks_like_event(obj: object) -> bool:
    """Whether ``obj`` is a serialised OpenHands event."""
    return isinstance(obj, dict) and any(isinstance(obj.get(k), str) for k in _EVENT_KEYS) and (
        "source" in obj or "cause" in obj or "id" in obj) and "role" not in obj


def looks_like_record(obj: object) -> bool:
    """Whether ``obj`` is an OpenHands evaluation record (events in ``history``) or event container."""
    if not isinstance(obj, dict):
        return False
    events = obj.get("history", obj.get("events"))
    return isinstance(events, list) and any(looks_like_event(e) for e in events[:10])


def read_files(files: Iterable[Path], *, include_messages: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import event files, one finished session at a time."""
    for path in sorted(files):
        if path.name.lower().endswith(".jsonl"):
            yield from _read_records(path, include_messages, report)
        else:
            yield _read_document(path, include_messages, report)


def _first_char(path: Path) -> str:
    with open_text(path) as fh:
        while chunk := fh.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[0]
    return ""


def _read_document(path: Path, include_messages: bool, report: ImportReport) -> FinishedSession:
    file_report = report.file(path, FORMAT, path.stem, DEFAULT_ARM)
    session = _Session(path.stem, include_messages, file_report)
    if _first_char(path) == "[":
        with open_text(path) as fh:
            try:
                session.run(json_array_items(fh, file_report))
            except OSError as exc:
                raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    else:
        doc = load_document(path)
        if not looks_like_record(doc):
            raise TraceError(f"{path}: not OpenHands events (expected a JSON array of events, "
                             "or an object with a 'history' list of events)")
        events = doc.get("history", doc.get("events"))
        file_report.records += len(events)
        session.run(enumerate(events))
    if file_report.records and not session.recognised:
        raise TraceError(f"{path}: not OpenHands events (no element has an 'action' or 'observation')")
    return session.finish()


def _read_records(path: Path, include_messages: bool, report: ImportReport) -> Iterator[FinishedSession]:
    file_report = report.file(path, FORMAT, "", DEFAULT_ARM)
    found = 0
    with open_text(path) as fh:
        try:
            for number, record in json_lines(fh, file_report):
                if not looks_like_record(record):
                    file_report.skip(number)
                    continue
                found += 1
                name = str(record.get("instance_id") or f"{path.stem}:{number}")
                session = _Session(name, include_messages, file_report)
                session.run(enumerate(record.get("history", record.get("events"))))
                yield session.finish()
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if file_report.records and not found:
        raise TraceError(f"{path}: not OpenHands evaluation output (no line has a 'history' list of events)")
    file_report.session = f"{found} sessions"


@dataclass(slots=True)
class _Call:
    turn: int
    slot: int
    ts: int
    action: str
    args: dict[str, Any]


def _diff_lines(diff: object) -> int | None:
    """The larger of lines added and lines removed in a unified diff, or None without one."""
    if not isinstance(diff, str) or not diff:
        return None
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return max(added, removed)


class _Session:
    """Turns one session's events into trace events."""

    def __init__(self, name: str, include_messages: bool, report: FileReport) -> None:
        self.builder = SessionBuilder(name)
        self.arm = self.builder.add_arm(DEFAULT_ARM)
        self.include_messages = include_messages
        self.report = report
        self.pending: dict[object, _Call] = {}
        self.turns: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.last_ts = 0
        self.recognised = 0

    def run(self, events: Iterable[tuple[int, object]]) -> None:
        for index, event in events:
            if not looks_like_event(event):
                self.report.skip(index)
                continue
            self.recognised += 1
            if isinstance(event.get("action"), str):
                self.action(index, event)
            else:
                self.observation(event)

    def finish(self) -> FinishedSession:
        if self.pending:
            self.report.notes["no_result"] += len(self.pending)
        return self.builder.finish()

    def timestamp(self, event: dict) -> int:
        ts = iso_ms(event.get("timestamp"))
        if ts is None:
            self.report.notes["missing_timestamp"] += 1
            return self.last_ts
        self.last_ts = ts
        return ts

    def turn(self, index: int, event: dict, ts: int) -> int:
        meta = event.get("tool_call_metadata")
        response = meta.get("model_response") if isinstance(meta, dict) else None
        key = f"event {event.get('id', index)}"
        if isinstance(response, dict) and response.get("id"):
            key = f"response {response['id']}"
        if key not in self.turns:
            self.turns[key] = self.builder.new_turn(self.arm, ts)
            usage = response.get("usage") if isinstance(response, dict) else None
            if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
                self.builder.set_usage(self.turns[key], usage["prompt_tokens"])
        return self.turns[key]

    def action(self, index: int, event: dict) -> None:
        if event.get("source") != "agent":
            return
        kind = event["action"]
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        ts = self.timestamp(event)
        if kind in NO_OBSERVATION:
            if self.include_messages and kind in ("message", "think"):
                text = args.get("content") if kind == "message" else args.get("thought")
                if isinstance(text, str) and text:
                    path = "message://text/" if kind == "message" else "message://thinking/"
                    self.builder.add(self.turn(index, event, ts), "output", path, nbytes(text), ts, numbered=True)
            return
        turn = self.turn(index, event, ts)
        thought = args.get("thought")
        if self.include_messages and isinstance(thought, str) and thought:
            self.builder.add(turn, "output", "message://thinking/", nbytes(thought), ts, numbered=True)
        self.pending[event.get("id", index)] = _Call(turn, self.builder.reserve(), ts, kind, args)

    def observation(self, event: dict) -> None:
        call = self.pending.pop(event.get("cause"), None)
        if call is None:
            if event["observation"] not in NOT_RESULTS and event.get("cause") is not None:
                self.report.notes["orphan_result"] += 1
            return
        content = text_of(event.get("content"))
        extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
        args = call.args
        command = args.get("command") if isinstance(args.get("command"), str) else ""
        file_call = call.action in ("read", "edit", "write")
        if file_call and event["observation"] == "error":
            self.report.notes["failed_call"] += 1
            self.output(call, content)
            return
        path = args.get("path") if isinstance(args.get("path"), str) else extras.get("path")
        if file_call and not isinstance(path, str):
            self.output(call, content)
        elif call.action == "read" or (call.action == "edit" and command == "view"):
            self.read(call, path, content)
        elif call.action == "edit":
            self.edit(call, path, command, content, extras)
        elif call.action == "write":
            body = args.get("content")
            self.sizes[path] = nbytes(body)
            self.builder.add(call.turn, "write", path, nbytes(body), call.ts, lines=count_lines(body), slot=call.slot)
        else:
            self.output(call, content)

    def output(self, call: _Call, content: str) -> None:
        self.builder.add(call.turn, "output", f"tool://{call.action}/", nbytes(content), call.ts,
                         numbered=True, slot=call.slot)

    def read(self, call: _Call, path: str, content: str) -> None:
        args = call.args
        size = nbytes(content)
        view_range = args.get("view_range")
        first = last = None
        if isinstance(view_range, list) and len(view_range) == 2 and all(isinstance(v, int) for v in view_range):
            first, last = view_range
        else:
            start, end = args.get("start", 0), args.get("end", -1)
            if isinstance(start, int) and isinstance(end, int) and (start > 0 or end != -1):
                first, last = start + 1, end  # 0-based start, exclusive end
        if first is None:
            self.sizes[path] = size
            self.builder.add(call.turn, "read", path, size, call.ts, slot=call.slot)
            return
        if last == -1:
            numbers = _CAT_N_LINE.findall(content)
            last = int(numbers[-1]) if numbers else first + max(count_lines(content), 1) - 1
        self.builder.add(call.turn, "read", window_id(path, max(first, 1), max(last, first, 1)), size, call.ts,
                         slot=call.slot)

    def edit(self, call: _Call, path: str, command: str, content: str, extras: dict) -> None:
        args = call.args
        new_content = extras.get("new_content")
        if command == "create":
            body = new_content if isinstance(new_content, str) else args.get("file_text")
            size = nbytes(body) if isinstance(body, str) else nbytes(content)
            self.sizes[path] = size
            self.builder.add(call.turn, "write", path, size, call.ts, lines=count_lines(body), slot=call.slot)
            return
        old, new = args.get("old_str"), args.get("new_str")
        if isinstance(new_content, str):
            size = nbytes(new_content)
        else:
            self.report.notes["estimated_size"] += 1
            if path in self.sizes and isinstance(new, str) and command in ("str_replace", "insert"):
                size = self.sizes[path] + nbytes(new) - nbytes(old)
            else:
                size = nbytes(content)
        lines = _diff_lines(extras.get("diff"))
        if lines is None:
            lines = max(count_lines(old), count_lines(new)) if (old or new) else count_lines(args.get("content"))
        self.sizes[path] = size
        self.builder.add(call.turn, "edit", path, size, call.ts, lines=lines, slot=call.slot)
