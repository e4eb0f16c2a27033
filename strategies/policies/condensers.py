"""OpenHands' condensers: the LLM-summarizing condenser and amortized forgetting, counted in the SDK's events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.policies.common import positive_int
from ctxbench.strategies.policy import Edit, Replace, Request, TranscriptItem, Window
from ctxbench.strategies.tunable import Tunable, declare
from ctxbench.traces.tokens import DEFAULT_RATIOS

__all__ = ["Event", "view_events", "manipulation_indices", "summary_prompt_tokens", "LlmSummarizing",
           "AmortizedForgetting", "create_openhands_summarizing_policy", "create_amortized_forgetting_policy"]

#: The items of one LLM response and its tools' answers (a tool call, the text and thinking around it, results).
_RESPONSE = frozenset(("assistant", "thinking", "call", "result", "placeholder"))
_TEXT = frozenset(("assistant", "thinking"))
#: ``N_CHAR_PREVIEW`` (openhands/sdk/event/base.py, v1.43.1): an event's text in the summarization prompt is
#: cut to its first 500 characters.
PREVIEW_CHARS = 500
#: ``summarizing_prompt.j2`` (openhands/sdk/context/condenser/prompts, v1.43.1): 2,014 characters of
#: instructions around the events' loop.
TEMPLATE_CHARS = 2_014
#: What frames each event in that prompt: ``\n<EVENT>\n`` and ``\n</EVENT>\n`` around ``str(event)``, whose
#: header (``ObservationEvent (environment)\n  Tool: execute_bash\n  Result: ``, ``ActionEvent (agent)\n
#: Thought: ...\n  Action: ExecuteBashAction``) is about 60 characters.
EVENT_FRAME_CHARS = 19 + 60


@dataclass(slots=True)
class Event:
    """One event of OpenHands' View: ``kind`` (system, message, action, observation, summary), the items it
    holds (an action the call and the response's text; an observation the call's results), and ``unit``, the
    stretch no condensation splits (an LLM response's tool calls with their observations; any other event)."""

    kind: str
    unit: int
    items: list[TranscriptItem] = field(default_factory=list)


def view_events(items: Sequence[TranscriptItem]) -> list[Event]:
    """The transcript as the events of OpenHands' View (openhands/sdk/context/view, v1.43.1), in order.

    The system prompt (the overhead) is one event, a user message one, a summary one; an LLM response (the
    consecutive text, thinking, calls and results of one turn) with k tool calls is 2k events: one
    ``ActionEvent`` per call, the response's text and thinking in the first one's ``thought``, and one
    ``ObservationEvent`` per call whatever number of result items its tool added (an edit's confirmation and
    its output are one); a response with no tool call is one agent message. Results with no call in their
    response (a trace without the conversation) are an action and an observation each.
    """
    events: list[Event] = []
    turn: int | None = None
    pending: list[Event] = []      # actions of the current response still waiting for their observation
    text: list[TranscriptItem] = []
    for item in items:
        role = item.role
        if role not in _RESPONSE:
            _close(events, pending, text)
            turn = None
            events.append(Event("system" if role == "overhead" else "message" if role != "summary" else "summary",
                                _next_unit(events), [item]))
            continue
        if item.turn != turn:
            _close(events, pending, text)
            turn, unit = item.turn, _next_unit(events)
        if role in _TEXT:
            last = next((e for e in reversed(events) if e.unit == unit and e.kind == "action"), None)
            (last.items if last is not None and not text else text).append(item)
        elif role == "call":
            action = Event("action", unit, text + [item])
            text = []
            events.append(action)
            pending.append(action)
        elif pending:
            pending.pop(0)
            events.append(Event("observation", unit, [item]))
        elif events and events[-1].unit == unit and events[-1].kind == "observation":
            events[-1].items.append(item)   # another result of the same tool call
        else:
            events.append(Event("action", unit, []))
            events.append(Event("observation", unit, [item]))
    _close(events, pending, text)
    return events


def _next_unit(events: list[Event]) -> int:
    return events[-1].unit + 1 if events else 0


def _close(events: list[Event], pending: list[Event], text: list[TranscriptItem]) -> None:
    """End a response: a call with no result item still has its observation; text with no call is a message."""
    for action in pending:
        events.append(Event("observation", action.unit))
    pending.clear()
    if text:
        events.append(Event("message", _next_unit(events), list(text)))
        text.clear()


def manipulation_indices(events: Sequence[Event]) -> list[int]:
    """The places a condensation may start or end (``ManipulationIndices``, v1.43.1: an action is never parted
    from its observation, nor the tool calls of one response from each other), ascending, ``len(events)`` last."""
    return [k for k in range(len(events) + 1) if k in (0, len(events)) or events[k].unit != events[k - 1].unit]


def _find_next(indices: Sequence[int], threshold: int) -> int:
    return next(k for k in indices if k >= threshold)


def _event_tokens(event: Event) -> int:
    return sum(item.tokens for item in event.items)


def _ids(items: Sequence[TranscriptItem], events: Sequence[Event]) -> tuple[str, ...]:
    """The ids of the items ``events`` hold but the overhead, in transcript order."""
    held = {item.id for event in events for item in event.items}
    return tuple(item.id for item in items if item.id in held and item.role != "overhead")


def _over_window_tail(events: Sequence[Event], keep_first: int, window: Window) -> int | None:
    """Reason TOKENS (v1.43.0, a hard condensation): with the window over the model's input limit, how many
    events of the tail stay once the shortest run after the first ``keep_first`` holding more than
    ``tokens - max_tokens // 2`` is forgotten; None while the window fits."""
    if window.tokens <= window.max_tokens:
        return None
    reduce, removed = window.tokens - window.max_tokens // 2, 0
    for k in range(keep_first, len(events)):
        removed += _event_tokens(events[k])
        if removed > reduce:
            return len(events) - k - 1
    return 0


def summary_prompt_tokens(forgotten: Sequence[Event]) -> int:
    """The tokens of the summarization call's prompt for ``forgotten``: the template's instructions and each
    event's framing at the prose ratio, and each event's text as ``str(event)`` shows it, cut to
    `PREVIEW_CHARS` at its kind's ratio (an action shows its thought and its action's class, not the call)."""
    prose = DEFAULT_RATIOS["prose"]
    tokens = (TEMPLATE_CHARS + EVENT_FRAME_CHARS * len(forgotten)) / prose
    for event in forgotten:
        shown = [i for i in event.items if event.kind != "action" or i.role in _TEXT]
        tokens += min(sum(i.tokens for i in shown), PREVIEW_CHARS / DEFAULT_RATIOS.get(shown[0].kind, prose)) \
            if shown else 0
    return round(tokens)


class LlmSummarizing:
    """OpenHands' ``LLMSummarizingCondenser`` (openhands/sdk/context/condenser/llm_summarizing_condenser.py,
    v1.43.1), counting the events of its View (`view_events`). Once the View holds more than ``max_size``
    events (80 and ``keep_first`` 4: ``default_condenser``, the bundled conversations' settings; the class's
    own defaults are 240/2), the events after the first ``keep_first`` are summarised, all but the most recent
    ``max_size // 2 - keep_first - 1``, both ends moved forward to a `manipulation_indices` place, into one
    summary event of ``summary_tokens`` (4,000; the model writes it, OpenHands sets no size) where they began.
    With the window over its size (reason TOKENS, hard) the tail kept is the shorter of that and what leaves
    the window at half its size; a hard condensation with nothing to forget summarises every event. Fewer
    than a tenth of the events to forget (``minimum_progress``) is no condensation. The summarization call's
    prompt is its own (`summary_prompt_tokens`), not the agent's.
    """

    TUNABLE = declare(
        Tunable("max_size", "int", 1, MAX_OPTION_INT, (10, 400), log=True, doc="events before it condenses"),
        Tunable("keep_first", "int", 0, MAX_OPTION_INT, (0, 10), doc="first events never condensed"))

    def __init__(self, max_size: int = 80, keep_first: int = 4, summary_tokens: int = 4_000) -> None:
        self.max_size = self.TUNABLE["max_size"].check(max_size)
        self.keep_first = self.TUNABLE["keep_first"].check(keep_first)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)
        if self.max_size // 2 - self.keep_first - 1 < 0:
            raise StrategyInputError(f"keep_first {keep_first} leaves no room in max_size {max_size} "
                                     "(max_size // 2 - keep_first - 1 must be >= 0)")

    def forgotten(self, items: Sequence[TranscriptItem], window: Window) -> list[Event]:
        """The events this condenser forgets before the call with ``items`` in ``window`` (none: no condensation)."""
        if len(items) <= self.max_size and window.tokens <= window.max_tokens:
            return []   # at most as many events as items
        events = view_events(items)
        tails = [self.max_size // 2 - self.keep_first - 1] if len(events) > self.max_size else []
        hard = _over_window_tail(events, self.keep_first, window)
        if hard is not None:
            tails.append(hard)
        if not tails:
            return []
        indices = manipulation_indices(events)
        start = _find_next(indices, min(self.keep_first, len(events)))
        end = _find_next(indices, max(len(events) - min(tails), start))
        forgotten = events[start:end]
        if (not forgotten or len(forgotten) < len(events) * 0.1) and hard is not None:
            return events   # hard_context_reset: every event is summarised
        return forgotten if forgotten and len(forgotten) >= len(events) * 0.1 else []

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        forgotten = self.forgotten(items, window)
        ids = _ids(items, forgotten)
        if not ids:
            return []
        summary = min(self.summary_tokens, sum(item.tokens for event in forgotten for item in event.items
                                               if item.role != "overhead"))
        if summary == 0:
            return [Replace(ids, 0)]
        return [Request((), summary_prompt_tokens(forgotten)), Replace(ids, summary, "summary")]

    def __repr__(self) -> str:
        return f"LlmSummarizing(max_size={self.max_size}, keep_first={self.keep_first})"


class AmortizedForgetting:
    """OpenHands V0's ``AmortizedForgettingCondenser`` (openhands/memory/condenser/impl/
    amortized_forgetting_condenser.py), counting the same events (`view_events`): once there are more than
    ``max_size`` (100, ``keep_first`` 1), all but the first ``keep_first`` and the most recent
    ``max_size // 2 - keep_first`` are forgotten, with no summary. With the window over its size the agent
    (history truncation on) asks for a condensation: the target is half the events, ``len // 2 - keep_first``
    kept from the tail.
    """

    TUNABLE = declare(
        Tunable("max_size", "int", 1, MAX_OPTION_INT, (10, 400), log=True, doc="events before it forgets"),
        Tunable("keep_first", "int", 0, MAX_OPTION_INT, (0, 10), doc="first events never forgotten"))

    def __init__(self, max_size: int = 100, keep_first: int = 1) -> None:
        self.max_size = self.TUNABLE["max_size"].check(max_size)
        self.keep_first = self.TUNABLE["keep_first"].check(keep_first)
        if self.max_size // 2 - self.keep_first < 0:
            raise StrategyInputError(f"keep_first {keep_first} leaves no room in max_size {max_size}")

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        over = window.tokens > window.max_tokens
        if len(items) <= self.max_size and not over:
            return []
        events = view_events(items)
        if len(events) <= self.max_size and not over:
            return []
        target = len(events) // 2 if over else self.max_size // 2
        tail = max(target - self.keep_first, 0)
        ids = _ids(items, events[self.keep_first:len(events) - tail])
        return [Replace(ids, 0)] if ids else []

    def __repr__(self) -> str:
        return f"AmortizedForgetting(max_size={self.max_size}, keep_first={self.keep_first})"


def create_openhands_summarizing_policy(**options) -> LlmSummarizing:
    """OpenHands' LLM-summarizing condenser (see `LlmSummarizing`)."""
    return LlmSummarizing(**options)


def create_amortized_forgetting_policy(**options) -> AmortizedForgetting:
    """OpenHands' amortized forgetting (see `AmortizedForgetting`)."""
    return AmortizedForgetting(**options)
