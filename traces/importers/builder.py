"""The base of every importer: read a session into events (`SessionReader`), collect them as compact
columns and order them into turns over all arms (`SessionBuilder`), build the trace (`assemble`).

The whole window (docs/design.md §7). With ``conversation`` (the default) a reader also emits
what else enters the model's window: messages (``msg://user/<n>``, ``msg://assistant/<n>``,
``msg://thinking/<n>``, compaction summaries ``msg://summary/<n>``), each tool call's input
(``call://<tool>/<n>``, the JSON the model produced) and, once per window, the fixed overhead
(`SessionReader.open_window`): the recorded system prompt where the log has one, else the first
recorded input tokens less the content before them, else `traces.tokens.DEFAULT_OVERHEAD_TOKENS`
(counted in the report). Overhead tokens become bytes at the overhead kind's default ratio.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctxbench.traces.exact_tokens import counter as exact_counter, unavailable
from ctxbench.traces.importers._text import iso_ms, nbytes, redacted
from ctxbench.traces.importers.report import FileReport, ImportReport
from ctxbench.traces.model_ratios import MAX_MODEL_CHARS
from ctxbench.traces.schema import DEFAULT_ARM, OPS, validate
from ctxbench.traces.tokens import DEFAULT_OVERHEAD_TOKENS, DEFAULT_RATIOS, kind_of

__all__ = ["SessionReader", "Call", "Window", "SessionBuilder", "FinishedSession", "assemble", "EXTRA_COLUMNS",
           "MAX_USAGE_TOKENS", "usage_tokens"]

#: The most input tokens one call may record; a larger, negative or non-integer count is a malformed record.
MAX_USAGE_TOKENS = 2**40


def usage_tokens(value: object) -> int | None:
    """A recorded token count if it is a whole number from 0 to `MAX_USAGE_TOKENS`, else None.

    >>> usage_tokens(1200), usage_tokens(True), usage_tokens(2**63), usage_tokens(12.5), usage_tokens(-1)
    (1200, None, None, None, None)
    """
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_USAGE_TOKENS:
        return value
    return None


#: Columns every importer adds to the schema's: the agent's real input tokens for the turn (0 when
#: unknown) and a marker on the first event after the agent compacted its context.
EXTRA_COLUMNS: tuple[str, ...] = ("usage_input_tokens", "compact_before")


@dataclass
class FinishedSession:
    """One session's rows in final order, with its compaction markers and counts."""

    session: str
    columns: dict[str, list]
    compactions: list[dict[str, Any]]
    arms: list[str]
    turns: int
    clamped: int

    def __len__(self) -> int:
        return len(self.columns["turn"])


@dataclass
class SessionBuilder:
    """Events of one session, in any arrival order; `finish` puts them in turn order.

    A turn belongs to one arm and has a start time; turns of all arms are merged by start time
    (ties: arm registration order, then creation order), and a turn's events keep the order in
    which their slots were reserved (`reserve`), so results arriving late still land in place.
    Within one arm, turns keep their creation (file) order even if the log's clock goes backwards.
    Resources added with ``numbered=True`` get ``<n>`` appended, counted per prefix in final order
    (``tool://bash/`` becomes ``tool://bash/1``, ``tool://bash/2``, ...).
    """

    session: str
    arms: list[str] = field(default_factory=list)
    _turn_arm: list[int] = field(default_factory=list)
    _turn_ts: list[int] = field(default_factory=list)
    _turn_usage: list[int] = field(default_factory=list)
    _turn_model: dict[int, str] = field(default_factory=dict)   # turn -> the model that made its call, where known
    _arm_clock: list[int] = field(default_factory=list)
    _ev_turn: list[int] = field(default_factory=list)
    _ev_seq: list[int] = field(default_factory=list)
    _ev_ts: list[int] = field(default_factory=list)
    _ev_op: list[str] = field(default_factory=list)
    _ev_path: list[str] = field(default_factory=list)
    _ev_numbered: list[bool] = field(default_factory=list)
    _ev_size: list[int] = field(default_factory=list)
    _ev_lines: list[int] = field(default_factory=list)
    _ev_kind: dict[int, str] = field(default_factory=dict)   # event -> its content kind, where not its op's own
    _ev_tokens: dict[int, int] = field(default_factory=dict)   # event -> its content's exact tokens, where counted
    _marks: list[tuple[int, int, int | None, dict[str, Any]]] = field(default_factory=list)
    _next_seq: int = 0

    def add_arm(self, name: str = DEFAULT_ARM) -> int:
        """Register an arm and return its index; a repeated name gets a ``~2``, ``~3`` suffix."""
        unique, copy = name, 1
        while unique in self.arms:
            copy += 1
            unique = f"{name}~{copy}"
        self.arms.append(unique)
        self._arm_clock.append(np.iinfo(np.int64).min)
        return len(self.arms) - 1

    def new_turn(self, arm: int, ts: int) -> int:
        """Open a turn of ``arm`` starting at ``ts`` (epoch ms); returns its handle."""
        clock = max(self._arm_clock[arm], ts)
        self._arm_clock[arm] = clock
        self._turn_arm.append(arm)
        self._turn_ts.append(clock)
        self._turn_usage.append(0)
        return len(self._turn_arm) - 1

    def arm_of(self, turn: int) -> int:
        """The arm a turn belongs to."""
        return self._turn_arm[turn]

    def reserve(self) -> int:
        """A slot that orders an event within its turn, taken when the call is seen."""
        self._next_seq += 1
        return self._next_seq

    def add(self, turn: int, op: str, path: str, size: int, ts: int, *, lines: int = 0,
            numbered: bool = False, slot: int | None = None, kind: str = "", tokens: int = 0) -> None:
        """Add one event to ``turn``; ``slot`` (from `reserve`) places it, else it goes last so far;
        ``kind`` names its content kind where it is not its op's own (the trace's ``kind`` column);
        ``tokens`` its content's exact tokens where they were counted (``exact_tokens``)."""
        if kind:
            self._ev_kind[len(self._ev_turn)] = kind
        if tokens > 0:
            self._ev_tokens[len(self._ev_turn)] = int(tokens)
        self._ev_turn.append(turn)
        self._ev_seq.append(self.reserve() if slot is None else slot)
        self._ev_ts.append(ts)
        self._ev_op.append(op)
        self._ev_path.append(sys.intern(path))  # paths repeat: keep one copy
        self._ev_numbered.append(numbered)
        self._ev_size.append(max(0, int(size)))
        self._ev_lines.append(max(0, int(lines)))

    def set_usage(self, turn: int, tokens: int) -> None:
        """Record the real input tokens the agent's model saw at ``turn``."""
        self._turn_usage[turn] = max(self._turn_usage[turn], int(tokens))

    def set_model(self, turn: int, model: str) -> None:
        """Record the model that made the call of ``turn`` (the trace's ``model`` column)."""
        self._turn_model[turn] = sys.intern(model)

    def compaction(self, arm: int, ts: int | None, **info: Any) -> None:
        """Mark that ``arm`` compacted its context here: before the next turn it opens."""
        self._marks.append((arm, len(self._turn_arm), ts, info))

    @property
    def events(self) -> int:
        """Events added so far."""
        return len(self._ev_turn)

    def finish(self) -> FinishedSession:
        """The rows in turn order with dense turn numbers, clamped times and numbered resources."""
        n_turns = len(self._turn_arm)
        turn_order = sorted(range(n_turns), key=lambda turn: (self._turn_ts[turn], self._turn_arm[turn], turn))
        rank = [0] * n_turns
        for place, turn in enumerate(turn_order):
            rank[turn] = place
        order = sorted(range(self.events), key=lambda event: (rank[self._ev_turn[event]], self._ev_seq[event]))

        turns, ts_out, paths, clamped = [], [], [], 0
        dense, last_rank, running = -1, -1, None
        counters: dict[str, int] = {}
        for event in order:
            place = rank[self._ev_turn[event]]
            if place != last_rank:
                dense, last_rank = dense + 1, place
            turns.append(dense)
            ts = self._ev_ts[event]
            if running is not None and ts < running:
                clamped += 1
                ts = running
            running = ts
            ts_out.append(ts)
            path = self._ev_path[event]
            if self._ev_numbered[event]:
                counters[path] = counters.get(path, 0) + 1
                path = f"{path}{counters[path]}"
            paths.append(path)

        compact = [False] * len(order)
        compactions = []
        for arm, before, ts, info in self._marks:
            hit = next((row for row, event in enumerate(order)
                        if self._turn_arm[self._ev_turn[event]] == arm and self._ev_turn[event] >= before), None)
            if hit is not None:
                compact[hit] = True
            compactions.append({"session": self.session, "arm": self.arms[arm],
                                "turn": None if hit is None else turns[hit], "ts_ms": ts, **info})

        columns = {
            "session": [self.session] * len(order),
            "turn": turns,
            "ts_ms": ts_out,
            "op": [self._ev_op[event] for event in order],
            "path": paths,
            "size_bytes": [self._ev_size[event] for event in order],
            "arm": [self.arms[self._turn_arm[self._ev_turn[event]]] for event in order],
            "lines_changed": [self._ev_lines[event] for event in order],
            "usage_input_tokens": [self._turn_usage[self._ev_turn[event]] for event in order],
            "compact_before": compact,
        }
        if self._ev_kind:
            columns["kind"] = [self._ev_kind.get(event, "") for event in order]
        if self._turn_model:
            columns["model"] = [self._turn_model.get(self._ev_turn[event], "") for event in order]
        if self._ev_tokens:
            columns["exact_tokens"] = [self._ev_tokens.get(event, 0) for event in order]
        return FinishedSession(self.session, columns, compactions, list(self.arms),
                               dense + 1, clamped)


@dataclass(slots=True)
class Call:
    """A tool call waiting for its result: its turn, its place in the turn, its time, its tool and the input kept."""

    turn: int
    slot: int
    ts: int
    tool: str
    info: dict[str, Any]


class SessionReader:
    """What every importer keeps while reading a session, and the events every format makes.

    It holds the session's builder, the report of the file being read, the last known size of
    each file, the arms and turns opened so far (by name and by key), the calls awaiting their
    results (by call id) and the clock (the last usable timestamp); with ``conversation``, each
    arm's open window (`open_window`) and latest turn, where user content lands. Each importer
    subclasses it with the mapping of its records; `finish` counts the calls left without a
    result and settles the overheads no usage measured.
    """

    def __init__(self, builder: SessionBuilder, report: FileReport, conversation: bool,
                 sizes: dict[str, int] | None = None) -> None:
        self.builder = builder
        self.report = report
        self.conversation = conversation
        self.sizes: dict[str, int] = {} if sizes is None else sizes
        self.arms: dict[str, int] = {}
        self.turns: dict[str, int] = {}
        self.pending: dict[object, Call] = {}
        self.last_ts = 0
        self.recognised = 0
        self.windows: dict[int, Window] = {}       # arm -> its window since the start or the last compaction
        self.last_turn: dict[int, int] = {}        # arm -> its latest turn
        self.overhead_tokens: dict[int, float] = {}   # arm -> its fixed overhead, once known
        self.model = ""   # the model of the turns opened from now on, where the log names it once for many calls
        self.exact: Callable[[str], int] | None = None   # the exact token counter of the session's model, if any

    def arm(self, name: str = DEFAULT_ARM) -> int:
        """The builder's index of the arm ``name``, registered on first use."""
        if name not in self.arms:
            self.arms[name] = self.builder.add_arm(name)
        return self.arms[name]

    def turn(self, key: str, arm: int, ts: int) -> int:
        """The turn of ``key`` (a message or response id), opened at ``ts`` the first time it is seen."""
        if key not in self.turns:
            self.turns[key] = self.new_turn(arm, ts)
        return self.turns[key]

    def new_turn(self, arm: int, ts: int) -> int:
        """A new turn of ``arm`` at ``ts`` (with ``conversation``, after the arm's window is opened)."""
        if self.conversation and arm not in self.windows:
            self.open_window(arm, ts)
        turn = self.last_turn[arm] = self.builder.new_turn(arm, ts)
        if self.model:
            self.builder.set_model(turn, self.model)
        return turn

    # ----- the whole window ------------------------------------------------------------------
    def open_window(self, arm: int, ts: int, *, after_compaction: bool = False) -> None:
        """Start ``arm``'s window (at its first content, or after a compaction): a turn whose first
        slot is kept for the overhead (`set_overhead`, `measure_overhead`)."""
        old = self.windows.get(arm)
        if old is not None and not old.settled:
            self._settle_default(arm, old)
        turn = self.last_turn[arm] = self.builder.new_turn(arm, ts)
        self.windows[arm] = Window(turn, self.builder.reserve(), ts, after_compaction)

    def usable_model(self, model: object) -> str:
        """A model name from the log if it is text of at most `traces.model_ratios.MAX_MODEL_CHARS` printable
        characters, else ``""`` (counted when something was there)."""
        if model is None or model == "":
            return ""
        if not isinstance(model, str) or len(model) > MAX_MODEL_CHARS or not model.isprintable():
            self.report.notes["unusable_model"] += 1
            return ""
        return model

    def set_model(self, turn: int, model: object) -> None:
        """The model that made ``turn``'s call, as the log names it (`usable_model`)."""
        model = self.usable_model(model)
        if model:
            self.builder.set_model(turn, model)

    def use_model(self, model: object) -> None:
        """The model of the turns opened from now on (a log that names it once for many calls)."""
        self.model = self.usable_model(model)
        self.count_for(self.model)

    def count_for(self, model: object) -> None:
        """Count the text of the events added from now on exactly with ``model``'s tokenizer, where there is
        one (`traces.exact_tokens.counter`: OpenAI's models, with ``ctxbench[tokens]``); a session whose
        model has none is counted by its kinds' ratios (noted once when only the counter is missing)."""
        if self.exact is not None or not model:
            return
        self.exact = exact_counter(model)
        if self.exact is None and unavailable(model) != "not an OpenAI model":
            self.report.notes["not_counted_exactly"] = 1

    def user_turn(self, arm: int, ts: int) -> int:
        """Where user-side content of ``arm`` lands: its latest turn (its window opened if need be)."""
        if arm not in self.windows:
            self.open_window(arm, ts)
        return self.last_turn[arm]

    def add(self, turn: int, op: str, path: str, size: int, ts: int, *, lines: int = 0,
            numbered: bool = False, slot: int | None = None, kind: str = "", text: object = None) -> None:
        """One event (`SessionBuilder.add`), its tokens counted towards its arm's open window; ``text``, its
        content as the model saw it (``size`` is its bytes), is counted exactly where the session's model
        has a counter (`count_for`) and the text was not redacted."""
        tokens = self.exact(text) if self.exact is not None and isinstance(text, str) and not redacted(text) else 0
        self.builder.add(turn, op, path, size, ts, lines=lines, numbered=numbered, slot=slot, kind=kind,
                         tokens=tokens)
        window = self.windows.get(self.builder.arm_of(turn))
        if window is not None and not window.settled:
            window.tokens += tokens or max(0, int(size)) / DEFAULT_RATIOS[kind or kind_of(op, path)]

    def set_overhead(self, arm: int, size: int) -> None:
        """The recorded overhead of ``arm``'s open window (a system prompt and tool definitions), ``size`` bytes."""
        window = self.windows.get(arm)
        if window is None or window.settled:
            return
        self._place_overhead(arm, window, max(0, int(size)))

    def measure_overhead(self, arm: int, input_tokens: int, *, content_tokens: float | None = None) -> None:
        """Settle the overhead of ``arm``'s open window from its first recorded input tokens: what they
        hold beyond the content before them (and, after a compaction, beyond the arm's own overhead).

        ``content_tokens`` is that content's size when the call's own events were added already (a log
        that records usage after the response): `window_tokens` taken when the call began."""
        window = self.windows.get(arm)
        if window is None or window.settled or input_tokens <= 0:
            return
        tokens = input_tokens - (window.tokens if content_tokens is None else content_tokens)
        if window.after_compaction:
            tokens -= self.overhead_tokens.get(arm, 0.0)
        self._place_overhead(arm, window, round(max(0.0, tokens) * DEFAULT_RATIOS["overhead"]))

    def window_tokens(self, arm: int) -> float:
        """The tokens (at the default ratios) of what entered ``arm``'s open window so far; 0 when none is open."""
        window = self.windows.get(arm)
        return 0.0 if window is None else window.tokens

    def _place_overhead(self, arm: int, window: "Window", size: int) -> None:
        window.settled = True
        if window.after_compaction:
            if size > 0:
                self.builder.add(window.turn, "overhead", "overhead://compaction/", size, window.ts, numbered=True,
                                 slot=window.slot)
            return
        self.overhead_tokens[arm] = size / DEFAULT_RATIOS["overhead"]
        self.builder.add(window.turn, "overhead", "overhead://system", size, window.ts, slot=window.slot)

    def settle_overheads(self) -> None:
        """Give each session-start window that no usage measured the default overhead (counted)."""
        for arm, window in self.windows.items():
            if not window.settled:
                self._settle_default(arm, window)

    def _settle_default(self, arm: int, window: "Window") -> None:
        """A window no usage measured: the default overhead at a session's start (counted), nothing after a compaction."""
        if window.after_compaction:
            window.settled = True
            return
        self.report.notes["default_overhead"] += 1
        self._place_overhead(arm, window, round(DEFAULT_OVERHEAD_TOKENS * DEFAULT_RATIOS["overhead"]))

    def user_message(self, arm: int, text: object, ts: int, *, role: str = "user") -> None:
        """User-side text (a prompt, a reminder, a compaction summary with ``role="summary"``) as a message."""
        if self.keeps_message(text):
            self.add(self.user_turn(arm, ts), "message", f"msg://{role}/", nbytes(text), ts, numbered=True, text=text)

    def call_input(self, turn: int, tool: str, size: int, ts: int, *, text: object = None) -> None:
        """A tool call's input, as the model produced it (``size`` bytes; ``text`` where the log holds it
        as the model saw it), as ``call://<tool>/<n>``."""
        if self.conversation:
            self.add(turn, "call", f"call://{tool}/", size, ts, numbered=True, text=text)

    def timestamp(self, value: object) -> int:
        """Epoch ms of an ISO timestamp; the previous one, counted, when it is missing or unusable."""
        ts = iso_ms(value)
        if ts is None:
            self.report.notes["missing_timestamp"] += 1
            return self.last_ts
        self.last_ts = ts
        return ts

    def call(self, turn: int, ts: int, tool: str, info: dict[str, Any] | None = None) -> Call:
        """A call of ``tool`` in ``turn``, its place in the turn taken now."""
        return Call(turn, self.builder.reserve(), ts, tool, {} if info is None else info)

    def expect(self, call_id: object, call: Call) -> None:
        """Keep ``call`` until the result naming ``call_id`` comes; an id that cannot name one keeps it unanswered."""
        self.pending[call_id if _usable_id(call_id) else object()] = call

    def answer(self, call_id: object) -> Call | None:
        """The call that a result naming ``call_id`` answers, or None."""
        return self.pending.pop(call_id, None) if _usable_id(call_id) else None

    def output(self, call: Call, size: int, *, tool: str | None = None, kind: str = "", text: object = None) -> None:
        """The call's result as an output ``tool://<tool>/<n>`` (``tool`` defaults to the call's); ``kind``
        (with the conversation only) where its content is not tool output (a web page is prose); ``text``
        (of ``size`` bytes) where the log holds it as the model saw it, here and below."""
        self.add(call.turn, "output", f"tool://{call.tool if tool is None else tool}/", size, call.ts,
                 numbered=True, slot=call.slot, kind=kind if self.conversation else "", text=text)

    def confirmation(self, call: Call, size: int, *, text: object = None) -> None:
        """With the conversation, what a file change returned to the model (a confirmation, a snippet of
        the file) as an output ``tool://<tool>/<n>`` beside the change's own event."""
        if self.conversation:
            self.output(call, size, text=text)

    def failed(self, call: Call, size: int, *, text: object = None) -> None:
        """A call that failed: its result as an output, counted."""
        self.report.notes["failed_call"] += 1
        self.output(call, size, text=text)

    def file_event(self, call: Call, op: str, path: str, size: int, *, lines: int = 0, text: object = None) -> None:
        """The call's result as a ``read``, ``edit`` or ``write`` of ``path``."""
        self.add(call.turn, op, path, size, call.ts, lines=lines, slot=call.slot, text=text)

    def keeps_message(self, text: object) -> bool:
        """Whether ``text`` is imported as a message: the conversation is imported and it is non-empty text."""
        return self.conversation and isinstance(text, str) and bool(text)

    def message(self, turn: int, role: str, text: object, ts: int) -> None:
        """The model's own text of ``role`` (``assistant``, ``thinking``) in ``turn``, as ``msg://<role>/<n>``."""
        if self.keeps_message(text):
            self.add(turn, "message", f"msg://{role}/", nbytes(text), ts, numbered=True, text=text)

    def count_unanswered(self) -> None:
        """Count the calls still waiting for a result (they are dropped)."""
        if self.pending:
            self.report.notes["no_result"] += len(self.pending)
            self.pending.clear()

    def finish(self) -> FinishedSession:
        """The session's rows, once the calls left without a result are counted and the overheads settled."""
        self.count_unanswered()
        self.settle_overheads()
        return self.builder.finish()


@dataclass(slots=True)
class Window:
    """An arm's window since its start or its last compaction: the turn and slot kept for its overhead,
    whether that is settled, and the tokens (at the default ratios) of what entered it so far."""

    turn: int
    slot: int
    ts: int
    after_compaction: bool
    tokens: float = 0.0
    settled: bool = False


def _usable_id(call_id: object) -> bool:
    """Whether a call id from a log can key the calls awaiting results (JSON lists and objects cannot)."""
    return not isinstance(call_id, (list, dict))


def assemble(sessions: Iterable[FinishedSession], report: ImportReport, source: str = "import") -> pd.DataFrame:
    """One validated trace of ``sessions`` (sorted by id, repeated ids renamed), filling ``report``.

    ``df.attrs["compactions"]`` lists where the real agent compacted its context.
    """
    by_id: dict[str, FinishedSession] = {}
    for session in sessions:
        name, copy = session.session, 1
        while name in by_id:
            copy += 1
            name = f"{session.session}#{copy}"
        if name != session.session:
            report.renamed.append((session.session, name))
            session.session = name
            session.columns["session"] = [name] * len(session)
            for compaction in session.compactions:
                compaction["session"] = name
        by_id[name] = session

    columns: dict[str, list] = {}
    compactions: list[dict[str, Any]] = []
    kinds: list[str] = []
    models: list[str] = []
    exact: list[int] = []
    with_kinds = any("kind" in session.columns for session in by_id.values())
    with_models = any("model" in session.columns for session in by_id.values())
    with_exact = any("exact_tokens" in session.columns for session in by_id.values())
    for name in sorted(by_id):
        session = by_id[name]
        for key, values in session.columns.items():
            if key not in ("kind", "model", "exact_tokens"):
                columns.setdefault(key, []).extend(values)
        if with_kinds:   # a kind column only where some event's content is not its op's own
            kinds.extend(session.columns.get("kind", [""] * len(session)))
        if with_models:   # a model column only where some log names its model
            models.extend(session.columns.get("model", [""] * len(session)))
        if with_exact:    # exact counts only where some text was counted
            exact.extend(session.columns.get("exact_tokens", [0] * len(session)))
        compactions.extend(session.compactions)
        counts = {op: 0 for op in OPS}
        for op in session.columns["op"]:
            counts[op] += 1
        report.sessions[name] = {"turns": session.turns, "events": len(session), **counts, "arms": len(session.arms)}
        if session.clamped:
            report.clamped[name] = session.clamped
    report.compactions = compactions

    if not columns:
        columns = {key: [] for key in ("session", "turn", "ts_ms", "op", "path", "size_bytes", "arm",
                                       "lines_changed", *EXTRA_COLUMNS)}
    df = pd.DataFrame({
        **{key: values for key, values in columns.items() if key not in ("turn", "ts_ms", "size_bytes",
                                                                          "lines_changed", *EXTRA_COLUMNS)},
        "turn": np.asarray(columns["turn"], dtype=np.int64),
        "ts_ms": np.asarray(columns["ts_ms"], dtype=np.int64),
        "size_bytes": np.asarray(columns["size_bytes"], dtype=np.int64),
        "lines_changed": np.asarray(columns["lines_changed"], dtype=np.int64),
        "usage_input_tokens": np.asarray(columns["usage_input_tokens"], dtype=np.int64),
        "compact_before": np.asarray(columns["compact_before"], dtype=bool),
        **({"kind": kinds} if with_kinds else {}),
        **({"model": models} if with_models else {}),
        **({"exact_tokens": np.asarray(exact, dtype=np.int64)} if with_exact else {}),
    })
    df = validate(df, source=source)
    df.attrs["compactions"] = compactions
    df.attrs["import"] = {"format": report.format, "conversation": report.conversation,
                          "files": len(report.files), "malformed_records": report.malformed}
    return df
