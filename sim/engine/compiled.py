"""The compiled engine (``sim/engine/_engine.c``): whether it is built and runs, checked against the
declaration of the per-turn row when it is imported."""

from __future__ import annotations

from collections.abc import Sequence

from ctxbench.sim.engine.measures import TURN_FIELDS
from ctxbench.strategies.compiled import pure_python_requested
from ctxbench.strategies.contract import ContextBudget, ContextEntry

__all__ = ["BUILT", "ENABLED", "engine", "StateView", "check_fields"]


def check_fields(fields) -> None:
    """Raise ImportError unless the compiled engine records the declared per-turn fields, in order."""
    if tuple(fields) != TURN_FIELDS:
        raise ImportError(f"sim/engine/_engine.c records the per-turn fields {tuple(fields)}, but "
                          f"sim/engine/measures.py declares {TURN_FIELDS}: rebuild, or make them agree")


try:
    from ctxbench.sim.engine import _engine as engine
except ImportError:   # not built (no C compiler at install): the specification runs instead
    engine = None

#: Whether the compiled engine is built, and whether it runs by default (``CTXBENCH_PURE_PYTHON`` unset or 0).
BUILT = engine is not None
ENABLED = BUILT and not pure_python_requested()

if engine is not None:
    check_fields(engine.TURN_FIELDS)

    class StateView(engine.StateViewBase, Sequence):
        """The resident entries in ``(last_accessed_at, id)`` order, with ``total_bytes``, read from
        the compiled engine's context; valid only during the ``evict`` call that receives it.
        Entries are made when first read: ``len`` costs O(1), a leading slice ``state[:k]`` O(k)."""

        __slots__ = ()
        recency_sorted = True

        def __repr__(self) -> str:
            return f"StateView({list(self._tuple())!r}, total_bytes={self.total_bytes})"

    engine.bind(ContextEntry, ContextBudget, StateView)
else:
    StateView = None
