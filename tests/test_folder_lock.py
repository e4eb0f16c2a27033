"""One command at a time on a results folder: a second run, a report or a read while another command holds it is
refused in one line, and the lock is gone once the holder is done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.folder_lock import folder_lock, hold, lock_path, release
from test_cli_run import small_trace

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--strategy", "lru", "--workers", "1", "--no-bracket", "--no-report"]


@pytest.fixture
def results(tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--traces", str(small_trace(tmp_path / "t.csv")), "--out", str(out), *FAST]) == 0
    return out


@pytest.fixture
def held_elsewhere(results):
    """Another process holding the results folder's lock, as a run in progress does."""
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from ctxbench.sim.folder_lock import hold; "
            f"hold({str(results)!r}); print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    yield results
    child.kill()
    child.wait()


def _tree(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", [
    lambda r: ["run", "--traces", str(r.parent / "t.csv"), "--out", str(r), *FAST],
    lambda r: ["report", str(r)],
    lambda r: ["snapshots", str(r), "--out", str(r.parent / "s.jsonl")],
])
def test_a_folder_in_use_is_refused_in_one_line_and_left_alone(held_elsewhere, capsys, command):
    capsys.readouterr()
    before = _tree(held_elsewhere)
    assert main(command(held_elsewhere)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{held_elsewhere}: another ctxbench command is reading or writing it; "
                                             "wait for it to finish, or choose another folder")
    assert _tree(held_elsewhere) == before


def test_the_lock_is_reentrant_and_its_file_goes_with_its_holder(results):
    with folder_lock(results):
        assert lock_path(results).exists()
        key = hold(results)                       # the same process again: no refusal
        release(key)
        assert lock_path(results).exists()
    assert not lock_path(results).exists()
    assert main(["report", str(results)]) == 0    # free again
    assert sorted(p.name for p in results.parent.iterdir() if p.name.startswith(".")) == []


def test_a_holder_that_died_leaves_a_file_but_no_lock(results):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from ctxbench.sim.folder_lock import hold; hold({str(results)!r}); import os; os._exit(9)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 9
    assert lock_path(results).exists()            # killed before it could remove it
    assert main(["report", str(results)]) == 0    # the lock died with it
    assert not lock_path(results).exists()


def test_a_link_to_the_folder_shares_its_lock(held_elsewhere, capsys):
    link = held_elsewhere.parent / "link"
    link.symlink_to(held_elsewhere, target_is_directory=True)
    capsys.readouterr()
    assert main(["report", str(link)]) == 2
    assert "another ctxbench command is reading or writing it" in capsys.readouterr().err
