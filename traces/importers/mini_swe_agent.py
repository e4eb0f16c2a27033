"""Import mini-swe-agent trajectories (``*.traj.json``) as traces; each file is one session, read whole.

A trajectory is one JSON object: ``info`` (the agent's configuration, ``model_stats``, the exit
status), ``messages`` (the chat as sent to the model) and ``trajectory_format``
(``mini-swe-agent-1``). The agent has one tool, bash: every action is one shell command, either a
function call (``tool_calls`` of ``bash`` with ``{"command": ...}``, answered by a ``tool`` message
naming its ``tool_call_id``) or, in the text format, a fenced ```` ```bash ```` block answered by the
next ``user`` message. An answer reads ``<returncode>N</returncode>`` then ``<output>...</output>``;
an output over 10,000 characters is cut by the agent to its head and tail with a warning, and that
cut text is what the model saw. Assistant messages carry the model's response in ``extra.response``
with its ``usage`` (``prompt_tokens``, cached tokens in ``prompt_tokens_details``) and
``extra.timestamp`` (epoch seconds).

Mapping (docs/design.md §2): each assistant message is a turn (a call to the model) and each of its
commands a call; sizes are UTF-8 bytes of the answer as the model saw it.

- Reads, where the command alone says which file and which lines: ``cat FILE``, ``nl [-ba] FILE``
  (the file), ``sed -n 'A,Bp' FILE`` and ``nl -ba FILE | sed -n 'A,Bp'`` (``FILE#LA-B``), ``head
  [-n] N FILE`` (``FILE#L1-N``); a leading ``cd DIR &&`` sets the directory relative paths resolve
  against and a trailing ``2>&1`` is ignored.
- Writes and edits: ``cat > FILE << 'EOF'`` -> ``write`` of the here-document's bytes; ``cat >>
  FILE << 'EOF'`` and ``sed -i ... FILE`` -> ``edit`` of ``FILE``, its size estimated (and counted):
  the last known size plus what was appended, else the answer.
- A command that failed (non-zero return code), a read the agent cut to head and tail (counted),
  and every other command -> ``output`` ``tool://bash/<n>``.
- The conversation (unless ``conversation=False``): the system message is the overhead (with the
  tool definitions the log does not hold: measured from the first call's ``prompt_tokens``, less the
  content before it); the task (the first user message) -> ``message`` ``msg://user/<n>``; the
  assistant's text -> ``msg://assistant/<n>``, its ``reasoning_content`` -> ``msg://thinking/<n>``;
  each command -> ``call`` ``call://bash/<n>``. Each call's ``prompt_tokens`` go to
  ``usage_input_tokens``.

What the recorded input tokens hold beyond the messages' bytes: the first call's ``prompt_tokens`` less its
content is the overhead (the tool's definition); after it, each step (an assistant message with its tool call
and the tool's answer) grows ``prompt_tokens`` by its bytes at about 4.3-4.7 bytes per token plus about 80
tokens a step (least squares on the two bundled trajectories: 84 and 81), the chat template's framing of the
call and the tool message, which the trajectory does not record. The deepseek family's one ratio for every
kind (3.66 bytes per token, `traces.model_ratios`) counts that framing in with the bytes: the bundled
trajectories replay at 1.019 and 0.980 of their recorded input tokens (Pearson 0.9997 and 0.9994; a test holds
each within 0.95-1.05).

Records that are not a message object, or a command that is not a string, are skipped and counted;
a file that is not a JSON object with a ``messages`` list is an error (exit 2), as is a truncated file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbench.traces import safejson
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers._jsonstream import load_document
from ctxbench.traces.importers._shell import ShellCommands
from ctxbench.traces.importers._text import nbytes, text_of
from ctxbench.traces.importers.builder import Call, FinishedSession, SessionBuilder, usage_tokens
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from ctxbench.traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "sniff", "read", "looks_like"]

FORMAT = "mini-swe-agent"
LABEL = "mini-swe-agent"
KIND = "a mini-swe-agent trajectory"
SUFFIXES = (".traj.json",)
HELP = """\
mini-swe-agent trajectories (*.traj.json): each bash command a call; cat, nl,
sed -n 'A,Bp' and head of one named file become reads (of the lines shown),
cat > FILE << EOF a write, cat >> and sed -i edits, everything else outputs.
Each call's prompt_tokens go to usage_input_tokens."""
_FENCE = re.compile(r"```bash\s*\n(.*?)\n```", re.S)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_CUT = ("<output_head>", "elided")          # the agent's own cut of a long output
_MESSAGES_KEY = re.compile(r'"messages"\s*:\s*\[')
_FORMAT_KEY = re.compile(r'"trajectory_format"\s*:\s*"mini-swe-agent')


def looks_like(doc: object) -> bool:
    """Whether a parsed JSON document is a mini-swe-agent trajectory."""
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        return False
    fmt = doc.get("trajectory_format")
    return (isinstance(fmt, str) and fmt.startswith("mini-swe-agent")) or (
        isinstance(doc.get("info"), dict) and "mini_version" in doc["info"])


def sniff(head: Head) -> bool:
    """Whether a log's head is a mini-swe-agent trajectory, parsed or by its keys."""
    if head.record is not None:
        return looks_like(head.record)
    return head.text.startswith("{") and bool(_FORMAT_KEY.search(head.text) or (
        _MESSAGES_KEY.search(head.text) and '"mini_version"' in head.text))


def _commands(message: dict, report: FileReport, index: int) -> list[tuple[object, str]]:
    """``(call id, command)`` of each action in an assistant message: its ``bash`` function calls, else the
    fenced ``bash`` block of the text format (no id: the next user message answers it)."""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        found = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            try:
                parsed = safejson.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError:
                parsed = None
            command = parsed.get("command") if isinstance(parsed, dict) else None
            if not isinstance(command, str):
                report.skip(index)
                continue
            found.append((call.get("id"), command))
        return found
    content = message.get("content")
    blocks = _FENCE.findall(content) if isinstance(content, str) else []
    return [(None, blocks[0])] if blocks else []


def _configured_model(doc: dict) -> object:
    """The model the trajectory's configuration names (``info.config.model.model_name``), or None."""
    node: object = doc
    for key in ("info", "config", "model", "model_name"):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def read(files: Iterable[Path], *, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import trajectory files, one finished session per file (file name without ``.traj.json`` as id)."""
    for path in sorted(files):
        doc = load_document(path)
        if not looks_like(doc):
            raise TraceError(f"{path}: not a mini-swe-agent trajectory (no 'messages' list, no "
                             "'trajectory_format' of mini-swe-agent)")
        name = path.name[:-len(".traj.json")] if path.name.endswith(".traj.json") else path.stem
        session = str(doc.get("instance_id") or name) if isinstance(doc.get("instance_id"), str) else name
        file_report = report.file(path, FORMAT, session, DEFAULT_ARM)
        reader = _Session(session, conversation, file_report)
        reader.use_model(_configured_model(doc))
        yield reader.run(doc["messages"])


class _Session(ShellCommands):
    """Turns the messages of one trajectory into events: each assistant message a turn, each command a call."""

    def __init__(self, session: str, conversation: bool, report: FileReport) -> None:
        super().__init__(SessionBuilder(session), report, conversation)
        self.main = self.arm()
        self.waiting: Call | None = None       # the text format's command, answered by the next user message
        self.commands: dict[int, str] = {}     # id(call) -> its command
        self.system_bytes: int | None = None   # the system message, the overhead when no usage measures it

    def run(self, messages: list) -> FinishedSession:
        """The session of ``messages``."""
        seen_user = False
        for index, message in enumerate(messages):
            self.report.records += 1
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                self.report.skip(index)
                continue
            role = message["role"]
            ts = self._ts(message)
            if role == "system":
                if self.conversation:
                    self.open_window(self.main, ts)
                    self.system_bytes = nbytes(text_of(message.get("content")))
            elif role == "assistant":
                self.assistant(message, ts, index)
            elif role == "tool":
                call = self.answer(message.get("tool_call_id"))
                if call is None:
                    self.report.notes["orphan_result"] += 1
                else:
                    self.result(call, text_of(message.get("content")))
            elif role == "user":
                if self.waiting is not None:
                    self.result(self.waiting, text_of(message.get("content")))
                    self.waiting = None
                elif not seen_user:
                    self.user_message(self.main, message.get("content"), ts)
                seen_user = True
            # "exit" (the submission or the error that ended the run) is not sent to the model
        if self.waiting is not None:
            self.report.notes["no_result"] += 1
        return self.finish()

    def _ts(self, message: dict) -> int:
        """Epoch ms of a message's ``extra.timestamp`` (seconds); the previous one when it has none."""
        extra = message.get("extra")
        value = extra.get("timestamp") if isinstance(extra, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e11:
            self.last_ts = max(self.last_ts, int(value * 1000))
        return self.last_ts

    def assistant(self, message: dict, ts: int, index: int) -> None:
        """One call to the model: its usage, its text and reasoning, and its commands."""
        extra = message.get("extra") if isinstance(message.get("extra"), dict) else {}
        response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        tokens = usage_tokens(usage.get("prompt_tokens"))
        if tokens is None and usage.get("prompt_tokens") is not None:
            self.report.skip(index)   # a count that is not one: the call's usage is not used
        tokens = tokens or 0
        if self.conversation:
            if self.main in self.windows and not self.windows[self.main].settled:
                if tokens:
                    self.measure_overhead(self.main, tokens)
                elif self.system_bytes is not None:
                    self.set_overhead(self.main, self.system_bytes)
        turn = self.new_turn(self.main, ts)
        if tokens:
            self.builder.set_usage(turn, tokens)
        if response.get("model") is not None:
            self.set_model(turn, response["model"])
            self.count_for(response["model"])
        self.message(turn, "thinking", message.get("reasoning_content"), ts)
        self.message(turn, "assistant", message.get("content"), ts)
        for call_id, command in _commands(message, self.report, index):
            self.call_input(turn, "bash", nbytes(command), ts, text=command)
            call = self.call(turn, ts, "bash")
            self.commands[id(call)] = command
            if call_id is None:
                if self.waiting is not None:
                    self.report.notes["no_result"] += 1
                self.waiting = call
            else:
                self.expect(call_id, call)

    def result(self, call: Call, text: str) -> None:
        """A command's answer, mapped by the command (`traces.importers._shell`)."""
        code = _RETURNCODE.search(text)
        self.shell_result(call, self.commands.pop(id(call), ""), text,
                          failed=code is not None and int(code.group(1)) != 0,
                          truncated=any(mark in text for mark in _CUT))
