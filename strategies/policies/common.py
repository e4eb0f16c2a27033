"""What the agents' policies share: checked options, and the parts of a transcript they look at."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ctxbench.strategies.limits import option_int
from ctxbench.strategies.policy import TranscriptItem

__all__ = ["positive_int", "history", "results_newest_first"]


def positive_int(name: str, value, minimum: int = 1) -> int:
    """``value`` if it is an integer from ``minimum`` to 2**50 (`strategies.limits`), else
    `StrategyInputError` naming ``name``."""
    return option_int(name, value, minimum)


def history(items: Sequence[TranscriptItem]) -> list[TranscriptItem]:
    """Every item but the fixed overhead, in transcript order."""
    return [item for item in items if item.role != "overhead"]


def results_newest_first(items: Sequence[TranscriptItem]) -> Iterator[tuple[int, TranscriptItem]]:
    """``(index, item)`` of the tool results (placeholders included), from the end of the transcript."""
    for index, item in zip(range(len(items) - 1, -1, -1), reversed(items)):
        role = item.role
        if role == "result" or role == "placeholder":
            yield index, item
