"""Import Codex CLI rollouts (``rollout-*.jsonl``) as traces; each file is one session.

A rollout holds one JSON object a line, ``{"timestamp", "type", "payload"}``. The types read:
``session_meta`` (the session's ``id`` and ``cwd``), ``turn_context`` (the ``cwd`` and ``model`` of
the turns that follow), ``response_item`` (what the model's window holds: ``message`` of role
``user``, ``developer`` or ``assistant``; ``reasoning``; ``function_call``, ``custom_tool_call`` and
``local_shell_call`` with their ``*_output`` by ``call_id``; ``web_search_call``), ``compacted``
(the summary a compaction left, with its ``replacement_history``) and ``event_msg`` of type
``token_count`` (``info.last_token_usage.input_tokens``: the prompt of the call just made). Other
``event_msg`` types repeat what the response items hold (``user_message``, ``agent_message``) or
are bookkeeping, and are not read; so are ``ghost_snapshot`` items (never sent to the model).

Mapping (docs/design.md §2): each call to the model is a turn; it begins with the first item the model
produced after the previous call ended (a ``token_count``, or a tool result or user message the model
has not yet seen) and each of its tool calls is a call; sizes are UTF-8 bytes as the model saw them.

- Shell commands (``shell``, ``container.exec`` and ``local_shell_call`` with an argument list,
  ``["bash", "-lc", SCRIPT]`` read as ``SCRIPT``; ``shell_command`` and ``exec_command`` with a string),
  mapped as `traces.importers._shell` maps them: ``cat``, ``nl``, ``sed -n 'A,Bp'`` and ``head`` of one
  named file are reads, ``cat > FILE << EOF`` a write, ``cat >>`` and ``sed -i`` edits, anything else an
  output. Relative paths resolve against the call's ``workdir``, else the turn's ``cwd``. A command
  that exited non-zero, or whose output Codex cut (``Total output lines``, ``[... omitted``), is an output.
- ``apply_patch`` (a custom tool, a function, or a shell command): ``*** Add File`` -> ``write`` of the
  added lines; ``*** Update File`` -> ``edit`` (its size estimated from the last known size and the lines
  added and removed, counted; ``*** Move to`` renames); ``*** Delete File`` -> counted, no event. A
  patch that failed is an output.
- ``read_file`` -> a read of ``file_path`` (of ``FILE#LA-B`` with ``offset``/``limit``); every other
  tool's result -> ``output`` ``tool://<name>/<n>``.
- The conversation (unless ``conversation=False``): user and developer messages -> ``msg://user/<n>``;
  the model's text -> ``msg://assistant/<n>``, its reasoning summary and text -> ``msg://thinking/<n>``;
  each call's arguments -> ``call://<tool>/<n>``; the fixed overhead (instructions and tool definitions,
  which a rollout does not hold) measured from the first ``token_count``, less the content before it.
  A ``compacted`` record marks a compaction (``compact_before``) and starts a new window holding its
  summary (its ``replacement_history``'s messages when it has one, else its ``message``) as
  ``msg://summary/<n>``.
- Each call's ``input_tokens`` go to ``usage_input_tokens``. A ``token_count`` repeated with the same
  cumulative totals, or coming when no call is open, is counted and not applied.

Lines that are not JSON objects with a string ``type``, and items whose fields have the wrong types,
are skipped and counted; a file with no Codex record at all is an error (exit 2).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxbench.traces import safejson
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers._jsonstream import json_lines, reading
from ctxbench.traces.importers._shell import ShellCommands
from ctxbench.traces.importers._text import count_lines, nbytes, text_of, window_id
from ctxbench.traces.importers.builder import Call, FinishedSession, SessionBuilder, usage_tokens
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from ctxbench.traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "sniff", "read", "looks_like", "parse_patch",
           "exec_output"]

FORMAT = "codex"
LABEL = "Codex CLI"
KIND = "a Codex CLI rollout"
SUFFIXES = (".jsonl",)
HELP = """\
Codex CLI rollouts (rollout-*.jsonl, as under ~/.codex/sessions/YYYY/MM/DD/):
each call to the model a turn; shell reads of one named file (cat, nl,
sed -n 'A,Bp', head) become reads, apply_patch writes and edits, everything
else outputs. Each call's input_tokens (token_count) go to usage_input_tokens;
a compacted record marks the real compaction point."""

RECORD_TYPES = frozenset({"session_meta", "turn_context", "response_item", "compacted", "event_msg"})
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/bin/zsh"})
_SHELL_TOOLS = frozenset({"shell", "container.exec", "shell_command", "exec_command", "local_shell"})
_EXIT = re.compile(r"^(?:Exit code: (-?\d+)|Process exited with code (-?\d+))$", re.M)
_CUT = ("Total output lines:", "[... omitted", "tokens truncated", "chars truncated")
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$")
_MOVE = re.compile(r"^\*\*\* Move to: (.+?)\s*$")
_HEREDOC_PATCH = re.compile(r"^apply_patch\s*<<-?\s*['\"]?(\w+)['\"]?[ \t]*\n(.*)\n\1\s*$", re.S)
_TYPE_KEY = re.compile(r'"type"\s*:\s*"(session_meta|response_item|turn_context)"')
_PAYLOAD_KEY = re.compile(r'"payload"\s*:\s*\{')


#: What a rollout of the ``openai`` provider is counted as until a ``turn_context`` names its model: every
#: model Codex CLI runs there (GPT-5 and its Codex variants, GPT-4.1, o3, o4-mini) has the o200k_base tokenizer.
OPENAI_MODEL = "gpt-5"


def looks_like(record: dict) -> bool:
    """Whether one parsed line looks like a Codex rollout record."""
    return record.get("type") in RECORD_TYPES and isinstance(record.get("payload"), dict)


def sniff(head: Head) -> bool:
    """Whether a log's head is a Codex rollout: one of its first lines is a rollout record."""
    if head.record is not None:
        return looks_like(head.record)
    first = head.text.split("\n", 1)[0]
    return bool(_TYPE_KEY.search(first) and _PAYLOAD_KEY.search(first))


def exec_output(text: str) -> tuple[str, int | None]:
    """The output a shell tool returned, and its exit code when the answer states one.

    Codex wraps it as JSON (``{"output": ..., "metadata": {"exit_code": N}}``) or as text headed
    ``Exit code: N`` / ``Process exited with code N``.

    >>> exec_output('{"output": "hi\\\\n", "metadata": {"exit_code": 1}}')
    ('hi\\n', 1)
    >>> exec_output("Exit code: 0\\nWall time: 0.1 seconds\\nOutput:\\nhi")
    ('hi', 0)
    """
    if text.startswith("{"):
        try:
            value = safejson.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            metadata = value.get("metadata")
            code = metadata.get("exit_code") if isinstance(metadata, dict) else None
            return value["output"], code if isinstance(code, int) and not isinstance(code, bool) else None
    head, marker, body = text.partition("\nOutput:\n")
    match = _EXIT.search(head) if marker else _EXIT.search(text[:200])
    code = None if match is None else int(match.group(1) or match.group(2))
    return (body if marker else text), code


def parse_patch(patch: str) -> list[tuple[str, str, str | None, list[str], list[str]]]:
    """The files a Codex patch changes: ``(action, path, moved_to, added_lines, removed_lines)`` each, in order.

    >>> parse_patch("*** Begin Patch\\n*** Update File: a.py\\n@@\\n-x = 1\\n+x = 2\\n*** End Patch")
    [('Update', 'a.py', None, ['x = 2'], ['x = 1'])]
    """
    files: list[tuple[str, str, str | None, list[str], list[str]]] = []
    for line in patch.splitlines():
        if match := _PATCH_FILE.match(line):
            files.append((match.group(1), match.group(2), None, [], []))
        elif not files or line.startswith("*** End Patch"):
            continue
        elif match := _MOVE.match(line):
            action, path, _, added, removed = files[-1]
            files[-1] = (action, path, match.group(1), added, removed)
        elif line.startswith("+"):
            files[-1][3].append(line[1:])
        elif line.startswith("-") and files[-1][0] == "Update":
            files[-1][4].append(line[1:])
    return files


def _loads(arguments: object) -> dict:
    """A call's arguments as an object: parsed from the JSON string Codex records; {} when they are not one."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = safejson.loads(arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _script(command: object) -> str | None:
    """The shell script of a command as Codex records it: a list (``["bash", "-lc", SCRIPT]`` or argv), or a string."""
    if isinstance(command, str):
        return command
    if isinstance(command, list) and command and all(isinstance(word, str) for word in command):
        if len(command) == 3 and command[0] in _SHELLS and command[1] in ("-lc", "-c"):
            return command[2]
        return shlex.join(command)
    return None


def _patch_of(script: str) -> str | None:
    """The patch of a shell command that runs ``apply_patch`` (with the patch as argument or here-document)."""
    if match := _HEREDOC_PATCH.match(script.strip()):
        return match.group(2)
    words = script.split(None, 1)
    if len(words) == 2 and words[0] == "apply_patch":
        try:
            parts = shlex.split(script)
        except ValueError:
            return None
        return parts[1] if len(parts) == 2 else None
    return None


def read(files: Iterable[Path], *, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import rollout files, one finished session per file (``session_meta``'s id, else the file name)."""
    seen: dict[str, Path] = {}
    for path in sorted(files):
        file_report = report.file(path, FORMAT, "", DEFAULT_ARM)
        session = _Session(path, conversation, file_report)
        finished = session.read()
        if finished.session in seen:
            raise TraceError(f"{path}: session id {finished.session!r} is also the id of {seen[finished.session]}; "
                             "import them separately")
        seen[finished.session] = path
        file_report.session = finished.session
        yield finished


class _Session(ShellCommands):
    """Turns the records of one rollout into events: each call to the model a turn, each tool call a call."""

    def __init__(self, path: Path, conversation: bool, report: FileReport) -> None:
        name = path.stem
        super().__init__(SessionBuilder(name), report, conversation)
        self.path = path
        self.named = False
        self.main = self.arm()
        self.current: int | None = None        # the open call to the model
        self.fed = False                       # whether the model has not yet seen something since it opened
        self.before = 0.0                      # the window's tokens when the open call began
        self.last_totals: object = None        # the cumulative usage of the last token_count applied
        self.calls: dict[int, dict[str, Any]] = {}   # id(call) -> what its result is read by

    def read(self) -> FinishedSession:
        """The session of the file."""
        with reading(self.path) as fh:
            for number, record in json_lines(fh, self.report):
                if not isinstance(record.get("type"), str):
                    self.report.skip(number)
                    continue
                if not looks_like(record):
                    if record["type"] in RECORD_TYPES:
                        self.report.skip(number)
                    else:
                        self.report.notes["unknown_action"] += 1
                    continue
                self.recognised += 1
                self.record(number, record)
        self.report.check_recognised(self.recognised, "not a Codex CLI rollout (no line is a rollout record)")
        return self.finish()

    def record(self, number: int, record: dict) -> None:
        """One line of the rollout."""
        kind, payload = record["type"], record["payload"]
        ts = self.timestamp(record.get("timestamp"))
        if kind == "session_meta":
            if isinstance(payload.get("id"), str) and payload["id"] and not self.named:
                self.builder.session, self.named = payload["id"], True
            if isinstance(payload.get("cwd"), str):
                self.cwd = payload["cwd"]
            if payload.get("model") is not None:
                self.use_model(payload["model"])
            elif payload.get("model_provider") == "openai":
                self.count_for(OPENAI_MODEL)   # its model is named after the first messages, by turn_context
        elif kind == "turn_context":
            if isinstance(payload.get("cwd"), str):
                self.cwd = payload["cwd"]
            if payload.get("model") is not None:
                self.use_model(payload["model"])
        elif kind == "response_item":
            self.item(number, payload, ts)
        elif kind == "compacted":
            self.compacted(payload, ts)
        elif payload.get("type") == "token_count":
            self.token_count(number, payload.get("info"))

    # ----- calls to the model -----------------------------------------------------------------
    def model_turn(self, ts: int) -> int:
        """The open call to the model; a new one when none is open or the last one's results came in."""
        if self.current is None or self.fed:
            if self.conversation:
                self.user_turn(self.main, ts)
            self.before = self.window_tokens(self.main)
            self.current, self.fed = self.new_turn(self.main, ts), False
        return self.current

    def token_count(self, number: int, info: object) -> None:
        """A call's usage: the prompt it sent, applied once to the call it closes."""
        if not isinstance(info, dict):
            return
        last = info.get("last_token_usage")
        tokens = usage_tokens(last.get("input_tokens")) if isinstance(last, dict) else None
        if tokens is None:
            if isinstance(last, dict) and last.get("input_tokens") is not None:
                self.report.skip(number)   # a count that is not one
            return
        totals = json.dumps(info.get("total_token_usage"), sort_keys=True)
        if self.current is None or totals == self.last_totals:
            self.report.notes["repeated_usage"] += 1
            return
        self.last_totals = totals
        if self.conversation:
            self.measure_overhead(self.main, tokens, content_tokens=self.before)
        if tokens:
            self.builder.set_usage(self.current, tokens)
        self.current = None

    def seen_by_model(self) -> None:
        """Something the open call did not see entered the window: the model's next item is a new call."""
        if self.current is not None:
            self.fed = True

    # ----- items --------------------------------------------------------------------------
    def item(self, number: int, item: dict, ts: int) -> None:
        """One response item: a message, reasoning, a tool call or a tool call's result."""
        kind = item.get("type")
        if kind == "message":
            role, text = item.get("role"), text_of(item.get("content"))
            if role == "assistant":
                self.message(self.model_turn(ts), "assistant", text, ts)
            elif role in ("user", "developer", "system"):
                self.user_message(self.main, text, ts)
                self.seen_by_model()
            else:
                self.report.skip(number)
        elif kind == "reasoning":
            parts = [*(item.get("summary") or []), *(item.get("content") or [])] if isinstance(
                item.get("summary") or [], list) and isinstance(item.get("content") or [], list) else []
            self.message(self.model_turn(ts), "thinking", "\n".join(
                part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)), ts)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            self.tool_call(number, item, ts)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self.tool_result(item)
        elif kind == "web_search_call":
            action = json.dumps(item.get("action"))
            self.call_input(self.model_turn(ts), "web_search", nbytes(action), ts, text=action)
        elif kind != "ghost_snapshot":
            self.report.notes["unknown_action"] += 1

    def tool_call(self, number: int, item: dict, ts: int) -> None:
        """A tool call: its input in the window, and how its result will be read."""
        kind, call_id = item["type"], item.get("call_id") or item.get("id")
        if kind == "local_shell_call":
            action = item.get("action") if isinstance(item.get("action"), dict) else {}
            name, raw = "local_shell", json.dumps(action)
            arguments = {"command": action.get("command"), "workdir": action.get("working_directory")}
        else:
            name = item.get("name")
            raw = item.get("arguments") if kind == "function_call" else item.get("input")
            if not isinstance(name, str) or not name or not isinstance(raw, str):
                self.report.skip(number)
                return
            arguments = _loads(raw) if kind == "function_call" else {"input": raw}
        turn = self.model_turn(ts)
        self.call_input(turn, name.lower(), nbytes(raw), ts, text=raw)
        call = self.call(turn, ts, name)
        self.calls[id(call)] = arguments
        self.expect(call_id, call)

    def tool_result(self, item: dict) -> None:
        """A tool call's result, read by what the call was."""
        call = self.answer(item.get("call_id"))
        if call is None:
            self.report.notes["orphan_result"] += 1
            return
        self.seen_by_model()
        output = item.get("output")
        text = output if isinstance(output, str) else text_of(
            output.get("content") if isinstance(output, dict) else output)
        arguments = self.calls.pop(id(call), {})
        workdir = arguments.get("workdir") if isinstance(arguments.get("workdir"), str) else ""
        if call.tool in _SHELL_TOOLS:
            script = _script(arguments.get("command", arguments.get("cmd")))
            if script is None:
                self.output(call, nbytes(text), text=text)
                return
            patch = _patch_of(script)
            if patch is not None:
                self.patch_result(call, patch, text, workdir)
                return
            _, code = exec_output(text)
            self.shell_result(call, script, text, failed=code not in (None, 0),
                              truncated=any(mark in text for mark in _CUT), workdir=workdir)
        elif call.tool == "apply_patch":
            patch = arguments.get("input", arguments.get("patch"))
            if isinstance(patch, str):
                self.patch_result(call, patch, text, workdir)
            else:
                self.output(call, nbytes(text), text=text)
        elif call.tool == "read_file" and isinstance(arguments.get("file_path"), str):
            self.read_file(call, arguments, text)
        else:
            self.output(call, nbytes(text), text=text)

    def patch_result(self, call: Call, patch: str, text: str, workdir: str) -> None:
        """What ``apply_patch`` did: a write or an edit of each file the patch names, unless it failed."""
        _, code = exec_output(text)
        size = nbytes(text)
        if code not in (None, 0) or (code is None and "Success" not in text[:200]):
            self.failed(call, size, text=text)
            return
        changed = parse_patch(patch)
        for action, raw_path, moved_to, added, removed in changed:
            path = self.resolve(raw_path, workdir)
            if action == "Add":
                body = "\n".join(added) + ("\n" if added else "")
                self.sizes[path] = nbytes(body)
                self.file_event(call, "write", path, nbytes(body), lines=count_lines(body), text=body)
            elif action == "Delete":
                self.report.notes["deleted_file"] += 1
                self.sizes.pop(path, None)
            else:
                if moved_to is not None:
                    target = self.resolve(moved_to, workdir)
                    if path in self.sizes:
                        self.sizes[target] = self.sizes.pop(path)
                    path = target
                grown = sum(nbytes(line) + 1 for line in added)
                self.estimated_edit(call, path, grown - sum(nbytes(line) + 1 for line in removed),
                                    lines=max(1, len(added) + len(removed)), answer=size,
                                    unknown=max(size, grown), confirm=False)
        if changed:
            self.confirmation(call, size, text=text)
        else:
            self.output(call, size, text=text)

    def read_file(self, call: Call, arguments: dict, text: str) -> None:
        """``read_file``: the file, or the lines ``offset`` to ``offset + limit - 1`` of it."""
        path, size = self.resolve(arguments["file_path"]), nbytes(text)
        offset, limit = arguments.get("offset"), arguments.get("limit")
        if isinstance(offset, int) and isinstance(limit, int) and offset >= 1 and limit >= 1:
            self.file_event(call, "read", window_id(path, offset, offset + limit - 1), size, text=text)
        else:
            self.sizes[path] = size
            self.file_event(call, "read", path, size, text=text)

    def compacted(self, payload: dict, ts: int) -> None:
        """A compaction: the real compaction point, and a new window holding what it left."""
        self.builder.compaction(self.main, ts, trigger="compact")
        self.current, self.fed = None, False
        if not self.conversation:
            return
        self.open_window(self.main, ts, after_compaction=True)
        history = payload.get("replacement_history")
        if isinstance(history, list) and history:
            for item in history:
                if isinstance(item, dict) and item.get("type") == "message":
                    self.user_message(self.main, text_of(item.get("content")), ts, role="summary")
        else:
            self.user_message(self.main, payload.get("message"), ts, role="summary")
