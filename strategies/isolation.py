"""Strategy code in a process of its own: built, called and watched there, so that one ending its process
(``os._exit``, a crash, the OOM killer) is reported, never taken for success.

The rule of every command: code ctxbench does not ship (`loads_code`: an import path, an entry point)
runs in a process of its own; built-in and ``cmd:`` strategies run in the caller's. `in_child` runs a
function once in a single-use process; `run_isolated` runs a piece of work there and pins a process that
ends on the evict call it ended in; `StrategyProcess` keeps one strategy there to answer many calls.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import select
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable

from ctxbench.strategies.errors import ContractViolation, StrategyLoadError
from ctxbench.strategies.external import stop_all as stop_external_strategies
from ctxbench.strategies.adapter import POLICY, STRATEGY, Adapter, adapt, names_of
from ctxbench.strategies.registry import builtin_names, make, parse_spec, split_combination
from ctxbench.strategies.supervisor import become_subreaper, kill_tree

__all__ = ["STOP_GRACE_S", "WATCH_S", "receive", "ProcessEnded", "StrategyEnded", "loads_code", "check_loads", "load_isolated",
           "process_context", "in_worker", "in_child", "send_failure", "stop_processes", "ending", "ended", "counted_strategy",
           "run_isolated", "run_user_code", "StrategyProcess", "built_kind"]

STOP_GRACE_S = 3.0
WATCH_S = 0.25   # how often a process waited on is checked for having ended


def _label(spec) -> str:
    return spec if isinstance(spec, str) else repr(spec)


def in_worker(on_terminate: Callable[[], None]) -> None:
    """Set up a worker process: Ctrl-C is its parent's to handle; SIGTERM (sent to itself when its parent dies)
    calls ``on_terminate``, then ends it; what user code prints to stdout goes to stderr (stdout is the parent's,
    and may be JSON for a machine). Every process the worker's code starts ends with it, whether it ends, is
    stopped or its parent dies: the worker is a child subreaper (Linux), so that what a ``setsid`` or a
    double fork orphans is re-parented to it, and it kills every process below it on the way out (what it
    leaves when it is killed outright is re-parented to the ``ctxbench`` command, which kills it at its end)."""
    become_subreaper()
    multiprocessing.util.Finalize(None, _kill_tree, exitpriority=-100)   # run by multiprocessing as the process exits
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def terminate(signum: int, frame) -> None:
        try:
            on_terminate()
        finally:
            _kill_tree()
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    _watch_parent()


def _kill_tree() -> None:
    kill_tree(reap=False)   # the worker's own children are waited for by whoever started them


def _watch_parent(period_s: float = 0.2) -> None:
    """Send this process SIGTERM once its parent is gone (killed outright: SIGKILL), so that a worker busy in a
    replay ends with what it started instead of running on alone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ctxbench-parent-watch", daemon=True).start()


def load_isolated(specs: list) -> list[str]:
    """Build each strategy of ``specs`` in a single-use process: the kind of each (`strategies.adapter.ADAPTER_KINDS`);
    a failure (or the process ending) is a load error."""
    if not specs:
        return []
    loaded, status = in_child(_load_main, specs)
    if len(loaded) < len(specs):
        raise StrategyLoadError(f"cannot build strategy {_label(specs[len(loaded)])!r}: loading it ended the "
                                f"process ({ending(status)})")
    return loaded


def check_loads(spec) -> None:
    """Build ``spec`` once, to see that it loads: in this process for a built-in, `cmd:` spec or object, in a
    single-use process for code ctxbench does not ship (`loads_code`), so that one ending its process is a load error."""
    if loads_code(spec):
        load_isolated([spec])
    else:
        make(spec)



def built_kind(spec) -> str:
    """``"policy"`` or ``"strategy"``: what ``spec`` builds, built in a single-use process for code ctxbench does
    not ship (`loads_code`), in this one otherwise; a spec that cannot be built raises `StrategyLoadError`."""
    kind = load_isolated([spec])[0] if loads_code(spec) else adapt(spec).kind
    return names_of(kind)[0]


def _load_main(specs: list, send) -> None:
    in_worker(stop_external_strategies)
    try:
        for spec in specs:
            send.send(adapt(spec).kind)
    except BaseException as exc:
        try:
            send.send(exc)
        except Exception:
            send.send(StrategyLoadError(f"cannot build strategy {_label(spec)!r}: {type(exc).__name__}: {exc}"))
    finally:
        send.close()


def loads_code(spec) -> bool:
    """Whether ``spec`` names Python code that ctxbench does not ship (an import path, an entry point, a plugin),
    itself or as a part of a ``STRATEGY+POLICY`` combination."""
    if not isinstance(spec, str):
        return False   # an object the caller built and handed over: the caller's process is its own
    combined = split_combination(spec)
    if combined is not None:
        return any(loads_code(part) for part in combined)
    scheme, sep, _ = spec.strip().partition(":")
    if sep and scheme == "cmd":
        return False   # an external process: its exit is reported by `strategies.external`
    return parse_spec(spec)[0] not in builtin_names(kind=None)



def process_context():
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")



class ProcessEnded(Exception):
    """Stands in for a strategy's answers from the call during which it ended its worker process."""



def receive(conn, process):
    """The next message ``process`` sends down ``conn``; `EOFError` once it has ended without sending one,
    seen by its exit status too: a process it forked may hold its end of the pipe (and its sentinel) open."""
    poller = select.poll()   # lighter than conn.poll, which builds a selector for each wait
    poller.register(conn.fileno(), select.POLLIN)
    while not poller.poll(WATCH_S * 1000):
        if process.exitcode is not None and not conn.poll(0):
            raise EOFError(f"process {process.pid} ended")
    return conn.recv()


def stop_processes(processes) -> None:
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    # Sentinels are ready once a process has exited, whoever reaps it (the pool's own thread may).
    waiting = {p.sentinel: p for p in processes if p.exitcode is None}
    deadline = time.monotonic() + STOP_GRACE_S
    # A process it forked may hold a sentinel open: its exit status tells it ended too.
    while waiting and time.monotonic() < deadline:
        ready = multiprocessing.connection.wait(list(waiting), min(WATCH_S, deadline - time.monotonic()))
        for sentinel in ready or [s for s, p in waiting.items() if p.exitcode is not None]:
            with contextlib.suppress(Exception):
                waiting.pop(sentinel).join(1)   # reaped: no zombie left behind
    for p in waiting.values():
        with contextlib.suppress(Exception):
            p.kill()
            p.join(1)



def ending(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"



_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_fork_hold: list[dict] = []   # while `forking` runs: the handlers it set aside, and the signals noted meanwhile


def _noting(noted: list[int]) -> Callable[[int, object], None]:
    return lambda signum, frame: noted.append(signum)


def _release_in_child() -> None:
    """A child forked within `forking`: its stop signals unblocked (one noted meanwhile ends it), its handlers back."""
    if not _fork_hold:
        return
    hold = _fork_hold.pop()
    hold["noted"].clear()   # the parent's to act on: it stops this child too
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)   # one pending here reaches the noting handler
    for sig, handler in hold["saved"].items():
        signal.signal(sig, handler)
    if hold["noted"]:
        # Raised here it would be printed and lost (this runs in the at-fork callbacks): it ends the child instead.
        signum = hold["noted"][0]
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_release_in_child)


@contextlib.contextmanager
def forking():
    """SIGINT and SIGTERM held while the block starts processes, and delivered when it ends: never inside the
    interpreter's at-fork callbacks, where a handler's exception would be printed and lost, and the command would
    go on as if no signal had come. A child forked meanwhile gets its handlers back at once (a stop signal that
    reached it while starting ends it).

    Both are blocked at the operating system's level and, since another thread (Arrow's readers, the progress
    bar's, an executor's) may take a signal blocked here and have its handler run in this thread, their Python
    handlers are set aside for ones that only note them."""
    if (not hasattr(signal, "pthread_sigmask") or _fork_hold
            or threading.current_thread() is not threading.main_thread()):
        yield
        return
    noted: list[int] = []
    saved = {}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        for sig in _STOP_SIGNALS:
            if callable(signal.getsignal(sig)):
                saved[sig] = signal.signal(sig, _noting(noted))
        _fork_hold.append({"saved": saved, "noted": noted})
        yield
    finally:
        _fork_hold.clear()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)   # one still pending reaches its own handler now
        if noted:
            signal.raise_signal(noted[0])


def in_child(target, *args, context=None) -> tuple[list, int | None]:
    """Run ``target(*args, send)`` in a single-use process: what it sent down ``send``, and its exit status.

    An exception it sends is raised here once it has ended; an interrupt (or any failure) here stops it."""
    context = context or process_context()
    messages, send = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(*args, send))
    got, error = [], None
    try:
        with forking():
            process.start()
            send.close()
        while True:
            try:
                message = receive(messages, process)
            except (EOFError, OSError):   # it ended, perhaps in the middle of a message
                break
            if isinstance(message, BaseException):
                error = message
            else:
                got.append(message)
        process.join()
    except BaseException:
        stop_processes([process])
        raise
    finally:
        messages.close()
    if error is not None:
        raise error
    return got, process.exitcode


def send_failure(send, exc: BaseException, wrap: Callable[[BaseException], object] = lambda error: error) -> None:
    """Pass ``wrap(exc)`` to the parent, ``exc`` as it is or, when it cannot be pickled, a `RuntimeError` naming it."""
    try:
        send.send(wrap(exc))
    except Exception:
        send.send(wrap(RuntimeError(f"{type(exc).__name__}: {exc}")))



def counted_strategy(spec, progress, fail_at: int | None, why: str, arm: str) -> Adapter:
    """A fresh strategy (or policy) of ``spec``, its evict (a policy's edit; a combination's strategy's evict, the
    compaction being the engine's) calls counted in ``progress``; from call ``fail_at`` on it raises."""
    adapter = adapt(spec if isinstance(spec, str) else copy.deepcopy(spec))
    noun = adapter.noun

    def counted(call, *args):
        progress[1] += 1
        if fail_at is not None and progress[1] >= fail_at:
            raise ProcessEnded(f"the {noun} ended its worker process ({why}) during this call")
        progress[2] = 1
        answer = call(*args)
        progress[2] = 0
        return answer

    return adapter.through(counted)


class _Raising:
    """Answers every call by raising `ProcessEnded`."""

    def __init__(self, message: str) -> None:
        self.message = message

    def evict(self, state, budget):
        raise ProcessEnded(self.message)

    def edit(self, items, window):
        raise ProcessEnded(self.message)


def ended(message: str, noun: str = "strategy") -> Adapter:
    """The adapter of a strategy (``noun``: or a policy) that ended its process before any call could be pinned
    down: every call raises `ProcessEnded`."""
    return Adapter(_Raising(message), POLICY if noun == "policy" else STRATEGY, "ended")


# ----- strategy code in a process of its own, outside a grid ----------------------------------------
#
# The same rule for the commands that call a strategy outside a grid (check, regress's latency, fidelity):
# code ctxbench does not ship runs in a process of its own. `run_isolated` runs a piece of work there
# once and pins a process that ends on the evict call, as `_run_isolated` does for a task; `StrategyProcess`
# keeps one strategy there to answer many calls, and starts a fresh one after it ends.

class StrategyEnded(ContractViolation):
    """The process running a strategy (a policy: ``noun``) ended: ``status`` (``exit status 0``, ``killed by
    SIGKILL``) and ``where`` (``during evict``, ``outside edit``; empty when not known); ``what`` says so in words."""

    def __init__(self, status: str, where: str = "", strategy: str = "", noun: str = "strategy") -> None:
        self.status, self.where, self.strategy, self.noun = status, where, strategy, noun
        self.what = f"the process running the {noun} ended ({status})" + (f" {where}" if where else "")
        super().__init__(f"{noun} {strategy!r}: {self.what}" if strategy else self.what)

    def __reduce__(self):
        return type(self), (self.status, self.where, self.strategy, self.noun)


def run_user_code(spec, work: Callable, *args, noun: str = "strategy", loaded: bool = False):
    """``work(strategy_for_arm, *args)`` by the rule of every command: for code ctxbench does not ship
    (`loads_code`), in a single-use process (`run_isolated`), after building ``spec`` once there to see
    that it loads (`check_loads`; not when the caller did: ``loaded``); for anything else, here, with
    ``strategy_for_arm`` None (the work builds ``spec`` itself). ``noun`` (strategy, policy) names it."""
    if not (isinstance(spec, str) and loads_code(spec)):
        return work(None, *args)
    if not loaded:
        check_loads(spec)
    return run_isolated(spec, work, *args, noun=noun)


def run_isolated(spec: str, work: Callable, *args, pin: bool = True, noun: str = "strategy"):
    """``work(strategy_for_arm, *args)`` in a single-use process, where ``strategy_for_arm(arm)`` builds a
    fresh ``spec``: its result, or what it raised.

    With ``pin``, evict calls (a policy's edit calls) are counted; a process that ends during one runs ``work``
    again with the strategy raising `ProcessEnded` from that call on, so that a replay reports it as any call
    that raises (strategy, session, turn). A process that ends otherwise raises `StrategyEnded` naming the
    strategy (or, ``noun``, the policy).
    """
    context = process_context()
    progress = context.RawArray("q", 3)   # as `_probe`'s: [1] the strategy's calls, [2] 1 while inside one
    fail = None
    while True:
        progress[1] = progress[2] = 0
        got, status = in_child(_isolated_main, spec, work, args, progress, fail, pin, context=context)
        if got:
            return got[0]
        inside = bool(progress[2])
        if pin and inside and fail is None:
            fail = (int(progress[1]), ending(status))
            continue
        method = "edit" if noun == "policy" else "evict"
        where = f"during {method}" if inside else f"outside {method}" if pin else ""
        raise StrategyEnded(ending(status), where, _label(spec), noun)


def _isolated_main(spec: str, work: Callable, args: tuple, progress, fail, pin: bool, send) -> None:
    in_worker(stop_external_strategies)
    try:
        fail_at, why = fail if fail is not None else (None, "")
        build = functools.partial(counted_strategy, spec, progress, fail_at, why) if pin \
            else functools.partial(_built, spec)
        send.send(work(build, *args))
    except BaseException as exc:   # a strict violation, or a failure to pass on as it is
        send_failure(send, exc)
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

    def __init__(self, spec: str, build: Callable, noun: str = "strategy") -> None:
        self.spec, self.build, self.noun = spec, build, noun
        self._context = process_context()
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
        with forking():
            self._process.start()
            theirs.close()
            # Stopped even if never closed: a process left waiting for calls would block the interpreter's exit.
            self._stop = weakref.finalize(self, _stop_server, self._conn, self._process)
        self._method.value = b"the build"
        self._receive()   # ready

    def _receive(self):
        try:
            message = receive(self._conn, self._process)
        except (EOFError, OSError):
            process, method = self._process, self._method.value.decode()
            process.join(STOP_GRACE_S)
            self.close()   # stopped, should it still run without its end of the pipe
            raise StrategyEnded(ending(process.exitcode), f"during {method}" if method else "",
                                noun=self.noun) from None
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
    stop_processes([process])


def _serve(spec: str, build: Callable, method, conn) -> None:
    in_worker(stop_external_strategies)
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
        send_failure(conn, exc)
    finally:
        conn.close()


