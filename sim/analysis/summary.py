"""One summary of a run's results, computed once, that the terminal, Markdown and HTML renderers draw."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.bracket import bracket_gaps
from ctxbench.sim.analysis.claim_modes import compare_claim_modes, one_claim_mode
from ctxbench.sim.analysis.labels import is_bracket
from ctxbench.sim.analysis.schedule_bound import suite_frontier
from ctxbench.sim.analysis.policies import compare_policies, has_policies
from ctxbench.sim.analysis.purity import PURITY_COLUMNS, price_of_purity
from ctxbench.sim.analysis.ranking import DEFAULT_RANK_BY, budget_or_headline, check_rank_by, headline_budget, ranked
from ctxbench.sim.engine.measures import DEFAULT_BYTES_PER_TOKEN
from ctxbench.sim.errors import InputError

__all__ = ["ClaimFocus", "Focus", "RunSummary", "summarise_run", "pick_session", "focus_budget", "json_records"]


@dataclass(frozen=True)
class ClaimFocus:
    """Claim modes compared for one strategy at one budget, totals over the multi-arm sessions and their arms.

    - ``strategy``: the best-ranked strategy at the headline budget among those with per-arm rows
      (the first by name when none is ranked);
    - ``budget_tokens``: the headline budget, or the largest one with per-arm rows when it has none;
    - ``sessions``: the multi-arm sessions counted;
    - ``totals``: one row per claim mode, in the order run (`compare_claim_modes`'s columns);
    - ``per_arm``: one row per claim mode and arm, modes in the order run, ``main`` first within each.
    """

    strategy: str
    budget_tokens: float
    sessions: int
    totals: pd.DataFrame
    per_arm: pd.DataFrame


@dataclass(frozen=True)
class Focus:
    """What the one-session figures show (occupancy, timeline), when the per-turn log was kept.

    - ``budget_tokens``: the headline budget, unless no strategy has a capacity miss there; then
      the largest budget where one does (`focus_budget`);
    - ``trace``, ``session``: the session asked for, or the one with the most capacity misses at
      that budget (`pick_session`);
    - ``strategy``: the timeline's strategy: the one asked for, or the best-ranked at that budget.
    """

    budget_tokens: float
    trace: str
    session: str
    strategy: str

    @property
    def key(self) -> str:
        """``TRACE/SESSION``, as the figures and ``--session`` name it."""
        return f"{self.trace}/{self.session}"


@dataclass(frozen=True)
class RunSummary:
    """Everything the terminal tables of ``ctxbench run``, ``summary.md``, ``report.md`` and
    ``report.html`` show about a run, computed once by `summarise_run`; renderers draw it as it is.

    The workload:

    - ``meta``: the run's ``meta.json`` (version, commit, creation time, machine, configuration,
      elapsed time, the first violation messages), as read; ``{}`` when there is none;
    - ``budget_tokens``: the headline budget (`headline_budget`: 200,000 tokens when run, else the
      largest); ``budgets``: every budget run, ascending;
    - ``strategies``: every strategy label in the results, bracket rows included, sorted;
    - ``traces``, ``sessions``, ``rows``: distinct traces, distinct (trace, session) pairs and
      result rows; ``sessions_at_budget``: the sessions with rows at the headline budget;
    - ``bytes_per_token``: the configured ratio, else the one the budgets imply, else the default.

    The analysis:

    - ``ranking``: the decision view, `ranked` at the headline budget by ``rank_by``: one row per
      configuration with 95% bootstrap CIs, feasible ones ranked first, then the infeasible ones
      (unranked, never priced), the optimum's and the bracket's rows last (``rank`` NA), each row's
      multiple of its optimum and the Pareto frontier of cost against re-reads (``frontier``);
      ``rank_by``: the metric it ranks by (`sim.analysis.ranking.RANK_BY`);
    - ``miss_rate_by_budget``: mean miss rate per session, one row per strategy (the index), one
      column per budget;
    - ``bracket``: `bracket_gaps` per strategy and budget (first claim mode only); empty without
      a bracket;
    - ``purity``: `price_of_purity`, every claim mode; empty unless pure and stateful strategies
      both ran; ``purity_mode`` and ``purity_shown``: the first claim mode (None without modes)
      and its rows, the ones the report shows;
    - ``claim_modes``: `compare_claim_modes` totals per strategy, budget and claim mode; empty
      without multi-arm sessions; ``claim_modes_at_budget``: its rows at the headline budget;
      ``claim_focus``: the report's comparison (`ClaimFocus`), None without multi-arm sessions;
    - ``violations``: turns whose answer broke the contract (each gave one message), counted in
      lenient mode; ``violations_by_strategy``: the strategies with any, in name order, and their
      counts; ``violation_messages``: the first messages kept in ``meta.json``;
    - ``focus``: the one-session figures' `Focus`, None without a per-turn log;
    - ``policies``: `compare_policies` at the headline budget, in the ranking's order (billed input
      tokens, the summarization calls' and the summaries', the cost of every call with the prompt cache,
      re-fetched tokens and compactions of each policy and managed strategy; an infeasible one's prices
      cleared), empty unless a context policy or a compacted strategy ran (`has_policies`); ``cache_ttl``,
      the prompt cache's lifetime the run priced (``5m``, ``1h``, ``off``; None when unknown), and
      ``price``, the ``--price`` entry (model, dollars per million input and output tokens, source, date)
      or None;
    - ``schedule_frontier``: the cheapest compaction schedules' frontier at the headline budget
      (`sim.analysis.schedule_bound.suite_frontier`), empty when no compaction policy was measured.
    """

    meta: dict
    budget_tokens: float
    budgets: tuple[float, ...]
    strategies: tuple[str, ...]
    traces: int
    sessions: int
    sessions_at_budget: int
    rows: int
    bytes_per_token: float
    ranking: pd.DataFrame
    miss_rate_by_budget: pd.DataFrame
    bracket: pd.DataFrame
    purity: pd.DataFrame
    purity_mode: str | None
    purity_shown: pd.DataFrame
    claim_modes: pd.DataFrame
    claim_modes_at_budget: pd.DataFrame
    claim_focus: ClaimFocus | None
    violations: int
    violations_by_strategy: dict[str, int]
    violation_messages: tuple[str, ...]
    focus: Focus | None
    policies: pd.DataFrame = None
    rank_by: str = DEFAULT_RANK_BY
    cache_ttl: str | None = None
    price: dict | None = None
    schedule_frontier: pd.DataFrame = None

    def __post_init__(self) -> None:
        if self.policies is None:
            object.__setattr__(self, "policies", compare_policies(pd.DataFrame(), 0))
        if self.schedule_frontier is None:
            object.__setattr__(self, "schedule_frontier", suite_frontier(pd.DataFrame(), 0, 0))

    def to_json(self) -> dict:
        """The summary as JSON values (NaN and infinities as null), without ``meta`` (that is ``meta.json``).

        Keys: ``ranking``, ``violations``, ``price_of_purity`` (``purity``), ``budget_tokens``,
        ``budgets_tokens``, ``strategies``, ``traces``, ``sessions``, ``sessions_at_budget``,
        ``rows``, ``bytes_per_token``, ``miss_rate_by_budget`` (one record per strategy and
        budget), ``bracket``, ``claim_modes``, ``claim_focus`` (null, or its strategy, budget,
        sessions, ``totals`` and ``per_arm``), ``violations_by_strategy``,
        ``violation_messages``, ``focus`` (null, or its budget, trace, session and strategy),
        ``policies`` (`compare_policies`' rows), ``rank_by``, ``cache_ttl``, ``price`` and
        ``schedule_frontier``.
        """
        by_budget = self.miss_rate_by_budget.rename_axis(index="strategy", columns="budget_tokens")
        focus, claims = self.focus, self.claim_focus
        return {
            "ranking": json_records(self.ranking),
            "violations": self.violations,
            "price_of_purity": json_records(self.purity),
            "budget_tokens": float(self.budget_tokens),
            "budgets_tokens": [float(b) for b in self.budgets],
            "strategies": list(self.strategies),
            "traces": self.traces,
            "sessions": self.sessions,
            "sessions_at_budget": self.sessions_at_budget,
            "rows": self.rows,
            "bytes_per_token": self.bytes_per_token,
            "miss_rate_by_budget": json_records(by_budget.stack().rename("miss_rate").reset_index()),
            "bracket": json_records(self.bracket),
            "claim_modes": json_records(self.claim_modes),
            "claim_focus": None if claims is None else {
                "strategy": claims.strategy, "budget_tokens": float(claims.budget_tokens),
                "sessions": claims.sessions, "totals": json_records(claims.totals),
                "per_arm": json_records(claims.per_arm)},
            "violations_by_strategy": dict(self.violations_by_strategy),
            "violation_messages": list(self.violation_messages),
            "focus": None if focus is None else {
                "budget_tokens": float(focus.budget_tokens), "trace": focus.trace, "session": focus.session,
                "strategy": focus.strategy},
            "policies": json_records(self.policies),
            "rank_by": self.rank_by,
            "cache_ttl": self.cache_ttl,
            "price": self.price,
            "schedule_frontier": json_records(self.schedule_frontier),
        }


def json_records(frame: pd.DataFrame) -> list[dict]:
    """Rows of ``frame`` as JSON records: NA, NaN and infinities become None."""
    clean = frame.replace([np.inf, -np.inf], np.nan)
    return clean.astype(object).where(clean.notna(), None).to_dict("records")


def summarise_run(results: pd.DataFrame, *, turns: pd.DataFrame | None = None, arms: pd.DataFrame | None = None,
                  meta: Mapping | None = None, session: str | None = None,
                  strategy: str | None = None, rank_by: str | None = None,
                  schedules: pd.DataFrame | None = None) -> RunSummary:
    """The `RunSummary` of a run: ``results`` (one row per session, strategy and budget, as from
    `sim.analysis.grid.run_grid`), its per-turn log ``turns`` and per-arm rows ``arms`` (either empty
    or None when not kept), and its ``meta.json``; ``schedules``, the hull points of each session's cheapest
    compaction schedules (`sim.analysis.grid.GridResult.schedules`), gives ``schedule_frontier``.

    ``session`` (``ID`` or ``TRACE/ID``) and ``strategy`` choose the one-session figures' session
    and timeline strategy (`Focus`); a session not in the results, or a strategy not in the
    per-turn log, is an `InputError`. Both are ignored without a per-turn log. ``rank_by`` orders the
    ranking (default: the run's ``--rank-by`` in ``meta.json``, else re-read tokens).
    """
    meta = dict(meta or {})
    rank_by = check_rank_by(rank_by or (meta.get("config") or {}).get("rank_by") or DEFAULT_RANK_BY)
    turns = turns if turns is not None else pd.DataFrame()
    arms = arms if arms is not None else pd.DataFrame()
    budget = headline_budget(results)
    ranking = ranked(results, budget, rank_by=rank_by)
    purity = price_of_purity(results) if "pure" in results.columns else pd.DataFrame(columns=list(PURITY_COLUMNS))
    purity_shown = one_claim_mode(purity)
    modes = purity_shown["claims"].dropna().unique() if "claims" in purity_shown.columns else ()
    claim_modes = compare_claim_modes(arms)
    counted = "violations" in results.columns
    by_strategy = results.groupby("strategy", observed=True)["violations"].sum() if counted else pd.Series()
    return RunSummary(
        meta=meta,
        budget_tokens=budget,
        budgets=tuple(sorted(results["budget_tokens"].unique())),
        strategies=tuple(sorted(results["strategy"].unique())),
        traces=int(results["trace"].nunique()),
        sessions=results.groupby(["trace", "session"], observed=True).ngroups,
        sessions_at_budget=results[results["budget_tokens"] == budget].groupby(["trace", "session"],
                                                                                observed=True).ngroups,
        rows=len(results),
        bytes_per_token=_bytes_per_token(results, meta),
        ranking=ranking,
        miss_rate_by_budget=results.groupby(["strategy", "budget_tokens"], observed=True)["miss_rate"].mean()
        .unstack(),
        bracket=_first_mode_gaps(results),
        purity=purity,
        purity_mode=modes[0] if len(modes) else None,
        purity_shown=purity_shown,
        claim_modes=claim_modes,
        claim_modes_at_budget=claim_modes[claim_modes["budget_tokens"] == budget] if len(claim_modes)
        else claim_modes,
        claim_focus=_claim_focus(arms, ranking, budget),
        violations=int(results["violations"].sum()) if counted else 0,
        violations_by_strategy={str(s): int(n) for s, n in by_strategy.items() if n},
        violation_messages=tuple(meta.get("violations") or ()),
        focus=_focus(results, turns, ranking, budget, session, strategy, rank_by),
        policies=(compare_policies(results, budget, order=ranking["strategy"]) if has_policies(results)
                  else compare_policies(pd.DataFrame(), 0)),
        rank_by=rank_by,
        cache_ttl=(meta.get("config") or {}).get("cache_ttl"),
        price=(meta.get("config") or {}).get("price"),
        schedule_frontier=suite_frontier(schedules, budget, results[results["budget_tokens"] == budget].groupby(
            ["trace", "session"], observed=True).ngroups),
    )


def _bytes_per_token(results: pd.DataFrame, meta: Mapping) -> float:
    """The configured bytes per token, else the median ratio of byte to token budgets, else the default."""
    cfg = meta.get("config") or {}
    if cfg.get("bytes_per_token"):
        return float(cfg["bytes_per_token"])
    if "budget_bytes" in results.columns and (results["budget_tokens"] > 0).all():
        return float((results["budget_bytes"] / results["budget_tokens"]).median())
    return DEFAULT_BYTES_PER_TOKEN


def _first_mode_gaps(results: pd.DataFrame) -> pd.DataFrame:
    """`bracket_gaps` per strategy and budget, of the first claim mode when there are several."""
    gaps = bracket_gaps(results)
    if "claims" in gaps.columns and gaps["claims"].notna().any():
        gaps = gaps[gaps["claims"] == gaps["claims"].dropna().iloc[0]]
    return gaps


def _claim_focus(arms: pd.DataFrame, ranking: pd.DataFrame, budget: float) -> ClaimFocus | None:
    """The report's claim-mode comparison (`ClaimFocus`), or None without per-arm rows."""
    if arms.empty:
        return None
    at = budget if (arms["budget_tokens"] == budget).any() else float(arms["budget_tokens"].max())
    present = set(arms["strategy"].astype(str))
    order = [s for s in ranking["strategy"] if s in present]
    strategy = order[0] if order else sorted(present)[0]
    chosen = arms[(arms["strategy"].astype(str) == strategy) & (arms["budget_tokens"] == at)]
    per_arm = compare_claim_modes(chosen, by_arm=True)
    if len(per_arm):  # modes in the order run, main first within each
        rank = {m: i for i, m in enumerate(dict.fromkeys(per_arm["claims"]))}
        per_arm = (per_arm.assign(mode_rank=per_arm["claims"].map(rank), not_main=per_arm["arm"].astype(str) != "main")
                   .sort_values(["mode_rank", "not_main", "arm"], kind="mergesort")
                   .drop(columns=["mode_rank", "not_main"]))
    return ClaimFocus(strategy, at, chosen.groupby(["trace", "session"], observed=True).ngroups,
                      compare_claim_modes(chosen), per_arm)


def _focus(results: pd.DataFrame, turns: pd.DataFrame, ranking: pd.DataFrame, budget: float, session: str | None,
           strategy: str | None, rank_by: str = DEFAULT_RANK_BY) -> Focus | None:
    """The one-session figures' `Focus`, or None without a per-turn log."""
    if not len(turns):
        return None
    at = focus_budget(results, budget)
    trace, sess = pick_session(results, session, at)
    if strategy is None:
        order = ranking if at == budget else ranked(results, at, rank_by=rank_by)
        strategy = next(s for s in order["strategy"] if not is_bracket(s))
    elif strategy not in set(turns["strategy"]):
        raise InputError(f"no strategy {strategy!r} in the per-turn log; strategies: "
                         f"{', '.join(sorted(turns['strategy'].unique()))}")
    return Focus(at, trace, sess, strategy)


def focus_budget(results: pd.DataFrame, headline: float) -> float:
    """The budget of the one-session figures: ``headline``, unless no strategy has a capacity miss
    there; then the largest budget where one does."""
    live = results[~results["strategy"].map(is_bracket)]
    if "capacity_misses" not in live.columns:
        return headline
    misses = live.groupby("budget_tokens")["capacity_misses"].sum()
    if misses.get(headline, 0) > 0 or not (misses > 0).any():
        return headline
    return float(misses[misses > 0].index.max())


def pick_session(frame: pd.DataFrame, session: str | None = None,
                 budget_tokens: float | None = None) -> tuple[str, str]:
    """The ``(trace, session)`` to show: ``session`` given as ``ID`` or ``TRACE/ID``, or else the
    session with the most capacity misses (summed over strategies) at the budget, ties by name.

    ``frame`` is results (``capacity_misses``) or a per-turn log (``capacity``).
    """
    if frame is None or not len(frame):
        raise InputError("session selection: no rows to plot")
    missing = [c for c in ("trace", "session", "strategy", "budget_tokens") if c not in frame.columns]
    if missing:
        raise InputError(f"session selection: missing column(s) {', '.join(missing)}")
    keys = frame[["trace", "session"]].astype(str).drop_duplicates()
    if session is not None:
        hit = keys[(keys["session"] == session) | (keys["trace"] + "/" + keys["session"] == session)]
        if hit.empty:
            known = ", ".join(sorted(keys["session"].unique())[:8])
            raise InputError(f"no session {session!r} in the results; sessions include: {known}")
        if len(hit) > 1:
            both = ", ".join(sorted(hit["trace"] + "/" + hit["session"]))
            raise InputError(f"session {session!r} is ambiguous; give one of: {both}")
        return tuple(hit.iloc[0])
    budget = budget_or_headline(frame, budget_tokens)
    at = frame[(frame["budget_tokens"] == budget) & ~frame["strategy"].map(is_bracket)]
    if at.empty:
        at = frame[frame["budget_tokens"] == budget]
    if "capacity_misses" in at.columns:
        score = at.groupby(["trace", "session"], observed=True)["capacity_misses"].sum()
    else:
        score = at.groupby(["trace", "session"], observed=True)["capacity"].sum()
    best = sorted(score.items(), key=lambda kv: (-kv[1], str(kv[0][0]), str(kv[0][1])))[0][0]
    return str(best[0]), str(best[1])
