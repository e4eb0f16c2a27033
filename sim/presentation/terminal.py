"""The terminal renderer: a run summary as rich tables (ranking, price of purity, claim modes) and its violations."""

from __future__ import annotations

import pandas as pd
from rich import box
from rich.table import Table

from ctxbench.sim.analysis.summary import RunSummary
from ctxbench.sim.presentation.console import console
from ctxbench.sim.presentation.summary_text import (decision_cells, has_gaps, policies_display, purity_display,
                                                   ranking_cells, schedule_sentences)

__all__ = ["print_summary", "print_frame"]


def print_summary(summary: RunSummary) -> None:
    """Print what ``ctxbench run`` shows of a run: the decision view at the headline budget (feasible
    configurations ranked, infeasible ones after, bounds in a section of their own); the misses in
    the same order (each gap to the bracket with one); the price of purity over every claim
    mode when pure and stateful strategies both ran; the claim-mode totals at the headline budget
    when multi-arm sessions ran; the context policies against the managed strategies when a policy
    ran; and, with violations counted, their number and the first message."""
    _print_decision(summary)
    for sentence in schedule_sentences(summary.ranking):
        console().print(sentence, highlight=False)
    _print_misses(summary)
    if not summary.policies.empty:
        print_frame(policies_display(summary.policies),
                    f"Context policies at {summary.budget_tokens:,.0f} tokens: billed input, summaries written, cost "
                    f"with the prompt cache ({summary.cache_ttl or '5m'}), re-fetched tokens, compactions (totals "
                    f"over sessions)")
    if not summary.purity.empty:
        print_frame(purity_display(summary.purity), "Price of purity: best pure vs best stateful strategy "
                                                    "(re-read ktokens, miss rate; mean per session)")
    if not summary.claim_modes.empty:
        shown = summary.claim_modes_at_budget
        print_frame(pd.DataFrame({"strategy": shown["strategy"], "claims": shown["claims"],
                                  "lines lost": shown["lines_lost"], "overwrites": shown["thrashing_events"],
                                  "inval. misses": shown["invalidation_misses"],
                                  "blocked turns": shown["blocked_turns"],
                                  "blocked min": shown["blocked_ms"] / 60_000}),
                    "Claim modes on multi-arm sessions (totals over sessions and arms)")
    if summary.violations:
        first = f"; first: {summary.violation_messages[0]}" if summary.violation_messages else ""
        print(f"{summary.violations} contract violations counted (lenient){first}")


def _print_decision(summary: RunSummary) -> None:
    t = Table(title=f"Which configuration at {summary.budget_tokens:,.0f} tokens: mean per session over "
                    f"{summary.sessions_at_budget} sessions [95% CI], ranked by {summary.rank_by}",
              box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True)
    for col, justify in (("#", "right"), ("configuration", "left"), ("model", "left"), ("re-read ktokens", "right"),
                         ("cost Mtokens", "right"), ("over window", "right"), ("× optimum", "left"),
                         ("compactions", "right"), ("evict p99 µs", "right"), ("Pareto", "center")):
        wraps = col in ("configuration", "× optimum")
        t.add_column(col, justify=justify, no_wrap=not wraps, overflow="fold",
                     min_width=21 if col == "configuration" else None, max_width=16 if col == "× optimum" else None)
    cells = decision_cells(summary.ranking, thousands=True)
    for i, c in enumerate(cells):
        following = cells[i + 1] if i + 1 < len(cells) else None
        section_ends = following is not None and (c["bound"], c["infeasible"]) != (following["bound"],
                                                                                   following["infeasible"])
        t.add_row(c["rank"], c["strategy"], c["model"], *(_stacked(c[k]) for k in ("reread_tokens", "cost")),
                  c["over_window"], c["x_opt"].replace("× optimal", "×").replace("× cheapest schedule", "× schedule").replace(" (PFOO-L)", "").replace(
                      " (Belady-Size)", ""),
                  *(_stacked(c[k]) for k in ("compactions", "evict_p99_us")), "◆" if c["frontier"] else "",
                  end_section=section_ends)
    console().print(t)


def _stacked(cell: str) -> str:
    """A ``mean [lo–hi]`` cell on two lines, the interval under the mean (a constant's interval is left out)."""
    mean, _, interval = cell.partition(" [")
    if not interval or interval == f"{mean}–{mean}]":
        return mean
    return f"{mean}\n[{interval}"


def _print_misses(summary: RunSummary) -> None:
    t = Table(title=f"Misses at {summary.budget_tokens:,.0f} tokens, in the same order [95% CI]")
    gaps = has_gaps(summary.ranking)
    for col, justify in (("#", "right"), ("configuration", "left"), ("miss rate", "right"),
                         ("capacity misses", "right")) + ((("re-reads vs bracket", "left"),) if gaps else ()):
        t.add_column(col, justify=justify)
    cells = ranking_cells(summary.ranking, thousands=True)
    for i, c in enumerate(cells):
        last_ranked = not c["bound"] and (i + 1 == len(cells) or cells[i + 1]["bound"])  # bounds follow
        t.add_row(c["rank"], c["strategy"] + (" (stateful)" if c["stateful"] else ""), c["miss_rate"],
                  c["capacity_miss_rate"], *((c["gap"],) if gaps else ()), end_section=gaps and last_ranked)
    console().print(t)


def print_frame(frame: pd.DataFrame, title: str) -> None:
    """``frame`` as a rich table: numbers right-aligned with thousands separators, text left-aligned."""
    t = Table(title=title)
    for col in frame.columns:
        t.add_column(str(col), justify="left" if frame[col].dtype == object else "right")
    for row in frame.itertuples(index=False):
        t.add_row(*(f"{v:,.0f}" if isinstance(v, (int, float)) else str(v) for v in row))
    console().print(t)
