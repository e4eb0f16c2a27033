"""Every numeric option has a range checked when it is parsed: strategies' and policies' options, time limits,
STRATEGY+POLICY options; one line naming the option, and both engines take the same values."""

from __future__ import annotations

import inspect

import pytest

from ctxbench.sim.analysis.grid import as_sessions
from ctxbench.sim.cli import main
from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.engine.replay import budget_for_tokens, replay_session
from ctxbench.strategies.calls import CallLimit
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.external import parse_command_spec
from ctxbench.strategies.limits import MAX_OPTION_INT, MAX_TIME_LIMIT_MS
from ctxbench.strategies.registry import builtin_names, make
from test_cli_run import FAST, small_trace
from ctxbench.traces.generate import generate

HUGE = 10**30


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _integer_options() -> list[tuple[str, str]]:
    """(built-in name, option) for every integer option of every built-in strategy and policy."""
    found = []
    for name in builtin_names(kind=None):
        built = make(name)
        for param in inspect.signature(type(built).__init__).parameters.values():
            default = param.default
            if param.name == "trigger_tokens" or (type(default) is int):
                found.append((name, param.name))
    return found


INTEGER_OPTIONS = _integer_options()


def test_the_integer_options_are_found():
    assert ("lru", "max_entries") in INTEGER_OPTIONS and ("claude-code", "trigger_tokens") in INTEGER_OPTIONS
    assert ("s3fifo", "move_threshold") in INTEGER_OPTIONS and ("observation-masking", "n") in INTEGER_OPTIONS
    assert len(INTEGER_OPTIONS) > 25


@pytest.mark.parametrize("name, option", INTEGER_OPTIONS, ids=[f"{n}-{o}" for n, o in INTEGER_OPTIONS])
def test_every_integer_option_above_2_50_is_a_load_error_naming_it(name, option):
    with pytest.raises(StrategyLoadError, match=rf"{option} must be an integer from \d+ to .*\(2\*\*50\)"):
        make(f"{name}?{option}={MAX_OPTION_INT + 1}")
    with pytest.raises(StrategyLoadError, match=option):
        make(f"{name}?{option}={HUGE}")


@pytest.mark.parametrize("spec", ["lru+compaction?trigger_tokens={}", "lru+compaction?summary_tokens={}",
                                  "gdsf+codex?summary_tokens={}", "claude-code?read_tokens={}"])
def test_a_huge_option_in_a_run_is_one_line_on_both_engines(tmp_path, capsys, monkeypatch, spec):
    trace = small_trace(tmp_path / "t.csv")
    for pure in ("0", "1"):
        monkeypatch.setenv("CTXBENCH_PURE_PYTHON", pure)
        argv = ["run", "--traces", str(trace), "--strategy", spec.format("9" * 30), "--out", str(tmp_path / "r"),
                *FAST]
        assert main(argv) == 2
        line = _one_error_line(capsys)
        assert "must be an integer from" in line and "OverflowError" not in line
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not BUILT, reason="the compiled engine is not built")
@pytest.mark.parametrize("options, bytes_per_token", [
    (f"trigger_tokens={MAX_OPTION_INT}&summary_tokens={MAX_OPTION_INT}", 1_000_000),   # bytes past int64
    (f"trigger_tokens=1&summary_tokens={MAX_OPTION_INT}", 1_000_000),
    ("trigger_tokens=1&summary_tokens=0", 2.0)])   # compacts at every turn end
def test_both_engines_replay_the_largest_options_alike(options, bytes_per_token):
    session = as_sessions(generate("mixed", sessions=1, seed=3, tool_calls=40))[0]
    spec = f"lru+compaction?{options}"
    budget = budget_for_tokens(50_000, bytes_per_token)
    pure, compiled = (replay_session(session, spec, budget, bytes_per_token=bytes_per_token, compiled=c).row
                      for c in (False, True))
    assert pure["log_hash"] == compiled["log_hash"] and pure["compactions"] == compiled["compactions"]
    assert (pure["compactions"] > 0) == (bytes_per_token == 2.0)


@pytest.mark.parametrize("argv", [["run", "--evict-timeout-ms", "922337203685477"],
                                  ["run", "--evict-timeout-ms", str(MAX_TIME_LIMIT_MS + 1)],
                                  ["check", "lru", "--evict-timeout-ms", "100000000000000"],
                                  ["regress", "--evict-timeout-ms", "0"]])
def test_evict_timeout_out_of_its_range_is_refused_before_any_call(tmp_path, capsys, argv):
    trace = small_trace(tmp_path / "t.csv")
    where = {"run": ["--traces", str(trace), "--strategy", "lru", "--out", str(tmp_path / "r"), *FAST],
             "check": ["--no-latency", "--examples", "5"], "regress": ["--baseline", str(tmp_path / "none.json")]}
    assert main([argv[0], *where[argv[0]], *argv[1:]]) == 2
    line = _one_error_line(capsys)
    assert "--evict-timeout-ms must be a whole number of milliseconds from 1 to 86,400,000" in line
    assert "lru" not in line and "breaks" not in line   # never blamed on the strategy


def test_the_largest_evict_timeout_runs(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--evict-timeout-ms", str(MAX_TIME_LIMIT_MS),
                 "--out", str(tmp_path / "r"), *FAST]) == 0


@pytest.mark.parametrize("value", ["99999999999999999999", str(MAX_TIME_LIMIT_MS + 1), "0", "-5", "1e3", "soon"])
@pytest.mark.parametrize("option", ["timeout_ms", "start_timeout_ms"])
def test_a_cmd_time_limit_out_of_range_is_a_load_error(option, value):
    with pytest.raises(StrategyLoadError, match=f"option {option} .* from 1 to 86,400,000"):
        parse_command_spec(f"node lru.js?{option}={value}")


def test_a_cmd_option_given_twice_is_a_load_error():
    with pytest.raises(StrategyLoadError, match="option timeout_ms given twice"):
        parse_command_spec("node lru.js?timeout_ms=10&timeout_ms=20")
    with pytest.raises(StrategyLoadError, match="option kind given twice"):
        parse_command_spec("node lru.js?kind=policy&kind=strategy")


def test_a_cmd_time_limit_in_the_run_is_one_line_not_a_violation(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "cmd:cat?timeout_ms=99999999999999999999",
                 "--out", str(tmp_path / "r"), *FAST]) == 2
    line = _one_error_line(capsys)
    assert "error: option timeout_ms" in line and "contract violation" not in line


def test_the_api_refuses_a_time_limit_out_of_range():
    with pytest.raises(ValueError, match="from 1 to 86,400,000"):
        CallLimit(MAX_TIME_LIMIT_MS + 1)
    assert CallLimit(MAX_TIME_LIMIT_MS).ms == MAX_TIME_LIMIT_MS
