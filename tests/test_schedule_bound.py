"""The opt:schedule rows of a grid, each compaction policy's cost against them, and how they are shown."""

from __future__ import annotations

import json
import numpy as np
import pandas as pd
import pytest

from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.cli import main
from ctxbench.sim.analysis.labels import is_bracket
from ctxbench.sim.analysis.ranking import ranked
from ctxbench.sim.analysis.schedule import FRONTIER_WEIGHTS, cheapest_at_rereads, cheapest_schedule, cheapest_schedules
from ctxbench.sim.analysis.schedule_bound import ScheduleModel, schedule_labels, schedule_model, suite_frontier
from ctxbench.sim.engine.replay import budget_for_tokens, resolve_session, split_sessions, replay_session
from ctxbench.sim.presentation.summary_text import decision_cells, schedule_sentences
from ctxbench.strategies.registry import make
from ctxbench.traces.generate import generate

POLICIES = ["claude-code?recent_files=0", "claude-code", "codex"]


@pytest.fixture(scope="module")
def grid():
    traces = generate("claude-code-like", sessions=3, seed=4)
    return traces, run_grid(traces, POLICIES, [100_000, 150_000], workers=1, progress=False, bracket=True)


def test_every_session_and_budget_has_one_schedule_bound_replayed_at_its_cost(grid):
    traces, result = grid
    rows = result.results
    bounds = rows[rows["strategy"] == "opt:schedule"]
    assert len(bounds) == 3 * 2 and bounds["feasible"].all() and bounds["opt_exact"].astype(bool).all()
    assert (bounds["model"] == "transcript").all() and is_bracket("opt:schedule")
    # The bound's row is the replay of its schedule: replaying the calls its frontier's weight-0 point compacts
    # at, by the engine as a policy, gives the same cost; and no compaction policy costs less on its session.
    sessions = {s.session: s for s in split_sessions(traces)}
    for _, bound in bounds.iterrows():
        resolved = resolve_session(sessions[bound["session"]])
        budget = budget_for_tokens(bound["budget_tokens"], resolved.tokens)
        policies = rows[(rows["session"] == bound["session"]) & (rows["budget_tokens"] == bound["budget_tokens"])
                        & rows["strategy"].isin(POLICIES) & rows["feasible"].astype(bool)]
        assert (policies["cost_tokens"] >= bound["cost_tokens"] * (1 - 1e-12)).all()
        at = result.schedules[(result.schedules["session"] == bound["session"])
                              & (result.schedules["budget_tokens"] == bound["budget_tokens"])]
        assert len(at) == len(FRONTIER_WEIGHTS)
        assert at.sort_values("weight")["cost_tokens"].iloc[0] == pytest.approx(bound["cost_tokens"], rel=1e-12)
        again = replay_session(resolved, "claude-code?recent_files=0", budget)
        assert again.row["cost_tokens"] == pytest.approx(
            policies.set_index("strategy").loc["claude-code?recent_files=0", "cost_tokens"], rel=1e-12)


def test_a_member_policy_is_never_below_the_cheapest_schedule_at_its_re_reads(grid):
    _, result = grid
    rows = result.results
    member = rows[(rows["strategy"] == "claude-code?recent_files=0") & rows["feasible"].astype(bool)]
    assert len(member) == 6 and member["opt_bound"].eq("opt:schedule").all()
    assert (member["opt_cost_lower_tokens"] <= member["opt_cost_tokens"] * (1 + 1e-12)).all()
    assert (member["opt_cost_tokens"] <= member["cost_tokens"] * (1 + 1e-12)).all()
    # The frontier's points never beat the bracket's lower bound at their own re-reads.
    for _, row in member.iterrows():
        hull = result.schedules[(result.schedules["session"] == row["session"])
                                & (result.schedules["budget_tokens"] == row["budget_tokens"])]
        within = hull[hull["reread_tokens"] <= row["reread_tokens"] * (1 + 1e-12)]
        if len(within):
            assert within["cost_tokens"].min() >= row["opt_cost_tokens"] * (1 - 1e-9)
    assert rows.loc[rows["strategy"] == "codex", "opt_bound"].isna().all()   # it keeps a tail: no bound


def test_the_decision_view_gives_claude_code_a_multiple_of_its_cost(grid):
    _, result = grid
    table = ranked(result.results, 150_000)
    by = table.set_index("strategy")
    member = by.loc["claude-code?recent_files=0"]
    assert member["x_opt_of"] == "cost_tokens" and member["x_opt"] >= 1.0 - 1e-12
    assert member["x_opt_high"] >= member["x_opt"] - 1e-12
    rows = result.results[(result.results["budget_tokens"] == 150_000)
                          & (result.results["strategy"] == "claude-code?recent_files=0")]
    assert member["x_opt"] == pytest.approx(rows["cost_tokens"].sum() / rows["opt_cost_tokens"].sum(), rel=1e-12)
    assert pd.isna(by.loc["codex", "x_opt"])
    bound = by.loc["opt:schedule"]
    assert bound["bound"] == "schedule" and not pd.isna(bound["cost_tokens"])   # a bound with a bill
    cells = {c["strategy"]: c for c in decision_cells(table)}
    assert "cheapest schedule" in cells["claude-code?recent_files=0"]["x_opt"]
    assert cells["opt:schedule"]["x_opt"] == "the cheapest compaction schedule"
    sentences = schedule_sentences(table)
    assert any(s.startswith("claude-code?recent_files=0 costs ") for s in sentences)


def test_the_suite_frontier_sums_each_weight_over_every_session(grid):
    _, result = grid
    frontier = suite_frontier(result.schedules, 150_000, 3)
    at = result.schedules[result.schedules["budget_tokens"] == 150_000]
    zero = at[at["weight"] == 0.0]
    point = frontier[frontier["weight"] == 0.0]
    assert len(point) == 1 and point["cost_tokens"].iloc[0] == pytest.approx(zero["cost_tokens"].sum())
    assert np.all(np.diff(frontier["reread_tokens"]) >= 0)
    assert suite_frontier(result.schedules, 150_000, 4).empty   # a session missing: no frontier


def test_batched_weights_solve_as_one_weight_each():
    from tests.test_schedule import arms
    from ctxbench.sim.analysis.schedule import segment_inputs
    (stream, steps), = arms("claude-code-like", 7, 10_000)
    inputs = segment_inputs(stream, steps, int(60_000 * 2.8), 2.8, 1_000)
    weights = [0.0, 0.5, 3.0, 40.0]
    for weight, batched in zip(weights, cheapest_schedules(inputs, weights)):
        one = cheapest_schedule(inputs, weight)
        assert (batched.calls, batched.cost_bytes, batched.reread_bytes) == (one.calls, one.cost_bytes,
                                                                             one.reread_bytes)
    # Several arms under one allowance: their bracket holds the sum of their single-arm optima at any weight.
    both = cheapest_at_rereads([inputs, inputs], 2 * cheapest_schedule(inputs, 3.0).reread_bytes)
    assert both.lower <= 2 * cheapest_schedule(inputs, 3.0).cost_bytes * (1 + 1e-12) <= both.upper * (1 + 1e-12) \
        or both.exact


def test_which_policies_are_measured_against_schedules():
    assert schedule_model(make("claude-code")) == (ScheduleModel(4_000, 25_000), False)
    assert schedule_model(make("claude-code?recent_files=0")) == (ScheduleModel(4_000, 25_000), True)
    assert schedule_model(make("claude-code?summary_tokens=0")) is None
    assert schedule_model(make("codex")) is None and schedule_model(make("observation-masking")) is None
    labels = schedule_labels([ScheduleModel(4_000, 25_000), ScheduleModel(8_000, 25_000)])
    assert sorted(labels.values()) == ["opt:schedule?summary_tokens=4000&read_tokens=25000",
                                       "opt:schedule?summary_tokens=8000&read_tokens=25000"]


def test_run_json_and_the_report_carry_the_schedule_bound(tmp_path, capsys):
    traces = generate("claude-code-like", sessions=2, seed=9)
    path = tmp_path / "t.parquet"
    traces.to_parquet(path)
    out = tmp_path / "out"
    assert main(["run", "--traces", str(path), "--strategy", "claude-code?recent_files=0", "--budget-tokens",
                 "120000", "--out", str(out), "--workers", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = {r["strategy"]: r for r in summary["ranking"]}
    assert rows["opt:schedule"]["bound"] == "schedule"
    assert rows["claude-code?recent_files=0"]["x_opt_of"] == "cost_tokens"
    assert rows["claude-code?recent_files=0"]["x_opt"] >= 1.0 - 1e-12
    assert summary["schedule_frontier"] and (out / "schedules.parquet").is_file()
    assert main(["report", str(out)]) == 0
    assert "cheapest compaction schedule" in (out / "report.md").read_text()
    assert "schedule" in (out / "figures" / "policy_tradeoff.svg").read_text()


def test_tune_reports_the_cheapest_schedule_of_its_objective_on_the_same_sessions():
    from ctxbench.sim.analysis.schedule_bound import objective_optimum
    from ctxbench.sim.analysis.tune import tune
    from ctxbench.sim.analysis.grid import as_sessions
    traces = generate("claude-code-like", sessions=4, seed=11)
    result = tune(traces, "claude-code?recent_files=0", ["trigger_tokens=60000:160000"], trials=4, workers=1,
                  progress=False, budget_tokens=160_000)
    assert result.chosen is not None and result.schedule_optimum is not None
    assert result.schedule_optimum <= result.chosen_objective * (1 + 1e-12)   # the chosen is one of the schedules
    assert result.to_json()["schedule_optimum"] == pytest.approx(result.schedule_optimum)
    sessions = as_sessions(traces)
    weighted = objective_optimum(sessions, result.chosen, ((1.0, "cost_tokens"), (5.0, "reread_tokens")), 160_000)
    assert weighted >= result.schedule_optimum   # a re-read term only adds
    assert objective_optimum(sessions, "codex", ((1.0, "cost_tokens"),), 160_000) is None
    assert objective_optimum(sessions, result.chosen, ((1.0, "miss_rate"),), 160_000) is None
