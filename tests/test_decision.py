"""The decision view: feasible configurations ranked by one metric, infeasible ones after and never priced, the
Pareto frontier, multiples of each row's optimum, and the same order in every table."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbench.sim.analysis.frontier import pareto_frontier
from ctxbench.sim.analysis.policies import compare_policies
from ctxbench.sim.analysis.ranking import RANK_BY, ranked
from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError

# name -> (model, re-read tokens, cost, calls over the window, optimum) for each of two sessions of 10 calls
CONFIGS = {
    "a": ("managed", (10, 10), (100, 100), (0, 0), (5, 5)),
    "b": ("transcript", (20, 20), (50, 50), (0, 0), None),
    "c": ("transcript", (30, 30), (60, 60), (0, 0), None),       # beaten by b on both
    "d": ("managed", (2, 8), (10, 10), (0, 4), (4, 4)),           # the fewest re-reads, but 4 of 20 calls too big
}


def _results(configs=CONFIGS) -> pd.DataFrame:
    rows = []
    for name, (model, rereads, costs, over, opt) in configs.items():
        for i in range(2):
            rows.append({"trace": "t", "session": f"s{i}", "strategy": name, "model": model, "budget_tokens": 1000.0,
                         "reread_tokens": float(rereads[i]), "cost_tokens": float(costs[i]),
                         "cost_input_tokens": 0.9 * costs[i], "summary_output_tokens": 0.02 * costs[i],
                         "summary_input_tokens": 2.0 * costs[i], "input_tokens": 10.0 * costs[i], "miss_rate": 0.5, "capacity_miss_rate": 0.1,
                         "evict_p99_ns": 100.0 * (i + 1), "compactions": 0, "turns": 10,
                         "over_window_calls": over[i], "cache_read_input_tokens": 1.0,
                         "cache_write_input_tokens": 1.0, "peak_window_tokens": 900.0,
                         "opt_reread_tokens": np.nan if opt is None else float(opt[i]),
                         "opt_lower_tokens": np.nan if opt is None else float(opt[i]),
                         "opt_exact": None if opt is None else True})
    return pd.DataFrame(rows)


def test_feasible_rows_are_ranked_first_and_the_infeasible_one_after_it_unpriced():
    table = ranked(_results(), 1000.0)
    assert table["strategy"].tolist() == ["a", "b", "c", "d"]
    assert table["rank"].tolist()[:3] == [1, 2, 3] and pd.isna(table["rank"].iloc[3])
    d = table.set_index("strategy").loc["d"]
    assert d["feasible"] is False and d["over_window_calls"] == 4 and d["over_window_share"] == pytest.approx(0.2)
    assert math.isnan(d["cost_tokens"]) and math.isnan(d["cost_tokens_lo"])
    assert d["reread_tokens"] == 5.0          # its re-reads stay: only prices lose meaning
    assert table["frontier"].tolist() == [True, True, False, False]


def test_multiples_of_the_optimum_come_from_each_rows_own_optimum():
    table = ranked(_results(), 1000.0).set_index("strategy")
    assert table.loc["a", "x_opt"] == pytest.approx(2.0) and table.loc["a", "opt_exact"]
    assert table.loc["d", "x_opt"] == pytest.approx(10 / 8)
    assert math.isnan(table.loc["b", "x_opt"])   # a transcript policy has no optimum of its own


def test_rank_by_orders_the_feasible_rows_by_that_metric():
    assert ranked(_results(), 1000.0, rank_by="cost_tokens")["strategy"].tolist() == ["b", "c", "a", "d"]
    assert ranked(_results(), 1000.0, rank_by="evict_p99_ns")["strategy"].tolist()[:3] == ["a", "b", "c"]  # ties
    with pytest.raises(InputError, match="--rank-by: unknown metric 'price'"):
        ranked(_results(), 1000.0, rank_by="price")


def test_the_policies_table_follows_the_given_order_and_never_prices_an_infeasible_row():
    table = compare_policies(_results(), 1000.0, order=["d", "c", "b", "a"])
    assert table["strategy"].tolist() == ["d", "c", "b", "a"]
    d = table.iloc[0]
    assert not d["feasible"] and d["over_window_calls"] == 4
    assert all(math.isnan(d[c]) for c in ("input_tokens", "summary_input_tokens", "summary_output_tokens",
                                          "cost_tokens", "cost_input_tokens", "cache_saving"))
    assert table.iloc[3]["cost_tokens"] == 200.0 and table.iloc[3]["summary_output_tokens"] == 4.0
    default = compare_policies(_results(), 1000.0)
    assert default["strategy"].tolist() == ["b", "c", "a", "d"]   # cheapest feasible first, infeasible last


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=12))
def test_the_frontier_is_exactly_the_points_no_other_point_beats(points):
    x = [p[0] for p in points]
    y = [p[1] for p in points]
    beaten = [any(x[j] <= x[i] and y[j] <= y[i] and (x[j] < x[i] or y[j] < y[i]) for j in range(len(points)))
              for i in range(len(points))]
    assert pareto_frontier(x, y).tolist() == [not b for b in beaten]


def test_the_frontier_ignores_unpriced_points():
    assert pareto_frontier([1.0, 0.5, 2.0], [1.0, math.nan, 0.5]).tolist() == [True, False, True]


def _trace(path):
    """One session whose conversation alone passes a 50,000-token window after 8 turns."""
    rows = []
    for t in range(20):
        rows.append(("s", t, 1_000 * t, "message", f"msg://user/{t}", 6_000))
        rows.append(("s", t, 1_000 * t + 1, "read", f"src/m{t % 4}.py", 3_000))
    pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes"]).to_csv(path, index=False)
    return path


def test_run_never_prices_an_infeasible_configuration_anywhere(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--traces", str(_trace(tmp_path / "t.csv")), "--strategy", "lru", "lru+compaction", "codex",
                 "--budget-tokens", "50000", "--bytes-per-token", "1", "--out", str(out), "--workers", "1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["strategy"]: r for r in doc["ranking"]}
    assert rows["lru"]["feasible"] is False and rows["lru"]["cost_tokens"] is None and rows["lru"]["rank"] is None
    assert rows["lru+compaction"]["feasible"] is True and rows["lru+compaction"]["cost_tokens"] > 0
    policies = {p["strategy"]: p for p in doc["policies"]}
    assert policies["lru"]["input_tokens"] is None and policies["lru"]["over_window_calls"] > 0
    results = pd.read_parquet(out / "results.parquet").set_index("strategy")
    assert not results.loc["lru", "feasible"] and results.loc["lru+compaction", "feasible"]
    for name in ("summary.md", "report.md"):
        text = (out / name).read_text()
        decision = text[text.index("## Decision at"):text.index("## Misses at")]
        row = next(line for line in decision.splitlines() if line.startswith("| — | lru |"))
        assert row.split(" | ")[4] == "—"                      # no cost for the infeasible row
        policy = next(line for line in text[text.index("## Context policies"):].splitlines()
                      if re.match(r"\| lru \|", line))
        assert policy.split(" | ")[2:5] == ["—"] * 3           # billed input, summaries, cost


def test_report_reranks_by_another_metric(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--traces", str(_trace(tmp_path / "t.csv")), "--strategy", "lru+compaction", "codex",
                 "claude-code", "--budget-tokens", "50000", "--bytes-per-token", "1", "--out", str(out), "--workers",
                 "1", "--no-bracket", "--rank-by", "compactions"]) == 0
    assert json.loads((out / "meta.json").read_text())["config"]["rank_by"] == "compactions"
    results = pd.read_parquet(out / "results.parquet")
    by_compactions = results.sort_values(["compactions", "reread_tokens", "strategy"])["strategy"].tolist()
    by_rereads = results.sort_values(["reread_tokens", "miss_rate", "strategy"])["strategy"].tolist()
    assert by_compactions != by_rereads          # the two orders tell the runs apart
    ranked_rows = re.compile(r"^\| \d+ \| ([^ |]+) \| (?:managed|transcript) \|", re.M)
    assert ranked_rows.findall((out / "report.md").read_text()) == by_compactions
    assert main(["report", str(out), "--rank-by", "reread_tokens"]) == 0
    assert ranked_rows.findall((out / "report.md").read_text()) == by_rereads


def test_rank_by_is_checked_when_parsed(tmp_path, capsys):
    assert main(["run", "--rank-by", "price", "--out", str(tmp_path / "r")]) == 2
    assert "--rank-by" in capsys.readouterr().err
    assert set(RANK_BY) >= {"reread_tokens", "cost_tokens", "compactions", "evict_p99_ns"}
