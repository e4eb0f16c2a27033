"""A strategy ending its process is a contract violation naming strategy, session and turn; workers are capped."""

import json
import sys

import pandas as pd
import pytest

import ctxbench.sim.analysis.grid as grid
from processes import run_ctxbench, small_trace
from ctxbench.sim.cli import main
from ctxbench.sim.errors import ContractViolation
from ctxbench.sim.analysis.grid import resolve_workers, run_grid
from ctxbench.traces.io import load

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks worker processes")]

EXITING = '''
import os
from ctxbench.strategies.registry import make

class ExitsOnCall:
    """LRU until its ``call``-th evict call (1-based, so turn ``call - 1`` of a session), then os._exit(code)."""
    def __init__(self, call, code):
        self.lru, self.call, self.code, self.calls = make("lru"), call, code, 0
    def evict(self, state, budget):
        self.calls += 1
        if self.calls == self.call:
            os._exit(self.code)
        return self.lru.evict(state, budget)

def exit3_on_call4():
    return ExitsOnCall(4, 3)

def exit0_on_call2():
    return ExitsOnCall(2, 0)

def function_exits(state, budget):
    os._exit(5)

def factory_exits():
    os._exit(7)

from ctxbench.strategies.stateful import StatefulContextStrategy

class ExitsInAHook(StatefulContextStrategy):
    """LRU, but the 5th entry to enter the context ends the process (in on_insert, not evict)."""
    def __init__(self):
        self.lru, self.inserts = make("lru"), 0
    def on_insert(self, entry):
        self.inserts += 1
        if self.inserts == 5:
            os._exit(9)
    def evict(self, state, budget):
        return self.lru.evict(state, budget)

class ExitsInAdmit:
    """A policy that never edits, but whose admit ends the process at the 5th item (outside edit)."""
    def __init__(self):
        self.items = 0
    def admit(self, item):
        self.items += 1
        if self.items == 5:
            os._exit(9)
        return item.tokens
    def edit(self, items, window):
        return []
'''

TURNS = 12   # per session of the trace: one evict call per turn
BASE = ["run", "--traces", "t.csv", "--budget-tokens", "1500", "--no-bracket", "--no-report", "--out", "res"]


@pytest.fixture
def workdir(tmp_path):
    small_trace(tmp_path / "t.csv", turns=TURNS)
    (tmp_path / "exiting.py").write_text(EXITING)
    return tmp_path


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("spec, turn, status", [("exiting:exit3_on_call4", 3, "exit status 3"),
                                                ("exiting:exit0_on_call2", 1, "exit status 0"),
                                                ("exiting:function_exits", 0, "exit status 5")])
def test_strict_a_strategy_ending_its_worker_is_a_violation_naming_strategy_session_and_turn(
        workdir, workers, spec, turn, status):
    done = run_ctxbench([*BASE, "--strategy", "lru", spec, "--workers", workers], workdir)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("ctxbench run: contract violation: ")
    assert f"strategy '{spec}'" in lines[0] and f"turn {turn}:" in lines[0] and status in lines[0]
    assert "session 'alpha'" in lines[0] or "session 'beta'" in lines[0]
    assert not (workdir / "res").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_lenient_the_dead_strategy_is_counted_and_the_rest_of_the_grid_is_untouched(workdir, workers):
    clean = run_ctxbench([*BASE[:-1], "clean", "--strategy", "lru", "--workers", workers, "--json"], workdir)
    assert clean.returncode == 0, clean.stderr
    done = run_ctxbench([*BASE, "--strategy", "lru", "exiting:exit3_on_call4", "--workers", workers,
                         "--lenient", "--json"], workdir)
    assert done.returncode == 0, done.stderr
    # From its fourth call (turn 3) on, every turn of both sessions is a violation, as for a cmd: strategy that exits.
    assert json.loads(done.stdout)["violations"] == 2 * (TURNS - 3)
    results = pd.read_parquet(workdir / "res" / "results.parquet")
    dead = results[results["strategy"] == "exiting:exit3_on_call4"]
    assert sorted(dead["session"]) == ["alpha", "beta"] and (dead["violations"] == TURNS - 3).all()
    meta = json.loads((workdir / "res" / "meta.json").read_text())
    assert all("turn" in m and "exit status 3" in m for m in meta["violations"])
    lru = results[results["strategy"] == "lru"].drop(columns=["replay_s"]).filter(regex="^(?!evict_)")
    reference = pd.read_parquet(workdir / "clean" / "results.parquet")
    reference = reference.drop(columns=["replay_s"]).filter(regex="^(?!evict_)")
    pd.testing.assert_frame_equal(lru.reset_index(drop=True), reference.reset_index(drop=True))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_factory_that_ends_the_process_is_a_load_error(workdir, workers):
    done = run_ctxbench([*BASE, "--strategy", "lru", "exiting:factory_exits", "--workers", workers], workdir)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ctxbench run: error: cannot build strategy 'exiting:factory_exits': loading it ended the process "
        "(exit status 7)"]


def test_a_strategy_ending_its_worker_outside_evict_is_a_violation_of_the_replay(workdir):
    spec = "exiting:ExitsInAHook"
    done = run_ctxbench([*BASE, "--strategy", spec, "--workers", "2"], workdir)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert f"contract violation: strategy '{spec}', session '" in line
    assert "exit status 9" in line and "outside evict" in line
    done = run_ctxbench([*BASE, "--strategy", spec, "--workers", "2", "--lenient", "--json"], workdir)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["violations"] == 2 * TURNS   # no answer it gave can be trusted


def test_a_policy_ending_its_worker_outside_edit_is_named_a_policy(workdir):
    spec = "exiting:ExitsInAdmit"
    done = run_ctxbench([*BASE, "--strategy", spec, "--workers", "2"], workdir)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert f"contract violation: policy '{spec}', session '" in line, line
    assert "the policy ended its worker process (exit status 9) outside edit" in line, line


def test_run_grid_raises_the_violation_instead_of_a_broken_pool(workdir, monkeypatch):
    monkeypatch.syspath_prepend(str(workdir))
    with pytest.raises(ContractViolation, match=r"strategy 'exiting:exit3_on_call4', session '\w+', turn 3: "):
        run_grid(load(workdir / "t.csv"), ["lru", "exiting:exit3_on_call4"], [1_500], workers=2, progress=False)


def test_built_in_strategies_with_one_worker_run_in_this_process(workdir, monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("a worker process was started")

    monkeypatch.setattr(grid, "pooled", no_pool)
    result = run_grid(load(workdir / "t.csv"), ["lru", "importance", "cmd:true"], [1_500], workers=1,
                      progress=False, strict=False)
    assert len(result.results) == 2 * 3


# ----- how many workers ----------------------------------------------------------------------------

def test_workers_are_capped_at_the_cores_and_the_sessions(monkeypatch):
    monkeypatch.setattr(grid, "cores", lambda: 4)
    assert resolve_workers(None) == 4 and resolve_workers(0) == 4
    assert resolve_workers(1000) == 4
    assert resolve_workers(1000, tasks=2) == 2 and resolve_workers(3, tasks=10) == 3
    assert grid.workers_note(1000) == "--workers 1000 is more than the 4 cores; using 4"
    assert grid.workers_note(4) is None and grid.workers_note(None) is None


def test_a_thousand_workers_on_two_sessions_start_at_most_two(workdir, monkeypatch, capsys):
    sizes = []
    real = grid.pooled

    def recording(function, feed, workers, *args):
        sizes.append(workers)
        return real(function, feed, workers, *args)

    monkeypatch.setattr(grid, "pooled", recording)
    monkeypatch.setattr(grid, "cores", lambda: 8)
    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.chdir(workdir)
    assert main([*BASE, "--strategy", "lru", "exiting:exit3_on_call4", "--lenient", "--workers", "1000"]) == 0
    assert sizes and max(sizes) <= 2
    assert "note: --workers 1000 is more than the 8 cores; using 8" in capsys.readouterr().err
