"""Worker processes of a grid (`sim.pool.pooled`): results, a task that raises, a worker that dies (even in the
middle of writing its result), leaving early; never a worker left running or a read that waits for ever."""

import gc
import multiprocessing
import os
import signal
import struct
import sys
import threading
import time
from multiprocessing.connection import Connection

import pytest

from processes import running, wait_until
from ctxbench.sim.pool import Died, InOrder, pooled
from ctxbench.strategies.isolation import in_child, process_context

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks worker processes")


def square(x):
    return x * x


def pid_or_fails_on_three(x):
    if x == 3:
        raise ValueError("three")
    return os.getpid()


def _own_connection() -> Connection:
    (conn,) = [o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed]
    return conn


def dies_writing_on_two(x):
    """On 2: the header of a 1 MB message and 10 bytes of it on the worker's own pipe, then SIGKILL."""
    if x == 2:
        os.write(_own_connection().fileno(), struct.pack("!i", 1_000_000) + b"x" * 10)
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def exits_on_one(x):
    if x == 1:
        os._exit(7)
    return -x


def pid_of_worker(x):
    return os.getpid()


def test_every_result_once_by_index():
    got = dict(pooled(square, InOrder([0, 1, 2, 3, 4, 5], [5, 3, 1, 0, 2, 4]), 2, process_context()))
    assert got == {i: i * i for i in range(6)}


def test_a_task_that_raises_is_raised_here_and_the_workers_stop():
    pids = set()
    with pytest.raises(ValueError, match="three"):
        for _, pid in pooled(pid_or_fails_on_three, InOrder(list(range(8)), range(8)), 2, process_context()):
            pids.add(pid)
    assert pids and not any(running(pid) for pid in pids)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_that_ends_reports_its_task_and_the_others_go_on(workers):
    got = dict(pooled(exits_on_one, InOrder([0, 1, 2, 3], range(4)), workers, process_context()))
    assert got == {0: 0, 1: Died(7), 2: -2, 3: -3}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_killed_in_the_middle_of_its_result_is_died_not_a_read_for_ever(workers):
    got = dict(pooled(dies_writing_on_two, InOrder([0, 1, 2, 3], range(4)), workers, process_context()))
    assert got == {0: 0, 1: 1, 2: Died(-signal.SIGKILL), 3: 3}


def test_a_single_use_process_killed_in_the_middle_of_a_message_is_its_end():
    def target(send):
        os.write(send.fileno(), struct.pack("!i", 1_000_000) + b"x" * 10)
        os.kill(os.getpid(), signal.SIGKILL)

    assert in_child(target) == ([], -signal.SIGKILL)


def test_leaving_early_stops_every_worker():
    results = pooled(pid_of_worker, InOrder(list(range(20)), range(20)), 2, process_context())
    _, pid = next(results)
    results.close()
    assert wait_until(lambda: not running(pid), 10)


def fails_at_once_unless_first(x):
    """The first task raises late; every other one raises at once."""
    if x == 0:
        import time
        time.sleep(0.5)
    raise ValueError(f"task {x}")


def test_of_several_failures_the_first_in_order_is_raised_however_they_were_timed():
    with pytest.raises(ValueError, match="task 0"):
        for _ in pooled(fails_at_once_unless_first, InOrder([0, 1, 2, 3], range(4)), 2, process_context()):
            pass


_signal_at_fork = []   # armed by the test below: the next fork in this process sends it SIGTERM once


def _send_sigterm_during_fork() -> None:
    if _signal_at_fork:
        _signal_at_fork.clear()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)   # another thread that takes the signal has its handler run here, in this thread


os.register_at_fork(after_in_parent=_send_sigterm_during_fork)


@pytest.mark.parametrize("another_thread", [False, True], ids=["alone", "beside-a-thread"])
@pytest.mark.parametrize("start", ["pool", "in_child"])
def test_a_signal_that_arrives_while_a_worker_is_forked_interrupts_after_the_fork(start, another_thread):
    """Its handler would otherwise run inside the interpreter's at-fork callbacks, where the exception it raises is
    printed as ignored and lost, and the command goes on as if no signal had come. Another thread (Arrow's readers,
    the progress bar's) does not block the signal, and may take it while this one does."""
    from ctxbench.strategies.calls import SignalInterrupt, recording_interrupts

    stop = threading.Event()
    beside = threading.Thread(target=stop.wait)
    if another_thread:
        beside.start()
    try:
        with recording_interrupts(signals=(signal.SIGTERM,)):
            _signal_at_fork.append(True)
            with pytest.raises(SignalInterrupt):
                if start == "pool":
                    list(pooled(square, InOrder([1, 2, 3], range(3)), 2, process_context()))
                else:
                    in_child(_send_squares, 3)
    finally:
        stop.set()
        if another_thread:
            beside.join()
    assert not _signal_at_fork
    assert wait_until(lambda: not multiprocessing.active_children(), 10), "a worker outlived the interrupt"


def _send_squares(n, send):
    for x in range(n):
        send.send(x * x)
    send.close()


def _release_with(pending: bool) -> None:
    from ctxbench.strategies import isolation

    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    noted = [signal.SIGTERM]   # as the parent noted it before this child was forked
    isolation._fork_hold.append({"saved": {signal.SIGTERM: signal.SIG_DFL}, "noted": noted})
    signal.signal(signal.SIGTERM, lambda signum, frame: noted.append(signum))
    if pending:
        os.kill(os.getpid(), signal.SIGTERM)
    isolation._release_in_child()
    os._exit(0)


@pytest.mark.parametrize("pending, status", [(False, 0), (True, -signal.SIGTERM)], ids=["parents", "its-own"])
def test_a_child_forked_while_signals_are_held_ends_by_its_own_stop_signal_not_by_its_parents(pending, status):
    """The signal its parent noted before the fork is the parent's to act on; one sent to the child itself while
    it started cannot be raised in the at-fork callbacks, so it ends the child."""
    child = process_context().Process(target=_release_with, args=(pending,))
    child.start()
    child.join(10)
    assert child.exitcode == status
