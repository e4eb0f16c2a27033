"""Running out of room: a full disk or a file-size limit while writing, or memory while building, is one line and
exit 1, and what was there before is left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ctxbench.sim.cli.commands.generate as generate_command
from ctxbench.sim.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _limited(cwd: Path, blocks: int, *args: str) -> subprocess.CompletedProcess:
    """``ctxbench ARGS`` in a shell whose file-size limit is ``blocks`` KiB (writes past it fail with EFBIG)."""
    code = "import sys; from ctxbench.sim.cli import main; sys.exit(main(sys.argv[1:]))"
    script = f"ulimit -f {blocks}; exec \"$0\" -c '{code}' \"$@\""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(["bash", "-c", script, sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["generate", "--sessions", "12", "--seed", "3", "--out", "trace.parquet"],
    ["run", "--traces", "small.parquet", "--strategy", "lru", "fifo", "--workers", "1", "--no-bracket", "--out", "r"],
])
def test_a_write_past_the_file_size_limit_is_one_line_and_leaves_the_old_output(tmp_path, command):
    assert main(["generate", "--sessions", "1", "--seed", "1", "--out", str(tmp_path / "small.parquet")]) == 0
    first = [str(tmp_path / w) if w in ("small.parquet", "r") else w for w in command]
    if command[0] == "generate":
        first = ["generate", "--sessions", "1", "--seed", "2", "--out", str(tmp_path / "trace.parquet")]
    assert main(first) == 0                      # the output a later write must leave as it is
    before = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    done = _limited(tmp_path, 8, *command)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no room to write" in lines[0] and "File too large" in lines[0] and "left as it was" in lines[0]
    after = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert after == before                       # the old output intact, no temporary left behind


def test_running_out_of_memory_is_one_line_and_exit_1(tmp_path, capsys, monkeypatch):
    def huge(*args, **kwargs):
        raise MemoryError("Unable to allocate 37.3 GiB for an array with shape (5000000000,) and data type int64")

    monkeypatch.setattr(generate_command, "generate", huge)
    out = tmp_path / "t.csv"
    assert main(["generate", "--set", "tool_calls=50000000", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ctxbench generate: out of memory: Unable to allocate 37.3 GiB for an array with shape "
                   "(5000000000,) and data type int64; try fewer or smaller sessions"]
    assert not out.exists()
