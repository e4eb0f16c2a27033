"""Rank strategies by re-read cost, with bootstrap CIs across sessions."""

from __future__ import annotations

import pandas as pd

from sim.analysis.bracket import BRACKET_LOWER, BRACKET_UPPER, bracket_gaps, describe_gap
from sim.analysis.claim_modes import one_claim_mode
from sim.presentation.markdown import escape
from sim.analysis.metrics import aggregate

__all__ = ["RANK_METRICS", "ranked", "headline_budget", "ranking_markdown", "fmt_ci", "ci_cell", "rank_cell"]

_BOUND_KIND = {BRACKET_LOWER: "lower", BRACKET_UPPER: "upper"}
RANK_METRICS = ("reread_tokens", "miss_rate", "capacity_miss_rate", "evict_p99_ns")


def headline_budget(results: pd.DataFrame) -> float:
    """The budget a single ranking is shown at: 200,000 tokens when run, else the largest."""
    budgets = sorted(results["budget_tokens"].unique())
    return 200_000 if 200_000 in budgets else budgets[-1]


def ranked(results: pd.DataFrame, budget_tokens: float | None = None, *, seed: int = 0,
           claims: str | None = None) -> pd.DataFrame:
    """One row per strategy at one budget, best (fewest re-read tokens) first, with CIs.

    Ties on re-read tokens break by miss rate, then by name, so the order is stable. When
    multi-arm sessions ran under several claim modes, the ranking uses ``claims`` (default: the
    first mode in the results) so that no session counts twice.

    Rows of the optimal bracket (``opt:lower``, ``opt:belady-size``; `sim.analysis.bracket`) are bounds,
    not contenders: they come last with ``rank`` NA and ``bound`` = ``"lower"``/``"upper"``.
    With a bracket, each strategy also gets its gap to it, totals over sessions
    (`bracket_gaps`): ``x_lower`` and ``x_belady`` (re-read tokens as a multiple of each
    bound's; ``inf`` when the bound is zero and the strategy is not) and ``excess_tokens``.
    """
    budget = headline_budget(results) if budget_tokens is None else budget_tokens
    at = one_claim_mode(results[results["budget_tokens"] == budget], claims)
    table = aggregate(at, RANK_METRICS, by=("strategy",), seed=seed)
    if "pure" in at.columns:
        table["pure"] = table["strategy"].map(at.groupby("strategy")["pure"].all())
    table["bound"] = table["strategy"].map(_BOUND_KIND)
    if "pure" in table.columns:
        table["pure"] = table["pure"].astype(object).where(table["strategy"] != BRACKET_LOWER, None)
    table = (table.assign(_bound=table["bound"].map({"lower": 1, "upper": 2}).fillna(0))
             .sort_values(["_bound", "reread_tokens", "miss_rate", "strategy"], kind="mergesort")
             .drop(columns="_bound").reset_index(drop=True))
    ranks = table["bound"].isna().cumsum().where(table["bound"].isna())
    table.insert(0, "rank", ranks.astype("Int64"))
    table.insert(2, "budget_tokens", budget)
    gaps = bracket_gaps(at, by=("strategy",))
    if not gaps.empty:
        table = table.merge(gaps[["strategy", "x_lower", "x_belady", "excess_tokens"]], on="strategy", how="left")
    return table


def fmt_ci(row, metric: str, scale: float = 1.0, digits: int = 0, pct: bool = False) -> str:
    """``mean [lo–hi]`` of a metric in an aggregated row, scaled, as a percentage or a number."""
    mean, lo, hi = (row[metric] * scale, row[f"{metric}_lo"] * scale, row[f"{metric}_hi"] * scale)
    if pct:
        return f"{mean:.1%} [{lo:.1%}–{hi:.1%}]"
    return f"{mean:,.{digits}f} [{lo:,.{digits}f}–{hi:,.{digits}f}]"


def ci_cell(row, metric: str, scale: float = 1.0, digits: int = 0, pct: bool = False) -> str:
    """`_fmt_ci`, or a dash for a metric the row does not define (the lower bound's latency)."""
    return "—" if pd.isna(row[metric]) else fmt_ci(row, metric, scale, digits, pct)


def rank_cell(row) -> str:
    """The rank, or ``bound`` for a bracket row."""
    return "bound" if pd.isna(row["rank"]) else str(row["rank"])


def ranking_markdown(table: pd.DataFrame) -> str:
    """The ranked table as GitHub markdown (names escaped); with a bracket, its bounds (unranked) and
    each gap to them."""
    gaps = "bound" in table.columns and table["bound"].notna().any()
    lines = ["| rank | strategy | pure | re-read tokens [95% CI] | miss rate [95% CI] | evict p99 µs [95% CI] |"
             + (" re-reads vs bracket |" if gaps else ""),
             "|---:|---|:-:|---:|---:|---:|" + ("---|" if gaps else "")]
    for _, r in table.iterrows():
        pure = "" if "pure" not in r or pd.isna(r["pure"]) else ("yes" if r["pure"] else "no")
        lines.append(f"| {rank_cell(r)} | {escape(r['strategy'])} | {pure} | {fmt_ci(r, 'reread_tokens')} | "
                     f"{fmt_ci(r, 'miss_rate', pct=True)} | {ci_cell(r, 'evict_p99_ns', 1e-3, 1)} |"
                     + (f" {describe_gap(r)} |" if gaps else ""))
    return "\n".join(lines)
