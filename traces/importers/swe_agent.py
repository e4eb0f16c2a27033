"""Import SWE-agent trajectories (``*.traj``) as traces; each file is one session, read whole.

A ``.traj`` file is a single JSON document, so it is parsed at once (trajectories are small:
one record per step). Steps come from its ``trajectory`` list (``action``, ``observation``,
``state``), or, when that is absent or empty, from its ``history`` (each assistant ``action``
paired with the observation message that follows; demonstrations are skipped).

Mapping (docs/design.md §2), one turn per step, sizes = UTF-8 bytes of the observation text:

- File views (``open``, ``goto``, ``scroll_up``, ``scroll_down``) -> ``read`` of the window the
  observation shows: ``path#L<first>-<last>`` from its ``[File: path (N lines total)]`` header and
  numbered lines, or ``path`` when all N lines are shown. ``str_replace_editor view`` -> ``read``
  of ``path`` (``path#L<a>-<b>`` with ``--view_range``); a directory listing is an output.
- ``edit`` (windowed) -> ``edit`` of the window shown after the edit; ``str_replace_editor
  str_replace``/``insert``/``undo_edit`` -> ``edit`` of ``path``, size estimated (and counted):
  the last full view of the file plus the change, else the observation.
- ``create`` -> ``write`` of the new file; ``str_replace_editor create`` -> ``write`` sized by
  its ``--file_text`` when present.
- A rejected edit or a view that found no file -> ``output`` (counted as failed calls); any other
  command -> ``output`` ``tool://<command>/<n>``, where shell commands are ``tool://bash/<n>``.
- The conversation (unless ``conversation=False``): the history's system prompt and
  demonstrations -> one ``overhead`` event ``overhead://system`` of their bytes (without a
  history: `traces.tokens.DEFAULT_OVERHEAD_TOKENS`, counted), the task (the first user message)
  -> ``message`` ``msg://user/<n>``; per step, the thought -> ``msg://assistant/<n>`` and the
  action -> ``call`` ``call://<command>/<n>`` (the command as the model wrote it); what a
  ``str_replace_editor`` edit or create showed -> ``output`` ``tool://str_replace_editor/<n>``
  beside the file event. Trajectories record tokens per session only, so turns have no usage.

Relative paths are resolved against the working directory (``state.working_dir`` or the
observation's ``(Current directory: ...)`` line). SWE-agent records no timestamps: step ``i`` gets
``ts_ms = i * 1000`` (synthetic, one second per step; counted in the report).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbench.traces import safejson
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers._jsonstream import load_document
from ctxbench.traces.importers._text import count_lines, nbytes, text_of, window_id
from ctxbench.traces.importers.builder import Call, FinishedSession, SessionBuilder, SessionReader
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from ctxbench.traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "STEP_MS", "sniff", "read", "looks_like"]

FORMAT = "swe-agent"
LABEL = "SWE-agent"
KIND = "a SWE-agent trajectory"
SUFFIXES = (".traj",)
HELP = """\
SWE-agent trajectories (*.traj): file views become reads of the viewed window,
edits/creates edits/writes, everything else outputs; with the conversation, the
history's system prompt and demonstrations are the overhead. Timestamps are
synthetic (one second per step)."""
STEP_MS = 1000
VIEWS = frozenset({"open", "goto", "scroll_up", "scroll_down"})
#: SWE-agent's own commands keep their name as output resource; anything else ran in the shell.
TOOLS = frozenset({"find_file", "search_dir", "search_file", "submit", "filemap", "str_replace_editor",
                   "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "undo_edit"})
EDIT_FAILED = ("Your proposed edit has introduced", "Your changes have NOT been applied", "No file open",
               "No replacement was performed", "Usage: edit")
_HEADER = re.compile(r"^\[File: (.+?) \((\d+) lines total\)\]\s*$", re.M)
_WINDOW_LINE = re.compile(r"^(\d+):", re.M)
_CAT_N_LINE = re.compile(r"^ *(\d+)\t", re.M)
_CWD = re.compile(r"^\(Current directory: (.+?)\)\s*$", re.M)
_LINE_EDIT = re.compile(r"^edit\s+(\d+):(\d+)\s*$")
#: Keys that start a trajectory's steps, for a head too large to parse.
_TRAJECTORY_KEY = re.compile(r'"trajectory"\s*:\s*\[')
_HISTORY_KEY = re.compile(r'"history"\s*:\s*\[\s*\{\s*"(?:role|agent|content|message_type)"')


def looks_like(doc: object) -> bool:
    """Whether a parsed JSON document is a SWE-agent trajectory."""
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("trajectory"), list):
        return True
    history = doc.get("history")
    return isinstance(history, list) and any(isinstance(message, dict) and "role" in message for message in history[:5])


def sniff(head: Head) -> bool:
    """Whether a log's head is a SWE-agent trajectory: a JSON object with its steps, parsed or by their keys."""
    if head.record is not None:
        return looks_like(head.record)
    return head.text.startswith("{") and bool(_TRAJECTORY_KEY.search(head.text) or _HISTORY_KEY.search(head.text))


@dataclass(slots=True)
class _Step:
    """One step: the action, what it showed, the thought before it, the state after."""
    action: str
    observation: str
    thought: str
    state: dict


def _state(value: object) -> dict:
    """A step's state: an object, or JSON text of one; {} for anything else."""
    if isinstance(value, str):
        try:
            value = safejson.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _steps(doc: dict, report: FileReport) -> list[_Step]:
    """The (action, observation) steps of a trajectory, counting malformed records."""
    steps: list[_Step] = []
    trajectory = doc.get("trajectory")
    if isinstance(trajectory, list) and trajectory:
        for index, record in enumerate(trajectory):
            report.records += 1
            if not isinstance(record, dict) or not isinstance(record.get("action"), str):
                report.skip(index)
                continue
            thought = record.get("thought") if isinstance(record.get("thought"), str) else ""
            steps.append(_Step(record["action"], text_of(record.get("observation")), thought,
                               _state(record.get("state"))))
        return steps
    pending: _Step | None = None
    history = doc.get("history") or []
    for index, message in enumerate(history if isinstance(history, list) else [history]):  # not a list: one bad record
        report.records += 1
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            report.skip(index)
            continue
        if message.get("is_demo"):
            continue
        if message["role"] == "assistant" and isinstance(message.get("action"), str):
            if pending is not None:
                report.notes["no_result"] += 1
            thought = message.get("thought") if isinstance(message.get("thought"), str) else ""
            pending = _Step(message["action"], "", thought, {})
        elif message["role"] in ("user", "tool") and pending is not None:
            pending.observation = text_of(message.get("content"))
            steps.append(pending)
            pending = None
    if pending is not None:
        report.notes["no_result"] += 1
    return steps


def _split(command: str) -> list[str]:
    """The words of a command as a shell would split them."""
    try:
        return shlex.split(command)
    except ValueError:  # unbalanced quotes: the first line, split on blanks, is enough
        return command.split("\n", 1)[0].split()


def _window(text: str) -> tuple[str, int, int, int] | None:
    """``(path, total, first, last)`` of the last ``[File: ...]`` window in an observation."""
    text = text.replace("\r", "")
    headers = list(_HEADER.finditer(text))
    if not headers:
        return None
    header = headers[-1]
    total = int(header.group(2))
    first = last = None
    for match in _WINDOW_LINE.finditer(text, header.end()):
        number = int(match.group(1))
        if first is None:
            first = last = number
        elif number == last + 1:
            last = number
        else:
            break
    if first is None:
        first, last = 1, total
    return header.group(1).strip(), total, first, last


def _option(tokens: list[str], name: str, count: int) -> list[str] | None:
    """The ``count`` values after option ``name``, or None when it is absent or short."""
    if name in tokens:
        at = tokens.index(name)
        values = tokens[at + 1:at + 1 + count]
        return values if len(values) == count else None
    return None


def _preamble(doc: dict) -> tuple[int | None, str | None]:
    """What a trajectory's history shows before the first step: the bytes of its system prompt and
    demonstrations (None without any) and the task, its first user message (None without one)."""
    history = doc.get("history")
    if not isinstance(history, list):
        return None, None
    fixed: int | None = None
    for message in history:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "system" or message.get("is_demo"):
            fixed = (fixed or 0) + nbytes(text_of(message.get("content")))
        elif message.get("role") == "user":
            return fixed, text_of(message.get("content"))
        elif message.get("role") == "assistant":
            break
    return fixed, None


def _configured_model(doc: dict) -> object:
    """The model the run's configuration names (``replay_config``, a JSON text or object: ``agent.model.name``), or None."""
    config = doc.get("replay_config")
    if isinstance(config, str):
        try:
            config = safejson.loads(config)
        except ValueError:
            return None
    for key in ("agent", "model", "name"):
        config = config.get(key) if isinstance(config, dict) else None
    return config


def read(files: Iterable[Path], *, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import trajectory files, one finished session per file (file name without suffix as id)."""
    for path in sorted(files):
        doc = load_document(path)
        if not looks_like(doc):
            raise TraceError(f"{path}: not a SWE-agent trajectory (no 'trajectory' or 'history' list)")
        file_report = report.file(path, FORMAT, path.stem, DEFAULT_ARM)
        reader = _Session(path.stem, conversation, file_report)
        reader.use_model(_configured_model(doc))
        yield reader.run(_steps(doc, file_report), *_preamble(doc))


class _Session(SessionReader):
    """Turns the steps of one trajectory into events: each step a turn, its action a call answered at once."""

    def __init__(self, session: str, conversation: bool, report: FileReport) -> None:
        super().__init__(SessionBuilder(session), report, conversation)
        self.main = self.arm()
        self.cwd = ""

    def resolve(self, path: str) -> str:
        """``path`` made absolute against the working directory, when one is known."""
        if self.cwd and not path.startswith("/"):
            return posixpath.normpath(posixpath.join(self.cwd, path))
        return path

    def run(self, steps: list[_Step], fixed: int | None = None, task: str | None = None) -> FinishedSession:
        """The session of ``steps``, with synthetic timestamps (counted); with the conversation, its
        window opens with the ``fixed`` prompt's bytes as overhead and the ``task``."""
        if self.conversation:
            self.open_window(self.main, 0)
            if fixed is not None:
                self.set_overhead(self.main, fixed)
            self.user_message(self.main, task, 0)
        for index, step in enumerate(steps):
            self.step(index, step)
        if steps:
            self.report.notes["synthetic_timestamps"] += len(steps)
        return self.finish()

    def step(self, index: int, step: _Step) -> None:
        """The events of one step: its thought, then its action's result."""
        ts = index * STEP_MS
        turn = self.new_turn(self.main, ts)
        if isinstance(step.state.get("working_dir"), str) and step.state["working_dir"]:
            self.cwd = step.state["working_dir"]
        elif found := _CWD.findall(step.observation.replace("\r", "")):
            self.cwd = found[-1].strip()
        self.message(turn, "assistant", step.thought, ts)
        action = step.action.strip()
        first_line = action.split("\n", 1)[0]
        name = first_line.split(" ", 1)[0] if first_line else ""
        tool = name if name in TOOLS else "bash"
        self.call_input(turn, tool, nbytes(step.action), ts, text=step.action)
        call = self.call(turn, ts, tool)
        obs, size = step.observation, nbytes(step.observation)
        if name in VIEWS or name == "create":
            self.windowed(call, obs, size)
        elif name == "edit":
            self.windowed_edit(call, action, obs, size)
        elif name == "str_replace_editor":
            self.editor(call, _split(action), obs, size)
        else:
            self.output(call, size, text=obs)

    def resource(self, window: tuple[str, int, int, int]) -> tuple[str, bool]:
        """The resource a window shows (its file, or the line range), and whether it is the whole file."""
        path, total, first, last = window
        path = self.resolve(path)
        whole = first <= 1 and last >= total
        return (path if whole else window_id(path, first, last)), whole

    def windowed(self, call: Call, obs: str, size: int) -> None:
        """A file view (``open``, ``goto``, scrolling) or ``create``: the window the observation shows."""
        window = _window(obs)
        if window is None:
            self.failed(call, size, text=obs)
            return
        resource, whole = self.resource(window)
        if whole:
            self.sizes[resource] = size
        if call.tool == "create" and not obs.lstrip().startswith("Error"):  # else it showed an existing file
            self.file_event(call, "write", resource, size, lines=window[1], text=obs)
        else:
            self.file_event(call, "read", resource, size, text=obs)

    def windowed_edit(self, call: Call, action: str, obs: str, size: int) -> None:
        """A windowed ``edit``: an edit of the window shown after it."""
        window = _window(obs)
        if window is None or any(marker in obs for marker in EDIT_FAILED):
            self.failed(call, size, text=obs)
            return
        resource, whole = self.resource(window)
        if whole:
            self.sizes[resource] = size
        first_line, _, body = action.partition("\n")
        if match := _LINE_EDIT.match(first_line.strip()):
            replaced = int(match.group(2)) - int(match.group(1)) + 1
            written = count_lines(body.rsplit("end_of_edit", 1)[0])
            lines = max(replaced, written)
        else:  # edit 'search' 'replace' [replace_all]
            tokens = _split(action)
            lines = max((count_lines(token) for token in tokens[1:3]), default=0)
        self.file_event(call, "edit", resource, size, lines=lines, text=obs)

    def editor(self, call: Call, tokens: list[str], obs: str, size: int) -> None:
        """A ``str_replace_editor`` command: view, create or edit of a file."""
        command = tokens[1] if len(tokens) > 1 else ""
        if len(tokens) < 3:
            self.failed(call, size, text=obs)
            return
        path = self.resolve(tokens[2])
        if command == "view":
            if "result of running `cat -n`" not in obs:  # a directory listing or an error
                if "files and directories" not in obs:
                    self.report.notes["failed_call"] += 1
                self.output(call, size, text=obs)
                return
            view_range = _option(tokens, "--view_range", 2)
            if view_range and all(line.lstrip("-").isdigit() for line in view_range):
                first, last = int(view_range[0]), int(view_range[1])
                if last == -1:
                    numbers = _CAT_N_LINE.findall(obs.replace("\r", ""))
                    last = int(numbers[-1]) if numbers else first
                self.file_event(call, "read", window_id(path, first, last), size, text=obs)
            else:
                self.sizes[path] = size
                self.file_event(call, "read", path, size, text=obs)
        elif command == "create":
            if not obs.startswith("File created successfully"):
                self.failed(call, size, text=obs)
                return
            text = _option(tokens, "--file_text", 1)
            written = nbytes(text[0]) if text else size
            self.sizes[path] = written
            self.file_event(call, "write", path, written, lines=count_lines(text[0]) if text else 0)
            self.confirmation(call, size, text=obs)
        elif command in ("str_replace", "insert", "undo_edit"):
            if "has been edited" not in obs and "undone successfully" not in obs:
                self.failed(call, size, text=obs)
                return
            old = (_option(tokens, "--old_str", 1) or [""])[0]
            new = (_option(tokens, "--new_str", 1) or [""])[0]
            self.report.notes["estimated_size"] += 1  # the log never shows the whole file after the edit
            if path in self.sizes and command != "undo_edit":
                new_size = self.sizes[path] + nbytes(new) - nbytes(old)
            else:
                new_size = size
            self.sizes[path] = new_size
            self.file_event(call, "edit", path, new_size, lines=max(count_lines(old), count_lines(new)))
            self.confirmation(call, size, text=obs)
        else:
            self.output(call, size, text=obs)
