"""The price of purity: best pure against best stateful strategy, per trace and budget, and in `ctxbench run`."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.analysis.purity import ALL_TRACES, PURITY_COLUMNS, price_of_purity
from ctxbench.sim.presentation.summary_text import purity_display, purity_markdown


def rows(trace: str, budget: int, strategy: str, pure, rereads: list[float], misses: list[float]) -> list[dict]:
    return [{"trace": trace, "session": f"{trace}-{i}", "strategy": strategy, "pure": pure, "budget_tokens": budget,
             "reread_tokens": r, "miss_rate": m} for i, (r, m) in enumerate(zip(rereads, misses))]


RESULTS = pd.DataFrame([
    *rows("walk", 100, "lru", True, [10, 30], [0.5, 0.5]),           # mean 20
    *rows("walk", 100, "gdsf", True, [5, 15], [0.4, 0.4]),           # mean 10: best pure
    *rows("walk", 100, "sieve", False, [2, 6], [0.3, 0.3]),          # mean 4: best stateful
    *rows("walk", 100, "fifo", False, [40, 40], [0.9, 0.9]),
    *rows("walk", 100, "opt:lower", None, [0, 0], [0.1, 0.1]),       # a bound, never a contender
    *rows("walk", 100, "opt:belady-size", False, [1, 1], [0.1, 0.1]),
    *rows("hub", 100, "lru", True, [0, 0], [0.2, 0.2]),
    *rows("hub", 100, "sieve", False, [3, 3], [0.25, 0.25]),
    *rows("walk", 200, "lru", True, [0, 0], [0.1, 0.1]),
    *rows("walk", 200, "gdsf", True, [0, 0], [0.1, 0.1]),            # tie with lru: the name decides
    *rows("walk", 200, "sieve", False, [0, 0], [0.1, 0.1]),
    *rows("only-pure", 100, "lru", True, [1], [0.1]),
])


def test_best_of_each_kind_with_difference_and_ratio():
    table = price_of_purity(RESULTS)
    assert list(table.columns) == list(PURITY_COLUMNS)
    walk = table[(table["trace"] == "walk") & (table["budget_tokens"] == 100)].iloc[0]
    assert (walk["best_pure"], walk["best_stateful"], walk["sessions"]) == ("gdsf", "sieve", 2)
    assert (walk["pure_reread_tokens"], walk["stateful_reread_tokens"]) == (10, 4)
    assert walk["reread_tokens_diff"] == 6 and walk["reread_tokens_ratio"] == 2.5
    assert walk["miss_rate_diff"] == pytest.approx(0.1) and walk["miss_rate_ratio"] == pytest.approx(4 / 3)


def test_zero_re_reads_give_ratio_one_or_zero_and_ties_go_by_name():
    table = price_of_purity(RESULTS).set_index(["trace", "budget_tokens"])
    assert table.loc[("hub", 100), "reread_tokens_ratio"] == 0 and table.loc[("hub", 100), "reread_tokens_diff"] == -3
    tie = table.loc[("walk", 200)]
    assert tie["best_pure"] == "gdsf" and tie["reread_tokens_ratio"] == 1.0 and tie["miss_rate_diff"] == 0


def test_infinite_ratio_when_only_the_stateful_one_is_zero():
    frame = pd.DataFrame([*rows("t", 1, "lru", True, [5], [0.2]), *rows("t", 1, "arc", False, [0], [0.1])])
    row = price_of_purity(frame).iloc[0]
    shown = purity_display(price_of_purity(frame)).iloc[-1]
    assert math.isinf(row["reread_tokens_ratio"]) and shown["ratio"] == "—"   # no ∞: the difference tells
    assert shown["price"].startswith("+")   # pure minus stateful: 5 - 0 tokens


def test_groups_without_both_kinds_are_left_out_and_all_traces_row():
    table = price_of_purity(RESULTS)
    assert "only-pure" not in set(table["trace"])
    assert [tuple(x) for x in table[["trace", "budget_tokens"]].to_numpy()] == [
        ("hub", 100), ("walk", 100), ("walk", 200), (ALL_TRACES, 100), (ALL_TRACES, 200)]
    every = table.set_index(["trace", "budget_tokens"]).loc[(ALL_TRACES, 100)]
    # over the 5 sessions at budget 100: lru (10+30+0+0+1)/5 = 8.2; sieve (2+6+3+3)/4 = 3.5
    assert (every["best_pure"], every["pure_reread_tokens"]) == ("lru", pytest.approx(8.2))
    assert (every["best_stateful"], every["stateful_reread_tokens"]) == ("sieve", 3.5)


def test_empty_when_only_one_kind_ran_and_bad_input():
    only_pure = RESULTS[RESULTS["pure"] == True]  # noqa: E712 - an object column
    assert price_of_purity(only_pure).empty and list(price_of_purity(only_pure).columns) == list(PURITY_COLUMNS)
    with pytest.raises(ValueError, match="pure"):
        price_of_purity(RESULTS.drop(columns="pure"))


def test_claim_modes_are_compared_separately():
    frame = pd.concat([RESULTS.assign(claims="strict"), RESULTS.assign(claims="lazy")], ignore_index=True)
    table = price_of_purity(frame)
    assert "claims" in table.columns and len(table) == 2 * len(price_of_purity(RESULTS))


def test_markdown_names_both_strategies():
    text = purity_markdown(price_of_purity(RESULTS))
    assert "| walk | 100 | gdsf 0.0k, 40.0% | sieve 0.0k, 30.0% | +0.0k | ×2.50 |" in text


def test_on_a_real_grid():
    from ctxbench.traces.generate import generate

    grid = run_grid(generate("mixed", sessions=2, seed=4), ["lru", "gdsf", "fifo", "sieve"], (20_000, 200_000),
                    workers=1, keep_turns=False, progress=False)
    table = price_of_purity(grid.results)
    assert len(table) == 4 and set(table["best_pure"]) <= {"lru", "gdsf"}
    assert set(table["best_stateful"]) <= {"fifo", "sieve"}
    at = grid.results
    for _, r in table[table["trace"] != ALL_TRACES].iterrows():
        means = at[at["budget_tokens"] == r["budget_tokens"]].groupby("strategy")["reread_tokens"].mean()
        assert r["pure_reread_tokens"] == min(means["lru"], means["gdsf"])
        assert r["stateful_reread_tokens"] == min(means["fifo"], means["sieve"])


def test_run_prints_and_writes_it_only_when_both_kinds_ran(tmp_path, capsys):
    args = ["run", "--preset", "mixed", "--sessions", "1", "--budget-tokens", "30000", "--workers", "1",
            "--no-report"]
    assert main([*args, "--strategy", "lru", "sieve", "--out", str(tmp_path / "both")]) == 0
    assert "Price of purity" in capsys.readouterr().out
    summary = (tmp_path / "both" / "summary.md").read_text()
    assert "## Price of purity" in summary and "| mixed | 30k | lru " in summary
    assert main([*args, "--strategy", "lru", "gdsf", "--out", str(tmp_path / "pure")]) == 0
    assert "Price of purity" not in capsys.readouterr().out
    assert "Price of purity" not in (tmp_path / "pure" / "summary.md").read_text()
    assert main([*args, "--strategy", "lru", "arc", "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["best_stateful"] for r in doc["price_of_purity"]} == {"arc"}


def test_single_arm_sessions_count_in_every_claim_mode():
    rows = []
    for strategy, pure, reread in (("lru", True, 10.0), ("fifo", False, 20.0)):
        rows.append({"trace": "t", "session": "single", "strategy": strategy, "pure": pure,
                     "budget_tokens": 1000, "reread_tokens": reread, "miss_rate": 0.5, "claims": None})
        for mode, extra in (("strict", 0.0), ("lazy", 6.0)):
            rows.append({"trace": "t", "session": "multi", "strategy": strategy, "pure": pure,
                         "budget_tokens": 1000, "reread_tokens": reread + extra, "miss_rate": 0.5, "claims": mode})
    table = price_of_purity(pd.DataFrame(rows))
    one = table[table["trace"] == "t"].set_index("claims")
    assert sorted(one.index) == ["lazy", "strict"]            # no separate group without a mode
    assert one.loc["strict", "sessions"] == 2 and one.loc["lazy", "sessions"] == 2
    assert one.loc["strict", "pure_reread_tokens"] == 10.0    # mean of 10 (single) and 10 (multi, strict)
    assert one.loc["lazy", "pure_reread_tokens"] == 13.0      # mean of 10 and 16
