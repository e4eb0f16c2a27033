"""`ctxbench generate` and `ctxbench stats`: outputs, exit codes, and nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.traces.io import load

TOOL_OPS = ["read", "edit", "write", "output"]  # one per tool call; the conversation comes around them


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _bad(capsys, *argv: str, match: str) -> str:
    code, out, err = _run(capsys, *argv)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert match in lines[0], lines[0]
    return lines[0]


def test_generate_writes_a_loadable_trace(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    code, text, _ = _run(capsys, "generate", "--preset", "debug-loop", "--sessions", "3", "--seed", "4",
                         "--set", "tool_calls=50", "--out", str(out))
    df = load(out)
    assert code == 0 and f"wrote {len(df):,} events" in text
    assert df["op"].isin(TOOL_OPS).sum() == 150 and df["session"].nunique() == 3
    assert df.attrs["generator"]["preset"] == "debug-loop"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


@pytest.mark.parametrize("suffix", [".csv.gz", ".jsonl"])
def test_generate_same_seed_same_trace_in_any_format(tmp_path, capsys, suffix):
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    for path in (a, b):
        assert _run(capsys, "generate", "--seed", "8", "--set", "arms=2", "--out", str(path))[0] == 0
    pd.testing.assert_frame_equal(load(a), load(b))
    assert set(load(a)["arm"].astype(str)) == {"main", "arm1"}


def test_generate_list_shows_presets_and_knobs(capsys):
    code, text, _ = _run(capsys, "generate", "--list")
    assert code == 0
    for word in ("mixed", "file-walk", "hub-and-spoke", "debug-loop", "refactor", "long", "claude-code-like",
                 "tool_calls", "arms", "mix_walk", "zipf", "output_max", "calibrated"):
        assert word in text, word


def test_generate_with_a_checkout(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "main.py").write_text("print('x')\n" * 50)
    (repo / "pkg" / "util.py").write_text("def f(): pass\n" * 20)
    out = tmp_path / "t.jsonl"
    assert _run(capsys, "generate", "--repo", str(repo), "--set", "tool_calls=60", "--out", str(out))[0] == 0
    files = set(load(out).query("op != 'output'")["path"].astype(str))
    assert {"pkg/main.py", "pkg/util.py"} & files


@pytest.mark.parametrize("args, match", [
    (["--preset", "nope"], "unknown preset 'nope'; presets: mixed"),
    (["--set", "tool_call=5"], "unknown knob 'tool_call'; knobs: tool_calls"),
    (["--set", "tool_calls=-5"], "knob tool_calls=-5: must be >= 1"),
    (["--set", "locality=often"], "knob locality: cannot read 'often' as float"),
    (["--set", "tool_calls"], "expected knob=value"),
    (["--sessions", "0"], "--sessions must be >= 1"),
    (["--seed", "-3"], "--seed must be >= 0"),
    (["--sessions", "100000000"], "the limit is"),
    (["--repo", "/no/such/dir"], "--repo: /no/such/dir: not a directory"),
])
def test_generate_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, match):
    _bad(capsys, "generate", *args, "--out", str(tmp_path / "t.parquet"), match=match)
    assert list(tmp_path.iterdir()) == []


def test_generate_bad_suffix_or_missing_out(tmp_path, capsys):
    _bad(capsys, "generate", "--out", str(tmp_path / "t.txt"), match="unknown trace format")
    _bad(capsys, "generate", match="--out PATH is required")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def trace_file(tmp_path, capsys):
    path = tmp_path / "m.parquet"
    assert _run(capsys, "generate", "--sessions", "3", "--seed", "2", "--out", str(path))[0] == 0
    return path


def test_stats_prints_tables(trace_file, capsys):
    code, text, _ = _run(capsys, "stats", str(trace_file))
    assert code == 0
    for phrase in ("overall", "re-read fraction", "most-read paths", "reuse distance", "outputs by tool",
                   "sessions", "mixed-2-00002"):
        assert phrase in text, phrase


def test_stats_json_matches_the_library(trace_file, capsys):
    code, text, _ = _run(capsys, "stats", str(trace_file), "--json", "--budget-tokens", "50000")
    assert code == 0
    doc = json.loads(text)
    assert sum(doc["overall"]["events_by_op"][op] for op in TOOL_OPS) == 750
    assert doc["overall"]["budget_tokens"] == 50000
    assert len(doc["sessions"]) == 3 and doc["sessions"][0]["reads"] + doc["sessions"][0]["edits"] + \
        doc["sessions"][0]["writes"] + doc["sessions"][0]["outputs"] == 250
    assert [row["tool_calls"] for row in doc["window"]["sessions"]] == [250] * 3
    assert set(doc["overall"]["reuse_distance"]) >= {"median", "p90", "histogram"}


def test_stats_compare_side_by_side(trace_file, tmp_path, capsys):
    deep = tmp_path / ("a-directory-name-long-enough-to-overflow-any-table-title-" * 3)
    deep.mkdir()
    other = deep / "d.csv"
    assert _run(capsys, "generate", "--preset", "debug-loop", "--out", str(other))[0] == 0
    code, text, _ = _run(capsys, "stats", "--compare", str(trace_file), str(other))
    assert code == 0 and "B/A" in text and str(other) in text and "re-read fraction" in text
    code, text, _ = _run(capsys, "stats", "--compare", str(trace_file), str(other), "--json")
    doc = json.loads(text)
    assert sum(doc["a"]["events_by_op"][op] for op in TOOL_OPS) == 750
    assert sum(doc["b"]["events_by_op"][op] for op in TOOL_OPS) == 250 and doc["b"]["window"]["arms"] == 1


def test_stats_bad_input_exits_2(tmp_path, trace_file, capsys):
    corrupt = tmp_path / "bad.csv"
    corrupt.write_text("session,turn,ts_ms,op,path,size_bytes\ns,0,0,read,a.py,-4\n")
    _bad(capsys, "stats", str(corrupt), match="row 0, column 'size_bytes': must be >= 0")
    garbage = tmp_path / "bad.parquet"
    garbage.write_bytes(b"not parquet at all")
    _bad(capsys, "stats", str(garbage), match="cannot read as parquet")
    _bad(capsys, "stats", str(tmp_path / "missing.jsonl"), match="no such file")
    _bad(capsys, "stats", str(trace_file), "--budget-tokens", "0", match="--budget-tokens must be a positive")
    _bad(capsys, "stats", match="give a trace PATH")
    _bad(capsys, "stats", str(trace_file), "--compare", str(trace_file), str(trace_file), match="not both")


def test_console_script_runs(tmp_path):
    out = tmp_path / "t.jsonl.gz"
    done = subprocess.run([sys.executable, "-m", "ctxbench.sim.cli", "generate", "--set", "tool_calls=20", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "ctxbench.sim.cli", "stats", str(out), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["window"]["sessions"][0]["tool_calls"] == 20
