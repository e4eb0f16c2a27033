"""External-process strategies (``cmd:`` specs): the examples agree with lru; slow, crashing and lying ones fail cleanly."""

from __future__ import annotations

import os
import pickle
import shlex
import signal
import shutil
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.errors import ContractViolation
from ctxbench.sim.engine.replay import SessionTrace, replay_session
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.external import ExternalStrategy, ExternalStrategyError, parse_command_spec
from ctxbench.strategies.registry import make

ROOT = Path(__file__).resolve().parents[1]
PYTHON = shlex.quote(sys.executable)
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def session(n: int = 400, seed: int = 5) -> SessionTrace:
    """Reads, edits, writes and outputs over 60 paths, with several events in some turns."""
    rng = np.random.default_rng(seed)
    paths = [f"tool://bash/{i}" if rng.random() < 0.25 else f"src/f{k % 60}.ts"
             for i, k in enumerate(rng.zipf(1.3, n))]
    ops = [3 if p.startswith("tool://") else int(rng.choice([0, 0, 0, 1, 2])) for p in paths]
    turns = np.cumsum(rng.random(n) < 0.7).tolist()
    return SessionTrace("s", turns, ops, paths, rng.integers(50, 4_000, n).tolist(),
                        (1_700_000_000_000 + 1_000 * np.arange(n)).tolist())


def script(tmp_path: Path, name: str, body: str) -> str:
    """A Python script in ``tmp_path`` and the ``cmd:`` spec that runs it."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return f"cmd:{PYTHON} {shlex.quote(str(path))}"


ANSWER_LRU = """
    import json, sys
    for line in sys.stdin:
        req = json.loads(line)
        state, budget = req["state"], req["budget"]
        cap = min(100, budget.get("maxEntries", 100))
        total, n, out = sum(e["sizeBytes"] for e in state), len(state), []
        for e in sorted(state, key=lambda e: (e["lastAccessedAt"], e["id"])):
            if total <= budget["maxBytes"] and n <= cap:
                break
            out.append(e["id"]); total -= e["sizeBytes"]; n -= 1
"""


# --- the examples give exactly the misses of the Python lru -------------------------------------

@needs_node
@pytest.mark.parametrize("max_bytes", [3_000, 20_000])
def test_node_example_matches_python_lru(max_bytes):
    st, budget = session(), ContextBudget(max_bytes)
    ours = replay_session(st, "lru", budget)
    theirs = replay_session(st, f"cmd:node {ROOT / 'examples' / 'lru.js'}", budget)
    assert ours.row["evictions"] > 0 and theirs.row["violations"] == 0
    for key in ("misses", "capacity_misses", "reread_bytes", "evictions", "log_hash"):
        assert theirs.row[key] == ours.row[key], key


@needs_node
def test_node_example_applies_the_entry_cap_of_100():
    st = session(n=600)
    ours = replay_session(st, "lru", ContextBudget(10**9))
    theirs = replay_session(st, f"cmd:node {ROOT / 'examples' / 'lru.js'}", ContextBudget(10**9))
    assert ours.row["evictions"] > 0 and theirs.row["log_hash"] == ours.row["log_hash"]


def test_python_example_matches_python_lru():
    st, budget = session(n=200), ContextBudget(5_000)
    theirs = replay_session(st, f"cmd:{PYTHON} {ROOT / 'examples' / 'lru_external.py'}", budget)
    assert theirs.row["log_hash"] == replay_session(st, "lru", budget).row["log_hash"]


# --- lifecycle ------------------------------------------------------------------------------------

STATE = (ContextEntry("a:0", "a", 1, 10), ContextEntry("b:0", "b", 2, 10))


def test_started_by_with_and_stopped_after(tmp_path):
    strategy = make(script(tmp_path, "lru.py", ANSWER_LRU + "        print(json.dumps({'evict': out}), flush=True)\n"))
    assert isinstance(strategy, ExternalStrategy) and not strategy.running
    with strategy:
        assert strategy.running
        assert strategy.evict(STATE, ContextBudget(10)) == ["a:0"]
        assert strategy.evict(STATE, ContextBudget(0)) == ["a:0", "b:0"]
    assert not strategy.running


def test_lazy_start_and_close(tmp_path):
    strategy = make(script(tmp_path, "lru.py", ANSWER_LRU + "        print(json.dumps({'evict': out}), flush=True)\n"))
    assert strategy.evict(STATE, ContextBudget(15)) == ["a:0"]
    assert strategy.running
    strategy.close()
    assert not strategy.running
    strategy.close()  # idempotent


def test_a_pickled_copy_is_stopped(tmp_path):
    spec = script(tmp_path, "lru.py", ANSWER_LRU + "        print(json.dumps({'evict': out}), flush=True)\n")
    with make(spec) as strategy:
        copy = pickle.loads(pickle.dumps(strategy))
        assert strategy.running and not copy.running and copy.argv == strategy.argv
    assert copy.evict(STATE, ContextBudget(10)) == ["a:0"]
    copy.close()


def test_large_states_do_not_deadlock_the_pipes():
    state = tuple(ContextEntry(f"src/file{i:05d}.ts:0", f"src/file{i:05d}.ts", i, 1_000) for i in range(20_000))
    with make(f"cmd:{PYTHON} {ROOT / 'examples' / 'lru_external.py'} 'lru?max_entries=none'") as strategy:
        assert len(strategy.evict(state, ContextBudget(1_000))) == 19_999


# --- failures are contract violations, never a hang -------------------------------------------------

def replay(spec: str, *, strict: bool = True):
    return replay_session(session(n=60), spec, ContextBudget(2_000), strict=strict)


def test_slow_strategy_times_out(tmp_path):
    spec = script(tmp_path, "slow.py", """
        import sys, time
        for line in sys.stdin:
            time.sleep(30)
    """) + "?timeout_ms=200&start_timeout_ms=800"
    started = time.monotonic()
    with pytest.raises(ContractViolation, match=r"turn \d+: raised ExternalTimeout: external strategy .*no reply within 1000 ms"):
        replay(spec)
    lenient = replay(spec, strict=False)
    assert lenient.row["violations"] == lenient.row["turns"]  # later calls fail at once
    assert "stopped after that failure" in lenient.violation_messages[-1]
    assert time.monotonic() - started < 25


def test_crashing_strategy_reports_its_exit_status_and_stderr(tmp_path):
    spec = script(tmp_path, "crash.py", """
        import sys
        sys.stdin.readline()
        sys.stderr.write("Traceback: boom\\n")
        sys.exit(3)
    """)
    with pytest.raises(ContractViolation, match=r"exited with status 3 before replying; its stderr ends: Traceback: boom"):
        replay(spec)


def test_strategy_that_exits_at_start(tmp_path):
    with pytest.raises(ContractViolation, match="exited with status 1"):
        replay(script(tmp_path, "bad.py", "raise SystemExit(1)\n"))


@pytest.mark.parametrize(("reply", "message"), [
    ("print('not json', flush=True)", "not JSON: 'not json'"),
    ("print('[1, 2]', flush=True)", r'expected an object \{"evict": \[ids...\]\}'),
    ("print(json.dumps({'evict': 'a:0'}), flush=True)", "expected an object"),
    ("print(json.dumps({'evict': out + ['ghost.ts:0']}), flush=True)", "'ghost.ts:0', which is not in the state"),
    ("print(json.dumps({'evict': out + out[:1]}), flush=True)", "twice"),
    ("print(json.dumps({'evict': [7] + out}), flush=True)", "non-string id 7"),
    ("print(json.dumps({'evict': []}), flush=True)", "over the budget"),
    ("print(json.dumps({'evict': out}) + '\\n' + json.dumps({'evict': out}), flush=True)",
     "wrote more than one line for one request"),
])
def test_lying_strategies(tmp_path, reply, message):
    spec = script(tmp_path, "liar.py", ANSWER_LRU + f"        {reply}\n")
    with pytest.raises(ContractViolation, match=message):
        replay(spec)
    assert replay(spec, strict=False).row["violations"] > 0


def test_direct_errors_are_external_strategy_errors(tmp_path):
    strategy = make(script(tmp_path, "silent.py", "import sys\nfor line in sys.stdin: pass\n")
                    + "?timeout_ms=100&start_timeout_ms=100")
    with strategy, pytest.raises(ExternalStrategyError, match="no reply within 200 ms"):
        strategy.evict(STATE, ContextBudget(10))
    assert not strategy.running


# --- the spec ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "argv", "options"), [
    ("node lru.js", ["node", "lru.js"], {}),
    ("node lru.js?timeout_ms=2000", ["node", "lru.js"], {"timeout_ms": 2000}),
    ("node lru.js?timeout_ms=5&start_timeout_ms=7", ["node", "lru.js"], {"timeout_ms": 5, "start_timeout_ms": 7}),
    ("tool 'a b' --x=1", ["tool", "a b", "--x=1"], {}),
    ("grep -E 'ab?c' f?", ["grep", "-E", "ab?c", "f"], {}),
    ("tool 'q?a=1'?", ["tool", "q?a=1"], {}),
    ("tool 'is it?' x", ["tool", "is it?", "x"], {}),
])
def test_parse_command_spec(text, argv, options):
    assert parse_command_spec(text) == (argv, options)


@pytest.mark.parametrize(("spec", "message"), [
    ("cmd:node lru.js?timeout=5", "unknown option 'timeout'"),
    ("cmd:node lru.js?timeout_ms=0", "must be a whole number of milliseconds"),
    ("cmd:node lru.js?timeout_ms=soon", "must be a whole number of milliseconds"),
    ("cmd:", "has no command"),
    ("cmd:'unclosed", "cannot parse"),
    ("cmd:no-such-program-xyz --flag", "'no-such-program-xyz' not found on PATH"),
])
def test_bad_specs_are_load_errors(spec, message):
    with pytest.raises(StrategyLoadError, match=message):
        make(spec)


def test_cli_bad_cmd_spec_is_exit_2(capsys, tmp_path):
    code = main(["run", "--preset", "mixed", "--sessions", "1", "--strategy", "cmd:no-such-program-xyz",
                 "--out", str(tmp_path / "r"), "--workers", "1", "--no-report"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-program-xyz" in err[0]
    assert not (tmp_path / "r").exists()


def test_a_strategy_logging_to_stderr_is_read_in_chunks_and_its_last_lines_kept(tmp_path):
    chatty = ANSWER_LRU + """        for i in range(2000):
            print(f"debug {i}: considering the state", file=sys.stderr)
        print(json.dumps({"evict": out}), flush=True)
"""
    quiet = replay(script(tmp_path, "quiet.py", ANSWER_LRU + "        print(json.dumps({'evict': out}), flush=True)\n"))
    loud = replay(script(tmp_path, "loud.py", chatty))
    assert loud.row["violations"] == quiet.row["violations"] == 0
    assert loud.row["misses"] == quiet.row["misses"]      # logging changes nothing the replay counts


# --- what a program leaves behind --------------------------------------------------------------------

LEAVES_A_DAEMON = """
    import json, os, sys, time
    # A double fork: the grandchild leaves the process group and the session (setsid), as a daemon does.
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            os.setsid()
            with open(sys.argv[1] + ".tmp", "w") as fh:
                fh.write(f"{os.getpid()} {os.getsid(0)}")
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(120)
        os._exit(0)
    os.waitpid(child, 0)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    for number, line in enumerate(sys.stdin):
        if number == int(sys.argv[2]):
            sys.exit(3)
        print(json.dumps({"evict": [e["id"] for e in json.loads(line)["state"]]}), flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc")
@pytest.mark.parametrize("exits_at", [10_000, 2], ids=["stopped after the replay", "stopped after it failed"])
def test_a_descendant_that_left_the_process_group_is_stopped_with_the_program(tmp_path, exits_at):
    from processes import running, wait_until

    pid_file = tmp_path / "daemon.pid"
    spec = script(tmp_path, "daemon.py", LEAVES_A_DAEMON) + f" {shlex.quote(str(pid_file))} {exits_at}"
    try:
        result = replay_session(session(n=60), spec, ContextBudget(2_000), strict=False)
        assert (result.row["violations"] > 0) == (exits_at == 2)
        assert exits_at != 2 or "exited with status 3 before replying" in result.violation_messages[0]
        daemon, session_id = map(int, pid_file.read_text().split())
        assert session_id == daemon   # it did leave the program's session
        assert wait_until(lambda: not running(daemon), 10), "the program's daemon outlived it"
    finally:
        if pid_file.exists() and running(int(pid_file.read_text().split()[0])):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
