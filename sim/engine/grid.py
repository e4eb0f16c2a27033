"""Run (traces × strategies × budgets) in worker processes or on a Dask cluster; tidy results."""

from __future__ import annotations

import contextlib
import copy
import functools
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.analysis.bracket import bracket_results
from sim.engine.claims import ClaimConfig
from sim import interrupts
from sim.errors import ContractViolation, InputError
from sim.engine.measures import DEFAULT_BYTES_PER_TOKEN, TURN_FIELDS
from sim.engine.replay import (ResolvedSession, SessionResult, SessionTrace, budget_for_tokens, replay_session,
                        resolve_session, split_sessions, strategy_label)
from strategies.errors import StrategyLoadError
from strategies.external import stop_all as stop_external_strategies
from strategies.registry import builtin_names, make, parse_spec
from strategies.stateful import StatefulContextStrategy

__all__ = ["GridResult", "GridTask", "run_grid", "run_task", "resolve_workers", "workers_note", "cores", "as_sessions",
           "ProcessEnded", "WORKERS_HELP", "loads_code", "check_loads", "StrategyEnded",
           "run_isolated", "StrategyProcess"]


@dataclass(frozen=True)
class GridTask:
    """One session to replay under every (strategy, budget) pair of the grid."""

    index: int
    session: SessionTrace
    strategies: tuple
    budgets_tokens: tuple[float, ...]
    bytes_per_token: float
    strict: bool
    keep_turns: bool
    claims: tuple[ClaimConfig | None, ...] = (None,)
    bracket: bool = False
    max_files: int | None = None
    max_directories: int | None = None
    evict_timeout_ms: int | None = None


@dataclass
class GridResult:
    """The grid's metrics (one row per session × strategy × budget [× claim mode]) and details.

    ``arms`` has one row per arm of multi-arm sessions; ``thrashing`` one row per overwrite of
    another arm's unsaved change; both are empty for single-arm traces.
    """

    results: pd.DataFrame
    turns: pd.DataFrame
    violations: list[str] = field(default_factory=list)
    arms: pd.DataFrame = field(default_factory=pd.DataFrame)
    thrashing: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True)
class _Replay:
    """One replay of a task: a strategy (None: the optimal bracket) under a budget [and claim mode]."""

    budget_tokens: float
    spec: object | None
    claims: ClaimConfig | None


def _replays(task: GridTask) -> list[_Replay]:
    """The task's replays in the order their outputs are reported."""
    # Claims only matter when several arms share the workspace.
    modes = task.claims if task.session.arms is not None else (None,)
    out = []
    for budget_tokens in task.budgets_tokens:
        out.extend(_Replay(budget_tokens, spec, claims) for spec in task.strategies for claims in modes)
        if task.bracket:
            out.extend(_Replay(budget_tokens, None, claims) for claims in modes)
    return out


def _run_replay(task: GridTask, replay: _Replay, strategy_for_arm=None,
                resolved: dict[ClaimConfig | None, ResolvedSession] | None = None) -> list[tuple]:
    """The outputs of one replay (two for the bracket: its lower and upper rows); ``resolved`` keeps
    the session resolved under each claim mode for the task's other replays."""
    resolved = {} if resolved is None else resolved
    if replay.claims not in resolved:
        resolved[replay.claims] = resolve_session(task.session, replay.claims)
    session = resolved[replay.claims]
    budget = budget_for_tokens(replay.budget_tokens, task.bytes_per_token, task.max_files)
    if replay.spec is None:
        lower, upper = bracket_results(session, budget, bytes_per_token=task.bytes_per_token)
        return [({**lower, "budget_tokens": replay.budget_tokens, "task": task.index}, None, [], [], []),
                _task_output(task, upper, replay.budget_tokens)]
    result = replay_session(session, replay.spec, budget, strict=task.strict,
                            strategy_name=strategy_label(replay.spec), bytes_per_token=task.bytes_per_token,
                            max_directories=task.max_directories, strategy_for_arm=strategy_for_arm,
                            evict_timeout_ms=task.evict_timeout_ms)
    return [_task_output(task, result, replay.budget_tokens)]


def run_task(task: GridTask) -> list[tuple[dict, dict | None, list[str], list[dict], list[dict]]]:
    """Replay one session under each (strategy, budget[, claim mode]), resolving it once per claim mode;
    runs in a worker."""
    resolved: dict[ClaimConfig | None, ResolvedSession] = {}
    return [out for replay in _replays(task) for out in _run_replay(task, replay, resolved=resolved)]


def _task_output(task: GridTask, result: SessionResult, budget_tokens: float) -> tuple:
    """One replay's row, per-turn columns (when kept), violations, arm rows and thrashing rows."""
    extra = {"budget_tokens": budget_tokens, "task": task.index}
    row = {**result.row, **extra}
    turns = None
    if task.keep_turns:
        logs = result.arm_logs
        turns = {name: np.concatenate([log.columns[name] for log in logs.values()])
                 for name in TURN_FIELDS}
        turns["arm"] = np.repeat(np.array(list(logs), dtype=object), [len(g) for g in logs.values()])
    arms = [{**a, "budget_tokens": budget_tokens} for a in result.arms]
    thrashing = [{**t, "trace": row["trace"], "session": row["session"], "strategy": row["strategy"],
                  "claims": row.get("claims"), "budget_tokens": budget_tokens}
                 for t in result.thrashing]
    return row, turns, result.violation_messages, arms, thrashing


def as_sessions(traces) -> list[SessionTrace]:
    """Sessions from a DataFrame, a ``{label: DataFrame}`` mapping, or a list of either / of sessions."""
    if isinstance(traces, pd.DataFrame):
        return split_sessions(traces, traces.attrs.get("name", ""))
    if isinstance(traces, SessionTrace):
        return [traces]
    if isinstance(traces, Mapping):
        return [s for label, df in traces.items() for s in split_sessions(df, str(label))]
    out: list[SessionTrace] = []
    for item in traces:
        out.extend(as_sessions(item))
    return out


WORKERS_HELP = ("worker processes (default: all cores); more than the cores is capped at the cores (with a "
                "note), and never more than the sessions. Strategies that load code (import paths, entry points) "
                "run in worker processes even with 1, so that one ending its process is a contract violation")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def resolve_workers(workers: int | None, tasks: int | None = None) -> int:
    """How many worker processes to use: ``None`` or 0 means all cores; never more than the cores or ``tasks``."""
    if workers is None or workers == 0:
        workers = cores()
    if workers < 0:
        raise InputError(f"workers must be >= 0, got {workers}")
    return max(1, min(workers, cores(), tasks if tasks is not None else workers))


def workers_note(workers: int | None) -> str | None:
    """The note to show when ``--workers`` asks for more processes than there are cores, else None."""
    if workers is not None and workers > cores():
        return f"--workers {workers} is more than the {cores()} cores; using {cores()}"
    return None


def _check_strategies(strategies: Sequence) -> tuple:
    if not strategies:
        raise InputError("no strategy to run")
    labels = [strategy_label(s) for s in strategies]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise InputError(f"strategy named twice: {', '.join(dupes)}")
    # Fail fast, before any work, on a spec that cannot be loaded; code ctxbench does not ship is
    # loaded in a process of its own, as it will run.
    for spec in strategies:
        if not loads_code(spec):
            make(spec)
    _load_isolated([spec for spec in strategies if loads_code(spec)])
    return tuple(strategies)


def _load_isolated(specs: list) -> None:
    """Build each strategy of ``specs`` in a single-use process; a failure (or the process ending) is a load error."""
    if not specs:
        return
    loaded, status = _in_child(_load_main, specs)
    if len(loaded) < len(specs):
        raise StrategyLoadError(f"cannot build strategy {strategy_label(specs[len(loaded)])!r}: loading it ended the "
                                f"process ({_ending(status)})")


def check_loads(spec) -> None:
    """Build ``spec`` once, to see that it loads: in this process for a built-in, `cmd:` spec or object, in a
    single-use process for code ctxbench does not ship (`loads_code`), so that one ending its process is a load error."""
    if loads_code(spec):
        _load_isolated([spec])
    else:
        make(spec)


def _load_main(specs: list, send) -> None:
    interrupts.in_worker(stop_external_strategies)
    try:
        for spec in specs:
            make(spec)
            send.send(spec)
    except BaseException as exc:
        try:
            send.send(exc)
        except Exception:
            send.send(StrategyLoadError(f"cannot build strategy {strategy_label(spec)!r}: {type(exc).__name__}: {exc}"))
    finally:
        send.close()


def _progress_enabled(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return sys.stderr.isatty() and not os.environ.get("CI")


def loads_code(spec) -> bool:
    """Whether ``spec`` names Python code that ctxbench does not ship (an import path, an entry point, a plugin)."""
    if not isinstance(spec, str):
        return False   # an object the caller built and handed over: the caller's process is its own
    scheme, sep, _ = spec.strip().partition(":")
    if sep and scheme == "cmd":
        return False   # an external process: its exit is reported by `strategies.external`
    return parse_spec(spec)[0] not in builtin_names()


def _context():
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def _execute(tasks: list[GridTask], workers: int, scheduler: str | None, on_done: Callable[[int], None]):
    """Yield each task's output in task order, however the tasks ran."""
    if scheduler:
        yield from _execute_dask(tasks, scheduler, on_done)
        return
    if workers <= 1 and not any(loads_code(spec) for spec in tasks[0].strategies):
        for task in tasks:
            out = run_task(task)
            on_done(len(out))
            yield out
        return
    done = _execute_local(tasks, workers, on_done)
    for i in range(len(tasks)):
        yield done.pop(i)


# ----- local worker processes ------------------------------------------------------------------------
#
# The fast path is a process pool, as if nothing could go wrong. A worker that dies (a strategy
# calling os._exit, a crash, the OOM killer) breaks the pool: the tasks it was running (flagged
# in shared memory as they start) are then run again one at a time in single-use processes that
# count the strategy's calls, to find the replay and call that ends the process; that replay is
# run once more with the strategy answering, from that call on, by raising `ProcessEnded`, which
# the manager reports like any raising strategy (strategy, session, arm, turn): strict stops,
# lenient counts it. The tasks that had not started go to a fresh pool.

_STOP_GRACE_S = 3.0
_started = None   # in a pool worker: the shared flags of the tasks started


class ProcessEnded(Exception):
    """Stands in for a strategy's answers from the call during which it ended its worker process."""


def _init_worker(started) -> None:
    global _started
    _started = started
    interrupts.in_worker(stop_external_strategies)


def _run_pooled(task: GridTask) -> list[tuple]:
    _started[task.index] = 1
    return run_task(task)


def _execute_local(tasks: list[GridTask], workers: int, on_done: Callable[[int], None]) -> dict[int, list]:
    """Every task's output, by index, from local worker processes."""
    context = _context()
    done: dict[int, list] = {}
    # Largest sessions first keeps workers busy to the end; results are re-ordered by the caller.
    queue = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].session))
    while queue:
        started = context.RawArray("b", len(tasks))
        unfinished = _run_pool(tasks, queue, min(workers, len(queue)), context, started, done, on_done)
        for i in unfinished:
            if started[i]:
                done[i] = _run_isolated(tasks[i], context)
                on_done(len(done[i]))
        queue = [i for i in unfinished if not started[i]]
    return done


def _run_pool(tasks, queue: list[int], workers: int, context, started, done: dict, on_done) -> list[int]:
    """Run the queued tasks in a pool; the ones left unfinished because a worker died (none if none did)."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                               initargs=(started,))
    try:
        futures = {i: pool.submit(_run_pooled, tasks[i]) for i in queue}
        broken = False
        for i in queue:
            try:
                done[i] = futures[i].result()
            except BrokenProcessPool:
                broken = True
                break
            on_done(len(done[i]))
        unfinished = []
        if broken:
            futures_wait(list(futures.values()))
            for i in queue:
                if i in done:
                    continue
                error = futures[i].exception()
                if isinstance(error, BrokenProcessPool):
                    unfinished.append(i)
                elif error is not None:
                    raise error
                else:
                    done[i] = futures[i].result()
                    on_done(len(done[i]))
    except BaseException:
        # A strict violation, Ctrl-C or SIGTERM ends the sweep now, workers and all.
        _stop_pool(pool)
        raise
    pool.shutdown()
    return unfinished


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Drop the queued tasks and stop the workers (SIGTERM, then SIGKILL after a grace period)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())   # gone after shutdown
    pool.shutdown(wait=False, cancel_futures=True)
    _stop_processes(processes)


def _stop_processes(processes) -> None:
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    # Sentinels are ready once a process has exited, whoever reaps it (the pool's own thread may).
    waiting = {p.sentinel: p for p in processes if p.exitcode is None}
    deadline = time.monotonic() + _STOP_GRACE_S
    while waiting and time.monotonic() < deadline:
        for ready in multiprocessing.connection.wait(list(waiting), deadline - time.monotonic()):
            waiting.pop(ready)
    for p in waiting.values():
        with contextlib.suppress(Exception):
            p.kill()
            p.join(1)


def _ending(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


def _run_isolated(task: GridTask, context) -> list[tuple]:
    """The task's outputs from single-use processes, one replay at a time, finding a replay that ends its process."""
    replays = _replays(task)
    outputs: list[list] = []
    start, fail = 0, None
    while start < len(replays):
        got, death = _probe(task, start, fail, context)
        outputs.extend(got)
        if death is None:
            break
        index, calls, status = death
        if calls and (fail is None or fail[0] != index):
            start, fail = index, (index, calls, status)   # again, the strategy "raising" from that call on
            continue
        outputs.append(_ended_replay(task, replays[index], status, counted=_may_end_process(replays[index].spec)))
        start, fail = index + 1, None
    return [out for replay_outputs in outputs for out in replay_outputs]


def _may_end_process(spec) -> bool:
    return spec is not None and (loads_code(spec) or not isinstance(spec, str))


def _probe(task: GridTask, start: int, fail, context) -> tuple[list[list], tuple | None]:
    """Replays ``start``... of ``task`` in a fresh process: their outputs, and (replay, calls, status) if it died."""
    progress = context.RawArray("q", 3)   # the replay running, its strategy's calls, and 1 while inside one
    got, status = _in_child(_probe_main, task, start, fail, progress, context=context)
    if status == 0 and start + len(got) == len(_replays(task)):
        return got, None
    calls = int(progress[1]) if progress[2] else 0   # 0: it died outside evict (a hook, its factory)
    return got, (int(progress[0]), calls, status)


def _in_child(target, *args, context=None) -> tuple[list, int | None]:
    """Run ``target(*args, send)`` in a single-use process: what it sent down ``send``, and its exit status.

    An exception it sends is raised here once it has ended; an interrupt (or any failure) here stops it."""
    context = context or _context()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(*args, send))
    process.start()
    send.close()
    got, error = [], None
    try:
        while True:
            try:
                message = receive.recv()
            except EOFError:
                break
            if isinstance(message, BaseException):
                error = message
            else:
                got.append(message)
        process.join()
    except BaseException:
        _stop_processes([process])
        raise
    finally:
        receive.close()
    if error is not None:
        raise error
    return got, process.exitcode


def _send_failure(send, exc: BaseException) -> None:
    """Pass ``exc`` to the parent as it is, or as a `RuntimeError` naming it when it cannot be pickled."""
    try:
        send.send(exc)
    except Exception:
        send.send(RuntimeError(f"{type(exc).__name__}: {exc}"))


def _probe_main(task: GridTask, start: int, fail, progress, send) -> None:
    interrupts.in_worker(stop_external_strategies)
    replays = _replays(task)
    try:
        for index in range(start, len(replays)):
            progress[0], progress[1], progress[2] = index, 0, 0
            replay = replays[index]
            arm_strategy = None
            if _may_end_process(replay.spec):
                fail_at, why = (fail[1], _ending(fail[2])) if fail is not None and fail[0] == index else (None, "")
                arm_strategy = functools.partial(_counted_strategy, replay.spec, progress, fail_at, why)
            send.send(_run_replay(task, replay, arm_strategy))
    except BaseException as exc:   # a strict violation, or a failure to pass on as it is
        _send_failure(send, exc)
    finally:
        send.close()


def _counted_strategy(spec, progress, fail_at: int | None, why: str, arm: str):
    """A fresh strategy of ``spec``, its evict calls counted in ``progress``; from call ``fail_at`` on it raises."""
    strategy = make(spec) if isinstance(spec, str) else copy.deepcopy(spec)
    evict = strategy.evict

    def counted(state, budget):
        progress[1] += 1
        if fail_at is not None and progress[1] >= fail_at:
            raise ProcessEnded(f"the strategy ended its worker process ({why}) during this call")
        progress[2] = 1
        answer = evict(state, budget)
        progress[2] = 0
        return answer

    try:
        strategy.evict = counted   # the same object, so hooks, purity and `with` are unchanged
        return strategy
    except (AttributeError, TypeError):   # no instance attributes (__slots__)
        return (_CountedStateful if isinstance(strategy, StatefulContextStrategy) else _Counted)(strategy, counted)


class _Counted:
    """A strategy that cannot take an attribute, with its evict counted."""

    def __init__(self, inner, evict) -> None:
        self._inner, self.evict = inner, evict

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


class _CountedStateful(StatefulContextStrategy):
    """A stateful strategy that cannot take an attribute, with its evict counted and its hooks passed on."""

    def __init__(self, inner, evict) -> None:
        self._inner, self._evict = inner, evict

    def reset(self) -> None:
        self._inner.reset()

    def on_insert(self, entry) -> None:
        self._inner.on_insert(entry)

    def on_access(self, entry) -> None:
        self._inner.on_access(entry)

    def on_remove(self, entry_id: str, evicted: bool) -> None:
        self._inner.on_remove(entry_id, evicted)

    def evict(self, state, budget):
        return self._evict(state, budget)


class _Ended:
    """The answer of a strategy that ended its process before any call could be pinned down: always raising."""

    def __init__(self, message: str) -> None:
        self.message = message

    def evict(self, state, budget):
        raise ProcessEnded(self.message)


def _ended_replay(task: GridTask, replay: _Replay, status: int | None, counted: bool) -> list[tuple]:
    """A replay whose process died outside any counted evict call: a violation (strict), or counted at every turn."""
    label = "opt:bracket" if replay.spec is None else strategy_label(replay.spec)
    what = (f"the strategy ended its worker process ({_ending(status)}) outside evict" if counted
            else f"the worker process died ({_ending(status)}) during this replay")
    if task.strict or replay.spec is None:
        raise ContractViolation(f"strategy {label!r}, session {task.session.session!r}: {what}")
    return _run_replay(task, replay, lambda arm: _Ended(what))


# ----- strategy code in a process of its own, outside a grid ----------------------------------------
#
# The same rule for the commands that call a strategy outside a grid (check, regress's latency, fidelity):
# code ctxbench does not ship runs in a process of its own. `run_isolated` runs a piece of work there
# once and pins a process that ends on the evict call, as `_run_isolated` does for a task; `StrategyProcess`
# keeps one strategy there to answer many calls, and starts a fresh one after it ends.

class StrategyEnded(ContractViolation):
    """The process running a strategy ended: ``status`` (``exit status 0``, ``killed by SIGKILL``) and
    ``where`` (``during evict``, ``outside evict``; empty when not known); ``what`` says so in words."""

    def __init__(self, status: str, where: str = "", strategy: str = "") -> None:
        self.status, self.where, self.strategy = status, where, strategy
        self.what = f"the process running the strategy ended ({status})" + (f" {where}" if where else "")
        super().__init__(f"strategy {strategy!r}: {self.what}" if strategy else self.what)

    def __reduce__(self):
        return type(self), (self.status, self.where, self.strategy)


def run_isolated(spec: str, work: Callable, *args, pin: bool = True):
    """``work(strategy_for_arm, *args)`` in a single-use process, where ``strategy_for_arm(arm)`` builds a
    fresh ``spec``: its result, or what it raised.

    With ``pin``, evict calls are counted; a process that ends during one runs ``work`` again with the
    strategy raising `ProcessEnded` from that call on, so that a replay reports it as any call that raises
    (strategy, session, turn). A process that ends otherwise raises `StrategyEnded` naming the strategy.
    """
    context = _context()
    progress = context.RawArray("q", 3)   # as `_probe`'s: [1] the strategy's calls, [2] 1 while inside one
    fail = None
    while True:
        progress[1] = progress[2] = 0
        got, status = _in_child(_isolated_main, spec, work, args, progress, fail, pin, context=context)
        if got:
            return got[0]
        inside = bool(progress[2])
        if pin and inside and fail is None:
            fail = (int(progress[1]), _ending(status))
            continue
        where = "during evict" if inside else "outside evict" if pin else ""
        raise StrategyEnded(_ending(status), where, strategy_label(spec))


def _isolated_main(spec: str, work: Callable, args: tuple, progress, fail, pin: bool, send) -> None:
    interrupts.in_worker(stop_external_strategies)
    try:
        fail_at, why = fail if fail is not None else (None, "")
        build = functools.partial(_counted_strategy, spec, progress, fail_at, why) if pin \
            else functools.partial(_built, spec)
        send.send(work(build, *args))
    except BaseException as exc:   # a strict violation, or a failure to pass on as it is
        _send_failure(send, exc)
    finally:
        send.close()


def _built(spec: str, arm: str):
    return make(spec)


class StrategyProcess:
    """A strategy that loads code, built and called in a process of its own; a fresh one after that process ends.

    ``call(name, *args)`` returns ``getattr(subject, name)(*args)`` computed there, where ``subject`` is
    ``build(strategy, method)`` and ``method`` a shared ``ctypes`` char array in which the subject keeps the
    name of the strategy's method it is running (``method.value = b"evict"``). When the process ends
    instead, `StrategyEnded` names how and during which method, and the next call starts a new process
    (a new strategy); so does one after the subject (or building the strategy) raised, which is raised
    here. The subject's answers must not be exceptions. Use it in a ``with`` block, or `close` it.
    """

    def __init__(self, spec: str, build: Callable) -> None:
        self.spec, self.build = spec, build
        self._context = _context()
        self._method = self._context.RawArray("c", 64)
        self._process = self._conn = None

    def call(self, name: str, *args):
        """``getattr(subject, name)(*args)``, computed in the strategy's process."""
        if self._process is None:
            self._start()
        self._method.value = b""
        try:
            self._conn.send((name, args))
        except OSError:   # it ended between calls
            pass
        return self._receive()

    def _start(self) -> None:
        self._conn, theirs = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(self.spec, self.build, self._method, theirs))
        self._process.start()
        theirs.close()
        # Stopped even if never closed: a process left waiting for calls would block the interpreter's exit.
        self._stop = weakref.finalize(self, _stop_server, self._conn, self._process)
        self._method.value = b"the build"
        self._receive()   # ready

    def _receive(self):
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            process, method = self._process, self._method.value.decode()
            process.join(_STOP_GRACE_S)
            self.close()   # stopped, should it still run without its end of the pipe
            raise StrategyEnded(_ending(process.exitcode), f"during {method}" if method else "") from None
        except BaseException:
            self.close()
            raise
        if isinstance(message, BaseException):
            self.close()
            raise message
        return message

    def close(self) -> None:
        """Stop the strategy's process (SIGTERM, then SIGKILL after a grace period)."""
        if self._process is not None:
            self._stop()
            self._process = self._conn = None

    def __enter__(self) -> "StrategyProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stop_server(conn, process) -> None:
    conn.close()
    _stop_processes([process])


def _serve(spec: str, build: Callable, method, conn) -> None:
    interrupts.in_worker(stop_external_strategies)
    try:
        subject = build(make(spec), method)
        conn.send(None)
        while True:
            try:
                name, args = conn.recv()
            except EOFError:
                return
            conn.send(getattr(subject, name)(*args))
    except BaseException as exc:   # building it failed, or the subject did: passed on as it is
        _send_failure(conn, exc)
    finally:
        conn.close()


def _execute_dask(tasks: list[GridTask], scheduler: str, on_done: Callable[[int], None]):
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask: pip install 'ctxbench[dask]'") from None
    try:
        client = Client(scheduler, timeout="10s")
    except Exception as exc:
        raise InputError(f"cannot reach Dask scheduler {scheduler!r}: {exc}") from None
    futures = []
    try:
        futures = client.map(run_task, tasks, pure=False)
        for future in futures:
            out = future.result()
            on_done(len(out))
            yield out
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(futures)   # an interrupt or a strict violation: nothing more to compute
        raise
    finally:
        client.close()


def run_grid(traces, strategies: Sequence = ("lru",), budgets_tokens: Iterable[float] = (200_000,), *,
             bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN, strict: bool = True, workers: int | None = None,
             scheduler: str | None = None, progress: bool | None = None, keep_turns: bool = True,
             claims: Sequence[ClaimConfig] | None = None, bracket: bool = False,
             max_files: int | None = None, max_directories: int | None = None,
             evict_timeout_ms: int | None = None) -> GridResult:
    """Replay every session of ``traces`` under every strategy and budget.

    ``strategies`` are specs (``"lru?max_entries=50"``) or strategy objects; ``workers`` local
    processes (default: all cores; never more than the cores or the sessions) or a Dask
    ``scheduler`` address run the sessions. The deterministic columns are identical however the
    grid ran. Strategies that load code (import paths, entry points) run in worker processes
    even with ``workers=1``: one that ends its process (``os._exit``, a crash) is a contract
    violation naming strategy, session and turn, like one that raises. ``strict=False`` counts contract
    violations instead of stopping at the first. ``bracket=True`` adds, per (session, budget),
    the optimal bracket's rows ``opt:lower`` and ``opt:belady-size`` (see `sim.analysis.bracket`).
    ``claims`` replays multi-arm sessions once per claim configuration (single-arm ones once).
    Budgets in multi-agent terms: the token budget is ``max_tokens``, ``max_files`` becomes the
    budget's ``max_entries``, and ``max_directories`` is enforced by each manager (the bracket
    does not model it). ``evict_timeout_ms`` limits each call into an in-process strategy
    (`sim.engine.manager`); it needs each task to run in a process's main thread, so not on Dask.
    """
    sessions = as_sessions(traces)
    if not sessions:
        raise InputError("no sessions to replay: the traces are empty")
    budgets = tuple(float(b) if not float(b).is_integer() else int(b) for b in budgets_tokens)
    if not budgets:
        raise InputError("no budget to run")
    for b in budgets:
        budget_for_tokens(b, bytes_per_token)
    specs = _check_strategies(list(strategies))
    modes = tuple(claims) if claims else (None,)
    for name, value in (("max_files", max_files), ("max_directories", max_directories),
                        ("evict_timeout_ms", evict_timeout_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if evict_timeout_ms is not None and scheduler:
        raise InputError("--evict-timeout-ms cannot be used with --scheduler: Dask workers run tasks in threads")
    tasks = [GridTask(i, s, specs, budgets, bytes_per_token, strict, keep_turns, modes, bracket,
                      max_files, max_directories, evict_timeout_ms)
             for i, s in enumerate(sessions)]
    per_session = len(specs) + (2 if bracket else 0)
    total = sum(per_session * len(budgets) * (len(modes) if t.session.arms is not None else 1) for t in tasks)
    rows: list[dict] = []
    turn_parts: list[tuple[dict, dict]] = []
    violations: list[str] = []
    arm_rows: list[dict] = []
    thrashing: list[dict] = []
    with _Progress(total, _progress_enabled(progress)) as bar:
        for out in _execute(tasks, resolve_workers(workers, len(tasks)), scheduler, bar.advance):
            for row, turns, messages, arms, thrash in out:
                rows.append(row)
                violations.extend(messages)
                arm_rows.extend(arms)
                thrashing.extend(thrash)
                if turns is not None:
                    turn_parts.append((row, turns))
    results = pd.DataFrame(rows)
    lead = ["trace", "session", "strategy", "pure", "budget_tokens", "budget_bytes"]
    results = results[lead + [c for c in results.columns if c not in lead and c != "task"]]
    turns_df = _turn_frame(turn_parts)
    return GridResult(results=results, turns=turns_df, violations=violations, arms=pd.DataFrame(arm_rows),
                      thrashing=pd.DataFrame(thrashing))


def _turn_frame(parts: list[tuple[dict, dict]]) -> pd.DataFrame:
    """Every kept per-turn log in one frame, keyed by trace, session, strategy and budget.

    Built once from the concatenated columns: a frame per replay would make the parent's
    serial work grow with the grid and cap the speed-up of parallel workers.
    """
    if not parts:
        return pd.DataFrame()
    lengths = [len(turns["turn"]) for _, turns in parts]

    def key(name: str, dtype=object) -> np.ndarray:
        return np.repeat(np.array([row.get(name) for row, _ in parts], dtype=dtype), lengths)

    data = {"trace": key("trace"), "session": key("session"), "strategy": key("strategy"),
            "budget_tokens": key("budget_tokens", None)}
    for name in parts[0][1]:
        data[name] = np.concatenate([turns[name] for _, turns in parts])
    if any("claims" in row for row, _ in parts):
        data["claims"] = key("claims")
    return pd.DataFrame(data)


class _Progress:
    """A rich progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self._progress = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._progress = Progress("replaying", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task("grid", total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
