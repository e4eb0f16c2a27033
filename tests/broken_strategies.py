"""Deliberately broken strategies, loaded by import path (``broken_strategies:NAME``) in grid and CLI tests."""

from strategies.registry import make


class _LruThenBreaks:
    """LRU until its ``call``-th evict call (0-based: the session's turn of that index), then ``fault``."""

    def __init__(self, call: int, fault: str) -> None:
        self.call, self.fault, self.calls = call, fault, 0
        self.lru = make("lru")

    def evict(self, state, budget):
        calls, self.calls = self.calls, self.calls + 1
        if calls != self.call:
            return self.lru.evict(state, budget)
        if self.fault == "raise":
            raise RuntimeError(f"deliberate failure on call {calls}")
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
