"""Statistics that characterise a trace, per session and overall, and a side-by-side comparison.

Definitions (all per session; a session's arms count together):

- *re-read*: a ``read`` of a path that an earlier ``read`` of the same session already read;
  the re-read fraction is re-reads / reads.
- *unique bytes*: the sum over the session's distinct paths of the largest size the path had;
  what holding everything the session touched at once would cost. Tokens = bytes ÷
  ``bytes_per_token``; the budget ratio = unique tokens ÷ ``budget_tokens``.
- *reuse distance* of an access (any op) of path ``p`` whose previous access of ``p`` in the
  session was at position ``i``: the number of **distinct other paths** accessed strictly
  between the two. 0 means nothing else came between; an LRU context holding ``C`` entries
  keeps ``p`` exactly when the distance is below ``C``. First accesses have no distance.
- *output bytes share*: bytes of ``output`` events ÷ unique bytes: the share of the session's
  footprint that is tool output rather than files (each output is its own path).
- *duration*: last minus first timestamp.

Everything is computed on category codes with numpy (a few sorts over all events), so large
traces cost O(n log n) with small constants.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from traces.schema import CATEGORY_COLUMNS, INT_COLUMNS, OPS, validate, within_limits

__all__ = ["stats", "compare", "summary", "reuse_distances", "DEFAULT_BUDGET_TOKENS", "DEFAULT_BYTES_PER_TOKEN"]

DEFAULT_BUDGET_TOKENS = 200_000
DEFAULT_BYTES_PER_TOKEN = 3.8
TOP_PATHS = 10
READ, EDIT, WRITE, OUTPUT = range(4)
SESSION_COLUMNS = ("session", "arms", "events", "turns", "reads", "edits", "writes", "outputs", "distinct_paths",
                   "distinct_files_read", "rereads", "reread_fraction", "top_path", "top_path_reads",
                   "unique_bytes", "unique_tokens", "budget_ratio", "output_bytes", "output_bytes_share",
                   "bash_outputs", "bash_bytes", "reuse_median", "reuse_p90", "duration_s")


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` itself when its dtypes are already canonical, else the validated frame."""
    ok = all(c in df.columns for c in (*CATEGORY_COLUMNS, *INT_COLUMNS, "op"))
    ok = ok and all(isinstance(df[c].dtype, pd.CategoricalDtype) for c in (*CATEGORY_COLUMNS, "op"))
    ok = ok and all(df[c].dtype == np.int64 for c in INT_COLUMNS)
    ok = ok and tuple(df["op"].cat.categories) == OPS and within_limits(df)
    return df if ok else validate(df, source="stats")


def _prefix_smaller(rank: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements of its group have a smaller rank.

    ``rank`` is, within each contiguous group (``group_start`` marks the first element of
    each), a permutation of 0..size-1. Groups of up to `BITSET_LIMIT` elements use 64-bit
    masks (O(m g / 64)), larger ones a wavelet pass per bit (O(m log g)).

    >>> _prefix_smaller(np.array([1, 0, 2, 0, 1]), np.array([True, False, False, True, False])).tolist()
    [0, 0, 2, 0, 1]
    """
    m = len(rank)
    out = np.zeros(m, dtype=np.int64)
    if m == 0:
        return out
    gpos = np.flatnonzero(group_start)
    gsize = np.diff(np.append(gpos, m))
    small = np.repeat(gsize <= BITSET_LIMIT, gsize)
    for mask, counter in ((small, _prefix_smaller_bits), (~small, _prefix_smaller_wavelet)):
        if mask.any():
            out[mask] = counter(rank[mask], group_start[mask])
    return out


BITSET_LIMIT = 1024


def _prefix_smaller_bits(rank: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    # elements in blocks of 64 by index; for each block, a running bit mask in rank order of
    # the block's elements seen so far; popcount of (smaller rank) & (earlier index)
    m = len(rank)
    gpos = np.flatnonzero(group_start)
    gsize = np.diff(np.append(gpos, m))
    gid = np.repeat(np.arange(len(gpos)), gsize)
    local = np.arange(m) - gpos[gid]
    block = local >> 6
    onebit = np.left_shift(np.uint64(1), (local & 63).astype(np.uint64))
    below = onebit - np.uint64(1)
    at_rank = gpos[gid] + rank            # position of each element in rank order
    in_rank_order = np.empty(m, dtype=np.int64)
    in_rank_order[at_rank] = np.arange(m)
    block_r, bit_r = block[in_rank_order], onebit[in_rank_order]
    out = np.zeros(m, dtype=np.int64)
    zero = np.uint64(0)
    for b in range(int(block.max()) + 1):
        v = np.where(block_r == b, bit_r, zero)
        c = np.cumsum(v, dtype=np.uint64)  # wraps across groups; differences within a group are exact
        base = (c[gpos] - v[gpos])[gid]
        smaller = c[at_rank] - v[at_rank] - base
        smaller = np.where(block > b, smaller, np.where(block == b, smaller & below, zero))
        out += np.bitwise_count(smaller)
    return out


def _prefix_smaller_wavelet(rank: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    # each level splits every group by one bit of the rank (zeros first, order kept); a one
    # counts the zeros before it in its group: those are exactly the earlier, smaller ranks
    # whose first differing bit is this one. int32 throughout: groups are below 2**31.
    m = len(rank)
    gpos = np.flatnonzero(group_start).astype(np.int32)
    gsize = np.diff(np.append(gpos, m)).astype(np.int32)
    reps = np.repeat(np.arange(len(gpos), dtype=np.int32), gsize)
    starts = gpos[reps]                 # group start of each slot of the arrangement
    ends = starts + gsize[reps]
    slot = np.arange(m, dtype=np.int32)
    perm = slot.copy()                  # element at each slot: groups contiguous, index order within
    acc = np.zeros(m, dtype=np.int32)   # count so far of the element at each slot
    r = rank.astype(np.int32)           # rank of the element at each slot
    for t in range(int(gsize.max() - 1).bit_length() - 1, -1, -1):
        ones = ((r >> t) & 1).astype(bool)
        zero = (~ones).view(np.int8)
        zeros_incl = np.cumsum(zero, dtype=np.int32)
        zeros_excl = zeros_incl - zero
        base = zeros_excl[starts]       # zeros before the group
        zeros_before = zeros_excl - base
        acc += np.where(ones, zeros_before, 0).astype(np.int32)
        split = starts + (zeros_incl[ends - 1] - base)
        new_pos = np.where(ones, split + (slot - starts - zeros_before), starts + zeros_before)
        moved = np.empty((5, m), dtype=np.int32)
        moved[:, new_pos] = (perm, r, acc, np.where(ones, split, starts), np.where(ones, ends, split))
        perm, r, acc, starts, ends = moved
    out = np.empty(m, dtype=np.int64)
    out[perm] = acc
    return out


def reuse_distances(session_block: np.ndarray, path_code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reuse distance of every re-access, and the positions of those re-accesses.

    ``session_block`` must be non-decreasing (sessions contiguous). O(n log n).

    >>> d, at = reuse_distances(np.zeros(6, int), np.array([0, 1, 2, 1, 0, 0]))
    >>> d.tolist(), at.tolist()
    ([1, 2, 0], [3, 4, 5])
    """
    n = len(path_code)
    key = session_block.astype(np.int64) * (int(path_code.max(initial=0)) + 1) + path_code
    order = np.argsort(key, kind="stable")
    prev = np.full(n, -1, dtype=np.int64)
    same = key[order][1:] == key[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    return _distances_from_prev(session_block, prev)


def _distances_from_prev(session_block: np.ndarray, prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # distinct paths in (i, j) = first accesses in (i, j) + re-accesses k in (i, j) with prev[k] < i;
    # the latter = #{re-access k < j: prev[k] < prev[j]} - #{re-access k <= i}, counted per session.
    n = len(prev)
    first = prev < 0
    at = np.flatnonzero(~first)
    if len(at) == 0:
        return np.zeros(0, dtype=np.int64), at
    i = prev[at]
    cf = np.cumsum(first)
    first_between = cf[at - 1] - cf[i]
    sb = session_block[at]
    gstart = np.ones(len(at), dtype=bool)
    gstart[1:] = sb[1:] != sb[:-1]
    # rank of i among this session's re-access origins: prev positions are distinct and
    # stay inside their session, so a running count over positions ranks them
    is_origin = np.zeros(n, dtype=bool)
    is_origin[i] = True
    origin_rank = np.cumsum(is_origin) - 1
    sizes = np.diff(np.append(np.flatnonzero(gstart), len(at)))
    rank = origin_rank[i]
    rank -= np.repeat(np.minimum.reduceat(rank, np.flatnonzero(gstart)), sizes)
    smaller = _prefix_smaller(rank, gstart)
    # re-accesses of this session at or before i: a running count minus those before the session
    reacc = np.cumsum(~first)
    before_session = np.repeat(reacc[at[gstart]] - 1, sizes)
    return first_between + smaller - (reacc[i] - before_session), at


def _grouped_quantiles(values: np.ndarray, groups: np.ndarray, n_groups: int, qs: tuple[float, ...]) -> np.ndarray:
    """Linear-interpolated quantiles of ``values`` per group (NaN for empty groups): (n_groups, len(qs))."""
    out = np.full((n_groups, len(qs)), np.nan)
    if len(values) == 0:
        return out
    span = int(values.max()) - int(values.min()) + 1
    key = np.sort(groups.astype(np.int64) * span + (values - values.min()))
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    sorted_vals = key - np.repeat(np.arange(n_groups, dtype=np.int64), counts) * span + values.min()
    has = counts > 0
    for c, q in enumerate(qs):
        h = (counts[has] - 1) * q
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, counts[has] - 1)
        a, b = sorted_vals[starts[has] + lo], sorted_vals[starts[has] + hi]
        out[has, c] = a + (b - a) * (h - lo)
    return out


def _tool_of(names: np.ndarray) -> np.ndarray:
    """Tool name of each path (``tool://bash/3`` -> ``bash``), "" for files."""
    out = np.full(len(names), "", dtype=object)
    for i, name in enumerate(names):
        if name.startswith("tool://"):
            out[i] = name[7:].split("/", 1)[0]
    return out


def _opt(x: Any) -> float | int | None:
    return None if x is None else _num(x)


def _num(x: float) -> float | int | None:
    if isinstance(x, (np.integer, int)):
        return int(x)
    x = float(x)
    return None if math.isnan(x) else x


def stats(df: pd.DataFrame, budget_tokens: float = DEFAULT_BUDGET_TOKENS,
          bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN) -> dict[str, Any]:
    """Statistics of a trace: ``{"overall": {...}, "sessions": DataFrame}`` (definitions above).

    ``overall`` holds JSON-ready values: totals, pooled fractions, the top paths by reads,
    the reuse-distance distribution, outputs by tool and per-session medians; ``sessions``
    has one row per session (`SESSION_COLUMNS`). A frame in canonical dtypes (from `load`,
    `generate` or `validate`) is used as is, any other is validated first. O(n log n).
    """
    if not budget_tokens > 0 or not bytes_per_token > 0:
        raise ValueError(f"budget_tokens and bytes_per_token must be > 0, got {budget_tokens}, {bytes_per_token}")
    df = _canonical(df)
    n = len(df)
    s_codes = df["session"].cat.codes.to_numpy()
    p_codes = df["path"].cat.codes.to_numpy().astype(np.int64)
    op = df["op"].cat.codes.to_numpy()
    size = df["size_bytes"].to_numpy()
    turn = df["turn"].to_numpy()
    ts = df["ts_ms"].to_numpy()
    path_names = np.asarray(df["path"].cat.categories.astype(str), dtype=object)
    P = len(path_names)

    start = np.ones(n, dtype=bool)
    start[1:] = s_codes[1:] != s_codes[:-1]
    sb = np.cumsum(start) - 1
    first_row = np.flatnonzero(start)
    S = len(first_row)
    last_row = np.append(first_row[1:] - 1, n - 1) if n else first_row
    names = np.asarray(df["session"].cat.categories.astype(str), dtype=object)[s_codes[first_row]]
    by_op = np.bincount(sb * 4 + op, minlength=4 * S).reshape(S, 4)
    new_turn = start.copy()
    new_turn[1:] |= turn[1:] != turn[:-1]
    turns = np.bincount(sb[new_turn], minlength=S)
    n_arm_cats = len(df["arm"].cat.categories)
    if n_arm_cats > 1:
        arm = df["arm"].cat.codes.to_numpy().astype(np.int64)
        arms = (np.bincount(sb * n_arm_cats + arm, minlength=S * n_arm_cats).reshape(S, n_arm_cats) > 0).sum(axis=1)
    else:
        arms = np.ones(S, dtype=np.int64)

    # group events by (session, path), in time order within each group
    key = sb * (P + 1) + p_codes
    order = np.argsort(key, kind="stable")
    skey = key[order]
    gstart = np.ones(n, dtype=bool)
    gstart[1:] = skey[1:] != skey[:-1]
    gpos = np.flatnonzero(gstart)
    g_session, g_path = np.divmod(skey[gpos], P + 1)
    prev = np.full(n, -1, dtype=np.int64)
    later = np.flatnonzero(~gstart)
    prev[order[later]] = order[later - 1]

    distinct = np.bincount(g_session, minlength=S)
    g_max = np.maximum.reduceat(size[order], gpos) if n else np.zeros(0, np.int64)
    unique_bytes = np.bincount(g_session, weights=g_max, minlength=S).astype(np.int64)
    g_reads = np.add.reduceat((op[order] == READ).astype(np.int64), gpos) if n else np.zeros(0, np.int64)
    files_read = np.bincount(g_session[g_reads > 0], minlength=S)
    rereads = by_op[:, READ] - files_read
    # most-read path per session: most reads, then the first path name; one key, min per session
    name_rank = np.empty(P, dtype=np.int64)
    name_rank[np.argsort(path_names, kind="stable")] = np.arange(P)
    top_reads = np.zeros(S, dtype=np.int64)
    top_path = np.full(S, None, dtype=object)
    if n:
        most = int(g_reads.max())
        combined = (most - g_reads) * P + name_rank[g_path]
        s_first = np.flatnonzero(np.r_[True, g_session[1:] != g_session[:-1]])
        best = np.minimum.reduceat(combined, s_first)
        reads_best = most - best // P
        top_reads[g_session[s_first]] = reads_best
        by_name = np.argsort(path_names, kind="stable")
        has = reads_best > 0
        top_path[g_session[s_first][has]] = path_names[by_name[best[has] % P]]

    is_out = op == OUTPUT
    out_bytes = np.bincount(sb, weights=np.where(is_out, size, 0), minlength=S).astype(np.int64)
    tool_of = _tool_of(path_names)
    is_bash = is_out & (tool_of == "bash")[p_codes]
    bash_n = np.bincount(sb[is_bash], minlength=S)
    bash_b = np.bincount(sb[is_bash], weights=size[is_bash], minlength=S).astype(np.int64)

    dist, at = _distances_from_prev(sb, prev)
    rq = _grouped_quantiles(dist, sb[at], S, (0.5, 0.9))
    duration = (ts[last_row] - ts[first_row]) / 1000.0

    with np.errstate(invalid="ignore", divide="ignore"):
        reads = by_op[:, READ]
        sessions = pd.DataFrame({
            "session": names, "arms": arms.astype(np.int64), "events": np.diff(np.append(first_row, n)),
            "turns": turns, "reads": reads, "edits": by_op[:, EDIT], "writes": by_op[:, WRITE],
            "outputs": by_op[:, OUTPUT], "distinct_paths": distinct, "distinct_files_read": files_read,
            "rereads": rereads, "reread_fraction": np.where(reads > 0, rereads / reads, np.nan),
            "top_path": top_path, "top_path_reads": top_reads, "unique_bytes": unique_bytes,
            "unique_tokens": unique_bytes / bytes_per_token,
            "budget_ratio": unique_bytes / bytes_per_token / budget_tokens,
            "output_bytes": out_bytes,
            "output_bytes_share": np.where(unique_bytes > 0, out_bytes / unique_bytes, np.nan),
            "bash_outputs": bash_n, "bash_bytes": bash_b,
            "reuse_median": rq[:, 0], "reuse_p90": rq[:, 1], "duration_s": duration,
        }, columns=list(SESSION_COLUMNS))
    overall = _overall(sessions, df, op, size, p_codes, path_names, name_rank, tool_of, g_reads, g_path, dist,
                       budget_tokens, bytes_per_token)
    return {"overall": overall, "sessions": sessions}


def _overall(sessions: pd.DataFrame, df: pd.DataFrame, op: np.ndarray, size: np.ndarray, p_codes: np.ndarray,
             path_names: np.ndarray, name_rank: np.ndarray, tool_of: np.ndarray, g_reads: np.ndarray, g_path: np.ndarray,
             dist: np.ndarray, budget_tokens: float, bytes_per_token: float) -> dict[str, Any]:
    n = len(op)
    by_op = np.bincount(op, minlength=4)
    reads = int(by_op[READ])
    read_counts = np.bincount(p_codes[op == READ], minlength=len(path_names))
    read_sessions = np.bincount(g_path[g_reads > 0], minlength=len(path_names))
    top = np.lexsort((name_rank, -read_counts))[:TOP_PATHS]
    top_paths = [{"path": str(path_names[i]), "reads": int(read_counts[i]), "sessions": int(read_sessions[i])}
                 for i in top if read_counts[i] > 0]
    tools: dict[str, dict[str, int]] = {}
    is_out = op == OUTPUT
    out_count = np.bincount(p_codes[is_out], minlength=len(path_names))
    out_bytes = np.bincount(p_codes[is_out], weights=size[is_out], minlength=len(path_names))
    for name in sorted(set(tool_of[out_count > 0])):
        m = tool_of == name
        tools[name or "other"] = {"count": int(out_count[m].sum()), "bytes": int(out_bytes[m].sum())}
    # histogram in powers of two: 0, 1, 2-3, 4-7, ..., >= 1024
    bucket = np.zeros(len(dist), dtype=np.int64)
    pos = dist > 0
    bucket[pos] = np.minimum(np.floor(np.log2(dist[pos])).astype(np.int64) + 1, 11)
    counts = np.bincount(bucket, minlength=12)
    labels = ["0", "1", "2-3"] + [f"{a}-{2 * a - 1}" for a in (4, 8, 16, 32, 64, 128, 256, 512)] + [">=1024"]
    read_sizes = size[op == READ]
    read_q = np.percentile(read_sizes, [50, 90]) if len(read_sizes) else [None, None]
    dist_q = np.percentile(dist, [50, 90]) if len(dist) else [None, None]
    med = sessions.median(numeric_only=True)
    per_session_median = {c: _num(med[c]) for c in (
        "events", "turns", "reads", "edits", "writes", "outputs", "distinct_paths", "distinct_files_read",
        "reread_fraction", "top_path_reads", "unique_tokens", "budget_ratio", "output_bytes_share",
        "bash_outputs", "bash_bytes", "reuse_median", "reuse_p90", "duration_s") if c in med}
    unique_bytes = int(sessions["unique_bytes"].sum())
    return {
        "sessions": len(sessions), "events": n, "turns": int(sessions["turns"].sum()),
        "arms": int((np.bincount(df["arm"].cat.codes.to_numpy(), minlength=1) > 0).sum()) if n else 0,
        "events_by_op": {name: int(by_op[i]) for i, name in enumerate(OPS)},
        "distinct_paths": int((np.bincount(p_codes, minlength=1) > 0).sum()) if n else 0,
        "unique_bytes": unique_bytes, "unique_tokens": unique_bytes / bytes_per_token,
        "budget_tokens": budget_tokens, "bytes_per_token": bytes_per_token,
        "max_budget_ratio": _num(sessions["budget_ratio"].max()) if len(sessions) else None,
        "sessions_over_budget": int((sessions["budget_ratio"] > 1).sum()),
        "reread_fraction": int(sessions["rereads"].sum()) / reads if reads else None,
        "output_bytes_share": int(size[is_out].sum()) / unique_bytes if unique_bytes else None,
        "read_bytes": {"median": _opt(read_q[0]), "p90": _opt(read_q[1])},
        "reuse_distance": {
            "count": int(len(dist)),
            "median": _opt(dist_q[0]), "p90": _opt(dist_q[1]),
            "mean": _num(dist.mean()) if len(dist) else None,
            "max": int(dist.max()) if len(dist) else None,
            "histogram": dict(zip(labels, (int(c) for c in counts))),
        },
        "duration_s": {"median": _num(sessions["duration_s"].median()) if len(sessions) else None,
                       "max": _num(sessions["duration_s"].max()) if len(sessions) else None,
                       "total": _num(sessions["duration_s"].sum())},
        "top_paths": top_paths,
        "outputs_by_tool": tools,
        "per_session_median": per_session_median,
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


def summary(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """The headline figures of a `stats` result as (label, value) pairs, in display order."""
    rows = []
    for dotted, label in SUMMARY_ROWS:
        value: Any = result["overall"]
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        rows.append((label, value))
    return rows


def compare(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """Two `stats` results side by side: one row per headline figure, with the ratio B/A.

    >>> from traces.generate import generate
    >>> t = compare(stats(generate(seed=1)), stats(generate(seed=2)))
    >>> list(t.columns), t.loc["events", "A"]
    (['A', 'B', 'B/A'], 250)
    """
    ra, rb = summary(a), summary(b)
    rows = []
    for (label, va), (_, vb) in zip(ra, rb):
        ratio = vb / va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va else None
        rows.append((label, va, vb, ratio))
    table = pd.DataFrame(rows, columns=["figure", labels[0], labels[1], f"{labels[1]}/{labels[0]}"], dtype=object)
    return table.set_index("figure")
