"""Independent jobs that write files, run side by side in forked processes, the costliest first."""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from ctxbench.strategies.isolation import forking

__all__ = ["Job", "run_jobs"]

#: A job: its rough cost against the others' (only their order counts), and what it does.
Job = tuple[float, Callable[[], None]]

_jobs: list[Callable[[], None]] = []   # in a forked process: the jobs, by index


def run_jobs(jobs: Sequence[Job], workers: int = 1) -> None:
    """Run each job once, the costliest first: in ``workers`` forked processes when more than one (each takes
    the next job as it finishes one, so they finish close together; a job's exception is raised here),
    else here, in that order.

    The jobs are closures over the caller's data, which a forked process has as it was: nothing is
    pickled but an exception. Where the platform cannot fork, they all run here.
    """
    order = [job for _, job in sorted(jobs, key=lambda item: -item[0])]
    if workers <= 1 or len(order) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for job in order:
            job()
        return
    _jobs[:] = order
    gc.freeze()   # the forked processes share the caller's pages rather than copy them as they collect
    try:
        with ProcessPoolExecutor(min(workers, len(order)), mp_context=multiprocessing.get_context("fork")) as pool:
            with forking():   # the pool forks as jobs are submitted
                submitted = [pool.submit(_run, index) for index in range(len(order))]
            for done in submitted:
                done.result()
    finally:
        _jobs.clear()
        gc.unfreeze()


def _run(index: int) -> None:
    _jobs[index]()
