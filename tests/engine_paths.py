"""Replaying hand-written turns through the specification and the compiled engine alike, in tests."""

import dataclasses

import pytest

from ctxbench.sim.engine.arm import ArmReplay, replay_arm, resolve_arm
from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.engine.rules import OP_CODES, ArmStream
from ctxbench.sim.engine.settings import ReplaySettings

_SETTINGS = {f.name for f in dataclasses.fields(ReplaySettings)}


def engine_options(options: dict) -> tuple[ReplaySettings, dict]:
    """The settings among keyword ``options`` (``strict``, ``cache_ttl_ms``, ...) as the engine's one
    `ReplaySettings`, and the other options."""
    settings = ReplaySettings(**{k: v for k, v in options.items() if k in _SETTINGS})
    return settings, {k: v for k, v in options.items() if k not in _SETTINGS}

#: Both engines where the compiled one is built, else the specification only.
PATHS = [False, True] if BUILT else [False]
compiled_or_not = pytest.mark.parametrize("compiled", PATHS, ids=lambda c: "compiled" if c else "specification")


def replay_turns(strategy, budget, turns, *, compiled: bool, session: str = "s", **options) -> ArmReplay:
    """Replay ``turns`` (lists of ``(op, path, size_bytes, ts_ms)``, turn ``k`` numbered ``k``)."""
    stream = ArmStream("main", [], [], [], [])
    for number, events in enumerate(turns):
        for op, path, size, ts in events:
            stream.ops.append(OP_CODES[op])
            stream.paths.append(path)
            stream.sizes.append(size)
            stream.ts_ms.append(ts)
        stream.end_turn(len(stream.ops), number, events[-1][3] if events else 0)
    settings, options = engine_options(options)
    return replay_arm(resolve_arm(stream, compiled=compiled), strategy, budget, settings, session=session,
                      compiled=compiled, **options)
