"""Signals: SIGTERM stops a command as Ctrl-C does; critical sections hold both (workers leave them to the
parent: `strategies.isolation.in_worker`).

This module imports nothing heavy, so that a command can handle signals from its first instant: `handled`
is entered before the command's own modules (numpy, pandas, the strategies) are imported.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["SIGNALS", "EarlyInterrupt", "handled", "held", "ignored"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class EarlyInterrupt(KeyboardInterrupt):
    """SIGINT or SIGTERM (``signum``) while `handled` was still importing the handler it installs (raised once that
    import is done): no code of a strategy has run yet, so nothing needs to tell this interrupt from one a strategy
    raised."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM are noted and raise `sim.errors.Interrupted`
    (`strategies.calls.interrupt_handler`; `EarlyInterrupt` while that is being imported); a signal that
    is ignored stays ignored."""
    saved = {}
    try:
        if _main_thread():
            early: list[int] = []
            for sig in SIGNALS:
                current = signal.getsignal(sig)
                if current in (signal.SIG_DFL, signal.default_int_handler):
                    saved[sig] = current
                    signal.signal(sig, lambda signum, frame: early.append(signum))
            # The handler's module imports numpy: a signal meanwhile is noted here and raised once the import is
            # done, never inside it (an extension's import turns the interrupt into an ImportError).
            from ctxbench.strategies.calls import forget_noted_signals, interrupt_handler, note_signal

            forget_noted_signals()
            for sig in saved:
                signal.signal(sig, interrupt_handler)
            if early:
                note_signal(early[0])
                raise EarlyInterrupt(early[0])
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


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM until the block ends: a command already stopping says so in peace."""
    if not _main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)
