"""Worker processes fed one task at a time over pipes and watched by their sentinels, with no helper thread.

`pooled` is what a process pool is to a grid, written so that nothing can hang: the parent alone reads
and writes the pipes, from its main thread, and waits on them and on the workers' sentinels at once. A
worker that dies (``os._exit``, a crash, a signal, the OOM killer) is seen by its sentinel, or as the end
of its pipe when it died writing a result (the parent holds no copy of a worker's end, so a half-written
message ends in EOF, never in a read that waits for ever); its task is reported as `Died`, and a fresh
worker takes the next task. An interrupt (SIGINT, SIGTERM) or an exception stops every worker (SIGTERM,
then SIGKILL after a grace period) before it is passed on, and no thread is left to join at exit.
"""

from __future__ import annotations

import collections
import multiprocessing.connection
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ctxbench.sim.interrupts import held
from ctxbench.strategies.isolation import WATCH_S, forking, send_failure, stop_processes

__all__ = ["Died", "Feed", "InOrder", "pooled"]


@dataclass(frozen=True)
class Died:
    """The worker running a task ended before it sent the result: its exit status (None: not known yet)."""

    status: int | None


class _Raised:
    """What a task raised, sent back as it is (or as a `RuntimeError` naming it when it cannot be pickled)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Worker:
    def __init__(self, context, function: Callable, initializer: Callable | None, others: list) -> None:
        self.conn, theirs = context.Pipe()
        # Under fork, the worker closes every parent end it inherited (its own included): a worker must see
        # the end of its pipe when the parent is gone, and must not keep another worker's pipe open.
        inherited = [*others, self.conn] if context.get_start_method() == "fork" else []
        self.process = context.Process(target=_work, args=(theirs, inherited, function, initializer))
        self.process.start()
        theirs.close()
        self.task: int | None = None

    def give(self, index: int, item: Any) -> None:
        self.task = index
        self.conn.send((index, item))


def _work(conn, inherited: list, function: Callable, initializer: Callable | None) -> None:
    for other in inherited:
        other.close()
    if initializer is not None:
        initializer()
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):   # the parent is gone
            return
        if job is None:
            return
        index, item = job
        try:
            result = function(item)
        except BaseException as exc:   # a strict violation, or any failure: the parent's to raise
            send_failure(conn, exc, lambda error: (index, _Raised(error)))
            continue
        conn.send((index, result))


class Feed(Protocol):
    """Where `pooled` takes its tasks from, one at a time, as workers are free."""

    def take(self, running: int) -> tuple[int, Any] | None:
        """The next task to start, ``(index, item)``, with ``running`` tasks started and not finished; None
        when none is to start now (asked again after the next task finishes; with nothing running, None
        means there is no task left)."""


class InOrder:
    """A `Feed` of ``items`` in ``order`` (indices into ``items``)."""

    def __init__(self, items: Sequence, order: Sequence[int]) -> None:
        self.items, self.queue = items, collections.deque(order)

    def take(self, running: int) -> tuple[int, Any] | None:
        if not self.queue:
            return None
        index = self.queue.popleft()
        return index, self.items[index]


def pooled(function: Callable[[Any], Any], feed: Feed, workers: int, context,
           initializer: Callable[[], None] | None = None,
           meanwhile: Callable[[], None] | None = None) -> Iterator[tuple[int, Any]]:
    """``(index, function(item))`` for each task ``feed`` gives (`Feed`), as each finishes, from at most
    ``workers`` processes of ``context`` (each first runs ``initializer``); ``(index, Died(status))`` for a
    task whose worker ended before sending its result. What a task raised is raised here once the tasks
    started before it have finished (so that the same error is raised however the tasks were timed: the
    first started), no task is started after it, and every worker is stopped; an interrupt is raised at
    once. Leaving the iteration early stops the workers too. ``meanwhile`` runs once, when the first tasks
    are started (work of the caller's that the workers' replays hide)."""
    place: dict[int, int] = {}   # each started task's index -> the order it was started in
    failed: dict[int, BaseException] = {}   # what tasks raised, by index: no task is started after one
    pool: list[_Worker] = []

    def waiting_for(worker: _Worker) -> bool:
        return worker.task is not None and (not failed or place[worker.task] < min(map(place.get, failed)))

    try:
        while True:
            while not failed:
                idle = next((w for w in pool if w.task is None), None)
                if idle is None and len(pool) >= workers:
                    break
                task = feed.take(sum(w.task is not None for w in pool))
                if task is None:
                    break
                if idle is None:
                    with forking():   # a signal during the fork is delivered here, with the worker in the pool
                        idle = _Worker(context, function, initializer, [w.conn for w in pool])
                        pool.append(idle)
                place[task[0]] = len(place)
                idle.give(*task)
            if meanwhile is not None:
                meanwhile, call = None, meanwhile
                call()
            busy = [w for w in pool if waiting_for(w)]
            if not busy:
                break
            waited = {w.conn: w for w in busy} | {w.process.sentinel: w for w in busy}
            ready = multiprocessing.connection.wait(list(waited), WATCH_S)
            # A process the worker forked may hold its pipe and sentinel open: its exit status tells it ended.
            for handle in ready or [w.conn for w in busy if w.process.exitcode is not None]:
                worker = waited[handle]
                if worker.task is None:   # its result and its sentinel were both ready
                    continue
                outcome = _outcome(worker)
                index, worker.task = worker.task, None
                if isinstance(outcome, Died):
                    pool.remove(worker)
                    _retire(worker)
                elif isinstance(outcome, _Raised):
                    failed[index] = outcome.error
                    continue
                yield index, outcome
        if failed:
            raise failed[min(failed, key=place.get)]
        for worker in pool:
            _retire(worker, ask=True)
        pool = []
    finally:
        if pool:
            with held():   # a second signal waits until the workers are stopped
                stop_processes([w.process for w in pool])
                for worker in pool:
                    worker.conn.close()


def _outcome(worker: _Worker) -> Any:
    """The result (or `_Raised`) the busy ``worker`` sent, or `Died` when it ended first."""
    if worker.conn.poll():
        try:
            return worker.conn.recv()[1]
        except (EOFError, OSError):   # it died while writing
            pass
    worker.process.join(1)
    return Died(worker.process.exitcode)


def _retire(worker: _Worker, ask: bool = False) -> None:
    """Stop an idle or dead worker: asked to leave (``ask``), then stopped if it does not."""
    if ask:
        try:
            worker.conn.send(None)
        except OSError:
            pass
        worker.process.join(1)
    if worker.process.exitcode is None:
        stop_processes([worker.process])
    else:
        worker.process.join()
    worker.conn.close()
