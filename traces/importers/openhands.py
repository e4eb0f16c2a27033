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

Mapping (docs/design.md §2): each agent action that expects an observation is a call; actions of one
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
from pathlib import Path
from typing import TYPE_CHECKING

from traces.errors import TraceError
from traces.importers._jsonstream import json_array_items, json_lines, load_document, reading
from traces.importers._text import count_lines, nbytes, text_of, window_id
from traces.importers.builder import Call, FinishedSession, SessionBuilder, SessionReader
from traces.importers.report import FileReport, ImportReport
from traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "sniff", "read", "looks_like_event", "looks_like_record"]

FORMAT = "openhands"
LABEL = "OpenHands"
KIND = "OpenHands events"
SUFFIXES = (".json", ".jsonl")
HELP = """\
OpenHands events: an exported JSON array (*.json) or evaluation output
(*.jsonl with a 'history' per line). read/edit/write actions with their
observations; run and other actions become outputs."""
#: Agent actions that never get an observation.
NO_OBSERVATION = frozenset({"message", "think", "finish", "reject", "change_agent_state", "null", "system",
                            "recall", "condensation", "condensation_request", "summarize", "delegate_finish"})
#: Observations that answer no agent call.
NOT_RESULTS = frozenset({"agent_state_changed", "null", "recall", "user_rejected", "condense", "think"})
_CAT_N_LINE = re.compile(r"^ *(\d+)\t", re.M)
_EVENT_KEYS = ("action", "observation")
#: An event's kind and its origin, for a head that does not parse.
_EVENT_KIND = re.compile(r'"(?:action|observation)"\s*:\s*"')
_EVENT_ORIGIN = re.compile(r'"source"\s*:\s*"(?:agent|user|environment)"|"cause"\s*:')


def looks_like_event(obj: object) -> bool:
    """Whether ``obj`` is a serialised OpenHands event."""
    return isinstance(obj, dict) and any(isinstance(obj.get(key), str) for key in _EVENT_KEYS) and (
        "source" in obj or "cause" in obj or "id" in obj) and "role" not in obj


def looks_like_record(obj: object) -> bool:
    """Whether ``obj`` is an OpenHands evaluation record (events in ``history``) or event container."""
    if not isinstance(obj, dict):
        return False
    events = obj.get("history", obj.get("events"))
    return isinstance(events, list) and any(looks_like_event(event) for event in events[:10])


def sniff(head: Head) -> bool:
    """Whether a log's head is OpenHands events: a record holding events, or an array (or history) of them."""
    if head.record is not None:
        return looks_like_record(head.record)
    text = head.text
    if not (text.startswith("[") or text.startswith("{") and '"history"' in text):
        return False
    return bool(_EVENT_KIND.search(text) and _EVENT_ORIGIN.search(text))


def read(files: Iterable[Path], *, include_messages: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import event files, one finished session at a time."""
    for path in sorted(files):
        if path.name.lower().endswith(".jsonl"):
            yield from _read_records(path, include_messages, report)
        else:
            yield _read_document(path, include_messages, report)


def _first_char(path: Path) -> str:
    """The first character of a file that is not blank ("" for a blank file)."""
    with reading(path) as fh:
        while chunk := fh.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[0]
    return ""


def _read_document(path: Path, include_messages: bool, report: ImportReport) -> FinishedSession:
    """The session of one ``.json`` file: an array of events, or an object holding them."""
    file_report = report.file(path, FORMAT, path.stem, DEFAULT_ARM)
    session = _Session(path.stem, include_messages, file_report)
    if _first_char(path) == "[":
        with reading(path) as fh:
            session.run(json_array_items(fh, file_report))
    else:
        doc = load_document(path)
        if not looks_like_record(doc):
            raise TraceError(f"{path}: not OpenHands events (expected a JSON array of events, "
                             "or an object with a 'history' list of events)")
        events = doc.get("history", doc.get("events"))
        file_report.records += len(events)
        session.run(enumerate(events))
    file_report.check_recognised(session.recognised,
                                 "not OpenHands events (no element has an 'action' or 'observation')")
    return session.finish()


def _read_records(path: Path, include_messages: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """The sessions of one evaluation output file, one per line."""
    file_report = report.file(path, FORMAT, "", DEFAULT_ARM)
    found = 0
    with reading(path) as fh:
        for number, record in json_lines(fh, file_report):
            if not looks_like_record(record):
                file_report.skip(number)
                continue
            found += 1
            name = str(record.get("instance_id") or f"{path.stem}:{number}")
            session = _Session(name, include_messages, file_report)
            session.run(enumerate(record.get("history", record.get("events"))))
            yield session.finish()
    file_report.check_recognised(found, "not OpenHands evaluation output (no line has a 'history' list of events)")
    file_report.session = f"{found} sessions"


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


class _Session(SessionReader):
    """Turns one session's events into trace events: agent actions are calls, observations their results."""

    def __init__(self, name: str, include_messages: bool, report: FileReport) -> None:
        super().__init__(SessionBuilder(name), report, include_messages)
        self.main = self.arm()

    def run(self, events: Iterable[tuple[int, object]]) -> None:
        """Read ``(index, event)`` pairs, skipping (and counting) what is not an event."""
        for index, event in events:
            if not looks_like_event(event):
                self.report.skip(index)
                continue
            self.recognised += 1
            if isinstance(event.get("action"), str):
                self.action(index, event)
            else:
                self.observation(event)

    def event_turn(self, index: int, event: dict, ts: int) -> int:
        """The turn of an action: its model response's (with the response's prompt tokens), else its own."""
        meta = event.get("tool_call_metadata")
        response = meta.get("model_response") if isinstance(meta, dict) else None
        key = f"event {event.get('id', index)}"
        if isinstance(response, dict) and response.get("id"):
            key = f"response {response['id']}"
        if key in self.turns:
            return self.turns[key]
        turn = self.turn(key, self.main, ts)
        usage = response.get("usage") if isinstance(response, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            self.builder.set_usage(turn, usage["prompt_tokens"])
        return turn

    def action(self, index: int, event: dict) -> None:
        """An agent action: a call awaiting its observation, or a message when imported."""
        if event.get("source") != "agent":
            return
        kind = event["action"]
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        ts = self.timestamp(event.get("timestamp"))
        if kind in NO_OBSERVATION:
            if kind in ("message", "think"):
                text = args.get("content") if kind == "message" else args.get("thought")
                if self.keeps_message(text):
                    self.message(self.event_turn(index, event, ts), "text" if kind == "message" else "thinking",
                                 text, ts)
            return
        turn = self.event_turn(index, event, ts)
        if self.keeps_message(args.get("thought")):
            self.message(turn, "thinking", args["thought"], ts)
        self.expect(event.get("id", index), self.call(turn, ts, kind, args))

    def observation(self, event: dict) -> None:
        """An observation: the event of the call it answers, by action."""
        call = self.answer(event.get("cause"))
        if call is None:
            if event["observation"] not in NOT_RESULTS and event.get("cause") is not None:
                self.report.notes["orphan_result"] += 1
            return
        content = text_of(event.get("content"))
        extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
        args = call.info
        command = args.get("command") if isinstance(args.get("command"), str) else ""
        file_call = call.tool in ("read", "edit", "write")
        if file_call and event["observation"] == "error":
            self.failed(call, nbytes(content))
            return
        path = args.get("path") if isinstance(args.get("path"), str) else extras.get("path")
        if file_call and not isinstance(path, str):
            self.output(call, nbytes(content))
        elif call.tool == "read" or (call.tool == "edit" and command == "view"):
            self.read(call, path, content)
        elif call.tool == "edit":
            self.edit(call, path, command, content, extras)
        elif call.tool == "write":
            body = args.get("content")
            self.sizes[path] = nbytes(body)
            self.file_event(call, "write", path, nbytes(body), lines=count_lines(body))
        else:
            self.output(call, nbytes(content))

    def read(self, call: Call, path: str, content: str) -> None:
        """A read of ``path``, or of a line range of it."""
        args = call.info
        size = nbytes(content)
        view_range = args.get("view_range")
        first = last = None
        if isinstance(view_range, list) and len(view_range) == 2 and all(isinstance(line, int) for line in view_range):
            first, last = view_range
        else:
            start, end = args.get("start", 0), args.get("end", -1)
            if isinstance(start, int) and isinstance(end, int) and (start > 0 or end != -1):
                first, last = start + 1, end  # 0-based start, exclusive end
        if first is None:
            self.sizes[path] = size
            self.file_event(call, "read", path, size)
            return
        if last == -1:
            numbers = _CAT_N_LINE.findall(content)
            last = int(numbers[-1]) if numbers else first + max(count_lines(content), 1) - 1
        self.file_event(call, "read", window_id(path, max(first, 1), max(last, first, 1)), size)

    def edit(self, call: Call, path: str, command: str, content: str, extras: dict) -> None:
        """An edit of ``path`` (a write when it creates the file), sized by the file after it when known."""
        args = call.info
        new_content = extras.get("new_content")
        if command == "create":
            body = new_content if isinstance(new_content, str) else args.get("file_text")
            size = nbytes(body) if isinstance(body, str) else nbytes(content)
            self.sizes[path] = size
            self.file_event(call, "write", path, size, lines=count_lines(body))
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
        self.file_event(call, "edit", path, size, lines=lines)
