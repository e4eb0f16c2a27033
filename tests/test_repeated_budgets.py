"""A budget is replayed once: the same number, the same byte budget or the same label twice is refused in one line."""

from __future__ import annotations

import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.cli.commands._options import budget_label, check_budgets
from ctxbench.sim.errors import InputError
from test_cli_run import FAST, small_trace


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("budgets, fragment", [
    (["200000", "2e5"], "--budget-tokens: the budget of 200,000 tokens is given twice"),
    (["50000", "50000", "50000"], "--budget-tokens: the budget of 50,000 tokens is given twice"),
    (["50000", "100000", "50000.0"], "the budget of 50,000 tokens is given twice"),
    (["50000.2", "50000.4"], "--budget-tokens 50000.2 and 50000.4 both read 50,000 tokens in the tables"),
    (["50000", "50000.3"], "both read 50,000 tokens"),
    (["50000", "50001", "--bytes-per-token", "0.001"],
     "--budget-tokens 50000 and 50001 are the same budget of 50 bytes at 0.001 bytes per token"),
])
def test_a_budget_given_twice_is_refused_before_any_replay(tmp_path, capsys, budgets, fragment):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--budget-tokens", *budgets,
                 "--out", str(tmp_path / "r"), *FAST]) == 2
    assert fragment in _one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def test_distinct_budgets_run_and_read_apart(tmp_path):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--budget-tokens", "50000.4", "50000.6", "2e5",
                 "--out", str(tmp_path / "r"), *FAST]) == 0
    budgets = pd.read_parquet(tmp_path / "r" / "results.parquet")["budget_tokens"]
    assert sorted(budgets.unique()) == [50000.4, 50000.6, 200000.0]
    assert len(budgets) == 3 * 2   # each budget once per session
    assert len({budget_label(b) for b in budgets.unique()}) == 3


def test_the_check_is_shared_by_every_command_that_takes_budgets():
    with pytest.raises(InputError, match="--budget: the budget of 10 tokens is given twice"):
        check_budgets([10, 10.0], None, option="--budget")
    check_budgets([10, 11], None)
