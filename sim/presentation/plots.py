"""Figures of a run's results: miss-ratio curves, re-read cost, latency CDFs, occupancy and timelines (no pyplot)."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullLocator, PercentFormatter

from ctxbench.sim.analysis.claim_modes import one_claim_mode
from ctxbench.sim.analysis.labels import BRACKET_EXACT, BRACKET_LOWER, BRACKET_UPPER, is_bracket
from ctxbench.sim.analysis.metrics import aggregate
from ctxbench.sim.analysis.frontier import pareto_frontier
from ctxbench.sim.analysis.ranking import budget_or_headline, headline_budget, ranked
from ctxbench.sim.analysis.summary import pick_session
from ctxbench.sim.engine.claims import MODES
from ctxbench.sim.engine.measures import DEFAULT_BYTES_PER_TOKEN
from ctxbench.sim.errors import InputError
from ctxbench.strategies.registry import builtin_names

__all__ = ["FIXED_COLORS", "PALETTE", "strategy_colors", "new_figure",
           "save_figure", "pick_session", "miss_ratio_curve", "reread_bars", "latency_cdf",
           "occupancy_over_turns", "turn_timeline", "tokens_label", "CLAIM_METRICS", "claim_modes_bars",
           "purity_bars", "policy_tradeoff"]

# Pinned colours: the two original built-ins, the optimum and the bracket (drawn dashed).
FIXED_COLORS: dict[str, str] = {
    "lru": "#1f77b4",
    "importance": "#ff7f0e",
    BRACKET_LOWER: "#222222",
    BRACKET_UPPER: "#7f7f7f",
    BRACKET_EXACT: "#000000",
}
# Other built-ins take slots in sorted-name order, then every other strategy in sorted order.
PALETTE: tuple[str, ...] = (
    "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#1b9e77", "#b15928", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d",
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#6b6ecf",
)
MISS_CLASSES = (("compulsory", "compulsory miss", "#9ecae1"), ("capacity", "capacity miss", "#d62728"),
                ("invalidation", "invalidation miss", "#9467bd"))
HIT_COLOR, EVICT_COLOR = "#31a354", "#fd8d3c"
MAX_POINTS = 2000      # per line; longer series are reduced to bin means (occupancy) or quantiles (CDF)
MAX_BARS = 240         # turns per timeline before turns are binned
# Per-arm columns compared across claim modes: (column, label, colour).
CLAIM_METRICS = (("lines_lost", "lines lost", "#d62728"), ("thrashing_events", "overwrites", "#ff7f0e"),
                 ("invalidation_misses", "invalidation re-reads", "#9467bd"),
                 ("blocked_turns", "blocked turns", "#7f7f7f"))


def strategy_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour per strategy name, the same for a name in every figure of the same set of names.

    Pinned names keep `FIXED_COLORS`; the other built-ins take `PALETTE` slots in sorted order
    whether or not they are present, so a built-in's colour never depends on the other names;
    the remaining names follow in sorted order (cycling once the palette runs out).

    >>> strategy_colors(["mine", "lru"])["lru"]
    '#1f77b4'
    """
    names = sorted({str(n) for n in names})
    # The policies after the strategies: a strategy's colour is the one it had before there were policies.
    reserved = [b for b in sorted(builtin_names()) + sorted(builtin_names(kind="policy")) if b not in FIXED_COLORS]
    out: dict[str, str] = {}
    extra = 0
    for name in names:
        if name in FIXED_COLORS:
            out[name] = FIXED_COLORS[name]
        elif name in reserved:
            out[name] = PALETTE[reserved.index(name) % len(PALETTE)]
        else:
            out[name] = PALETTE[(len(reserved) + extra) % len(PALETTE)]
            extra += 1
    return out


def new_figure(width: float = 8.0, height: float = 4.8) -> tuple[Figure, object]:
    """A figure with one axes, built without pyplot (no global state, safe on any backend)."""
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def save_figure(fig: Figure, stem: str | os.PathLike, formats: Iterable[str] = ("png", "svg"),
                dpi: int = 150) -> list[Path]:
    """Save ``fig`` as ``stem.<format>`` for each format; the paths. SVGs carry no date and
    stable ids, so the same figure gives the same bytes."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    engine = fig.get_layout_engine()
    try:
        with rc_context({"svg.hashsalt": "ctxbench"}):
            for fmt in formats:
                path = stem.with_name(f"{stem.name}.{fmt}")
                metadata = {"Date": None} if fmt in ("svg", "pdf") else {}
                fig.savefig(path, format=fmt, dpi=dpi, metadata=metadata)
                paths.append(path)
                fig.set_layout_engine("none")  # the layout is done: later formats reuse it
    finally:
        fig.set_layout_engine(engine)
    return paths


def tokens_label(tokens: float) -> str:
    """``200000`` → ``'200K'``, ``1500000`` → ``'1.5M'``, ``1750000000`` → ``'1.75B'``."""
    tokens = float(tokens)
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(tokens) >= scale:
            return f"{tokens / scale:.3g}{suffix}"
    return f"{tokens:.3g}"


def _require(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    if frame is None or not len(frame):
        raise InputError(f"{what}: no rows to plot")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}")


def _colors_for(frame: pd.DataFrame, colors: Mapping[str, str] | None) -> Mapping[str, str]:
    return colors if colors is not None else strategy_colors(frame["strategy"].unique())


def _labels(results: pd.DataFrame) -> dict[str, str]:
    """Legend label per strategy: stateful ones say so."""
    if "pure" not in results.columns:
        return {}
    pure = results.groupby("strategy", observed=True)["pure"].all()
    return {name: f"{name} (stateful)" for name, ok in pure.items() if not ok and not is_bracket(name)}


def _token_xaxis(ax, budgets: np.ndarray) -> None:
    if len(budgets) > 1 and budgets.max() / max(budgets.min(), 1) > 4:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(budgets)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))


def _bound_label(name: str) -> str:
    """How a row of the optimum or the bracket is named in a legend."""
    return f"{name} (optimum)" if name == BRACKET_EXACT else f"{name} (bound)"


def miss_ratio_curve(results: pd.DataFrame, *, metric: str = "miss_rate", colors: Mapping[str, str] | None = None,
                     level: float = 0.95) -> Figure:
    """Mean ``metric`` against budget, one line per strategy, with a CI band across sessions.

    Rows of the optimal bracket (``opt:*``) are drawn as dashed bound lines without bands.
    """
    _require(results, ("strategy", "budget_tokens", metric), "miss-ratio curve")
    results = one_claim_mode(results)
    colors = _colors_for(results, colors)
    labels = _labels(results)
    agg = aggregate(results, (metric,), by=("strategy", "budget_tokens"), level=level)
    fig, ax = new_figure()
    sessions = int(agg["sessions"].max())
    for name, g in agg.groupby("strategy", sort=True):
        g = g.sort_values("budget_tokens")
        x, y = g["budget_tokens"].to_numpy(float), g[metric].to_numpy(float)
        if is_bracket(name):
            ax.plot(x, y, linestyle="--", marker="x", color=colors[name], linewidth=1.6, label=_bound_label(name),
                    zorder=3)
            continue
        ax.plot(x, y, marker="o", markersize=4, color=colors[name], linewidth=2, label=labels.get(name, name),
                zorder=4)
        if sessions > 1:
            ax.fill_between(x, g[f"{metric}_lo"].to_numpy(float), g[f"{metric}_hi"].to_numpy(float),
                            color=colors[name], alpha=0.15, linewidth=0)
    _token_xaxis(ax, np.sort(agg["budget_tokens"].unique().astype(float)))
    ax.set_xlabel("context budget (tokens)")
    if metric.endswith("_rate"):
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylabel(f"{metric.replace('_', ' ')} (% of accesses)")
    else:
        ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(bottom=0)
    band = f", {level:.0%} CI band over {sessions} sessions" if sessions > 1 else ""
    ax.set_title(f"{metric.replace('_', ' ').capitalize()} vs context budget (mean{band})")
    if agg["budget_tokens"].nunique() == 1:
        ax.annotate("one budget run: sweep several (--budget-tokens) for a curve", (0.5, 0.04),
                    xycoords="axes fraction", ha="center", fontsize=9, color="#555555")
    ax.legend(loc="best", fontsize=9)
    return fig


def reread_bars(results: pd.DataFrame, budgets: Iterable[float] | None = None, *,
                colors: Mapping[str, str] | None = None, level: float = 0.95,
                order: Sequence[str] | None = None) -> Figure:
    """Re-read tokens per session: a group of bars per budget (default: every budget run), one bar
    per strategy in ranking order (``order``, default: `ranked` at the headline budget; the
    optimal bracket hatched, last), with CI error bars.
    """
    _require(results, ("strategy", "budget_tokens", "reread_tokens", "miss_rate", "evict_p99_ns"), "re-read bars")
    results = one_claim_mode(results)
    colors = _colors_for(results, colors)
    labels = _labels(results)
    chosen = sorted(results["budget_tokens"].unique()) if budgets is None else \
        [budget_or_headline(results, b) for b in budgets]
    order = list(order) if order is not None else ranked(results, headline_budget(results))["strategy"].tolist()
    agg = aggregate(results[results["budget_tokens"].isin(chosen)], ("reread_tokens",),
                    by=("strategy", "budget_tokens"), level=level).set_index(["strategy", "budget_tokens"])
    n = len(order)
    width = 0.8 / n
    fig, ax = new_figure(max(8.0, 2.0 + 0.3 * n * len(chosen)), 4.8)
    x = np.arange(len(chosen))
    tallest = 0.0
    for i, name in enumerate(order):
        rows = agg.reindex([(name, b) for b in chosen])
        mean = rows["reread_tokens"].to_numpy(float)
        err = np.vstack([mean - rows["reread_tokens_lo"].to_numpy(float),
                         rows["reread_tokens_hi"].to_numpy(float) - mean]).clip(min=0)
        bars = ax.bar(x - 0.4 + width * (i + 0.5), mean, width * 0.92, yerr=err, color=colors[name], capsize=2,
                      label=_bound_label(name) if is_bracket(name) else labels.get(name, name),
                      error_kw={"elinewidth": 0.8, "ecolor": "#333333"})
        if is_bracket(name):
            for bar in bars:
                bar.set_hatch("//")
                bar.set_alpha(0.55)
        if n * len(chosen) <= 24:
            ax.bar_label(bars, labels=[tokens_label(v) if np.isfinite(v) else "" for v in mean], padding=2,
                         fontsize=7)
        tallest = max(tallest, float(np.nanmax(mean + err[1], initial=0.0)))
    ax.set_xticks(x, [f"{tokens_label(b)} tokens" for b in chosen])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
    ax.set_ylim(0, max(tallest, 1.0) * 1.12)
    ax.set_xlabel("context budget")
    ax.set_ylabel(f"re-read tokens per session (mean, {level:.0%} CI)")
    ax.set_title("Re-read cost by budget (fewer is better)")
    # Below the axes, so that it never hides a tall bar or its label.
    fig.legend(loc="outside lower center", fontsize=9, ncols=min(4, n))
    ax.grid(False, axis="x")
    return fig


def _quantile_points(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ECDF points (value, fraction), thinned to at most `MAX_POINTS` quantiles."""
    v = np.sort(values)
    n = len(v)
    if n <= MAX_POINTS:
        return v, np.arange(1, n + 1) / n
    p = np.linspace(0, 1, MAX_POINTS)
    return np.quantile(v, p, method="inverted_cdf"), p


def latency_cdf(turns: pd.DataFrame, budget_tokens: float | None = None, *,
                colors: Mapping[str, str] | None = None) -> Figure:
    """Distribution (CDF) of per-call ``evict`` latency for each strategy at one budget, log time axis.

    The offline bracket's rows are left out: their latency is not a policy's.
    """
    _require(turns, ("strategy", "budget_tokens", "evict_ns"), "latency CDF")
    colors = _colors_for(turns, colors)
    budget = budget_or_headline(turns, budget_tokens)
    at = turns[(turns["budget_tokens"] == budget) & ~turns["strategy"].map(is_bracket)]
    fig, ax = new_figure()
    for name, g in at.groupby("strategy", sort=True, observed=True):
        us = g["evict_ns"].to_numpy(float) / 1e3
        if not len(us):
            continue
        p99 = np.percentile(us, 99, method="nearest")
        x, p = _quantile_points(np.maximum(us, 1e-3))
        ax.step(x, p, where="post", color=colors[name], linewidth=1.8,
                label=f"{name} (p99 {p99:,.1f} µs, {len(us):,} calls)")
    ax.set_xscale("log")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1.02)
    ax.axhline(0.99, color="#999999", linewidth=0.8, linestyle=":")
    ax.set_xlabel("evict() latency per call (µs, log scale)")
    ax.set_ylabel("share of calls at or below")
    ax.set_title(f"Eviction latency CDF at {tokens_label(budget)} tokens")
    ax.legend(loc="lower right", fontsize=9)
    return fig


def _one_session(turns: pd.DataFrame, session: str | None,
                 budget_tokens: float | None) -> tuple[pd.DataFrame, str, float]:
    budget = budget_or_headline(turns, budget_tokens)
    trace, sess = pick_session(turns, session, budget)
    mask = (turns["trace"].astype(str) == trace) & (turns["session"].astype(str) == sess) \
        & (turns["budget_tokens"] == budget)
    return turns[mask], (f"{trace}/{sess}" if trace else sess), budget


def _bin_mean(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= MAX_POINTS:
        return x, y
    edges = np.linspace(0, len(x), MAX_POINTS + 1).astype(int)
    return x[edges[:-1]], np.add.reduceat(y, edges[:-1]) / np.diff(edges)


def occupancy_over_turns(turns: pd.DataFrame, session: str | None = None, budget_tokens: float | None = None, *,
                         bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
                         colors: Mapping[str, str] | None = None) -> Figure:
    """Context occupancy after each turn's eviction, one line per strategy, for one session.

    ``session`` as in `pick_session`; the budget is drawn as a horizontal line.
    """
    _require(turns, ("trace", "session", "strategy", "budget_tokens", "turn", "occupancy_bytes"), "occupancy")
    colors = _colors_for(turns, colors)
    part, name, budget = _one_session(turns, session, budget_tokens)
    fig, ax = new_figure()
    for strategy, g in part.groupby("strategy", sort=True, observed=True):
        x, y = _bin_mean(g["turn"].to_numpy(float), g["occupancy_bytes"].to_numpy(float) / bytes_per_token)
        ax.step(x, y, where="post", color=colors[strategy], linewidth=1.4,
                linestyle="--" if is_bracket(strategy) else "-",
                label=_bound_label(strategy) if is_bracket(strategy) else strategy)
    ax.axhline(budget, color="black", linewidth=1.2, linestyle=":", label=f"budget ({tokens_label(budget)} tokens)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
    ax.set_ylim(0, budget * 1.12)
    ax.set_xlabel("tool turn")
    ax.set_ylabel("context occupancy after eviction (tokens)")
    ax.set_title(f"Context occupancy, session {name}, {tokens_label(budget)} tokens")
    fig.legend(loc="outside lower center", fontsize=9, ncols=min(4, len(ax.get_lines())))
    return fig


def turn_timeline(turns: pd.DataFrame, session: str | None = None, strategy: str | None = None,
                  budget_tokens: float | None = None) -> Figure:
    """Hits, misses by class (stacked above zero) and evictions (below zero) per turn, for one
    session and strategy (default: the first non-bound strategy in name order).

    Long sessions are shown in bins of consecutive turns, summed.
    """
    _require(turns, ("trace", "session", "strategy", "budget_tokens", "turn", "hits", "compulsory", "capacity",
                     "invalidation", "evictions"), "timeline")
    part, name, budget = _one_session(turns, session, budget_tokens)
    names = sorted(part["strategy"].unique(), key=lambda n: (is_bracket(n), n))
    if strategy is None:
        strategy = names[0]
    elif strategy not in names:
        raise InputError(f"no strategy {strategy!r} in session {name}; strategies: {', '.join(names)}")
    g = part[part["strategy"] == strategy].sort_values("turn")
    cols = ["hits"] + [c for c, _, _ in MISS_CLASSES] + ["evictions"]
    data = {c: g[c].to_numpy(float) for c in cols}
    x = g["turn"].to_numpy(float)
    width, per = 0.9, 1
    if len(x) > MAX_BARS:
        per = int(np.ceil(len(x) / MAX_BARS))
        starts = np.arange(0, len(x), per)
        data = {c: np.add.reduceat(v, starts) for c, v in data.items()}
        width = 0.9 * per * (x[-1] - x[0] + 1) / len(x)
        x = x[starts]
    fig, ax = new_figure(9.0, 4.8)
    bottom = np.zeros(len(x))
    align = "edge" if per > 1 else "center"
    for col, label, color in (("hits", "hit", HIT_COLOR),) + MISS_CLASSES:
        ax.bar(x, data[col], width=width, bottom=bottom, color=color, label=label, align=align, linewidth=0)
        bottom += data[col]
    ax.bar(x, -data["evictions"], width=width, color=EVICT_COLOR, label="eviction", align=align, linewidth=0)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{abs(v):g}"))
    ax.set_xlabel("tool turn" + (f" (bins of {per} turns, summed)" if per > 1 else ""))
    ax.set_ylabel("accesses (up) / evictions (down)")
    ax.set_title(f"Per-turn timeline: {strategy}, session {name}, {tokens_label(budget)} tokens")
    fig.legend(loc="outside lower center", fontsize=9, ncols=5)
    top = max(float(bottom.max()) if len(bottom) else 1.0, 1.0)
    low = max(float(data["evictions"].max()) if len(x) else 1.0, 1.0)
    ax.set_ylim(-low * 1.1, top * 1.1)
    return fig


def _one_choice(frame: pd.DataFrame, column: str, value, what: str):
    """``value`` if given and present in ``frame[column]``, else the first value in sorted order."""
    known = sorted(frame[column].astype(str).unique())
    if value is None:
        return known[0]
    if str(value) not in known:
        raise InputError(f"{what}: no {column} {value!r}; {column}s: {', '.join(known)}")
    return str(value)


def claim_modes_bars(arms: pd.DataFrame, *, strategy: str | None = None, budget_tokens: float | None = None,
                     by_arm: bool = False) -> Figure:
    """Lines lost, overwrites, invalidation re-reads and blocked turns per claim mode, summed over
    sessions (and arms): a group of bars per mode, for one strategy (default: the first by name)
    and budget (default: the largest). ``by_arm`` adds a panel per arm beside the total.

    The y axis is symmetric-log (linear below 1), so a zero is no bar and small counts stay
    visible next to large ones; each bar carries its exact value.
    """
    _require(arms, ("strategy", "budget_tokens", "claims", "arm") + tuple(c for c, _, _ in CLAIM_METRICS),
             "claim modes")
    strategy = _one_choice(arms, "strategy", strategy, "claim modes")
    budget = arms["budget_tokens"].max() if budget_tokens is None else budget_or_headline(arms, budget_tokens)
    at = arms[(arms["strategy"].astype(str) == strategy) & (arms["budget_tokens"] == budget)]
    modes = sorted(at["claims"].astype(str).unique(), key=lambda m: (MODES.index(m) if m in MODES else len(MODES), m))
    arm_names = sorted(at["arm"].astype(str).unique(), key=lambda a: (a != "main", a))
    panels = [("all arms", at)] + ([(a, at[at["arm"].astype(str) == a]) for a in arm_names] if by_arm else [])
    columns = [c for c, _, _ in CLAIM_METRICS]
    width = 0.8 / len(CLAIM_METRICS)
    fig = Figure(figsize=(max(8.0, 3.6 * len(panels)), 4.8), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    top = 1.0
    for ax, (title, part) in zip(axes, panels):
        totals = part.groupby(part["claims"].astype(str))[columns].sum().reindex(modes, fill_value=0)
        x = np.arange(len(modes))
        for i, (col, label, color) in enumerate(CLAIM_METRICS):
            values = totals[col].to_numpy(float)
            bars = ax.bar(x - 0.4 + width * (i + 0.5), values, width * 0.92, color=color, label=label)
            ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=2, fontsize=7)
            top = max(top, float(values.max(initial=0.0)))
        ax.set_xticks(x, modes)
        ax.set_xlabel("claim mode")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_yscale("symlog", linthresh=1.0, linscale=0.5)
    axes[0].set_ylim(0, top * 3.0)
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    axes[0].set_ylabel("count over sessions (symlog scale)")
    sessions = at.groupby(["trace", "session"], observed=True).ngroups if "trace" in at.columns else \
        at["session"].nunique()
    fig.suptitle(f"Claim modes: {strategy} at {tokens_label(budget)} tokens, totals over {sessions} sessions")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", fontsize=9,
               ncols=len(CLAIM_METRICS))
    return fig


def purity_bars(purity: pd.DataFrame, *, colors: Mapping[str, str] | None = None) -> Figure:
    """The price of purity as bars: per trace (groups) and budget (one panel each), the best pure
    strategy's re-read tokens per session beside the best stateful one's (hatched), each bar in
    its strategy's colour and named above it. ``purity`` is `sim.analysis.purity.price_of_purity`'s frame;
    with several claim modes, the first one's rows are drawn.
    """
    _require(purity, ("trace", "budget_tokens", "best_pure", "pure_reread_tokens", "best_stateful",
                      "stateful_reread_tokens"), "price of purity")
    purity = one_claim_mode(purity)
    modes = purity["claims"].dropna().unique() if "claims" in purity.columns else []
    colors = colors if colors is not None else strategy_colors(
        set(purity["best_pure"]) | set(purity["best_stateful"]))
    budgets = sorted(purity["budget_tokens"].unique())
    traces = list(dict.fromkeys(purity["trace"].astype(str)))
    fig = Figure(figsize=(max(8.0, 1.2 + 1.1 * len(traces)), 1.2 + 3.0 * len(budgets)), dpi=100,
                 layout="constrained")
    axes = fig.subplots(len(budgets), 1, squeeze=False)[:, 0]
    x = np.arange(len(traces))
    for ax, budget in zip(axes, budgets):
        at = purity[purity["budget_tokens"] == budget]
        at = at.set_index(at["trace"].astype(str)).reindex(traces)
        tallest = 1.0
        for offset, kind, hatch in ((-0.2, "pure", None), (0.2, "stateful", "//")):
            names = at[f"best_{kind}"].fillna("").astype(str).tolist()
            values = at[f"{kind}_reread_tokens"].to_numpy(float)
            bars = ax.bar(x + offset, np.nan_to_num(values), 0.38, color=[colors.get(n, "#cccccc") for n in names],
                          hatch=hatch, edgecolor="white" if hatch else None, linewidth=0)
            ax.bar_label(bars, labels=[f"{n}\n{tokens_label(v)}" if n else "" for n, v in zip(names, values)],
                         padding=2, fontsize=7)
            tallest = max(tallest, float(np.nanmax(values, initial=0.0)))
        ax.set_xticks(x, traces, rotation=20 if len(traces) > 5 else 0, ha="right" if len(traces) > 5 else "center")
        ax.set_ylim(0, tallest * 1.3)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
        ax.set_ylabel("re-read tokens / session (mean)")
        ax.set_title(f"{tokens_label(budget)} tokens" + (f", claim mode {modes[0]}" if len(modes) else ""),
                     fontsize=10)
        ax.grid(False, axis="x")
    handles = [Patch(facecolor="#bbbbbb", label="best pure (left)"),
               Patch(facecolor="#bbbbbb", hatch="//", edgecolor="white", label="best stateful (right, hatched)")]
    fig.legend(handles=handles, loc="outside lower center", fontsize=9, ncols=2)
    fig.suptitle("Price of purity: best pure vs best stateful strategy")
    return fig


def policy_tradeoff(policies: pd.DataFrame, *, colors: Mapping[str, str] | None = None,
                    budget_tokens: float | None = None, schedules: pd.DataFrame | None = None) -> Figure:
    """Cost against re-fetched tokens, one point per feasible policy or managed strategy (``policies`` is
    `sim.analysis.policies.compare_policies`' frame): the cost of every call with the prompt cache, summarization
    calls and the summaries they write included (``cost_tokens``, y) and the
    tokens fetched again after leaving the window (x), totals over sessions; circles are managed
    strategies, squares transcript policies, each named beside its point; the Pareto frontier (the points
    no other beats on both) is the stepped line. ``schedules`` (`sim.analysis.schedule_bound.suite_frontier`)
    adds the cheapest compaction schedules' frontier, a dotted line through its points (no schedule of the
    family lies below it). Infeasible configurations (a call above the window) have no cost and are named in
    a note under the axes. Lower left is better.
    """
    _require(policies, ("strategy", "model", "cost_tokens", "reread_tokens"), "context policies")
    colors = colors if colors is not None else strategy_colors(policies["strategy"])
    priced = policies[policies["cost_tokens"].notna()]
    unpriced = policies[policies["cost_tokens"].isna()]["strategy"].astype(str).tolist()
    fig, ax = new_figure(8.0, 5.2)
    for model, marker in (("managed", "o"), ("transcript", "s")):
        at = priced[priced["model"] == model]
        ax.scatter(at["reread_tokens"], at["cost_tokens"], marker=marker, s=60, zorder=3,
                   c=[colors.get(str(n), "#7f7f7f") for n in at["strategy"]])
        ax.scatter([], [], marker=marker, s=60, c="#7f7f7f",
                   label="managed strategy" if model == "managed" else "transcript policy")
    for _, row in priced.iterrows():
        ax.annotate(str(row["strategy"]), (row["reread_tokens"], row["cost_tokens"]), xytext=(5, 4),
                    textcoords="offset points", fontsize=8)
    on = priced[pareto_frontier(priced["reread_tokens"], priced["cost_tokens"])].sort_values("reread_tokens")
    if len(on):
        ax.step(on["reread_tokens"], on["cost_tokens"], where="post", color="black", linewidth=1.0,
                linestyle="--", zorder=2, label="Pareto frontier")
    hull = schedules if schedules is not None else pd.DataFrame(columns=["strategy", "cost_tokens", "reread_tokens"])
    for label, points in hull.groupby("strategy", sort=True):
        points = points.sort_values("reread_tokens")
        ax.plot(points["reread_tokens"], points["cost_tokens"], linestyle=":", marker=".", color="#555555",
                zorder=2, label=f"cheapest compaction schedules ({label})")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
    ax.set_xlabel("re-fetched tokens (needed again after leaving the window), total")
    ax.set_ylabel("cost with the prompt cache (input-token equivalents), total")
    right = max(1.0, float(priced["reread_tokens"].max()) if len(priced) else 1.0)
    ax.set_xlim(-0.04 * right, right * 1.15)   # a hull running further right is cut at the policies' range
    top = float(priced["cost_tokens"].max()) if len(priced) else 1.0
    ax.set_ylim(0, max(1.0, top) * (1.3 if unpriced else 1.1))
    ax.legend(loc="best", fontsize=9)
    if unpriced:
        shown = ", ".join(unpriced[:6]) + (f" and {len(unpriced) - 6} more" if len(unpriced) > 6 else "")
        ax.text(0.99, 0.99, "not priced (calls above the window):\n" + textwrap.fill(shown, 60), fontsize=7,
                ha="right", va="top", transform=ax.transAxes, color="#555555")
    at = f" at {tokens_label(budget_tokens)} tokens" if budget_tokens is not None else ""
    ax.set_title(f"Context policies and managed strategies{at}: cost vs re-fetched tokens")
    return fig
