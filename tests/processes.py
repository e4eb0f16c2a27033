"""Helpers for tests that start ctxbench as a process: a small trace, and what is left running afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd


def small_trace(path: Path, sessions=("alpha", "beta"), turns: int = 12) -> Path:
    """Sessions of ``turns`` turns of reads (one evict call per turn), as CSV."""
    rows = [(s, t, 1_000 * t, "read", f"src/m{t % 5}.py", 2_000 + 100 * (t % 5))
            for s in sessions for t in range(turns)]
    pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes"]).to_csv(path, index=False)
    return path


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a killed process waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """The running processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def wait_until(predicate, timeout_s: float = 30.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes (a guard against hanging, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def pids_in(path: Path) -> set[int]:
    """The pids written one per line to ``path`` (none if it does not exist yet)."""
    try:
        return {int(x) for x in path.read_text().split()}
    except OSError:
        return set()


def start_ctxbench(args: list[str], cwd: Path, **env_extra: str) -> subprocess.Popen:
    """``python -m ctxbench.sim.cli ARGS`` in ``cwd`` (with ``env_extra`` in its environment), in a process group
    of its own (its id is the process's)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **env_extra}
    env.pop("CI", None)
    return subprocess.Popen([sys.executable, "-m", "ctxbench.sim.cli", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def run_ctxbench(args: list[str], cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m sim.cli ARGS`` in ``cwd`` to the end."""
    proc = start_ctxbench(args, cwd)
    out, err = proc.communicate(timeout=timeout_s)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
