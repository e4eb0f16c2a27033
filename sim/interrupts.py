"""Signals: SIGTERM stops a command as Ctrl-C does; critical sections hold both (workers leave them to the
parent: `strategies.isolation.in_worker`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from ctxbench.strategies.calls import interrupt_handler

__all__ = ["SIGNALS", "handled", "held"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM are noted and raise `sim.errors.Interrupted`
    (`strategies.calls.interrupt_handler`); a signal that is ignored stays ignored."""
    saved = {}
    if _main_thread():
        for sig in SIGNALS:
            current = signal.getsignal(sig)
            if current in (signal.SIG_DFL, signal.default_int_handler):
                saved[sig] = current
                signal.signal(sig, interrupt_handler)
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (then deliver the first), so that neither splits it."""
    if not _main_thread():
        yield
        return
    pending: list[int] = []
    saved = {}
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current not in (signal.SIG_IGN, None):
            saved[sig] = current
            signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)
        if pending:
            signal.raise_signal(pending[0])
