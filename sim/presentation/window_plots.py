"""The whole context window over a session, stacked by what it holds, against the input tokens recorded."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from ctxbench.sim.analysis.fidelity import GROUP_LABELS, GROUPS
from ctxbench.sim.errors import InputError
from ctxbench.sim.presentation.plots import new_figure, tokens_label

__all__ = ["GROUP_COLORS", "default_window", "window_figure"]

#: One colour per band, bottom to top: fixed overhead, conversation, calls' inputs, files, tool outputs.
GROUP_COLORS = {"overhead": "#bdbdbd", "conversation": "#9e9ac8", "calls": "#fdae6b", "files": "#3182bd",
                "outputs": "#74c476"}
REAL_COLOR = "#000000"


def default_window(composition: pd.DataFrame) -> tuple[str, str]:
    """The (session, arm) a figure shows by default: the main arm with most recorded calls, else the
    arm with most turns (ties: first in the trace)."""
    if not len(composition):
        raise InputError("no turns to plot")
    frame = composition.assign(known=composition["real_tokens"] > 0, main=composition["arm"] == "main")
    counts = frame.groupby(["session", "arm"], sort=False).agg(known=("known", "sum"), main=("main", "first"),
                                                               turns=("turn", "size"))
    best = counts.sort_values(["main", "known", "turns"], ascending=False, kind="stable").index[0]
    return str(best[0]), str(best[1])


def window_figure(composition: pd.DataFrame, session: str | None = None, arm: str | None = None, *,
                  title: str | None = None) -> Figure:
    """One arm's window before each of its turns (`sim.analysis.fidelity.window_composition`), stacked
    by `GROUPS` in tokens, with the input tokens the real model saw where the log records them.

    A compaction shows as the stack falling back to the overhead and what the agent kept. ``session``
    and ``arm`` default to `default_window`; an unknown one is `InputError` naming what there is.
    """
    if session is None and arm is None:
        session, arm = default_window(composition)
    names = composition["session"].astype(str)
    if session is None:
        session = str(names.iloc[0]) if len(names) else ""
    part = composition[names == session]
    if part.empty:
        known = ", ".join(sorted(names.unique())[:8]) or "none"
        raise InputError(f"no session {session!r} to plot; sessions include: {known}")
    arm = arm or ("main" if (part["arm"] == "main").any() else str(part["arm"].iloc[0]))
    part = part[part["arm"].astype(str) == arm]
    if part.empty:
        raise InputError(f"session {session!r} has no arm {arm!r}; arms: "
                         f"{', '.join(sorted(composition.loc[names == session, 'arm'].astype(str).unique()))}")
    x = np.arange(len(part))
    fig, ax = new_figure(9.0, 4.8)
    ax.stackplot(x, *(part[group].to_numpy(dtype=float) for group in GROUPS),
                 labels=[GROUP_LABELS[group] for group in GROUPS], colors=[GROUP_COLORS[g] for g in GROUPS],
                 alpha=0.9, linewidth=0)
    real = part["real_tokens"].to_numpy(dtype=float)
    known = real > 0
    if known.any():
        ax.plot(x[known], real[known], color=REAL_COLOR, linewidth=1.2, marker="o", markersize=2.2,
                label="recorded input tokens")
    for boundary in np.flatnonzero(np.diff(part["segment"].to_numpy()) != 0):
        ax.axvline(boundary + 0.5, color="#444444", linestyle="--", linewidth=0.8)
    ax.set_xlim(0, max(1, len(part) - 1))
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("turn of the arm (a call to the model; dashed: a compaction)")
    ax.set_ylabel("tokens in the window before the turn")
    shown = session if len(session) <= 40 else session[:37] + "…"
    ax.set_title(title or f"The whole window of {shown} [{arm}]", loc="left", fontsize=11)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    return fig
