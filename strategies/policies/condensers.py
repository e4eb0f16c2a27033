"""OpenHands' condensers: the LLM-summarizing condenser and amortized forgetting, counted in the SDK's events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.policies.common import positive_int
from ctxbench.strategies.policy import Edit, Replace, Request, TranscriptItem, Window
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["ViewUnit", "view_units", "LlmSummarizing", "AmortizedForgetting", "create_openhands_summarizing_policy",
           "create_amortized_forgetting_policy"]

#: ``summarizing_prompt.j2`` (2,081 characters) in tokens, at 4 characters a token.
TEMPLATE_TOKENS = 520
#: What ``str(event)`` shows of an event's text (``N_CHAR_PREVIEW``, 500 characters), in tokens.
PREVIEW_TOKENS = 125
#: An event's framing in the summarization prompt (``<EVENT>`` tags, "ActionEvent (agent) Thought: ...
#: Action: ..." or "Tool: ... Result: ..."), in tokens.
FRAMING_TOKENS = 15

_TURN_ROLES = frozenset({"assistant", "thinking", "call", "result", "placeholder", "attached"})


@dataclass(frozen=True)
class ViewUnit:
    """Items that the SDK's view holds as consecutive events it never splits: the system prompt, a message,
    a summary, or one model response's tool calls with their observations. ``events`` is how many events
    the view counts for them; ``preview_tokens`` what their ``str(event)`` previews take in a summarization
    prompt."""

    items: tuple[TranscriptItem, ...]
    events: int
    preview_tokens: int

    @property
    def tokens(self) -> int:
        return sum(item.tokens for item in self.items)


def _preview(tokens: int) -> int:
    return min(tokens, PREVIEW_TOKENS) + FRAMING_TOKENS


def _unit(items: list[TranscriptItem]) -> ViewUnit:
    role = items[0].role
    if role in ("overhead", "user", "summary"):
        # one SystemPromptEvent for the whole overhead; a message or a summary is one event
        return ViewUnit(tuple(items), 1, _preview(sum(i.tokens for i in items)))
    calls = sum(1 for i in items if i.role == "call")
    results = [i.tokens for i in items if i.role in ("result", "placeholder", "attached")]
    text = sum(i.tokens for i in items if i.role == "assistant")
    actions = calls or len(results)
    if actions == 0:   # a reply with no tool call: one agent MessageEvent
        return ViewUnit(tuple(items), 1, _preview(text))
    # one ActionEvent a tool call (the response's text is the first one's thought), one observation each
    observations = [_preview(t) for t in results[:actions]] + [FRAMING_TOKENS] * (actions - len(results))
    return ViewUnit(tuple(items), 2 * actions, _preview(text) + FRAMING_TOKENS * (actions - 1) + sum(observations))


def view_units(items: Sequence[TranscriptItem]) -> list[ViewUnit]:
    """The transcript as the OpenHands SDK's ``View`` counts it, in order (``context/view``, v1.43): the
    overhead is the ``SystemPromptEvent``, a user message or a summary one event, and a model response
    (a turn's assistant text, thinking, tool calls and results) one ``ActionEvent`` per tool call (its text
    and thinking in the first one's thought, not events of their own) and one observation per action; a
    response with no tool call one ``MessageEvent``. A response's events are one unit: the condenser never
    splits a batch of tool calls or a call from its observation (its ``manipulation_indices``). O(n).

    >>> from ctxbench.strategies.policy import TranscriptItem as I
    >>> items = [I("o", "overhead", "prose", 100, 0), I("u", "user", "prose", 20, 0),
    ...          I("a", "assistant", "prose", 5, 1), I("c1", "call", "json", 9, 1), I("c2", "call", "json", 9, 1),
    ...          I("r1", "result", "code", 300, 1), I("r2", "result", "output", 40, 1), I("b", "assistant", "prose", 7, 2)]
    >>> [(len(u.items), u.events) for u in view_units(items)]
    [(1, 1), (1, 1), (5, 4), (1, 1)]
    """
    units: list[ViewUnit] = []
    run: list[TranscriptItem] = []
    for item in items:
        if run and not (item.role in _TURN_ROLES and run[0].role in _TURN_ROLES and item.turn == run[0].turn
                        or item.role == "overhead" == run[0].role):
            units.append(_unit(run))
            run = []
        run.append(item)
    if run:
        units.append(_unit(run))
    return units


def _forgotten(units: list[ViewUnit], keep_first: int, events_from_tail: int) -> list[ViewUnit]:
    """The units the view forgets: from the first unit boundary at or past ``keep_first`` events to the first
    at or past ``events_from_tail`` events before the end (both cut points snapped forward, as
    ``manipulation_indices.find_next`` does); never the overhead."""
    total = sum(u.events for u in units)
    naive_end = total - events_from_tail
    out, at, started = [], 0, False
    for unit in units:
        if at >= naive_end:
            break
        started = started or at >= keep_first
        if started and unit.items[0].role != "overhead":
            out.append(unit)
        at += unit.events
    return out


def _token_tail(units: list[ViewUnit], keep_first: int, reduce: int) -> int:
    """How many events may stay at the end when the events after the first ``keep_first`` must lose more than
    ``reduce`` tokens from their start (``get_suffix_length_for_token_reduction``)."""
    total = sum(u.events for u in units)
    at, freed = 0, 0
    for unit in units:
        at += unit.events
        if at > keep_first:
            freed += unit.tokens
            if freed > reduce:
                return total - at
    return 0


def _cap(max_tokens: int | None, window: Window) -> int:
    """The token count past which the view must be condensed: the window, or ``max_tokens`` when smaller."""
    return window.max_tokens if max_tokens is None else min(max_tokens, window.max_tokens)


class LlmSummarizing:
    """OpenHands' ``LLMSummarizingCondenser`` (software-agent-sdk v1.43, ``context/condenser/
    llm_summarizing_condenser.py``), on the events of its ``View`` (`view_units`).

    It condenses before a call when the view holds more than ``max_size`` events (80 and ``keep_first``
    4 in the SDK's default agent, ``get_default_agent``) or, since v1.43.0, more tokens than the model
    takes (the window, or ``max_tokens`` when smaller: a hard requirement). It keeps the first
    ``keep_first`` events and a tail of ``max_size // 2 - keep_first - 1`` events (by events), or the
    longest tail whose loss frees more than the tokens past half the cap (by tokens), the stricter of
    the two; both cut points move forward to a unit's boundary. The forgotten events become one summary
    event of ``summary_tokens`` (4,000; the model writes it) where they began. It does not condense
    when fewer than ``minimum_progress`` (0.1) of the events would go; past the cap it then summarizes
    the whole history (``hard_context_reset``), and does so too when the usual condensation would leave
    the window over it (the SDK condenses again before it calls the model).

    The summary is written by a call of its own: the summarizing prompt (``summarizing_prompt.j2``) and,
    per forgotten event, ``<EVENT>str(event)</EVENT>``, which shows at most 500 characters of it (an
    action its thought and its class, not its arguments); it shares no prefix with the agent's prompt.
    """

    TUNABLE = declare(
        Tunable("max_size", "int", 1, MAX_OPTION_INT, (10, 400), log=True, doc="events before it condenses"),
        Tunable("keep_first", "int", 0, MAX_OPTION_INT, (0, 10), doc="first events never condensed"))

    def __init__(self, max_size: int = 80, keep_first: int = 4, summary_tokens: int = 4_000,
                 max_tokens: int | None = None, minimum_progress: float = 0.1) -> None:
        self.max_size = self.TUNABLE["max_size"].check(max_size)
        self.keep_first = self.TUNABLE["keep_first"].check(keep_first)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)
        self.max_tokens = None if max_tokens is None else positive_int("max_tokens", max_tokens)
        if isinstance(minimum_progress, bool) or not isinstance(minimum_progress, (int, float)) \
                or not 0 <= minimum_progress <= 1:
            raise StrategyInputError(f"minimum_progress must be a number from 0 to 1, got {minimum_progress!r}")
        self.minimum_progress = float(minimum_progress)
        if self.max_size // 2 - self.keep_first - 1 < 0:
            raise StrategyInputError(f"keep_first {keep_first} leaves no room in max_size {max_size} "
                                     "(max_size // 2 - keep_first - 1 must be >= 0)")

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        cap = _cap(self.max_tokens, window)
        if len(items) <= self.max_size and window.tokens <= cap:   # no more events than items
            return []
        units = view_units(items)
        total = sum(u.events for u in units)
        hard = window.tokens > cap
        if total <= self.max_size and not hard:
            return []
        tails = [self.max_size // 2 - self.keep_first - 1] if total > self.max_size else []
        if hard:
            tails.append(_token_tail(units, self.keep_first, window.tokens - cap // 2))
        forgotten = _forgotten(units, self.keep_first, min(tails))
        events = sum(u.events for u in forgotten)
        if not forgotten or events < self.minimum_progress * total:
            if not hard:
                return []
            forgotten = []
        if hard and (not forgotten or window.tokens - sum(u.tokens for u in forgotten) + self.summary_tokens > cap):
            forgotten = [u for u in units if u.items[0].role != "overhead"]   # the hard reset: all of it
        if not forgotten:
            return []
        ids = tuple(item.id for unit in forgotten for item in unit.items)
        summary = min(self.summary_tokens, sum(u.tokens for u in forgotten))
        if summary == 0:
            return [Replace(ids, 0)]
        prompt = TEMPLATE_TOKENS + sum(u.preview_tokens for u in forgotten)
        return [Replace(ids, summary, "summary"), Request((), prompt)]

    def __repr__(self) -> str:
        return f"LlmSummarizing(max_size={self.max_size}, keep_first={self.keep_first})"


class AmortizedForgetting:
    """OpenHands V0's ``AmortizedForgettingCondenser`` (``openhands/memory/condenser/impl``), on the same
    events (`view_units`): once the history holds more than ``max_size`` events (100, ``keep_first`` 1),
    all but the first ``keep_first`` and the most recent ``max_size // 2 - keep_first`` are forgotten,
    with no summary. When a call would pass the window, V0 (with ``enable_history_truncation``, its
    default) asks for a condensation instead, which forgets as much; here before the call. The cut points
    fall on a unit's boundary (V0 cuts by events and drops the halves of pairs it leaves; a replay cannot
    split a unit).
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
        units = view_units(items)
        if sum(u.events for u in units) <= self.max_size and not over:
            return []
        forgotten = _forgotten(units, self.keep_first, self.max_size // 2 - self.keep_first)
        return [Replace(tuple(item.id for unit in forgotten for item in unit.items), 0)] if forgotten else []

    def __repr__(self) -> str:
        return f"AmortizedForgetting(max_size={self.max_size}, keep_first={self.keep_first})"


def create_openhands_summarizing_policy(**options) -> LlmSummarizing:
    """OpenHands' LLM-summarizing condenser (see `LlmSummarizing`)."""
    return LlmSummarizing(**options)


def create_amortized_forgetting_policy(**options) -> AmortizedForgetting:
    """OpenHands' amortized forgetting (see `AmortizedForgetting`)."""
    return AmortizedForgetting(**options)
