"""Deliberately broken strategies, loaded by import path (``broken_strategies:NAME``) in grid and CLI tests."""

import os
import signal
import sys
import time

from ctxbench.strategies.registry import make
from ctxbench.strategies.stateful import StatefulContextStrategy

#: How each fault leaves a call: ``exit`` is ``sys.exit(0)``; ``os-exit`` and ``sigkill`` end the process
#: (``os._exit(0)``, ``SIGKILL`` to itself); the rest raise.
LEAVING = {
    "exit": lambda: sys.exit(0),
    "os-exit": lambda: os._exit(0),
    "sigkill": lambda: os.kill(os.getpid(), signal.SIGKILL),
    "system-exit": lambda: (_ for _ in ()).throw(SystemExit(3)),
    "interrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "generator-exit": lambda: (_ for _ in ()).throw(GeneratorExit()),
    "raise": lambda: (_ for _ in ()).throw(RuntimeError("deliberate failure")),
}


class _LruThenBreaks:
    """LRU until its ``call``-th evict call (0-based: the session's turn of that index), then ``fault``."""

    def __init__(self, call: int, fault: str) -> None:
        self.call, self.fault, self.calls = call, fault, 0
        self.lru = make("lru")

    def evict(self, state, budget):
        calls, self.calls = self.calls, self.calls + 1
        if calls != self.call or self.fault == "none":
            return self.lru.evict(state, budget)
        if self.fault == "raise":
            raise RuntimeError(f"deliberate failure on call {calls}")
        if self.fault in LEAVING:
            LEAVING[self.fault]()
        if self.fault == "sleep":
            if os.environ.get("BROKEN_MARKER"):   # tells a test that the call is under way
                open(os.environ["BROKEN_MARKER"], "w").close()
            time.sleep(10)
            return self.lru.evict(state, budget)
        return ["no/such/file.py:0"]


def raises_on_turn_3():
    """Raises on the session's fourth turn (turn index 3)."""
    return _LruThenBreaks(3, "raise")


def unknown_id_on_turn_1():
    """Returns an id that is not in the state on the session's second turn."""
    return _LruThenBreaks(1, "unknown")


def keeps_everything(state, budget):
    """Never evicts: a violation on every turn where the context is over budget."""
    return []


def breaks(call=2, fault="exit"):
    """LRU, but its ``call``-th evict call (0-based) leaves as ``fault`` says (see `LEAVING`), sleeps 10 s
    (``sleep``; first creating the file ``$BROKEN_MARKER`` names, if set) or does nothing (``none``)."""
    return _LruThenBreaks(call, fault)


def breaks_when_told(call=2):
    """`breaks`, with the fault read from ``$BROKEN_FAULT`` when built (``none``: never breaks)."""
    return _LruThenBreaks(call, os.environ.get("BROKEN_FAULT", "none"))


class _HookBreaks(StatefulContextStrategy):
    """A stateful LRU whose hook ``hook`` leaves as ``fault`` says on its ``call``-th call (0-based)."""

    def __init__(self, hook: str, call: int, fault: str) -> None:
        self.hook, self.call, self.fault, self.calls = hook, call, fault, {}
        self.lru = make("lru")

    def _called(self, name: str) -> None:
        n = self.calls[name] = self.calls.get(name, -1) + 1
        if name == self.hook and n == self.call:
            time.sleep(10) if self.fault == "sleep" else LEAVING[self.fault]()

    def reset(self):
        self.calls = {}
        self._called("reset")

    def on_insert(self, entry):
        self._called("on_insert")

    def on_access(self, entry):
        self._called("on_access")

    def on_remove(self, entry_id, evicted):
        self._called("on_remove")

    def evict(self, state, budget):
        return self.lru.evict(state, budget)


def hook_breaks(hook="on_insert", call=2, fault="exit"):
    """A stateful strategy whose ``hook`` (reset, on_insert, on_access, on_remove) leaves (or sleeps 10 s) on
    its ``call``-th call."""
    return _HookBreaks(hook, call, fault)


def exits_when_built():
    """A factory that calls ``sys.exit(0)`` instead of returning a strategy."""
    sys.exit(0)


def ends_when_built():
    """A factory that ends its process with ``os._exit(0)`` instead of returning a strategy."""
    os._exit(0)


def endless_generator(state, budget):
    """Answers with a generator that never ends."""
    def ids():
        while True:
            yield "x:0"
    return ids()


def finite_generator(state, budget):
    """LRU's answer, as a generator instead of a list."""
    return (i for i in make("lru").evict(state, budget))


def ten_million_ids(state, budget):
    """Answers with a list of ten million ids (one id repeated), whatever the state."""
    return ["x:0"] * 10_000_000


def sleeps(seconds=10):
    """LRU that sleeps ``seconds`` in every evict call."""
    lru = make("lru")

    def evict(state, budget):
        time.sleep(seconds)
        return lru.evict(state, budget)
    return evict


def chatty(**_):
    """LRU that prints a line to stdout on every call, as debugging code does."""
    lru = make("lru")

    class Chatty:
        def evict(self, state, budget):
            print("evicting", len(budget.__class__.__name__))
            return lru.evict(state, budget)

    return Chatty()


class _SleepsWhereHashseedIs:
    """LRU, but each evict call sleeps five seconds first where PYTHONHASHSEED is ``seed``."""

    def __init__(self, seed: str) -> None:
        self.seed, self.lru = seed, make("lru")

    def evict(self, state, budget):
        if os.environ.get("PYTHONHASHSEED") == self.seed:
            time.sleep(5)
        return self.lru.evict(state, budget)


def sleeps_where_hashseed_is(seed=1):
    return _SleepsWhereHashseedIs(str(seed))


class _Spawns:
    """LRU that, on its first evict call, starts two processes meant to outlive it, each writing its pid to
    ``$ESCAPE_PIDS`` (with its own): one ``setsid``'d with an empty environment, one double-forked; then, on its
    ``call``-th call (0-based), leaves as ``fault`` says (`LEAVING`), or sleeps 0.3 s on every call (``slow``)."""

    def __init__(self, call: int, fault: str) -> None:
        self.call, self.fault, self.calls = call, fault, 0
        self.lru = make("lru")

    def _escape(self) -> None:
        import subprocess

        pids = os.environ["ESCAPE_PIDS"]
        with open(pids, "a") as fh:
            fh.write(f"{os.getpid()}\n")
            written = fh.tell()
        subprocess.Popen([sys.executable, "-c", "import os, sys, time\nopen(sys.argv[1], 'a').write(f'{os.getpid()}\\n')\n"
                          "time.sleep(120)", pids], start_new_session=True, env={})
        if os.fork() == 0:
            if os.fork() == 0:
                os.setsid()
                with open(pids, "a") as fh:
                    fh.write(f"{os.getpid()}\n")
                time.sleep(120)
            os._exit(0)
        while len(open(pids).read()[written:].split()) < 2:   # both escapees have started
            time.sleep(0.01)

    def evict(self, state, budget):
        calls, self.calls = self.calls, self.calls + 1
        if calls == 0:
            self._escape()
        if self.fault == "slow":
            time.sleep(0.3)
        elif calls == self.call and self.fault in LEAVING:
            LEAVING[self.fault]()
        return self.lru.evict(state, budget)


def spawns(call=2, fault="none"):
    """`_Spawns`: a strategy whose processes mean to outlive it."""
    return _Spawns(call, fault)
