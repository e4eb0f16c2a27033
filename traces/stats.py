"""Statistics that characterise a trace, per session and overall, and a side-by-side comparison.

Definitions of the file figures (all per session; a session's arms count together). They are
about files and tool outputs only: the events that put content in the window for good (``message``,
``call``, ``overhead``) count in ``events``, ``events_by_op``, turns and durations, and nowhere else.

- *re-read*: a ``read`` of a path that an earlier ``read`` of the same session already read;
  the re-read fraction is re-reads / reads.
- *unique bytes*: the sum over the session's distinct paths of the largest size the path had;
  what holding everything the session touched at once would cost. *Unique tokens*: the same
  sum in tokens, each path's largest size at its content kind's ratio (as the window counts it,
  below); the budget ratio = unique tokens ÷ ``budget_tokens``.
- *reuse distance* of an access (a file or tool-output event) of path ``p`` whose previous access of ``p`` in the
  session was at position ``i``: the number of **distinct other paths** accessed strictly
  between the two. 0 means nothing else came between; an LRU context holding ``C`` entries
  keeps ``p`` exactly when the distance is below ``C``. First accesses have no distance.
- *output bytes share*: bytes of ``output`` events ÷ unique bytes: the share of the session's
  footprint that is tool output rather than files (each output is its own path).
- *duration*: last minus first timestamp.

The shape of a turn (``overall["turn_calls"]``, ``overall["turn_tool_bytes"]``), pooled over every
turn of the trace that has a tool call; a turn is one (session, arm, turn) value, the tool calls
answered by one call to the model:

- *tool calls per turn*: its file and tool-output events (``read``, ``edit``, ``write``,
  ``output``), one per tool call; *tool bytes per turn*: the sum of their ``size_bytes``, the tool
  output and file content that enter the window in that turn. Each with its median, p99 (linear, as
  `numpy.percentile`) and max; real Claude Code and Codex sessions have at most 8 calls (p99 4) and
  87 KB (`traces.presets`).
- *truncated*: the events a tool cut at its agent's cap (the trace's ``truncated`` column; 0 without it).

The whole window (``stats(...)["window"]``), per arm of each session (each arm has its own): the
fixed overhead, the conversation and the tool calls' inputs as they accumulate, and the files and
tool outputs with nothing evicted (each path at its latest size, as a context without a budget
holds it), counted in tokens with the ratios by content kind (`traces.tokens`):

- *composition*: the window at the arm's end by kind: bytes, tokens, share of its tokens;
- *tool call*: a file or tool-output event (a tool's result); *growth per tool call*: the window
  after a tool call's result less the window after the previous one's (from the second call on);
- *peak*: the most the window holds at a turn's end (where the model is called with it);
  *calls to* a level: the tool calls up to the end of the turn at which the window first holds
  at least that many tokens (`WINDOW_LEVELS`; none if it never does).

Tokens are counted as the simulator counts them: each event's size in reference bytes
(`traces.tokens.TokenRatios.costs`), so the window's peak is the engine's ``peak_window_bytes``
of a replay without a budget, divided by the reference ratio.

Everything is computed on category codes with numpy (a few sorts over all events), so large
traces cost O(n log n) with small constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from ctxbench.traces.schema import CATEGORY_COLUMNS, INT_COLUMNS, OPS, category_labels, exact_sum, validate, within_limits
from ctxbench.traces.tokens import KINDS, TokenRatios, as_ratios, kind_codes
from ctxbench.traces.vocabulary import CONTENT, EDIT, MESSAGE, OUTPUT, PINNED_CODES, READ, WRITE
from ctxbench.traces.reuse import distances_from_previous, reuse_distances
from ctxbench.traces.window import window_changes

__all__ = ["stats", "compare", "summary", "reuse_distances", "DEFAULT_BUDGET_TOKENS", "WINDOW_LEVELS", "WINDOW_COLUMNS",
           "SUMMARY_ROWS", "WINDOW_SUMMARY_ROWS"]

DEFAULT_BUDGET_TOKENS = 200_000
TOP_PATHS = 10
#: Window sizes (tokens) whose first crossing `stats` reports: 100K, the 167K at which Claude Code
#: compacted the bundled sessions, and the 200K window.
WINDOW_LEVELS = (100_000, 167_000, 200_000)
WINDOW_COLUMNS = ("session", "arm", "tool_calls", "window_tokens", "peak_tokens", "pinned_tokens",
                  "tokens_per_call_median", "tokens_per_call_p90", "tokens_per_call_mean") + tuple(
    f"calls_to_{level // 1000}k" for level in WINDOW_LEVELS) + tuple(f"{kind}_tokens" for kind in KINDS)
SESSION_COLUMNS = ("session", "arms", "events", "turns", "reads", "edits", "writes", "outputs", "distinct_paths",
                   "distinct_files_read", "rereads", "reread_fraction", "top_path", "top_path_reads",
                   "unique_bytes", "unique_tokens", "budget_ratio", "output_bytes", "output_bytes_share",
                   "bash_outputs", "bash_bytes", "reuse_median", "reuse_p90", "duration_s")


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` itself when its dtypes are already canonical, else the validated frame."""
    ok = all(column in df.columns for column in (*CATEGORY_COLUMNS, *INT_COLUMNS, "op"))
    ok = ok and all(isinstance(df[column].dtype, pd.CategoricalDtype) for column in (*CATEGORY_COLUMNS, "op"))
    ok = ok and all(df[column].dtype == np.int64 for column in INT_COLUMNS)
    ok = ok and tuple(df["op"].cat.categories) == OPS and within_limits(df)
    ok = ok and ("kind" not in df.columns or (isinstance(df["kind"].dtype, pd.CategoricalDtype)
                                              and tuple(df["kind"].cat.categories) == ("",) + KINDS))
    return df if ok else validate(df, source="stats")


def _grouped_quantiles(values: np.ndarray, groups: np.ndarray, n_groups: int, qs: tuple[float, ...]) -> np.ndarray:
    """Linear-interpolated quantiles of ``values`` per group (NaN for empty groups): (n_groups, len(qs))."""
    out = np.full((n_groups, len(qs)), np.nan)
    if len(values) == 0:
        return out
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    span = int(values.max()) - int(values.min()) + 1 if values.dtype.kind in "iu" else 0
    if not 0 < span < 2**62 // max(n_groups, 1):
        sorted_values = values[np.lexsort((values, groups))]
    else:  # one sort of a combined integer key
        key = np.sort(groups.astype(np.int64) * span + (values - values.min()))
        sorted_values = key - np.repeat(np.arange(n_groups, dtype=np.int64), counts) * span + values.min()
    has = counts > 0
    for column, quantile in enumerate(qs):
        position = (counts[has] - 1) * quantile
        below = np.floor(position).astype(np.int64)
        above = np.minimum(below + 1, counts[has] - 1)
        low, high = sorted_values[starts[has] + below], sorted_values[starts[has] + above]
        out[has, column] = low + (high - low) * (position - below)
    return out


def _tool_of(names: np.ndarray) -> np.ndarray:
    """Tool name of each path (``tool://bash/3`` -> ``bash``), "" for files."""
    out = np.full(len(names), "", dtype=object)
    for index, name in enumerate(names):
        if name.startswith("tool://"):
            out[index] = name[7:].split("/", 1)[0]
    return out


def _opt(value: Any) -> float | int | None:
    """`_num` of ``value``, None for None."""
    return None if value is None else _num(value)


def _num(value: float) -> float | int | None:
    """A JSON-ready number: a Python int or float, None for NaN."""
    if isinstance(value, (np.integer, int)):
        return int(value)
    value = float(value)
    return None if math.isnan(value) else value


@dataclass
class _Columns:
    """A trace's columns as numpy arrays (categories as their codes), and its path names."""

    session: np.ndarray      # session code of each event
    path: np.ndarray         # path code of each event (int64)
    op: np.ndarray           # op code of each event (READ, EDIT, WRITE, OUTPUT)
    size: np.ndarray
    turn: np.ndarray
    ts: np.ndarray
    path_names: np.ndarray   # name of each path code
    by_name: np.ndarray      # path codes in name order
    name_rank: np.ndarray    # each path code's place in name order
    path_tool: np.ndarray    # tool of each path code (``bash`` for tool://bash/3), "" for files


@dataclass
class _Blocks:
    """Sessions as contiguous blocks of events."""

    starts: np.ndarray       # whether each event is its session's first
    of_event: np.ndarray     # block (session) index of each event
    first_row: np.ndarray    # first event of each block
    last_row: np.ndarray     # last event of each block
    names: np.ndarray        # session name of each block

    @property
    def count(self) -> int:
        """Number of sessions."""
        return len(self.first_row)


@dataclass
class _Files:
    """The file and tool-output events (what the file figures are about), by position in the trace."""

    index: np.ndarray        # each one's row in the trace
    of_event: np.ndarray     # block (session) of each
    path: np.ndarray
    op: np.ndarray
    size: np.ndarray


@dataclass
class _PathGroups:
    """The events of each (session, path) pair, in time order within each group."""

    order: np.ndarray        # events sorted by group, time order within
    first: np.ndarray        # position in `order` of each group's first event
    session: np.ndarray      # block of each group
    path: np.ndarray         # path code of each group
    previous: np.ndarray     # previous event of each event's group, -1 for the first
    reads: np.ndarray        # reads of each group
    largest: np.ndarray      # largest size of each group
    largest_cost: np.ndarray # largest cost (reference bytes, `TokenRatios.costs`) of each group


def _columns(df: pd.DataFrame) -> _Columns:
    """The columns `stats` works on, from a frame in canonical dtypes."""
    path_names = category_labels(df["path"])
    by_name = np.argsort(path_names, kind="stable")
    name_rank = np.empty(len(path_names), dtype=np.int64)
    name_rank[by_name] = np.arange(len(path_names))
    return _Columns(session=df["session"].cat.codes.to_numpy(), path=df["path"].cat.codes.to_numpy().astype(np.int64),
                    op=df["op"].cat.codes.to_numpy(), size=df["size_bytes"].to_numpy(), turn=df["turn"].to_numpy(),
                    ts=df["ts_ms"].to_numpy(), path_names=path_names, by_name=by_name, name_rank=name_rank,
                    path_tool=_tool_of(path_names))


def _session_blocks(df: pd.DataFrame, columns: _Columns) -> _Blocks:
    """Where each session's events are."""
    n_events = len(columns.op)
    starts = np.ones(n_events, dtype=bool)
    starts[1:] = columns.session[1:] != columns.session[:-1]
    first_row = np.flatnonzero(starts)
    last_row = np.append(first_row[1:] - 1, n_events - 1) if n_events else first_row
    names = category_labels(df["session"])[columns.session[first_row]]
    return _Blocks(starts, np.cumsum(starts) - 1, first_row, last_row, names)


def _file_events(columns: _Columns, blocks: _Blocks) -> _Files:
    """The events that are not pinned content (all of them in a trace of files and outputs only)."""
    pinned = np.isin(columns.op, PINNED_CODES)
    if not pinned.any():
        return _Files(np.arange(len(columns.op)), blocks.of_event, columns.path, columns.op, columns.size)
    index = np.flatnonzero(~pinned)
    return _Files(index, blocks.of_event[index], columns.path[index], columns.op[index], columns.size[index])


def _path_groups(columns: _Columns, files: _Files, cost: np.ndarray) -> _PathGroups:
    """Group the file events by (session, path), in time order within each group; positions are
    among the file events (``cost``: every event's, by row)."""
    n_events, n_paths = len(files.op), len(columns.path_names)
    key = files.of_event * (n_paths + 1) + files.path
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    group_start = np.ones(n_events, dtype=bool)
    group_start[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.flatnonzero(group_start)
    session, path = np.divmod(sorted_key[first], n_paths + 1)
    previous = np.full(n_events, -1, dtype=np.int64)
    later = np.flatnonzero(~group_start)
    previous[order[later]] = order[later - 1]
    largest = np.maximum.reduceat(files.size[order], first) if n_events else np.zeros(0, np.int64)
    largest_cost = (np.maximum.reduceat(cost[files.index][order], first) if n_events
                    else np.zeros(0, np.int64))
    reads = np.add.reduceat((files.op[order] == READ).astype(np.int64), first) if n_events else np.zeros(0, np.int64)
    return _PathGroups(order, first, session, path, previous, reads, largest, largest_cost)


def _arms_per_session(df: pd.DataFrame, blocks: _Blocks) -> np.ndarray:
    """The number of arms with events in each session."""
    n_arm_codes = len(df["arm"].cat.categories)
    if n_arm_codes <= 1:
        return np.ones(blocks.count, dtype=np.int64)
    arm = df["arm"].cat.codes.to_numpy().astype(np.int64)
    seen = np.bincount(blocks.of_event * n_arm_codes + arm, minlength=blocks.count * n_arm_codes)
    return (seen.reshape(blocks.count, n_arm_codes) > 0).sum(axis=1)


def _turns_per_session(columns: _Columns, blocks: _Blocks) -> np.ndarray:
    """The number of turns of each session."""
    new_turn = blocks.starts.copy()
    new_turn[1:] |= columns.turn[1:] != columns.turn[:-1]
    return np.bincount(blocks.of_event[new_turn], minlength=blocks.count)


def _most_read_paths(columns: _Columns, groups: _PathGroups, n_sessions: int) -> tuple[np.ndarray, np.ndarray]:
    """Each session's most-read path (most reads, then the first name; None without reads) and its reads."""
    n_paths = len(columns.path_names)
    top_reads = np.zeros(n_sessions, dtype=np.int64)
    top_path = np.full(n_sessions, None, dtype=object)
    if len(groups.path):  # one key, smallest per session: fewest reads short of the most, then the name
        most = int(groups.reads.max())
        combined = (most - groups.reads) * n_paths + columns.name_rank[groups.path]
        session_first = np.flatnonzero(np.r_[True, groups.session[1:] != groups.session[:-1]])
        best = np.minimum.reduceat(combined, session_first)
        reads_best = most - best // n_paths
        top_reads[groups.session[session_first]] = reads_best
        has = reads_best > 0
        top_path[groups.session[session_first][has]] = columns.path_names[columns.by_name[best[has] % n_paths]]
    return top_path, top_reads


def _session_frame(df: pd.DataFrame, columns: _Columns, blocks: _Blocks, files: _Files, groups: _PathGroups,
                   distances: np.ndarray, at: np.ndarray, budget_tokens: float,
                   reference: float) -> pd.DataFrame:
    """One row per session (`SESSION_COLUMNS`)."""
    n_sessions, of_event, size = blocks.count, blocks.of_event, columns.size
    by_op = np.bincount(of_event * len(OPS) + columns.op, minlength=len(OPS) * n_sessions).reshape(n_sessions, len(OPS))
    distinct = np.bincount(groups.session, minlength=n_sessions)
    unique_bytes = np.bincount(groups.session, weights=groups.largest, minlength=n_sessions).astype(np.int64)
    unique_tokens = np.bincount(groups.session, weights=groups.largest_cost, minlength=n_sessions) / reference
    files_read = np.bincount(groups.session[groups.reads > 0], minlength=n_sessions)
    rereads = by_op[:, READ] - files_read
    top_path, top_reads = _most_read_paths(columns, groups, n_sessions)
    is_out = columns.op == OUTPUT
    out_bytes = np.bincount(of_event, weights=np.where(is_out, size, 0), minlength=n_sessions).astype(np.int64)
    is_bash = is_out & (columns.path_tool == "bash")[columns.path]
    bash_outputs = np.bincount(of_event[is_bash], minlength=n_sessions)
    bash_bytes = np.bincount(of_event[is_bash], weights=size[is_bash], minlength=n_sessions).astype(np.int64)
    reuse_q = _grouped_quantiles(distances, files.of_event[at], n_sessions, (0.5, 0.9))
    duration = (columns.ts[blocks.last_row] - columns.ts[blocks.first_row]) / 1000.0
    with np.errstate(invalid="ignore", divide="ignore"):
        reads = by_op[:, READ]
        return pd.DataFrame({
            "session": blocks.names, "arms": _arms_per_session(df, blocks).astype(np.int64),
            "events": np.diff(np.append(blocks.first_row, len(columns.op))),
            "turns": _turns_per_session(columns, blocks), "reads": reads, "edits": by_op[:, EDIT],
            "writes": by_op[:, WRITE], "outputs": by_op[:, OUTPUT], "distinct_paths": distinct,
            "distinct_files_read": files_read,
            "rereads": rereads, "reread_fraction": np.where(reads > 0, rereads / reads, np.nan),
            "top_path": top_path, "top_path_reads": top_reads, "unique_bytes": unique_bytes,
            "unique_tokens": unique_tokens, "budget_ratio": unique_tokens / budget_tokens,
            "output_bytes": out_bytes,
            "output_bytes_share": np.where(unique_bytes > 0, out_bytes / unique_bytes, np.nan),
            "bash_outputs": bash_outputs, "bash_bytes": bash_bytes,
            "reuse_median": reuse_q[:, 0], "reuse_p90": reuse_q[:, 1], "duration_s": duration,
        }, columns=list(SESSION_COLUMNS))


def stats(trace: "pd.DataFrame | Iterable[pd.DataFrame]", budget_tokens: float = DEFAULT_BUDGET_TOKENS,
          tokens: "TokenRatios | float | None" = None) -> dict[str, Any]:
    """Statistics of a trace: ``{"overall": {...}, "sessions": DataFrame, "window": {...}}``
    (definitions above), in tokens at ``tokens`` (`traces.tokens.TokenRatios`, one ratio for every
    kind, or ``None`` for the calibrated ratios).

    ``overall`` holds JSON-ready values: totals, pooled fractions, the top paths by reads,
    the reuse-distance distribution, outputs by tool and per-session medians; ``sessions``
    has one row per session (`SESSION_COLUMNS`). ``window`` is the whole window: ``overall``
    (JSON-ready: the ratios, the composition by kind, growth per tool call, calls to each of
    `WINDOW_LEVELS`) and ``sessions``, one row per arm of each session (`WINDOW_COLUMNS`). A frame
    in canonical dtypes (from `load`, `generate` or `validate`) is used as is, any other is
    validated first. O(n log n).

    ``trace`` may also be frames of whole sessions in order (`traces.io.open_trace`, validated as it
    reads): each is summarised on its own and the trace-wide figures gathered from those, so that
    memory follows the largest frame, plus the rows per session and per arm, and the trace-wide
    tallies: the distinct paths (16 bytes each), the paths read (with their names) and the distinct
    read sizes, reuse distances and window growths (each with its count).

    >>> from ctxbench.traces.generate import generate
    >>> trace = generate("mixed", sessions=2, seed=1)
    >>> uniform = stats(trace, tokens=3.8)["overall"]
    >>> uniform["unique_tokens"] == uniform["unique_bytes"] / 3.8
    True
    """
    if not budget_tokens > 0:
        raise ValueError(f"budget_tokens must be > 0, got {budget_tokens}")
    ratios = as_ratios(tokens)
    totals = _Totals(budget_tokens, ratios)
    for df in [trace] if isinstance(trace, pd.DataFrame) else trace:
        totals.add(_canonical(df))
    return totals.result()


class _Tally:
    """Counts by key gathered from parts, merged when the parts outgrow what is merged (each key once)."""

    def __init__(self, columns: tuple[str, ...], slack: int = 1 << 20) -> None:
        self.columns = columns
        self.merged: pd.DataFrame | None = None
        self.parts: list[pd.DataFrame] = []
        self.pending = 0
        self.slack = slack   # keys held unmerged beyond twice the merged ones

    def add(self, keys, *values: np.ndarray) -> None:
        if not len(keys):
            return
        self.parts.append(pd.DataFrame({"key": keys, **dict(zip(self.columns, values))}))
        self.pending += len(keys)
        if self.pending > 2 * (0 if self.merged is None else len(self.merged)) + self.slack:
            self._merge()

    def _merge(self) -> None:
        frames = ([self.merged] if self.merged is not None else []) + self.parts
        if frames:
            joined = pd.concat(frames, ignore_index=True)
            self.merged = joined.groupby("key", sort=False, as_index=False).sum() if self.columns else \
                joined.drop_duplicates("key", ignore_index=True)
        self.parts, self.pending = [], 0

    def frame(self) -> pd.DataFrame:
        self._merge()
        return self.merged if self.merged is not None else pd.DataFrame({"key": [], **{c: [] for c in self.columns}})


class _Counts:
    """How often each integer value occurs, gathered from parts: exact order statistics, sums and counts in
    memory that follows the distinct values, not the values."""

    def __init__(self, slack: int = 1 << 20) -> None:
        self.tally = _Tally(("count",), slack)
        self.total = 0
        self.n = 0

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64)
        unique, counts = np.unique(values, return_counts=True)
        self.tally.add(unique, counts.astype(np.int64))
        self.total += exact_sum(values)
        self.n += len(values)

    def sorted(self) -> tuple[np.ndarray, np.ndarray]:
        frame = self.tally.frame().sort_values("key")
        return frame["key"].to_numpy(dtype=np.int64), frame["count"].to_numpy(dtype=np.int64)

    def percentiles(self, qs: tuple[float, ...], scale: float | None = None) -> list:
        """`numpy.percentile` (linear) of the values (each divided by ``scale`` when given), as numpy computes it
        from the two values around each position; None for each when there are none."""
        if not self.n:
            return [None] * len(qs)
        values, counts = self.sorted()
        ends = np.cumsum(counts)
        at = (self.n - 1) * (np.asarray(qs, dtype=np.float64) / 100)
        below = np.floor(at).astype(np.int64)
        above = np.minimum(below + 1, self.n - 1)
        low, high = values[np.searchsorted(ends, below, side="right")], values[np.searchsorted(ends, above, side="right")]
        if scale is not None:
            low, high = low / scale, high / scale
        gamma = at - below
        diff = high - low
        out = np.add(low, diff * gamma)
        np.subtract(high, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
        return list(out)

    def histogram(self, edges_of: "Callable[[np.ndarray], np.ndarray]", bins: int) -> np.ndarray:
        values, counts = self.sorted()
        return np.bincount(edges_of(values), weights=counts, minlength=bins).astype(np.int64)

    def max(self) -> int | None:
        return int(self.sorted()[0][-1]) if self.n else None


def _hashes(names: np.ndarray) -> np.ndarray:
    """A 128-bit hash of each name (two uint64 columns, two keys): names told apart without holding them."""
    names = np.asarray(names, dtype=object)
    return np.stack([pd.util.hash_array(names, hash_key="ctxbench-paths-1", categorize=False),
                     pd.util.hash_array(names, hash_key="ctxbench-paths-2", categorize=False)], axis=1)


class _Totals:
    """The figures of a trace gathered chunk by chunk (each a frame of whole sessions in canonical dtypes)."""

    def __init__(self, budget_tokens: float, ratios: TokenRatios) -> None:
        self.budget_tokens, self.ratios = budget_tokens, ratios
        self.sessions: list[pd.DataFrame] = []
        self.windows: list[pd.DataFrame] = []
        self.by_kind: list[np.ndarray] = []    # each arm's window by kind, in reference bytes / reference
        self.by_op = np.zeros(len(OPS), dtype=np.int64)
        self.events = 0
        self.arms: set[str] = set()
        self.paths = _Tally(())                 # distinct file paths, by hash
        self.reads = _Tally(("reads", "sessions"))   # read paths by name
        self.tools: dict[str, list[int]] = {}   # tool -> [outputs, bytes]
        self.unique_cost = 0
        self.output_bytes = 0
        self.read_sizes, self.distances, self.growth = _Counts(), _Counts(), _Counts()
        # one value a turn, most of them distinct: merged often, so what is held follows the distinct values
        self.turn_calls, self.turn_bytes = _Counts(1 << 14), _Counts(1 << 14)
        self.truncated = 0
        self.kind_events = np.zeros(len(KINDS), dtype=np.int64)
        self.kind_bytes = np.zeros(len(KINDS), dtype=np.int64)

    def add(self, df: pd.DataFrame) -> None:
        """Summarise one frame of whole sessions and add it to the trace's figures."""
        ratios = self.ratios
        columns = _columns(df)
        kinds = _event_kinds(df, columns)
        exact = df["exact_tokens"].to_numpy() if "exact_tokens" in df.columns else None
        cost = ratios.costs(columns.size, kinds, exact)   # reference bytes, as the engine counts them
        blocks = _session_blocks(df, columns)
        files = _file_events(columns, blocks)
        groups = _path_groups(columns, files, cost)
        distances, at = distances_from_previous(files.of_event, groups.previous)
        self.sessions.append(_session_frame(df, columns, blocks, files, groups, distances, at, self.budget_tokens,
                                            ratios.reference))
        frame, by_kind, bytes_by_kind, growth_bytes = _window(df, columns, blocks, files, groups, ratios, kinds, cost)
        self.windows.append(frame)
        self.by_kind.append(by_kind / ratios.reference)
        self.kind_events += np.bincount(kinds, minlength=len(KINDS))
        self.kind_bytes += bytes_by_kind
        self.growth.add(growth_bytes)
        op, size, path_code, path_names = columns.op, columns.size, columns.path, columns.path_names
        self.events += len(op)
        self.by_op += np.bincount(op, minlength=len(OPS))
        if len(op):
            self.arms.update(category_labels(df["arm"])[np.bincount(df["arm"].cat.codes.to_numpy()) > 0].tolist())
        present = np.bincount(files.path, minlength=len(path_names)) > 0
        self.paths.add(_hash_keys(path_names[present]))
        read_counts = np.bincount(path_code[op == READ], minlength=len(path_names))
        read_sessions = np.bincount(groups.path[groups.reads > 0], minlength=len(path_names))
        was_read = read_counts > 0
        self.reads.add(pd.array(path_names[was_read], dtype="string[pyarrow]"),   # names held as Arrow text
                       read_counts[was_read], read_sessions[was_read])
        is_out = op == OUTPUT
        out_count = np.bincount(path_code[is_out], minlength=len(path_names))
        out_bytes = np.bincount(path_code[is_out], weights=size[is_out], minlength=len(path_names))
        for name in set(columns.path_tool[out_count > 0]):
            of_tool = columns.path_tool == name
            tally = self.tools.setdefault(name, [0, 0])
            tally[0] += int(out_count[of_tool].sum())
            tally[1] += int(out_bytes[of_tool].sum())
        self.unique_cost += int(groups.largest_cost.sum())
        self.output_bytes += exact_sum(size[is_out])
        self.read_sizes.add(size[op == READ])
        self.distances.add(distances)
        calls, tool_bytes = _turn_shapes(df, columns, files)
        self.turn_calls.add(calls)
        self.turn_bytes.add(tool_bytes)
        if "truncated" in df.columns:
            self.truncated += int(df["truncated"].to_numpy(dtype=bool).sum())

    def result(self) -> dict[str, Any]:
        sessions = pd.concat(self.sessions, ignore_index=True) if len(self.sessions) > 1 else self.sessions[0]
        window = pd.concat(self.windows, ignore_index=True) if len(self.windows) > 1 else self.windows[0]
        by_kind = np.concatenate(self.by_kind) if len(self.by_kind) > 1 else self.by_kind[0]
        return {"overall": self._overall(sessions), "sessions": sessions,
                "window": {"overall": _window_overall(window, self.kind_events, self.kind_bytes, by_kind, self.growth,
                                                      self.ratios), "sessions": window}}

    def _overall(self, sessions: pd.DataFrame) -> dict[str, Any]:
        """The trace's figures over all sessions (``stats(...)["overall"]``)."""
        by_op, ratios = self.by_op, self.ratios
        reads = int(by_op[READ])
        read = self.reads.frame()
        names = read["key"].astype(object).to_numpy(dtype=object)
        top = np.lexsort((names, -read["reads"].to_numpy()))[:TOP_PATHS]
        top_paths = [{"path": str(names[i]), "reads": int(read["reads"].iloc[i]), "sessions": int(read["sessions"].iloc[i])}
                     for i in top]
        tools = {name or "other": {"count": count, "bytes": size}
                 for name, (count, size) in sorted(self.tools.items())}
        # histogram in powers of two: 0, 1, 2-3, 4-7, ..., >= 1024
        counts = self.distances.histogram(_distance_bucket, 12)
        labels = ["0", "1", "2-3"] + [f"{low}-{2 * low - 1}" for low in (4, 8, 16, 32, 64, 128, 256, 512)] + [">=1024"]
        read_q = self.read_sizes.percentiles((50, 90))
        distance_q = self.distances.percentiles((50, 90))
        medians = sessions.median(numeric_only=True)
        per_session_median = {column: _num(medians[column]) for column in (
            "events", "turns", "reads", "edits", "writes", "outputs", "distinct_paths", "distinct_files_read",
            "reread_fraction", "top_path_reads", "unique_tokens", "budget_ratio", "output_bytes_share",
            "bash_outputs", "bash_bytes", "reuse_median", "reuse_p90", "duration_s") if column in medians}
        unique_bytes = int(sessions["unique_bytes"].sum())
        distances = self.distances
        return {
            "sessions": len(sessions), "events": self.events, "turns": int(sessions["turns"].sum()),
            "arms": len(self.arms),
            "events_by_op": {name: int(by_op[code]) for code, name in enumerate(OPS)},
            "distinct_paths": len(self.paths.frame()),
            "unique_bytes": unique_bytes, "unique_tokens": self.unique_cost / ratios.reference,
            "budget_tokens": self.budget_tokens, "bytes_per_token": ratios.to_dict(),
            "max_budget_ratio": _num(sessions["budget_ratio"].max()) if len(sessions) else None,
            "sessions_over_budget": int((sessions["budget_ratio"] > 1).sum()),
            "reread_fraction": int(sessions["rereads"].sum()) / reads if reads else None,
            "output_bytes_share": self.output_bytes / unique_bytes if unique_bytes else None,
            "read_bytes": {"median": _opt(read_q[0]), "p90": _opt(read_q[1])},
            "reuse_distance": {
                "count": distances.n,
                "median": _opt(distance_q[0]), "p90": _opt(distance_q[1]),
                "mean": _num(distances.total / distances.n) if distances.n else None,
                "max": distances.max(),
                "histogram": dict(zip(labels, (int(count) for count in counts))),
            },
            "duration_s": {"median": _num(sessions["duration_s"].median()) if len(sessions) else None,
                           "max": _num(sessions["duration_s"].max()) if len(sessions) else None,
                           "total": _num(sessions["duration_s"].sum())},
            "turn_calls": self._spread(self.turn_calls), "turn_tool_bytes": self._spread(self.turn_bytes),
            "truncated": self.truncated,
            "top_paths": top_paths,
            "outputs_by_tool": tools,
            "per_session_median": per_session_median,
        }

    @staticmethod
    def _spread(counts: _Counts) -> dict[str, Any]:
        """The turns counted and the median, p99 and max of a per-turn figure."""
        median, p99 = counts.percentiles((50, 99))
        return {"turns": counts.n, "median": _opt(median), "p99": _opt(p99), "max": counts.max()}


def _turn_shapes(df: pd.DataFrame, columns: _Columns, files: _Files) -> tuple[np.ndarray, np.ndarray]:
    """The tool calls (file and tool-output events) and their bytes of each turn, a (session, arm, turn)
    value, that has any."""
    if not len(files.index):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    arm = df["arm"].cat.codes.to_numpy()[files.index]
    turn = columns.turn[files.index]
    order = np.lexsort((arm, turn, files.of_event))
    key = (files.of_event[order], turn[order], arm[order])
    start = np.ones(len(order), dtype=bool)
    start[1:] = (key[0][1:] != key[0][:-1]) | (key[1][1:] != key[1][:-1]) | (key[2][1:] != key[2][:-1])
    first = np.flatnonzero(start)
    return np.diff(np.append(first, len(order))), np.add.reduceat(files.size[order], first)


def _hash_keys(names: np.ndarray) -> np.ndarray:
    """Each name's 128-bit hash (`_hashes`) as one complex key, for counting distinct names."""
    pairs = _hashes(names)
    return pairs.view(np.complex128).ravel() if len(pairs) else np.zeros(0, dtype=np.complex128)


def _distance_bucket(distances: np.ndarray) -> np.ndarray:
    """The histogram bucket of each reuse distance: 0, 1, 2-3, 4-7, ..., >= 1024 (0 to 11)."""
    bucket = np.zeros(len(distances), dtype=np.int64)
    positive = distances > 0
    bucket[positive] = np.minimum(np.floor(np.log2(distances[positive])).astype(np.int64) + 1, 11)
    return bucket


def _event_kinds(df: pd.DataFrame, columns: _Columns) -> np.ndarray:
    """Each event's content kind (index into `KINDS`): the trace's ``kind`` where it gives one, else the op's own."""
    given = df["kind"].cat.codes.to_numpy().astype(np.int64) if "kind" in df.columns else None
    is_message = columns.op == MESSAGE
    # messages: prose or thinking by their path, decided once per path name rather than per event
    plain_ops = np.where(is_message, OUTPUT, columns.op)
    out = kind_codes(plain_ops, (), given)
    if is_message.any():
        by_path = kind_codes(np.full(len(columns.path_names), MESSAGE), columns.path_names)
        unkinded = is_message if given is None else is_message & (given == 0)
        out[unkinded] = by_path[columns.path[unkinded]]
    return out


@dataclass
class _ArmWindows:
    """Events grouped by arm (trace order within), with each one's window and tool calls so far."""

    order: np.ndarray        # the trace's rows, arm by arm
    first: np.ndarray        # position in `order` of each arm's first event
    unit_of: np.ndarray      # arm of each position in `order`
    window: np.ndarray       # the arm's window after each, in reference bytes
    calls: np.ndarray        # the arm's tool calls up to and including each
    at_end: np.ndarray       # the window where a turn ends, the smallest int64 elsewhere
    is_tool: np.ndarray      # in trace order: a file or tool-output event

    @property
    def last(self) -> np.ndarray:
        """Position in `order` of each arm's last event."""
        return np.append(self.first[1:], len(self.order)) - 1 if len(self.first) else self.first


def _arm_keys(df: pd.DataFrame, blocks: _Blocks) -> tuple[np.ndarray, np.ndarray]:
    """Each event's arm of its session, numbered across the trace in the order they first appear,
    and each event's arm code."""
    arm_codes = df["arm"].cat.codes.to_numpy().astype(np.int64)
    n_arms = len(df["arm"].cat.categories)
    if n_arms <= 1:
        return blocks.of_event, arm_codes
    _, first_at, inverse = np.unique(blocks.of_event * n_arms + arm_codes, return_index=True, return_inverse=True)
    rank = np.empty(len(first_at), dtype=np.int64)
    rank[np.argsort(first_at, kind="stable")] = np.arange(len(first_at))
    return rank[inverse], arm_codes


def _arm_windows(columns: _Columns, unit_key: np.ndarray, delta: np.ndarray, single_arm: bool) -> _ArmWindows:
    """Running sums per arm of what each event adds to the window, and of tool calls."""
    n_events = len(delta)
    order = np.arange(n_events) if single_arm else np.argsort(unit_key, kind="stable")
    unit_sorted = unit_key[order]
    starts = np.ones(n_events, dtype=bool)
    starts[1:] = unit_sorted[1:] != unit_sorted[:-1]
    first = np.flatnonzero(starts)
    sizes = np.diff(np.append(first, n_events))

    def per_arm(values: np.ndarray) -> np.ndarray:
        """Running sums of ``values`` (in `order`) restarting at each arm."""
        running = np.cumsum(values)
        return running - np.repeat(running[first] - values[first], sizes)

    is_tool = ~np.isin(columns.op, PINNED_CODES)
    window = per_arm(delta[order])
    turn = columns.turn[order]
    turn_end = np.ones(n_events, dtype=bool)
    turn_end[:-1] = (unit_sorted[1:] != unit_sorted[:-1]) | (turn[1:] != turn[:-1])
    return _ArmWindows(order, first, np.repeat(np.arange(len(first)), sizes), window,
                       per_arm(is_tool[order].astype(np.int64)), np.where(turn_end, window, np.iinfo(np.int64).min),
                       is_tool)


def _growth(arms: _ArmWindows) -> tuple[np.ndarray, np.ndarray]:
    """What the window gained with each tool call from an arm's second (reference bytes), and the arm."""
    tool_at = np.flatnonzero(arms.is_tool[arms.order])
    unit = arms.unit_of[tool_at]
    follows = unit[1:] == unit[:-1]
    return (arms.window[tool_at][1:] - arms.window[tool_at][:-1])[follows], unit[1:][follows]


def _calls_to(arms: _ArmWindows, level_bytes: float) -> np.ndarray:
    """Each arm's tool calls up to the turn end at which its window first holds ``level_bytes`` (NaN: never)."""
    hit = np.flatnonzero(arms.at_end >= level_bytes)
    first_hit = hit[np.r_[True, arms.unit_of[hit][1:] != arms.unit_of[hit][:-1]]] if len(hit) else hit
    reached = np.full(len(arms.first), np.nan)
    reached[arms.unit_of[first_hit]] = arms.calls[first_hit]
    return reached


def _composition(arms: _ArmWindows, replaces: np.ndarray, kinds: np.ndarray, cost: np.ndarray,
                 size: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What each arm's window holds at its end (every event no later one replaced, `traces.window.window_changes`):
    reference bytes by (arm, kind), bytes by kind over all arms, and each arm's pinned reference bytes."""
    n_units = len(arms.first)
    in_window = np.ones(len(replaces), dtype=bool)
    in_window[replaces[replaces >= 0]] = False
    unit_of_event = np.empty(len(arms.order), dtype=np.int64)
    unit_of_event[arms.order] = arms.unit_of
    cell = unit_of_event[in_window] * len(KINDS) + kinds[in_window]
    by_kind = np.bincount(cell, weights=cost[in_window], minlength=n_units * len(KINDS)).reshape(n_units, len(KINDS))
    bytes_by_kind = np.bincount(kinds[in_window], weights=size[in_window], minlength=len(KINDS)).astype(np.int64)
    pinned = ~arms.is_tool
    return by_kind, bytes_by_kind, np.bincount(unit_of_event[pinned], weights=cost[pinned], minlength=n_units)


def _window(df: pd.DataFrame, columns: _Columns, blocks: _Blocks, files: _Files, groups: _PathGroups,
            ratios: TokenRatios, kinds: np.ndarray, cost: np.ndarray
            ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """The whole window per arm of each session (``stats(...)["window"]["sessions"]``; module docstring),
    with what the figures over all arms are gathered from: each arm's window by kind (reference bytes),
    the bytes by kind, and each tool call's growth (reference bytes); ``kinds`` and ``cost``: each
    event's kind and reference bytes."""
    reference = ratios.reference
    unit_key, arm_codes = _arm_keys(df, blocks)
    single_arm = len(df["arm"].cat.categories) <= 1
    # What each event adds to its arm's window, each path once at its latest size (the managed model).
    adds, replaces = window_changes(columns.op, columns.path, columns.path_names, unit_key, model="managed")
    delta = np.where(adds == CONTENT, cost, 0)
    replacing = replaces >= 0
    delta[replacing] -= cost[replaces[replacing]]
    arms = _arm_windows(columns, unit_key, delta, single_arm)
    n_units = len(arms.first)
    growth_bytes, growth_unit = _growth(arms)
    growth_q = _grouped_quantiles(growth_bytes, growth_unit, n_units, (0.5, 0.9)) / reference
    growth_sum = np.bincount(growth_unit, weights=growth_bytes, minlength=n_units) / reference
    growth_count = np.bincount(growth_unit, minlength=n_units)
    by_kind, bytes_by_kind, pinned = _composition(arms, replaces, kinds, cost, columns.size)
    first_event, last = arms.order[arms.first], arms.last
    session_names = category_labels(df["session"])
    arm_names = category_labels(df["arm"])
    with np.errstate(invalid="ignore", divide="ignore"):
        frame = pd.DataFrame({
            "session": session_names[columns.session[first_event]], "arm": arm_names[arm_codes[first_event]],
            "tool_calls": arms.calls[last], "window_tokens": arms.window[last] / reference,
            "peak_tokens": (np.maximum.reduceat(arms.at_end, arms.first) if n_units else np.zeros(0)) / reference,
            "pinned_tokens": pinned / reference,
            "tokens_per_call_median": growth_q[:, 0], "tokens_per_call_p90": growth_q[:, 1],
            "tokens_per_call_mean": np.where(growth_count > 0, growth_sum / growth_count, np.nan),
            **{f"calls_to_{level // 1000}k": _calls_to(arms, level * reference) for level in WINDOW_LEVELS},
            **{f"{kind}_tokens": by_kind[:, index] / reference for index, kind in enumerate(KINDS)},
        }, columns=list(WINDOW_COLUMNS))
    return frame, by_kind, bytes_by_kind, growth_bytes


def _window_overall(frame: pd.DataFrame, events: np.ndarray, bytes_by_kind: np.ndarray, by_kind: np.ndarray,
                    growth: _Counts, ratios: TokenRatios) -> dict[str, Any]:
    """The whole window's figures over all arms of all sessions (``stats(...)["window"]["overall"]``), from
    the arms' rows, the events and bytes by kind, each arm's tokens by kind and the growths per tool call
    (reference bytes)."""
    tokens = by_kind.sum(axis=0)
    total = float(tokens.sum())
    growth_q = growth.percentiles((50, 90), scale=ratios.reference)

    def spread(column: str) -> dict[str, Any]:
        """Median, least and most of a per-arm column, and how many arms have a value."""
        values = frame[column].dropna()
        return {"arms": int(len(values)), "median": _num(values.median()) if len(values) else None,
                "min": _num(values.min()) if len(values) else None, "max": _num(values.max()) if len(values) else None}

    return {
        "bytes_per_token": ratios.to_dict(), "arms": int(len(frame)),
        "by_kind": {kind: {"events": int(events[index]), "bytes": int(bytes_by_kind[index]),
                           "tokens": _num(tokens[index]), "share": _num(tokens[index] / total) if total else None}
                    for index, kind in enumerate(KINDS)},
        "window_tokens": spread("window_tokens"), "peak_tokens": spread("peak_tokens"),
        "pinned_tokens": spread("pinned_tokens"),
        "tokens_per_call": {"median": _opt(growth_q[0]), "p90": _opt(growth_q[1]),
                            # the mean of the exact sum, correctly rounded (numpy's pairwise float sum of the whole
                            # array, which this once was, can differ in the last digit)
                            "mean": _num(float(Fraction(growth.total, growth.n) / Fraction(ratios.reference)))
                            if growth.n else None},
        "calls_to": {str(level): spread(f"calls_to_{level // 1000}k") for level in WINDOW_LEVELS},
    }


SUMMARY_ROWS: tuple[tuple[str, str], ...] = (
    ("sessions", "sessions"), ("events", "events"), ("turns", "turns"),
    ("events_by_op.read", "reads"), ("events_by_op.edit", "edits"), ("events_by_op.write", "writes"),
    ("events_by_op.output", "outputs"), ("distinct_paths", "distinct paths"),
    ("unique_tokens", "unique tokens"), ("max_budget_ratio", "max unique tokens / budget"),
    ("sessions_over_budget", "sessions over budget"), ("reread_fraction", "re-read fraction"),
    ("output_bytes_share", "output bytes share"), ("read_bytes.median", "read bytes median"),
    ("read_bytes.p90", "read bytes p90"), ("reuse_distance.median", "reuse distance median"),
    ("reuse_distance.p90", "reuse distance p90"), ("duration_s.median", "session duration median (s)"),
    ("turn_calls.median", "tool calls per turn, median"), ("turn_calls.p99", "tool calls per turn, p99"),
    ("turn_calls.max", "tool calls per turn, max"), ("turn_tool_bytes.median", "tool bytes per turn, median"),
    ("turn_tool_bytes.p99", "tool bytes per turn, p99"), ("turn_tool_bytes.max", "tool bytes per turn, max"),
    ("truncated", "results cut at the agent's cap"),
    ("per_session_median.events", "per session: events"),
    ("per_session_median.reads", "per session: reads"),
    ("per_session_median.distinct_files_read", "per session: distinct files read"),
    ("per_session_median.reread_fraction", "per session: re-read fraction"),
    ("per_session_median.top_path_reads", "per session: top file reads"),
    ("per_session_median.edits", "per session: edits"),
    ("per_session_median.bash_outputs", "per session: bash outputs"),
    ("per_session_median.bash_bytes", "per session: bash bytes"),
    ("per_session_median.output_bytes_share", "per session: output bytes share"),
    ("per_session_median.budget_ratio", "per session: unique tokens / budget"),
)
#: The whole window's headline figures, from ``result["window"]["overall"]``.
WINDOW_SUMMARY_ROWS: tuple[tuple[str, str], ...] = (
    ("window_tokens.median", "window: tokens at the end, median"),
    ("peak_tokens.median", "window: peak tokens, median"), ("peak_tokens.max", "window: peak tokens, max"),
    ("pinned_tokens.median", "window: pinned tokens at the end, median"),
    ("tokens_per_call.median", "window: tokens per tool call, median"),
    ("tokens_per_call.p90", "window: tokens per tool call, p90"),
    ("tokens_per_call.mean", "window: tokens per tool call, mean"),
) + tuple((f"calls_to.{level}.median", f"window: tool calls to {level // 1000}K tokens, median")
          for level in WINDOW_LEVELS) + tuple((f"by_kind.{kind}.share", f"window: {kind} share") for kind in KINDS)


def _dotted(value: Any, dotted: str) -> Any:
    """``value[a][b]...`` for ``dotted`` = ``"a.b..."``; None where a key is missing."""
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def summary(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """The headline figures of a `stats` result as (label, value) pairs, in display order: the
    file figures, then the whole window's."""
    window = result.get("window", {}).get("overall", {})
    return [(label, _dotted(result["overall"], dotted)) for dotted, label in SUMMARY_ROWS] + \
        [(label, _dotted(window, dotted)) for dotted, label in WINDOW_SUMMARY_ROWS]


def compare(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """Two `stats` results side by side: one row per headline figure, with the ratio B/A.

    >>> from ctxbench.traces.generate import generate
    >>> t = compare(stats(generate(seed=1)), stats(generate(seed=2)))
    >>> list(t.columns), t.loc["reads", "A"] == stats(generate(seed=1))["overall"]["events_by_op"]["read"]
    (['A', 'B', 'B/A'], True)
    """
    ra, rb = summary(a), summary(b)
    rows = []
    for (label, va), (_, vb) in zip(ra, rb):
        ratio = vb / va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va else None
        rows.append((label, va, vb, ratio))
    table = pd.DataFrame(rows, columns=["figure", labels[0], labels[1], f"{labels[1]}/{labels[0]}"], dtype=object)
    return table.set_index("figure")
