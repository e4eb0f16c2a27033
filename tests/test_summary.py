"""The run summary: computed once from the results, drawn as it is by the terminal, Markdown, HTML and --json."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest

from ctxbench.sim.analysis import summary as summary_module
from ctxbench.sim.analysis.claim_modes import COMPARED
from ctxbench.sim.analysis.summary import summarise_run
from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.sim.presentation import plots
from ctxbench.sim.presentation import report as report_module
from ctxbench.sim.presentation.summary_text import summary_markdown
from test_cli_run import FAST, small_trace

# Two sessions of one trace at two budgets. At 2,000 tokens (the headline: 200,000 did not run, so
# the largest did) arc re-reads 4 and 8 tokens (mean 6), lru 10 and 30 (mean 20); the bracket's
# lower bound totals 2 and Belady-Size 8 over both sessions.
REREADS = {  # (strategy, pure): {budget: [session 1, session 2]}
    ("lru", True): {1_000: [50, 70], 2_000: [10, 30]},
    ("arc", False): {1_000: [40, 60], 2_000: [4, 8]},
    ("opt:lower", None): {1_000: [20, 20], 2_000: [0, 2]},
    ("opt:belady-size", False): {1_000: [30, 30], 2_000: [2, 6]},
}


def _results() -> pd.DataFrame:
    rows = []
    for (strategy, pure), by_budget in REREADS.items():
        for budget, rereads in by_budget.items():
            for i, reread in enumerate(rereads):
                rows.append({"trace": "t", "session": f"s{i + 1}", "strategy": strategy, "pure": pure,
                             "budget_tokens": budget, "budget_bytes": 4 * budget, "reread_tokens": float(reread),
                             "miss_rate": 0.1 * (i + 1) if budget == 2_000 else 0.5, "capacity_miss_rate": 0.1,
                             "evict_p99_ns": 1_000.0, "capacity_misses": reread,
                             "violations": int(strategy == "lru" and budget == 1_000 and i == 1)})
    return pd.DataFrame(rows)


def _arms() -> pd.DataFrame:
    rows = []
    for strategy in ("lru", "arc"):
        for mode in ("strict", "lazy"):
            for arm in ("arm1", "main"):
                rows.append({"trace": "t", "session": "s1", "strategy": strategy, "budget_tokens": 2_000,
                             "claims": mode, "arm": arm,
                             **{c: (3 if mode == "lazy" else 0) + (1 if arm == "main" else 0) for c in COMPARED}})
    return pd.DataFrame(rows)


def _turns() -> pd.DataFrame:
    return pd.DataFrame({"trace": ["t"] * 2, "session": ["s1", "s2"], "strategy": ["lru", "arc"],
                         "budget_tokens": [2_000, 2_000]})


def test_hand_worked_summary():
    s = summarise_run(_results(), turns=_turns(), arms=_arms(), meta={"violations": ["first message"]})
    assert s.budget_tokens == 2_000 and s.budgets == (1_000, 2_000)
    assert (s.traces, s.sessions, s.sessions_at_budget, s.rows) == (1, 2, 2, 16)
    assert s.bytes_per_token == 4.0  # no configured ratio: the one the budgets imply
    assert s.ranking["strategy"].tolist() == ["arc", "lru", "opt:lower", "opt:belady-size"]
    arc, lru = s.ranking.iloc[0], s.ranking.iloc[1]
    assert (arc["rank"], arc["reread_tokens"], lru["rank"], lru["reread_tokens"]) == (1, 6.0, 2, 20.0)
    assert (lru["x_lower"], lru["x_belady"], lru["excess_tokens"]) == (20.0, 5.0, 38.0)   # 40 over 2 and over 8
    gaps = s.bracket.set_index(["strategy", "budget_tokens"])
    assert gaps.loc[("arc", 2_000), "x_belady"] == 1.5 and gaps.loc[("lru", 1_000), "x_lower"] == 3.0
    assert s.miss_rate_by_budget.loc["lru", 2_000] == pytest.approx(0.15)
    assert s.miss_rate_by_budget.loc["arc", 1_000] == pytest.approx(0.5)
    purity = s.purity.set_index(["trace", "budget_tokens"])
    assert (purity.loc[("t", 2_000), "best_pure"], purity.loc[("t", 2_000), "best_stateful"]) == ("lru", "arc")
    assert purity.loc[("t", 2_000), "reread_tokens_diff"] == 14.0 and s.purity_mode is None
    assert (s.violations, s.violations_by_strategy, s.violation_messages) == (1, {"lru": 1}, ("first message",))
    focus = s.claim_focus
    assert (focus.strategy, focus.budget_tokens, focus.sessions) == ("arc", 2_000, 1)   # arc ranks first
    assert focus.totals["claims"].tolist() == ["strict", "lazy"] and focus.totals["lines_lost"].tolist() == [1, 7]
    assert list(zip(focus.per_arm["claims"], focus.per_arm["arm"])) == [
        ("strict", "main"), ("strict", "arm1"), ("lazy", "main"), ("lazy", "arm1")]   # main first in each mode
    assert len(s.claim_modes) == 4 and len(s.claim_modes_at_budget) == 4
    assert (s.focus.budget_tokens, s.focus.key, s.focus.strategy) == (2_000, "t/s2", "arc")  # most capacity misses


def test_summary_options_and_missing_parts():
    s = summarise_run(_results(), turns=_turns(), session="s1", strategy="lru")
    assert (s.focus.key, s.focus.strategy) == ("t/s1", "lru")
    assert s.claim_focus is None and s.claim_modes.empty and s.violation_messages == ()
    assert summarise_run(_results()).focus is None   # no per-turn log: no one-session figures
    with pytest.raises(InputError, match="no strategy 'nope' in the per-turn log"):
        summarise_run(_results(), turns=_turns(), strategy="nope")
    with pytest.raises(InputError, match="no session 'nope'"):
        summarise_run(_results(), turns=_turns(), session="nope")
    no_bracket = summarise_run(_results()[~_results()["strategy"].str.startswith("opt:")])
    assert no_bracket.bracket.empty and no_bracket.ranking["bound"].isna().all()


def test_json_form_keeps_the_old_keys_first_and_is_plain_json():
    doc = summarise_run(_results(), turns=_turns(), arms=_arms()).to_json()
    assert list(doc)[:3] == ["ranking", "violations", "price_of_purity"]
    assert doc["ranking"][2]["rank"] is None and doc["ranking"][2]["evict_p99_ns"] == 1_000.0
    assert doc["budget_tokens"] == 2_000.0 and doc["claim_focus"]["strategy"] == "arc"
    assert {"strategy": "lru", "budget_tokens": 1_000, "miss_rate": 0.5} in doc["miss_rate_by_budget"]
    assert doc["focus"] == {"budget_tokens": 2_000.0, "trace": "t", "session": "s2", "strategy": "arc"}
    assert json.loads(json.dumps(doc, allow_nan=False, default=float)) == json.loads(json.dumps(doc, default=float))


def _count_calls(monkeypatch, module, name: str) -> list:
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_run_summarises_once_and_every_output_draws_that_summary(tmp_path, capsys, monkeypatch):
    from ctxbench.sim.cli.commands import run as run_command

    calls = _count_calls(monkeypatch, run_command, "summarise_run")

    def no_ranking(*args, **kwargs):
        raise AssertionError("a figure ranked the results again")

    monkeypatch.setattr(plots, "ranked", no_ranking)   # the re-read bars take the summary's order
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "r"
    fast = [a for a in FAST if a not in ("--no-report", "--no-bracket")]
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "importance", "--budget-tokens", "1500",
                 "4000", "--out", str(out), "--json", *fast]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(calls) == 1
    assert list(doc)[:4] == ["results_dir", "ranking", "violations", "price_of_purity"]
    assert doc["budget_tokens"] == 4_000.0 and doc["budgets_tokens"] == [1_500.0, 4_000.0] and doc["bracket"]
    order = [r["strategy"] for r in doc["ranking"]]
    summary_md, report_md = (out / "summary.md").read_text(), (out / "report.md").read_text()
    for text in (summary_md, report_md):
        ranking = text[text.index("## Decision at 4,000 tokens"):]
        rows = [line.split(" | ")[1] for line in ranking.splitlines()[2:] if line.startswith("| ")][1:]
        assert rows[:len(order)] == order
    assert "## Optimal bracket" in report_md and "## Miss rate by budget" in report_md


def test_report_summarises_once(tmp_path, capsys, monkeypatch):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--out", str(tmp_path / "r"), *FAST]) == 0
    calls = _count_calls(monkeypatch, report_module, "summarise_run")
    assert main(["report", str(tmp_path / "r")]) == 0
    assert len(calls) == 1 and "report: " in capsys.readouterr().out


def test_summary_markdown_is_drawn_from_the_summary_alone(monkeypatch):
    s = summarise_run(_results(), meta={"ctxbench_version": "1", "created": "now", "config": {
        "workload": {"w": 1}, "strategies": ["lru", "arc"], "budgets_tokens": [1_000.0, 2_000.0],
        "bytes_per_token": 4.0, "lenient": True}})
    for name in ("ranked", "price_of_purity", "bracket_gaps", "compare_claim_modes"):
        monkeypatch.setattr(summary_module, name, lambda *a, **k: pytest.fail("computed while drawing"))
    text = summary_markdown(s)
    assert "- sessions: 2, strategies: lru, arc" in text and "violations: 1" in text
    assert "## Decision at 2,000 tokens" in text and "## Misses at 2,000 tokens" in text and "## Price of purity" in text
    assert re.search(r"^\| 1 \| arc \| [^|]* \| 6 \[4–8\] \|", text, re.M)      # the decision view
    assert "| 1 | arc | no | " in text and math.isfinite(s.ranking["reread_tokens"].iloc[0])   # its misses
