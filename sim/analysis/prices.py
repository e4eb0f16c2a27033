"""Dollar prices of tokens per model: a small table with each price's source and date (``--price MODEL``)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxbench.sim.errors import InputError

__all__ = ["Price", "PRICES", "SOURCE", "price_for", "dollars"]

#: Where the prices come from: Anthropic's published price list ("Model pricing": base input and output tokens;
#: 5-minute cache writes cost 1.25x, 1-hour writes 2x and cache hits 0.1x of the input price).
SOURCE = "https://platform.claude.com/docs/en/about-claude/pricing"


@dataclass(frozen=True)
class Price:
    """What a million input and a million output tokens of ``model`` cost, in US dollars, from ``source`` as read
    on ``checked``."""

    model: str
    usd_per_mtok: float
    usd_per_mtok_output: float
    source: str = SOURCE
    checked: str = "2026-12-01"

    @property
    def output_ratio(self) -> float:
        """What an output token costs in input tokens."""
        return self.usd_per_mtok_output / self.usd_per_mtok


#: The models ``--price`` knows, by name (Claude Opus 4.6 is the model of the bundled real sessions). Output costs
#: 5x input on each, the ratio `sim.engine.measures.OUTPUT_PRICE` prices ``cost_tokens`` at.
PRICES: dict[str, Price] = {p.model: p for p in (
    Price("claude-opus-4-6", 5.0, 25.0),
    Price("claude-opus-4-5", 5.0, 25.0),
    Price("claude-sonnet-4-5", 3.0, 15.0),
    Price("claude-haiku-4-5", 1.0, 5.0),
)}


def price_for(model: str) -> Price:
    """The price of ``model``; an unknown name is an `InputError` listing the known ones."""
    try:
        return PRICES[model]
    except KeyError:
        raise InputError(f"--price: unknown model {model!r}; known: {', '.join(PRICES)}") from None


def dollars(input_token_equivalents, output_tokens, price: Price):
    """The dollars of calls whose input costs ``input_token_equivalents`` (`sim.engine.measures`'
    ``cost_input_tokens``: the prompt cache's reads and writes priced) and that wrote ``output_tokens``
    (``summary_output_tokens``), at ``price``; numbers or columns alike.

    >>> round(dollars(2_000_000, 100_000, PRICES["claude-sonnet-4-5"]), 2)
    7.5
    """
    return (input_token_equivalents * price.usd_per_mtok + output_tokens * price.usd_per_mtok_output) / 1_000_000
