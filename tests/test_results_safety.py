"""Output safety: ctxbench replaces only files it wrote, in every command that writes, following the umask."""

import json
import os
import stat
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from processes import small_trace
from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.sim.output import MANIFEST, OutputDir, check_output_dir, ctxbench_files, output_file

FAST = ["--strategy", "lru", "--workers", "1", "--no-bracket", "--no-report"]


def _tree(directory: Path) -> dict:
    """Every entry under ``directory``: file bytes, or None for a directory."""
    return {p.relative_to(directory).as_posix(): (None if p.is_dir() else p.read_bytes())
            for p in sorted(directory.rglob("*"))}


def _user_files(directory: Path) -> Path:
    (directory / "sub").mkdir(parents=True)
    (directory / "notes.txt").write_text("mine\n")
    (directory / "sub" / "data.bin").write_bytes(b"\x00\x01")
    return directory


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ----- run --out ----------------------------------------------------------------------------------

def test_a_directory_ctxbench_did_not_write_is_refused_and_left_alone(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = _user_files(tmp_path / "out")
    before = _tree(out)
    assert main(["run", "--traces", str(trace), "--out", str(out), *FAST]) == 2
    line = _error_line(capsys)
    assert str(out) in line and "--force" in line and "not a directory ctxbench wrote" in line
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "t.csv"]   # no temporary beside it


def test_force_adds_ctxbench_files_beside_the_users_and_later_runs_need_no_flag(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = _user_files(tmp_path / "out")
    mine = _tree(out)
    assert main(["run", "--traces", str(trace), "--out", str(out), "--force", *FAST]) == 0
    after = _tree(out)
    assert {k: after[k] for k in mine} == mine
    assert {"results.parquet", "results.csv", "meta.json", "summary.md", MANIFEST} <= set(after)
    assert ctxbench_files(out) >= {"results.parquet", "meta.json"}
    assert "notes.txt" not in ctxbench_files(out)
    # A directory ctxbench has written is its own: the next run needs no flag, and --no-turns
    # removes the turns.parquet the first run wrote (it is ctxbench's), nothing else.
    assert main(["run", "--traces", str(trace), "--out", str(out), "--no-turns", *FAST]) == 0
    again = _tree(out)
    assert {k: again[k] for k in mine} == mine
    assert "turns.parquet" in after and "turns.parquet" not in again


def test_rerunning_into_results_replaces_them_whole(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "results"
    assert main(["run", "--traces", str(trace), "--out", str(out), *FAST]) == 0
    assert main(["run", "--traces", str(trace), "--out", str(out), "--strategy", "importance", "--no-turns",
                 "--workers", "1", "--no-bracket", "--no-report"]) == 0
    assert set(pd.read_parquet(out / "results.parquet")["strategy"]) == {"importance"}
    assert sorted(_tree(out)) == sorted([MANIFEST, "meta.json", "results.csv", "results.parquet", "summary.md"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "t.csv"]


def test_a_users_file_in_previous_results_is_kept(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "results"
    assert main(["run", "--traces", str(trace), "--out", str(out), *FAST]) == 0
    (out / "notes.txt").write_text("my notes on this run\n")
    (out / "extra").mkdir()
    assert main(["run", "--traces", str(trace), "--out", str(out), "--no-turns", *FAST]) == 0
    assert (out / "notes.txt").read_text() == "my notes on this run\n" and (out / "extra").is_dir()
    assert not (out / "turns.parquet").exists()   # ctxbench's own, not written this time: removed
    assert not [p for p in out.iterdir() if ".ctxbench-" in p.name]


def test_a_file_named_like_ctxbenchs_but_not_written_by_it_is_never_replaced(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("my own spreadsheet\n")
    before = _tree(out)
    assert main(["run", "--traces", str(trace), "--out", str(out), "--force", *FAST]) == 2
    line = _error_line(capsys)
    assert "results.csv" in line and "not written by ctxbench" in line
    assert _tree(out) == before


@pytest.mark.parametrize("where", [".", "..", "data", "parent-of-data"])
def test_out_at_or_above_the_working_directory_or_a_trace_never_loses_user_files(tmp_path, monkeypatch, capsys,
                                                                                  where):
    work = _user_files(tmp_path / "work")
    (work / "data").mkdir()
    small_trace(work / "data" / "t.csv")
    (tmp_path / "elsewhere.txt").write_text("beside the working directory\n")
    monkeypatch.chdir(work)
    out = {"parent-of-data": "."}.get(where, where)
    before = _tree(tmp_path)
    args = ["run", "--traces", "data/t.csv", "--out", out, *FAST]
    assert main(args) == 2
    assert "--force" in _error_line(capsys)
    assert _tree(tmp_path) == before
    # With --force ctxbench's files are added; nothing that was there changes or goes.
    assert main([*args, "--force"]) == 0
    after = _tree(tmp_path)
    assert {k: after.get(k, "gone") for k in before} == before
    target = (work / out).resolve().relative_to(tmp_path).as_posix()
    prefix = "" if target == "." else target + "/"
    assert f"{prefix}results.parquet" in after and f"{prefix}{MANIFEST}" in after


def test_a_manifest_cannot_make_ctxbench_remove_files_outside_its_directory(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "results"
    assert main(["run", "--traces", str(trace), "--out", str(out), *FAST]) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    doc = json.loads((out / MANIFEST).read_text())
    doc["files"] += ["../victim.txt", str(victim), "./x", ""]
    (out / MANIFEST).write_text(json.dumps(doc))
    assert main(["run", "--traces", str(trace), "--out", str(out), *FAST]) == 0
    assert victim.read_text() == "keep me\n"


def test_results_written_before_manifests_are_recognised(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    out = tmp_path / "results"
    (out / "figures").mkdir(parents=True)
    (out / "meta.json").write_text(json.dumps({"ctxbench_version": "0.1.0", "config": {}}))
    (out / "results.csv").write_text("old\n")
    (out / "figures" / "occupancy.png").write_bytes(b"old figure")
    (out / "figures" / "mine.png").write_bytes(b"a figure of mine")
    assert main(["run", "--traces", str(trace), "--out", str(out), *FAST]) == 0
    assert (out / "results.csv").read_text() != "old\n"
    assert not (out / "figures" / "occupancy.png").exists()          # the old report's figure: ctxbench's
    assert (out / "figures" / "mine.png").read_bytes() == b"a figure of mine"


def test_a_file_as_out_is_refused(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.csv")
    (tmp_path / "f").write_text("x")
    assert main(["run", "--traces", str(trace), "--out", str(tmp_path / "f"), *FAST]) == 2
    assert "is not a directory" in _error_line(capsys)
    assert (tmp_path / "f").read_text() == "x"


# ----- report --out --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("safety")
    trace = small_trace(base / "t.csv")
    assert main(["run", "--traces", str(trace), "--out", str(base / "results"), *FAST]) == 0
    return base / "results"


def test_report_refuses_a_users_directory_and_never_touches_its_figures(results_dir, tmp_path, capsys):
    out = tmp_path / "docs"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "diagram.png").write_bytes(b"my diagram")
    (out / "index.md").write_text("# my docs\n")
    before = _tree(out)
    assert main(["report", str(results_dir), "--out", str(out)]) == 2
    assert "--force" in _error_line(capsys)
    assert _tree(out) == before
    assert main(["report", str(results_dir), "--out", str(out), "--force"]) == 0
    after = _tree(out)
    assert {k: after[k] for k in before} == before
    assert "report.html" in after and "figures/miss_ratio_curve.png" not in before
    assert any(k.startswith("figures/") and k.endswith(".svg") for k in after)
    capsys.readouterr()
    assert main(["report", str(results_dir), "--out", str(out)]) == 0   # now ctxbench's: no flag needed
    assert _tree(out)["figures/diagram.png"] == b"my diagram"


def test_report_into_the_results_directory_keeps_the_results(results_dir, capsys):
    before = (results_dir / "results.parquet").read_bytes()
    for _ in range(2):
        assert main(["report", str(results_dir)]) == 0
    assert (results_dir / "results.parquet").read_bytes() == before
    files = ctxbench_files(results_dir)
    assert {"results.parquet", "meta.json", "report.html", "report.md"} <= files
    assert any(f.startswith("figures/") for f in files)


# ----- single files: generate, import, snapshots, baselines ------------------------------------------

def _generate(out: Path, *extra: str) -> int:
    return main(["generate", "--preset", "mixed", "--sessions", "1", "--out", str(out), *extra])


def test_generate_replaces_its_own_parquet_but_not_a_foreign_one(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    assert _generate(out) == 0 and _generate(out) == 0
    foreign = tmp_path / "f.parquet"
    pd.DataFrame({"x": [1, 2]}).to_parquet(foreign)
    before = foreign.read_bytes()
    assert _generate(foreign) == 2
    assert "--force" in _error_line(capsys)
    assert foreign.read_bytes() == before
    assert _generate(foreign, "--force") == 0
    assert foreign.read_bytes() != before


@pytest.mark.parametrize("suffix", [".csv", ".jsonl.gz"])
def test_generate_never_silently_replaces_a_text_file(tmp_path, capsys, suffix):
    out = tmp_path / f"t{suffix}"
    out.write_text("my own trace\n")
    assert _generate(out) == 2
    assert str(out) in _error_line(capsys)
    assert out.read_text() == "my own trace\n"
    assert _generate(out, "--force") == 0
    assert out.read_bytes() != b"my own trace\n"


def test_snapshots_replace_their_own_file_but_not_a_foreign_one(results_dir, tmp_path, capsys):
    out = tmp_path / "snaps.jsonl"
    args = ["snapshots", str(results_dir), "--out", str(out)]
    assert main(args) == 0 and main(args) == 0
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\n')
    assert main(["snapshots", str(results_dir), "--out", str(other)]) == 2
    assert "--force" in _error_line(capsys)
    assert other.read_text() == '{"a": 1}\n'
    assert main(["snapshots", str(results_dir), "--out", str(other), "--force"]) == 0
    assert other.read_text() != '{"a": 1}\n'


def test_the_baseline_writer_replaces_only_baselines(tmp_path):
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": "ctxbench-regress-baseline", "format_version": 1}))
    with output_file(baseline) as tmp:
        tmp.write_text("{}\n")
    assert baseline.read_text() == "{}\n"
    other = tmp_path / "package.json"
    other.write_text('{"name": "mine"}')
    with pytest.raises(InputError, match="cannot tell that it wrote it"):
        with output_file(other) as tmp:
            tmp.write_text("{}\n")
    assert other.read_text() == '{"name": "mine"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "package.json"]


# ----- the umask ---------------------------------------------------------------------------------

@pytest.fixture(params=[0o002, 0o027])
def umask(request):
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_file_and_directory_follows_the_umask(tmp_path, umask, capsys):
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    for name in ("g.parquet", "g.csv"):
        assert _generate(tmp_path / name) == 0
        assert _mode(tmp_path / name) == file_mode, name
    out = tmp_path / "results"
    assert main(["run", "--traces", str(tmp_path / "g.csv"), "--out", str(out), "--strategy", "lru",
                 "--workers", "1", "--no-bracket"]) == 0
    assert _mode(out) == dir_mode
    for p in out.rglob("*"):
        assert _mode(p) == (dir_mode if p.is_dir() else file_mode), p
    assert main(["snapshots", str(out), "--out", str(tmp_path / "s.jsonl")]) == 0
    assert _mode(tmp_path / "s.jsonl") == file_mode
    logs = Path(__file__).parent / "fixtures" / "importers" / "claude-code" / "sess-b.jsonl"
    assert main(["import", "claude-code", str(logs), "--out", str(tmp_path / "i.csv")]) == 0
    assert _mode(tmp_path / "i.csv") == file_mode


# ----- temporaries -------------------------------------------------------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_gone_processes_are_removed_by_the_next_write(tmp_path, capsys):
    from ctxbench.sim.output import _host

    trace = small_trace(tmp_path / "t.csv")
    dead, host = _dead_pid(), _host()
    stale_dir = tmp_path / f".results.ctxbench-{host}-{dead}-0badc0de.tmp"
    (stale_dir / "figures").mkdir(parents=True)
    (stale_dir / "results.parquet").write_bytes(b"x" * 1000)
    stale_file = tmp_path / f".g.parquet.ctxbench-{host}-{dead}-0badc0de.tmp"
    stale_file.write_bytes(b"half a trace")
    live = tmp_path / f".results.ctxbench-{host}-{os.getpid()}-0badc0de.tmp"   # a running process's
    live.mkdir()
    users = [tmp_path / ".results.backup", tmp_path / f".results.ctxbench-{host}-{dead}-0badc0de.bak"]
    for p in users:
        p.write_text("mine")
    assert main(["run", "--traces", str(trace), "--out", str(tmp_path / "results"), *FAST]) == 0
    assert _generate(tmp_path / "g.parquet") == 0
    assert not stale_dir.exists() and not stale_file.exists()
    assert live.is_dir() and all(p.read_text() == "mine" for p in users)


def test_results_moved_aside_by_a_killed_swap_are_put_back(tmp_path):
    from ctxbench.sim.output import _host

    old = tmp_path / f".results.ctxbench-{_host()}-{_dead_pid()}-0badc0de.old"
    old.mkdir()
    (old / "results.csv").write_text("previous\n")
    (old / MANIFEST).write_text(json.dumps({"written_by": "ctxbench", "files": ["results.csv"]}))
    assert check_output_dir(tmp_path / "results") == "swap"
    assert (tmp_path / "results" / "results.csv").read_text() == "previous\n" and not old.exists()


def test_a_failed_write_leaves_the_previous_directory_and_no_temporary(tmp_path):
    out = tmp_path / "results"
    with OutputDir(out) as staging:
        (staging / "results.csv").write_text("first\n")
    with pytest.raises(RuntimeError):
        with OutputDir(out) as staging:
            (staging / "results.csv").write_text("second\n")
            raise RuntimeError("the run failed")
    assert (out / "results.csv").read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    with pytest.raises(InputError, match="is a directory"):
        with output_file(out) as tmp:
            tmp.write_text("x")


@pytest.mark.parametrize("command", [
    ["generate", "--sessions", "1", "--seed", "1"],
    ["snapshots", "RESULTS"],
    ["import", "claude-code", str(Path(__file__).parent / "fixtures" / "importers" / "claude-code" / "sess-a.jsonl")],
])
def test_a_file_of_a_results_folder_is_never_written_over_even_with_force(tmp_path, capsys, command):
    results = tmp_path / "r"
    assert main(["run", "--traces", str(small_trace(tmp_path / "t.csv")), "--out", str(results), *FAST]) == 0
    capsys.readouterr()
    before = _tree(results)
    target = results / "results.parquet"
    argv = [str(results) if word == "RESULTS" else word for word in command]
    assert main([*argv, "--out", str(target), "--force"]) == 2
    assert f"{target}: is part of the results folder {results}" in _error_line(capsys)
    assert _tree(results) == before
