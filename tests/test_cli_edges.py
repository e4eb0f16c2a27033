"""Command-line edges: absurd numbers name the option and value, repeated options, trace labels, meta.json shape."""

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.cli import build_parser, main
from ctxbench.sim.cli.commands.run import trace_labels
from ctxbench.sim.errors import InputError
from ctxbench.sim.engine.replay import budget_for_tokens
from test_cli_run import FAST, small_trace


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _run(*argv) -> int:
    return main([str(a) for a in argv])


# --- budgets and bytes per token -------------------------------------------------------------------------------


def test_absurd_bytes_per_token_is_named_as_such_not_the_budget(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    assert _run("run", "--traces", trace, "--bytes-per-token", "1e300", "--out", tmp_path / "r", *FAST) == 2
    line = _one_error_line(capsys)
    assert "--bytes-per-token 1e+300 is absurd" in line and "budget" not in line.replace("bytes per token", "")


def test_a_budget_below_one_byte_is_refused_like_zero(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    for budget in ("1e-9", "0"):
        assert _run("run", "--traces", trace, "--budget-tokens", budget, "--out", tmp_path / "r", *FAST) == 2
        assert "--budget-tokens" in _one_error_line(capsys)
    assert not (tmp_path / "r").exists()
    with pytest.raises(InputError, match=r"budget 1e-09 is less than one byte at [0-9.]+ bytes per token"):
        budget_for_tokens(1e-9)
    assert budget_for_tokens(0.3, 3.8).max_bytes == 1  # 1.14 bytes: the smallest usable budget


@pytest.mark.parametrize("argv, fragment", [
    (["run", "--budget-tokens", "1e300"], "--budget-tokens 1e+300 is absurdly large"),
    (["run", "--bytes-per-token", "nan"], "--bytes-per-token must be a positive number"),
    (["run", "--bytes-per-token", "1e-300"], "--bytes-per-token 1e-300 is absurd"),
    (["run", "--max-files", str(10**23)], f"--max-files must be between 1 and 1,125,899,906,842,624, got {10**23}"),
    (["run", "--max-directories", "0"], "--max-directories must be between 1"),
    (["run", "--settle-ms", str(2**62), "--claims", "lazy"], f"--settle-ms must be between 0 and 1,125,899,906,842,624, got {2**62}"),
    (["run", "--thrashing-threshold", "0", "--claims", "lazy"], "--thrashing-threshold must be between 1"),
    (["run", "--preset", "mixed", "--sessions", "0"], "--sessions must be >= 1, got 0"),
    (["run", "--preset", "mixed", "--seed", "-1"], "--seed must be >= 0, got -1"),
    (["stats", "--budget-tokens", "1e-9"], "--budget-tokens 1e-09 is less than one byte"),
    (["stats", "--bytes-per-token", "1e300"], "--bytes-per-token 1e+300 is absurd"),
    (["fidelity", "--budget", "1e-9"], "--budget 1e-09 is less than one byte"),
    (["fidelity", "--bytes-per-token", "inf"], "--bytes-per-token must be a positive number"),
    (["check", "lru", "--seed", "-1"], "--seed must be >= 0, got -1"),
    (["bench", "--seed", "-1"], "--seed must be >= 0, got -1"),
    (["bench", "--events", str(10**23)], f"--events must be between 1 and 200,000,000, got {10**23}"),
    (["bench", "--files", str(10**23)], "--files must be between 1 and 1,000,000"),
    (["bench", "--repeat", str(10**23)], "--repeat must be between 1 and 1,000"),
    (["bench", "--budget-tokens", "1e-9"], "--budget-tokens 1e-09 is less than one byte"),
])
def test_absurd_numeric_options_exit_2_naming_option_and_value(tmp_path, capsys, argv, fragment):
    trace = small_trace(tmp_path / "t.csv")
    command, rest = argv[0], argv[1:]
    out = ["--out", str(tmp_path / "r"), *FAST]
    where = {"run": out if "--preset" in rest else ["--traces", str(trace), *out],
             "stats": [str(trace)], "fidelity": [str(trace)], "check": ["--no-latency", "--examples", "5"],
             "bench": [f"{option}={value}" for option, value in (("--events", 50), ("--files", 5), ("--repeat", 1))
                       if option not in rest]}[command]
    assert main([command, *where, *rest]) == 2
    assert fragment in _one_error_line(capsys)
    assert not (tmp_path / "r").exists()


# --- trace files and labels ------------------------------------------------------------------------------------


def test_traces_with_the_same_name_in_different_directories_get_distinct_labels(tmp_path, capsys):
    for d in ("d1", "d2"):
        (tmp_path / d).mkdir()
        small_trace(tmp_path / d / "t.csv")
    small_trace(tmp_path / "u.csv")
    out = tmp_path / "r"
    assert _run("run", "--traces", tmp_path / "d1" / "t.csv", tmp_path / "d2" / "t.csv", tmp_path / "u.csv",
                "--strategy", "lru", "--out", out, *FAST) == 0
    results = pd.read_parquet(out / "results.parquet")
    assert sorted(results["trace"].unique()) == ["d1/t.csv", "d2/t.csv", "u.csv"]
    capsys.readouterr()
    assert _run("run", "--traces", tmp_path / "u.csv", tmp_path / "d1" / ".." / "u.csv", "--out", out, *FAST) == 2
    assert "is " in _one_error_line(capsys)


@pytest.mark.parametrize("paths, labels", [
    (["t.csv"], ["t.csv"]),
    (["a/t.csv", "b/t.csv"], ["a/t.csv", "b/t.csv"]),
    (["x/a/t.csv", "y/a/t.csv", "b/t.csv", "u.csv"], ["x/a/t.csv", "y/a/t.csv", "b/t.csv", "u.csv"]),
    (["/r/t.csv", "/r/s/t.csv"], ["r/t.csv", "s/t.csv"]),
])
def test_trace_labels_are_the_shortest_distinguishing_suffix(paths, labels):
    assert trace_labels(paths) == labels


def test_a_directory_named_like_a_trace_is_a_directory_not_a_missing_file(tmp_path, capsys):
    (tmp_path / "x.csv").mkdir()
    for argv in (["stats", tmp_path / "x.csv"],
                 ["run", "--traces", tmp_path / "x.csv", "--out", tmp_path / "r", *FAST]):
        assert _run(*argv) == 2
        line = _one_error_line(capsys)
        assert f"{tmp_path / 'x.csv'}: is a directory" in line and "no such file" not in line


# --- meta.json -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("res")
    trace = small_trace(root / "t.csv")
    assert _run("run", "--traces", trace, "--strategy", "lru", "--out", root / "r", *FAST) == 0
    return root / "r"


@pytest.mark.parametrize("meta, fragment", [
    ([1, 2], "meta.json: expected a JSON object, got an array"),
    ("text", "meta.json: expected a JSON object, got a string"),
    ({"config": [1]}, "meta.json: config must be an object, got an array"),
    ({"machine": "big"}, "meta.json: machine must be an object, got a string"),
    ({"elapsed_s": "1s"}, "meta.json: elapsed_s must be a number, got a string"),
    ({"violations": {}}, "meta.json: violations must be an array, got an object"),
    ({"config": {"bytes_per_token": "x"}}, "config.bytes_per_token must be a number, got a string"),
    ({"config": {"bytes_per_token": -1}}, "config.bytes_per_token must be a positive number, got -1"),
    ({"config": {"workload": 3}}, "config.workload must be an object, got a number"),
    ({"config": {"lenient": "yes"}}, "config.lenient must be true or false, got a string"),
])
def test_a_meta_json_of_the_wrong_shape_exits_2_naming_the_key(results_dir, tmp_path, capsys, meta, fragment):
    import shutil

    copy = tmp_path / "r"
    shutil.copytree(results_dir, copy)
    (copy / "meta.json").write_text(json.dumps(meta))
    assert _run("report", copy, "--out", tmp_path / "rep") == 2
    assert fragment in _one_error_line(capsys)


# --- repeated options ------------------------------------------------------------------------------------------


def test_repeated_multi_value_options_add_up(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    other = small_trace(tmp_path / "u.csv")
    out = tmp_path / "r"
    assert _run("run", "--traces", trace, "--traces", other, "--strategy", "lru", "--strategy", "fifo",
                "--budget-tokens", 1_500, "--budget-tokens", 4_000, "--out", out, *FAST) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["strategies"] == ["lru", "fifo"]
    assert meta["config"]["budgets_tokens"] == [1_500.0, 4_000.0]
    assert len(meta["config"]["workload"]["traces"]) == 2
    args = build_parser().parse_args(["run", "--preset", "mixed", "--preset", "refactor", "debug-loop"])
    assert args.preset == ["mixed", "refactor", "debug-loop"]
    args = build_parser().parse_args(["regress", "--strategy", "lru", "--strategy", "fifo"])
    assert args.strategy == ["lru", "fifo"]


@pytest.mark.parametrize("argv, option", [
    (["run", "--out", "a", "--out", "b"], "--out"),
    (["run", "--bytes-per-token", "3", "--bytes-per-token", "4"], "--bytes-per-token"),
    (["run", "--bracket", "--no-bracket"], "--bracket/--no-bracket"),
    (["stats", "--compare", "a", "b", "--compare", "c", "d"], "--compare"),
    (["report", "r", "--strategy", "lru", "--strategy", "fifo"], "--strategy"),
    (["import", "auto", "x", "--out", "a.csv", "--out", "b.csv"], "--out"),
    (["generate", "--seed", "1", "--seed", "2"], "--seed"),
])
def test_a_single_valued_option_given_twice_exits_2_naming_it(capsys, argv, option):
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert f"argument {option}: given twice" in err


def test_flags_may_repeat():
    args = build_parser().parse_args(["run", "--json", "--json", "--lenient", "--lenient"])
    assert args.json and args.lenient and not hasattr(args, "_options_given")


def test_every_multi_value_option_of_every_command_extends():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.option_strings and action.nargs in ("+", "*"):
                found.append((name, action.option_strings[0]))
                assert isinstance(action, argparse._ExtendAction), (name, action.option_strings)
    assert {("run", "--traces"), ("run", "--preset"), ("run", "--strategy"), ("run", "--budget-tokens"),
            ("regress", "--strategy")} <= set(found)
