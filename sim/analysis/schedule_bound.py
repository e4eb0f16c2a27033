"""The opt:schedule rows of a run: each session's cheapest compaction schedule, and each compaction policy's cost
against the cheapest schedule at its own re-reads (docs/design.md §8)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from ctxbench.sim.analysis.claim_modes import one_claim_mode
from ctxbench.sim.analysis.labels import SCHEDULE_BOUND
from ctxbench.sim.analysis.schedule import (FrontierPoint, ScheduleError, SegmentInputs, cheapest_at_rereads,
                                            cheapest_schedule, frontier, session_inputs)
from ctxbench.sim.engine.replay import (ResolvedSession, budget_for_tokens, check_bytes_per_token, replay_session,
                                        resolve_session)
from ctxbench.sim.engine.settings import ReplaySettings, settings_of
from ctxbench.strategies.adapter import adapt
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.isolation import loads_code
from ctxbench.strategies.policies.schedule import SchedulePolicy
from ctxbench.traces.model_ratios import session_ratios

__all__ = ["ScheduleModel", "schedule_model", "schedule_labels", "SessionBound", "session_bound", "policy_columns",
           "POLICY_COLUMNS", "suite_frontier", "objective_optimum"]

#: The columns a compaction policy's row gets from its session's bound (`policy_columns`).
POLICY_COLUMNS = ("opt_cost_tokens", "opt_cost_lower_tokens", "opt_exact", "opt_bound")


@dataclass(frozen=True)
class ScheduleModel:
    """What every schedule of a family writes and reads: a summary of ``summary_tokens`` at each compaction, a
    file read entering at most ``read_tokens`` (None: whole)."""

    summary_tokens: int
    read_tokens: int | None


def schedule_model(policy) -> tuple[ScheduleModel, bool] | None:
    """The schedules a built policy is measured against (its ``compaction_schedule``) and whether its own
    compactions are one of them; None for a policy outside the family (one that keeps a tail, masks or clears)."""
    hook = getattr(type(policy), "compaction_schedule", None)
    found = hook(policy) if callable(hook) else None
    if found is None:
        return None
    summary_tokens, read_tokens, member = found
    return ScheduleModel(summary_tokens, read_tokens), bool(member)


def schedule_labels(models: Sequence[ScheduleModel]) -> dict[ScheduleModel, str]:
    """The bound row's label of each distinct model: ``opt:schedule`` when a run has one, else each named by its
    summary and reads.

    >>> schedule_labels([ScheduleModel(4000, 25000)])
    {ScheduleModel(summary_tokens=4000, read_tokens=25000): 'opt:schedule'}
    >>> list(schedule_labels([ScheduleModel(4000, None), ScheduleModel(8000, None)]).values())
    ['opt:schedule?summary_tokens=4000', 'opt:schedule?summary_tokens=8000']
    """
    distinct = list(dict.fromkeys(models))
    if len(distinct) == 1:
        return {distinct[0]: SCHEDULE_BOUND}
    return {m: SCHEDULE_BOUND + f"?summary_tokens={m.summary_tokens}"
            + ("" if m.read_tokens is None else f"&read_tokens={m.read_tokens}") for m in distinct}


@dataclass(frozen=True)
class SessionBound:
    """One session's cheapest schedules under one budget and model: the ``row`` of the cost-optimal one replayed
    (None: no schedule keeps every call in the window, or the session is outside the family), the ``points``
    of its hull at `sim.analysis.schedule.FRONTIER_WEIGHTS`, each arm's ``inputs``."""

    row: dict | None
    points: tuple[FrontierPoint, ...]
    inputs: tuple[SegmentInputs, ...]
    bytes_per_token: float


def session_bound(resolved: ResolvedSession, budget: ContextBudget, settings: ReplaySettings, model: ScheduleModel,
                  label: str) -> SessionBound:
    """The cheapest schedules of ``resolved`` (`SessionBound`), its row labelled ``label`` and replayed by
    `replay_session` as its policies are, with ``schedule_frontier`` (weight, cost tokens, re-read tokens per
    hull point); `ScheduleError` where the replay's cost is not the segments' (never, by construction)."""
    bytes_per_token = check_bytes_per_token(resolved.tokens)
    try:
        inputs = session_inputs(resolved, budget, model.summary_tokens, settings, model.read_tokens)
    except ScheduleError:
        return SessionBound(None, (), (), bytes_per_token)
    points = tuple(frontier(inputs))
    best = points[0]
    if best.cost_bytes is None:
        return SessionBound(None, points, inputs, bytes_per_token)
    calls = dict(zip(resolved.arms, (s.calls for s in best.schedules)))
    result = replay_session(resolved, "schedule", budget, settings, strategy_name=label,
                            strategy_for_arm=lambda arm: SchedulePolicy(calls[arm], model.summary_tokens,
                                                                        model.read_tokens))
    row = result.row
    expected = best.cost_bytes / bytes_per_token
    if not row["feasible"] or abs(row["cost_tokens"] - expected) > 1e-6 * max(1.0, expected):
        raise ScheduleError(f"session {resolved.session.session!r}: its cheapest schedule costs "
                            f"{row['cost_tokens']:.1f} replayed but {expected:.1f} by its segments")
    row["schedule_frontier"] = tuple((p.weight, p.cost_bytes / bytes_per_token, p.reread_bytes / bytes_per_token)
                                     for p in points)
    row["opt_exact"] = True
    return SessionBound(row, points, inputs, bytes_per_token)


def policy_columns(bound: SessionBound, row: Mapping, label: str, member: bool = False) -> dict:
    """A compaction policy's columns (`POLICY_COLUMNS`) from its session's bound: the cheapest schedule with no
    more re-reads than the policy's (``opt_cost_tokens``, None where none is found), the Lagrangian bound below
    it (``opt_cost_lower_tokens``), whether they meet (``opt_exact``) and the bound row's label; none for an
    infeasible row (it has no bill to compare) or a session with no feasible schedule. A ``member`` policy's
    replay is itself a schedule of the family where no summarization call was trimmed: the cheapest found is
    then never above its own cost."""
    if not row.get("feasible") or bound.row is None:
        return {}
    at = cheapest_at_rereads(bound.inputs, int(row["reread_bytes"]), known=bound.points)
    per = 1.0 / bound.bytes_per_token
    upper = None if at.upper is None else at.upper * per
    if member and not row.get("summary_dropped_tokens"):
        upper = row["cost_tokens"] if upper is None else min(upper, row["cost_tokens"])
    lower = None if at.lower is None else min(at.lower * per, upper if upper is not None else math.inf)
    exact = upper is not None and lower is not None and upper <= lower * (1 + 1e-9) + 1e-9
    return {"opt_cost_tokens": upper, "opt_cost_lower_tokens": lower, "opt_exact": exact, "opt_bound": label}


def suite_frontier(schedules: pd.DataFrame, budget_tokens: float, sessions: int) -> pd.DataFrame:
    """The cheapest schedules' frontier over a run's sessions at ``budget_tokens`` (one claim mode): per bound
    label and weight, the totals of ``cost_tokens`` and ``reread_tokens`` (one weight for every session, so each
    total is a point of the lower convex hull of (re-reads, cost) over the sum's schedules), duplicates left
    out; a label whose hull misses some of the ``sessions`` (no schedule fits one of them) is left out."""
    columns = ["strategy", "weight", "cost_tokens", "reread_tokens"]
    if schedules is None or schedules.empty or "weight" not in schedules.columns:
        return pd.DataFrame(columns=columns)
    at = one_claim_mode(schedules[schedules["budget_tokens"] == budget_tokens])
    if at.empty:
        return pd.DataFrame(columns=columns)
    counted = at.groupby("strategy", observed=True)["session"].nunique()
    at = at[at["strategy"].map(counted) == sessions]
    totals = at.groupby(["strategy", "weight"], observed=True)[["cost_tokens", "reread_tokens"]].sum().reset_index()
    return (totals.drop_duplicates(["strategy", "cost_tokens", "reread_tokens"])
            .sort_values(["strategy", "reread_tokens"]).reset_index(drop=True)[columns])


def objective_optimum(sessions: Sequence, spec: str, terms: Sequence[tuple[float, str]], budget_tokens: float,
                      tokens=None, cache_ttl_ms: int | None = None) -> float | None:
    """The least mean per session of the objective ``terms`` (weights of ``cost_tokens`` and ``reread_tokens``)
    over the compaction schedules ``spec`` is measured against (`schedule_model`), every call in the window:
    exact, the weight on re-reads being the objective's own (`cheapest_schedule`); None where the spec has no
    schedules or loads code (never built here, outside its isolation), the objective names another metric or
    no cost, or a session has no feasible schedule or lies outside the family."""
    weights = dict((name, weight) for weight, name in terms)
    if set(weights) - {"cost_tokens", "reread_tokens"} or not weights.get("cost_tokens") or loads_code(spec):
        return None
    found = schedule_model(adapt(spec).target)
    if found is None:
        return None
    model, _ = found
    per_reread = weights.get("reread_tokens", 0.0) / weights["cost_tokens"]
    settings = settings_of(None, cache_ttl_ms=cache_ttl_ms)
    values = []
    for session in sessions:
        ratios = session_ratios(session.model, tokens)[1]
        resolved = resolve_session(session, tokens=ratios)
        budget = budget_for_tokens(budget_tokens, ratios)
        bytes_per_token = check_bytes_per_token(resolved.tokens)
        total = 0.0
        try:
            arms = session_inputs(resolved, budget, model.summary_tokens, settings, model.read_tokens)
        except ScheduleError:
            return None
        for inputs in arms:
            best = cheapest_schedule(inputs, per_reread)
            if best.cost_bytes is None:
                return None
            total += (best.cost_bytes + per_reread * best.reread_bytes) / bytes_per_token
        values.append(weights["cost_tokens"] * total)
    return float(sum(values) / len(values)) if values else None
