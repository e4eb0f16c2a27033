"""Context policies wherever strategies run: `ctxbench run`, `check`, `fidelity --policy`, `cmd:` policies, the
regression gate, and the bundled real Claude Code sessions' compaction points."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.analysis.compaction_points import compaction_points
from ctxbench.sim.analysis.regress import _default_strategies, shipped_spec
from ctxbench.sim.cli import main
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.registry import CompactedStrategy, kind_of, make, split_combination
from real_data import REAL_DATA

ROOT = Path(__file__).resolve().parents[1]
DATA = REAL_DATA
FAST = ["--workers", "1", "--no-bracket"]


def run_cli(*args):
    return main(["run", *map(str, args)])


def exit_code(*args) -> int:
    """The exit code of ``ctxbench ARGS``: returned, or raised by the option parser."""
    try:
        return main([*map(str, args)])
    except SystemExit as exc:
        return exc.code


# ----- specs ----------------------------------------------------------------------------------------------

def test_a_spec_names_a_policy_a_strategy_or_a_combination():
    assert kind_of("claude-code?trigger_tokens=150000") == "policy" and kind_of("lru") == "strategy"
    assert split_combination("gdsf+codex?trigger_fraction=0.8") == ("gdsf", "codex?trigger_fraction=0.8")
    assert split_combination("lru+compaction") == ("lru", "claude-code")
    combined = make("lru?max_entries=50+compaction?trigger_tokens=150000")
    assert isinstance(combined, CompactedStrategy) and combined.strategy.max_entries == 50
    assert combined.policy.managed_compaction(200_000) == (150_000, 4_000, True)
    with pytest.raises(StrategyLoadError, match="does not compact a managed context"):
        make("lru+observation-masking")
    with pytest.raises(StrategyLoadError, match="is a policy"):
        make("codex+compaction")


def test_the_regression_gate_covers_the_policies_once_baselined():
    assert shipped_spec("observation-masking?n=10") and shipped_spec("gdsf+codex")
    assert not shipped_spec("lru+cmd:x") and not shipped_spec("os:system+compaction")
    defaults = _default_strategies(None)
    assert {"claude-code", "codex", "clear-tool-uses", "observation-masking", "openhands-summarizing",
            "amortized-forgetting", "lru+compaction"} <= set(defaults) and "lru" in defaults


# ----- ctxbench run -----------------------------------------------------------------------------------------

def test_run_replays_policies_beside_strategies_with_the_same_columns(tmp_path, capsys):
    out = tmp_path / "res"
    assert run_cli("--preset", "claude-code-like", "--sessions", "2", "--strategy", "lru", "gdsf", "claude-code",
                   "observation-masking", "lru+compaction", "--price", "claude-sonnet-4-5", "--cache-ttl", "1h",
                   "--out", out, *FAST) == 0
    printed = capsys.readouterr().out
    assert "Context policies at 200,000 tokens" in printed
    results = pd.read_parquet(out / "results.parquet")
    models = results.groupby("strategy")["model"].first().to_dict()
    assert models == {"lru": "managed", "gdsf": "managed", "lru+compaction": "managed", "claude-code": "transcript",
                      "observation-masking": "transcript"}
    for column in ("input_tokens", "cost_tokens", "cost_input_tokens", "cache_read_input_tokens",
                   "cache_write_input_tokens", "uncached_input_tokens", "compactions", "reread_tokens", "cost_usd",
                   "summary_input_tokens", "summary_output_tokens"):
        assert results[column].notna().all(), column
    # Sonnet 4.5: $3 per million input tokens, $15 per million output tokens (the summaries)
    assert results["cost_usd"].to_numpy() == pytest.approx(
        (results["cost_input_tokens"] * 3 + results["summary_output_tokens"] * 15).to_numpy() / 1e6, rel=1e-12)
    summaries = results.groupby("strategy")["summary_output_tokens"].sum()
    assert summaries["claude-code"] > 0 and summaries["lru+compaction"] > 0 and summaries["observation-masking"] == 0
    # the 1-hour cache: writes cost 2, reads 0.1
    r = results.iloc[0]
    written, read = r["cache_write_input_tokens"], r["cache_read_input_tokens"]
    assert r["cost_input_tokens"] == pytest.approx(2 * written + 0.1 * read)
    assert "## Context policies" in (out / "summary.md").read_text()
    assert "## Context policies" in (out / "report.md").read_text()
    assert "Context policies" in (out / "report.html").read_text()
    assert (out / "figures" / "policy_tradeoff.png").is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["cache_ttl"] == "1h" and meta["config"]["price"]["usd_per_mtok"] == 3.0
    assert meta["config"]["price"]["usd_per_mtok_output"] == 15.0


def test_run_json_carries_the_comparison(tmp_path, capsys):
    assert run_cli("--preset", "mixed", "--sessions", "1", "--strategy", "lru", "codex", "--out", tmp_path / "r",
                   "--json", "--no-report", *FAST) == 0
    doc = json.loads(capsys.readouterr().out)
    policies = [p["strategy"] for p in doc["policies"]]
    assert policies == [r["strategy"] for r in doc["ranking"] if r["strategy"] in policies]   # one order
    assert {p["model"] for p in doc["policies"]} == {"managed", "transcript"} and doc["cache_ttl"] == "5m"


def test_run_without_strategies_runs_the_policies_too(tmp_path):
    assert run_cli("--preset", "file-walk", "--sessions", "1", "--out", tmp_path / "r", "--no-report", *FAST) == 0
    names = set(pd.read_parquet(tmp_path / "r" / "results.parquet")["strategy"])
    assert {"lru", "gdsf", "claude-code", "codex", "observation-masking", "lru+compaction"} <= names


@pytest.mark.parametrize("args, message", [(["--price", "gpt-9"], "unknown model 'gpt-9'"),
                                           (["--strategy", "lru+observation-masking"], "does not compact"),
                                           (["--cache-ttl", "2h"], "invalid choice")])
def test_run_bad_policy_options_exit_2(tmp_path, capsys, args, message):
    assert exit_code("run", "--preset", "mixed", "--sessions", "1", "--out", tmp_path / "r", *FAST, *args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# ----- cmd: policies ------------------------------------------------------------------------------------

def test_a_cmd_policy_replays_exactly_as_in_process(tmp_path):
    from ctxbench.sim.engine.replay import replay_session, split_sessions
    from ctxbench.traces.generate import generate

    (st,) = split_sessions(generate("debug-loop", sessions=1, seed=2))
    external = f"cmd:{sys.executable} {ROOT / 'examples' / 'policy_external.py'}?kind=policy"
    ours, theirs = (replay_session(st, spec).row for spec in ("observation-masking", external))
    assert ours["log_hash"] == theirs["log_hash"] and ours["cost_input_tokens"] == theirs["cost_input_tokens"]
    assert theirs["model"] == "transcript"


def test_a_cmd_policy_that_answers_badly_is_a_violation(tmp_path):
    from ctxbench.sim.engine.replay import replay_session, split_sessions
    from ctxbench.sim.errors import ContractViolation
    from ctxbench.traces.generate import generate

    script = tmp_path / "bad.py"
    script.write_text("import sys\nfor line in sys.stdin:\n    print('{\"edits\": 3}', flush=True)\n")
    (st,) = split_sessions(generate("debug-loop", sessions=1, seed=2))
    with pytest.raises(ContractViolation, match=r"replied .*the reply is not"):
        replay_session(st, f"cmd:{sys.executable} {script}?kind=policy")
    with pytest.raises(StrategyLoadError, match="must be strategy or policy"):
        make(f"cmd:{sys.executable} {script}?kind=plan")


# ----- ctxbench check --------------------------------------------------------------------------------------

def test_check_checks_a_policy_against_the_policy_contract(capsys):
    assert main(["check", "codex", "--examples", "20", "--no-latency"]) == 0
    assert "conforms to the policy contract" in capsys.readouterr().out
    assert main(["check", "openhands-summarizing", "--examples", "20", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "policy" and "window-grows" in report["checked"] and len(report["latency"]) == 2


@pytest.mark.parametrize("spec, kind", [("broken_policies:grows", "grows"), ("broken_policies:unknown", "unknown-item"),
                                        ("broken_policies:requests_unknown", "bad-request"),
                                        ("broken_policies:ends_its_process", "leaves")])
def test_check_fails_a_broken_policy_with_exit_1(capsys, monkeypatch, spec, kind):
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    assert main(["check", spec, "--examples", "20", "--no-latency", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert kind in [f["kind"] for f in report["failures"]]
    failure = next(f for f in report["failures"] if f["kind"] == kind)
    assert failure["example"]["items"] is not None and failure["property"]


def test_check_a_combination_checks_both_parts(capsys):
    assert main(["check", "lru+codex", "--examples", "15", "--no-latency", "--json"]) == 0
    kinds = [doc["kind"] for doc in json.loads(capsys.readouterr().out)]
    assert kinds == ["strategy", "policy"]


# ----- compaction points ----------------------------------------------------------------------------------

def growing_session(compact_at: int) -> pd.DataFrame:
    """An overhead, then a 10,000-byte output per turn; the real agent compacted before ``compact_at``."""
    rows = [("s", 0, 0, "overhead", "overhead://system", 20_000, 20_000, False)]
    for t in range(40):
        rows.append(("s", t, 1000 * t, "output", f"tool://bash/{t}", 10_000, 30_000 + 3_000 * t, t == compact_at))
    return pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes", "usage_input_tokens",
                                       "compact_before"])


def test_compaction_points_compare_the_first_simulated_with_the_first_real():
    # at 1 byte per token and a 100,000-token window, Claude Code's trigger is 100,000 - 16,500: the
    # transcript (20,000 + 10,000 per turn) reaches it at the end of turn 6, so turn 7 is the first compacted
    rows = compaction_points(growing_session(9), "claude-code", 100_000, tokens=1.0)
    row = rows.iloc[0]
    assert row["compactions_real"] == [9] and row["compactions_sim"][0] == 7 and row["calls_apart"] == -2
    # the first summarization call holds the 90,000-token window; the real agent summarized after turn 8's call
    # of 54,000; none passed the window
    assert (row["summary_prompt_sim"], row["summary_prompt_real"], row["summary_over_window"]) == (90_000, 54_000, 0)
    # a trigger past the window: the request (110,000 before turn 9) is over it, untrimmed with overflow=fail
    late = compaction_points(growing_session(9), "claude-code?trigger_tokens=110000&overflow=fail", 100_000,
                             tokens=1.0).iloc[0]
    assert late["summary_prompt_sim"] == 110_000 and late["summary_over_window"] >= 1
    none = compaction_points(growing_session(9), "claude-code?trigger_tokens=10000000", 100_000, tokens=1.0)
    assert none.iloc[0]["compactions_sim"] == [] and none.iloc[0]["calls_apart"] is None
    assert none.iloc[0]["summary_prompt_sim"] is None and none.iloc[0]["summary_over_window"] is None


def test_fidelity_policy_option(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    growing_session(9).to_csv(trace, index=False)
    assert main(["fidelity", str(trace), "--policy", "claude-code", "--window", "100000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["compactions_real"] == [9] and rows[0]["compactions_sim"] and rows[0]["calls_apart"] is not None
    assert exit_code("fidelity", trace, "--policy", "lru") == 2
    assert "not a context policy" in capsys.readouterr().err


@pytest.fixture(scope="module")
def real_window():
    from ctxbench.traces.importers import import_paths

    sessions = ("258c7280-ae70-4798-800f-63464d01a85d", "8463c716-a2ea-4c14-9efa-87158ebd9f20")
    paths = [p for s in sessions for p in (DATA / "claude-code" / f"{s}.jsonl", DATA / "claude-code" / s)]
    df, _ = import_paths("claude-code", paths)   # the whole window: conversation, calls and overhead
    assert (df["op"].astype(str) == "call").any() and (df["op"].astype(str) == "overhead").any()
    return df


@pytest.mark.real_sessions
def test_the_bundled_sessions_compact_within_10_calls_of_where_they_really_did(real_window):
    rows = compaction_points(real_window, "claude-code", 200_000)
    main_rows = rows[rows["arm"] == "main"]
    assert len(main_rows) == 2
    for _, row in main_rows.iterrows():
        assert row["compactions_real"] and row["compactions_sim"], row.to_dict()
        assert abs(row["calls_apart"]) <= 10, row.to_dict()


def test_policies_stay_out_of_the_bracket_and_the_price_of_purity():
    from ctxbench.sim.analysis.bracket import bracket_gaps
    from ctxbench.sim.analysis.grid import run_grid
    from ctxbench.sim.analysis.purity import price_of_purity
    from ctxbench.traces.generate import generate

    results = run_grid(generate("hub-and-spoke", sessions=2, seed=1), ["lru", "fifo", "observation-masking",
                                                                       "lru+compaction"], [5_000],
                       bracket=True, workers=1, progress=False).results
    gaps = bracket_gaps(results)
    assert set(gaps["strategy"]) == {"lru", "fifo"}
    purity = price_of_purity(results)
    assert set(purity["best_pure"]) == {"lru"} and set(purity["best_stateful"]) == {"fifo"}


def test_every_priced_model_bills_output_at_the_ratio_cost_tokens_prices_it_at():
    from ctxbench.sim.analysis.prices import PRICES
    from ctxbench.sim.engine.measures import OUTPUT_PRICE

    assert {model: price.output_ratio for model, price in PRICES.items()} == dict.fromkeys(PRICES, OUTPUT_PRICE)
