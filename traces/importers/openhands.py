"""Import OpenHands event logs: the V0 events (``action``/``observation``) and the V1 agent SDK's
(a ``kind`` discriminator), as an exported array, evaluation ``output.jsonl`` or an SDK conversation.

Inputs:

- ``*.json``: a JSON array of events (a conversation's exported trajectory), read element by
  element; or an object holding the events in ``history`` (or ``events``), read whole. One
  session per file, named after the file.
- ``*.jsonl``: evaluation output, one JSON record per line with the events in ``history``; one
  session per line, named by the record's ``instance_id`` (else ``<file>:<line>``).
- An SDK conversation, ``<id>/events/event-<index>-<event id>.json`` (one V1 event per file, as
  ``~/.openhands/conversations`` holds them): one session named ``<id>``, its events in index
  order; an event file that does not parse is skipped and counted, and the conversation's other
  files (``base_state.json``) are not events (listed as ignored).

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
- The conversation (unless ``conversation=False``): the ``system`` action's prompt and tools ->
  one ``overhead`` event ``overhead://system`` of their bytes (without one: the first
  ``prompt_tokens`` less the content before it, else `traces.tokens.DEFAULT_OVERHEAD_TOKENS`);
  user ``message`` -> ``message`` ``msg://user/<n>``, agent ``message`` and an action's
  ``thought`` -> ``msg://assistant/<n>``, ``think`` -> ``msg://thinking/<n>``; each call's
  input -> ``call`` ``call://<action>/<n>`` (the model response's tool call as JSON, else the
  action's arguments); what an edit or write returned -> ``output`` ``tool://<action>/<n>``
  beside the file event.
- ``usage_input_tokens`` = ``tool_call_metadata.model_response.usage.prompt_tokens`` when present.

V1 events (``kind``): ``SystemPromptEvent`` -> the overhead (its prompt, dynamic context and tool
definitions as JSON); ``MessageEvent`` -> a user or assistant message (its reasoning and thinking
blocks -> ``msg://thinking/<n>``); ``ActionEvent`` -> a call (turns grouped by
``llm_response_id``; its thought, reasoning and input as above), the ``file_editor``
(``str_replace_editor``) tool mapped as the V0 ``edit`` action by its ``command``, any other tool
an output ``tool://<tool_name>/<n>``; ``ObservationEvent`` (by ``tool_call_id``) -> its result
(the observation's ``content`` text, ``new_content`` for the file after an edit),
``AgentErrorEvent`` -> a failed call, ``UserRejectObservation`` -> an output;
``Condensation``'s summary and ``CondensationSummaryEvent`` -> ``msg://summary/<n>`` (counted;
the events a condensation forgot stay in the trace); a ``Condensation`` also marks the next turn
``compact_before`` (the real compaction point `ctxbench fidelity --policy` compares). An SDK
conversation's session id is its folder, or the folder above ``event_service/``. V1 logs record cumulative usage only: no
``usage_input_tokens``. Other kinds (state updates, pauses) are bookkeeping.

Events that are not JSON objects are skipped and counted; a truncated or broken array (or events
file) is refused, naming the element.
Delegated sub-agents share the stream and are not separated into arms.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbench.traces import safejson
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers._jsonstream import json_array_items, json_lines, load_document, reading
from ctxbench.traces.importers._text import count_lines, nbytes, text_of, window_id
from ctxbench.traces.importers.builder import Call, FinishedSession, SessionBuilder, SessionReader, usage_tokens
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.schema import DEFAULT_ARM

if TYPE_CHECKING:
    from ctxbench.traces.importers.detect import Head

__all__ = ["FORMAT", "LABEL", "KIND", "SUFFIXES", "HELP", "sniff", "read", "looks_like_event", "looks_like_v1_event",
           "looks_like_record", "V1_KINDS"]

FORMAT = "openhands"
LABEL = "OpenHands"
KIND = "OpenHands events"
SUFFIXES = (".json", ".jsonl")
HELP = """\
OpenHands events, V0 (action/observation) or V1 agent SDK (kind): an exported
JSON array (*.json), evaluation output (*.jsonl with a 'history' per line), or
an SDK conversation directory (<id>/events/event-*.json). File views, edits and
writes with their observations; other tools become outputs. The system prompt
gives each session's overhead."""
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
#: The V1 SDK's event kinds (its ``kind`` discriminator); the first four mark a log that does not parse.
V1_KINDS = frozenset({"SystemPromptEvent", "MessageEvent", "ActionEvent", "ObservationEvent", "AgentErrorEvent",
                      "UserRejectObservation", "Condensation", "CondensationRequest", "CondensationSummaryEvent",
                      "ConversationStateUpdateEvent", "PauseEvent", "SystemPromptUpdateEvent", "TokenEvent",
                      "ConversationErrorEvent"})
_V1_KIND = re.compile(r'"kind"\s*:\s*"(?:SystemPromptEvent|MessageEvent|ActionEvent|ObservationEvent)"')
#: V1 tools that edit files, read as the V0 ``edit`` action (their ``command`` says view, create, ...).
V1_FILE_TOOLS = frozenset({"file_editor", "str_replace_editor"})
EVENTS_DIR = "events"
SERVICE_DIR = "event_service"   # the agent server keeps a conversation's events under <id>/event_service/
STATE_FILE = "base_state.json"   # an SDK conversation's state beside its events (its agent's LLM names the model)
_EVENT_FILE = re.compile(r"^event-(\d+)")


def looks_like_event(obj: object) -> bool:
    """Whether ``obj`` is a serialised OpenHands event."""
    return isinstance(obj, dict) and any(isinstance(obj.get(key), str) for key in _EVENT_KEYS) and (
        "source" in obj or "cause" in obj or "id" in obj) and "role" not in obj


def looks_like_v1_event(obj: object) -> bool:
    """Whether ``obj`` is a serialised event of the OpenHands V1 agent SDK (a known ``kind``)."""
    return isinstance(obj, dict) and obj.get("kind") in V1_KINDS and (
        "source" in obj or "id" in obj or "timestamp" in obj) and "role" not in obj


def _any_event(obj: object) -> bool:
    return looks_like_event(obj) or looks_like_v1_event(obj)


def looks_like_record(obj: object) -> bool:
    """Whether ``obj`` is an OpenHands evaluation record (events in ``history``) or event container."""
    if not isinstance(obj, dict):
        return False
    events = obj.get("history", obj.get("events"))
    return isinstance(events, list) and any(_any_event(event) for event in events[:10])


def sniff(head: Head) -> bool:
    """Whether a log's head is OpenHands events: a record holding events, one V1 event (an SDK
    conversation's event file), or an array (or history) of events."""
    if head.record is not None:
        return looks_like_record(head.record) or looks_like_v1_event(head.record)
    text = head.text
    if text.startswith("{") and _V1_KIND.search(text):   # one V1 event, cut off or too large to parse
        return True
    if not (text.startswith("[") or text.startswith("{") and '"history"' in text):
        return False
    return bool(_V1_KIND.search(text) or _EVENT_KIND.search(text) and _EVENT_ORIGIN.search(text))


def _event_index(path: Path) -> int | None:
    """The index of an SDK conversation's event file (``events/event-<index>-...json``), or None."""
    match = _EVENT_FILE.match(path.name)
    return int(match.group(1)) if match and path.parent.name == EVENTS_DIR and path.suffix.lower() == ".json" else None


def read(files: Iterable[Path], *, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
    """Import event files, one finished session at a time (an SDK conversation's event files as one)."""
    conversations: dict[Path, list[Path]] = {}
    for path in sorted(files):
        if _event_index(path) is not None:
            conversations.setdefault(path.parent.parent, []).append(path)
        elif (path.parent / EVENTS_DIR).is_dir() and path.suffix.lower() == ".json":
            report.ignored.append(str(path))   # a conversation's state beside its events
        elif path.name.lower().endswith(".jsonl"):
            yield from _read_records(path, conversation, report)
        else:
            yield _read_document(path, conversation, report)
    for directory in sorted(conversations):
        yield _read_conversation(directory, conversations[directory], conversation, report)


def conversation_name(directory: Path) -> str:
    """A conversation's session id: its folder's name, or the folder above for the agent server's
    ``<id>/event_service/events/`` layout.

    >>> conversation_name(Path("convs/1fdca86f/event_service")), conversation_name(Path("convs/abc"))
    ('1fdca86f', 'abc')
    """
    return directory.parent.name if directory.name == SERVICE_DIR and directory.parent.name else directory.name


def _conversation_model(path: Path, report: FileReport) -> object:
    """The model an SDK conversation's state names (``agent.llm.model`` of ``base_state.json``), or None;
    a state file that cannot be read as JSON is counted, and the conversation read without it."""
    if not path.is_file():
        return None
    with reading(path) as fh:
        try:
            node = safejson.loads(fh.read())
        except ValueError:
            report.notes["unreadable_state"] += 1
            return None
    for key in ("agent", "llm", "model"):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _read_conversation(directory: Path, files: list[Path], conversation: bool, report: ImportReport
                       ) -> FinishedSession:
    """The session of an SDK conversation: its event files in index order, one event each."""
    name = conversation_name(directory)
    file_report = report.file(directory / EVENTS_DIR, FORMAT, name, DEFAULT_ARM)
    session = _Session(name, conversation, file_report)
    session.use_model(_conversation_model(directory / STATE_FILE, file_report))

    def events() -> Iterator[tuple[int, object]]:
        for path in sorted(files, key=lambda p: (_event_index(p), p.name)):
            file_report.records += 1
            with reading(path) as fh:
                try:
                    event = safejson.loads(fh.read())
                except ValueError:
                    file_report.skip(_event_index(path))
                    continue
            yield _event_index(path), event

    session.run(events())
    file_report.check_recognised(session.recognised, "not an OpenHands conversation (no event file holds an event)")
    return session.finish()


def _first_char(path: Path) -> str:
    """The first character of a file that is not blank ("" for a blank file)."""
    with reading(path) as fh:
        while chunk := fh.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[0]
    return ""


def _read_document(path: Path, conversation: bool, report: ImportReport) -> FinishedSession:
    """The session of one ``.json`` file: an array of events, an object holding them, or one V1 event."""
    file_report = report.file(path, FORMAT, path.stem, DEFAULT_ARM)
    session = _Session(path.stem, conversation, file_report)
    if _first_char(path) == "[":
        with reading(path) as fh:
            session.run(json_array_items(fh, file_report))
    else:
        doc = load_document(path)
        if looks_like_v1_event(doc):
            events = [doc]
        elif looks_like_record(doc):
            events = doc.get("history", doc.get("events"))
        else:
            raise TraceError(f"{path}: not OpenHands events (expected a JSON array of events, "
                             "or an object with a 'history' list of events)")
        file_report.records += len(events)
        session.run(enumerate(events))
    file_report.check_recognised(session.recognised,
                                 "not OpenHands events (no element has an 'action', an 'observation' or an "
                                 "event 'kind')")
    return session.finish()


def _read_records(path: Path, conversation: bool, report: ImportReport) -> Iterator[FinishedSession]:
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
            session = _Session(name, conversation, file_report)
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


def _texts(content: object) -> str:
    """The text of a V1 content list (TextContent parts) or string."""
    return text_of(content)


def _tool_call_size(meta: object, kind: str, args: dict) -> int:
    """Bytes of a V0 action's tool call as the model produced it: the model response's tool call with
    the action's id as JSON, else the action's name and arguments (its thought left out)."""
    if isinstance(meta, dict):
        response = meta.get("model_response")
        choices = response.get("choices") if isinstance(response, dict) else None
        for choice in choices if isinstance(choices, list) else []:
            message = choice.get("message") if isinstance(choice, dict) else None
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, dict) and call.get("id") == meta.get("tool_call_id"):
                    return nbytes(json.dumps(call, ensure_ascii=False))
    rest = {key: value for key, value in args.items() if key != "thought"}
    return nbytes(json.dumps({"name": kind, "arguments": rest}, ensure_ascii=False, default=str))


class _Session(SessionReader):
    """Turns one session's events into trace events: agent actions are calls, observations their results."""

    def __init__(self, name: str, conversation: bool, report: FileReport) -> None:
        super().__init__(SessionBuilder(name), report, conversation)
        self.main = self.arm()

    def run(self, events: Iterable[tuple[int, object]]) -> None:
        """Read ``(index, event)`` pairs, skipping (and counting) what is not an event."""
        for index, event in events:
            if looks_like_v1_event(event):
                self.recognised += 1
                self.v1_event(index, event)
                continue
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
        usage = response.get("usage") if isinstance(response, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if tokens is not None and usage_tokens(tokens) is None:
            self.report.skip(index)   # a count that is not one: the event's usage is not used
        tokens = usage_tokens(tokens)
        if self.conversation:
            self.user_turn(self.main, ts)
            if isinstance(tokens, int):
                self.measure_overhead(self.main, tokens)   # the call's input, before its own output
        turn = self.turn(key, self.main, ts)
        if isinstance(tokens, int):
            self.builder.set_usage(turn, tokens)
        if isinstance(response, dict) and response.get("model") is not None:
            self.set_model(turn, response["model"])
        return turn

    def action(self, index: int, event: dict) -> None:
        """An agent action: a call awaiting its observation; with the conversation, a message or the
        system prompt (a user's message too)."""
        kind = event["action"]
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        ts = self.timestamp(event.get("timestamp"))
        if event.get("source") != "agent":
            if kind == "message" and event.get("source") == "user":
                self.user_message(self.main, args.get("content"), ts)
            return
        if kind in NO_OBSERVATION:
            if kind == "system" and self.conversation:
                self.user_turn(self.main, ts)
                self.set_overhead(self.main, nbytes(args.get("content"))
                                  + nbytes(json.dumps(args.get("tools") or [], ensure_ascii=False, default=str)))
            elif kind in ("message", "think"):
                text = args.get("content") if kind == "message" else args.get("thought")
                if self.keeps_message(text):
                    self.message(self.event_turn(index, event, ts), "assistant" if kind == "message" else "thinking",
                                 text, ts)
            return
        turn = self.event_turn(index, event, ts)
        self.message(turn, "assistant", args.get("thought"), ts)
        if self.conversation:
            self.call_input(turn, kind, _tool_call_size(event.get("tool_call_metadata"), kind, args), ts)
        self.expect(event.get("id", index), self.call(turn, ts, kind, args))

    def observation(self, event: dict) -> None:
        """An observation: the event of the call it answers, by action."""
        call = self.answer(event.get("cause"))
        if call is None:
            if event["observation"] not in NOT_RESULTS and event.get("cause") is not None:
                self.report.notes["orphan_result"] += 1
            return
        extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
        self.result(call, text_of(event.get("content")), extras, event["observation"] == "error")

    def result(self, call: Call, content: str, extras: dict, error: bool) -> None:
        """The event of a call's result (its text ``content``, V0 ``extras``), by action."""
        args = call.info
        command = args.get("command") if isinstance(args.get("command"), str) else ""
        file_call = call.tool in ("read", "edit", "write")
        if file_call and error:
            self.failed(call, nbytes(content))
            return
        path = args.get("path") if isinstance(args.get("path"), str) else extras.get("path")
        if file_call and not isinstance(path, str):
            self.output(call, nbytes(content))
        elif call.tool == "read" or (call.tool == "edit" and command == "view"):
            self.read(call, path, content)
        elif call.tool == "edit":
            self.edit(call, path, command, content, extras)
            self.confirmation(call, nbytes(content))
        elif call.tool == "write":
            body = args.get("content")
            self.sizes[path] = nbytes(body)
            self.file_event(call, "write", path, nbytes(body), lines=count_lines(body))
            self.confirmation(call, nbytes(content))
        else:
            self.output(call, nbytes(content))

    # ----- V1 agent SDK ------------------------------------------------------------------------
    def v1_event(self, index: int, event: dict) -> None:
        """One V1 event, by its ``kind``."""
        kind = event["kind"]
        ts = self.timestamp(event.get("timestamp"))
        if kind == "SystemPromptEvent":
            if self.conversation:
                self.user_turn(self.main, ts)
                prompt, context = event.get("system_prompt"), event.get("dynamic_context")
                tools = event.get("tools") if isinstance(event.get("tools"), list) else []
                self.set_overhead(self.main, nbytes(_texts([prompt] if isinstance(prompt, dict) else prompt))
                                  + nbytes(_texts([context] if isinstance(context, dict) else context))
                                  + nbytes(json.dumps(tools, ensure_ascii=False, default=str)))
        elif kind == "MessageEvent":
            self.v1_message(index, event, ts)
        elif kind == "ActionEvent":
            self.v1_action(index, event, ts)
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            self.v1_result(kind, event)
        elif kind in ("Condensation", "CondensationSummaryEvent"):
            if kind == "Condensation":   # the real compaction point, for `fidelity --policy`
                forgotten = event.get("forgotten_event_ids")
                self.builder.compaction(self.main, ts, trigger="condenser",
                                        forgotten=len(forgotten) if isinstance(forgotten, list) else None)
            if isinstance(event.get("summary"), str):
                self.report.notes["condensation"] += kind == "Condensation"
                self.user_message(self.main, event["summary"], ts, role="summary")

    def v1_turn(self, index: int, event: dict, ts: int) -> int:
        """The turn of a V1 agent event: its LLM response's (``llm_response_id``), else its own."""
        response = event.get("llm_response_id")
        key = f"response {response}" if isinstance(response, str) and response else f"event {event.get('id', index)}"
        return self.turn(key, self.main, ts)

    def v1_thinking(self, turn: int, source: dict, ts: int) -> None:
        """Reasoning text and thinking blocks of a V1 response, as thinking."""
        self.message(turn, "thinking", source.get("reasoning_content"), ts)
        blocks = source.get("thinking_blocks")
        for block in blocks if isinstance(blocks, list) else []:
            if isinstance(block, dict):
                self.message(turn, "thinking", block.get("thinking"), ts)

    def v1_message(self, index: int, event: dict, ts: int) -> None:
        """A V1 message: the user's, or the agent's text and thinking in its response's turn."""
        message = event.get("llm_message") if isinstance(event.get("llm_message"), dict) else {}
        text = _texts(message.get("content")) + _texts(event.get("extended_content"))
        if event.get("source") == "agent":
            if not self.conversation:
                return
            turn = self.v1_turn(index, event, ts)
            self.message(turn, "assistant", text, ts)
            self.v1_thinking(turn, message, ts)
        elif event.get("source") == "user":
            self.user_message(self.main, text, ts)

    def v1_action(self, index: int, event: dict, ts: int) -> None:
        """A V1 tool call: its thought and input, and the call awaiting its observation."""
        tool = event.get("tool_name") if isinstance(event.get("tool_name"), str) else ""
        action = event.get("action") if isinstance(event.get("action"), dict) else {}
        tool_call = event.get("tool_call")
        call_id = event.get("tool_call_id")
        if not tool or call_id is None:
            self.report.notes["unknown_action"] += 1
            return
        if self.conversation:
            self.user_turn(self.main, ts)
        turn = self.v1_turn(index, event, ts)
        self.message(turn, "assistant", _texts(event.get("thought")), ts)
        self.v1_thinking(turn, event, ts)
        if self.conversation:
            size = nbytes(json.dumps(tool_call if tool_call is not None else {"name": tool, "arguments": action},
                                     ensure_ascii=False, default=str))
            self.call_input(turn, tool, size, ts)
        as_edit = tool in V1_FILE_TOOLS and isinstance(action.get("command"), str)
        self.expect(call_id, self.call(turn, ts, "edit" if as_edit else tool, action))

    def v1_result(self, kind: str, event: dict) -> None:
        """A V1 observation, agent error or rejection: the result of the call it names."""
        call = self.answer(event.get("tool_call_id"))
        if call is None:
            self.report.notes["orphan_result"] += 1
            return
        if kind == "AgentErrorEvent":
            self.failed(call, nbytes(event.get("error")))
            return
        if kind == "UserRejectObservation":
            self.output(call, nbytes(event.get("rejection_reason")), tool=event.get("tool_name") or call.tool)
            return
        observation = event.get("observation") if isinstance(event.get("observation"), dict) else {}
        content = _texts(observation.get("content")) or _texts(observation.get("output"))
        error = observation.get("is_error") is True or bool(observation.get("error"))
        if call.tool == "edit":
            self.result(call, content, observation, error)
        elif error:
            self.failed(call, nbytes(content))
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
