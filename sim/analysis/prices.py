"""Dollar prices of input tokens per model: a small table with each price's source and date (``--price MODEL``)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxbench.sim.errors import InputError

__all__ = ["Price", "PRICES", "SOURCE", "price_for", "dollars"]

#: Where the prices come from: Anthropic's published price list ("Model pricing": base input tokens;
#: 5-minute cache writes cost 1.25x, 1-hour writes 2x and cache hits 0.1x of it).
SOURCE = "https://platform.claude.com/docs/en/about-claude/pricing"


@dataclass(frozen=True)
class Price:
    """What a million input tokens of ``model`` cost, in US dollars, from ``source`` as read on ``checked``."""

    model: str
    usd_per_mtok: float
    source: str = SOURCE
    checked: str = "2026-12-01"


#: The models ``--price`` knows, by name (Claude Opus 4.6 is the model of the bundled real sessions).
PRICES: dict[str, Price] = {p.model: p for p in (
    Price("claude-opus-4-6", 5.0),
    Price("claude-opus-4-5", 5.0),
    Price("claude-sonnet-4-5", 3.0),
    Price("claude-haiku-4-5", 1.0),
)}


def price_for(model: str) -> Price:
    """The price of ``model``; an unknown name is an `InputError` listing the known ones."""
    try:
        return PRICES[model]
    except KeyError:
        raise InputError(f"--price: unknown model {model!r}; known: {', '.join(PRICES)}") from None


def dollars(input_token_equivalents: float, price: Price) -> float:
    """The dollars of a cost in input-token equivalents (`sim.engine.measures`' ``cost_input_tokens``).

    >>> round(dollars(2_000_000, PRICES["claude-sonnet-4-5"]), 2)
    6.0
    """
    return input_token_equivalents * price.usd_per_mtok / 1_000_000
