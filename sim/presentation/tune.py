"""What a search of options found (`sim.analysis.tune`), for people: the headline, summary.md and the objective figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ctxbench.sim.analysis.tune import TuneResult
from ctxbench.sim.presentation.markdown import escape, frame_to_markdown
from ctxbench.sim.presentation.plots import tokens_label

__all__ = ["headline", "trials_table", "tune_markdown", "objective_figure", "TOP_TRIALS"]

#: Trials listed in summary.md and on the terminal, best first.
TOP_TRIALS = 10


def _number(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:,.1f}"


def _with_ci(mean: float | None, ci: tuple[float, float] | None) -> str:
    if mean is None:
        return "—"
    return f"{_number(mean)} [{_number(ci[0])}–{_number(ci[1])}]" if ci is not None else _number(mean)


def headline(result: TuneResult) -> list[str]:
    """The lines that say what was found: the chosen setting, the held-out comparison and its caveats."""
    what = f"{result.objective.text}, mean per session"
    lines = [f"tuned {result.spec} on {result.sessions} sessions: {', '.join(p.describe() for p in result.space)}; "
             f"{len(result.trials)} settings ({result.sampler}, the default included), minimising {what}"
             + (f" subject to {'; '.join(c.text for c in result.constraints)}" if result.constraints else "")]
    if result.chosen is None:
        lines.append(f"chosen: none ({result.chosen_reason}); no setting is reported, and the trials table "
                     "shows each one's calls over the window")
    else:
        lines.append(f"chosen: {result.chosen}")
        lines.append(f"  {result.objective.text} on all {result.sessions} sessions, in-sample (`ctxbench run --strategy` "
                     f"replays the same on them): {_number(result.chosen_objective)}")
        if result.schedule_optimum:
            lines.append(f"  the cheapest compaction schedule on the same sessions (opt:schedule, exact): "
                         f"{_number(result.schedule_optimum)}; the chosen setting is "
                         f"{result.chosen_objective / result.schedule_optimum:.2f}× it")
    if len(result.folds):
        lines.append(f"held out ({len(result.folds)} folds, each setting chosen on the other folds' sessions; 95% "
                     "bootstrap CI over sessions):")
        lines.append(f"  chosen settings: {_with_ci(result.heldout_chosen, result.heldout_chosen_ci)}")
        lines.append(f"  default ({result.spec}): {_with_ci(result.heldout_default, result.heldout_default_ci)}")
        if result.heldout_difference is not None:
            lines.append(f"  chosen - default, per session: "
                         f"{_with_ci(result.heldout_difference, result.heldout_difference_ci)}")
        held = result.heldout
        for c in result.constraints:
            chosen, default = held[f"chosen_{c.metric}"].mean(), held[f"default_{c.metric}"].mean()
            met = "met" if bool(c.holds(np.array([chosen]), default)[0]) else "not met"
            lines.append(f"  {c.metric} held out: chosen {_number(chosen)}, default {_number(default)} "
                         f"({c.text} {met} on the held-out sessions)")
        for why in _heldout_gaps(result):
            lines.append(f"  {why}")
    if result.weak:
        lines.append(f"note: {result.weak}")
    lines.extend(f"note: {note}" for note in result.notes)
    return lines


def _heldout_gaps(result: TuneResult) -> list[str]:
    """Why a held-out mean is missing: folds that chose nothing, held-out replays that were infeasible."""
    out = []
    for row in result.folds.itertuples():
        if row.chosen is None or (isinstance(row.chosen, float) and math.isnan(row.chosen)):
            out.append(f"fold {row.fold} chose nothing: {row.reason}")
    held = result.heldout
    chose = held["chosen"].map(lambda s: isinstance(s, str))
    chosen_bad = int((chose & ~held["chosen_feasible"].astype(bool)).sum())
    if chosen_bad:
        out.append(f"the chosen settings were infeasible on {chosen_bad} of {len(held)} held-out sessions (never priced)")
    default_bad = int((~held["default_feasible"].astype(bool)).sum())
    if default_bad:
        out.append(f"the default was infeasible on {default_bad} of {len(held)} held-out sessions (never priced)")
    return out


def _best_trials(result: TuneResult) -> pd.DataFrame:
    trials = result.trials.copy()
    order = trials.assign(_infeasible=~trials["feasible"].astype(bool),
                          _unmet=~trials["meets_constraints"].astype(bool)).sort_values(
        ["_infeasible", "_unmet", "objective", "over_window_share", "trial"])
    shown = order.head(TOP_TRIALS)
    default = trials[trials["default"]]
    if not shown["default"].any():
        shown = pd.concat([shown, default])
    return shown


def _share(share: float) -> str:
    return "<0.1%" if 0 < share < 0.0005 else f"{share:.1%}"


def trials_table(result: TuneResult) -> pd.DataFrame:
    """The best trials and the default, as the tables show them."""
    rows = []
    for row in _best_trials(result).itertuples():
        rows.append({"setting": row.spec + (" (default)" if row.default else "") + (" ◆" if row.chosen else ""),
                     result.objective.text: _number(row.objective) if row.feasible else "infeasible",
                     **{c.metric: _number(getattr(row, c.metric)) for c in result.constraints},
                     **({"meets constraints": "yes" if row.meets_constraints else "no"} if result.constraints else {}),
                     "feasible sessions": f"{row.feasible_sessions}/{result.sessions}",
                     "calls over the window": _share(row.over_window_share)})
    return pd.DataFrame(rows)


def tune_markdown(result: TuneResult) -> str:
    """summary.md of a search."""
    parts = ["# ctxbench tune", ""]
    parts.extend(f"- {escape(line)}" if not line.startswith("  ") else f"  - {escape(line.strip())}"
                 for line in headline(result))
    parts += ["", "## Best settings (all sessions)", "", frame_to_markdown(trials_table(result)), ""]
    if len(result.folds):
        folds = result.folds[["fold", "train_sessions", "test_sessions", "chosen", "train_objective",
                              "heldout_chosen", "heldout_default"]].copy()
        for name in ("train_objective", "heldout_chosen", "heldout_default"):
            folds[name] = folds[name].map(_number)
        folds["chosen"] = folds["chosen"].map(lambda s: s if isinstance(s, str) else "none")
        parts += ["## Folds", "", "Each fold's setting is chosen on the other folds' sessions and judged on its own "
                  "(means per session).", "", frame_to_markdown(folds), ""]
    parts += ["Files: `trials.csv` (every setting), `results.parquet` (every replay), `folds.csv`, `heldout.csv`, "
              "`chosen.txt` (the chosen spec, for `ctxbench run --strategy`), `figures/objective.png`.", ""]
    return "\n".join(parts)


def objective_figure(result: TuneResult) -> Figure:
    """The objective (mean per session over all sessions) of each setting against each searched option:
    feasible settings as dots, the chosen one as a star, the default as a dashed line, infeasible settings as
    crosses along the bottom."""
    params = result.space
    fig = Figure(figsize=(4.2 * len(params) + 0.6, 4.0), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(params), squeeze=False)[0]
    trials = result.trials[~result.trials["default"]]
    feasible = trials[trials["feasible"].astype(bool)]
    infeasible = trials[~trials["feasible"].astype(bool)]
    default = result.trials[result.trials["default"]].iloc[0]
    values = feasible["objective"].to_numpy(dtype=float)
    floor = float(np.nanmin(values)) if len(values) else 0.0
    for ax, param in zip(axes, params):
        ax.grid(True, alpha=0.3)
        ax.scatter(feasible[param.name], feasible["objective"], s=14, color="#1f77b4", label="feasible setting")
        if len(infeasible):
            ax.scatter(infeasible[param.name], np.full(len(infeasible), floor), marker="x", s=18, color="#d62728",
                       label="infeasible (not priced)")
        if bool(default["feasible"]):
            ax.axhline(default["objective"], color="#555555", linestyle="--", linewidth=1, label="default")
        if result.chosen_index is not None:
            chosen = result.trials.iloc[result.chosen_index]
            if not chosen["default"]:
                ax.scatter([chosen[param.name]], [chosen["objective"]], marker="*", s=160, color="#ff7f0e",
                           zorder=3, label="chosen")
        if param.log:
            ax.set_xscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: tokens_label(y)))
        ax.set_xlabel(param.name)
    axes[0].set_ylabel(f"{result.objective.text}\n(mean per session, all sessions)")
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"ctxbench tune {result.spec}: {len(result.trials)} settings on {result.sessions} sessions",
                 fontsize=10)
    return fig
