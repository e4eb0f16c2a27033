"""Context policies that break the contract, each one way, for the checker's and the replays' tests."""

import os
import sys

from ctxbench.strategies.policy import Append, Replace, Request


class Grows:
    """Replaces the last item by one larger than it."""

    def edit(self, items, window):
        if not len(items) or items[-1].role == "overhead":
            return []
        return [Replace((items[-1].id,), items[-1].tokens + 1, "summary")]


class Unknown:
    """Replaces an id no item has."""

    def edit(self, items, window):
        return [Replace(("nope",), 0)]


class ReplacesOverhead:
    """Replaces the overhead."""

    def edit(self, items, window):
        return [Replace((i.id,), 0) for i in items if i.role == "overhead"]


class AttachesUnseen:
    """Attaches a revision no item held."""

    def edit(self, items, window):
        return [Append("attached", 1, "ghost.py:0")]


class RequestsUnknown:
    """Summarizes the history by a call that asks for an id no item has."""

    def edit(self, items, window):
        old = tuple(i.id for i in items if i.role != "overhead")
        return [Replace(old, 0, "summary"), Request(("nope",))] if old else []


class Raises:
    def edit(self, items, window):
        raise RuntimeError("no")


class Exits:
    def edit(self, items, window):
        sys.exit(3)


class EndsItsProcess:
    def edit(self, items, window):
        os._exit(0)


class Flaky:
    """A different answer on every call (hidden state)."""

    def __init__(self):
        self.calls = 0

    def edit(self, items, window):
        self.calls += 1
        targets = [i for i in items if i.role == "result" and i.tokens]
        return [Replace((targets[0].id,), 0)] if targets and self.calls % 2 else []


class BadAnswer:
    def edit(self, items, window):
        return {"edits": []}


def grows():
    return Grows()


def unknown():
    return Unknown()


def requests_unknown():
    return RequestsUnknown()


def ends_its_process():
    return EndsItsProcess()



class _BreaksOnCall:
    """Never edits, until its ``call``-th edit call (0-based), which leaves as ``fault`` says."""

    def __init__(self, call: int, fault: str) -> None:
        self.call, self.fault, self.calls = call, fault, 0

    def edit(self, items, window):
        from broken_strategies import LEAVING

        calls, self.calls = self.calls, self.calls + 1
        if calls == self.call:
            if self.fault == "os-exit3":
                os._exit(3)
            elif self.fault == "segfault":
                import ctypes
                ctypes.string_at(0)
            elif self.fault == "sleep":
                import time
                time.sleep(600)
            else:
                LEAVING[self.fault]()
        return []


def breaks(call=2, fault="os-exit"):
    """A policy whose ``call``-th edit call (0-based) leaves as `broken_strategies.LEAVING` says, ends its process
    with status 3 (``os-exit3``), crashes (``segfault``) or sleeps ten minutes (``sleep``)."""
    return _BreaksOnCall(call, fault)


class _Sleeps:
    """Never edits; each edit call sleeps ``seconds`` first, everywhere or only where PYTHONHASHSEED is ``where``."""

    def __init__(self, seconds: float, where: str) -> None:
        self.seconds, self.where = seconds, where

    def edit(self, items, window):
        if not self.where or os.environ.get("PYTHONHASHSEED") == self.where:
            import time
            time.sleep(self.seconds)
        return []


def sleeps(seconds=5, where=""):
    """A policy whose every edit call sleeps ``seconds`` (only under PYTHONHASHSEED=``where`` when given)."""
    return _Sleeps(seconds, str(where) if where != "" else "")


def str_ids():
    """Masks the first tool result, naming it by a ``str`` subclass made inside this function (which cannot be
    pickled): a valid answer, its ids read as the strings they hold."""

    class Id(str):
        pass

    class MasksFirstResult:
        def edit(self, items, window):
            targets = [i for i in items if i.role == "result" and i.tokens > 1]
            return [Replace((Id(targets[0].id),), 1, "placeholder")] if targets else []

    return MasksFirstResult()


def masks_first_result():
    """`str_ids` with plain ids."""

    class MasksFirstResult:
        def edit(self, items, window):
            targets = [i for i in items if i.role == "result" and i.tokens > 1]
            return [Replace((targets[0].id,), 1, "placeholder")] if targets else []

    return MasksFirstResult()
