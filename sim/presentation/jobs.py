"""Independent jobs that write files, run in forked processes side by side (or one after another)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

__all__ = ["run_jobs"]

_jobs: list[Callable[[], None]] = []   # in a forked process: the jobs, by index


def run_jobs(jobs: Sequence[Callable[[], None]], workers: int = 1) -> None:
    """Run each job once: in ``workers`` forked processes when more than one (each takes the next job as it
    finishes one; a job's exception is raised here), else here, in order.

    The jobs are closures over the caller's data, which a forked process has as it was: nothing is
    pickled but an exception. Where the platform cannot fork, they run here.
    """
    if workers <= 1 or len(jobs) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for job in jobs:
            job()
        return
    _jobs[:] = jobs
    try:
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("fork")) as pool:
            for done in [pool.submit(_run, index) for index in range(len(jobs))]:
                done.result()
    finally:
        _jobs.clear()


def _run(index: int) -> None:
    _jobs[index]()
