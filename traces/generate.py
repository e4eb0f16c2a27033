"""Seeded synthetic coding sessions: behaviour segments drawn per session, materialised with numpy.

The model (knobs in `traces.presets.Knobs`): a session is cut into task phases, each with
focus directories and a Zipf-ranked working set of files that partly carries over to the next
phase. Behaviour segments (hub revisits, directory walks, jumps, edit loops, edit bursts,
searches, commands, writes, subtasks) are drawn from the preset's mix and expanded into
events; a read is inserted before the first edit of a file when ``read_before_edit`` holds;
each session is cut to exactly ``tool_calls`` events per arm. Consecutive reads of a walk or
search may share a tool turn (parallel calls); other events get their own turn. Turn gaps are
lognormal think times. File sizes follow edits (lines changed, about 38 bytes a line, growing
on average) and writes; tool outputs get lognormal sizes per tool and paths
``tool://<tool>/<n>`` numbered per session. With ``arms > 1`` each arm works in its own share of the directories (hubs are
shared; the first ``spanning_arms`` arms work across all directories) and the arms' events interleave by time.

Session ``k`` depends only on (preset, overrides, repository, seed, k): its generator is the
``k``-th child spawned from ``numpy.random.default_rng(seed)``, so it is the same whatever
``sessions`` is. The work runs in chunks of sessions, so memory stays proportional to the
output.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from traces.presets import DEFAULT_PRESET, MIXES, Knobs, knobs
from traces.repo import Repo, lognormal_sigma, repo_from_checkout, synthetic_repo
from traces.schema import OPS, validate

__all__ = ["generate", "TOOLS", "BASE_EPOCH_MS", "MAX_EVENTS", "BYTES_PER_LINE"]

READ, EDIT, WRITE, OUTPUT = (OPS.index(o) for o in ("read", "edit", "write", "output"))
HUB, WALK, JUMP, LOOP, BURST, SEARCH, COMMAND, NEWFILE, SUBTASK = range(9)  # order of MIXES
TOOLS: tuple[str, ...] = ("bash", "grep", "glob", "task")
BASH, GREP, GLOB, TASK = range(4)
BASE_EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z; sessions start within 30 days of it
START_SPREAD_MS = 30 * 86_400_000
MAX_EVENTS = 200_000_000
BYTES_PER_LINE = 38
CHUNK_EVENTS = 1 << 18
VALIDATE_ROWS = 1 << 20
GOLDEN = 0.6180339887498949


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1, dtype=float) ** s
    c = np.cumsum(w)
    return c / c[-1]


def _pick(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _lognormal(z: np.ndarray, median: float, p90: float) -> np.ndarray:
    return median * np.exp(lognormal_sigma(median, p90) * z)


def _mean_segment_events(k: Knobs) -> float:
    lengths = {
        "mix_hub": 1.0, "mix_walk": k.walk_files, "mix_jump": 1.0,
        "mix_edit_loop": k.edit_rounds * (2 + k.loop_reread) - k.loop_reread, "mix_edit_burst": k.burst_edits,
        "mix_search": 1.0 + k.search_reads, "mix_command": 1.0, "mix_write": 1.5, "mix_subtask": 1.0,
    }
    total = sum(getattr(k, m) for m in MIXES)
    return sum(getattr(k, m) * lengths[m] for m in MIXES) / total


class _Layout:
    """Sizes of the per-unit random blocks (a unit is one arm of one session)."""

    def __init__(self, k: Knobs):
        n = k.tool_calls
        expected = n / _mean_segment_events(k)
        self.margin = n // 8 + 16  # segments starting this far past the end are kept, then cut
        self.segments = int(min(n + self.margin, 1.2 * expected + 4 * math.sqrt(expected) + 16))
        self.phases = min(n, int(math.ceil(n / (0.5 * k.phase_calls)))) + 1
        sizes = [("seg", 6 * self.segments), ("phase", self.phases), ("focus", self.phases * k.focus_dirs),
                 ("ws", 4 * self.phases * k.working_set), ("event", n), ("misc", 1)]
        self.slices: dict[str, slice] = {}
        at = 0
        for name, size in sizes:
            self.slices[name] = slice(at, at + size)
            at += size
        self.uniforms = at
        self.normals = n * 3


class _Model:
    """Everything fixed for one `generate` call: knobs, repository and lookup tables."""

    def __init__(self, k: Knobs, repo: Repo):
        self.k = k
        self.repo = repo
        self.layout = _Layout(k)
        self.n_targets = repo.n_files + len(repo.new_paths)
        weights = np.asarray([getattr(k, m) for m in MIXES])
        self.mix_cdf = np.cumsum(weights) / weights.sum()
        self.ws_cdf = _zipf_cdf(k.working_set, k.zipf)
        self.hub_cdf = _zipf_cdf(len(repo.hubs), k.hub_zipf) if len(repo.hubs) else None
        # 1 / log(q) of the geometric length of each segment kind (0: a fixed length of 1)
        self.inv_log_q = np.zeros(len(MIXES))
        for kind, mean in ((WALK, k.walk_files), (LOOP, k.edit_rounds), (BURST, k.burst_edits),
                           (SEARCH, 1.0 + k.search_reads)):
            if mean > 1:
                self.inv_log_q[kind] = 1.0 / math.log((mean - 1) / mean)
        d = repo.n_dirs
        dir_weights = np.tile(repo.dir_count.astype(float), (k.arms, 1))
        if k.arms > 1 and d >= k.arms:  # each arm gets its own share of the directories
            foreign = np.arange(d)[None, :] % k.arms != np.arange(k.arms)[:, None]
            foreign[:k.spanning_arms] = False
            dir_weights[foreign] = 0.0
        cum = np.cumsum(dir_weights, axis=1)
        cum /= cum[:, -1:]
        self.dir_cdf = (cum + np.arange(k.arms)[:, None]).ravel()
        self.base_sizes = np.concatenate([repo.sizes, np.full(len(repo.new_paths), int(k.file_size_median))])


def _pick_dirs(model: _Model, arm: np.ndarray, u: np.ndarray) -> np.ndarray:
    d = model.repo.n_dirs
    idx = np.searchsorted(model.dir_cdf, u + arm, side="right") - arm * d
    return np.clip(idx, 0, d - 1)


def _scaled(u: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """A uniform index in [0, count) from uniforms in [0, 1)."""
    return np.minimum((u * count).astype(np.int64), np.asarray(count) - 1)


def _unit_events(model: _Model, arm_of_unit: np.ndarray, U: np.ndarray) -> dict[str, np.ndarray]:
    """Events of a chunk of units as (units, tool_calls) arrays, each unit in its own time."""
    k, repo, lay = model.k, model.repo, model.layout
    n_units, n = U.shape[0], k.tool_calls
    G, P, F, W = lay.segments, lay.phases, k.focus_dirs, k.working_set
    sl = lay.slices
    arm_u = arm_of_unit.astype(np.int64)

    # task phases: integer lengths; phase_at[u, x] = phase of position x
    plen = np.ceil(k.phase_calls * (0.5 + U[:, sl["phase"]])).astype(np.int64)
    bounds = np.cumsum(plen, axis=1)
    width = n + lay.margin
    marks = np.zeros((n_units, width + 1), dtype=np.int16)
    ub, pb = np.nonzero(bounds <= width)
    marks[ub, bounds[ub, pb]] = 1
    phase_at = np.minimum(np.cumsum(marks, axis=1, dtype=np.int64), P - 1)
    focus = _pick_dirs(model, arm_u[:, None, None], U[:, sl["focus"]].reshape(n_units, P, F))
    # working sets: fresh picks (focus directories or anywhere), or the previous phase's file
    wsu = U[:, sl["ws"]].reshape(n_units, 4, P, W)  # carry, locality, directory, file
    fdir = np.take_along_axis(focus, _scaled(wsu[:, 2], F), axis=2)
    local = repo.dir_start[fdir] + _scaled(wsu[:, 3], repo.dir_count[fdir])
    fresh_val = np.where(wsu[:, 1] < k.locality, local, _scaled(wsu[:, 3], repo.n_files))
    fresh = wsu[:, 0] >= k.carry_over
    fresh[:, 0, :] = True
    src = np.maximum.accumulate(np.where(fresh, np.arange(P)[None, :, None], 0), axis=1)
    ws = np.take_along_axis(fresh_val, src, axis=1).reshape(n_units * P * W)

    # segments: kind and length for all, the rest for those starting within the session
    su = U[:, sl["seg"]].reshape(n_units, 6, G)
    kind = np.minimum(np.searchsorted(model.mix_cdf, su[:, 0], side="right"), len(MIXES) - 1)
    if model.hub_cdf is None:
        kind[kind == HUB] = JUMP
    geo = 1 + np.minimum(np.floor(np.log1p(-su[:, 1].astype(np.float64)) * model.inv_log_q[kind]), 1e7)
    geo = geo.astype(np.int64)
    reread = su[:, 5] < k.loop_reread
    length = np.where(kind == LOOP, geo * (2 + reread) - reread, geo)
    length = np.where(kind == NEWFILE, 1 + (su[:, 5] < 0.5), length)
    np.minimum(length, n, out=length)
    start0 = np.cumsum(length, axis=1) - length
    ku, kg = np.nonzero(start0 < width)
    kind, length, start0, reread = kind[ku, kg], length[ku, kg], start0[ku, kg], reread[ku, kg]
    u2, u3, u4, u5 = su[ku, 2, kg], su[ku, 3, kg], su[ku, 4, kg], su[ku, 5, kg]
    phase = phase_at[ku, start0]
    seg_focus = focus.reshape(n_units * P * F)[(ku * P + phase) * F + _scaled(u2, F)]
    ws_base = (ku * P + phase) * W
    target = ws[ws_base + _pick(model.ws_cdf, u2)]
    if model.hub_cdf is not None:
        to_hub = (kind == HUB) | (((kind == LOOP) | (kind == BURST)) & (u3 < k.hub_edit))
        target = np.where(to_hub, repo.hubs[_pick(model.hub_cdf, u2)], target)
    cold = (kind == JUMP) & (u3 < k.cold_jump)
    target = np.where(cold, _scaled(u4, repo.n_files), target)
    is_walk = kind == WALK
    dcount = repo.dir_count[seg_focus]
    length = np.where(is_walk, np.minimum(length, dcount), length)
    target = np.where(is_walk, repo.dir_start[seg_focus] + _scaled(u3, dcount - length + 1), target)
    newf = repo.n_files + repo.new_start[seg_focus] + _scaled(u3, repo.new_count[seg_focus])
    target = np.where(kind == NEWFILE, newf, target)

    # expand segments into events
    seg = np.repeat(np.arange(len(kind)), length)
    first = np.cumsum(length) - length
    pos = np.arange(len(seg)) - first[seg]
    ev_kind = kind[seg]
    ev_target = target[seg]
    op = np.full(len(seg), READ, dtype=np.int8)
    tool = np.full(len(seg), BASH, dtype=np.int8)
    op[ev_kind == BURST] = EDIT
    m = is_walk[seg]
    ev_target[m] += pos[m]
    m = np.flatnonzero(ev_kind == LOOP)
    op[m] = np.array([EDIT, OUTPUT, READ], dtype=np.int8)[pos[m] % (2 + reread[seg[m]])]
    m = ev_kind == SEARCH
    out0 = m & (pos == 0)
    op[out0] = OUTPUT
    tool[out0] = np.where(u3[seg[out0]] < 0.6, GREP, GLOB)
    sr = np.flatnonzero(m & (pos > 0))
    usr = (u4[seg[sr]] + pos[sr] * GOLDEN) % 1.0
    ev_target[sr] = ws[ws_base[seg[sr]] + _pick(model.ws_cdf, usr)]
    op[(ev_kind == COMMAND) | (ev_kind == SUBTASK) | ((ev_kind == NEWFILE) & (pos == 1))] = OUTPUT
    tool[ev_kind == SUBTASK] = TASK
    op[(ev_kind == NEWFILE) & (pos == 0)] = WRITE
    joinable = np.zeros(len(seg), dtype=bool)
    joinable[1:] = (((ev_kind == WALK) | (ev_kind == SEARCH)) & (op == READ))[1:] & (op[:-1] == READ) & \
        (seg[1:] == seg[:-1])
    unit = ku[seg]

    if k.read_before_edit:
        unit, op, ev_target, tool, joinable = _read_before_edit(unit, op, ev_target, tool, joinable,
                                                                model.n_targets)
    return _cut(unit, op, ev_target, tool, joinable, n_units, n)


def _first_of_each(key: np.ndarray, groups: int, n_targets: int) -> np.ndarray:
    """Positions of the first occurrence of each distinct key (keys < groups * n_targets)."""
    if groups * n_targets <= 8 * len(key) + 1024:  # a dense table of each key's smallest position
        table = np.full(groups * n_targets, len(key), dtype=np.int64)
        np.minimum.at(table, key, np.arange(len(key)))
        first = table[key]
        return first[first == np.arange(len(key))]
    return np.unique(key, return_index=True)[1]


def _read_before_edit(unit, op, target, tool, joinable, n_targets):
    """Insert a read before every edit that is the first event of its file in its unit."""
    is_file = op != OUTPUT
    idx = np.flatnonzero(is_file)
    key = unit[idx].astype(np.int64) * n_targets + target[idx]
    first_ev = idx[_first_of_each(key, int(unit.max(initial=0)) + 1, n_targets)]
    need = first_ev[op[first_ev] == EDIT]
    if len(need) == 0:
        return unit, op, target, tool, joinable
    reps = np.ones(len(op), dtype=np.int64)
    reps[need] = 2
    src = np.repeat(np.arange(len(op)), reps)
    inserted = np.zeros(len(src), dtype=bool)
    inserted[np.cumsum(reps)[need] - 2] = True
    op2 = op[src].copy()
    op2[inserted] = READ
    join2 = joinable[src].copy()
    join2[inserted] = False
    return unit[src], op2, target[src], tool[src], join2


def _cut(unit, op, target, tool, joinable, n_units, n):
    """Exactly ``n`` events per unit: cut the overflow, pad a (rare) short unit with commands."""
    counts = np.bincount(unit, minlength=n_units)
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(unit)) - starts[unit]
    keep = rank < n
    out = {
        "op": np.full((n_units, n), OUTPUT, dtype=np.int8),
        "target": np.zeros((n_units, n), dtype=np.int64),
        "tool": np.full((n_units, n), BASH, dtype=np.int8),
        "joinable": np.zeros((n_units, n), dtype=bool),
    }
    flat = unit[keep] * n + rank[keep]
    out["op"].ravel()[flat] = op[keep]
    out["target"].ravel()[flat] = target[keep]
    out["tool"].ravel()[flat] = tool[keep]
    out["joinable"].ravel()[flat] = joinable[keep]
    out["joinable"][:, 0] = False
    return out


def _times(model: _Model, ev: dict[str, np.ndarray], Z: np.ndarray, session_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn index and timestamp (ms) of each event of each unit."""
    k = model.k
    n_units, n = ev["op"].shape
    new_turn = ~ev["joinable"]
    turn = np.cumsum(new_turn, axis=1, dtype=np.int64) - 1
    gap = _lognormal(Z[:, n:2 * n], k.think_ms_median, k.think_ms_p90)
    gap = np.minimum(gap, 3_600_000.0)  # an hour at most between two turns
    gap[:, 0] = 0.0
    gap *= new_turn
    ts = session_start[:, None] + np.cumsum(np.rint(gap).astype(np.int64), axis=1)
    return turn, ts


def _sizes(model: _Model, session: np.ndarray, op: np.ndarray, target: np.ndarray, tool: np.ndarray,
           z_size: np.ndarray, z_lines: np.ndarray, u_sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Size after each event and lines changed, following edits and writes per session and file."""
    k = model.k
    size = np.zeros(len(op), dtype=np.int64)
    lines = np.zeros(len(op), dtype=np.int64)
    is_edit, is_write, is_out = op == EDIT, op == WRITE, op == OUTPUT
    lines_e = np.clip(np.rint(_lognormal(z_lines[is_edit], k.edit_lines_median, k.edit_lines_p90)), 1, 5000)
    lines[is_edit] = lines_e.astype(np.int64)
    wsize = np.clip(np.rint(_lognormal(z_size[is_write], k.file_size_median, k.file_size_p90)), 40,
                    k.file_size_max).astype(np.int64)
    lines[is_write] = (wsize + BYTES_PER_LINE - 1) // BYTES_PER_LINE
    # outputs: lognormal per tool
    for t, (med, p90) in enumerate(((k.bash_median, k.bash_p90), (k.search_median, k.search_p90),
                                    (k.search_median, k.search_p90), (k.task_median, k.task_p90))):
        m = is_out & (tool == t)
        size[m] = np.clip(np.rint(_lognormal(z_size[m], med, p90)), 0, k.output_max).astype(np.int64)
    # files: the size follows writes (reset) and edits (grow or shrink by the lines changed); only
    # the (session, file) pairs with an edit or write need following, the others keep their size
    fidx = np.flatnonzero(~is_out)
    key_all = session[fidx].astype(np.int64) * model.n_targets + target[fidx]
    changed = ~is_out & ~(op == READ)
    size[fidx] = model.base_sizes[target[fidx]]
    groups = int(session.max(initial=0)) + 1
    if groups * model.n_targets <= 8 * len(fidx) + 1024:
        dirty = np.zeros(groups * model.n_targets, dtype=bool)
        dirty[key_all[changed[fidx]]] = True
        fidx = fidx[dirty[key_all]]
    if len(fidx):
        key = session[fidx].astype(np.int64) * model.n_targets + target[fidx]
        by_key = np.argsort(key, kind="stable")
        order, skey = fidx[by_key], key[by_key]
        # an edit's net change: a uniform share of its lines added minus removed, growing on average
        net = np.rint(lines[order] * BYTES_PER_LINE * (u_sign[order] - 0.35)).astype(np.int64)
        delta = np.where(op[order] == EDIT, net, 0)
        cs = np.cumsum(delta)
        group_start = np.ones(len(order), dtype=bool)
        group_start[1:] = skey[1:] != skey[:-1]
        w = op[order] == WRITE
        anchor = group_start | w
        wsize_full = np.zeros(len(op), dtype=np.int64)
        wsize_full[is_write] = wsize
        anchor_val = np.where(w, wsize_full[order], model.base_sizes[target[order]])
        anchor_cs = np.where(w, cs, cs - delta)
        a = np.maximum.accumulate(np.where(anchor, np.arange(len(order)), 0))
        size[order] = np.maximum(anchor_val[a] + cs - anchor_cs[a], 16)
    return size, lines


def _chunk(model: _Model, rngs: list[np.random.Generator], sessions: range, starts: np.ndarray) -> dict:
    """All events of a chunk of sessions, in session order, as flat arrays."""
    k, lay = model.k, model.layout
    n, arms = k.tool_calls, k.arms
    n_units = len(rngs)
    U = np.empty((n_units, lay.uniforms), dtype=np.float32)
    Z = np.empty((n_units, lay.normals), dtype=np.float32)
    for i, rng in enumerate(rngs):
        rng.random(out=U[i], dtype=np.float32)
        rng.standard_normal(out=Z[i], dtype=np.float32)
    arm_of_unit = np.tile(np.arange(arms), len(sessions))
    ev = _unit_events(model, arm_of_unit, U)
    unit_start = np.repeat(starts, arms) + arm_of_unit * (U[:, lay.slices["misc"]][:, 0] * 60_000).astype(np.int64)
    turn, ts = _times(model, ev, Z, unit_start)
    eu = U[:, lay.slices["event"]]
    cols = {"op": ev["op"], "target": ev["target"], "tool": ev["tool"], "turn": turn, "ts": ts,
            "z_size": Z[:, :n], "z_lines": Z[:, 2 * n:3 * n], "u_sign": eu,
            "arm": np.broadcast_to(arm_of_unit[:, None], (n_units, n))}
    per = n * arms
    n_sess = len(sessions)
    flat = {name: np.ascontiguousarray(a).reshape(n_sess, per) for name, a in cols.items()}
    if arms > 1:  # interleave the arms of each session by time; a new turn when the arm or its turn changes
        order = np.lexsort((np.tile(np.arange(per), (n_sess, 1)), flat["arm"], flat["ts"]), axis=1)
        flat = {name: np.take_along_axis(a, order, axis=1) for name, a in flat.items()}
        change = np.ones((n_sess, per), dtype=bool)
        change[:, 1:] = (flat["arm"][:, 1:] != flat["arm"][:, :-1]) | (flat["turn"][:, 1:] != flat["turn"][:, :-1])
        flat["turn"] = np.cumsum(change, axis=1, dtype=np.int64) - 1
    flat = {name: a.ravel() for name, a in flat.items()}
    session_local = np.repeat(np.arange(n_sess), per)
    size, lines = _sizes(model, session_local, flat["op"], flat["target"], flat["tool"], flat["z_size"],
                         flat["z_lines"], flat["u_sign"])
    # output paths: tool://<tool>/<n>, n counted per session and tool from 1
    is_out = flat["op"] == OUTPUT
    path = flat["target"].copy()
    for t in range(len(TOOLS)):
        m = (is_out & (flat["tool"] == t)).reshape(n_sess, per)
        count = np.cumsum(m, axis=1, dtype=np.int64).ravel()
        mf = m.ravel()
        path[mf] = model.n_targets + t * per + count[mf] - 1
    return {"turn": flat["turn"], "ts_ms": flat["ts"], "op": flat["op"], "path": path, "size_bytes": size,
            "arm": flat["arm"].astype(np.int8), "lines_changed": lines}


def _resolve_repo(repo: Repo | str | os.PathLike | None, k: Knobs, rng: np.random.Generator) -> Repo:
    if repo is None:
        return synthetic_repo(rng, files=k.repo_files, hubs=k.hub_files, size_median=k.file_size_median,
                              size_p90=k.file_size_p90, size_max=k.file_size_max)
    if isinstance(repo, Repo):
        return repo
    return repo_from_checkout(repo, hubs=k.hub_files)


def generate(preset: str | Knobs = DEFAULT_PRESET, sessions: int = 1, seed: int = 0, *,
             repo: Repo | str | os.PathLike | None = None, check: bool = True, **overrides: Any) -> pd.DataFrame:
    """A synthetic trace of ``sessions`` sessions of ``preset`` (knobs changed by ``overrides``).

    Pure given ``seed``: the same arguments give an identical frame, and session ``k`` is the
    same whatever ``sessions`` is. ``repo`` is a `Repo`, a checkout directory, or None for a
    synthetic repository drawn from the seed. The frame has canonical dtypes (built so), is
    validated against the schema unless ``check`` is false, and carries its recipe in ``attrs``.
    Runs in O(events) time and memory.

    >>> t = generate("mixed", sessions=2, seed=7)
    >>> len(t), t["session"].nunique(), sorted(t["op"].unique())
    (500, 2, ['edit', 'output', 'read', 'write'])
    """
    k = knobs(preset, **overrides)
    if isinstance(sessions, bool) or not isinstance(sessions, (int, np.integer)) or sessions < 1:
        raise ValueError(f"sessions must be a positive integer, got {sessions!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    per = k.tool_calls * k.arms
    total = int(sessions) * per
    if total > MAX_EVENTS:
        raise ValueError(f"{sessions} sessions x {per} events = {total:,} events; the limit is {MAX_EVENTS:,}")
    root = np.random.default_rng(int(seed))
    (repo_rng,) = root.spawn(1)
    model = _Model(k, _resolve_repo(repo, k, repo_rng))
    session_rngs = root.spawn(int(sessions))

    out = {"turn": np.empty(total, np.int64), "ts_ms": np.empty(total, np.int64), "op": np.empty(total, np.int8),
           "path": np.empty(total, np.int64), "size_bytes": np.empty(total, np.int64),
           "arm": np.empty(total, np.int8), "lines_changed": np.empty(total, np.int64)}
    per_chunk = max(1, CHUNK_EVENTS // per)
    for lo in range(0, int(sessions), per_chunk):
        hi = min(int(sessions), lo + per_chunk)
        rngs: list[np.random.Generator] = []
        starts = np.empty(hi - lo, dtype=np.int64)
        for j, srng in enumerate(session_rngs[lo:hi]):
            starts[j] = BASE_EPOCH_MS + int(srng.random() * START_SPREAD_MS)
            rngs.extend(srng.spawn(k.arms) if k.arms > 1 else [srng])
        part = _chunk(model, rngs, range(lo, hi), starts)
        for name, values in part.items():
            out[name][lo * per:hi * per] = values
    df = _frame(model, out, int(sessions), per, preset, int(seed))
    df.attrs["generator"] = {"preset": preset if isinstance(preset, str) else "custom", "sessions": int(sessions),
                             "seed": int(seed), "overrides": dict(overrides),
                             "repo": None if repo is None or isinstance(repo, Repo) else str(repo)}
    if check:
        _validate_in_slices(df, per, source=f"generate({preset!r})")
    return df


def _validate_in_slices(df: pd.DataFrame, per: int, source: str) -> None:
    """Validate ``df`` a few whole sessions at a time, so checking a huge trace stays in bounded memory."""
    step = max(1, VALIDATE_ROWS // per) * per
    for lo in range(0, len(df), step):
        hi = min(len(df), lo + step)
        validate(df.iloc[lo:hi], source=f"{source} rows {lo}-{hi - 1}" if (lo, hi) != (0, len(df)) else source)


def _frame(model: _Model, out: dict[str, np.ndarray], sessions: int, per: int, preset: str | Knobs,
           seed: int) -> pd.DataFrame:
    """The trace frame: categoricals built from codes, unused path categories dropped."""
    code = out.pop("path")
    n_codes = model.n_targets + len(TOOLS) * per
    used = np.bincount(code, minlength=n_codes) > 0
    remap = np.cumsum(used) - 1
    paths = model.repo.all_paths
    names = [paths[i] if i < model.n_targets else
             f"tool://{TOOLS[(i - model.n_targets) // per]}/{(i - model.n_targets) % per + 1}"
             for i in np.flatnonzero(used)]
    label = preset if isinstance(preset, str) else "custom"
    session_names = [f"{label}-{seed}-{i:05d}" for i in range(sessions)]
    arm_names = ["main"] + [f"arm{i}" for i in range(1, model.k.arms)]
    path_codes = remap[code].astype(np.int32)
    session_codes = np.repeat(np.arange(sessions, dtype=np.int32), per)
    return pd.DataFrame({
        "session": pd.Categorical.from_codes(session_codes, categories=pd.Index(session_names, dtype=str)),
        "turn": out["turn"], "ts_ms": out["ts_ms"],
        "op": pd.Categorical.from_codes(out["op"], categories=list(OPS)),
        "path": pd.Categorical.from_codes(path_codes, categories=pd.Index(names, dtype=str)),
        "size_bytes": out["size_bytes"],
        "arm": pd.Categorical.from_codes(out["arm"], categories=pd.Index(arm_names, dtype=str)),
        "lines_changed": out["lines_changed"],
    }, copy=False)
