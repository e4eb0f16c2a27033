"""`ctxbench run` end to end: the results directory, --json, and bad input (exit 2, nothing written)."""

import json
from importlib.util import find_spec
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.cli import main

FAST = ["--workers", "1", "--no-bracket", "--no-report"]


def small_trace(path: Path) -> Path:
    """Two sessions of a dozen events each, as CSV."""
    rows = []
    for s in ("alpha", "beta"):
        for t in range(12):
            rows.append((s, t, 1_000 * t, "read", f"src/m{t % 5}.py", 2_000 + 100 * (t % 5)))
            if t % 4 == 3:
                rows.append((s, t, 1_000 * t + 1, "output", f"tool://bash/{t}", 900))
    pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes"]).to_csv(path, index=False)
    return path


def run_cli(*args):
    return main(["run", *map(str, args)])


def test_run_on_a_trace_file_writes_the_results_directory(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "res"
    assert run_cli("--traces", trace, "--strategy", "lru", "importance", "--budget-tokens", 1_500, 4_000,
                   "--out", out, *FAST) == 0
    for name in ("results.parquet", "results.csv", "meta.json", "summary.md"):
        assert (out / name).is_file(), name
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 2 * 2 * 2
    assert set(results["session"]) == {"alpha", "beta"}
    assert results["misses"].gt(0).all() and (results["violations"] == 0).all()
    assert len(pd.read_csv(out / "results.csv")) == len(results)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ctxbench_version"] and "machine" in meta and meta["machine"]["cores"] >= 1
    assert meta["config"]["strategies"] == ["lru", "importance"]
    assert meta["config"]["budgets_tokens"] == [1_500.0, 4_000.0]
    assert "lru" in (out / "summary.md").read_text()
    assert "results:" in capsys.readouterr().out


def test_run_json_output_parses(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    assert run_cli("--traces", trace, "--strategy", "lru", "--budget-tokens", 2_000, "--out", tmp_path / "r",
                   "--json", *FAST) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["violations"] == 0
    assert [r["strategy"] for r in doc["ranking"]] == ["lru"]
    assert Path(doc["results_dir"]).is_dir()


@pytest.mark.skipif(find_spec("ctxbench.traces.generate") is None, reason="ctxbench.traces.generate is not written yet")
def test_run_on_a_generated_preset(tmp_path, capsys):
    out = tmp_path / "p"
    assert run_cli("--preset", "mixed", "--sessions", 2, "--strategy", "lru", "--out", out, "--json", *FAST) == 0
    doc = json.loads(capsys.readouterr().out)
    results = pd.read_parquet(out / "results.parquet")
    assert results["session"].nunique() == 2 and doc["ranking"][0]["strategy"] == "lru"
    assert json.loads((out / "meta.json").read_text())["config"]["workload"]["presets"] == [["mixed", 2]]


def test_run_sets_knobs_of_every_preset(tmp_path, capsys):
    out = tmp_path / "p"
    assert run_cli("--preset", "mixed", "debug-loop", "--sessions", 1, "--set", "tool_calls=30", "--set",
                   "conversation=false", "--strategy", "lru", "--out", out, *FAST) == 0
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["trace"]) == {"mixed", "debug-loop"}
    assert (results["events"] == 30).all()   # 30 tool calls, no conversation events: one event each
    workload = json.loads((out / "meta.json").read_text())["config"]["workload"]
    assert workload["overrides"] == {"tool_calls": 30, "conversation": False}


@pytest.mark.parametrize("args, message", [
    (["--set", "tool_calls=30"], "--set changes the knobs of --preset, which was not given"),
    (["--preset", "mixed", "--set", "bogus=1"], "--set: unknown knob 'bogus'"),
    (["--preset", "mixed", "--set", "tool_calls=abc"], "--set: knob tool_calls: cannot read 'abc' as int"),
    (["--preset", "mixed", "--set", "tool_calls=0"], "cannot generate preset 'mixed': knob tool_calls=0: must be >= 1"),
])
def test_run_refuses_a_bad_knob_and_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "p"
    assert run_cli(*args, "--strategy", "lru", "--out", out, *FAST) == 2
    assert message in _one_error_line(capsys)
    assert not out.exists()


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def _snapshot(directory: Path) -> dict:
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_corrupt_trace_exits_2_and_leaves_previous_results_untouched(tmp_path, capsys):
    good = small_trace(tmp_path / "good.csv")
    out = tmp_path / "res"
    assert run_cli("--traces", good, "--strategy", "lru", "--budget-tokens", 2_000, "--out", out, *FAST) == 0
    before = _snapshot(out)
    capsys.readouterr()
    bad = tmp_path / "bad.csv"
    bad.write_text(good.read_text().replace(",read,src/m3.py,", ",read,src/m3.py,-"))   # negative sizes
    listing = sorted(p.name for p in tmp_path.iterdir())
    assert run_cli("--traces", bad, "--strategy", "lru", "--out", out, *FAST) == 2
    line = _one_error_line(capsys)
    assert "bad.csv" in line and "row" in line
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing   # no new or temporary directory
    assert run_cli("--traces", tmp_path / "missing.csv", "--out", tmp_path / "new", *FAST) == 2
    _one_error_line(capsys)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("spec", ["no_such_strategy", "no_such_module_xyz:factory", "lru?max_entries=-3",
                                  "lru?bogus=1"])
def test_unloadable_strategy_exits_2(tmp_path, capsys, spec):
    trace = small_trace(tmp_path / "t.csv")
    assert run_cli("--traces", trace, "--strategy", spec, "--out", tmp_path / "r", *FAST) == 2
    _one_error_line(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "inf", "1e30"])
def test_absurd_budget_exits_2(tmp_path, capsys, budget):
    trace = small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(trace), "--strategy", "lru", f"--budget-tokens={budget}",
                 "--out", str(tmp_path / "r"), *FAST]) == 2
    assert "budget" in _one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def test_absurd_bytes_per_token_exits_2(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    assert run_cli("--traces", trace, "--bytes-per-token", 0, "--out", tmp_path / "r", *FAST) == 2
    assert "bytes per token" in _one_error_line(capsys)


def test_strict_violation_exits_2_naming_the_strategy_and_lenient_completes(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    trace = small_trace(tmp_path / "t.csv")
    broken = "broken_strategies:unknown_id_on_turn_1"
    assert run_cli("--traces", trace, "--strategy", "lru", broken, "--budget-tokens", 1_500,
                   "--out", tmp_path / "r", *FAST) == 2
    line = _one_error_line(capsys)
    assert f"strategy '{broken}'" in line and "session 'alpha'" in line and "turn 1" in line
    assert "no/such/file.py:0" in line
    assert not (tmp_path / "r").exists()
    assert run_cli("--traces", trace, "--strategy", "lru", broken, "--budget-tokens", 1_500,
                   "--out", tmp_path / "r", "--lenient", "--json", *FAST) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["violations"] == 2   # one per session
    results = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert results.groupby("strategy")["violations"].sum().to_dict() == {"lru": 0, broken: 2}
