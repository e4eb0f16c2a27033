"""Rank strategies by re-read cost, with bootstrap CIs across sessions."""

from __future__ import annotations

import pandas as pd

from sim.analysis.bracket import bracket_gaps
from sim.analysis.claim_modes import one_claim_mode
from sim.analysis.labels import BOUND_KINDS, BRACKET_LOWER
from sim.analysis.metrics import aggregate
from sim.errors import InputError

__all__ = ["RANK_METRICS", "ranked", "headline_budget", "budget_or_headline"]

RANK_METRICS = ("reread_tokens", "miss_rate", "capacity_miss_rate", "evict_p99_ns")


def headline_budget(results: pd.DataFrame) -> float:
    """The budget a single ranking is shown at: 200,000 tokens when run, else the largest."""
    budgets = sorted(results["budget_tokens"].unique())
    return 200_000 if 200_000 in budgets else budgets[-1]


def budget_or_headline(frame: pd.DataFrame, budget_tokens: float | None) -> float:
    """``budget_tokens`` when ``frame`` has rows at it (else `InputError`), or the headline budget when None."""
    if budget_tokens is None:
        return headline_budget(frame)
    if not (frame["budget_tokens"] == budget_tokens).any():
        known = ", ".join(f"{b:,.0f}" for b in sorted(frame["budget_tokens"].unique()))
        raise InputError(f"no results at budget {budget_tokens:,.0f} tokens; budgets run: {known}")
    return budget_tokens


def ranked(results: pd.DataFrame, budget_tokens: float | None = None, *, seed: int = 0,
           claims: str | None = None) -> pd.DataFrame:
    """One row per strategy at one budget, best (fewest re-read tokens) first, with CIs.

    Ties on re-read tokens break by miss rate, then by name, so the order is stable. When
    multi-arm sessions ran under several claim modes, the ranking uses ``claims`` (default: the
    first mode in the results) so that no session counts twice.

    Rows of the optimum and the bracket (``opt:exact``, ``opt:lower``, ``opt:belady-size``;
    `sim.analysis.optimum`, `sim.analysis.bracket`) are bounds, not contenders: they come last with
    ``rank`` NA and ``bound`` = ``"optimum"``/``"lower"``/``"upper"``. With a bracket, each strategy
    also gets its gap to it, totals over sessions (`bracket_gaps`): ``x_opt`` and ``x_opt_high``
    (re-read tokens as a multiple of the optimum, and of its proven lower bound), ``opt_exact``,
    ``x_lower`` and ``x_belady`` (of each bound's; ``inf`` when the bound is zero and the strategy is
    not) and ``excess_tokens``.
    """
    budget = headline_budget(results) if budget_tokens is None else budget_tokens
    at = one_claim_mode(results[results["budget_tokens"] == budget], claims)
    table = aggregate(at, RANK_METRICS, by=("strategy",), seed=seed)
    if "pure" in at.columns:
        table["pure"] = table["strategy"].map(at.groupby("strategy")["pure"].all())
    table["bound"] = table["strategy"].map(BOUND_KINDS)
    if "pure" in table.columns:
        table["pure"] = table["pure"].astype(object).where(table["strategy"] != BRACKET_LOWER, None)
    table = (table.assign(_bound=table["bound"].map({"optimum": 1, "lower": 2, "upper": 3}).fillna(0))
             .sort_values(["_bound", "reread_tokens", "miss_rate", "strategy"], kind="mergesort")
             .drop(columns="_bound").reset_index(drop=True))
    ranks = table["bound"].isna().cumsum().where(table["bound"].isna())
    table.insert(0, "rank", ranks.astype("Int64"))
    table.insert(2, "budget_tokens", budget)
    gaps = bracket_gaps(at, by=("strategy",))
    if not gaps.empty:
        wanted = ["strategy", "x_lower", "x_belady", "excess_tokens", "x_opt", "x_opt_high", "opt_exact"]
        table = table.merge(gaps[[c for c in wanted if c in gaps.columns]], on="strategy", how="left")
    return table
