"""A run summary as text: the cells of its tables, its Markdown tables and summary.md, for every renderer."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.labels import BOUND_NAMES
from ctxbench.sim.analysis.ranking import RANK_BY
from ctxbench.sim.analysis.summary import RunSummary
from ctxbench.sim.presentation.markdown import escape, frame_to_markdown

__all__ = ["fmt_ci", "ci_cell", "rank_cell", "describe_optimum", "describe_bracket", "describe_gap", "is_infeasible",
           "over_window_cell",
           "decision_cells", "decision_intro", "decision_markdown", "schedule_sentences", "has_gaps", "ranking_cells", "bracket_cells",
           "ranking_markdown", "purity_display", "purity_markdown", "policies_display", "policies_intro",
           "policies_markdown", "summary_markdown"]


def fmt_ci(row, metric: str, scale: float = 1.0, digits: int = 0, pct: bool = False) -> str:
    """``mean [lo–hi]`` of a metric in an aggregated row, scaled, as a percentage or a number."""
    mean, lo, hi = (row[metric] * scale, row[f"{metric}_lo"] * scale, row[f"{metric}_hi"] * scale)
    if pct:
        return f"{mean:.1%} [{lo:.1%}–{hi:.1%}]"
    return f"{mean:,.{digits}f} [{lo:,.{digits}f}–{hi:,.{digits}f}]"


def ci_cell(row, metric: str, scale: float = 1.0, digits: int = 0, pct: bool = False) -> str:
    """`fmt_ci`, or a dash for a metric the row does not define (the lower bound's latency)."""
    return "—" if pd.isna(row[metric]) else fmt_ci(row, metric, scale, digits, pct)


def rank_cell(row) -> str:
    """The rank, ``bound`` for a bracket row, ``—`` for an infeasible configuration (unranked)."""
    if not pd.isna(row["rank"]):
        return str(row["rank"])
    return "—" if is_infeasible(row) else "bound"


def describe_optimum(row: Mapping) -> str:
    """One row's re-reads as a multiple of its optimum (``"1.07× optimal"``, or ``"1.02–1.10× optimal
    (bracket)"`` where the optimum is not proven on every session); empty without one. Against an
    optimum of zero a multiple means nothing: the excess in tokens instead.

    >>> describe_optimum({"x_opt": 1.0712, "x_opt_high": 1.0712, "opt_exact": True})
    '1.07× optimal'
    >>> describe_optimum({"x_opt": 1.02, "x_opt_high": 1.104, "opt_exact": False})
    '1.02–1.10× optimal (bracket)'
    >>> describe_optimum({"x_opt": math.inf, "x_opt_high": math.inf, "opt_exact": True, "reread_tokens": 450.0})
    '+450 tokens over the optimum (zero)'
    >>> describe_optimum({"x_opt": float("nan")})
    ''

    A compaction policy's multiple is of its cost, over the cheapest compaction schedule with no more re-reads
    (``x_opt_of`` ``cost_tokens``):

    >>> describe_optimum({"x_opt": 1.4231, "x_opt_high": 1.4515, "opt_exact": False, "x_opt_of": "cost_tokens",
    ...                   "opt_sessions": 70, "sessions": 70})
    '1.42–1.45× cheapest schedule (bracket)'
    >>> describe_optimum({"x_opt": 1.39, "x_opt_high": 1.41, "opt_exact": False, "x_opt_of": "cost_tokens",
    ...                   "opt_sessions": 51, "sessions": 70})
    '1.39–1.41× cheapest schedule (bracket; 51 of 70 sessions, none re-reads as little on the others)'
    >>> describe_optimum({"x_opt": float("nan"), "x_opt_of": "cost_tokens", "opt_sessions": 0, "sessions": 3})
    'no schedule re-reads as little'
    """
    opt, high = row.get("x_opt"), row.get("x_opt_high")
    if row.get("x_opt_of") == "cost_tokens":
        if opt is None or pd.isna(opt):
            return "no schedule re-reads as little" if row.get("opt_sessions") == 0 else ""
        exact = _shown_exact(row)
        text = f"{opt:.2f}× cheapest schedule" if exact else f"{opt:.2f}–{high:.2f}× cheapest schedule (bracket"
        used, sessions = row.get("opt_sessions"), row.get("sessions")
        if used is not None and sessions is not None and not pd.isna(sessions) and used < sessions:
            text += ("; " if not exact else " (") + (f"{used:.0f} of {sessions:.0f} sessions, none re-reads as "
                                                     f"little on the others")
            return text + ")"
        return text + ("" if exact else ")")
    if opt is None or pd.isna(opt):
        return ""
    if math.isinf(opt):
        return f"+{row['reread_tokens']:,.0f} tokens over the optimum (zero)"
    if bool(row.get("opt_exact")):
        return f"{opt:.2f}× optimal"
    return f"{opt:.2f}–{high:.2f}× optimal (bracket)" if not math.isinf(high) else f"≥ {opt:.2f}× optimal (bracket)"


def _shown_exact(row: Mapping) -> bool:
    """Whether a policy's multiple of the cheapest schedule is shown as one number: met, or a bracket whose ends
    round alike (within 0.5%)."""
    return bool(row.get("opt_exact")) or math.isclose(row["x_opt"], row["x_opt_high"], rel_tol=5e-3)


def describe_bracket(row: Mapping) -> str:
    """One row's re-reads against the bracket's two bounds (``"2.30× lower, 1.10× Belady"``); empty without them.

    >>> describe_bracket({"x_lower": 2.3, "x_belady": 1.1, "excess_tokens": 900.0})
    '2.30× lower, 1.10× Belady'
    >>> describe_bracket({"x_lower": math.inf, "x_belady": math.inf, "excess_tokens": 450.0})
    '+450 tokens over lower, +450 over Belady (both zero)'
    >>> describe_bracket({"x_lower": math.inf, "x_belady": 1.5, "excess_tokens": 450.0})
    '+450 tokens over lower (zero), 1.50× Belady'
    """
    x, y = row.get("x_lower"), row.get("x_belady")
    if x is None or pd.isna(x):
        return ""
    if not math.isinf(x):
        return f"{x:.2f}× lower, {y:.2f}× Belady"
    excess = f"+{row['excess_tokens']:,.0f}"
    if math.isinf(y):   # the strategy's re-reads are its excess over both
        return f"{excess} tokens over lower, {excess} over Belady (both zero)"
    return f"{excess} tokens over lower (zero), {y:.2f}× Belady"


def describe_gap(row: Mapping) -> str:
    """One row's place against the optimum (`describe_optimum`), else against the bracket (`describe_bracket`);
    a bound names itself.

    >>> describe_gap({"bound": "optimum"})
    'the optimum'
    >>> describe_gap({"x_opt": 1.5, "x_opt_high": 1.5, "opt_exact": True, "x_lower": 3.0, "x_belady": 1.2})
    '1.50× optimal'
    """
    bound = row.get("bound")
    if isinstance(bound, str):
        return BOUND_NAMES[bound]
    return describe_optimum(row) or describe_bracket(row)


def is_infeasible(row: Mapping) -> bool:
    """Whether a ranked row is a configuration with a call above the window (not a bound, not unknown).

    >>> is_infeasible({"feasible": False}), is_infeasible({"feasible": None}), is_infeasible({})
    (True, False, False)
    """
    feasible = row.get("feasible")
    return feasible is not None and not pd.isna(feasible) and not bool(feasible)


def over_window_cell(row: Mapping) -> str:
    """A configuration's share of calls whose prompt was larger than the window (empty for a bound).

    >>> over_window_cell({"over_window_share": 0.4393, "over_window_calls": 16629}), over_window_cell({"bound": "lower"})
    ('43.9%', '')
    >>> over_window_cell({"over_window_share": 0.0, "over_window_calls": 0})
    '0'
    """
    if isinstance(row.get("bound"), str):
        return ""
    share, calls = row.get("over_window_share"), row.get("over_window_calls")
    if calls is not None and not pd.isna(calls) and calls == 0:
        return "0"
    if share is not None and not pd.isna(share):
        return f"{share:.1%}" if share >= 0.001 else f"{calls:,.0f} calls"
    return "" if calls is None or pd.isna(calls) else f"{calls:,.0f} calls"


def decision_cells(ranking: pd.DataFrame, *, thousands: bool = False) -> list[dict]:
    """The text of each row of the decision view (`sim.analysis.ranking.ranked`), in its order.

    Keys: ``rank`` (a number, ``—`` for an infeasible row, ``bound``), ``strategy`` (unescaped),
    ``model``, ``reread_tokens`` (thousands with ``thousands``), ``cost`` (``cost_tokens``: every call
    with the prompt cache, summarization calls and their output included, millions with ``thousands``; a dash for an infeasible row, which is never priced, for
    a bound and for results without costs), ``over_window`` (`over_window_cell`), ``x_opt``
    (`describe_optimum`; a bound names itself), ``compactions``, ``evict_p99_us``, ``frontier``
    (``yes`` on the Pareto frontier of cost against re-reads), ``bound`` and ``infeasible``.
    """
    cells = []
    scale, digits = (1e-3, 1) if thousands else (1.0, 0)
    cost_scale, cost_digits = (1e-6, 2) if thousands else (1.0, 0)
    for _, r in ranking.iterrows():
        bound = not pd.isna(r.get("bound"))
        infeasible = is_infeasible(r)
        has_cost = "cost_tokens" in r and not pd.isna(r["cost_tokens"])
        cells.append({
            "rank": "bound" if bound else ("—" if infeasible else str(r["rank"])),
            "strategy": r["strategy"],
            "model": "" if pd.isna(r.get("model")) else str(r.get("model")),
            "reread_tokens": fmt_ci(r, "reread_tokens", scale, digits),
            "cost": fmt_ci(r, "cost_tokens", cost_scale, cost_digits) if has_cost and not infeasible else "—",
            "over_window": over_window_cell(r),
            "x_opt": BOUND_NAMES[r["bound"]] if bound else describe_optimum(r),
            "compactions": ci_cell(r, "compactions", digits=1) if "compactions" in r else "—",
            "evict_p99_us": ci_cell(r, "evict_p99_ns", 1e-3, 1),
            "frontier": "yes" if bool(r.get("frontier")) else "",
            "bound": bound,
            "infeasible": infeasible,
        })
    return cells


def decision_intro(summary: RunSummary) -> str:
    """How to read the decision view of ``summary``."""
    infeasible = sum(is_infeasible(r) for _, r in summary.ranking.iterrows())
    text = (f"Which configuration for these {summary.sessions_at_budget} sessions at "
            f"{summary.budget_tokens:,.0f} tokens: every eviction strategy (model managed) and agent's context "
            f"policy (model transcript), mean per session with 95% bootstrap CIs, ranked by "
            f"{RANK_BY[summary.rank_by]} (`--rank-by {summary.rank_by}`), fewest first. Re-read tokens: content needed "
            f"again after it left the window, in both models. Cost: every call to the model with the prompt cache, "
            f"in input-token equivalents: each turn end's, and the summarization call before a compaction with "
            f"the summary it writes (output at 5× input). × optimum: re-reads over the offline optimum of the "
            f"same model (exact where proven); for a compaction policy, its cost over the cheapest compaction "
            f"schedule (opt:schedule) that re-reads no more. Frontier: no other feasible row costs less and "
            f"re-reads less.")
    if infeasible:
        text += (f" {infeasible} configuration{'s' if infeasible > 1 else ''} made calls whose prompt is larger "
                 f"than the window (a turn end's or a compaction's summarization call), which an API refuses: "
                 f"infeasible, listed after the ranked ones and not priced.")
    return " ".join([text, *schedule_sentences(summary.ranking)])


def schedule_sentences(ranking: pd.DataFrame) -> list[str]:
    """Where each compaction policy of a ranking stands against the cheapest compaction schedule (opt:schedule):
    its cost over the cheapest schedule with no more re-reads, and the cheapest schedule's cost and re-reads.

    >>> ranking = pd.DataFrame([
    ...     {"strategy": "claude-code", "bound": None, "feasible": True, "cost_tokens": 7.19e6, "reread_tokens": 138e3,
    ...      "x_opt": 1.39, "x_opt_high": 1.41, "opt_exact": False, "x_opt_of": "cost_tokens", "opt_sessions": 70,
    ...      "sessions": 70},
    ...     {"strategy": "opt:schedule", "bound": "schedule", "cost_tokens": 4.43e6, "reread_tokens": 338.8e3}])
    >>> print(schedule_sentences(ranking)[0])
    claude-code costs 1.39–1.41× the cheapest compaction schedule that re-reads no more (a bracket); the cheapest schedule of all (opt:schedule) costs 4.43M a session, 0.62× claude-code's 7.19M, and re-reads 338.8K tokens to its 138.0K.
    """
    if "x_opt_of" not in ranking.columns or "bound" not in ranking.columns:
        return []
    bound = ranking[ranking["bound"] == "schedule"]
    out = []
    for _, r in ranking[(ranking["x_opt_of"] == "cost_tokens") & ranking["bound"].isna()].iterrows():
        if is_infeasible(r):
            continue
        opt, high = r["x_opt"], r["x_opt_high"]
        if pd.isna(opt):
            text = f"{r['strategy']} re-reads less than any compaction schedule on every session"
        else:
            exact = _shown_exact(r)
            text = (f"{r['strategy']} costs {opt:.2f}× the cheapest compaction schedule that re-reads no more"
                    if exact else f"{r['strategy']} costs {opt:.2f}–{high:.2f}× the cheapest compaction schedule "
                                  f"that re-reads no more (a bracket)")
            used, sessions = r.get("opt_sessions"), r.get("sessions")
            if used is not None and not pd.isna(sessions) and used < sessions:
                text += f", on the {used:.0f} of {sessions:.0f} sessions where one does"
        if len(bound) == 1 and not pd.isna(bound["cost_tokens"].iloc[0]):
            b = bound.iloc[0]
            text += (f"; the cheapest schedule of all ({b['strategy']}) costs {b['cost_tokens'] / 1e6:.2f}M a "
                     f"session, {b['cost_tokens'] / r['cost_tokens']:.2f}× {r['strategy']}'s "
                     f"{r['cost_tokens'] / 1e6:.2f}M, and re-reads {b['reread_tokens'] / 1e3:.1f}K tokens to its "
                     f"{r['reread_tokens'] / 1e3:.1f}K")
        out.append(text + ".")
    return out


def decision_markdown(ranking: pd.DataFrame) -> str:
    """The decision view as GitHub markdown (names escaped)."""
    lines = ["| rank | configuration | model | re-read tokens [95% CI] | cost [95% CI] | calls over window "
             "| × optimum | compactions [95% CI] | evict p99 µs [95% CI] | frontier |",
             "|---:|---|---|---:|---:|---:|---|---:|---:|:-:|"]
    for c in decision_cells(ranking):
        lines.append(f"| {c['rank']} | {escape(c['strategy'])} | {c['model']} | {c['reread_tokens']} | {c['cost']} "
                     f"| {c['over_window']} | {c['x_opt']} | {c['compactions']} | {c['evict_p99_us']} "
                     f"| {c['frontier']} |")
    return "\n".join(lines)


def has_gaps(ranking: pd.DataFrame) -> bool:
    """Whether a ranking holds the bracket's rows, so that its tables show each gap to them."""
    return "bound" in ranking.columns and ranking["bound"].notna().any()


def ranking_cells(ranking: pd.DataFrame, *, thousands: bool = False) -> list[dict]:
    """The text of each ranked row, best first, bounds last.

    Keys: ``rank`` (`rank_cell`), ``strategy`` (the name as it is: each renderer escapes it its
    own way), ``pure`` (``yes``, ``no`` or empty for a bound or an unknown), ``stateful`` (a
    strategy, not a bound, that is not pure), ``bound`` (a bracket row), ``reread_tokens``
    (tokens, or thousands of tokens with ``thousands``), ``miss_rate``, ``capacity_miss_rate``
    (the misses a strategy causes, beside all misses), ``evict_p99_us`` (a dash where undefined)
    and ``gap`` (`describe_bracket`, or the bound's name; empty without a bracket).
    """
    gaps = has_gaps(ranking)
    cells = []
    for _, r in ranking.iterrows():
        pure = r.get("pure", True)
        bound = not pd.isna(r.get("bound"))
        cells.append({
            "rank": rank_cell(r),
            "strategy": r["strategy"],
            "pure": "" if "pure" not in r or pd.isna(r["pure"]) else ("yes" if r["pure"] else "no"),
            "stateful": not bound and not pd.isna(pure) and not pure,
            "bound": bound,
            "reread_tokens": fmt_ci(r, "reread_tokens", 1e-3, 1) if thousands else fmt_ci(r, "reread_tokens"),
            "miss_rate": fmt_ci(r, "miss_rate", pct=True),
            "capacity_miss_rate": ci_cell(r, "capacity_miss_rate", pct=True),
            "evict_p99_us": ci_cell(r, "evict_p99_ns", 1e-3, 1),
            "gap": (BOUND_NAMES[r["bound"]] if bound else describe_bracket(r)) if gaps else "",
        })
    return cells


def bracket_cells(gaps: pd.DataFrame) -> pd.DataFrame:
    """`describe_gap` of each row of `sim.analysis.bracket.bracket_gaps` (one claim mode), one row per
    strategy (the index) and one column per budget; empty where a strategy has no gap at a budget."""
    cells = gaps.assign(cell=[describe_gap(row) for _, row in gaps.iterrows()])
    return cells.pivot(index="strategy", columns="budget_tokens", values="cell").fillna("")


def ranking_markdown(ranking: pd.DataFrame) -> str:
    """The misses of each row of the decision view, in its order, as GitHub markdown (names escaped); with a
    bracket, its bounds and each gap to them."""
    gaps = has_gaps(ranking)
    lines = ["| rank | configuration | pure | miss rate [95% CI] | capacity miss rate [95% CI] |"
             + (" re-reads vs bracket |" if gaps else ""),
             "|---:|---|:-:|---:|---:|" + ("---|" if gaps else "")]
    for c in ranking_cells(ranking):
        lines.append(f"| {c['rank']} | {escape(c['strategy'])} | {c['pure']} | {c['miss_rate']} | "
                     f"{c['capacity_miss_rate']} |" + (f" {c['gap']} |" if gaps else ""))
    return "\n".join(lines)


def purity_display(table: pd.DataFrame) -> pd.DataFrame:
    """`sim.analysis.purity.price_of_purity`'s rows as short strings (re-read in thousands of
    tokens, miss rate) for a table; a claim-mode column only when the rows hold several modes.

    >>> t = pd.DataFrame([{"trace": "mixed", "budget_tokens": 200_000, "best_pure": "gdsf",
    ...     "pure_reread_tokens": 3_900.0, "pure_miss_rate": 0.551, "best_stateful": "arc",
    ...     "stateful_reread_tokens": 8_100.0, "stateful_miss_rate": 0.555,
    ...     "reread_tokens_diff": -4_200.0, "reread_tokens_ratio": 0.48}])
    >>> purity_display(t).iloc[0].tolist()
    ['mixed', '200k', 'gdsf 3.9k, 55.1%', 'arc 8.1k, 55.5%', '-4.2k', '×0.48']
    """

    def ratio(x: float) -> str:   # pure over stateful; against a stateful 0 only the difference means anything
        return "—" if np.isinf(x) else f"×{x:.2f}"

    def best(kind: str) -> list[str]:
        return [f"{n} {t / 1e3:,.1f}k, {m:.1%}" for n, t, m in
                zip(table[f"best_{kind}"], table[f"{kind}_reread_tokens"], table[f"{kind}_miss_rate"])]

    shown = pd.DataFrame({"trace": table["trace"]})
    if "claims" in table.columns and table["claims"].nunique() > 1:  # several modes: tell rows apart
        shown["claims"] = table["claims"].fillna("")
    return shown.assign(**{
        "budget": [f"{b / 1e3:,.0f}k" if b >= 1e3 else f"{b:,.0f}" for b in table["budget_tokens"]],
        "best pure": best("pure"),
        "best stateful": best("stateful"),
        "price": [f"{v / 1e3:+,.1f}k" for v in table["reread_tokens_diff"]],
        "ratio": [ratio(v) for v in table["reread_tokens_ratio"]],
    })


def purity_markdown(table: pd.DataFrame) -> str:
    """The price-of-purity section of ``summary.md``: a sentence on how to read it and the table."""
    return ("Per trace and budget, the best pure strategy against the best stateful one: re-read tokens "
            "(thousands) and miss rate, mean per session. Price = pure − stateful re-read tokens: positive "
            "is what the purity rule costs, negative means a pure strategy did better.\n\n"
            + frame_to_markdown(purity_display(table)))


def policies_display(table: pd.DataFrame) -> pd.DataFrame:
    """`sim.analysis.policies.compare_policies`' rows as short strings for a table: tokens in thousands, the
    cache's saving (of the input) as a percentage, dollars when priced.

    >>> t = pd.DataFrame([{"strategy": "claude-code", "model": "transcript", "sessions": 2,
    ...     "input_tokens": 31_000_000.0, "summary_input_tokens": 500_000.0, "summary_output_tokens": 12_000.0,
    ...     "cost_tokens": 4_260_000.0, "cost_input_tokens": 4_200_000.0, "cache_saving": 0.865,
    ...     "reread_tokens": 12_500.0, "compactions": 3, "cache_read_input_tokens": 29e6,
    ...     "cache_write_input_tokens": 2e6, "peak_window_tokens": 171_000.0}])
    >>> policies_display(t).iloc[0].tolist()
    ['claude-code', 'transcript', '31,000.0k', '12.0k', '4,260.0k', '86.5%', '12.5k', '3', '—', '171.0k', '0']
    >>> policies_display(t.assign(input_tokens=math.nan, summary_output_tokens=math.nan, cost_tokens=math.nan,
    ...                           cache_saving=math.nan, over_window_calls=40)).iloc[0].tolist()[2:6]
    ['—', '—', '—', '—']
    """
    def thousands(values) -> list[str]:
        return ["—" if pd.isna(v) else f"{v / 1e3:,.1f}k" for v in values]

    over = table["over_window_calls"] if "over_window_calls" in table.columns else pd.Series(0, index=table.index)
    shown = pd.DataFrame({
        "policy or strategy": table["strategy"].astype(str), "model": table["model"].astype(str),
        "billed input": thousands(table["input_tokens"]),
        "summaries": thousands(table["summary_output_tokens"]),
        "cost": thousands(table["cost_tokens"]),
        "cache saves": ["—" if pd.isna(v) else f"{v:.1%}" for v in table["cache_saving"]],
        "re-fetched": [f"{v / 1e3:,.1f}k" for v in table["reread_tokens"]],
        "compactions": [f"{int(v):,}" for v in table["compactions"]],
        "left out of summaries": thousands(table.get("summary_dropped_tokens", pd.Series(math.nan, index=table.index))),
        "peak window": [f"{v / 1e3:,.1f}k" for v in table["peak_window_tokens"]],
        "calls over window": [f"{int(v):,}" for v in over],
    })
    if "cost_usd" in table.columns:
        shown["cost $"] = ["—" if pd.isna(v) else f"{v:,.2f}" for v in table["cost_usd"]]
    return shown


def policies_intro(summary: RunSummary) -> str:
    """How to read the "Context policies" table of ``summary``."""
    ttl = {"5m": "the 5-minute prompt cache (writes 1.25×, reads 0.1×)",
           "1h": "the 1-hour prompt cache (writes 2×, reads 0.1×)",
           "off": "no prompt cache"}.get(summary.cache_ttl or "5m")
    price = summary.price
    output = price.get("usd_per_mtok_output") if price else None
    priced = (f" Dollars at {price['model']}'s ${price['usd_per_mtok']:g} per million input tokens"
              + (f" and ${output:g} per million output tokens" if output is not None else "")
              + f" ({price['source']}, {price['checked']}).") if price else ""
    return (f"Each real agent's context policy (model *transcript*: append-only, a re-read adds a copy, the policy "
            f"compacts or masks) and each managed strategy (model *managed*: one copy per file, the strategy "
            f"evicts) on the same sessions at {summary.budget_tokens:,.0f} tokens, totals over sessions, in the "
            f"decision view's order: input tokens billed over every call (a compaction that writes a summary is "
            f"first a summarization call, its prompt the window before it or what the policy sends, trimmed to fit "
            f"where the agent trims it), the summaries those calls wrote "
            f"(output tokens), the cost of every call in input-token equivalents with {ttl} and output at 5× "
            f"input (cache saves: the input's cost against its tokens), tokens re-fetched (needed again after "
            f"they left the window by eviction, masking or compaction), compactions, what trimmed compaction "
            f"requests left out of the summaries (history a summary was written without), the largest window within a "
            f"turn, and the calls whose prompt was larger than the window, summarization calls included: a "
            f"configuration with any is not priced (an API refuses such a call).{priced}")


def policies_markdown(summary: RunSummary) -> str:
    """The "Context policies" section's text and table."""
    return policies_intro(summary) + "\n\n" + frame_to_markdown(policies_display(summary.policies))


def _ratios_lines(cfg: Mapping) -> list[str]:
    """Which token ratios the sessions were counted with (by model family, or given), when the run says."""
    used = cfg.get("session_ratios")
    if not isinstance(used, Mapping) or not used:
        return []
    parts = [f"{escape(str(label))} ({len(entry.get('sessions', []))} session"
             f"{'' if len(entry.get('sessions', [])) == 1 else 's'})"
             for label, entry in used.items() if isinstance(entry, Mapping)]
    return [f"- token ratios ({escape(str(cfg.get('ratios_by', 'given')))}): {', '.join(parts)}"]


def summary_markdown(summary: RunSummary) -> str:
    """``summary.md``: the run's configuration (from ``meta.json`` as `ctxbench run` writes it), the
    decision view and the misses at the headline budget, then, when there is data, the claim-mode totals over every
    budget and the price of purity over every claim mode. Names escaped (`escape`)."""
    meta = summary.meta
    cfg = meta["config"]
    lines = [
        "# ctxbench run",
        "",
        f"- ctxbench {escape(meta['ctxbench_version'])}, commit {escape(meta.get('git_commit') or 'n/a')}, "
        f"{escape(meta['created'])}",
        f"- workload: {escape(json.dumps(cfg['workload']))}",
        f"- sessions: {summary.sessions}, strategies: {', '.join(escape(s) for s in cfg['strategies'])}",
        f"- budgets (tokens): {', '.join(f'{b:,.0f}' for b in cfg['budgets_tokens'])}, "
        f"bytes per token: {cfg['bytes_per_token']}",
        *_ratios_lines(cfg),
        f"- mode: {'lenient' if cfg['lenient'] else 'strict'}, violations: {summary.violations}",
        "",
        f"## Decision at {summary.budget_tokens:,.0f} tokens",
        "",
        decision_intro(summary),
        "",
        decision_markdown(summary.ranking),
        "",
        f"## Misses at {summary.budget_tokens:,.0f} tokens",
        "",
        ranking_markdown(summary.ranking),
        "",
    ]
    text = "\n".join(lines)
    if not summary.claim_modes.empty:
        text += "\n## Claim modes (multi-arm sessions, totals)\n\n" + frame_to_markdown(summary.claim_modes) + "\n"
    if not summary.policies.empty:
        text += "\n## Context policies\n\n" + policies_markdown(summary) + "\n"
    if not summary.purity.empty:
        text += "\n## Price of purity\n\n" + purity_markdown(summary.purity) + "\n"
    return text
