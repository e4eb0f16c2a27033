"""The ranges the numeric options of strategies, policies and `cmd:` specs may take, checked when they are built.

Every integer option (an entry cap, a token count, a threshold) lies between its minimum and
`MAX_OPTION_INT` (2**50, the trace schema's limit on an integer), so the compiled engine and the
pure-Python one take the same values (a count in tokens times the largest bytes per token stays
far inside float64 and, clamped to the largest budget, inside int64). Every time limit in
milliseconds (``--evict-timeout-ms``, ``cmd:...?timeout_ms=``) lies between 1 and
`MAX_TIME_LIMIT_MS` (one day), which ``setitimer`` and a monotonic deadline both hold.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from ctxbench.strategies.errors import StrategyInputError

__all__ = ["MAX_OPTION_INT", "MAX_TIME_LIMIT_MS", "option_int", "option_number", "time_limit_ms", "shown_option"]

MAX_OPTION_INT = 2**50
MAX_TIME_LIMIT_MS = 86_400_000


def option_int(name: str, value: Any, minimum: int = 1, maximum: int = MAX_OPTION_INT, *,
               none: bool = False) -> int | None:
    """``value`` if it is an integer in ``[minimum, maximum]`` (or None, when ``none``), else
    `StrategyInputError` naming ``name``.

    >>> option_int("n", 5, 0)
    5
    >>> option_int("n", 2**60)
    Traceback (most recent call last):
    ...
    ctxbench.strategies.errors.StrategyInputError: n must be an integer from 1 to 1,125,899,906,842,624 (2**50), got 1152921504606846976
    """
    if none and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        top = f"{maximum:,} (2**50)" if maximum == MAX_OPTION_INT else f"{maximum:,}"
        raise StrategyInputError(f"{name} must be an integer from {minimum:,} to {top}{', or none' if none else ''}, "
                                 f"got {shown_option(value)}")
    return value


def option_number(name: str, value: Any, minimum: float, maximum: float, *, open_minimum: bool = False) -> float:
    """``value`` as a float if it is a number in ``[minimum, maximum]`` (``(minimum, maximum]`` when
    ``open_minimum``; ``maximum`` may be infinite, the value never is), else `StrategyInputError` naming ``name``.

    >>> option_number("f", 1, 0, 1, open_minimum=True)
    1.0
    >>> option_number("f", 0, 0, 1, open_minimum=True)
    Traceback (most recent call last):
    ...
    ctxbench.strategies.errors.StrategyInputError: f must be a number in (0, 1], got 0
    """
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):   # an integer past float's range
            number = float(value)
    inside = (number is not None and math.isfinite(number)
              and (minimum < number if open_minimum else minimum <= number) and number <= maximum)
    if not inside:
        top = "inf)" if math.isinf(maximum) else f"{maximum:g}]"
        raise StrategyInputError(f"{name} must be a number in {'(' if open_minimum else '['}{minimum:g}, {top}, "
                                 f"got {shown_option(value)}")
    return number


def time_limit_ms(name: str, value: Any) -> int:
    """``value`` if it is a whole number of milliseconds from 1 to `MAX_TIME_LIMIT_MS`, else
    `StrategyInputError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIME_LIMIT_MS:
        raise StrategyInputError(f"{name} must be a whole number of milliseconds from 1 to {MAX_TIME_LIMIT_MS:,} "
                                 f"(one day), got {shown_option(value)}")
    return value


def shown_option(value: Any) -> str:
    """``value`` as a message quotes it: an integer too long to read by its size (str() refuses past 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
