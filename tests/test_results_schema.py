"""Results directories edited by hand: every reader refuses a bad table or meta.json in one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.cli import main
from ctxbench.sim.engine.suite import build_suite
from ctxbench.sim.presentation.results import load_results, run_metadata, write_results_dir

BUDGETS = [25_000, 200_000]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    grid = run_grid(build_suite("quick"), ["lru"], BUDGETS, workers=1, progress=False, bracket=True)
    meta = run_metadata({"workload": {"suite": "quick"}, "strategies": ["lru"], "budgets_tokens": BUDGETS,
                         "bytes_per_token": 3.8, "lenient": False})
    return write_results_dir(tmp_path_factory.mktemp("run") / "results", grid.results, grid.turns, meta)


def _set(column, value):
    def edit(df):
        df[column] = df[column].astype(str if isinstance(value, str) or value is None else float)
        df.loc[0, column] = value
        return df
    return edit


RESULTS_EDITS = {
    "text budget": (_set("budget_tokens", "abc"), "budget_tokens", "'abc'"),
    "text miss rate": (_set("miss_rate", "lots"), "miss_rate", "'lots'"),
    "infinite re-reads": (_set("reread_tokens", float("inf")), "reread_tokens", "inf"),
    "NaN miss rate": (_set("miss_rate", float("nan")), "miss_rate", "nan"),
    "negative re-reads": (_set("reread_tokens", -1.0), "reread_tokens", "-1.0"),
    "rate above 1": (_set("capacity_miss_rate", 1.5), "capacity_miss_rate", "1.5"),
    "negative budget": (_set("budget_tokens", -5), "budget_tokens", "-5.0"),
    "NaN latency of a strategy": (_set("evict_p99_ns", float("nan")), "evict_p99_ns", "nan"),
    "no strategy": (_set("strategy", None), "strategy", ""),
    "duplicated row": (lambda df: pd.concat([df, df.iloc[[0]]], ignore_index=True), "repeats row 0", "lru"),
}
TURNS_EDITS = {
    "text hits": (_set("hits", "x"), "hits", "'x'"),
    "negative evictions": (_set("evictions", -3), "evictions", "-3.0"),
    "fractional turn": (_set("turn", 1.5), "turn", "1.5"),
    "NaN latency": (_set("evict_ns", float("nan")), "evict_ns", "nan"),
    "duplicated turn": (lambda df: pd.concat([df, df.iloc[[0]]], ignore_index=True), "repeats row 0", "turn"),
}
META_EDITS = {
    "strategies not text": (lambda m: m["config"].update(strategies=[1, 2]), "config.strategies"),
    "budget not a number": (lambda m: m["config"].update(budgets_tokens=["x"]), "config.budgets_tokens"),
    "ratios not an object": (lambda m: m["config"].update(token_ratios="x"), "config.token_ratios"),
    "ratio negative": (lambda m: m["config"].update(token_ratios={"code": -1}), "config.token_ratios"),
    "unknown rank": (lambda m: m["config"].update(rank_by="speed"), "config.rank_by"),
    "violations not text": (lambda m: m.update(violations=[{"x": 1}]), "violations"),
    "machine nested": (lambda m: m.update(machine={"cores": [1]}), "machine"),
}


def _copy(good: Path, tmp_path: Path) -> Path:
    bad = tmp_path / "edited"
    shutil.copytree(good, bad)
    return bad


def _refused(bad: Path, tmp_path: Path, capsys, *needles: str) -> None:
    """`report` and `snapshots` both exit 2 with one line naming the needles, writing nothing."""
    before = sorted(p.name for p in bad.iterdir())
    for argv in (["report", str(bad)], ["snapshots", str(bad), "--out", str(tmp_path / "s.jsonl")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err, err
        for needle in needles:
            assert needle in err, (needle, err)
    assert sorted(p.name for p in bad.iterdir()) == before
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("case", RESULTS_EDITS)
def test_edited_results_table_is_refused_naming_file_row_column_and_value(case, good, tmp_path, capsys):
    edit, column, value = RESULTS_EDITS[case]
    bad = _copy(good, tmp_path)
    edit(pd.read_parquet(bad / "results.parquet")).to_parquet(bad / "results.parquet", index=False)
    _refused(bad, tmp_path, capsys, "results.parquet", column, value, "row ")


@pytest.mark.parametrize("case", TURNS_EDITS)
def test_edited_turns_table_is_refused(case, good, tmp_path, capsys):
    edit, column, value = TURNS_EDITS[case]
    bad = _copy(good, tmp_path)
    edit(pd.read_parquet(bad / "turns.parquet")).to_parquet(bad / "turns.parquet", index=False)
    _refused(bad, tmp_path, capsys, "turns.parquet", column, value, "row ")


@pytest.mark.parametrize("case", META_EDITS)
def test_meta_json_of_the_wrong_shape_is_refused_naming_the_key(case, good, tmp_path, capsys):
    edit, key = META_EDITS[case]
    bad = _copy(good, tmp_path)
    meta = json.loads((bad / "meta.json").read_text())
    edit(meta)
    (bad / "meta.json").write_text(json.dumps(meta))
    _refused(bad, tmp_path, capsys, "meta.json", key)


def test_results_as_written_load_and_bounds_may_lack_latency(good):
    res = load_results(good)
    assert res.results["strategy"].str.startswith("opt:").any()
    assert res.results["evict_p99_ns"].isna().any()   # the bounds' rows, which are not refused
    assert np.isfinite(res.results["miss_rate"]).all()


@pytest.fixture(scope="module")
def multi_arm(tmp_path_factory) -> Path:
    """The results of a run of one session of two arms: they hold arms.parquet, which the report reads."""
    directory = tmp_path_factory.mktemp("arms")
    assert main(["generate", "--preset", "parallel-hubs", "--arms", "2", "--set", "tool_calls=60",
                 "--out", str(directory / "t.parquet")]) == 0
    assert main(["run", "--traces", str(directory / "t.parquet"), "--strategy", "lru", "--budget-tokens", "20000",
                 "--no-bracket", "--no-report", "--workers", "1", "--out", str(directory / "results")]) == 0
    assert (directory / "results" / "arms.parquet").is_file()
    return directory / "results"


ARMS_EDITS = {
    "text arm": (_set("arm", None), "arm", ""),
    "text miss rate": (_set("miss_rate", "lots"), "miss_rate", "'lots'"),
    "rate above 1": (_set("byte_miss_rate", 2.0), "byte_miss_rate", "2.0"),
    "negative re-reads": (_set("reread_tokens", -7.0), "reread_tokens", "-7.0"),
    "infinite budget": (_set("budget_tokens", float("inf")), "budget_tokens", "inf"),
    "duplicated arm": (lambda df: pd.concat([df, df.iloc[[0]]], ignore_index=True), "repeats row 0", "arm "),
}


@pytest.mark.parametrize("case", ARMS_EDITS)
def test_edited_arms_table_is_refused_by_the_report_naming_file_row_column_and_value(case, multi_arm, tmp_path,
                                                                                     capsys):
    edit, column, value = ARMS_EDITS[case]
    bad = _copy(multi_arm, tmp_path)
    edit(pd.read_parquet(bad / "arms.parquet")).to_parquet(bad / "arms.parquet", index=False)
    before = sorted(p.name for p in bad.iterdir())
    capsys.readouterr()
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in ("arms.parquet", column, value, "row "):
        assert needle in err, (needle, err)
    assert sorted(p.name for p in bad.iterdir()) == before


def test_the_arms_table_as_written_is_read_back(multi_arm, tmp_path, capsys):
    good = _copy(multi_arm, tmp_path)
    assert main(["report", str(good)]) == 0, capsys.readouterr().err
