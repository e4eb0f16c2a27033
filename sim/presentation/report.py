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

from sim.presentation import plots
from sim.analysis.bracket import BRACKET_LOWER, BRACKET_UPPER, bracket_gaps, describe_gap, is_bracket
from sim.analysis.claim_modes import compare_claim_modes, one_claim_mode
from sim.errors import InputError
from sim.presentation.markdown import escape, frame_to_markdown, inline_html, split_row
from sim.engine.measures import DEFAULT_BYTES_PER_TOKEN
from sim.presentation.output import OutputDir
from sim.analysis.purity import price_of_purity, purity_display
from sim.analysis.ranking import headline_budget, ranked, ranking_markdown
from sim.presentation.results import ARMS_FILE, RESULTS_FILE, Results, load_results

__all__ = ["REPORT_MD", "REPORT_HTML", "FIGURES_DIR", "Report", "write_report", "render_report", "is_report_file"]

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


def _bytes_per_token(res: Results) -> float:
    cfg = res.meta.get("config") or {}
    if cfg.get("bytes_per_token"):
        return float(cfg["bytes_per_token"])
    r = res.results
    if "budget_bytes" in r.columns and (r["budget_tokens"] > 0).all():
        return float((r["budget_bytes"] / r["budget_tokens"]).median())
    return DEFAULT_BYTES_PER_TOKEN


def _config_items(res: Results) -> list[str]:
    meta, r = res.meta, res.results
    cfg = meta.get("config") or {}
    items = []
    if meta.get("ctxbench_version"):
        items.append(f"ctxbench {escape(meta['ctxbench_version'])}, commit {escape(meta.get('git_commit') or 'n/a')}, "
                     f"created {escape(meta.get('created', 'n/a'))}")
    if cfg.get("workload"):
        items.append(f"workload: {escape(json.dumps(cfg['workload'], sort_keys=True))}")
    sessions = r.groupby(["trace", "session"], observed=True).ngroups
    items.append(f"traces: {r['trace'].nunique()}, sessions: {sessions}, rows: {len(r):,}")
    items.append("strategies: " + ", ".join(escape(s) for s in sorted(r["strategy"].unique())))
    items.append("budgets (tokens): " + ", ".join(f"{b:,.0f}" for b in sorted(r["budget_tokens"].unique()))
                 + f"; bytes per token: {_bytes_per_token(res):g}")
    if "lenient" in cfg:
        items.append(f"mode: {'lenient' if cfg['lenient'] else 'strict'}; contract violations counted: "
                     f"{int(r['violations'].sum()) if 'violations' in r.columns else 0}")
    machine = meta.get("machine")
    if machine:
        items.append(f"machine: {escape(machine.get('platform', '?'))}, Python {escape(machine.get('python', '?'))}, "
                     f"{escape(machine.get('cores', '?'))} cores")
    if meta.get("elapsed_s") is not None:
        items.append(f"elapsed: {meta['elapsed_s']:.1f} s")
    return items


def _miss_rate_table(results: pd.DataFrame) -> str:
    table = results.groupby(["strategy", "budget_tokens"], observed=True)["miss_rate"].mean().unstack()
    table.columns = [f"{plots.tokens_label(b)} tokens" for b in table.columns]
    lines = frame_to_markdown(table.map(lambda v: f"{v:.1%}").reset_index()).splitlines()
    lines[1] = "|---|" + "---:|" * len(table.columns)  # the cells are formatted numbers: right-align them
    return "\n".join(lines)


def _bracket_blocks(results: pd.DataFrame) -> list:
    gaps = bracket_gaps(results)
    if gaps.empty:
        return []
    if "claims" in gaps.columns and gaps["claims"].notna().any():
        gaps = gaps[gaps["claims"] == gaps["claims"].dropna().iloc[0]]
    cells = gaps.assign(cell=[describe_gap(row) for _, row in gaps.iterrows()])
    table = cells.pivot(index="strategy", columns="budget_tokens", values="cell")
    table.columns = [f"{plots.tokens_label(b)} tokens" for b in table.columns]
    return [("h", 2, "Optimal bracket"),
            ("p", "No online strategy can beat the offline optimum, which lies between a lower bound "
                  f"(`{BRACKET_LOWER}`, PFOO-L) and a feasible offline policy (`{BRACKET_UPPER}`). Each cell "
                  "gives a strategy's re-read tokens (totals over sessions) as a multiple of each bound; the "
                  "curves draw both bounds as dashed lines."),
            ("table", frame_to_markdown(table.fillna("").reset_index()))]


def _violation_blocks(res: Results) -> list:
    r = res.results
    total = int(r["violations"].sum()) if "violations" in r.columns else 0
    if not total:
        return []
    by = r.groupby("strategy", observed=True)["violations"].sum()
    items = [f"{escape(s, line_start=True)}: {int(n):,}" for s, n in by.items() if n]
    examples = [escape(m, line_start=True) for m in (res.meta.get("violations") or [])[:5]]
    blocks: list = [("h", 2, "Contract violations"),
                    ("p", f"{total:,} violations were counted (lenient mode); their turns were repaired by "
                          "dropping the oldest entries, so these strategies' numbers are not their own."),
                    ("ul", items)]
    if examples:
        blocks += [("p", "First messages:"), ("ul", examples)]
    return blocks


def _arms(res: Results) -> pd.DataFrame:
    """The per-arm rows of multi-arm sessions (``arms.parquet`` beside the results), or an empty frame."""
    path = res.path / ARMS_FILE if res.path is not None else None
    if path is None or not path.is_file():
        return pd.DataFrame()
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def _claim_choice(res: Results, arms: pd.DataFrame, budget: float) -> tuple[str, float]:
    """The strategy and budget of the claim-mode section: the best-ranked strategy at the headline
    budget (or the largest budget with per-arm rows)."""
    at = budget if (arms["budget_tokens"] == budget).any() else float(arms["budget_tokens"].max())
    present = set(arms["strategy"].astype(str))
    order = [s for s in ranked(res.results, budget)["strategy"] if s in present]
    return (order[0] if order else sorted(present)[0]), at


def _claim_blocks(res: Results, arms: pd.DataFrame, budget: float, figure: _Figure | None) -> list:
    if arms.empty:
        return []
    strategy, at = _claim_choice(res, arms, budget)
    chosen = arms[(arms["strategy"].astype(str) == strategy) & (arms["budget_tokens"] == at)]

    def table(by_arm: bool) -> str:
        t = compare_claim_modes(chosen, by_arm=by_arm)
        if by_arm:  # modes in the order run, main first within each
            rank = {m: i for i, m in enumerate(dict.fromkeys(t["claims"]))}
            t = t.assign(mode_rank=t["claims"].map(rank), not_main=t["arm"].astype(str) != "main")
            t = t.sort_values(["mode_rank", "not_main", "arm"], kind="mergesort")
        cols = {"claims": "claim mode", "arm": "arm", "lines_lost": "lines lost", "thrashing_events": "overwrites",
                "invalidation_misses": "invalidation re-reads", "blocked_turns": "blocked turns"}
        if not by_arm:
            t = t.assign(blocked_min=(t["blocked_ms"] / 60_000).round(1))
            cols |= {"blocked_min": "blocked min", "handoffs": "handoffs", "pauses": "pauses"}
        return frame_to_markdown(t[[c for c in cols if c in t.columns]].rename(columns=cols))

    sessions = chosen.groupby(["trace", "session"], observed=True).ngroups
    blocks = [("h", 2, "Claim modes"),
              ("p", f"The multi-arm sessions ({sessions}) replayed under each claim mode, with {escape(strategy)} at "
                    f"{at:,.0f} tokens, totals over sessions and arms. Lines lost: unsaved lines of one arm "
                    "overwritten by another; overwrites: those thrashing events; invalidation re-reads: accesses "
                    "that missed because another arm changed the file; blocked turns: turns an arm waited for a "
                    "claim or was paused."),
              ("table", table(False)),
              ("p", "Per arm:"),
              ("table", table(True))]
    return blocks + ([("fig", figure)] if figure is not None else [])


def _purity_blocks(purity: pd.DataFrame, figure: _Figure | None) -> list:
    if purity.empty:
        return []
    shown = one_claim_mode(purity)
    modes = shown["claims"].dropna().unique() if "claims" in shown.columns else ()
    mode = modes[0] if len(modes) else None
    blocks = [("h", 2, "Price of purity"),
              ("p", "Per trace and budget, the best pure strategy (replay-pure contract) against the best stateful "
                    "one: mean re-read tokens (thousands) and miss rate per session. Price = pure − stateful "
                    "re-read tokens: positive is what the purity rule costs, negative means a pure strategy did "
                    "better." + (f" Claim mode {escape(mode)}." if mode is not None else "")),
              ("table", frame_to_markdown(purity_display(shown)))]
    return blocks + ([("fig", figure)] if figure is not None else [])


def _focus_budget(results: pd.DataFrame, headline: float) -> float:
    """The budget of the one-session figures: the headline one, unless no strategy has a capacity
    miss there; then the largest budget where one does."""
    live = results[~results["strategy"].map(is_bracket)]
    if "capacity_misses" not in live.columns:
        return headline
    misses = live.groupby("budget_tokens")["capacity_misses"].sum()
    if misses.get(headline, 0) > 0 or not (misses > 0).any():
        return headline
    return float(misses[misses > 0].index.max())


def _section_figures(res: Results, arms: pd.DataFrame, purity: pd.DataFrame, budget: float,
                     colors: dict[str, str]) -> list[tuple[_Figure, Callable]]:
    """The figures shown inside the claim-mode and price-of-purity sections, when there is data."""
    out: list[tuple[_Figure, Callable]] = []
    if not arms.empty:
        strategy, at = _claim_choice(res, arms, budget)
        out.append((_Figure("claim_modes", f"Claim modes: {strategy} at {plots.tokens_label(at)} tokens",
                            "Per claim mode, totals over the multi-arm sessions and their arms (symmetric-log "
                            "axis: exact values on the bars)."),
                    lambda: plots.claim_modes_bars(arms, strategy=strategy, budget_tokens=at)))
    if not purity.empty:
        out.append((_Figure("price_of_purity", "Price of purity",
                            "Mean re-read tokens per session of the best pure strategy (left) and the best "
                            "stateful one (right, hatched), per trace and budget; each bar names its strategy."),
                    lambda: plots.purity_bars(purity, colors=colors)))
    return out


def _figures(res: Results, budget: float, session: str | None, strategy: str | None,
             colors: dict[str, str]) -> list[tuple[_Figure, Callable]]:
    """The report's figures as (description, builder) pairs, in reading order."""
    r, t = res.results, res.turns
    out: list[tuple[_Figure, Callable]] = []
    if r["budget_tokens"].nunique() > 1:
        out.append((_Figure("miss_ratio_curve", "Miss rate vs budget",
                            "Mean miss rate over sessions at each budget; bands are 95% bootstrap CIs, dashed "
                            "lines the optimal bracket when it was run."),
                    lambda: plots.miss_ratio_curve(r, colors=colors)))
    out.append((_Figure("reread_tokens", "Re-read tokens by budget",
                        "Tokens re-read after capacity misses, per session (mean, 95% CI), strategies in ranking "
                        "order."),
                lambda: plots.reread_bars(r, colors=colors)))
    if not len(t):
        return out
    focus = _focus_budget(r, budget)
    trace, sess = plots.pick_session(r, session, focus)
    key = f"{trace}/{sess}"
    if strategy is None:
        strategy = next(s for s in ranked(r, focus)["strategy"] if not is_bracket(s))
    elif strategy not in set(t["strategy"]):
        raise InputError(f"no strategy {strategy!r} in the per-turn log; strategies: "
                         f"{', '.join(sorted(t['strategy'].unique()))}")
    at = f"{plots.tokens_label(focus)} tokens"
    bpt = _bytes_per_token(res)
    out += [
        (_Figure("latency_cdf", f"Eviction latency at {plots.tokens_label(budget)} tokens",
                 "Distribution of the wall time of each `evict` call (machine-dependent; compare strategies "
                 "within one run)."),
         lambda: plots.latency_cdf(t, budget, colors=colors)),
        (_Figure("occupancy", f"Context occupancy, session {key}, {at}",
                 "Tokens resident after each turn's eviction; the dotted line is the budget. The session is "
                 "the one with the most capacity misses unless one was chosen (`--session`), at the headline "
                 "budget or, when nothing is evicted there, the largest budget with capacity misses."),
         lambda: plots.occupancy_over_turns(t, key, focus, bytes_per_token=bpt, colors=colors)),
        (_Figure("timeline", f"Per-turn timeline: {strategy}, session {key}, {at}",
                 "Hits and misses by class per turn (up) and evictions (down), for the best-ranked strategy "
                 "unless one was chosen (`--strategy`)."),
         lambda: plots.turn_timeline(t, key, strategy, focus)),
    ]
    return out


def _blocks(res: Results, figures: list[_Figure], budget: float, arms: pd.DataFrame | None = None,
            purity: pd.DataFrame | None = None) -> list:
    r = res.results
    inline = {f.slug: f for f in figures if f.slug in ("claim_modes", "price_of_purity")}
    figures = [f for f in figures if f.slug not in inline]
    sessions = r[r["budget_tokens"] == budget].groupby(["trace", "session"], observed=True).ngroups
    blocks: list = [
        ("h", 1, "ctxbench report"),
        ("h", 2, "Configuration"),
        ("ul", _config_items(res)),
        ("h", 2, f"Ranking at {budget:,.0f} tokens"),
        ("p", f"Strategies ranked by re-read tokens per session (fewer is better), mean over {sessions} sessions "
              "with 95% bootstrap confidence intervals; ties break by miss rate."),
        ("table", ranking_markdown(ranked(r, budget))),
    ]
    if r["budget_tokens"].nunique() > 1:
        blocks += [("h", 2, "Miss rate by budget"), ("table", _miss_rate_table(r))]
    blocks += _bracket_blocks(r)
    if purity is not None:
        blocks += _purity_blocks(purity, inline.get("price_of_purity"))
    if arms is not None:
        blocks += _claim_blocks(res, arms, budget, inline.get("claim_modes"))
    blocks += _violation_blocks(res)
    blocks.append(("h", 2, "Figures"))
    if r["budget_tokens"].nunique() == 1:
        blocks.append(("p", "One budget was run, so there is no miss-ratio curve: run a sweep "
                            "(`ctxbench run --budget-tokens 25000 50000 100000 200000`) for one."))
    if not len(res.turns):
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


def render_report(res: Results, directory: Path, *, session: str | None = None,
                  strategy: str | None = None) -> None:
    """Write the report's files (``figures/``, ``report.md``, ``report.html``) into ``directory``, a fresh one."""
    _check(res)
    r, t = res.results, res.turns
    budget = headline_budget(r)
    names = set(r["strategy"]) | (set(t["strategy"]) if len(t) else set())
    colors = plots.strategy_colors(names)
    arms = _arms(res)
    purity = price_of_purity(r) if "pure" in r.columns else pd.DataFrame()
    specs = _figures(res, budget, session, strategy, colors) + _section_figures(res, arms, purity, budget, colors)
    images: dict[str, bytes] = {}
    for spec, build in specs:
        fig = build()
        png, _ = plots.save_figure(fig, directory / FIGURES_DIR / spec.slug, formats=("png", "svg"), dpi=FIGURE_DPI)
        images[spec.slug] = png.read_bytes()
    blocks = _blocks(res, [s for s, _ in specs], budget, arms, purity)
    (directory / REPORT_MD).write_text(_render_markdown(blocks), encoding="utf-8")
    (directory / REPORT_HTML).write_text(_render_html(blocks, images), encoding="utf-8")


def write_report(source: Results | str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                 session: str | None = None, strategy: str | None = None, force: bool = False) -> Report:
    """Write ``figures/`` (PNG and SVG), ``report.md`` and a self-contained ``report.html``.

    ``source`` is a results directory or a loaded `Results`; ``out_dir`` defaults to the results
    directory. ``session`` (``ID`` or ``TRACE/ID``) picks the session of the occupancy and
    timeline figures, ``strategy`` the timeline's strategy. With ``arms.parquet`` in the results
    directory the report compares claim modes; with pure and stateful strategies it shows the
    price of purity. Nothing is replaced until the whole report is ready, and only the files of
    an earlier report by ctxbench are (`sim.presentation.output`: a directory ctxbench did not write is
    refused unless ``force``); a broken results directory raises `InputError`.
    """
    res = source if isinstance(source, Results) else load_results(source)
    _check(res)
    if out_dir is None and res.path is None:
        raise InputError("write_report: no out_dir given and the results have no directory")
    out = Path(out_dir if out_dir is not None else res.path)
    writer = OutputDir(out, part=is_report_file, force=force)
    with writer as staging:
        render_report(res, staging, session=session, strategy=strategy)
    figures = sorted(out / name for name in writer.files if name.startswith(FIGURES_DIR + "/"))
    return Report(out, out / REPORT_MD, out / REPORT_HTML, figures)
