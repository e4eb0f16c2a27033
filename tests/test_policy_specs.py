"""Policy specs and combinations: a repeated option, a combination of two policies, a trigger above the window,
a policy where a strategy belongs and a figure option without its figure are each one line, exit 2, or a note."""

from __future__ import annotations

import pytest

from ctxbench.sim.cli import main
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.registry import combination_parts, make, parse_spec
from test_cli_run import FAST, small_trace
from test_fidelity import hand_trace
from ctxbench.traces.io import save


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("spec", ["claude-code?trigger_tokens=1&trigger_tokens=2", "lru?max_entries=5&max_entries=5",
                                  "lru?max_entries=5+compaction?summary_tokens=1&summary_tokens=2"])
def test_an_option_given_twice_in_a_spec_is_a_load_error(spec):
    with pytest.raises(StrategyLoadError, match="given twice in spec"):
        make(spec)


@pytest.mark.parametrize("spec", ["lru+compaction?trigger_tokens=50000+compaction", "lru+codex+compaction",
                                  "gdsf+claude-code+codex?trigger_fraction=0.5"])
def test_a_combination_of_two_policies_is_a_load_error(spec):
    with pytest.raises(StrategyLoadError, match="names two policies"):
        make(spec)
    with pytest.raises(StrategyLoadError, match="names two policies"):
        combination_parts(spec)


def test_one_combination_still_builds():
    assert combination_parts("lru?max_entries=5+compaction?trigger_tokens=9") == \
        ("lru?max_entries=5", "claude-code?trigger_tokens=9")
    assert parse_spec("lru?max_entries=5") == ("lru", {"max_entries": 5})


@pytest.mark.parametrize("argv", [["run", "--strategy", "lru+compaction?trigger_tokens=50000+compaction"],
                                  ["run", "--strategy", "claude-code?trigger_tokens=1&trigger_tokens=2"],
                                  ["check", "lru+compaction?trigger_tokens=50000+compaction"]])
def test_the_commands_refuse_them_in_one_line(tmp_path, capsys, argv):
    trace = small_trace(tmp_path / "t.csv")
    where = {"run": ["--traces", str(trace), "--out", str(tmp_path / "r"), *FAST],
             "check": ["--no-latency", "--examples", "5"]}[argv[0]]
    assert main([argv[0], *where, *argv[1:]]) == 2
    line = _one_error_line(capsys)
    assert "given twice in spec" in line or "names two policies" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("spec, budgets", [("claude-code?trigger_tokens=300000", ["200000"]),
                                           ("lru+compaction?trigger_tokens=300000", ["200000"]),
                                           ("clear-tool-uses?trigger_tokens=60000", ["50000", "100000"])])
def test_a_trigger_option_above_the_window_is_refused(tmp_path, capsys, spec, budgets):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", spec, "--budget-tokens", *budgets,
                 "--out", str(tmp_path / "r"), *FAST]) == 2
    line = _one_error_line(capsys)
    assert f"{spec} acts at" in line and "above the" in line and "give a trigger_tokens within the window" in line
    assert not (tmp_path / "r").exists()


def test_a_default_trigger_above_the_window_is_stated(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "clear-tool-uses", "claude-code", "--budget-tokens",
                 "50000", "--out", str(tmp_path / "r"), *FAST]) == 0
    err = capsys.readouterr().err
    assert ("note: clear-tool-uses acts at 100,000 tokens, above the 50,000-token window: its calls pass the window "
            "before it compacts or clears") in err
    assert "claude-code acts" not in err   # its default trigger follows the window


@pytest.fixture
def imported(tmp_path):
    path = tmp_path / "real.parquet"
    save(hand_trace(), path)
    return path


@pytest.mark.parametrize("argv, fragment", [
    (["--strategy", "claude-code"], "--strategy 'claude-code' is a context policy, not an eviction strategy"),
    (["--strategy", "observation-masking", "--budget", "1000"], "is a context policy"),
    (["--session", "bogus"], "--session picks the session of the window figure, which only --out writes"),
    (["--arm", "main"], "--arm picks the arm of the window figure"),
    (["--policy", "claude-code?trigger_tokens=300000"], "acts at 300,000 tokens, above the 200,000-token window"),
])
def test_fidelity_refuses_what_it_would_ignore_or_misread(imported, capsys, argv, fragment):
    assert main(["fidelity", str(imported), *argv]) == 2
    assert fragment in _one_error_line(capsys)


def test_fidelity_states_a_default_trigger_above_its_window(imported, capsys):
    assert main(["fidelity", str(imported), "--policy", "clear-tool-uses", "--window", "50000", "--json"]) == 0
    assert "note: clear-tool-uses acts at 100,000 tokens, above the 50,000-token window" in capsys.readouterr().err
