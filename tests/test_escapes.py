"""Nothing a ``cmd:`` program or a Python strategy starts outlives the run: not a ``setsid``'d child with a replaced
environment, not a double-forked one, whether the run ends, times out, fails, is signalled, the strategy's process
ends itself or ctxbench is killed outright."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import broken_strategies
from processes import group_members, pids_in, running, small_trace, start_ctxbench, wait_until
from ctxbench.sim.cli import main
from ctxbench.sim.engine.replay import SessionTrace, replay_session
from ctxbench.strategies.contract import ContextBudget

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: Writes its own pid to PIDS, then starts two escapees that write theirs: one ``setsid``'d with an empty
#: environment (no mark of ctxbench's), one double-forked; then answers, crashing (``crash``) or hanging
#: (``hang``) at its third request, or every request after a pause (``slow``).
ESCAPING = """
    import json, os, sys, time
    pids, mode = sys.argv[1], sys.argv[2]

    def note():
        with open(pids, "a") as fh:
            fh.write(f"{os.getpid()}\\n")

    note()
    if os.fork() == 0:
        os.setsid()
        os.execve(sys.executable, [sys.executable, "-c", "import os, sys, time\\n"
                  "open(sys.argv[1], 'a').write(f'{os.getpid()}\\\\n')\\ntime.sleep(120)", pids], {})
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            note()
            time.sleep(120)
        os._exit(0)
    while len(open(pids).read().split()) < 3:
        time.sleep(0.01)
    for number, line in enumerate(sys.stdin):
        if number == 2 and mode == "crash":
            sys.exit(3)
        if number == 2 and mode == "hang":
            time.sleep(120)
        if mode == "slow":
            time.sleep(0.3)
        print(json.dumps({"evict": []}), flush=True)
"""


def escaping(directory: Path, mode: str, pids: Path) -> str:
    """The ``cmd:`` spec of the escaping program in ``directory``, writing pids to ``pids``."""
    path = directory / "escaping.py"
    path.write_text(textwrap.dedent(ESCAPING))
    return f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(path))} {shlex.quote(str(pids))} {mode}"


def survivors(pids: Path) -> list[int]:
    """The pids written to ``pids`` that still run, once they have had 10 s to end."""
    wait_until(lambda: not any(running(pid) for pid in pids_in(pids)), 10)
    return [pid for pid in pids_in(pids) if running(pid)]


@contextlib.contextmanager
def reaping(pids: Path):
    """Kill what is left of ``pids`` afterwards, whatever the test found."""
    try:
        yield
    finally:
        for pid in pids_in(pids) - {os.getpid()}:
            with contextlib.suppress(OSError):
                if running(pid):
                    os.kill(pid, signal.SIGKILL)


def trace(turns: int = 8) -> SessionTrace:
    return SessionTrace("s", list(range(turns)), [0] * turns, [f"src/f{t % 3}.ts" for t in range(turns)],
                        [500] * turns, [1_700_000_000_000 + 1_000 * t for t in range(turns)])


@pytest.mark.parametrize("mode, option, violated", [("serve", "", False), ("crash", "", True),
                                                     ("hang", "?timeout_ms=300", True)],
                         ids=["the run's end", "an error of the strategy", "a time-out"])
def test_nothing_the_program_started_survives(tmp_path, mode, option, violated):
    pids = tmp_path / "pids"
    with reaping(pids):
        result = replay_session(trace(), escaping(tmp_path, mode, pids) + option, ContextBudget(2_000), strict=False)
        assert (result.row["violations"] > 0) == violated
        assert len(pids_in(pids)) == 3   # the program and both escapees ran
        assert survivors(pids) == []


def _run(workdir: Path, pids: Path, workers: str):
    small_trace(workdir / "t.csv", turns=40)
    spec = escaping(workdir, "slow", pids)
    proc = start_ctxbench(["run", "--traces", "t.csv", "--strategy", spec, "--workers", workers, "--lenient",
                           "--budget-tokens", "1e6", "--no-bracket", "--no-report", "--out", "res"], workdir)
    # a program and its two escapees for each session replayed at once
    assert wait_until(lambda: len(pids_in(pids)) == 3 * int(workers), 60), "the programs did not start"
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_signal_to_ctxbench_leaves_nothing(tmp_path, signum, code, workers):
    pids = tmp_path / "pids"
    with reaping(pids):
        proc = _run(tmp_path, pids, workers)
        try:
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert (proc.returncode, err.strip().splitlines()) == (code, ["ctxbench run: interrupted"])
        assert survivors(pids) == []
        assert wait_until(lambda: group_members(proc.pid) == [], 10), "a worker outlived the run"


@pytest.mark.slow
def test_sigkill_of_ctxbench_with_workers_leaves_nothing_and_the_next_run_replaces_its_folder(tmp_path):
    pids = tmp_path / "pids"
    with reaping(pids):
        proc = _run(tmp_path, pids, "2")
        proc.kill()
        proc.communicate(timeout=60)
        assert wait_until(lambda: group_members(proc.pid) == [], 10), "a worker outlived ctxbench"
        assert survivors(pids) == []
    assert not (tmp_path / "res").exists()   # nothing half-written where the results go
    (tmp_path / "mine.txt").write_text("a user's")
    pids.unlink()
    again = start_ctxbench(["run", "--traces", "t.csv", "--strategy", "lru", "--workers", "2", "--no-bracket",
                            "--no-report", "--out", "res"], tmp_path)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert (tmp_path / "res" / "results.csv").exists()
    assert (tmp_path / "mine.txt").read_text() == "a user's"
    assert [p.name for p in tmp_path.iterdir() if ".ctxbench-" in p.name] == []   # no temporary left beside it


@pytest.mark.slow
def test_signals_at_random_moments_end_every_run_at_once_with_one_line_and_nothing_left(tmp_path):
    """24 runs with two workers, each replaying the escaping program and lru, each sent SIGINT or SIGTERM at a
    moment drawn (seeded) from the first 2.5 s after ctxbench imports its signal handling."""
    from test_interrupts import MARK_IMPORT

    rng = np.random.default_rng(20261207)
    small_trace(tmp_path / "t.csv", turns=40)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(MARK_IMPORT)
    path = os.pathsep.join(p for p in (str(tmp_path / "site"), os.environ.get("PYTHONPATH")) if p)
    mark = tmp_path / "imported"
    for run in range(24):
        signum = (signal.SIGINT, signal.SIGTERM)[rng.integers(2)]
        moment = float(rng.uniform(0, 2.5))
        pids = tmp_path / f"pids{run}"
        mark.unlink(missing_ok=True)
        with reaping(pids):
            proc = start_ctxbench(["run", "--traces", "t.csv", "--strategy", "lru", escaping(tmp_path, "slow", pids),
                                   "--workers", "2", "--lenient", "--budget-tokens", "1e6", "--no-bracket",
                                   "--no-report", "--out", "res"], tmp_path, PYTHONPATH=path, IMPORT_MARK=str(mark))
            try:
                assert wait_until(mark.exists, 60), "ctxbench never imported its signal handling"
                time.sleep(moment)
                proc.send_signal(signum)
                _, err = proc.communicate(timeout=30)   # a hang fails here, however slow the machine
            finally:
                proc.kill()
            where = f"run {run}, {signum.name} after {moment:.2f} s"
            assert (proc.returncode, err.strip().splitlines()) == (128 + signum, ["ctxbench run: interrupted"]), where
            assert wait_until(lambda: group_members(proc.pid) == [], 10), f"a worker outlived {where}"
            assert survivors(pids) == [], where
    assert not (tmp_path / "res").exists()


# ----- Python strategies (`broken_strategies.spawns`) ---------------------------------------------------------

TESTS = Path(broken_strategies.__file__).resolve().parent


def _run_python(workdir: Path, pids: Path, workers: str, fault: str) -> subprocess.Popen:
    small_trace(workdir / "t.csv", turns=40)
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    return start_ctxbench(["run", "--traces", "t.csv", "--strategy", f"broken_strategies:spawns?call=2&fault={fault}",
                           "--workers", workers, "--lenient", "--budget-tokens", "1e6", "--no-bracket", "--no-report",
                           "--out", "res"], workdir, PYTHONPATH=path, ESCAPE_PIDS=str(pids))


@pytest.mark.parametrize("fault, workers", [("none", "2"), pytest.param("raise", "1", marks=pytest.mark.slow),
                                             pytest.param("os-exit", "1", marks=pytest.mark.slow),
                                             pytest.param("os-exit", "2", marks=pytest.mark.slow)],
                         ids=["the run's end", "an error of the strategy", "its process ended outright",
                              "its worker ended outright"])
def test_nothing_a_python_strategy_started_survives_the_run(tmp_path, fault, workers):
    """A strategy's process that ends itself outright (``os._exit``) leaves its escapees running: they are
    re-parented to ctxbench, which kills them once the run is done."""
    pids = tmp_path / "pids"
    with reaping(pids):
        proc = _run_python(tmp_path, pids, workers, fault)
        try:
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 0, err   # --lenient: a failing strategy is a violation
        assert len(pids_in(pids)) == 3 * int(workers) if fault == "none" else len(pids_in(pids)) >= 3
        assert os.getpid() not in pids_in(pids)   # the strategy ran in a process of ctxbench's
        assert survivors(pids) == []


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_signal_to_ctxbench_leaves_nothing_a_python_strategy_started(tmp_path, how):
    pids = tmp_path / "pids"
    with reaping(pids):
        proc = _run_python(tmp_path, pids, "2", "slow")
        try:
            # a strategy's process and its two escapees for each session replayed at once
            assert wait_until(lambda: len(pids_in(pids)) == 6, 60), "the strategies did not start"
            proc.send_signal(getattr(signal, how))
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        if how == "SIGTERM":
            assert (proc.returncode, err.strip().splitlines()) == (143, ["ctxbench run: interrupted"])
        assert wait_until(lambda: group_members(proc.pid) == [], 10), "a worker outlived ctxbench"
        assert survivors(pids) == []


def test_check_of_a_python_strategy_leaves_nothing_it_started(tmp_path, monkeypatch, capsys):
    """`check` runs the strategy in a process of its own and again in an interpreter under another hash seed
    (under a supervisor: nothing left there holds its pipes open, so the check is not held up)."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("ESCAPE_PIDS", str(pids))
    with reaping(pids):
        assert main(["check", "broken_strategies:spawns"]) == 0
        hash_seed = next(line for line in capsys.readouterr().out.splitlines() if "hash-seed" in line)
        assert hash_seed.rstrip().endswith("ok"), hash_seed
        assert os.getpid() not in pids_in(pids)   # the strategy ran in processes of ctxbench's
        assert len(pids_in(pids)) >= 6   # two of them at least (the checks, the hash seed), each with its escapees
        assert survivors(pids) == []
