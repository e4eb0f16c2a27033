"""Calls into a strategy's code: how a call that does not return is judged, and an optional time limit.

The rules, shared by the simulator (`sim.engine.turn_by_turn`, on both of its paths) and the conformance
checker (`strategies.check`):

- A call into a strategy (``evict``, a stateful hook, ``reset``) that raises an `Exception`
  *raises*; one that ends in any other `BaseException` *leaves*: ``sys.exit`` (`SystemExit`),
  a `KeyboardInterrupt` the strategy raised itself, `GeneratorExit`, or a subclass of its own.
  Both are contract violations, never a reason to stop the program: `call_failure` names them.
- A real interrupt is passed on, not judged. Ctrl-C and other signals are told apart from a
  strategy raising `KeyboardInterrupt` by a record: `recording_interrupts` installs
  `interrupt_handler`, which notes the signal (`note_signal`) and raises `SignalInterrupt`.
  Inside it (the CLI runs every command inside it, and forked workers inherit it), a
  `KeyboardInterrupt` that is not a `SignalInterrupt`, with no signal noted, is the strategy's
  doing; outside it (library use with Python's default handler) every `KeyboardInterrupt` is
  taken as real. Once a signal is noted, whatever a call ends in is passed on as
  `KeyboardInterrupt` (the strategy may have caught the real one). A handler of another signal
  (SIGTERM, say) raises a `SignalInterrupt` too, or calls `note_signal` before it raises; with
  ``recording_interrupts(signals=())`` such handlers are installed elsewhere and only the
  judging is switched on. `noted_signal` still tells which signal it was after the block ends.
- `CallLimit` bounds the wall-clock time of each call: ``signal.setitimer`` arms ``SIGALRM``,
  whose handler raises `TimeLimitExceeded` in the strategy's code; the handler is installed for
  the duration of a ``with`` block (or of each call, outside one) and the previous one restored.
  It re-fires every limit while the call runs, and a call that swallowed it still fails when it
  returns. Signals run between Python bytecodes only: compiled code (a C kernel, a long numpy
  call) is stopped when it returns to Python. Main thread only, as all Python signal handlers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ctxbench.strategies.contract import shown
from ctxbench.strategies.external import ExternalEnded, ExternalProcess, ExternalTimeout
from ctxbench.strategies.limits import MAX_TIME_LIMIT_MS, shown_option

__all__ = ["TimeLimitExceeded", "CallLimit", "call_limit_for", "LimitedSubject", "call_failure", "SignalInterrupt",
           "note_signal", "noted_signal", "interrupt_handler", "recording_interrupts", "RAISES", "LEAVES", "TIME_LIMIT"]

#: The kinds of `call_failure`.
RAISES, LEAVES, TIME_LIMIT = "raises", "leaves", "time-limit"

_noted: list[int] = []          # real signals received while `recording_interrupts` was active
_recording = [0]                # nesting depth of `recording_interrupts`


def note_signal(signum: int) -> None:
    """Record that signal ``signum`` really arrived (a handler calls this before it raises)."""
    _noted.append(signum)


def forget_noted_signals() -> None:
    """Start anew with nothing noted (a command's start: earlier commands in the same process are done)."""
    _noted.clear()


def noted_signal() -> int | None:
    """The first real signal noted in the latest `recording_interrupts` block, if any (after it too,
    so that a caller can tell which signal ended it)."""
    return _noted[0] if _noted else None


def raise_noted_signal() -> None:
    """Within `recording_interrupts`: raise `SignalInterrupt` for a signal noted and not acted on, its handler's
    exception lost on the way (a library that turned it into an ImportError of an optional module and went on).
    Noted signals always stop."""
    if _noted and _recording[0]:
        raise SignalInterrupt(_noted[0])


class SignalInterrupt(KeyboardInterrupt):
    """A `KeyboardInterrupt` raised by a signal handler (``signum``), never by a strategy's own code."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def interrupt_handler(signum: int, frame: Any) -> None:
    """A signal handler: note the signal, then raise `SignalInterrupt`, as Python's own raises KeyboardInterrupt."""
    note_signal(signum)
    raise SignalInterrupt(signum)


@contextlib.contextmanager
def recording_interrupts(signals: tuple[int, ...] = (signal.SIGINT,)) -> Iterator[None]:
    """Within: `interrupt_handler` handles ``signals`` (none: handlers installed elsewhere), and what a
    strategy raises is judged with the record (see the module docstring); after: the previous
    handlers. An outermost block starts with nothing noted."""
    if not _recording[0]:
        _noted.clear()
    previous = {s: signal.signal(s, interrupt_handler) for s in signals}
    _recording[0] += 1
    try:
        yield
    finally:
        _recording[0] -= 1
        for s, handler in previous.items():
            signal.signal(s, handler)


def call_failure(exc: BaseException) -> tuple[str, str]:
    """How a call into a strategy that ended in ``exc`` broke the contract: its kind and a description.

    The kind is `RAISES` (an `Exception`), `TIME_LIMIT` (`TimeLimitExceeded`, or a ``cmd:`` program's
    `ExternalTimeout`) or `LEAVES` (any other `BaseException`, or a ``cmd:`` program that ended:
    `ExternalEnded`). A real interrupt is re-raised instead (see the module docstring).

    >>> call_failure(ValueError("bad"))
    ('raises', 'raised ValueError: bad')
    >>> call_failure(SystemExit(0))
    ('leaves', 'raised SystemExit(0) (sys.exit): a strategy must return, not leave')
    """
    if isinstance(exc, SignalInterrupt):
        raise exc
    if _noted and _recording[0]:
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        raise KeyboardInterrupt from exc
    name = type(exc).__name__
    if isinstance(exc, Exception):
        try:
            text = str(exc)
        except Exception:   # its own __str__ failed: the type says enough
            text = "(unprintable)"
        # A cmd: program past its timeout_ms, or one that ended, is judged as a call past the limit or one that leaves.
        kind = TIME_LIMIT if isinstance(exc, ExternalTimeout) else LEAVES if isinstance(exc, ExternalEnded) else RAISES
        return kind, f"raised {name}: {text}"
    if isinstance(exc, TimeLimitExceeded):
        return TIME_LIMIT, f"ran past the per-call time limit of {exc.limit_ms} ms"
    if isinstance(exc, KeyboardInterrupt):
        if not _recording[0]:
            raise exc   # without the record, it cannot be told from a real Ctrl-C
        return LEAVES, f"raised {name} itself (no Ctrl-C or signal arrived): a strategy must return, not leave"
    if isinstance(exc, SystemExit):
        return LEAVES, f"raised {name}({shown(exc.code)}) (sys.exit): a strategy must return, not leave"
    return LEAVES, f"raised {name}, a BaseException: a strategy must return, not leave"


class TimeLimitExceeded(BaseException):
    """Raised in a strategy's code when a call runs past `CallLimit`'s limit (a BaseException, so
    ``except Exception`` in the strategy does not swallow it)."""

    def __init__(self, limit_ms: int) -> None:
        super().__init__(f"ran past the per-call time limit of {limit_ms} ms")
        self.limit_ms = limit_ms


class _Alarm:
    """The process's one SIGALRM handler while any `CallLimit` is entered, and the call it guards."""

    def __init__(self) -> None:
        self.depth = 0
        self.previous: Any = None
        self.current: CallLimit | None = None   # the limit of the call running now

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("a per-call time limit needs the main thread (signal handlers run only there)")
        if self.depth == 0:
            self.previous = signal.signal(signal.SIGALRM, self._expire)
        self.depth += 1

    def uninstall(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            self.previous = None

    def _expire(self, signum: int, frame: Any) -> None:
        limit = self.current
        if limit is not None:   # else a late alarm of a call that already returned
            limit.fired = True
            raise TimeLimitExceeded(limit.ms)


_ALARM = _Alarm()


class CallLimit:
    """A limit of ``ms`` milliseconds on each call made through `call` (see the module docstring).

    ``with limit:`` installs the handler once for many calls (about 0.6 µs a call then, for two
    ``setitimer`` calls); `call` outside a ``with`` installs and restores it around each call.
    Calls do not nest: the limit is that of one call into a strategy at a time.
    """

    def __init__(self, ms: int) -> None:
        if isinstance(ms, bool) or not isinstance(ms, int) or not 1 <= ms <= MAX_TIME_LIMIT_MS:
            raise ValueError(f"the per-call time limit must be a whole number of milliseconds from 1 to "
                             f"{MAX_TIME_LIMIT_MS:,} (one day), got {shown_option(ms)}")
        if not hasattr(signal, "setitimer"):  # pragma: no cover - not POSIX
            raise ValueError("a per-call time limit needs signal.setitimer (POSIX)")
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("a per-call time limit needs the main thread (signal handlers run only there)")
        self.ms = ms
        self.fired = False
        self._seconds = ms / 1000

    def __enter__(self) -> "CallLimit":
        _ALARM.install()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _ALARM.uninstall()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, raising `TimeLimitExceeded` in it once it has run for the limit."""
        if _ALARM.depth == 0:
            with self:
                return self.call(function, *args)
        alarm = _ALARM
        self.fired = False
        alarm.current = self
        signal.setitimer(signal.ITIMER_REAL, self._seconds, self._seconds)
        try:
            result = function(*args)
        finally:
            alarm.current = None   # first: an alarm from here on is ignored
            signal.setitimer(signal.ITIMER_REAL, 0)
        if self.fired:   # the strategy caught TimeLimitExceeded and went on
            raise TimeLimitExceeded(self.ms)
        return result

    def __repr__(self) -> str:
        return f"CallLimit({self.ms})"


def call_limit_for(strategy: Any, ms: int | None) -> CallLimit | None:
    """A `CallLimit` of ``ms`` for ``strategy``; None when ``ms`` is None or for a `cmd:` strategy or policy,
    which keeps its own ``timeout_ms`` (a signal in the middle of its exchange would desynchronise it)."""
    return None if ms is None or isinstance(strategy, ExternalProcess) else CallLimit(ms)


class LimitedSubject:
    """What a checker calls in this process: ``limit``, its `call_limit_for`, is installed for the
    length of a ``with`` block (nothing is without one)."""

    def __init__(self, target: Any, evict_timeout_ms: int | None) -> None:
        self.limit = call_limit_for(target, evict_timeout_ms)
        self.evict_timeout_ms = evict_timeout_ms
        self.limited = self.limit is not None

    def __enter__(self) -> "LimitedSubject":
        if self.limit is not None:
            self.limit.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.limit is not None:
            self.limit.__exit__(*exc)
