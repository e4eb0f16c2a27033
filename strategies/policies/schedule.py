"""A compaction schedule: the whole history replaced by one summary at given model calls (docs/design.md §8)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.policies.common import history, positive_int
from ctxbench.strategies.policy import Edit, Replace, TranscriptItem, Window
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["SchedulePolicy", "create_schedule_policy", "parse_calls"]


def parse_calls(at) -> tuple[int, ...]:
    """The calls of a schedule, ascending and distinct: a sequence of integers >= 0 or their text joined by ``:``
    (``"3:7"``; ``""`` for none), else `StrategyInputError` naming the option.

    >>> parse_calls("7:3"), parse_calls(""), parse_calls((2,))
    ((3, 7), (), (2,))
    """
    parts: Iterable = ([] if at == "" else str(at).split(":")) if isinstance(at, (str, int)) else at
    try:
        calls = sorted({positive_int("at", int(p) if isinstance(p, str) and p.strip().isdigit() else p, 0)
                        for p in parts})
    except TypeError:
        raise StrategyInputError(f"option at must be call numbers joined by ':', got {at!r:.80}") from None
    return tuple(calls)


class SchedulePolicy:
    """Whole-history compaction at the model calls ``at`` (numbered from 0, as `Window.turn`): the history but
    the fixed overhead is replaced by one summary of ``summary_tokens`` (at most what it replaces), as Claude
    Code's compaction with no files re-attached; a file read enters at most ``read_tokens`` (None: whole), as
    Claude Code's Read tool caps it. The replay of a schedule `sim.analysis.schedule` finds."""

    TUNABLE = declare(Tunable("summary_tokens", "int", 1, MAX_OPTION_INT, (1_000, 8_000), managed=False,
                              doc="tokens of the summary each compaction writes"))

    def __init__(self, at: Sequence[int] | str = (), summary_tokens: int = 4_000,
                 read_tokens: int | None = None) -> None:
        self.at = frozenset(parse_calls(at))
        self.summary_tokens = self.TUNABLE["summary_tokens"].check(summary_tokens)
        self.read_tokens = None if read_tokens is None else positive_int("read_tokens", read_tokens)

    def admit(self, item: TranscriptItem) -> int:
        """A file read enters at most ``read_tokens``."""
        if self.read_tokens is not None and item.role == "result" and item.ref:
            return min(item.tokens, self.read_tokens)
        return item.tokens

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        if window.turn not in self.at:
            return []
        old = history(items)
        if not old:
            return []
        return [Replace(tuple(i.id for i in old), min(self.summary_tokens, sum(i.tokens for i in old)), "summary")]

    def compaction_schedule(self) -> tuple[int, int | None, bool]:
        """See `ClaudeCodePolicy.compaction_schedule`: the schedules of its own summary and reads, one of them."""
        return self.summary_tokens, self.read_tokens, True

    def __repr__(self) -> str:
        reads = "" if self.read_tokens is None else f", read_tokens={self.read_tokens}"
        calls = ":".join(map(str, sorted(self.at)))
        return f"SchedulePolicy(at={calls!r}, summary_tokens={self.summary_tokens}{reads})"


def create_schedule_policy(**options) -> SchedulePolicy:
    """Compaction at given calls (see `SchedulePolicy`)."""
    return SchedulePolicy(**options)
