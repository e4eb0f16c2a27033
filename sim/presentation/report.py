"""The human report of a results directory: figures (PNG, SVG), report.md and a self-contained report.html."""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ctxbench.sim.analysis.labels import BRACKET_EXACT, BRACKET_LOWER, BRACKET_UPPER
from ctxbench.sim.analysis.summary import ClaimFocus, RunSummary, summarise_run
from ctxbench.sim.errors import InputError
from ctxbench.sim.presentation import plots
from ctxbench.sim.presentation.jobs import Job, run_jobs
from ctxbench.sim.presentation.markdown import escape, frame_to_markdown, inline_html, split_row
from ctxbench.sim.folder_lock import folder_lock
from ctxbench.sim.output import OutputDir
from ctxbench.sim.presentation.results_schema import ARMS_SPEC, SCHEDULES_SPEC, check_table
from ctxbench.sim.presentation.results import ARMS_FILE, RESULTS_FILE, SCHEDULES_FILE, Results, load_results
from ctxbench.sim.presentation.summary_text import (bracket_cells, decision_intro, decision_markdown, policies_markdown,
                                           purity_display, ranking_markdown)

__all__ = ["REPORT_MD", "REPORT_HTML", "FIGURES_DIR", "Report", "ReportPlan", "write_report", "render_report",
           "plan_report", "report_blocks", "is_report_file"]

REPORT_MD, REPORT_HTML, FIGURES_DIR = "report.md", "report.html", "figures"
FIGURE_DPI = 150
REQUIRED = ("trace", "session", "strategy", "budget_tokens", "miss_rate", "reread_tokens", "evict_p99_ns")
TURN_REQUIRED = ("trace", "session", "strategy", "budget_tokens", "turn", "hits", "compulsory", "capacity",
                 "invalidation", "evictions", "occupancy_bytes", "evict_ns")


@dataclass
class Report:
    """Where a report was written."""

    out_dir: Path
    markdown: Path
    html: Path
    figures: list[Path] = field(default_factory=list)


@dataclass
class _Figure:
    slug: str
    title: str
    caption: str


# A report is a list of blocks, rendered once as markdown and once as HTML.
# ("h", level, text) | ("p", text) | ("ul", [items]) | ("table", markdown) | ("fig", _Figure)


def _check(res: Results) -> None:
    where = res.path or "results"
    missing = [c for c in REQUIRED if c not in res.results.columns]
    if missing:
        raise InputError(f"{where}/{RESULTS_FILE}: missing column(s) {', '.join(missing)}")
    if not len(res.results):
        raise InputError(f"{where}/{RESULTS_FILE}: no rows")
    if len(res.turns):
        missing = [c for c in TURN_REQUIRED if c not in res.turns.columns]
        if missing:
            raise InputError(f"{where}: per-turn log lacks column(s) {', '.join(missing)}")


def _config_items(summary: RunSummary) -> list[str]:
    meta = summary.meta
    cfg = meta.get("config") or {}
    items = []
    if meta.get("ctxbench_version"):
        items.append(f"ctxbench {escape(meta['ctxbench_version'])}, commit {escape(meta.get('git_commit') or 'n/a')}, "
                     f"created {escape(meta.get('created', 'n/a'))}")
    if cfg.get("workload"):
        items.append(f"workload: {escape(json.dumps(cfg['workload'], sort_keys=True))}")
    items.append(f"traces: {summary.traces}, sessions: {summary.sessions}, rows: {summary.rows:,}")
    items.append("strategies: " + ", ".join(escape(s) for s in summary.strategies))
    items.append("budgets (tokens): " + ", ".join(f"{b:,.0f}" for b in summary.budgets)
                 + f"; bytes per token: {summary.bytes_per_token:g}")
    if "lenient" in cfg:
        items.append(f"mode: {'lenient' if cfg['lenient'] else 'strict'}; contract violations counted: "
                     f"{summary.violations}")
    machine = meta.get("machine")
    if machine:
        items.append(f"machine: {escape(machine.get('platform', '?'))}, Python {escape(machine.get('python', '?'))}, "
                     f"{escape(machine.get('cores', '?'))} cores")
    if meta.get("elapsed_s") is not None:
        items.append(f"elapsed: {meta['elapsed_s']:.1f} s")
    return items


def _miss_rate_table(by_budget: pd.DataFrame) -> str:
    table = by_budget.set_axis([f"{plots.tokens_label(b)} tokens" for b in by_budget.columns], axis=1)
    lines = frame_to_markdown(table.map(lambda v: f"{v:.1%}").reset_index()).splitlines()
    lines[1] = "|---|" + "---:|" * len(table.columns)  # the cells are formatted numbers: right-align them
    return "\n".join(lines)


def _bracket_blocks(gaps: pd.DataFrame) -> list:
    if gaps.empty:
        return []
    table = bracket_cells(gaps)
    table.columns = [f"{plots.tokens_label(b)} tokens" for b in table.columns]
    return [("h", 2, "Optimal bracket"),
            ("p", f"No online strategy can beat the offline optimum (`{BRACKET_EXACT}`: the fewest re-read tokens "
                  "any schedule achieves, solved exactly per session as an integer program). Each cell gives a "
                  "strategy's re-read tokens (totals over sessions) as a multiple of it (`× optimal`); where the "
                  "optimum was not proven within the solver's limits, the range between the best schedule found "
                  f"and the proven lower bound (`(bracket)`). Without the optimum, the multiples of the lower bound "
                  f"(`{BRACKET_LOWER}`, PFOO-L) and of a feasible offline policy (`{BRACKET_UPPER}`). The curves "
                  "draw the optimum and both bounds as dashed lines."),
            ("table", frame_to_markdown(table.reset_index()))]


def _violation_blocks(summary: RunSummary) -> list:
    if not summary.violations:
        return []
    items = [f"{escape(s, line_start=True)}: {n:,}" for s, n in summary.violations_by_strategy.items()]
    examples = [escape(m, line_start=True) for m in summary.violation_messages[:5]]
    blocks: list = [("h", 2, "Contract violations"),
                    ("p", f"{summary.violations:,} violations were counted (lenient mode); their turns were repaired "
                          "by dropping the oldest entries, so these strategies' numbers are not their own."),
                    ("ul", items)]
    if examples:
        blocks += [("p", "First messages:"), ("ul", examples)]
    return blocks


def _arms(res: Results) -> pd.DataFrame:
    """The per-arm rows of multi-arm sessions (``arms.parquet`` beside the results), or an empty frame."""
    arms = _beside(res, ARMS_FILE)
    return check_table(arms, ARMS_SPEC, res.path / ARMS_FILE) if len(arms) else arms


def _schedules(res: Results) -> pd.DataFrame:
    """The hull points of each session's cheapest schedules (``schedules.parquet`` beside the results), or an
    empty frame."""
    schedules = _beside(res, SCHEDULES_FILE)
    if len(schedules):
        check_table(schedules, SCHEDULES_SPEC, res.path / SCHEDULES_FILE)
    return schedules


def _beside(res: Results, name: str) -> pd.DataFrame:
    """A Parquet file beside the results, or an empty frame where there is none."""
    path = res.path / name if res.path is not None else None
    if path is None or not path.is_file():
        return pd.DataFrame()
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


_CLAIM_COLUMNS = {"claims": "claim mode", "arm": "arm", "lines_lost": "lines lost", "thrashing_events": "overwrites",
                  "invalidation_misses": "invalidation re-reads", "blocked_turns": "blocked turns"}


def _claim_blocks(focus: ClaimFocus | None, figure: _Figure | None) -> list:
    if focus is None:
        return []
    totals = focus.totals.assign(blocked_min=(focus.totals["blocked_ms"] / 60_000).round(1))
    cols = _CLAIM_COLUMNS | {"blocked_min": "blocked min", "handoffs": "handoffs", "pauses": "pauses"}

    def table(frame: pd.DataFrame, cols: dict[str, str]) -> str:
        return frame_to_markdown(frame[[c for c in cols if c in frame.columns]].rename(columns=cols))

    blocks = [("h", 2, "Claim modes"),
              ("p", f"The multi-arm sessions ({focus.sessions}) replayed under each claim mode, with "
                    f"{escape(focus.strategy)} at {focus.budget_tokens:,.0f} tokens, totals over sessions and arms. "
                    "Lines lost: unsaved lines of one arm overwritten by another; overwrites: those thrashing "
                    "events; invalidation re-reads: accesses that missed because another arm changed the file; "
                    "blocked turns: turns an arm waited for a claim or was paused."),
              ("table", table(totals, cols)),
              ("p", "Per arm:"),
              ("table", table(focus.per_arm, _CLAIM_COLUMNS))]
    return blocks + ([("fig", figure)] if figure is not None else [])


def _purity_blocks(summary: RunSummary, figure: _Figure | None) -> list:
    if summary.purity.empty:
        return []
    mode = summary.purity_mode
    blocks = [("h", 2, "Price of purity"),
              ("p", "Per trace and budget, the best pure strategy (replay-pure contract) against the best stateful "
                    "one: mean re-read tokens (thousands) and miss rate per session. Price = pure − stateful "
                    "re-read tokens: positive is what the purity rule costs, negative means a pure strategy did "
                    "better." + (f" Claim mode {escape(mode)}." if mode is not None else "")),
              ("table", frame_to_markdown(purity_display(summary.purity_shown)))]
    return blocks + ([("fig", figure)] if figure is not None else [])


def _policy_blocks(summary: RunSummary, figure: _Figure | None) -> list:
    """The "Context policies" section: policies and managed strategies by cost, re-fetched tokens and
    compactions, and the figure of cost against re-fetched tokens; nothing unless a policy ran."""
    if summary.policies.empty:
        return []
    intro, table = policies_markdown(summary).split("\n\n", 1)
    blocks = [("h", 2, "Context policies"), ("p", intro), ("table", table)]
    return blocks + ([("fig", figure)] if figure is not None else [])


def _section_figures(summary: RunSummary, arms: pd.DataFrame,
                     colors: dict[str, str]) -> list[tuple[_Figure, Callable]]:
    """The figures shown inside the claim-mode and price-of-purity sections, when there is data."""
    out: list[tuple[_Figure, Callable]] = []
    focus = summary.claim_focus
    if focus is not None:
        at = plots.tokens_label(focus.budget_tokens)
        out.append((_Figure("claim_modes", f"Claim modes: {focus.strategy} at {at} tokens",
                            "Per claim mode, totals over the multi-arm sessions and their arms (symmetric-log "
                            "axis: exact values on the bars)."),
                    lambda: plots.claim_modes_bars(arms, strategy=focus.strategy, budget_tokens=focus.budget_tokens)))
    if not summary.policies.empty:
        out.append((_Figure("policy_tradeoff", "Cost against re-fetched tokens",
                            "One point per feasible context policy (squares) and managed strategy (circles): the "
                            "cost of every call (summarization calls and their output included) with the prompt "
                            "cache against the tokens fetched again after they left "
                            "the window, totals over sessions at the headline budget; the dashed steps are the "
                            "Pareto frontier, the dotted line the cheapest compaction schedules (opt:schedule) "
                            "where a compaction policy ran. Configurations with a call above the window are not priced (named "
                            "under the axes). Lower left is better."),
                    lambda: plots.policy_tradeoff(summary.policies, colors=colors,
                                                  budget_tokens=summary.budget_tokens,
                                                  schedules=summary.schedule_frontier)))
    if not summary.purity.empty:
        out.append((_Figure("price_of_purity", "Price of purity",
                            "Mean re-read tokens per session of the best pure strategy (left) and the best "
                            "stateful one (right, hatched), per trace and budget; each bar names its strategy."),
                    lambda: plots.purity_bars(summary.purity_shown, colors=colors)))
    return out


def _figures(res: Results, summary: RunSummary, colors: dict[str, str]) -> list[tuple[_Figure, Callable]]:
    """The report's figures as (description, builder) pairs, in reading order."""
    r, t = res.results, res.turns
    budget = summary.budget_tokens
    out: list[tuple[_Figure, Callable]] = []
    if len(summary.budgets) > 1:
        out.append((_Figure("miss_ratio_curve", "Miss rate vs budget",
                            "Mean miss rate over sessions at each budget; bands are 95% bootstrap CIs, dashed "
                            "lines the optimal bracket when it was run."),
                    lambda: plots.miss_ratio_curve(r, colors=colors)))
    out.append((_Figure("reread_tokens", "Re-read tokens by budget",
                        "Tokens re-read after capacity misses, per session (mean, 95% CI), strategies in ranking "
                        "order."),
                lambda: plots.reread_bars(r, colors=colors, order=summary.ranking["strategy"].tolist())))
    focus = summary.focus
    if focus is None:
        return out
    at = f"{plots.tokens_label(focus.budget_tokens)} tokens"
    out += [
        (_Figure("latency_cdf", f"Eviction latency at {plots.tokens_label(budget)} tokens",
                 "Distribution of the wall time of each `evict` call (machine-dependent; compare strategies "
                 "within one run)."),
         lambda: plots.latency_cdf(t, budget, colors=colors)),
        (_Figure("occupancy", f"Context occupancy, session {focus.key}, {at}",
                 "Tokens resident after each turn's eviction; the dotted line is the budget. The session is "
                 "the one with the most capacity misses unless one was chosen (`--session`), at the headline "
                 "budget or, when nothing is evicted there, the largest budget with capacity misses."),
         lambda: plots.occupancy_over_turns(t, focus.key, focus.budget_tokens, bytes_per_token=summary.bytes_per_token,
                                            colors=colors)),
        (_Figure("timeline", f"Per-turn timeline: {focus.strategy}, session {focus.key}, {at}",
                 "Hits and misses by class per turn (up) and evictions (down), for the best-ranked strategy "
                 "unless one was chosen (`--strategy`)."),
         lambda: plots.turn_timeline(t, focus.key, focus.strategy, focus.budget_tokens)),
    ]
    return out


def report_blocks(summary: RunSummary, figures: list[_Figure]) -> list:
    """The report as blocks, drawn once as Markdown and once as HTML.

    In order: the configuration; the decision view and the misses at the headline budget; the miss rate by budget
    (several budgets); the optimal bracket (when run); the context policies, the price of purity and the claim modes
    (when there is data, each with its figure); the contract violations (when counted); then the
    other figures, with a note when one budget ran or the per-turn log was not kept.
    """
    inline = {f.slug: f for f in figures if f.slug in ("claim_modes", "price_of_purity", "policy_tradeoff")}
    figures = [f for f in figures if f.slug not in inline]
    blocks: list = [
        ("h", 1, "ctxbench report"),
        ("h", 2, "Configuration"),
        ("ul", _config_items(summary)),
        ("h", 2, f"Decision at {summary.budget_tokens:,.0f} tokens"),
        ("p", decision_intro(summary)),
        ("table", decision_markdown(summary.ranking)),
        ("h", 2, f"Misses at {summary.budget_tokens:,.0f} tokens"),
        ("p", "The same configurations in the same order: misses per access and the capacity misses the "
              "strategy or policy caused, mean per session with 95% bootstrap confidence intervals, and each "
              "managed strategy's re-reads against the optimal bracket when it was run."),
        ("table", ranking_markdown(summary.ranking)),
    ]
    if len(summary.budgets) > 1:
        blocks += [("h", 2, "Miss rate by budget"), ("table", _miss_rate_table(summary.miss_rate_by_budget))]
    blocks += _bracket_blocks(summary.bracket)
    blocks += _policy_blocks(summary, inline.get("policy_tradeoff"))
    blocks += _purity_blocks(summary, inline.get("price_of_purity"))
    blocks += _claim_blocks(summary.claim_focus, inline.get("claim_modes"))
    blocks += _violation_blocks(summary)
    blocks.append(("h", 2, "Figures"))
    if len(summary.budgets) == 1:
        blocks.append(("p", "One budget was run, so there is no miss-ratio curve: run a sweep "
                            "(`ctxbench run --budget-tokens 25000 50000 100000 200000`) for one."))
    if summary.focus is None:
        blocks.append(("p", "The per-turn log was not kept (`--no-turns`), so the latency, occupancy and "
                            "timeline figures are left out."))
    return blocks + [("fig", f) for f in figures]


def _render_markdown(blocks: list) -> str:
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append(f"{'#' * block[1]} {block[2]}")
        elif kind == "p":
            out.append(block[1])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "table":
            out.append(block[1])
        elif kind == "fig":
            f = block[1]
            out.append(f"### {escape(f.title)}\n\n![{escape(f.title)}]({FIGURES_DIR}/{f.slug}.png)\n\n"
                       f"{f.caption} ([SVG]({FIGURES_DIR}/{f.slug}.svg))")
        out.append("")
    return "\n".join(out)


def _table_html(markdown: str) -> str:
    lines = [ln for ln in markdown.strip().splitlines() if ln.strip()]
    head, spec, body = split_row(lines[0]), split_row(lines[1]), [split_row(ln) for ln in lines[2:]]
    align = ["right" if s.endswith(":") and not s.startswith(":") else "center" if s.startswith(":") and
             s.endswith(":") else "left" for s in spec]
    th = "".join(f'<th style="text-align:{a}">{inline_html(h)}</th>' for h, a in zip(head, align))
    rows = "".join("<tr>" + "".join(f'<td style="text-align:{a}">{inline_html(c)}</td>'
                                    for c, a in zip(row, align)) + "</tr>" for row in body)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{rows}</tbody></table>"


_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1a1a1a;
       max-width: 1000px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #eee; padding-bottom: .2em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; }
th { background: #f5f5f5; }
tbody tr:nth-child(even) { background: #fafafa; }
code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; font-size: 0.9em; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
"""

# Records on <html> how many images decoded, so a headless browser can check the page.
_SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var decoded = images.filter(function (img) { return img.complete && img.naturalWidth > 0; });
  document.documentElement.setAttribute("data-images-total", String(images.length));
  document.documentElement.setAttribute("data-images-decoded", String(decoded.length));
});
"""


def _render_html(blocks: list, images: dict[str, bytes], title: str = "ctxbench report") -> str:
    """The report's blocks as one HTML page; figures embedded as base64 PNG ``data:`` URIs."""
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{inline_html(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{inline_html(block[1])}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "table":
            body.append(_table_html(block[1]))
        elif kind == "fig":
            f = block[1]
            png = images[f.slug]
            data = base64.b64encode(png).decode("ascii")
            width = round(int.from_bytes(png[16:20], "big") * 100 / FIGURE_DPI)  # shown at 100 dpi
            body.append(f'<figure id="{f.slug}"><h3>{html.escape(f.title)}</h3>'
                        f'<img alt="{html.escape(f.title)}" width="{width}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{inline_html(f.caption)}</figcaption></figure>")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n<script>{_SCRIPT}</script>\n</head>\n"
            f"<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def is_report_file(name: str) -> bool:
    """Whether ``name`` (relative to the report's directory) is one of the report's files."""
    return name in (REPORT_MD, REPORT_HTML) or name.startswith(FIGURES_DIR + "/")


def render_report(res: Results, summary: RunSummary, directory: Path, *, arms: pd.DataFrame | None = None,
                  workers: int = 1) -> None:
    """Write the report's files (``figures/``, ``report.md``, ``report.html``) into ``directory``, a fresh one.

    ``summary`` is `summarise_run` of ``res`` (and of ``arms``, the per-arm rows): every table and
    sentence draws it as it is; the figures plot the frames of ``res`` and ``arms``, in the
    summary's ranking order, budgets and session. ``workers`` processes draw the figures
    (`sim.presentation.jobs.run_jobs`; the same files either way).
    """
    plan = plan_report(res, summary, directory, arms=arms)
    run_jobs(plan.figures, workers)
    plan.finish()


@dataclass
class ReportPlan:
    """A report to write: its figures, each a job (`sim.presentation.jobs.Job`: a rough cost and what draws
    and saves one, PNG and SVG, in any order and process), and ``finish``, which writes ``report.md`` and
    ``report.html`` once they are saved."""

    figures: list[Job]
    finish: Callable[[], None]


def plan_report(res: Results, summary: RunSummary, directory: Path, *,
                arms: pd.DataFrame | None = None) -> ReportPlan:
    """The report of `render_report` as jobs, for a caller that runs them beside its own (`ReportPlan`)."""
    r, t = res.results, res.turns
    arms = arms if arms is not None else pd.DataFrame()
    names = set(r["strategy"]) | (set(t["strategy"]) if len(t) else set())
    colors = plots.strategy_colors(names)
    specs = _figures(res, summary, colors) + _section_figures(summary, arms, colors)
    figures = directory / FIGURES_DIR

    def draw(spec: _Figure, build: Callable) -> Callable[[], None]:
        def job() -> None:
            plots.save_figure(build(), figures / spec.slug, formats=("png", "svg"), dpi=FIGURE_DPI)
        return job

    def finish() -> None:
        images = {spec.slug: (figures / f"{spec.slug}.png").read_bytes() for spec, _ in specs}
        blocks = report_blocks(summary, [s for s, _ in specs])
        (directory / REPORT_MD).write_text(_render_markdown(blocks), encoding="utf-8")
        (directory / REPORT_HTML).write_text(_render_html(blocks, images), encoding="utf-8")

    return ReportPlan([(DRAWING_COST.get(spec.slug, 1.0), draw(spec, build)) for spec, build in specs], finish)


#: How long a figure takes to draw, roughly, against a plain one (1): jobs start with the longest, so that
#: processes drawing side by side finish together.
DRAWING_COST = {"timeline": 6.0, "latency_cdf": 4.0, "occupancy": 3.5, "reread_tokens": 2.0}


def write_report(source: Results | str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                 session: str | None = None, strategy: str | None = None, force: bool = False,
                 rank_by: str | None = None) -> Report:
    """Write ``figures/`` (PNG and SVG), ``report.md`` and a self-contained ``report.html``.

    ``source`` is a results directory or a loaded `Results`; ``out_dir`` defaults to the results
    directory. The run is summarised once (`summarise_run`), then drawn. ``session`` (``ID`` or
    ``TRACE/ID``) picks the session of the occupancy and timeline figures, ``strategy`` the
    timeline's strategy, ``rank_by`` the decision view's metric (default: the run's). With ``arms.parquet`` in the results directory the report compares claim
    modes; with pure and stateful strategies it shows the price of purity. Nothing is replaced
    until the whole report is ready, and only the files of an earlier report by ctxbench are
    (`sim.output`: a directory ctxbench did not write is refused unless ``force``);
    a broken results directory raises `InputError`.
    """
    if out_dir is None and isinstance(source, Results) and source.path is None:
        raise InputError("write_report: no out_dir given and the results have no directory")
    out = Path(out_dir if out_dir is not None else source.path if isinstance(source, Results) else source)
    with folder_lock(out):   # the results read and the report written, with no run rewriting them between
        return _write_report(source, out, session=session, strategy=strategy, force=force, rank_by=rank_by)


def _write_report(source, out: Path, *, session, strategy, force, rank_by) -> Report:
    res = source if isinstance(source, Results) else load_results(source)
    _check(res)
    writer = OutputDir(out, part=is_report_file, force=force)
    with writer as staging:
        arms = _arms(res)
        summary = summarise_run(res.results, turns=res.turns, arms=arms, meta=res.meta, session=session,
                                strategy=strategy, rank_by=rank_by, schedules=_schedules(res))
        render_report(res, summary, staging, arms=arms)
    figures = sorted(out / name for name in writer.files if name.startswith(FIGURES_DIR + "/"))
    return Report(out, out / REPORT_MD, out / REPORT_HTML, figures)
