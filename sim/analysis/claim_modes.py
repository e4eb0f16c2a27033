"""Compare claim modes on the same multi-arm sessions: lost work, thrashing, re-reads, waiting."""

from __future__ import annotations

import pandas as pd

from ctxbench.sim.engine.claims import ClaimConfig, MODES
from ctxbench.sim.errors import InputError

__all__ = ["COMPARED", "parse_claim_modes", "compare_claim_modes", "one_claim_mode"]

COMPARED = ("lines_lost", "thrashing_events", "invalidation_misses", "invalidation_bytes", "blocked_turns",
            "blocked_ms", "handoffs", "pauses")


def parse_claim_modes(text: str, **options) -> list[ClaimConfig]:
    """``"strict,lazy,disabled"`` → one `ClaimConfig` per mode, sharing ``options``.

    >>> [c.mode for c in parse_claim_modes("strict, lazy")]
    ['strict', 'lazy']
    """
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes:
        raise InputError("--claims needs at least one of " + ", ".join(MODES))
    if len(set(modes)) != len(modes):
        raise InputError(f"--claims names a mode twice: {text!r}")
    return [ClaimConfig(mode=m, **options) for m in modes]


def compare_claim_modes(arms: pd.DataFrame, by_arm: bool = False) -> pd.DataFrame:
    """Totals per (strategy, budget, claim mode), or per arm too, over the multi-arm sessions."""
    if arms.empty:
        return pd.DataFrame()
    keys = ["strategy", "budget_tokens", "claims"] + (["arm"] if by_arm else [])
    table = arms.groupby(keys, sort=False, observed=True)[list(COMPARED)].sum().reset_index()
    return table


def one_claim_mode(frame: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Rows of single-arm sessions and of one claim mode (default: the first run), so none counts twice."""
    if "claims" not in frame.columns or not frame["claims"].notna().any():
        return frame
    if mode is None:
        mode = frame["claims"].dropna().iloc[0]
    return frame[frame["claims"].isna() | (frame["claims"] == mode)]
