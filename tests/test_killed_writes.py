"""A ctxbench writer killed outright (SIGKILL) at each step of a write: the next command says what it found,
readers refuse a folder left with files of two runs, and the next write replaces only ctxbench's own files."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from processes import small_trace
from ctxbench.sim.cli import main
from ctxbench.sim.output import MANIFEST, ctxbench_files, interrupted_writer

FAST = ["--strategy", "lru", "--workers", "1", "--no-bracket", "--no-report"]

# Writes results.csv and summary.md into ARGV[1] with ctxbench's OutputDir and kills itself with SIGKILL at the
# step ARGV[2] names: "staging" (the new files half made), "swapping" (the folder moved aside, the new one not
# yet in its place), "replacing" (files replaced one by one, the first done).
KILLED_WRITER = '''
import os, signal, sys
from pathlib import Path
from ctxbench.sim.output import MANIFEST, OutputDir

target, step = Path(sys.argv[1]), sys.argv[2]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
real_rename, real_replace = os.rename, os.replace

def rename(src, dst):
    real_rename(src, dst)
    if step == "swapping" and Path(src) == target:
        die()

def replace(src, dst):
    real_replace(src, dst)
    if step == "replacing" and Path(dst).name != MANIFEST:
        die()

os.rename, os.replace = rename, replace
with OutputDir(target) as staging:
    (staging / "results.csv").write_text("from the killed run\\n")
    (staging / "summary.md").write_text("from the killed run\\n")
    if step == "staging":
        die()
'''


def _killed_write(workdir: Path, target: Path, step: str) -> int:
    """The pid of a writer of ``target`` killed at ``step``; it is gone when this returns."""
    (workdir / "killed_writer.py").write_text(KILLED_WRITER)
    proc = subprocess.Popen([sys.executable, "killed_writer.py", str(target), step], cwd=workdir,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    return proc.pid


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("ctxbench: note:")]


def _beside(workdir: Path) -> list[str]:
    """ctxbench's temporaries, backups and locks in ``workdir``."""
    return sorted(p.name for p in workdir.iterdir() if ".ctxbench-" in p.name)


@pytest.fixture
def earlier(tmp_path, capsys):
    """A results folder of an earlier run, in ``tmp_path/res``."""
    small_trace(tmp_path / "t.csv")
    assert main(["run", "--traces", str(tmp_path / "t.csv"), "--out", str(tmp_path / "res"), *FAST]) == 0
    capsys.readouterr()
    return tmp_path / "res"


def _run_again(res: Path, capsys) -> list[str]:
    assert main(["run", "--traces", str(res.parent / "t.csv"), "--out", str(res), *FAST]) == 0
    return _notes(capsys.readouterr().err)


def test_a_writer_killed_while_staging_leaves_the_earlier_results_and_the_next_run_says_so(earlier, capsys):
    before = (earlier / "results.csv").read_text()
    pid = _killed_write(earlier.parent, earlier, "staging")
    assert (earlier / "results.csv").read_text() == before   # nothing of the killed write is in the folder
    assert main(["report", str(earlier), "--out", str(earlier.parent / "rep")]) == 0   # still readable
    capsys.readouterr()
    notes = _run_again(earlier, capsys)
    assert len(notes) == 1 and f"process {pid}" in notes[0] and "unfinished output" in notes[0], notes
    assert "2 files" in notes[0]
    assert _beside(earlier.parent) == []
    assert "killed" not in (earlier / "results.csv").read_text()


def test_a_folder_a_killed_swap_moved_aside_is_put_back_and_then_replaced(earlier, capsys):
    pid = _killed_write(earlier.parent, earlier, "swapping")
    assert not earlier.exists()   # the killed process got no further than moving it aside
    notes = _run_again(earlier, capsys)
    assert len(notes) == 2 and all(f"process {pid}" in n for n in notes), notes
    assert any("put back" in n for n in notes) and any("unfinished output" in n for n in notes)
    assert _beside(earlier.parent) == []
    assert "killed" not in (earlier / "results.csv").read_text()


def test_a_folder_left_with_files_of_two_runs_is_refused_by_readers_and_replaced_by_the_next_run(earlier, capsys):
    (earlier / "mine.txt").write_text("a user's\n")   # a file of the user's: files are replaced one by one
    pid = _killed_write(earlier.parent, earlier, "replacing")
    assert interrupted_writer(earlier) == pid
    assert {"results.csv", "summary.md"} <= ctxbench_files(earlier)   # every file accounted for
    assert main(["report", str(earlier), "--out", str(earlier.parent / "rep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "incomplete" in err[0] and f"process {pid}" in err[0] and "two runs" in err[0], err

    notes = _run_again(earlier, capsys)
    assert any("two runs" in n and f"process {pid}" in n for n in notes), notes
    assert interrupted_writer(earlier) is None
    assert "writing" not in json.loads((earlier / MANIFEST).read_text())
    assert (earlier / "mine.txt").read_text() == "a user's\n"
    assert "killed" not in (earlier / "results.csv").read_text() + (earlier / "summary.md").read_text()
    assert [p.name for p in earlier.iterdir() if ".ctxbench-" in p.name] == []
    assert main(["report", str(earlier), "--out", str(earlier.parent / "rep")]) == 0


def test_a_running_writer_is_not_an_interrupted_one(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps({"written_by": "ctxbench", "files": [],
                                                 "writing": {"host": "elsewhere", "pid": 1}}))
    assert interrupted_writer(tmp_path) is None   # another host's process cannot be looked up
    from ctxbench.sim.output import _host

    (tmp_path / MANIFEST).write_text(json.dumps({"written_by": "ctxbench", "files": [],
                                                 "writing": {"host": _host(), "pid": os.getpid()}}))
    assert interrupted_writer(tmp_path) is None   # alive


def test_a_single_file_writer_killed_part_way_is_said_and_cleared_by_the_next_write(tmp_path, capsys):
    program = ("import os, signal, sys\nfrom ctxbench.sim.output import output_file\n"
               "with output_file(sys.argv[1]) as tmp:\n"
               "    tmp.write_bytes(b'half a trace')\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.Popen([sys.executable, "-c", program, str(tmp_path / "g.parquet")])
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert main(["generate", "--sessions", "1", "--seed", "1", "--out", str(tmp_path / "g.parquet")]) == 0
    notes = _notes(capsys.readouterr().err)
    assert len(notes) == 1 and f"process {proc.pid}" in notes[0] and "1 file," in notes[0], notes
    assert _beside(tmp_path) == []
