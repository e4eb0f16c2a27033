"""OpenHands' condensers: the LLM-summarizing condenser and amortized forgetting, counted in events."""

from __future__ import annotations

from collections.abc import Sequence

from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.policies.common import history, positive_int
from ctxbench.strategies.policy import Edit, Replace, TranscriptItem, Window
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["LlmSummarizing", "AmortizedForgetting", "create_openhands_summarizing_policy",
           "create_amortized_forgetting_policy"]


def _forget(items: Sequence[TranscriptItem], max_size: int, keep_first: int, tail: int) -> list[TranscriptItem]:
    """The events to forget once there are more than ``max_size``: all but the first ``keep_first``
    and the last ``tail`` (the overhead is not an event)."""
    if len(items) <= max_size:   # at most as many events as items: no need to count them
        return []
    events = history(items)
    if len(events) <= max_size:
        return []
    return events[keep_first:len(events) - tail]


class LlmSummarizing:
    """OpenHands' ``LLMSummarizingCondenser``: once the history holds more than ``max_size`` events
    (80 and ``keep_first`` 4 in its V1 SDK's default agent; 120/4 in the app), the events after the
    first ``keep_first`` are summarised, all but the most recent ``max_size // 2 - keep_first - 1``,
    into one summary event of ``summary_tokens`` (4,000; the model writes it, OpenHands sets no size):
    about ``max_size // 2`` events remain. An event is any item but the overhead (a message, a tool
    call, a tool result).
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

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        forgotten = _forget(items, self.max_size, self.keep_first, self.max_size // 2 - self.keep_first - 1)
        if not forgotten:
            return []
        return [Replace(tuple(i.id for i in forgotten), min(self.summary_tokens, sum(i.tokens for i in forgotten)),
                        "summary")]

    def __repr__(self) -> str:
        return f"LlmSummarizing(max_size={self.max_size}, keep_first={self.keep_first})"


class AmortizedForgetting:
    """OpenHands' ``AmortizedForgettingCondenser``: once the history holds more than ``max_size``
    events (100, ``keep_first`` 1), all but the first ``keep_first`` and the most recent
    ``max_size // 2 - keep_first`` are forgotten, with no summary.
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
        forgotten = _forget(items, self.max_size, self.keep_first, self.max_size // 2 - self.keep_first)
        return [Replace(tuple(i.id for i in forgotten), 0)] if forgotten else []

    def __repr__(self) -> str:
        return f"AmortizedForgetting(max_size={self.max_size}, keep_first={self.keep_first})"


def create_openhands_summarizing_policy(**options) -> LlmSummarizing:
    """OpenHands' LLM-summarizing condenser (see `LlmSummarizing`)."""
    return LlmSummarizing(**options)


def create_amortized_forgetting_policy(**options) -> AmortizedForgetting:
    """OpenHands' amortized forgetting (see `AmortizedForgetting`)."""
    return AmortizedForgetting(**options)
