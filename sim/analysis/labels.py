"""The labels of the optimal bracket's rows, for the analysis that makes them and the presentation that names them."""

from __future__ import annotations

__all__ = ["BRACKET_LOWER", "BRACKET_UPPER", "BRACKET_EXACT", "BRACKET_LABELS", "SCHEDULE_BOUND", "BOUND_KINDS",
           "BOUND_NAMES", "is_bracket", "is_schedule_bound", "bound_kind", "policy_rows"]

BRACKET_LOWER = "opt:lower"            # PFOO-L lower bound (`sim.analysis.bracket.pfoo_lower_bound`)
BRACKET_UPPER = "opt:belady-size"      # offline Belady-Size replay (`sim.analysis.bracket.belady_size_replay`)
BRACKET_EXACT = "opt:exact"            # the offline optimum (`sim.analysis.optimum.optimum_result`)
BRACKET_LABELS = (BRACKET_LOWER, BRACKET_UPPER, BRACKET_EXACT)
#: The cheapest compaction schedule (`sim.analysis.schedule_bound`); ``opt:schedule?summary_tokens=N&read_tokens=M``
#: when a run measures policies of several summaries.
SCHEDULE_BOUND = "opt:schedule"
# The ``bound`` column of a ranking (`sim.analysis.ranking.ranked`) per bracket label, and how a bound names itself.
BOUND_KINDS = {BRACKET_LOWER: "lower", BRACKET_UPPER: "upper", BRACKET_EXACT: "optimum"}
BOUND_NAMES = {"lower": "lower bound (PFOO-L)", "upper": "upper bound (Belady-Size)", "optimum": "the optimum",
               "schedule": "the cheapest compaction schedule"}


def is_schedule_bound(label) -> bool:
    """Whether a strategy label names a row of the cheapest compaction schedule.

    >>> is_schedule_bound("opt:schedule"), is_schedule_bound("opt:schedule?summary_tokens=8000"), is_schedule_bound("schedule")
    (True, True, False)
    """
    return isinstance(label, str) and (label == SCHEDULE_BOUND or label.startswith(SCHEDULE_BOUND + "?"))


def is_bracket(label) -> bool:
    """Whether a strategy label names a bound's row: the optimal bracket's or the cheapest schedule's.

    >>> is_bracket("opt:lower"), is_bracket("opt:schedule"), is_bracket("lru")
    (True, True, False)
    """
    return label in BRACKET_LABELS or is_schedule_bound(label)


def bound_kind(label) -> str | None:
    """The ``bound`` of a ranking's row labelled ``label`` (`BOUND_KINDS`, ``schedule``), None for a contender.

    >>> bound_kind("opt:exact"), bound_kind("opt:schedule"), bound_kind("lru")
    ('optimum', 'schedule', None)
    """
    return "schedule" if is_schedule_bound(label) else BOUND_KINDS.get(label)


def policy_rows(frame):
    """Which rows of a results frame are a context policy's (``model`` ``transcript``) or a compacted strategy's
    (``STRATEGY+POLICY``): compared in the "Context policies" section, not with the managed model's optimal
    bracket or in the price of purity."""
    transcript = frame["model"].eq("transcript") if "model" in frame.columns else False
    return frame["strategy"].astype(str).str.contains("+", regex=False) | transcript
