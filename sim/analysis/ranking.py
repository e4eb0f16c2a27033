"""The decision view: every configuration at one budget, feasible ones ranked by one metric, with CIs, multiples of
the optimum and the Pareto frontier of cost against re-reads (docs/design.md §5)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.bracket import bracket_gaps, multiple
from ctxbench.sim.analysis.claim_modes import one_claim_mode
from ctxbench.sim.analysis.frontier import pareto_frontier
from ctxbench.sim.analysis.labels import BRACKET_LOWER, bound_kind
from ctxbench.sim.analysis.metrics import aggregate
from ctxbench.sim.errors import InputError

__all__ = ["RANK_METRICS", "RANK_BY", "DEFAULT_RANK_BY", "PRICED_COLUMNS", "ranked", "headline_budget",
           "budget_or_headline", "check_rank_by", "over_window_column"]

RANK_METRICS = ("reread_tokens", "miss_rate", "capacity_miss_rate", "evict_p99_ns")
#: The metrics of the decision view that not every results frame has (older results lack them).
DECISION_METRICS = ("cost_tokens", "compactions")
#: What ``--rank-by`` orders the feasible configurations by (smaller first), and what each is.
RANK_BY = {
    "reread_tokens": "tokens of content needed again after it left the window",
    "cost_tokens": "the cost of every call (summarization calls included) with the prompt cache, output at 5x "
                   "input, in input-token equivalents",
    "compactions": "compactions of the conversation",
    "evict_p99_ns": "99th percentile of the eviction (or policy) call",
    "miss_rate": "misses per access",
}
DEFAULT_RANK_BY = "reread_tokens"
#: The columns a call above the window makes meaningless: an infeasible configuration is never priced.
PRICED_COLUMNS = ("cost_tokens", "cost_input_tokens", "input_tokens", "cost_usd", "cache_saving",
                  "cache_read_input_tokens", "cache_write_input_tokens", "uncached_input_tokens", "input_tokens_per_call",
                  "peak_input_tokens", "summary_input_tokens", "summary_output_tokens")


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


def check_rank_by(name: str) -> str:
    """``name`` when ``--rank-by`` accepts it, else `InputError` listing the choices."""
    if name not in RANK_BY:
        raise InputError(f"--rank-by: unknown metric {name!r}; expected one of {', '.join(RANK_BY)}")
    return name


def over_window_column(results: pd.DataFrame) -> str | None:
    """The results' count of calls above the window (``over_window_turns`` in results from before the rename)."""
    return next((c for c in ("over_window_calls", "over_window_turns") if c in results.columns), None)


def ranked(results: pd.DataFrame, budget_tokens: float | None = None, *, seed: int = 0,
           claims: str | None = None, rank_by: str = DEFAULT_RANK_BY) -> pd.DataFrame:
    """One row per configuration (a strategy, a ``STRATEGY+POLICY`` or a context policy) at one budget, with
    the mean per session and a 95% bootstrap CI of each metric, in the decision view's order.

    - Feasible configurations first (no call's prompt larger than the window), ranked (``rank``) by
      ``rank_by`` (`RANK_BY`); ties by re-read tokens, miss rate, then name, so the order is stable.
    - Then the infeasible ones (``feasible`` False; ``over_window_calls`` and ``over_window_share``, of
      their calls), unranked, in the same order and never priced: `PRICED_COLUMNS` are NaN.
    - Then the optimum and the bracket (``opt:exact``, ``opt:lower``, ``opt:belady-size``): bounds, not
      contenders, with ``rank`` NA and ``bound`` = ``"optimum"``/``"lower"``/``"upper"``.

    ``frontier`` marks the feasible configurations on the Pareto frontier of cost (``cost_tokens``: every
    call, summarization calls and their output included, with the prompt cache) against re-read tokens (no other feasible row is at most as large on both and smaller on one).
    Each row with its sessions' optimum (managed strategies, ``STRATEGY+compaction`` under its own
    compaction; `sim.analysis.optimum`) gets ``x_opt`` and ``x_opt_high`` (its re-read tokens over the
    optimum's and over the optimum's proven lower bound, totals over sessions) and ``opt_exact``
    (proven on every session); with the bracket, ``x_lower``, ``x_belady`` and ``excess_tokens``
    (`bracket_gaps`). When multi-arm sessions ran under several claim modes, the ranking uses
    ``claims`` (default: the first mode in the results) so that no session counts twice.
    """
    check_rank_by(rank_by)
    budget = headline_budget(results) if budget_tokens is None else budget_tokens
    at = one_claim_mode(results[results["budget_tokens"] == budget], claims)
    if rank_by not in at.columns:
        raise InputError(f"--rank-by {rank_by}: these results have no {rank_by!r} column")
    metrics = RANK_METRICS + tuple(m for m in DECISION_METRICS if m in at.columns)
    table = aggregate(at, metrics, by=("strategy",), seed=seed)
    groups = at.groupby("strategy", observed=True)
    if "model" in at.columns:
        table.insert(1, "model", table["strategy"].map(groups["model"].first()))
    if "pure" in at.columns:
        table["pure"] = table["strategy"].map(groups["pure"].all())
    table["bound"] = table["strategy"].map(bound_kind)
    if "pure" in table.columns:
        table["pure"] = table["pure"].astype(object).where(table["strategy"] != BRACKET_LOWER, None)
    table = _with_feasibility(table, at, groups)
    table = _with_optimum_multiples(table, at)
    table = _with_schedule_multiples(table, at)
    order = {"contender": 0, "infeasible": 1, "optimum": 2, "schedule": 3, "lower": 4, "upper": 5}
    kind = table["bound"].where(table["bound"].notna(), np.where(table["feasible"], "contender", "infeasible"))
    table = (table.assign(_kind=kind.map(order))
             .sort_values(["_kind", rank_by, "reread_tokens", "miss_rate", "strategy"], kind="mergesort",
                          na_position="last")
             .drop(columns="_kind").reset_index(drop=True))
    contender = table["bound"].isna() & table["feasible"].astype(bool)
    table.insert(0, "rank", contender.cumsum().where(contender).astype("Int64"))
    table.insert(2, "budget_tokens", budget)
    cost = table["cost_tokens"] if "cost_tokens" in table.columns else pd.Series(np.nan, table.index)
    table["frontier"] = contender & pareto_frontier(table["reread_tokens"].where(contender), cost.where(contender))
    gaps = bracket_gaps(at, by=("strategy",))
    if not gaps.empty:
        wanted = ["strategy", "x_lower", "x_belady", "excess_tokens"]
        if "x_opt" not in table.columns:
            wanted += [c for c in ("x_opt", "x_opt_high", "opt_exact") if c in gaps.columns]
        table = table.merge(gaps[wanted], on="strategy", how="left")
    return table


def _with_feasibility(table: pd.DataFrame, at: pd.DataFrame, groups) -> pd.DataFrame:
    """``over_window_calls``, ``over_window_share`` and ``feasible`` of each row (None for a bound), and the
    priced columns of an infeasible row and of a bound cleared."""
    column = over_window_column(at)
    over = (table["strategy"].map(groups[column].sum()) if column else pd.Series(0.0, index=table.index)).fillna(0)
    calls = table["strategy"].map(groups["turns"].sum()) if "turns" in at.columns else pd.Series(np.nan, table.index)
    bound = table["bound"].notna()
    table["over_window_calls"] = over.where(~bound)
    table["over_window_share"] = (over / calls.where(calls > 0)).where(~bound)
    table["feasible"] = (over == 0).astype(object).where(~bound, None)
    # A bound is not a configuration: it has no bill either, but for the cheapest schedule, whose bill it is.
    unpriced = (bound & (table["bound"] != "schedule")) | (over > 0)
    for name in PRICED_COLUMNS:
        for column_name in (name, f"{name}_lo", f"{name}_hi"):
            if column_name in table.columns:
                table.loc[unpriced, column_name] = np.nan
    return table


def _with_optimum_multiples(table: pd.DataFrame, at: pd.DataFrame) -> pd.DataFrame:
    """``x_opt``, ``x_opt_high`` and ``opt_exact`` of each row that carries its sessions' optimum
    (``opt_reread_tokens``, ``opt_lower_tokens``, ``opt_exact`` of `sim.analysis.grid`)."""
    if "opt_reread_tokens" not in at.columns or at["opt_reread_tokens"].isna().all():
        return table
    with_opt = at[at["opt_reread_tokens"].notna()]
    sums = with_opt.groupby("strategy", observed=True).agg(
        reread=("reread_tokens", "sum"), optimum=("opt_reread_tokens", "sum"), lower=("opt_lower_tokens", "sum"),
        exact=("opt_exact", lambda s: bool(s.astype(bool).all())), rows=("session", "size"))
    complete = sums[sums["rows"] == at.groupby("strategy", observed=True).size().reindex(sums.index)]
    table["x_opt"] = table["strategy"].map(multiple(complete["reread"], complete["optimum"]))
    table["x_opt_high"] = table["strategy"].map(multiple(complete["reread"], complete["lower"]))
    table["opt_exact"] = table["strategy"].map(complete["exact"]).astype(object)
    table["x_opt_of"] = table["strategy"].map(lambda s: "reread_tokens" if s in complete.index else None)
    return table


def _with_schedule_multiples(table: pd.DataFrame, at: pd.DataFrame) -> pd.DataFrame:
    """A compaction policy's ``x_opt`` (its cost over the cheapest schedules' with no more re-reads, totals over
    the sessions where a schedule re-reads as little: ``opt_sessions`` of them), ``x_opt_high`` (over their
    Lagrangian bound), ``opt_exact`` (met on each of them) and ``x_opt_of`` ``cost_tokens``, from the columns
    `sim.analysis.schedule_bound.policy_columns` gives its rows; none unless every row has its bound."""
    if "opt_bound" not in at.columns or at["opt_bound"].isna().all():
        return table
    with_bound = at[at["opt_bound"].notna()]
    rows = at.groupby("strategy", observed=True).size()
    reached = with_bound[with_bound["opt_cost_tokens"].notna()]
    sums = reached.groupby("strategy", observed=True).agg(
        cost=("cost_tokens", "sum"), upper=("opt_cost_tokens", "sum"), lower=("opt_cost_lower_tokens", "sum"),
        exact=("opt_exact", lambda s: bool(s.astype(bool).all())), sessions=("session", "size"))
    complete = with_bound.groupby("strategy", observed=True).size()
    complete = complete[complete == rows.reindex(complete.index)].index
    for name in ("x_opt", "x_opt_high", "opt_exact", "x_opt_of", "opt_sessions"):
        if name not in table.columns:
            table[name] = None if name in ("opt_exact", "x_opt_of") else np.nan
    table["opt_exact"] = table["opt_exact"].astype(object)
    table["x_opt_of"] = table["x_opt_of"].astype(object)
    mine = table["strategy"].isin(complete)
    if not mine.any():
        return table
    names = table.loc[mine, "strategy"]
    table.loc[mine, "x_opt"] = names.map(multiple(sums["cost"], sums["upper"]))
    table.loc[mine, "x_opt_high"] = names.map(multiple(sums["cost"], sums["lower"]))
    table.loc[mine, "opt_exact"] = names.map(sums["exact"])
    table.loc[mine, "opt_sessions"] = names.map(sums["sessions"]).fillna(0)
    table.loc[mine, "x_opt_of"] = "cost_tokens"
    return table
