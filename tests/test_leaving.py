"""Strategies that leave (sys.exit, their own KeyboardInterrupt, ending their process), run long, or answer
with something other than a list: `run`, `regress`, `check` and `fidelity` end to end, and the per-call
time limit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import ctxbench.strategies.isolation as isolation
from engine_paths import compiled_or_not, replay_turns
from ctxbench.sim.analysis.fidelity import fidelity
from ctxbench.sim.analysis.latency import LatencyRatio, LatencySettings, measure_latency
from ctxbench.sim.cli import main
from ctxbench.sim.errors import ContractViolation
from ctxbench.sim.engine.turn_by_turn import TurnByTurnContext
from ctxbench.sim.analysis.grid import as_sessions
from ctxbench.sim.engine.suite import SUITES, build_suite
from ctxbench.strategies.check import KINDS, check_strategy
from ctxbench.strategies.check_policy import check_policy
from ctxbench.strategies.calls import (CallLimit, SignalInterrupt, TimeLimitExceeded, call_failure, call_limit_for,
                              note_signal, noted_signal, recording_interrupts)
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.external import ExternalStrategy
from ctxbench.strategies.registry import make
from test_cli_run import FAST, small_trace
from test_fidelity import hand_trace
from test_regress import TINY
from ctxbench.traces.io import save

pytestmark = pytest.mark.slow   # subprocesses: run by .ci/run, not by make test

HERE = Path(__file__).resolve().parent
FAST_LATENCY = LatencySettings(states=8, repeats=3)
LEAVING = {"exit": "raised SystemExit(0) (sys.exit)", "system-exit": "raised SystemExit(3) (sys.exit)",
           "interrupt": "raised KeyboardInterrupt itself (no Ctrl-C or signal arrived)",
           "generator-exit": "raised GeneratorExit, a BaseException"}


@pytest.fixture(autouse=True)
def _broken_strategies_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def run_cli(tmp_path, *specs, extra=()):
    trace = small_trace(tmp_path / "t.csv")
    fast = [*FAST[2:], *FAST[:2]] if "--workers" not in extra else FAST[2:]   # an option is given once
    budget = [] if "--budget-tokens" in extra else ["--budget-tokens", "1500"]   # a budget is given once
    return main(["run", "--traces", str(trace), "--strategy", *specs, *budget,
                 "--bytes-per-token", "3.8", "--out", str(tmp_path / "r"), *fast, *extra])


# ----- run ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("fault", sorted(LEAVING))
def test_run_strategy_leaving_evict_is_a_violation_exit_2(tmp_path, capsys, fault, workers):
    spec = f"broken_strategies:breaks?call=2&fault={fault}"
    assert run_cli(tmp_path, "lru", spec, extra=["--workers", workers]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("ctxbench run: contract violation: ")
    assert f"strategy '{spec}'" in line and "session 'alpha'" in line and "turn 2: " in line
    assert LEAVING[fault] in line
    assert not (tmp_path / "r").exists()


# At 1,500 tokens of 3.8 bytes (5,700 bytes) the third file read (turn 2) evicts the first; at 4,000 every file
# fits, and turn 5 reads src/m0.py again: the first hit.
@pytest.mark.parametrize("hook, call, turn, budget", [("reset", 0, 0, 1500), ("on_insert", 2, 2, 1500),
                                                      ("on_remove", 0, 2, 1500), ("on_access", 0, 5, 4000)])
@pytest.mark.parametrize("fault", ["exit", "interrupt"])
def test_run_strategy_leaving_a_hook_is_a_violation_naming_the_hook(tmp_path, capsys, hook, call, turn, budget,
                                                                    fault):
    spec = f"broken_strategies:hook_breaks?hook={hook}&call={call}&fault={fault}"
    assert run_cli(tmp_path, spec, extra=["--budget-tokens", str(budget)]) == 2
    line = _one_error_line(capsys)
    assert f"strategy '{spec}'" in line and "session 'alpha'" in line and f"turn {turn}: {hook} " in line
    assert LEAVING[fault] in line


def test_run_lenient_counts_each_way_of_leaving(tmp_path, capsys):
    specs = [f"broken_strategies:breaks?call=2&fault={f}" for f in ("exit", "interrupt")]
    specs.append("broken_strategies:hook_breaks?hook=on_insert&call=2&fault=exit")
    assert run_cli(tmp_path, "lru", *specs, extra=["--lenient", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["violations"] == 6   # once per strategy and session
    results = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert results.groupby("strategy")["violations"].sum().to_dict() == {"lru": 0, **{s: 2 for s in specs}}


def test_run_factory_that_exits_is_a_load_error(tmp_path, capsys):
    assert run_cli(tmp_path, "broken_strategies:exits_when_built") == 2
    line = _one_error_line(capsys)
    assert line == ("ctxbench run: error: cannot build strategy 'broken_strategies:exits_when_built': "
                    "raised SystemExit(0) (sys.exit): a strategy must return, not leave")


@pytest.mark.parametrize("name, what", [
    ("endless_generator", "turn 0: returned generator, not a list or tuple of ids"),
    ("finite_generator", "turn 0: returned generator, not a list or tuple of ids"),
    ("ten_million_ids", "turn 0: returned id 'x:0', which is not in the state (returned 10,000,000 ids: ['x:0', "),
])
def test_run_refuses_answers_that_are_not_a_list_or_are_longer_than_the_state(tmp_path, capsys, name, what):
    spec = f"broken_strategies:{name}"
    assert run_cli(tmp_path, spec) == 2
    line = _one_error_line(capsys)
    assert f"strategy '{spec}', session 'alpha', {what}" in line
    assert run_cli(tmp_path, spec, extra=["--lenient", "--json"]) == 0
    results = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert results["violations"].sum() == 24   # every turn of both sessions; LRU restores the budget
    assert results["peak_bytes"].max() <= results["budget_bytes"].max()


def test_run_time_limit_stops_a_sleeping_evict(tmp_path, capsys):
    spec = "broken_strategies:breaks?call=2&fault=sleep"
    assert run_cli(tmp_path, spec, extra=["--evict-timeout-ms", "100"]) == 2
    line = _one_error_line(capsys)
    assert (f"strategy '{spec}', session 'alpha', turn 2: ran past the per-call time limit of 100 ms"
            in line)
    assert run_cli(tmp_path, spec, "lru", extra=["--evict-timeout-ms", "100", "--lenient", "--workers", "2"]) == 0
    assert json.loads((tmp_path / "r" / "meta.json").read_text())["config"]["evict_timeout_ms"] == 100
    results = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert results.groupby("strategy")["violations"].sum().to_dict() == {spec: 2, "lru": 0}


@pytest.mark.parametrize("command", ["run", "regress", "check"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_evict_timeout_must_be_positive(capsys, command, value):
    argv = {"run": ["run"], "regress": ["regress", "--update", "--baseline", os.devnull], "check": ["check", "lru"]}
    assert main([*argv[command], "--evict-timeout-ms", value]) == 2
    assert (f"--evict-timeout-ms must be a whole number of milliseconds from 1 to 86,400,000 (one day), got {value}"
            in _one_error_line(capsys))


def test_run_real_ctrl_c_during_evict_still_interrupts(tmp_path):
    trace = small_trace(tmp_path / "t.csv")
    marker = tmp_path / "in-evict"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]), BROKEN_MARKER=str(marker))
    proc = subprocess.Popen([sys.executable, "-m", "ctxbench.sim.cli", "run", "--traces", str(trace), "--strategy",
                             "broken_strategies:breaks?call=2&fault=sleep", "--lenient", "--out",
                             str(tmp_path / "r"), *FAST], env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):   # a guard only: the strategy is asleep in evict within a second or two
            if marker.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip() == "ctxbench run: interrupted"
    assert not (tmp_path / "r").exists()


# ----- regress ------------------------------------------------------------------------------------

@pytest.fixture
def tiny_suite(monkeypatch):
    monkeypatch.setitem(SUITES, TINY.name, TINY)


def regress(path, *extra):
    return main(["regress", "--baseline", str(path), "--suite", TINY.name, "--strategy", "lru",
                 "broken_strategies:breaks_when_told", "--workers", "1", *extra])


@pytest.mark.parametrize("fault", ["exit", "interrupt"])
def test_regress_update_refuses_a_strategy_that_leaves_unless_allowed(tmp_path, tiny_suite, capsys, monkeypatch,
                                                                       fault):
    monkeypatch.setenv("BROKEN_FAULT", fault)
    path = tmp_path / "baseline.json"
    assert regress(path, "--update") == 2
    line = _one_error_line(capsys)
    assert line.startswith("ctxbench regress: error: --update refuses to record contract violations (")
    assert "first: strategy 'broken_strategies:breaks_when_told', session " in line and LEAVING[fault] in line
    assert not path.exists()
    assert regress(path, "--update", "--allow-violations") == 0
    out = " ".join(capsys.readouterr().out.split())   # the console wraps long lines
    assert "contract violations; first: strategy 'broken_strategies:breaks_when_told', session " in out
    assert f"turn 2: {LEAVING[fault]}" in out and "(--allow-violations)" in out
    cells = json.loads(path.read_text())["strategies"]["broken_strategies:breaks_when_told"]["budgets"]
    assert all(cell["metrics"]["violations"] == 2 for cell in cells.values())   # one per session
    assert regress(path) == 0                       # the gate holds it to what was recorded, and says so
    out = " ".join(capsys.readouterr().out.split())
    assert f"broken_strategies:breaks_when_told was baselined with {2 * len(cells)} contract violations" in out


@pytest.mark.parametrize("fault", ["exit", "interrupt", "sleep"])
def test_regress_gate_fails_when_a_strategy_starts_leaving(tmp_path, tiny_suite, capsys, monkeypatch, fault):
    path = tmp_path / "baseline.json"
    monkeypatch.setenv("BROKEN_FAULT", "none")
    assert regress(path, "--update") == 0
    before = path.read_bytes()
    capsys.readouterr()
    monkeypatch.setenv("BROKEN_FAULT", fault)
    assert regress(path, "--evict-timeout-ms", "200") == 1
    out = " ".join(capsys.readouterr().out.split())   # the console wraps long lines
    assert "REGRESSED" in out and "violations" in out
    what = "ran past the per-call time limit of 200 ms" if fault == "sleep" else LEAVING[fault]
    assert f"turn 2: {what}" in out
    assert path.read_bytes() == before


# ----- check --------------------------------------------------------------------------------------

def check_json(capsys, spec, *extra):
    code = main(["check", spec, "--examples", "5", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("fault", sorted(LEAVING))
def test_check_strategy_that_leaves_fails_with_a_minimal_example(capsys, fault):
    code, doc = check_json(capsys, f"broken_strategies:breaks?call=0&fault={fault}", "--no-latency")
    assert code == 1 and not doc["ok"]
    failure = next(f for f in doc["failures"] if f["kind"] == "leaves")
    assert failure["message"] == f"evict {LEAVING[fault]}: a strategy must return, not leave"
    assert failure["example"] == {"state": [], "budget": {"maxBytes": 0}}


def test_check_reset_that_leaves_is_named(capsys):
    code, doc = check_json(capsys, "broken_strategies:hook_breaks?hook=reset&call=0&fault=exit", "--no-latency")
    assert code == 1
    assert [f["message"] for f in doc["failures"]] == [
        "reset raised SystemExit(0) (sys.exit): a strategy must return, not leave"]


def test_check_factory_that_exits_is_a_load_error(capsys):
    assert main(["check", "broken_strategies:exits_when_built"]) == 2
    assert "cannot build strategy 'broken_strategies:exits_when_built': raised SystemExit(0)" in _one_error_line(capsys)


@pytest.mark.parametrize("name", ["endless_generator", "finite_generator"])
def test_check_refuses_generators_as_run_does_without_reading_them(capsys, name):
    code, doc = check_json(capsys, f"broken_strategies:{name}")
    assert code == 1 and [f["kind"] for f in doc["failures"]] == ["bad-return"]
    assert doc["failures"][0]["message"] == "evict returned generator, not a list or tuple of ids"
    assert doc["failures"][0]["example"] == {"state": [], "budget": {"maxBytes": 0}}
    assert doc["skipped"]["hash-seed"] == "the strategy already fails bad-return: its answers are not compared"
    assert [lat["evicted"] for lat in doc["latency"]] == [None, None]


def test_check_fails_ten_million_ids_at_once(capsys):
    code, doc = check_json(capsys, "broken_strategies:ten_million_ids")
    assert code == 1 and [f["kind"] for f in doc["failures"]] == ["bad-return"]
    assert doc["failures"][0]["message"] == "evict returned 10,000,000 ids for a state of 0 entries"
    assert doc["failures"][0]["example"] == {"state": [], "budget": {"maxBytes": 0}}
    assert doc["skipped"]["hash-seed"] == "the strategy already fails bad-return: its answers are not compared"
    assert [lat["evicted"] for lat in doc["latency"]] == [10_000_000, 10_000_000]


def test_check_time_limit_fails_a_sleeping_strategy(capsys):
    code, doc = check_json(capsys, "broken_strategies:sleeps?seconds=10", "--evict-timeout-ms", "50")
    assert code == 1 and [f["kind"] for f in doc["failures"]] == ["time-limit"]
    assert doc["failures"][0]["message"] == "evict ran past the per-call time limit of 50 ms"
    assert [lat["error"] for lat in doc["latency"]] == ["evict ran past the per-call time limit of 50 ms"] * 2
    assert "time-limit" in doc["checked"]


def test_check_time_limit_is_checked_only_when_asked(capsys):
    code, doc = check_json(capsys, "lru", "--no-latency")
    assert code == 0 and "time-limit" not in doc["checked"]
    code, doc = check_json(capsys, "lru", "--no-latency", "--evict-timeout-ms", "1000")
    assert code == 0 and "time-limit" in doc["checked"]


# ----- strategies that end their process (os._exit, a signal) ---------------------------------------
#
# Each command runs in a process of its own: on a ctxbench that calls the strategy in its own process,
# the strategy would end the test run too.

ENDING = {"os-exit": "exit status 0", "sigkill": "killed by SIGKILL"}
BROKEN_TOLD = "broken_strategies:breaks_when_told"


def ctxbench_in_a_process(cwd: Path, *args: str, fault: str = "none") -> subprocess.CompletedProcess:
    """``ctxbench ARGS`` run in a new process, with TINY registered and ``$BROKEN_FAULT`` set to ``fault``."""
    code = ("import sys; from ctxbench.sim.engine.suite import SUITES; from test_regress import TINY; "
            "SUITES[TINY.name] = TINY; from ctxbench.sim.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "BROKEN_FAULT": fault,
           "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def _only_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def _check_in_a_process(tmp_path, spec: str, *extra: str) -> tuple[int, dict]:
    done = ctxbench_in_a_process(tmp_path, "check", spec, "--examples", "5", "--json", *extra)
    assert done.returncode != 0 or done.stdout, done.stderr   # never a silent exit 0
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("fault", sorted(ENDING))
def test_check_strategy_that_ends_its_process_fails_leaves(tmp_path, fault):
    code, doc = _check_in_a_process(tmp_path, f"broken_strategies:breaks?call=0&fault={fault}")
    assert code == 1 and not doc["ok"] and [f["kind"] for f in doc["failures"]] == ["leaves"]
    message = f"the process running the strategy ended ({ENDING[fault]}) during evict: a strategy must return, not leave"
    assert doc["failures"][0]["message"] == message
    assert doc["failures"][0]["example"] == {"state": [], "budget": {"maxBytes": 0}}
    assert [lat["error"] for lat in doc["latency"]] == [message, message]


@pytest.mark.parametrize("fault", sorted(ENDING))
def test_check_goes_on_in_a_fresh_process_after_one_ends(tmp_path, fault):
    # Every third call of each fresh strategy ends its process; every answer it gives is lru's.
    code, doc = _check_in_a_process(tmp_path, f"broken_strategies:breaks?call=2&fault={fault}", "--no-latency")
    assert code == 1 and [f["kind"] for f in doc["failures"]] == ["leaves"]
    assert ENDING[fault] in doc["failures"][0]["message"]
    assert set(doc["checked"]) == set(KINDS) - {"hash-seed", "time-limit"}


def test_check_names_the_method_during_which_the_process_ended(tmp_path):
    code, doc = _check_in_a_process(tmp_path, "broken_strategies:hook_breaks?hook=reset&call=0&fault=os-exit",
                                    "--no-latency")
    assert code == 1 and [f["message"] for f in doc["failures"]] == [
        "the process running the strategy ended (exit status 0) during reset: a strategy must return, not leave"]


@pytest.mark.parametrize("command", [["check"], ["fidelity", "real.csv", "--strategy"],
                                     ["regress", "--update", "--baseline", "b.json", "--suite", TINY.name, "--strategy", "lru"]])
def test_a_factory_that_ends_its_process_is_a_load_error(tmp_path, command):
    save(hand_trace(), tmp_path / "real.csv")
    done = ctxbench_in_a_process(tmp_path, *command, "broken_strategies:ends_when_built")
    assert done.returncode == 2 and done.stdout == ""
    assert _only_line(done) == (f"ctxbench {command[0]}: error: cannot build strategy 'broken_strategies:ends_when_built': "
                                "loading it ended the process (exit status 0)")
    assert not (tmp_path / "b.json").exists()


def _regress_in_a_process(tmp_path, *extra: str, fault: str) -> subprocess.CompletedProcess:
    return ctxbench_in_a_process(tmp_path, "regress", "--baseline", "b.json", "--suite", TINY.name, "--strategy",
                                 "lru", BROKEN_TOLD, "--workers", "1", *extra, fault=fault)


@pytest.mark.parametrize("fault", sorted(ENDING))
def test_regress_update_refuses_a_strategy_that_ends_its_process(tmp_path, fault):
    done = _regress_in_a_process(tmp_path, "--update", fault=fault)
    assert done.returncode == 2
    line = _only_line(done)
    assert line.startswith(f"ctxbench regress: contract violation: strategy '{BROKEN_TOLD}': latency not measured: "
                           f"the process running the strategy ended ({ENDING[fault]}); in its replay, session '")
    assert line.endswith(f"turn 2: raised ProcessEnded: the strategy ended its worker process ({ENDING[fault]}) "
                         "during this call")
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("fault", sorted(ENDING))
def test_regress_gate_fails_when_a_strategy_starts_ending_its_process(tmp_path, fault):
    assert _regress_in_a_process(tmp_path, "--update", fault="none").returncode == 0
    before = (tmp_path / "b.json").read_bytes()
    done = _regress_in_a_process(tmp_path, fault=fault)
    assert done.returncode == 1, done.stderr
    out = " ".join(done.stdout.split())   # the console wraps long lines
    assert "REGRESSED" in out and "violations" in out
    assert f"latency of {BROKEN_TOLD} at 4,000: not measured: the process running the strategy ended ({ENDING[fault]})" \
        in out
    assert f"turn 2: raised ProcessEnded: the strategy ended its worker process ({ENDING[fault]})" in out
    assert (tmp_path / "b.json").read_bytes() == before


@pytest.mark.parametrize("fault", sorted(ENDING))
@pytest.mark.parametrize("budget", [[], ["--budget", "100"]])
def test_fidelity_strategy_that_ends_its_process_is_a_violation_naming_session_and_turn(tmp_path, fault, budget):
    save(hand_trace(), tmp_path / "real.csv")
    spec = f"broken_strategies:breaks?call=2&fault={fault}"
    done = ctxbench_in_a_process(tmp_path, "fidelity", "real.csv", "--strategy", spec, *budget)
    assert done.returncode == 2 and done.stdout == ""
    assert _only_line(done) == (f"ctxbench fidelity: contract violation: strategy '{spec}', session 's', turn 2: raised "
                                f"ProcessEnded: the strategy ended its worker process ({ENDING[fault]}) during this call")


POLICY_FAULTS = {
    "os-exit": "raised ProcessEnded: the policy ended its worker process (exit status 0) during this call",
    "os-exit3": "raised ProcessEnded: the policy ended its worker process (exit status 3) during this call",
    "sigkill": "raised ProcessEnded: the policy ended its worker process (killed by SIGKILL) during this call",
    "segfault": "raised ProcessEnded: the policy ended its worker process (killed by SIGSEGV) during this call",
    "exit": "raised SystemExit(0) (sys.exit): a strategy must return, not leave",
    "raise": "raised RuntimeError: deliberate failure",
    "sleep": "ran past the per-call time limit of 300 ms",
}


@pytest.mark.parametrize("fault", sorted(POLICY_FAULTS))
def test_fidelity_policy_that_leaves_is_a_violation_naming_policy_session_and_turn(tmp_path, fault):
    """As in a run: in a process of its own, under --evict-timeout-ms; never a silent exit, a crash or a hang."""
    save(hand_trace(), tmp_path / "real.csv")
    spec = f"broken_policies:breaks?call=2&fault={fault}"
    done = ctxbench_in_a_process(tmp_path, "fidelity", "real.csv", "--policy", spec, "--evict-timeout-ms", "300",
                                 "--out", "out")
    assert (done.returncode, done.stdout) == (2, "")
    assert _only_line(done) == f"ctxbench fidelity: contract violation: policy '{spec}', session 's', turn 2: " \
                               + POLICY_FAULTS[fault]
    assert not (tmp_path / "out").exists()


def test_fidelity_policy_alone_on_a_trace_without_usage_runs_as_in_a_run(tmp_path):
    save(hand_trace().drop(columns="usage_input_tokens"), tmp_path / "real.csv")
    spec = "broken_policies:breaks?call=2&fault=os-exit"
    done = ctxbench_in_a_process(tmp_path, "fidelity", "real.csv", "--policy", spec, "--json")
    assert (done.returncode, done.stdout) == (2, "")
    assert _only_line(done).endswith(f"session 's', turn 2: {POLICY_FAULTS['os-exit']}")


def test_fidelity_takes_the_time_limit_of_a_run(tmp_path):
    save(hand_trace(), tmp_path / "real.csv")
    for value in ("0", "86400001"):
        done = ctxbench_in_a_process(tmp_path, "fidelity", "real.csv", "--evict-timeout-ms", value)
        assert done.returncode == 2
        assert _only_line(done) == ("ctxbench fidelity: error: --evict-timeout-ms must be a whole number of "
                                    f"milliseconds from 1 to 86,400,000 (one day), got {value}")
    spec = "broken_strategies:breaks?call=2&fault=sleep"
    done = ctxbench_in_a_process(tmp_path, "fidelity", "real.csv", "--strategy", spec, "--evict-timeout-ms", "200")
    assert done.returncode == 2
    assert _only_line(done) == (f"ctxbench fidelity: contract violation: strategy '{spec}', session 's', turn 2: "
                                "ran past the per-call time limit of 200 ms")


def test_fidelity_strategy_that_ends_its_process_outside_evict_is_named(tmp_path):
    save(hand_trace(), tmp_path / "real.csv")
    spec = "broken_strategies:hook_breaks?hook=on_insert&call=2&fault=os-exit"
    done = ctxbench_in_a_process(tmp_path, "fidelity", "real.csv", "--strategy", spec)
    assert done.returncode == 2
    assert _only_line(done) == (f"ctxbench fidelity: contract violation: strategy '{spec}': the process running the "
                                "strategy ended (exit status 0) outside evict")


def test_built_in_strategies_are_checked_timed_and_replayed_in_this_process(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a process was started for a built-in strategy")

    monkeypatch.setattr(isolation, "in_child", no_process)
    monkeypatch.setattr(isolation.StrategyProcess, "_start", no_process)
    assert check_strategy("importance", examples=5, hash_seed=False).ok
    sessions = as_sessions(build_suite(TINY))
    assert isinstance(measure_latency(sessions, ["importance"], [4_000], FAST_LATENCY)[("importance", 4_000)],
                      LatencyRatio)
    assert len(fidelity(hand_trace(), strategy="importance", budget_tokens=100)) == 1


# ----- the rules themselves ------------------------------------------------------------------------

def test_call_limit_interrupts_python_code_and_restores_the_handler():
    def previous(signum, frame):
        raise AssertionError("the previous handler ran")

    old = signal.signal(signal.SIGALRM, previous)
    try:
        limit = CallLimit(20)
        with pytest.raises(TimeLimitExceeded, match="ran past the per-call time limit of 20 ms"):
            limit.call(time.sleep, 5)
        assert signal.getsignal(signal.SIGALRM) is previous
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        with limit:
            assert signal.getsignal(signal.SIGALRM) is not previous
            assert limit.call(sum, [1, 2]) == 3
        assert signal.getsignal(signal.SIGALRM) is previous
    finally:
        signal.signal(signal.SIGALRM, old)


def test_call_limit_fails_a_call_that_swallows_it():
    def stubborn():
        for _ in range(3):
            try:
                time.sleep(5)
            except BaseException:
                pass   # swallowed; the limit fires again while the call goes on
        return "done"

    with pytest.raises(TimeLimitExceeded):
        CallLimit(10).call(stubborn)


def test_call_limit_needs_the_main_thread_and_a_positive_limit():
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="whole number of milliseconds from 1 to 86,400,000"):
            CallLimit(bad)
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(ValueError, CallLimit, 5)))
    thread.start()
    thread.join()
    assert "main thread" in str(errors[0].value)


def test_cmd_strategies_keep_their_own_timeout():
    assert call_limit_for(ExternalStrategy(["true"]), 5) is None
    assert call_limit_for(make("lru"), None) is None
    assert call_limit_for(make("lru"), 5).ms == 5


def test_keyboard_interrupt_is_the_strategys_only_where_interrupts_are_recorded():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        call_failure(KeyboardInterrupt())   # library use, Python's own handler: taken as a real Ctrl-C
    with recording_interrupts():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        assert call_failure(KeyboardInterrupt())[0] == "leaves"
        assert call_failure(GeneratorExit())[0] == "leaves"
        assert call_failure(TimeLimitExceeded(7)) == ("time-limit", "ran past the per-call time limit of 7 ms")
        with pytest.raises(SignalInterrupt):   # raised by a signal handler: real, whatever is noted
            call_failure(SignalInterrupt(signal.SIGTERM))
        note_signal(signal.SIGTERM)
        assert noted_signal() == signal.SIGTERM
        for exc in (KeyboardInterrupt(), SystemExit(0), ValueError("x")):   # after a real signal: passed on
            with pytest.raises(KeyboardInterrupt):
                call_failure(exc)
    assert noted_signal() == signal.SIGTERM and signal.getsignal(signal.SIGINT) is before   # which signal it was
    assert call_failure(ValueError("x"))[0] == "raises"   # outside the block the record no longer applies
    with recording_interrupts():
        assert noted_signal() is None   # a new block starts afresh


@compiled_or_not
@pytest.mark.parametrize("hook, turn", [("reset", 0), ("on_insert", 2)])
def test_engine_limit_covers_hooks_and_reset(compiled, hook, turn):
    strategy = make(f"broken_strategies:hook_breaks?hook={hook}&call={0 if hook == 'reset' else 2}&fault=sleep")
    with pytest.raises(ContractViolation, match=f"turn {turn}: {hook} ran past the per-call time limit of 30 ms"):
        replay_turns(strategy, ContextBudget(100), [[("read", f"f{t}", 10, t)] for t in range(4)],
                     compiled=compiled, evict_timeout_ms=30)


# ----- what user code prints ----------------------------------------------------------------------

@pytest.mark.parametrize("workers", ["1", "2"])
def test_what_a_strategy_prints_never_reaches_the_json_on_stdout(tmp_path, capfd, workers):
    trace = small_trace(tmp_path / "t.csv")
    code = main(["run", "--traces", str(trace), "--strategy", "lru", "broken_strategies:chatty", "--budget-tokens",
                 "1500", "--bytes-per-token", "3.8", "--out", str(tmp_path / "r"), "--workers", workers,
                 "--no-report", "--no-bracket", "--json"])
    out, err = capfd.readouterr()
    assert code == 0, err
    doc = json.loads(out)                          # stdout is the JSON document and nothing else
    assert "broken_strategies:chatty" in json.dumps(doc)
    assert "evicting" in err                       # what it printed went to stderr


def test_check_json_stays_parseable_when_the_strategy_prints(capfd):
    code = main(["check", "broken_strategies:chatty", "--examples", "5", "--json"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert json.loads(out)["ok"] is True and "evicting" in err


# ----- policies in check: the limit everywhere, ids as strings, cmd: programs named and judged ---------

def test_check_of_a_sleeping_policy_keeps_the_limit_and_leaves_out_the_hash_seed_check(tmp_path):
    spec = "broken_policies:sleeps?seconds=5"
    done = ctxbench_in_a_process(tmp_path, "check", spec, "--evict-timeout-ms", "200", "--examples", "5", "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [f["kind"] for f in doc["failures"]] == ["time-limit"]
    assert doc["skipped"] == {"hash-seed": "the policy already fails time-limit: its answers are not compared"}
    assert [lat["error"] for lat in doc["latency"]] == ["edit ran past the per-call time limit of 200 ms"] * 2


@pytest.mark.parametrize("spec", ["broken_policies:sleeps?seconds=5&where=1",
                                  "broken_strategies:sleeps_where_hashseed_is?seed=1"])
def test_the_hash_seed_subprocess_keeps_the_limit(spec):
    """The subject sleeps only under PYTHONHASHSEED=1, the subprocess's: there its calls run past the limit."""
    check = check_strategy if spec.startswith("broken_strategies") else check_policy
    report = check(spec, examples=5, latency=False, evict_timeout_ms=50)
    assert report.ok and "hash-seed" in report.checked and not report.skipped


def test_a_hash_seed_subprocess_that_gives_nothing_is_skipped_in_one_line(monkeypatch):
    import ctxbench.strategies.checker as checker

    monkeypatch.setattr(checker, "HASHSEED_TIMEOUT_S", 1)
    report = check_policy("broken_policies:sleeps?seconds=5&where=1", examples=5, latency=False)
    assert report.skipped == {"hash-seed": "could not run 'broken_policies:sleeps?seconds=5&where=1' in a "
                                           "subprocess: it gave no answers within 1 s"}


def test_ids_of_a_str_subclass_are_the_strings_they_hold(tmp_path):
    """The class cannot be pickled (it is made inside the factory): check's own process passes plain strings on."""
    report = check_policy("broken_policies:str_ids", examples=20, latency=False)
    assert report.ok, report.failures
    trace = small_trace(tmp_path / "t.csv")
    from ctxbench.sim.analysis.grid import run_grid
    from ctxbench.traces.io import load

    grid = run_grid(load(trace), ["broken_policies:str_ids", "broken_policies:masks_first_result"], [1_000],
                    workers=1, progress=False, keep_turns=False)
    assert not grid.violations
    rows = grid.results.set_index(["session", "strategy"])["log_hash"].unstack()
    assert (rows["broken_policies:str_ids"] == rows["broken_policies:masks_first_result"]).all()
    from engine_paths import PATHS
    from ctxbench.sim.engine.replay import replay_session, split_sessions

    (st, _) = split_sessions(load(trace))
    for compiled in PATHS:   # both engines read the ids as the strings they hold
        ours, plain = (replay_session(st, spec, compiled=compiled).row for spec in
                       ("broken_policies:str_ids", "broken_policies:masks_first_result"))
        assert ours["violations"] == 0 and ours["log_hash"] == plain["log_hash"]


def _program(tmp_path: Path, name: str, body: str, options: str = "kind=policy") -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"cmd:{sys.executable} {path}?{options}"


SLOW_PROGRAM = "import json, sys, time\nfor line in sys.stdin:\n    time.sleep(5)\n    print(json.dumps({KEY: []}), flush=True)\n"
EXITING_PROGRAM = "import sys\nfor line in sys.stdin:\n    sys.exit(4)\n"
TWICE_PROGRAM = "import json, sys\nfor line in sys.stdin:\n    print(json.dumps({KEY: []}) + '\\n' + json.dumps({KEY: []}), flush=True)\n"


@pytest.mark.parametrize("kind, key", [("policy", "edits"), ("strategy", "evict")])
def test_check_judges_a_cmd_program_past_its_timeout_as_time_limit_and_one_that_exits_as_leaves(tmp_path, kind, key):
    slow = _program(tmp_path, "slow.py", SLOW_PROGRAM.replace("KEY", repr(key)), f"kind={kind}&timeout_ms=100&start_timeout_ms=2000")
    report = (check_policy if kind == "policy" else check_strategy)(slow, examples=3, latency=False)
    assert [f.kind for f in report.failures] == ["time-limit"]
    assert f"external {kind} " in report.failures[0].message and "gave no reply within" in report.failures[0].message
    exits = _program(tmp_path, "exits.py", EXITING_PROGRAM, f"kind={kind}")
    report = (check_policy if kind == "policy" else check_strategy)(exits, examples=3, latency=False)
    assert [f.kind for f in report.failures] == ["leaves"]
    assert f"external {kind} " in report.failures[0].message and "exited with status 4" in report.failures[0].message


def test_a_cmd_policy_is_named_a_policy_and_two_reply_lines_are_a_violation(tmp_path):
    from ctxbench.sim.engine.replay import replay_session, split_sessions
    from ctxbench.traces.io import load

    (st, _) = split_sessions(load(small_trace(tmp_path / "t.csv")))
    twice = _program(tmp_path, "twice.py", TWICE_PROGRAM.replace("KEY", "'edits'"))
    with pytest.raises(ContractViolation, match="external policy .* wrote more than one line for one request") as caught:
        replay_session(st, twice)
    assert "external strategy" not in str(caught.value)
    report = check_policy(twice, examples=3, latency=False)
    assert "wrote more than one line for one request" in report.failures[0].message


def test_a_cmd_policy_keeps_its_own_timeout_under_evict_timeout_ms(tmp_path):
    """No SIGALRM in the middle of its exchange: a reply in 120 ms is on time for timeout_ms=5000."""
    from ctxbench.sim.engine.replay import replay_session, split_sessions
    from ctxbench.traces.io import load

    (st, _) = split_sessions(load(small_trace(tmp_path / "t.csv")))
    body = "import json, sys, time\nfor line in sys.stdin:\n    time.sleep(0.12)\n    print(json.dumps({'edits': []}), flush=True)\n"
    result = replay_session(st, _program(tmp_path, "late.py", body), evict_timeout_ms=50)
    assert result.row["violations"] == 0
