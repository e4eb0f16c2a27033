"""One adapter per strategy or policy: its declared kind, its statefulness, its label and the one call the engine makes.

Every caller that runs a strategy or a policy (the replay engine, the grid, latency, isolation, the checker)
asks its `Adapter` what it is and how to call it, never the object itself:

- ``kind``: `STRATEGY` (``evict(state, budget)``), `STATEFUL` (a `strategies.stateful.StatefulContextStrategy`:
  ``evict`` and hooks), `POLICY` (a transcript policy, ``edit(items, window)`` and perhaps ``admit``) or
  `COMBINED` (``STRATEGY+POLICY``: the strategy's ``evict``, its conversation compacted by ``policy``);
- ``stateful``: declared by the class (a `StatefulContextStrategy` subclass), never inferred from behaviour;
- ``call``: the kind's one call (``evict`` or ``edit``), ``hooks`` (a stateful strategy's ``reset``,
  ``on_insert``, ``on_access``, ``on_remove``; else None) and ``admit`` (a policy's, else None).

`Adapter.through` is the one forwarding proxy: the same adapter with its call (and, ``every``, its hooks
and ``admit``) made through a function ``around(method, *args)``: recording (latency), counting
(isolation) and the per-call time limit are each such a function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.policy import is_policy
from ctxbench.strategies.registry import CompactedStrategy, kind_of, make, split_combination
from ctxbench.strategies.stateful import StatefulContextStrategy

__all__ = ["Adapter", "Forwarding", "adapt", "label_of", "names_of", "STRATEGY", "STATEFUL", "POLICY", "COMBINED", "ADAPTER_KINDS"]

STRATEGY, STATEFUL, POLICY, COMBINED = "strategy", "stateful strategy", "policy", "strategy+policy"
#: The kinds an adapter states.
ADAPTER_KINDS = (STRATEGY, STATEFUL, POLICY, COMBINED)


def names_of(kind: str) -> tuple[str, str]:
    """How messages name a strategy or policy of ``kind``, and its one call: ``("policy", "edit")`` or
    ``("strategy", "evict")``."""
    return ("policy", "edit") if kind == POLICY else ("strategy", "evict")


def label_of(spec: Any) -> str:
    """How a strategy or policy is named in results: its spec string, or its repr."""
    return spec if isinstance(spec, str) else repr(spec)


class Forwarding:
    """``target``'s methods, each called as ``around(method, *args)`` (a stateful strategy's hooks, say)."""

    def __init__(self, target: Any, around: Callable) -> None:
        self._target, self._around = target, around

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        forwarded = functools.partial(self._around, getattr(self._target, name))
        setattr(self, name, forwarded)   # looked up once
        return forwarded


class Adapter:
    """A built strategy or policy as every caller sees it (see the module docstring).

    ``target`` is the object that answers (a combination's strategy), ``policy`` a combination's compaction
    policy (else None). ``observed`` says that the call goes through a hook that must see every call, so a
    compiled kernel of the engine's own may not stand in for it.
    """

    __slots__ = ("target", "kind", "_label", "policy", "call", "hooks", "admit", "observed")

    def __init__(self, target: Any, kind: str, label: Any, policy: Any = None) -> None:
        if kind not in ADAPTER_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ADAPTER_KINDS)}, got {kind!r}")
        self.target, self.kind, self._label, self.policy = target, kind, label, policy
        self.call = target.edit if kind == POLICY else target.evict
        self.hooks = target if isinstance(target, StatefulContextStrategy) else None
        self.admit = getattr(target, "admit", None) if kind == POLICY else None
        self.observed = False

    @property
    def label(self) -> str:
        """How it is named in results: its spec, or the repr of the object it was made from (made when asked)."""
        return label_of(self._label)

    @property
    def stateful(self) -> bool:
        """Whether it keeps history (a `StatefulContextStrategy`, alone or in a combination): not replay-pure."""
        return isinstance(self.target, StatefulContextStrategy)

    @property
    def noun(self) -> str:
        """``policy`` or ``strategy``, as messages name it."""
        return names_of(self.kind)[0]

    @property
    def method(self) -> str:
        """The name of its one call: ``edit`` or ``evict``."""
        return names_of(self.kind)[1]

    @property
    def model(self) -> str:
        """What it replays: the append-only ``transcript`` (a policy) or the ``managed`` context."""
        return "transcript" if self.kind == POLICY else "managed"

    def through(self, around: Callable, *, every: bool = False, observes: bool = True) -> "Adapter":
        """This adapter with its call made as ``around(call, *args)``; with ``every``, its hooks and ``admit``
        too. ``observes``: ``around`` must see every call (a compiled kernel may not replace it)."""
        out = object.__new__(Adapter)
        out.target, out.kind, out._label, out.policy = self.target, self.kind, self._label, self.policy
        out.call = functools.partial(around, self.call)
        out.hooks = Forwarding(self.hooks, around) if every and self.hooks is not None else self.hooks
        out.admit = functools.partial(around, self.admit) if every and self.admit is not None else self.admit
        out.observed = self.observed or observes
        return out

    def limited(self, limit) -> "Adapter":
        """Every call (hooks and ``admit`` too) through ``limit`` (a `strategies.calls.CallLimit`; None: as it is)."""
        return self if limit is None else self.through(limit.call, every=True, observes=False)

    def __repr__(self) -> str:
        return f"Adapter({self.kind}: {self.label})"


def adapt(subject: Any, label: str | None = None) -> Adapter:
    """The adapter of ``subject``: a spec (built here, by `strategies.registry.make`), a built object, or an
    adapter (returned as it is). The kind is the registry's declared one for a registered name, else the
    built object's interface; a registered policy that has no ``edit`` is a `StrategyLoadError`."""
    if isinstance(subject, Adapter):
        return subject
    built = make(subject)
    name = subject if label is None else label   # named by `label_of` only when asked (a repr may cost)
    if isinstance(built, CompactedStrategy):
        return Adapter(built.strategy, COMBINED, name, built.policy)
    declared = kind_of(subject) if isinstance(subject, str) and split_combination(subject) is None else None
    if declared == "policy" and not is_policy(built):
        raise StrategyLoadError(f"{label_of(name)!r} is registered as a policy but has no edit(items, window)")
    if declared == "policy" or is_policy(built):
        return Adapter(built, POLICY, name)
    return Adapter(built, STATEFUL if isinstance(built, StatefulContextStrategy) else STRATEGY, name)
