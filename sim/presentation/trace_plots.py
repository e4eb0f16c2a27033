"""Figures of a trace's anatomy: access heat map, reuse distances, hub files, outputs vs files."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter

from ctxbench.sim.errors import InputError
from ctxbench.sim.presentation.plots import new_figure
from ctxbench.traces.errors import TraceError
from ctxbench.traces.stats import stats
from ctxbench.traces.schema import validate

__all__ = ["access_heatmap", "reuse_distance_hist", "hub_files_bar", "outputs_vs_files", "OUTPUTS_ROW"]

OUTPUTS_ROW = "tool outputs (all)"
MAX_COLUMNS = 150      # turn columns of the heat map before turns are binned
FILE_COLOR, OUTPUT_COLOR = "#3182bd", "#fd8d3c"


def _valid(trace: pd.DataFrame) -> pd.DataFrame:
    try:
        return validate(trace, source="trace")
    except TraceError as exc:
        raise InputError(str(exc)) from None


def _stats(trace: pd.DataFrame) -> dict:
    if not len(trace):
        raise InputError("trace: no events to plot")
    return stats(_valid(trace))


def _short(path: str, width: int = 42) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1):]


def access_heatmap(trace: pd.DataFrame, session: str | None = None, *, top: int = 30) -> Figure:
    """Accesses per path (rows) and turn (columns) for one session (default: the first).

    Rows are the ``top`` most-accessed file paths in order of first access (so task phases show
    as a diagonal and hub files as long rows); every tool output is counted in one extra bottom
    row. The conversation, tool calls' inputs and overhead are not shown. Long sessions are shown in
    bins of consecutive turns.
    """
    df = _valid(trace)
    if not len(df):
        raise InputError("trace: no events to plot")
    names = df["session"].astype(str)
    sess = names.iloc[0] if session is None else session
    part = df[names == sess]
    if part.empty:
        known = ", ".join(sorted(names.unique())[:8])
        raise InputError(f"no session {session!r} in the trace; sessions include: {known}")
    paths = part["path"].astype(str).to_numpy()
    ops = part["op"].astype(str).to_numpy()
    is_output, is_file = ops == "output", np.isin(ops, ("read", "edit", "write"))
    turns = part["turn"].to_numpy()
    t0, t1 = int(turns.min()), int(turns.max())
    per = max(1, int(np.ceil((t1 - t0 + 1) / MAX_COLUMNS)))
    col = (turns - t0) // per
    file_paths = pd.Series(paths[is_file])
    counts = file_paths.value_counts()
    chosen = counts.sort_index(kind="mergesort").sort_values(ascending=False, kind="mergesort").head(top).index
    first_seen = file_paths.drop_duplicates()
    rows = [p for p in first_seen if p in set(chosen)] + ([OUTPUTS_ROW] if is_output.any() else [])
    row_of = {p: i for i, p in enumerate(rows)}
    key = np.where(is_output, OUTPUTS_ROW, paths)
    r = np.array([row_of.get(k, -1) for k in key])
    keep = r >= 0
    grid = np.zeros((len(rows), int(col.max()) + 1))
    np.add.at(grid, (r[keep], col[keep]), 1)
    fig, ax = new_figure(9.0, max(3.2, 1.4 + 0.2 * len(rows)))
    ax.grid(False)
    image = ax.imshow(np.ma.masked_equal(grid, 0), aspect="auto", interpolation="nearest", cmap="viridis",
                      vmin=1, vmax=max(2.0, float(grid.max())),
                      extent=(t0 - 0.5, t0 + grid.shape[1] * per - 0.5, len(rows) - 0.5, -0.5))
    ax.set_facecolor("#f4f4f4")
    ax.set_yticks(range(len(rows)), [_short(p) for p in rows], fontsize=8)
    ax.set_xlabel("tool turn" + (f" (bins of {per} turns)" if per > 1 else ""))
    shown = f"top {len(rows) - is_output.any()} of {part.loc[is_file, 'path'].nunique()} files"
    ax.set_title(f"Accesses by path over turns, session {sess} ({shown})")
    bar = fig.colorbar(image, ax=ax, label="accesses per cell", pad=0.01)
    bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def reuse_distance_hist(trace: pd.DataFrame) -> Figure:
    """Histogram of reuse distances (distinct other paths between two accesses of a path), all sessions.

    Definitions and bins are those of `traces.stats.stats`.
    """
    reuse = _stats(trace)["overall"]["reuse_distance"]
    labels, counts = zip(*reuse["histogram"].items())
    fig, ax = new_figure()
    total = max(sum(counts), 1)
    bars = ax.bar(range(len(labels)), np.asarray(counts) / total, color=FILE_COLOR, width=0.8)
    ax.bar_label(bars, labels=[f"{c:,}" if c else "" for c in counts], padding=2, fontsize=8)
    ax.set_xticks(range(len(labels)), labels, rotation=30)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("reuse distance (distinct other paths accessed in between)")
    ax.set_ylabel("share of re-accesses")
    median, p90 = reuse["median"], reuse["p90"]
    detail = f"median {median:g}, p90 {p90:g}, " if reuse["count"] else ""
    ax.set_title(f"Reuse distances ({detail}{reuse['count']:,} re-accesses)")
    return fig


def hub_files_bar(trace: pd.DataFrame, *, top: int = 10) -> Figure:
    """The most-read paths of the trace: reads per path, and in how many sessions it was read."""
    tops = _stats(trace)["overall"]["top_paths"][:top]
    if not tops:
        raise InputError("trace: no reads, so no hub files to show")
    fig, ax = new_figure(8.0, max(2.6, 1.2 + 0.38 * len(tops)))
    y = np.arange(len(tops))[::-1]
    reads = [t["reads"] for t in tops]
    bars = ax.barh(y, reads, color=FILE_COLOR, height=0.65)
    ax.bar_label(bars, labels=[f"{t['reads']:,} reads, {t['sessions']} sess." for t in tops], padding=3,
                 fontsize=8)
    ax.set_yticks(y, [_short(t["path"]) for t in tops], fontsize=8)
    ax.set_xlim(0, max(reads) * 1.3)
    ax.set_xlabel("reads (all sessions)")
    ax.set_title(f"Hub files: the {len(tops)} most-read paths")
    ax.grid(False, axis="y")
    return fig


def outputs_vs_files(trace: pd.DataFrame, *, max_sessions: int = 30) -> Figure:
    """Per session, the footprint in unique bytes of files vs tool outputs (stacked bars)."""
    sessions = _stats(trace)["sessions"].head(max_sessions)
    out_kb = sessions["output_bytes"].to_numpy(float) / 1024
    file_kb = (sessions["unique_bytes"] - sessions["output_bytes"]).to_numpy(float).clip(min=0) / 1024
    fig, ax = new_figure(8.0, max(2.8, 1.4 + 0.32 * len(sessions)))
    y = np.arange(len(sessions))[::-1]
    ax.barh(y, file_kb, color=FILE_COLOR, height=0.65, label="files (largest revision of each path)")
    bars = ax.barh(y, out_kb, left=file_kb, color=OUTPUT_COLOR, height=0.65, label="tool outputs")
    share = sessions["output_bytes_share"].to_numpy(float)
    ax.bar_label(bars, labels=[f"{s:.0%} outputs" if np.isfinite(s) else "" for s in share], padding=3, fontsize=8)
    ax.set_yticks(y, [_short(str(s), 28) for s in sessions["session"]], fontsize=8)
    ax.set_xlim(0, max(float((file_kb + out_kb).max()), 1.0) * 1.25)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("unique bytes touched (KiB)")
    ax.set_title("Footprint per session: files vs tool outputs")
    fig.legend(loc="outside lower center", ncols=2, fontsize=9)
    ax.grid(False, axis="y")
    return fig
