"""Tokens by content kind: what each kind of window content costs in tokens, in one place.

A model's tokenizer packs some content denser than other: source code, prose, JSON payloads and
the model's own thinking each have their own bytes per token. A trace's rows carry a content
``kind`` (a column, or derived from ``op`` and ``path`` by `kind_of`); `TokenRatios` holds the
bytes per token of each kind. The simulator counts everything in **reference bytes**: bytes of
the ``code`` kind, the unit of a budget (``budget bytes = tokens × reference``); an event of
another kind costs its size scaled to that unit (`TokenRatios.costs`). With one ratio for every
kind (``--bytes-per-token X``) costs are the sizes themselves.

The defaults (`DEFAULT_RATIOS`) were calibrated with ``ctxbench calibrate`` on ONE bundled real
Claude Code session, ``258c7280`` and its subagents (156 calls; data/real-sessions, claude-code),
counting the window as the agent's append-only transcript holds it (every copy of a re-read
file; `sim.analysis.fidelity.window_composition`), and tested with ``ctxbench fidelity`` on the
other, ``8463c716`` (143 calls), which they were not fitted on: median simulated / real 0.995
(Pearson 0.9995) on 258c7280's main arm and 1.010 (Pearson 0.998) on 8463c716's; 0.98-1.00 on
the subagents and small sessions (docs/design.md §7 has the table). ``code``, ``output``,
``prose`` and ``json`` are fitted; ``thinking`` is 1.5 % of the growth, under the 2 % a fit
needs, and keeps 1.47 (fitted under the managed model's one-copy counting); ``overhead`` is not
fitted: imports measure the overhead in tokens, and this is the unit they write it in. The fit
is a fixed point: calibrating 258c7280 again with these defaults returns them. Calibrate on
your own logs to replace them
(``ctxbench calibrate LOGS --out FILE``, then ``--token-ratios FILE``). These are the ``claude``
family's; `traces.model_ratios` holds the ratios of each model family and chooses a session's by its
model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# The kinds and how an event's kind is found are the event vocabulary's (`traces.vocabulary`).
from ctxbench.traces.vocabulary import KINDS, kind_codes, kind_of, kinds_of

__all__ = ["KINDS", "DEFAULT_RATIOS", "DEFAULT_OVERHEAD_TOKENS", "TokenRatios", "DEFAULT_TOKENS", "as_ratios",
           "kind_of", "kinds_of", "kind_codes", "MIN_BYTES_PER_TOKEN", "MAX_BYTES_PER_TOKEN"]

#: Bytes per token of each kind (calibrated on 258c7280, tested on 8463c716; see the module docstring).
DEFAULT_RATIOS: dict[str, float] = {"code": 2.07, "output": 4.31, "prose": 3.85, "thinking": 1.47, "json": 1.96,
                                    "overhead": 2.8}
#: The range of any bytes-per-token ratio (an option, a file of ratios, a ratio by kind).
MIN_BYTES_PER_TOKEN, MAX_BYTES_PER_TOKEN = 0.001, 1_000_000
#: A window's overhead where its log records neither a system prompt nor input tokens (the system
#: prompt, tools and project instructions of the five bundled Claude Code main windows measured
#: 25.3-25.9K tokens on their first call; subagents 12.0K and 17.7K).
DEFAULT_OVERHEAD_TOKENS = 26_000


@dataclass(frozen=True)
class TokenRatios:
    """Bytes per token of each content kind; ``reference`` (the ``code`` kind's) is the budget's unit.

    >>> r = TokenRatios.uniform(3.8)
    >>> r.reference, r.costs([10, 7], ["code", "prose"]).tolist()
    (3.8, [10, 7])
    >>> TokenRatios({"code": 2.0, "prose": 4.0}).costs([10, 10], ["code", "prose"]).tolist()
    [10, 5]
    """

    ratios: Mapping[str, float]

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ratios) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown content kind {unknown[0]!r}; known: {', '.join(KINDS)}")
        for kind, value in self.ratios.items():
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not MIN_BYTES_PER_TOKEN <= value <= MAX_BYTES_PER_TOKEN):
                raise ValueError(f"bytes per token of {kind!r} must be a number from {MIN_BYTES_PER_TOKEN:g} to "
                                 f"{MAX_BYTES_PER_TOKEN:,}, got {value!r}")
        # Kinds not given keep their default.
        object.__setattr__(self, "ratios", {k: float(self.ratios.get(k, DEFAULT_RATIOS[k])) for k in KINDS})

    @classmethod
    def uniform(cls, bytes_per_token: float) -> "TokenRatios":
        """One ratio for every kind (``--bytes-per-token``)."""
        return cls(dict.fromkeys(KINDS, float(bytes_per_token)))

    @property
    def reference(self) -> float:
        """Bytes per token of the budget's unit (the ``code`` kind)."""
        return self.ratios["code"]

    @property
    def is_uniform(self) -> bool:
        """Whether every kind has the same ratio (costs are then the sizes)."""
        return len(set(self.ratios.values())) == 1

    def tokens(self, sizes, kinds, exact=None) -> np.ndarray:
        """Tokens of events of ``sizes`` bytes and these kinds (an event's ``exact`` tokens where above 0)."""
        per_kind = np.array([self.ratios[k] for k in KINDS])
        index = {k: i for i, k in enumerate(KINDS)}
        out = np.asarray(sizes, dtype=float) / per_kind[[index[k] for k in kinds]]
        if exact is not None:
            exact = np.asarray(exact, dtype=float)
            out = np.where(exact > 0, exact, out)
        return out

    def costs(self, sizes, kinds, exact=None) -> np.ndarray:
        """What events of ``sizes`` bytes and these kinds (names, or indices into `KINDS`) take of
        the window, in reference bytes (rounded to the nearest; exactly the sizes where a kind's
        ratio is the reference's); an event whose ``exact`` tokens are given (above 0) takes those
        tokens in reference bytes instead.

        >>> TokenRatios({"code": 2.0, "prose": 4.0}).costs([10, 10], ["code", "prose"], exact=[0, 7]).tolist()
        [10, 14]
        """
        sizes = np.asarray(sizes, dtype=np.int64)
        if exact is not None and np.any(np.asarray(exact) > 0):
            exact = np.asarray(exact, dtype=np.int64)
            out = np.array(self.costs(sizes, kinds), dtype=np.int64)
            out[exact > 0] = np.rint(exact[exact > 0] * self.reference).astype(np.int64)
            return out
        if self.is_uniform:
            return sizes
        codes = np.asarray(kinds)
        if codes.dtype.kind not in "iu":
            codes = np.array([KINDS.index(k) for k in kinds], dtype=np.int64)
        per_kind = np.array([self.reference / self.ratios[k] for k in KINDS], dtype=float)
        scale = per_kind[codes] if len(codes) else np.ones(0)
        out = sizes.copy()
        scaled = scale != 1.0
        out[scaled] = np.rint(sizes[scaled] * scale[scaled]).astype(np.int64)
        return out

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form: kind -> bytes per token."""
        return dict(self.ratios)


#: The calibrated ratios: what a replay counts with unless told one ``--bytes-per-token``.
DEFAULT_TOKENS = TokenRatios(DEFAULT_RATIOS)


def as_ratios(value: "float | TokenRatios | None") -> TokenRatios:
    """``value`` as `TokenRatios`: itself, one ratio for every kind (a number), or the defaults (``None``).

    >>> as_ratios(3.8).is_uniform, as_ratios(None) == DEFAULT_TOKENS
    (True, True)
    """
    if value is None:
        return DEFAULT_TOKENS
    if isinstance(value, TokenRatios):
        return value
    return TokenRatios.uniform(value)
