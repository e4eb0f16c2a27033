"""Context policies against managed strategies: what each costs in input tokens, with the prompt cache, and in
content fetched again, on the same sessions (the "Context policies" section of every report)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ctxbench.sim.analysis.claim_modes import one_claim_mode
from ctxbench.sim.analysis.labels import is_bracket
from ctxbench.sim.analysis.ranking import PRICED_COLUMNS, over_window_column

__all__ = ["POLICY_TABLE_COLUMNS", "compare_policies", "has_policies"]

#: The comparison's columns: who, which model, over how many sessions, then totals over them.
POLICY_TABLE_COLUMNS = ("strategy", "model", "sessions", "input_tokens", "summary_input_tokens",
                        "summary_output_tokens", "cost_tokens", "cost_input_tokens", "cache_saving", "reread_tokens",
                        "compactions", "summary_dropped_tokens", "cache_read_input_tokens", "cache_write_input_tokens", "peak_window_tokens",
                        "over_window_calls", "feasible")


def has_policies(results: pd.DataFrame) -> bool:
    """Whether ``results`` hold a transcript policy's rows or a compacted strategy's (``+``): the runs whose
    reports compare context policies."""
    if "model" not in results.columns or "cost_tokens" not in results.columns:
        return False
    combined = results["strategy"].astype(str).str.contains("+", regex=False)
    return bool((results["model"] == "transcript").any() or combined.any())


def compare_policies(results: pd.DataFrame, budget_tokens: float, order: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per policy and per managed strategy at ``budget_tokens`` (`POLICY_TABLE_COLUMNS`): totals over
    the sessions of its rows (one claim mode) of the billed input tokens (summarization calls included, and
    apart), the summaries' output tokens, the cost of every call in input-token equivalents with the prompt
    cache (``cost_tokens``) and of their input alone (``cost_input_tokens``; ``cache_saving`` = 1 − it /
    input tokens), re-fetched tokens (``reread_tokens``: needed again after leaving the window), compactions,
    what trimmed compaction requests left out of the summaries (``summary_dropped_tokens``; NaN in results
    from before it) and cache reads and writes;
    the most of the window in a turn over those sessions; ``cost_usd`` when the results priced it; and
    ``over_window_calls``, the calls whose prompt was larger than the window: with any, the row is not
    ``feasible`` and its prices (`sim.analysis.ranking.PRICED_COLUMNS`) are NaN, since such a call
    cannot happen. Rows follow ``order`` (the decision view's, `sim.analysis.ranking.ranked`), else
    the feasible ones cheapest first, then the infeasible ones, ties by name. Empty
    without the columns (results from before them) or rows at that budget; the optimal bracket is left
    out (it bounds managed re-reads, not cost).
    """
    if "cost_tokens" not in results.columns or "model" not in results.columns:
        return pd.DataFrame(columns=list(POLICY_TABLE_COLUMNS))
    at = one_claim_mode(results[(results["budget_tokens"] == budget_tokens)
                                & ~results["strategy"].astype(str).map(is_bracket)])
    if at.empty:
        return pd.DataFrame(columns=list(POLICY_TABLE_COLUMNS))
    summed = ["input_tokens", "summary_input_tokens", "summary_output_tokens", "cost_tokens", "cost_input_tokens",
              "reread_tokens", "compactions", "cache_read_input_tokens", "cache_write_input_tokens"] + (
        ["cost_usd"] if "cost_usd" in at.columns else [])
    if "summary_dropped_tokens" in at.columns:
        summed.append("summary_dropped_tokens")
    groups = at.groupby("strategy", observed=True, sort=True)
    table = groups[summed].sum()
    if "summary_dropped_tokens" not in table.columns:
        table["summary_dropped_tokens"] = float("nan")
    table["peak_window_tokens"] = groups["peak_window_tokens"].max()
    table["sessions"] = groups.size()
    table["model"] = groups["model"].first()
    table["cache_saving"] = 1 - table["cost_input_tokens"] / table["input_tokens"].where(table["input_tokens"] > 0)
    column = over_window_column(at)
    table["over_window_calls"] = groups[column].sum() if column else 0
    table["feasible"] = table["over_window_calls"] == 0
    for name in PRICED_COLUMNS:
        if name in table.columns:
            table[name] = table[name].astype(float).where(table["feasible"])
    table = table.reset_index()
    columns = list(POLICY_TABLE_COLUMNS) + (["cost_usd"] if "cost_usd" in at.columns else [])
    if order is not None:
        place = {name: i for i, name in enumerate(order)}
        table = table.assign(_place=table["strategy"].map(place).fillna(len(place)))
        keys = ["_place", "strategy"]
    else:
        table = table.assign(_place=~table["feasible"])
        keys = ["_place", "cost_tokens", "strategy"]
    return table.sort_values(keys, kind="mergesort")[columns].reset_index(drop=True)
