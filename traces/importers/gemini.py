"""Import Gemini CLI chat recordings (``session-*.json``, ``session-*.jsonl``) as traces; each file is one session.

Gemini CLI records each conversation under ``~/.gemini/tmp/<project>/chats/``: a JSON object
``{sessionId, projectHash, startTime, lastUpdated, messages}`` (or, as JSON lines, a header line with
``sessionId`` followed by one message a line, where a message repeating an ``id`` replaces the earlier
one). A message has ``id``, ``timestamp``, ``type`` and ``content``; ``gemini`` messages (the model's
responses) add ``thoughts`` (``subject``, ``description``), ``tokens`` (``input``, ``output``,
``cached``, ``thoughts``, ``tool``, ``total``), ``model`` and ``toolCalls``, each with ``name``,
``args``, ``status`` and its ``result`` (function responses, as the model saw them). ``info``,
``warning`` and ``error`` messages are shown to the user only and are not read.

Mapping (docs/design.md §2): each ``gemini`` message is a turn (a call to the model) and each of its
tool calls a call; sizes are UTF-8 bytes of what the model saw.

- ``read_file`` -> ``read`` of its file (``FILE#LA-B`` with ``offset``/``limit``); ``write_file`` ->
  ``write`` of ``content``; ``replace`` -> ``edit`` (its size estimated from the last known size and
  the strings replaced, counted; an empty ``old_string`` creates the file: a ``write``);
  ``run_shell_command`` mapped as `traces.importers._shell` maps commands (a non-zero ``Exit Code`` an
  output); a call whose status is not ``success`` an output (counted); every other tool's result
  (``read_many_files``, ``glob``, searches; web results with the kind ``prose``) an ``output``.
- The conversation (unless ``conversation=False``): user messages -> ``msg://user/<n>``; the model's
  text -> ``msg://assistant/<n>``, its thoughts -> ``msg://thinking/<n>``; each call's arguments ->
  ``call://<tool>/<n>``; the fixed overhead (system prompt and tool definitions, which the recording
  does not hold) measured from the first ``tokens.input`` less the content before it. Each response's
  ``tokens.input`` goes to ``usage_input_tokens``. Gemini CLI's chat compression is not recorded in
  the file, so these traces carry no compaction points.

A message that is not an object with a string ``type`` is skipped and counted; a file that is not a
recording (no ``messages`` list, no message line) is an error (exit 2), as is a truncated ``.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers._jsonstream import json_lines, load_document, reading
from ctxbench.traces.importers._shell import ShellCommands
from ctxbench.traces.importers._text import count_lines, nbytes, text_of, window_id
from ctxbench.traces.importers.builder import Call, FinishedSession, SessionBuilder, usage_tokens
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from ctxbench.traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "sniff", "read", "looks_like", "response_text"]

FORMAT = "gemini"
LABEL = "Gemini CLI"
KIND = "a Gemini CLI chat recording"
SUFFIXES = (".json", ".jsonl")
HELP = """\
Gemini CLI chat recordings (session-*.json or .jsonl, as under
~/.gemini/tmp/<project>/chats/): each model response a turn, read_file reads,
write_file writes, replace edits, shell commands mapped as for mini-swe-agent,
everything else outputs. Each response's tokens.input go to usage_input_tokens."""

MESSAGE_TYPES = frozenset({"user", "gemini", "info", "warning", "error"})
_WEB_TOOLS = frozenset({"web_fetch", "google_web_search", "web_search"})
_EXIT = re.compile(r"^Exit Code: (-?\d+)\s*$", re.M)
_CUT = ("Output too long", "[truncated]")
_SESSION_KEYS = re.compile(r'"sessionId"\s*:')
_MESSAGES_KEY = re.compile(r'"messages"\s*:\s*\[')
_PROJECT_KEY = re.compile(r'"projectHash"\s*:')


def looks_like(doc: object) -> bool:
    """Whether a parsed JSON document is a Gemini CLI recording, or its header line."""
    return isinstance(doc, dict) and isinstance(doc.get("sessionId"), str) and "projectHash" in doc


def sniff(head: Head) -> bool:
    """Whether a log's head is a Gemini CLI recording: its object, or its header line, names a session and project."""
    if head.record is not None:
        return looks_like(head.record)
    return head.text.startswith("{") and bool(_SESSION_KEYS.search(head.text) and _PROJECT_KEY.search(head.text))


def response_text(result: object) -> str:
    """What a tool call returned to the model: its function responses' output (or error), or text parts.

    >>> response_text([{"functionResponse": {"name": "read_file", "response": {"output": "x = 1"}}}])
    'x = 1'
    """
    if isinstance(result, str):
        return result
    parts = result if isinstance(result, list) else [result] if isinstance(result, dict) else []
    texts = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        response = part.get("functionResponse", {}).get("response") if isinstance(
            part.get("functionResponse"), dict) else None
        if isinstance(response, dict):
            value = response.get("output", response.get("error", response))
            texts.append(value if isinstance(value, str) else json.dumps(value, sort_keys=True))
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "".join(texts)


def _messages(path: Path, report: FileReport) -> tuple[str | None, list]:
    """The session id and the messages of a recording, either layout."""
    if path.suffix.lower() == ".jsonl":
        header: dict | None = None
        messages: dict[object, object] = {}
        with reading(path) as fh:
            for number, record in json_lines(fh, report):
                if header is None and looks_like(record):
                    header = record
                elif isinstance(record.get("type"), str):
                    key = record.get("id") if isinstance(record.get("id"), str) else ("line", number)
                    messages.pop(key, None)
                    messages[key] = record
                else:
                    report.skip(number)
        if header is None and not messages:
            raise TraceError(f"{path}: not a Gemini CLI chat recording (no header line, no message line)")
        return (header or {}).get("sessionId"), list(messages.values())
    doc = load_document(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        raise TraceError(f"{path}: not a Gemini CLI chat recording (no 'messages' list)")
    return doc.get("sessionId") if isinstance(doc.get("sessionId"), str) else None, doc["messages"]


def read(files: Iterable[Path], *, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import recordings, one finished session per file (its ``sessionId``, else the file name)."""
    from ctxbench.traces.importers.detect import heads   # detect imports the table of formats, which imports this

    seen: dict[str, Path] = {}
    for path in sorted(files):
        if not path.name.startswith("session-") and not any(sniff(head) for head in heads(path)):
            report.ignored.append(str(path))       # logs.json, checkpoints and settings beside the chats
            continue
        file_report = report.file(path, FORMAT, "", DEFAULT_ARM)
        session_id, messages = _messages(path, file_report)
        name = session_id or path.name.split(".")[0]
        if name in seen:
            raise TraceError(f"{path}: session id {name!r} is also the id of {seen[name]}; import them separately")
        seen[name] = path
        file_report.session = name
        yield _Session(name, conversation, file_report).run(messages)


class _Session(ShellCommands):
    """Turns the messages of one recording into events: each response a turn, each tool call a call."""

    def __init__(self, session: str, conversation: bool, report: FileReport) -> None:
        super().__init__(SessionBuilder(session), report, conversation)
        self.main = self.arm()

    def run(self, messages: list) -> FinishedSession:
        """The session of ``messages``."""
        for index, message in enumerate(messages):
            self.report.records += 1
            if not isinstance(message, dict) or message.get("type") not in MESSAGE_TYPES:
                self.report.skip(index)
                continue
            ts = self.timestamp(message.get("timestamp"))
            if message["type"] == "user":
                self.user_message(self.main, text_of(message.get("content")), ts)
            elif message["type"] == "gemini":
                self.response(index, message, ts)
        return self.finish()

    def response(self, index: int, message: dict, ts: int) -> None:
        """One call to the model: its usage, thoughts, text and tool calls with their results."""
        tokens = message.get("tokens")
        used = tokens.get("input") if isinstance(tokens, dict) else None
        if used is not None and usage_tokens(used) is None:
            self.report.skip(index)   # a count that is not one: the response's usage is not used
        used = usage_tokens(used) or 0
        if self.conversation:
            self.user_turn(self.main, ts)
            self.measure_overhead(self.main, used)
        turn = self.new_turn(self.main, ts)
        if used:
            self.builder.set_usage(turn, used)
        self.set_model(turn, message.get("model"))
        thoughts = message.get("thoughts") if isinstance(message.get("thoughts"), list) else []
        self.message(turn, "thinking", "\n".join(
            f"{t.get('subject', '')}\n{t.get('description', '')}".strip() for t in thoughts if isinstance(t, dict)), ts)
        self.message(turn, "assistant", text_of(message.get("content")), ts)
        for call in message.get("toolCalls") or []:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
                self.report.notes["unknown_action"] += 1
                continue
            args = call.get("args") if isinstance(call.get("args"), dict) else {}
            self.call_input(turn, call["name"].lower(), nbytes(json.dumps(args)), ts)
            pending = self.call(turn, ts, call["name"])
            if call.get("result") is None:
                self.report.notes["no_result"] += 1
                continue
            self.result(pending, args, response_text(call["result"]), call.get("status"))

    def result(self, call: Call, args: dict, text: str, status: object) -> None:
        """A tool call's result, read by what the tool is."""
        size, tool = nbytes(text), call.tool
        if status not in (None, "success"):
            self.failed(call, size)
            return
        path = args.get("file_path", args.get("absolute_path"))
        if tool == "read_file" and isinstance(path, str):
            path = self.resolve(path)
            offset, limit = args.get("offset"), args.get("limit")
            if isinstance(offset, int) and isinstance(limit, int) and offset >= 0 and limit >= 1:
                self.file_event(call, "read", window_id(path, offset + 1, offset + limit), size)
            else:
                self.sizes[path] = size
                self.file_event(call, "read", path, size)
        elif tool == "write_file" and isinstance(path, str) and isinstance(args.get("content"), str):
            path = self.resolve(path)
            self.sizes[path] = nbytes(args["content"])
            self.file_event(call, "write", path, nbytes(args["content"]), lines=count_lines(args["content"]))
            self.confirmation(call, size)
        elif tool == "replace" and isinstance(path, str) and isinstance(args.get("new_string"), str):
            path, old, new = self.resolve(path), args.get("old_string"), args["new_string"]
            if not old:
                self.sizes[path] = nbytes(new)
                self.file_event(call, "write", path, nbytes(new), lines=count_lines(new))
                self.confirmation(call, size)
                return
            times = args.get("expected_replacements")
            times = times if isinstance(times, int) and not isinstance(times, bool) and times >= 1 else 1
            delta = times * (nbytes(new) - nbytes(old if isinstance(old, str) else ""))
            lines = max(count_lines(new), count_lines(old) if isinstance(old, str) else 0, 1)
            self.estimated_edit(call, path, delta, lines=lines, answer=size, unknown=max(size, nbytes(new)))
        elif tool == "run_shell_command" and isinstance(args.get("command"), str):
            code = _EXIT.search(text)
            workdir = args.get("directory") if isinstance(args.get("directory"), str) else ""
            self.shell_result(call, args["command"], text, failed=code is not None and int(code.group(1)) != 0,
                              truncated=any(mark in text for mark in _CUT),
                              workdir=self.resolve(workdir) if workdir else "")
        else:
            self.output(call, size, kind="prose" if tool in _WEB_TOOLS else "")
