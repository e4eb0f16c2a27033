"""The settings of a replay: one frozen object, made once by a command from its options, checked once, handed on.

A command makes one `ReplaySettings`; `sim.analysis.grid.run_grid` gives it to every `GridTask` (each
with its session's token ratios, `ReplaySettings.replace`), and `sim.engine.replay.replay_session`
to the engine (`sim.engine.arm.replay_arm`, `sim.engine.transcript.replay_transcript`,
`sim.engine.rules.Managed`), which read what they need of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.engine.measures import CACHE_TTL_MS
from ctxbench.sim.errors import InputError
from ctxbench.strategies.limits import MAX_TIME_LIMIT_MS
from ctxbench.traces.schema import MAX_VALUE
from ctxbench.traces.tokens import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN, TokenRatios

__all__ = ["ReplaySettings", "OptimumLimits", "DEFAULT_SETTINGS", "settings_of"]


@dataclass(frozen=True)
class OptimumLimits:
    """When the exact program is attempted: at most ``max_intervals`` undecided intervals in an arm
    (above it only the LP relaxation is solved), and ``time_limit_s`` per program (HiGHS stops there
    and keeps its best schedule and its proven bound)."""

    max_intervals: int = 50_000
    time_limit_s: float = 20.0

    def __post_init__(self) -> None:
        if isinstance(self.max_intervals, bool) or not isinstance(self.max_intervals, int) or self.max_intervals < 0:
            raise ValueError(f"max_intervals must be an integer >= 0, got {self.max_intervals!r}")
        if not (isinstance(self.time_limit_s, (int, float)) and not isinstance(self.time_limit_s, bool)
                and 0 < self.time_limit_s <= 86_400):
            raise ValueError(f"time_limit_s must be a number of seconds in (0, 86400], got {self.time_limit_s!r}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ReplaySettings:
    """How every replay of a run is made; `InputError` naming the setting when one is out of its range.

    - ``strict``: stop at the first contract violation (else count them);
    - ``tokens``: bytes per token: one ratio for every kind (0.001 to 1,000,000), `traces.tokens.TokenRatios`,
      a table of ratios by model family, or None (each session its model family's,
      `traces.model_ratios.session_ratios`); a replay of one session reads one ratio or `TokenRatios`;
    - ``evict_timeout_ms``: the limit of each call into an in-process strategy or policy, 1 ms to one day
      (None: none; `strategies.calls.CallLimit`);
    - ``cache_ttl_ms``: the prompt cache's lifetime in trace time, -1 (no cache) or >= 0;
    - ``max_files``: the budget's ``max_entries``; ``max_directories``: the distinct directories of resident
      files, enforced by the replay; each 1 to 2**50 or None;
    - what a grid adds: ``keep_turns`` (keep the per-turn log), ``bracket`` (the offline optimum and bracket
      rows), ``claims`` (the claim configurations a session of several arms is replayed under; ``(None,)``:
      claims disabled), ``optimum`` (`OptimumLimits`).
    """

    strict: bool = True
    tokens: "float | TokenRatios | Mapping[str, TokenRatios] | None" = None
    evict_timeout_ms: int | None = None
    cache_ttl_ms: int = CACHE_TTL_MS
    max_files: int | None = None
    max_directories: int | None = None
    keep_turns: bool = True
    bracket: bool = False
    claims: tuple[ClaimConfig | None, ...] = (None,)
    optimum: OptimumLimits = OptimumLimits()

    def __post_init__(self) -> None:
        for name in ("strict", "keep_turns", "bracket"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name, top in (("max_files", MAX_VALUE), ("max_directories", MAX_VALUE),
                          ("evict_timeout_ms", MAX_TIME_LIMIT_MS)):
            value = getattr(self, name)
            if value is not None and not (_whole(value) and 1 <= value <= top):
                raise InputError(f"{name} must be a positive integer up to {top:,}, got {value!r}")
        if not _whole(self.cache_ttl_ms) or self.cache_ttl_ms < -1:
            raise InputError(f"cache_ttl_ms must be -1 (no cache) or a lifetime in ms >= 0, got {self.cache_ttl_ms!r}")
        self._check_tokens()
        claims = tuple(self.claims) if self.claims else (None,)
        if any(c is not None and not isinstance(c, ClaimConfig) for c in claims):
            raise InputError(f"claims must be claim configurations, got {self.claims!r}")
        object.__setattr__(self, "claims", claims)
        if not isinstance(self.optimum, OptimumLimits):
            raise InputError(f"optimum must be OptimumLimits, got {self.optimum!r}")

    def _check_tokens(self) -> None:
        tokens = self.tokens
        if tokens is None or isinstance(tokens, TokenRatios):
            return
        if isinstance(tokens, Mapping):
            bad = next((k for k, v in tokens.items() if not isinstance(v, TokenRatios)), None)
            if bad is not None:
                raise InputError(f"token ratios of family {bad!r} must be TokenRatios, got {tokens[bad]!r}")
            return
        check_bytes_per_token(tokens)

    def replace(self, **changes: Any) -> "ReplaySettings":
        """These settings with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes) if changes else self


DEFAULT_SETTINGS = ReplaySettings()


def settings_of(settings: ReplaySettings | None, **changes: Any) -> ReplaySettings:
    """``settings`` (None: the defaults) with the keyword ``changes`` that are not None (the keywords a caller
    of `sim.engine.replay.replay_session` or `sim.analysis.grid.run_grid` may still pass one by one)."""
    base = DEFAULT_SETTINGS if settings is None else settings
    if not isinstance(base, ReplaySettings):
        raise TypeError(f"settings must be ReplaySettings, got {type(base).__name__}")
    return base.replace(**{k: v for k, v in changes.items() if v is not None})


def check_bytes_per_token(value: Any, option: str = "bytes per token") -> float:
    """``value`` as a float between `MIN_BYTES_PER_TOKEN` and `MAX_BYTES_PER_TOKEN`; else `InputError`
    naming ``option`` and the value. Token ratios (`traces.tokens.TokenRatios`, checked when made)
    and ``None`` (the calibrated defaults) give their reference ratio, the budget's unit."""
    from ctxbench.traces.tokens import as_ratios

    if value is None or isinstance(value, TokenRatios):
        return as_ratios(value).reference
    per_token = positive_float(value)
    if per_token is None:
        raise InputError(f"{option} must be a positive number of bytes per token, got {value!r:.40}")
    if not MIN_BYTES_PER_TOKEN <= per_token <= MAX_BYTES_PER_TOKEN:
        raise InputError(f"{option} {per_token:g} is absurd: bytes per token must be between "
                         f"{MIN_BYTES_PER_TOKEN:g} and {MAX_BYTES_PER_TOKEN:,}")
    return per_token


def positive_float(value: Any) -> float | None:
    """``value`` as a finite positive float, or None (booleans, strings, huge ints, NaN, <= 0)."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and x > 0 else None
