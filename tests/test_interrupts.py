"""Interrupted runs: SIGTERM and SIGINT stop ctxbench, its workers and external strategies; results stay intact."""

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from processes import group_members, pids_in, running, small_trace, start_ctxbench, wait_until
from ctxbench.sim import interrupts
from ctxbench.sim.cli import main
from ctxbench.sim.errors import Interrupted
from ctxbench.sim.analysis.grid import cores
from ctxbench.sim.presentation.results import write_results_dir

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]
WORKERS = min(2, cores())   # --workers 2 runs as many as there are cores

SLOW_STRATEGY = '''
import os, time
from ctxbench.strategies.registry import make

class Slow:
    """LRU, half a second per call; each call appends the process id to ./pids."""
    def __init__(self):
        self.lru = make("lru")
    def evict(self, state, budget):
        with open("pids", "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(0.5)
        return self.lru.evict(state, budget)

def factory():
    return Slow()
'''

SLOW_EXTERNAL = '''
import json, os, sys, time
with open("external.pids", "a") as fh:
    fh.write(f"{os.getpid()}\\n")
for line in sys.stdin:
    time.sleep(0.5)
    print(json.dumps({"evict": []}), flush=True)
'''


def _tree(directory: Path) -> dict:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def workdir(tmp_path, capsys):
    """A trace, a slow strategy module, and previous results from a quick run."""
    small_trace(tmp_path / "t.csv")
    (tmp_path / "slowmod.py").write_text(SLOW_STRATEGY)
    (tmp_path / "slow_external.py").write_text(SLOW_EXTERNAL)
    assert main(["run", "--traces", str(tmp_path / "t.csv"), "--strategy", "lru", "--workers", "1",
                 "--no-bracket", "--out", str(tmp_path / "res")]) == 0
    capsys.readouterr()
    return tmp_path


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_run_and_both_workers_and_keeps_previous_results(workdir, signum, code):
    before = _tree(workdir / "res")
    proc = start_ctxbench(["run", "--traces", "t.csv", "--strategy", "slowmod:factory", "--workers", "2",
                           "--no-bracket", "--out", "res"], workdir)
    try:
        assert wait_until(lambda: len(pids_in(workdir / "pids")) == WORKERS, 60), "the workers never started"
        workers = pids_in(workdir / "pids")
        assert proc.pid not in workers
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code
    assert err.strip().splitlines() == ["ctxbench run: interrupted"]
    assert wait_until(lambda: not any(running(p) for p in workers), 10), "a worker survived"
    assert group_members(proc.pid) == []
    assert _tree(workdir / "res") == before
    assert not [p.name for p in workdir.iterdir() if ".ctxbench-" in p.name]


def test_sigterm_stops_external_strategies_run_in_the_ctxbench_process(workdir):
    spec = f"cmd:{sys.executable} slow_external.py"
    before = _tree(workdir / "res")
    proc = start_ctxbench(["run", "--traces", "t.csv", "--strategy", spec, "--workers", "1", "--lenient",
                           "--budget-tokens", "1e6", "--no-bracket", "--out", "res"], workdir)
    try:
        assert wait_until(lambda: pids_in(workdir / "external.pids"), 60), "the external strategy never started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143 and "interrupted" in err
    assert wait_until(lambda: not any(running(p) for p in pids_in(workdir / "external.pids")), 10)
    assert _tree(workdir / "res") == before


def test_sigterm_stops_external_strategies_in_workers(workdir):
    spec = f"cmd:{sys.executable} slow_external.py"
    proc = start_ctxbench(["run", "--traces", "t.csv", "--strategy", spec, "--workers", "2", "--lenient",
                           "--budget-tokens", "1e6", "--no-bracket", "--out", "res"], workdir)
    try:
        assert wait_until(lambda: len(pids_in(workdir / "external.pids")) == WORKERS, 60)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert wait_until(lambda: not any(running(p) for p in pids_in(workdir / "external.pids")), 10)
    assert group_members(proc.pid) == []


def test_an_external_strategys_children_are_stopped_with_it(tmp_path, capsys):
    """``sh -c 'exec >&-; sleep ...'`` closes its output: reported, and its child does not outlive it."""
    trace = small_trace(tmp_path / "t.csv")
    pid_file = tmp_path / "sleep.pid"
    spec = f"cmd:sh -c 'exec >&-; sleep 60 & echo $! > {pid_file}; wait'"
    try:
        assert main(["run", "--traces", str(trace), "--strategy", spec, "--workers", "1", "--no-bracket",
                     "--no-report", "--out", str(tmp_path / "r")]) == 2
        assert "closed its output" in capsys.readouterr().err
        sleeper = int(pid_file.read_text())
        assert wait_until(lambda: not running(sleeper), 10), "the strategy's child survived"
    finally:
        for pid in pids_in(pid_file):
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_while_writing_leaves_the_previous_results_and_no_temporary(workdir):
    import pandas as pd

    before = _tree(workdir / "res")

    def interrupted(staging: Path) -> None:
        (staging / "summary.md").write_text("half written\n")
        os.kill(os.getpid(), signal.SIGTERM)

    with interrupts.handled():
        with pytest.raises(Interrupted) as caught:
            write_results_dir(workdir / "res", pd.DataFrame({"x": [1]}), pd.DataFrame(), {}, interrupted)
    assert caught.value.signum == signal.SIGTERM
    assert _tree(workdir / "res") == before
    assert not [p.name for p in workdir.iterdir() if ".ctxbench-" in p.name]


def test_a_held_signal_is_delivered_after_the_section():
    delivered = []
    with interrupts.handled():
        with pytest.raises(Interrupted):
            with interrupts.held():
                os.kill(os.getpid(), signal.SIGTERM)
                delivered.append("section finished")
    assert delivered == ["section finished"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# ----- a signal at any moment -----------------------------------------------------------------------

#: Moments after ctxbench's command line imports its signal handling (`ctxbench.sim.interrupts`, before the
#: commands' modules), in seconds: the imports of numpy, pandas and the commands, loading the trace, starting the
#: workers, the replays. They are counted from there, not from the start of the interpreter, whose own start
#: (site, the standard library) is Python's and may take longer than these on a busy machine; a sitecustomize on
#: PYTHONPATH (`MARK_IMPORT`) tells when that import begins.
MOMENTS = {signal.SIGTERM: (0.1, 0.3, 0.6, 1.0, 1.6, 2.3, 3.0), signal.SIGINT: (0.2, 0.8, 1.5, 2.6)}

MARK_IMPORT = """
import importlib.abc, os, sys

class _Mark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ctxbench.sim.interrupts":
            sys.meta_path.remove(self)
            open(os.environ["IMPORT_MARK"], "w").close()
        return None

sys.meta_path.insert(0, _Mark())
"""


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    """Sessions long enough that four strategies at three budgets on two workers take well over the last moment
    (about 7 s on 2 cores; half as many tool calls took 3.4 s, and a run could end before the last moment), and a
    sitecustomize that marks the moment ctxbench's command line imports its signal handling."""
    directory = tmp_path_factory.mktemp("long")
    assert main(["generate", "--preset", "long", "--sessions", "8", "--set", "tool_calls=16000",
                 "--out", str(directory / "long.parquet")]) == 0
    (directory / "site").mkdir()
    (directory / "site" / "sitecustomize.py").write_text(MARK_IMPORT)
    return directory


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_at_any_moment_of_a_run_with_workers_ends_it_at_once_with_one_line(long_trace, signum, code):
    args = ["run", "--traces", "long.parquet", "--strategy", "lru", "claude-code", "codex", "observation-masking",
            "--budget-tokens", "50000", "100000", "200000", "--workers", "2", "--no-report", "--out", "res"]
    mark = long_trace / "imported"
    path = os.pathsep.join(p for p in (str(long_trace / "site"), os.environ.get("PYTHONPATH")) if p)
    for moment in MOMENTS[signum]:
        mark.unlink(missing_ok=True)
        proc = start_ctxbench(args, long_trace, PYTHONPATH=path, IMPORT_MARK=str(mark))
        try:
            assert wait_until(mark.exists, 60), "ctxbench never imported its signal handling"
            time.sleep(moment)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)   # a hang fails here, however slow the machine
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        assert (proc.returncode, err.strip().splitlines()) == (code, ["ctxbench run: interrupted"]), moment
        assert wait_until(lambda: group_members(proc.pid) == [], 10), f"a worker outlived the run ({moment} s)"
    assert not (long_trace / "res").exists()


DAEMON_EXTERNAL = '''
import json, os, sys, time
if os.fork() == 0:   # a daemon: a double fork and setsid, outside the program's process group and session
    if os.fork() == 0:
        os.setsid()
        with open("daemons.pids", "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(120)
    os._exit(0)
for line in sys.stdin:
    time.sleep(0.5)
    print(json.dumps({"evict": []}), flush=True)
'''


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_stops_what_an_external_strategy_left_outside_its_process_group(workdir, workers):
    (workdir / "daemon_external.py").write_text(DAEMON_EXTERNAL)
    spec = f"cmd:{sys.executable} daemon_external.py"
    proc = start_ctxbench(["run", "--traces", "t.csv", "--strategy", spec, "--workers", workers, "--lenient",
                           "--budget-tokens", "1e6", "--no-bracket", "--out", "res"], workdir)
    try:
        assert wait_until(lambda: len(pids_in(workdir / "daemons.pids")) == int(workers), 60)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 143
        daemons = pids_in(workdir / "daemons.pids")
        assert wait_until(lambda: not any(running(pid) for pid in daemons), 10), "a daemon outlived the run"
    finally:
        proc.kill()
        for pid in pids_in(workdir / "daemons.pids"):
            if running(pid):
                os.kill(pid, signal.SIGKILL)
