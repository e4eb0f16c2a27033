"""The labels of the optimal bracket's rows, for the analysis that makes them and the presentation that names them."""

from __future__ import annotations

__all__ = ["BRACKET_LOWER", "BRACKET_UPPER", "BRACKET_EXACT", "BRACKET_LABELS", "BOUND_KINDS", "BOUND_NAMES", "is_bracket",
           "policy_rows"]

BRACKET_LOWER = "opt:lower"            # PFOO-L lower bound (`sim.analysis.bracket.pfoo_lower_bound`)
BRACKET_UPPER = "opt:belady-size"      # offline Belady-Size replay (`sim.analysis.bracket.belady_size_replay`)
BRACKET_EXACT = "opt:exact"            # the offline optimum (`sim.analysis.optimum.optimum_result`)
BRACKET_LABELS = (BRACKET_LOWER, BRACKET_UPPER, BRACKET_EXACT)
# The ``bound`` column of a ranking (`sim.analysis.ranking.ranked`) per bracket label, and how a bound names itself.
BOUND_KINDS = {BRACKET_LOWER: "lower", BRACKET_UPPER: "upper", BRACKET_EXACT: "optimum"}
BOUND_NAMES = {"lower": "lower bound (PFOO-L)", "upper": "upper bound (Belady-Size)", "optimum": "the optimum"}


def is_bracket(label: str) -> bool:
    """Whether a strategy label names a row of the optimal bracket.

    >>> is_bracket("opt:lower"), is_bracket("lru")
    (True, False)
    """
    return label in BRACKET_LABELS


def policy_rows(frame):
    """Which rows of a results frame are a context policy's (``model`` ``transcript``) or a compacted strategy's
    (``STRATEGY+POLICY``): compared in the "Context policies" section, not with the managed model's optimal
    bracket or in the price of purity."""
    transcript = frame["model"].eq("transcript") if "model" in frame.columns else False
    return frame["strategy"].astype(str).str.contains("+", regex=False) | transcript
