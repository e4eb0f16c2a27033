"""Old tool results replaced by placeholders: SWE-agent's observation masking and Anthropic's tool-result clearing."""

from __future__ import annotations

from collections.abc import Sequence

from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.policies.common import positive_int, results_newest_first
from ctxbench.strategies.policy import Edit, Replace, TranscriptItem, Window
from ctxbench.strategies.tunable import Tunable, declare

#: The roles of tool results, masked or not.
_OBSERVATIONS = frozenset(("result", "placeholder"))

__all__ = ["ObservationMasking", "ClearToolUses", "create_observation_masking_policy",
           "create_clear_tool_uses_policy"]


class ObservationMasking:
    """SWE-agent's ``last_n_observations`` history processor: every tool result but the last ``n``
    (5 in SWE-agent 0.7's configurations) and the first is replaced by a one-line placeholder of
    ``placeholder_tokens`` ("Old environment output: (N lines omitted)"), re-applied at every
    step (``polling`` 1). Lindenbauer et al. 2025, "The Complexity Trap" (arXiv 2508.21433), used
    n = 10 and found it roughly halved cost at an equal solve rate on SWE-bench Verified.
    """

    TUNABLE = declare(Tunable("n", "int", 0, MAX_OPTION_INT, (0, 100),
                              doc="tool results kept unmasked (the last n; SWE-agent 5, Lindenbauer et al. 10)"))

    def __init__(self, n: int = 5, placeholder_tokens: int = 12) -> None:
        self.n = self.TUNABLE["n"].check(n)
        self.placeholder_tokens = positive_int("placeholder_tokens", placeholder_tokens, 0)

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        edits: list[Edit] = []
        first = next((i for i, item in enumerate(items) if item.role in _OBSERVATIONS), None)
        seen = 0
        for index, item in results_newest_first(items):
            if item.role == "placeholder":
                break   # older ones were masked at an earlier step
            seen += 1
            if seen > self.n and index != first:
                edits.append(Replace((item.id,), min(self.placeholder_tokens, item.tokens), "placeholder"))
        return edits

    def __repr__(self) -> str:
        return f"ObservationMasking(n={self.n}, placeholder_tokens={self.placeholder_tokens})"


class ClearToolUses:
    """Anthropic's API context editing, ``clear_tool_uses_20250919``: once the input reaches
    ``trigger_tokens`` (100,000), every tool result but those of the ``keep`` (3) most recent tool
    uses is cleared, replaced by a short placeholder of ``placeholder_tokens``, provided that
    frees at least ``clear_at_least`` tokens (0); no tool is excluded and tool inputs stay
    (``clear_tool_inputs`` false).
    """

    TUNABLE = declare(
        Tunable("trigger_tokens", "int", 1, MAX_OPTION_INT, (0.25, 1.0), window=True,
                doc="input tokens from which it clears (searched from a quarter of the window to all of it)"),
        Tunable("keep", "int", 0, MAX_OPTION_INT, (0, 20), doc="tool uses whose results stay"),
        Tunable("clear_at_least", "int", 0, MAX_OPTION_INT, (0.01, 0.25), window=True,
                doc="tokens a clearing must free, else nothing is cleared"))

    def __init__(self, trigger_tokens: int = 100_000, keep: int = 3, clear_at_least: int = 0,
                 placeholder_tokens: int = 10) -> None:
        self.trigger_tokens = self.TUNABLE["trigger_tokens"].check(trigger_tokens)
        self.keep = self.TUNABLE["keep"].check(keep)
        self.clear_at_least = self.TUNABLE["clear_at_least"].check(clear_at_least)
        self.placeholder_tokens = positive_int("placeholder_tokens", placeholder_tokens, 0)

    def trigger(self, window_tokens: int) -> int:
        """Where it clears, in tokens: ``trigger_tokens``, whatever the window."""
        return self.trigger_tokens

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        if window.tokens < self.trigger_tokens:
            return []
        cleared: list[TranscriptItem] = []
        seen = 0
        for _, item in results_newest_first(items):
            if item.role == "placeholder":
                break   # older ones were cleared before
            seen += 1
            if seen > self.keep:
                cleared.append(item)
        placeholders = [min(self.placeholder_tokens, item.tokens) for item in cleared]
        freed = sum(item.tokens for item in cleared) - sum(placeholders)
        if not cleared or freed < self.clear_at_least:
            return []
        return [Replace((item.id,), tokens, "placeholder") for item, tokens in zip(cleared, placeholders)]

    def __repr__(self) -> str:
        return (f"ClearToolUses(trigger_tokens={self.trigger_tokens}, keep={self.keep}, "
                f"clear_at_least={self.clear_at_least})")


def create_observation_masking_policy(**options) -> ObservationMasking:
    """SWE-agent's observation masking (see `ObservationMasking`)."""
    return ObservationMasking(**options)


def create_clear_tool_uses_policy(**options) -> ClearToolUses:
    """Anthropic's tool-result clearing (see `ClearToolUses`)."""
    return ClearToolUses(**options)
