"""`TurnByTurnContext`: one arm's context driven turn by turn, event by event, as an agent's runtime drives it.

It applies the rules of `sim.engine.rules` as events arrive (a `Resolver` feeding the replay core's
`Replay` through the managed model, `Managed`);
replays of whole sessions resolve them once and run the compiled engine instead (`sim.engine.replay`),
with the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

from ctxbench.sim.engine.measures import TurnLog
from ctxbench.sim.engine.core import Replay
from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.engine.rules import INVALIDATE, OP_CODES, Managed, Resolver, StateView
from ctxbench.strategies.contract import ContextBudget

__all__ = ["TurnByTurnContext", "CodingContextManager"]

_TRACE_OPS = frozenset(OP_CODES.values())


class TurnByTurnContext:
    """Tracks one arm's context under a strategy and a budget, turn by turn.

    >>> from ctxbench.strategies import ContextBudget, make
    >>> m = TurnByTurnContext(make("lru"), ContextBudget(max_bytes=100), session="s")
    >>> m.apply_turn(0, [("read", "a.py", 60, 0)])
    >>> m.apply_turn(1, [("read", "b.py", 60, 1)])   # a.py is evicted at the turn's end
    >>> m.apply_turn(2, [("read", "a.py", 60, 2)])   # so this is a capacity miss
    >>> m.log.capacity.tolist(), m.log.evictions.tolist(), m.resident_ids()
    ([0, 0, 1], [0, 1, 1], ['a.py:0'])
    """

    def __init__(self, strategy, budget: ContextBudget, *, strict: bool = True, session: str = "",
                 strategy_name: str | None = None, arm: str = "main", max_directories: int | None = None,
                 evict_timeout_ms: int | None = None) -> None:
        if not isinstance(budget, ContextBudget):
            raise TypeError(f"budget must be a ContextBudget, got {type(budget).__name__}")
        settings = ReplaySettings(strict=strict, max_directories=max_directories, evict_timeout_ms=evict_timeout_ms)
        self._resolver = Resolver(arm)
        self._context = Managed(self._resolver.resolved, strategy, budget, settings,
                                strategy_name=strategy_name or repr(strategy), session=session)
        self._replay = Replay(self._resolver.resolved, self._context)

    strategy = property(lambda self: self._context.strategy)
    budget = property(lambda self: self._context.budget)
    session = property(lambda self: self._context.session)
    arm = property(lambda self: self._context.arm)
    strategy_name = property(lambda self: self._context.strategy_name)
    violation_messages = property(lambda self: self._context.violations.messages)
    oversize = property(lambda self: self._context.oversize)
    directory_evictions = property(lambda self: self._context.directory_evictions)
    call_limit = property(lambda self: self._context.limit)

    @property
    def occupancy_bytes(self) -> int:
        """Bytes resident right now."""
        return self._context.resident_bytes

    @property
    def log(self) -> TurnLog:
        """The per-turn log so far."""
        return self._replay.log()

    def log_digest(self) -> str:
        """SHA-256 of the event log: per turn, hits, misses by class and the evicted ids."""
        return self.log.digest()

    def resident_ids(self) -> list[str]:
        """Ids resident right now, in ``(last_accessed_at, id)`` order."""
        return self._context.resident_ids()

    def state(self) -> StateView:
        """The state a strategy would see now: valid until the context next changes."""
        context = self._context
        entries = [context.entry(slot) for slot in sorted(context.resident, key=context.recency)]
        return StateView(entries, context.resident_bytes)

    def apply_event(self, op: str | int, path: str, size_bytes: int, ts_ms: int) -> None:
        """Apply one event (op name or code of `OP_CODES`) within the current turn."""
        code = OP_CODES[op] if isinstance(op, str) else op
        if code not in _TRACE_OPS:   # another arm's change is `invalidate`
            raise ValueError(f"unknown op code {code!r}")
        self._resolver.event(code, path, size_bytes, ts_ms)
        self._replay.step(len(self._resolver.resolved) - 1)

    def apply_events(self, ops: Sequence[int], paths: Sequence[str], sizes: Sequence[int],
                     ts_ms: Sequence[int], turns: Sequence[int] | None = None) -> None:
        """Apply events given as columns, in order; with ``turns``, a change of turn number closes
        the turn, and so does the end of the columns."""
        this_turn, last = (turns[0], 0) if turns is not None and len(turns) else (None, 0)
        for turn, op, path, size, ts in zip(repeat(None) if turns is None else turns, ops, paths, sizes, ts_ms):
            if turn != this_turn:
                self.end_turn(this_turn, last)
                this_turn = turn
            self.apply_event(op, path, size, ts)
            last = ts
        if turns is not None and len(turns):
            self.end_turn(this_turn, last)

    def invalidate(self, path: str, size_bytes: int) -> None:
        """Another arm changed ``path`` to a new revision of ``size_bytes``: the next access of it is
        an invalidation miss (a resident older revision stays until evicted or replaced)."""
        self._resolver.event(INVALIDATE, path, size_bytes, 0)

    def apply_turn(self, turn: int, events: Sequence[tuple[str | int, str, int, int]]) -> None:
        """Apply one tool turn's events ``(op, path, size_bytes, ts_ms)``, then evict once."""
        ts = 0
        for op, path, size, ts in events:
            self.apply_event(op, path, size, ts)
        self.end_turn(turn, ts)

    def end_turn(self, turn: int, ts_ms: int) -> None:
        """Close the current turn: call the strategy once, remove its answer, record the turn."""
        self._resolver.end_turn(turn, ts_ms)
        self._replay.end_turn(turn, ts_ms)


#: The name docs/design.md §3 gives the runtime-side consumer of the strategy contract.
CodingContextManager = TurnByTurnContext
