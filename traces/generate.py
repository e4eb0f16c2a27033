"""Seeded synthetic coding sessions: behaviour segments drawn per session, materialised with numpy.

The model (knobs in `traces.presets.Knobs`): a session is cut into task phases, each with
focus directories and a Zipf-ranked working set of files that partly carries over to the next
phase. Behaviour segments (hub revisits, directory walks, jumps, edit loops, edit bursts,
searches, commands, writes, subtasks) are drawn from the preset's mix and expanded into
events; a read is inserted before the first edit of a file when ``read_before_edit`` holds;
each session is cut to exactly ``tool_calls`` events per arm. A turn is the tool calls one call to
the model answers: a read of a walk or search joins the previous read's turn with chance
``parallel``, any other read or output that follows no edit or write of its segment joins the
previous call's with chance ``parallel_calls`` (a user message, at a phase's start, ends a turn),
and a turn holds at most ``turn_calls_max`` calls and ``turn_bytes_max`` bytes of results (a call
past them starts the next turn; the bytes' split keeps the time). Turn gaps are lognormal think
times. File sizes follow edits (lines changed, about 38 bytes a line, growing
on average) and writes; tool outputs get lognormal sizes per tool and paths
``tool://<tool>/<n>`` numbered per session. The agent's caps cut what one result shows: an output
over ``output_max`` is cut to it, a read or edit of a file over ``read_max`` shows its first
``read_max`` bytes (a write is never larger), each marked ``truncated`` (the file's own size goes on
following its edits, so a later read matches). With ``arms > 1`` each arm works in its own share of
the directories (hubs are shared; the first ``spanning_arms`` arms work across all directories) and the
arms' events interleave by time.

The rest of the window (``conversation``, on by default; figures in `traces.presets`): each arm
starts with its fixed overhead (``overhead://system``) and a user message; a task phase after the
first starts with one with chance ``follow_up``; a turn's first tool call is preceded by the
assistant's thinking and text with their chances; every tool call's input is a ``call`` event
(``call://<tool>/<n>``, the same ``n`` as its result's ``tool://<tool>/<n>``) just before its
result: a small JSON input plus framing, an edit's old and new strings, a write's content.
Messages are ``msg://user/<n>``, ``msg://assistant/<n>``, ``msg://thinking/<n>``. All of it is
drawn after the file and tool events from the same generators, so those events are the same with
and without it (``conversation=False`` with the old turns' knobs, `traces.presets`, gives exactly the
trace of earlier versions, less the ``truncated`` column).

Session ``k`` depends only on (preset, overrides, repository, seed, k): its generator is the
``k``-th child spawned from ``numpy.random.default_rng(seed)``, so it is the same whatever
``sessions`` is. The work runs in chunks of sessions, so memory stays proportional to the
output.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ctxbench.traces.presets import DEFAULT_PRESET, MIXES, Knobs
from ctxbench.traces.presets import knobs as knobs_of
from ctxbench.traces.repo import Repo, lognormal_sigma, repo_from_checkout, synthetic_repo
from ctxbench.traces.schema import OPS, validate
from ctxbench.traces.tokens import DEFAULT_RATIOS

__all__ = ["generate", "generate_chunks", "check_size", "TOOLS", "CALL_TOOLS", "BASE_EPOCH_MS", "MAX_EVENTS", "BYTES_PER_LINE"]

READ, EDIT, WRITE, OUTPUT, MESSAGE, CALL, OVERHEAD = (OPS.index(op) for op in (
    "read", "edit", "write", "output", "message", "call", "overhead"))
HUB, WALK, JUMP, LOOP, BURST, SEARCH, COMMAND, NEWFILE, SUBTASK = range(9)  # order of MIXES
TOOLS: tuple[str, ...] = ("bash", "grep", "glob", "task")
BASH, GREP, GLOB, TASK = range(4)
#: Tools whose inputs are ``call`` events: a read, an edit or a write, then the output tools.
CALL_TOOLS: tuple[str, ...] = ("read", "edit", "write") + TOOLS
MESSAGE_ROLES: tuple[str, ...] = ("user", "assistant", "thinking")
MESSAGE_MAX = 40_000   # bytes of one message or thinking block (the largest real one: 28,058)
CALL_MAX = 8_000       # bytes of a small tool-call input (the largest real one: 3,620)
# What may precede a tool event, in order; each tool event expands to the parts it has.
PARTS = ("overhead", "user", "thinking", "text", "call", "result")
BASE_EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z; sessions start within 30 days of it
START_SPREAD_MS = 30 * 86_400_000
MAX_EVENTS = 200_000_000
BYTES_PER_LINE = 38
JOIN_READ, JOIN_CALL = 1, 2   # how an event may join the previous one's turn (`_expand`)
CHUNK_EVENTS = 1 << 18
VALIDATE_ROWS = 1 << 20
GOLDEN = 0.6180339887498949


def _zipf_cdf(size: int, exponent: float) -> np.ndarray:
    """The cumulative distribution of ranks 1..``size`` with weights ``1 / rank ** exponent``."""
    weights = 1.0 / np.arange(1, size + 1, dtype=float) ** exponent
    cumulative = np.cumsum(weights)
    return cumulative / cumulative[-1]


def _pick(cdf: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """The index that each uniform in [0, 1) falls on in ``cdf``."""
    return np.minimum(np.searchsorted(cdf, uniform, side="right"), len(cdf) - 1)


def _lognormal(normal: np.ndarray, median: float, p90: float) -> np.ndarray:
    """Lognormal values with this median and 90th percentile, from standard normals."""
    return median * np.exp(lognormal_sigma(median, p90) * normal)


def _mean_segment_events(knobs: Knobs) -> float:
    """The mean number of events of a segment, over the preset's mix."""
    lengths = {
        "mix_hub": 1.0, "mix_walk": knobs.walk_files, "mix_jump": 1.0,
        "mix_edit_loop": knobs.edit_rounds * (2 + knobs.loop_reread) - knobs.loop_reread,
        "mix_edit_burst": knobs.burst_edits,
        "mix_search": 1.0 + knobs.search_reads, "mix_command": 1.0, "mix_write": 1.5, "mix_subtask": 1.0,
    }
    total = sum(getattr(knobs, mix) for mix in MIXES)
    return sum(getattr(knobs, mix) * lengths[mix] for mix in MIXES) / total


class _Layout:
    """Sizes of the per-unit random blocks (a unit is one arm of one session)."""

    def __init__(self, knobs: Knobs):
        calls = knobs.tool_calls
        expected = calls / _mean_segment_events(knobs)
        self.margin = calls // 8 + 16  # segments starting this far past the end are kept, then cut
        self.width = calls + self.margin
        self.segments = int(min(calls + self.margin, 1.2 * expected + 4 * math.sqrt(expected) + 16))
        self.phases = min(calls, int(math.ceil(calls / (0.5 * knobs.phase_calls)))) + 1
        sizes = [("seg", 6 * self.segments), ("phase", self.phases), ("focus", self.phases * knobs.focus_dirs),
                 ("ws", 4 * self.phases * knobs.working_set), ("event", calls), ("misc", 1)]
        self.slices: dict[str, slice] = {}
        at = 0
        for name, size in sizes:
            self.slices[name] = slice(at, at + size)
            at += size
        self.uniforms = at
        self.normals = calls * 3


class _Model:
    """Everything fixed for one `generate` call: knobs, repository and lookup tables."""

    def __init__(self, knobs: Knobs, repo: Repo):
        self.knobs = knobs
        self.repo = repo
        self.layout = _Layout(knobs)
        self.n_targets = repo.n_files + len(repo.new_paths)
        weights = np.asarray([getattr(knobs, mix) for mix in MIXES])
        self.mix_cdf = np.cumsum(weights) / weights.sum()
        self.ws_cdf = _zipf_cdf(knobs.working_set, knobs.zipf)
        self.hub_cdf = _zipf_cdf(len(repo.hubs), knobs.hub_zipf) if len(repo.hubs) else None
        # 1 / log(q) of the geometric length of each segment kind (0: a fixed length of 1)
        self.inv_log_q = np.zeros(len(MIXES))
        for kind, mean in ((WALK, knobs.walk_files), (LOOP, knobs.edit_rounds), (BURST, knobs.burst_edits),
                           (SEARCH, 1.0 + knobs.search_reads)):
            if mean > 1:
                self.inv_log_q[kind] = 1.0 / math.log((mean - 1) / mean)
        n_dirs = repo.n_dirs
        dir_weights = np.tile(repo.dir_count.astype(float), (knobs.arms, 1))
        if knobs.arms > 1 and n_dirs >= knobs.arms:  # each arm gets its own share of the directories
            foreign = np.arange(n_dirs)[None, :] % knobs.arms != np.arange(knobs.arms)[:, None]
            foreign[:knobs.spanning_arms] = False
            dir_weights[foreign] = 0.0
        cumulative = np.cumsum(dir_weights, axis=1)
        cumulative /= cumulative[:, -1:]
        self.dir_cdf = (cumulative + np.arange(knobs.arms)[:, None]).ravel()
        self.base_sizes = np.concatenate([repo.sizes, np.full(len(repo.new_paths), int(knobs.file_size_median))])


def _pick_dirs(model: _Model, arm: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """A directory of each arm's share for each uniform in [0, 1), weighted by its files."""
    n_dirs = model.repo.n_dirs
    index = np.searchsorted(model.dir_cdf, uniform + arm, side="right") - arm * n_dirs
    return np.clip(index, 0, n_dirs - 1)


def _scaled(uniform: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """A uniform index in [0, count) from uniforms in [0, 1)."""
    return np.minimum((uniform * count).astype(np.int64), np.asarray(count) - 1)


@dataclass
class _Segments:
    """The behaviour segments of a chunk of units that start within their session, one entry each."""

    unit: np.ndarray        # the unit it belongs to
    kind: np.ndarray        # HUB, WALK, ...
    length: np.ndarray      # its events
    target: np.ndarray      # the file it works on (a walk's first file)
    reread: np.ndarray      # an edit loop that re-reads its file between rounds
    u_variant: np.ndarray   # a uniform that picks the variant: a hub edit, a cold jump, a walk's start, grep or glob
    u_spread: np.ndarray    # a uniform for a cold jump's file and a search's reads
    ws_base: np.ndarray     # where its phase's working set starts in the flat working sets
    new_phase: np.ndarray   # the first segment of its unit that starts in its phase


def _phases(model: _Model, arm_of_unit: np.ndarray, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's task phases: the phase at each position (units, width + 1), and each phase's focus directories."""
    knobs, layout = model.knobs, model.layout
    n_units, n_phases = uniforms.shape[0], layout.phases
    phase_length = np.ceil(knobs.phase_calls * (0.5 + uniforms[:, layout.slices["phase"]])).astype(np.int64)
    bounds = np.cumsum(phase_length, axis=1)
    marks = np.zeros((n_units, layout.width + 1), dtype=np.int16)
    bound_unit, bound_phase = np.nonzero(bounds <= layout.width)
    marks[bound_unit, bounds[bound_unit, bound_phase]] = 1
    phase_at = np.minimum(np.cumsum(marks, axis=1, dtype=np.int64), n_phases - 1)
    focus_uniforms = uniforms[:, layout.slices["focus"]].reshape(n_units, n_phases, knobs.focus_dirs)
    focus = _pick_dirs(model, arm_of_unit.astype(np.int64)[:, None, None], focus_uniforms)
    return phase_at, focus


def _working_sets(model: _Model, uniforms: np.ndarray, focus: np.ndarray) -> np.ndarray:
    """Each phase's working set, flat over (unit, phase, slot): fresh picks (focus directories or
    anywhere), or the file the previous phase had in the slot."""
    knobs, layout, repo = model.knobs, model.layout, model.repo
    n_units, n_phases, ws_size = uniforms.shape[0], layout.phases, knobs.working_set
    # carry, locality, directory, file
    ws_uniforms = uniforms[:, layout.slices["ws"]].reshape(n_units, 4, n_phases, ws_size)
    ws_dir = np.take_along_axis(focus, _scaled(ws_uniforms[:, 2], knobs.focus_dirs), axis=2)
    local = repo.dir_start[ws_dir] + _scaled(ws_uniforms[:, 3], repo.dir_count[ws_dir])
    fresh_file = np.where(ws_uniforms[:, 1] < knobs.locality, local, _scaled(ws_uniforms[:, 3], repo.n_files))
    fresh = ws_uniforms[:, 0] >= knobs.carry_over
    fresh[:, 0, :] = True
    source_phase = np.maximum.accumulate(np.where(fresh, np.arange(n_phases)[None, :, None], 0), axis=1)
    return np.take_along_axis(fresh_file, source_phase, axis=1).reshape(n_units * n_phases * ws_size)


def _segments(model: _Model, uniforms: np.ndarray, phase_at: np.ndarray, focus: np.ndarray,
              working_sets: np.ndarray) -> _Segments:
    """The segments of each unit: kind and length for all, then target for those starting within the session."""
    knobs, layout, repo = model.knobs, model.layout, model.repo
    n_units, n_phases, n_focus, ws_size = uniforms.shape[0], layout.phases, knobs.focus_dirs, knobs.working_set
    seg_uniforms = uniforms[:, layout.slices["seg"]].reshape(n_units, 6, layout.segments)
    kind = np.minimum(np.searchsorted(model.mix_cdf, seg_uniforms[:, 0], side="right"), len(MIXES) - 1)
    if model.hub_cdf is None:
        kind[kind == HUB] = JUMP
    geometric = 1 + np.minimum(np.floor(np.log1p(-seg_uniforms[:, 1].astype(np.float64)) * model.inv_log_q[kind]),
                               1e7)
    geometric = geometric.astype(np.int64)
    reread = seg_uniforms[:, 5] < knobs.loop_reread
    length = np.where(kind == LOOP, geometric * (2 + reread) - reread, geometric)
    length = np.where(kind == NEWFILE, 1 + (seg_uniforms[:, 5] < 0.5), length)
    np.minimum(length, knobs.tool_calls, out=length)
    start = np.cumsum(length, axis=1) - length
    unit, slot = np.nonzero(start < layout.width)
    kind, length, start, reread = kind[unit, slot], length[unit, slot], start[unit, slot], reread[unit, slot]
    u_target, u_variant, u_spread = (seg_uniforms[unit, row, slot] for row in (2, 3, 4))
    phase = phase_at[unit, start]
    focus_index = (unit * n_phases + phase) * n_focus + _scaled(u_target, n_focus)
    seg_focus = focus.reshape(n_units * n_phases * n_focus)[focus_index]
    ws_base = (unit * n_phases + phase) * ws_size
    target = working_sets[ws_base + _pick(model.ws_cdf, u_target)]
    if model.hub_cdf is not None:
        to_hub = (kind == HUB) | (((kind == LOOP) | (kind == BURST)) & (u_variant < knobs.hub_edit))
        target = np.where(to_hub, repo.hubs[_pick(model.hub_cdf, u_target)], target)
    cold = (kind == JUMP) & (u_variant < knobs.cold_jump)
    target = np.where(cold, _scaled(u_spread, repo.n_files), target)
    is_walk = kind == WALK
    dir_files = repo.dir_count[seg_focus]
    length = np.where(is_walk, np.minimum(length, dir_files), length)
    target = np.where(is_walk, repo.dir_start[seg_focus] + _scaled(u_variant, dir_files - length + 1), target)
    new_file = repo.n_files + repo.new_start[seg_focus] + _scaled(u_variant, repo.new_count[seg_focus])
    target = np.where(kind == NEWFILE, new_file, target)
    new_phase = np.ones(len(unit), dtype=bool)
    new_phase[1:] = (unit[1:] != unit[:-1]) | (phase[1:] != phase[:-1])
    return _Segments(unit, kind, length, target, reread, u_variant, u_spread, ws_base, new_phase)


def _expand(model: _Model, segments: _Segments, working_sets: np.ndarray) -> tuple[np.ndarray, ...]:
    """The segments' events in order: unit, op, target, tool, whether it may join the previous turn,
    and whether it starts a task phase."""
    seg_of = np.repeat(np.arange(len(segments.kind)), segments.length)
    first = np.cumsum(segments.length) - segments.length
    position = np.arange(len(seg_of)) - first[seg_of]
    kind = segments.kind[seg_of]
    target = segments.target[seg_of]
    op = np.full(len(seg_of), READ, dtype=np.int8)
    tool = np.full(len(seg_of), BASH, dtype=np.int8)
    op[kind == BURST] = EDIT
    in_walk = (segments.kind == WALK)[seg_of]
    target[in_walk] += position[in_walk]
    in_loop = np.flatnonzero(kind == LOOP)
    loop_ops = np.array([EDIT, OUTPUT, READ], dtype=np.int8)
    op[in_loop] = loop_ops[position[in_loop] % (2 + segments.reread[seg_of[in_loop]])]
    in_search = kind == SEARCH
    search_output = in_search & (position == 0)
    op[search_output] = OUTPUT
    tool[search_output] = np.where(segments.u_variant[seg_of[search_output]] < 0.6, GREP, GLOB)
    search_read = np.flatnonzero(in_search & (position > 0))
    u_read = (segments.u_spread[seg_of[search_read]] + position[search_read] * GOLDEN) % 1.0
    target[search_read] = working_sets[segments.ws_base[seg_of[search_read]] + _pick(model.ws_cdf, u_read)]
    op[(kind == COMMAND) | (kind == SUBTASK) | ((kind == NEWFILE) & (position == 1))] = OUTPUT
    tool[kind == SUBTASK] = TASK
    op[(kind == NEWFILE) & (position == 0)] = WRITE
    # which turn each event may join: a walk's or search's read the previous read's (JOIN_READ); a read
    # or output outside an edit loop, edit burst or write the previous call's when that is one too (JOIN_CALL)
    independent = ((op == READ) | (op == OUTPUT)) & (kind != LOOP) & (kind != BURST) & (kind != NEWFILE)
    same_unit = segments.unit[seg_of[1:]] == segments.unit[seg_of[:-1]]
    walk_read = ((kind == WALK) | (kind == SEARCH)) & (op == READ)
    joinable = np.zeros(len(seg_of), dtype=np.int8)
    joinable[1:] = np.where(independent[1:] & independent[:-1] & same_unit, JOIN_CALL, 0)
    joinable[1:] = np.where(walk_read[1:] & (op[:-1] == READ) & (seg_of[1:] == seg_of[:-1]), JOIN_READ, joinable[1:])
    phase_start = segments.new_phase[seg_of] & (position == 0)
    joinable[phase_start] = 0   # a user may speak there: between two calls to the model, never within one
    return segments.unit[seg_of], op, target, tool, joinable, phase_start


def _unit_events(model: _Model, arm_of_unit: np.ndarray, uniforms: np.ndarray) -> dict[str, np.ndarray]:
    """Events of a chunk of units as (units, tool_calls) arrays, each unit in its own time."""
    phase_at, focus = _phases(model, arm_of_unit, uniforms)
    working_sets = _working_sets(model, uniforms, focus)
    segments = _segments(model, uniforms, phase_at, focus, working_sets)
    events = _expand(model, segments, working_sets)
    if model.knobs.read_before_edit:
        events = _read_before_edit(*events, model.n_targets)
    return _cut(*events, uniforms.shape[0], model.knobs.tool_calls)


def _first_of_each(key: np.ndarray, groups: int, n_targets: int) -> np.ndarray:
    """Positions of the first occurrence of each distinct key (keys < groups * n_targets)."""
    if groups * n_targets <= 8 * len(key) + 1024:  # a dense table of each key's smallest position
        table = np.full(groups * n_targets, len(key), dtype=np.int64)
        np.minimum.at(table, key, np.arange(len(key)))
        first = table[key]
        return first[first == np.arange(len(key))]
    return np.unique(key, return_index=True)[1]


def _read_before_edit(unit, op, target, tool, joinable, phase_start, n_targets):
    """Insert a read before every edit that is the first event of its file in its unit (the read
    starts the edit's phase if the edit did)."""
    file_events = np.flatnonzero(op != OUTPUT)
    key = unit[file_events].astype(np.int64) * n_targets + target[file_events]
    first_events = file_events[_first_of_each(key, int(unit.max(initial=0)) + 1, n_targets)]
    need = first_events[op[first_events] == EDIT]
    if len(need) == 0:
        return unit, op, target, tool, joinable, phase_start
    copies = np.ones(len(op), dtype=np.int64)
    copies[need] = 2
    source = np.repeat(np.arange(len(op)), copies)
    inserted = np.zeros(len(source), dtype=bool)
    inserted[np.cumsum(copies)[need] - 2] = True
    new_op = op[source].copy()
    new_op[inserted] = READ
    new_joinable = joinable[source].copy()
    new_joinable[inserted] = 0
    new_phase_start = phase_start[source].copy()
    new_phase_start[np.cumsum(copies)[need] - 1] = False
    return unit[source], new_op, target[source], tool[source], new_joinable, new_phase_start


def _cut(unit, op, target, tool, joinable, phase_start, n_units, calls):
    """Exactly ``calls`` events per unit: cut the overflow, pad a (rare) short unit with commands."""
    counts = np.bincount(unit, minlength=n_units)
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(unit)) - starts[unit]
    keep = rank < calls
    out = {
        "op": np.full((n_units, calls), OUTPUT, dtype=np.int8),
        "target": np.zeros((n_units, calls), dtype=np.int64),
        "tool": np.full((n_units, calls), BASH, dtype=np.int8),
        "joinable": np.zeros((n_units, calls), dtype=np.int8),
        "phase_start": np.zeros((n_units, calls), dtype=bool),
    }
    flat = unit[keep] * calls + rank[keep]
    out["op"].ravel()[flat] = op[keep]
    out["target"].ravel()[flat] = target[keep]
    out["tool"].ravel()[flat] = tool[keep]
    out["joinable"].ravel()[flat] = joinable[keep]
    out["phase_start"].ravel()[flat] = phase_start[keep]
    out["joinable"][:, 0] = 0
    return out


def _new_turns(knobs: Knobs, joinable: np.ndarray, u_join: np.ndarray) -> np.ndarray:
    """Whether each event of each unit (rows) starts a turn: all but a walk's or search's read that joins
    the previous read's with chance ``parallel`` and another independent call that joins the previous
    one's with chance ``parallel_calls``; and the call after every ``turn_calls_max`` calls of one turn."""
    new_turn = ~(((joinable == JOIN_READ) & (u_join < knobs.parallel)) |
                 ((joinable == JOIN_CALL) & (u_join < knobs.parallel_calls)))
    if knobs.turn_calls_max:
        flat = new_turn.ravel()   # every row's first event starts a turn, so runs never cross rows
        start = np.maximum.accumulate(np.where(flat, np.arange(len(flat)), 0))
        flat |= (np.arange(len(flat)) - start) % knobs.turn_calls_max == 0
    return new_turn


def _times(model: _Model, events: dict[str, np.ndarray], normals: np.ndarray, u_join: np.ndarray,
           session_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn index and timestamp (ms) of each event of each unit."""
    knobs = model.knobs
    calls = events["op"].shape[1]
    new_turn = _new_turns(knobs, events["joinable"], u_join)
    turn = np.cumsum(new_turn, axis=1, dtype=np.int64) - 1
    gap = _lognormal(normals[:, calls:2 * calls], knobs.think_ms_median, knobs.think_ms_p90)
    gap = np.minimum(gap, 3_600_000.0)  # an hour at most between two turns
    gap[:, 0] = 0.0
    gap *= new_turn
    ts = session_start[:, None] + np.cumsum(np.rint(gap).astype(np.int64), axis=1)
    return turn, ts


def _sizes(model: _Model, session: np.ndarray, op: np.ndarray, target: np.ndarray, tool: np.ndarray,
           z_size: np.ndarray, z_lines: np.ndarray, u_sign: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Size after each event as the agent sees it, lines changed, and whether the agent's cap cut the
    event (`_capped`); sizes follow edits and writes per session and file."""
    knobs = model.knobs
    size = np.zeros(len(op), dtype=np.int64)
    lines = np.zeros(len(op), dtype=np.int64)
    is_edit, is_write, is_out = op == EDIT, op == WRITE, op == OUTPUT
    edit_lines = np.clip(np.rint(_lognormal(z_lines[is_edit], knobs.edit_lines_median, knobs.edit_lines_p90)), 1, 5000)
    lines[is_edit] = edit_lines.astype(np.int64)
    # an agent writes no more in one call than one read of it shows
    write_max = min(knobs.file_size_max, knobs.read_max) if knobs.read_max else knobs.file_size_max
    write_size = np.clip(np.rint(_lognormal(z_size[is_write], knobs.file_size_median, knobs.file_size_p90)), 40,
                         write_max).astype(np.int64)
    lines[is_write] = (write_size + BYTES_PER_LINE - 1) // BYTES_PER_LINE
    # outputs: lognormal per tool, sizes as drawn (cut at the caps below)
    for tool_index, (median, p90) in enumerate(((knobs.bash_median, knobs.bash_p90),
                                                (knobs.search_median, knobs.search_p90),
                                                (knobs.search_median, knobs.search_p90),
                                                (knobs.task_median, knobs.task_p90))):
        of_tool = is_out & (tool == tool_index)
        size[of_tool] = np.clip(np.rint(_lognormal(z_size[of_tool], median, p90)), 0, 1e15).astype(np.int64)
    # files: the size follows writes (reset) and edits (grow or shrink by the lines changed); only
    # the (session, file) pairs with an edit or write need following, the others keep their size
    file_events = np.flatnonzero(~is_out)
    file_key = session[file_events].astype(np.int64) * model.n_targets + target[file_events]
    changed = ~is_out & ~(op == READ)
    size[file_events] = model.base_sizes[target[file_events]]
    groups = int(session.max(initial=0)) + 1
    if groups * model.n_targets <= 8 * len(file_events) + 1024:
        dirty = np.zeros(groups * model.n_targets, dtype=bool)
        dirty[file_key[changed[file_events]]] = True
        file_events = file_events[dirty[file_key]]
    if len(file_events):
        key = session[file_events].astype(np.int64) * model.n_targets + target[file_events]
        by_key = np.argsort(key, kind="stable")
        order, sorted_key = file_events[by_key], key[by_key]
        # an edit's net change: a uniform share of its lines added minus removed, growing on average
        net = np.rint(lines[order] * BYTES_PER_LINE * (u_sign[order] - 0.35)).astype(np.int64)
        delta = np.where(op[order] == EDIT, net, 0)
        running_delta = np.cumsum(delta)
        group_start = np.ones(len(order), dtype=bool)
        group_start[1:] = sorted_key[1:] != sorted_key[:-1]
        writes = op[order] == WRITE
        anchor = group_start | writes
        write_size_at = np.zeros(len(op), dtype=np.int64)
        write_size_at[is_write] = write_size
        anchor_size = np.where(writes, write_size_at[order], model.base_sizes[target[order]])
        anchor_delta = np.where(writes, running_delta, running_delta - delta)
        last_anchor = np.maximum.accumulate(np.where(anchor, np.arange(len(order)), 0))
        size[order] = np.maximum(anchor_size[last_anchor] + running_delta - anchor_delta[last_anchor], 16)
    size, truncated = _capped(knobs, op, size)
    return size, lines, truncated


def _capped(knobs: Knobs, op: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each event's size as the agent's tools return it, and whether they cut it: a tool output over
    ``output_max`` is cut to it (Claude Code's Bash: 30,000 characters), a read or edit of a file over
    ``read_max`` (0: no cap) shows its first ``read_max`` bytes (Claude Code's Read: 2,000 lines)."""
    cap = np.where(op == OUTPUT, knobs.output_max, knobs.read_max if knobs.read_max else np.iinfo(np.int64).max)
    truncated = size > cap
    return np.minimum(size, cap), truncated


#: The conversation's random draws per tool event: uniforms, then standard normals.
CONVERSATION_UNIFORMS = ("u_user", "u_thinking", "u_text")
CONVERSATION_NORMALS = ("z_user", "z_thinking", "z_text", "z_call")


def _chunk(model: _Model, rngs: list[np.random.Generator], sessions: range, starts: np.ndarray
           ) -> tuple[dict, np.ndarray]:
    """All events of a chunk of sessions, in session order, as flat arrays, and each session's event count."""
    knobs, layout = model.knobs, model.layout
    calls, arms = knobs.tool_calls, knobs.arms
    n_units = len(rngs)
    uniforms = np.empty((n_units, layout.uniforms), dtype=np.float32)
    normals = np.empty((n_units, layout.normals), dtype=np.float32)
    talk = knobs.conversation
    # the conversation's draws come after the events' from the same generator: those stay as they were
    talk_uniforms = np.empty((n_units, len(CONVERSATION_UNIFORMS) * calls if talk else 0), dtype=np.float32)
    talk_normals = np.empty((n_units, len(CONVERSATION_NORMALS) * calls if talk else 0), dtype=np.float32)
    for row, rng in enumerate(rngs):
        rng.random(out=uniforms[row], dtype=np.float32)
        rng.standard_normal(out=normals[row], dtype=np.float32)
        if talk:
            rng.random(out=talk_uniforms[row], dtype=np.float32)
            rng.standard_normal(out=talk_normals[row], dtype=np.float32)
    arm_of_unit = np.tile(np.arange(arms), len(sessions))
    events = _unit_events(model, arm_of_unit, uniforms)
    arm_offset = (uniforms[:, layout.slices["misc"]][:, 0] * 60_000).astype(np.int64)
    unit_start = np.repeat(starts, arms) + arm_of_unit * arm_offset
    # a read's uniform of the event block is otherwise unused (an edit's sets its net change)
    turn, ts = _times(model, events, normals, uniforms[:, layout.slices["event"]], unit_start)
    columns = {"op": events["op"], "target": events["target"], "tool": events["tool"], "turn": turn, "ts": ts,
               "z_size": normals[:, :calls], "z_lines": normals[:, 2 * calls:3 * calls],
               "u_sign": uniforms[:, layout.slices["event"]],
               "arm": np.broadcast_to(arm_of_unit[:, None], (n_units, calls))}
    if talk:
        columns["phase_start"] = events["phase_start"]
        for index, name in enumerate(CONVERSATION_UNIFORMS):
            columns[name] = talk_uniforms[:, index * calls:(index + 1) * calls]
        for index, name in enumerate(CONVERSATION_NORMALS):
            columns[name] = talk_normals[:, index * calls:(index + 1) * calls]
    per_session = calls * arms
    n_sessions = len(sessions)
    rows = {name: np.ascontiguousarray(values).reshape(n_sessions, per_session) for name, values in columns.items()}
    if arms > 1:  # interleave the arms of each session by time; a new turn when the arm or its turn changes
        order = np.lexsort((np.tile(np.arange(per_session), (n_sessions, 1)), rows["arm"], rows["ts"]), axis=1)
        rows = {name: np.take_along_axis(values, order, axis=1) for name, values in rows.items()}
        change = np.ones((n_sessions, per_session), dtype=bool)
        change[:, 1:] = (rows["arm"][:, 1:] != rows["arm"][:, :-1]) | (rows["turn"][:, 1:] != rows["turn"][:, :-1])
        rows["turn"] = np.cumsum(change, axis=1, dtype=np.int64) - 1
    flat = {name: values.ravel() for name, values in rows.items()}
    session_local = np.repeat(np.arange(n_sessions), per_session)
    size, lines, truncated = _sizes(model, session_local, flat["op"], flat["target"], flat["tool"], flat["z_size"],
                                    flat["z_lines"], flat["u_sign"])
    if knobs.turn_bytes_max:
        flat["turn"] = _split_heavy_turns(flat["turn"], size, per_session, knobs.turn_bytes_max)
    # output paths: tool://<tool>/<n>, n counted per session and tool from 1
    is_out = flat["op"] == OUTPUT
    path = flat["target"].copy()
    for tool_index in range(len(TOOLS)):
        of_tool = (is_out & (flat["tool"] == tool_index)).reshape(n_sessions, per_session)
        count = np.cumsum(of_tool, axis=1, dtype=np.int64).ravel()
        of_tool_flat = of_tool.ravel()
        path[of_tool_flat] = model.n_targets + tool_index * per_session + count[of_tool_flat] - 1
    out = {"turn": flat["turn"], "ts_ms": flat["ts"], "op": flat["op"], "path": path, "size_bytes": size,
           "arm": flat["arm"].astype(np.int8), "lines_changed": lines, "truncated": truncated}
    if not talk:
        return out, np.full(n_sessions, per_session, dtype=np.int64)
    return _with_conversation(model, out, flat, n_sessions, per_session)


def _split_heavy_turns(turn: np.ndarray, size: np.ndarray, per_session: int, limit: int) -> np.ndarray:
    """The turns renumbered so that no turn's events add up to more than ``limit`` bytes: a turn that
    would starts a new one (at the same time) at its first event past the limit; an event larger than
    ``limit`` is a turn of its own. ``turn`` counts from 0 in each session of ``per_session`` events."""
    n_events = len(turn)
    start = np.zeros(n_events, dtype=bool)
    start[::per_session] = True
    start[1:] |= turn[1:] != turn[:-1]
    first = np.flatnonzero(start)
    totals = np.add.reduceat(size, first) if n_events else np.zeros(0, dtype=np.int64)
    heavy = np.flatnonzero(totals > limit)
    if not len(heavy):
        return turn
    ends = np.append(first[1:], n_events)
    for at in heavy:   # rare, and short: a few joined reads
        held = 0
        for event in range(first[at], ends[at]):
            if held and held + size[event] > limit:
                start[event], held = True, 0
            held += int(size[event])
    return _per_session_count(start, n_events // per_session) - 1


def _per_session_count(mask: np.ndarray, n_sessions: int) -> np.ndarray:
    """For each event, how many events of its session up to and including it have ``mask``."""
    return np.cumsum(mask.reshape(n_sessions, -1), axis=1, dtype=np.int64).ravel()


def _with_conversation(model: _Model, out: dict, flat: dict, n_sessions: int, per_session: int
                       ) -> tuple[dict, np.ndarray]:
    """The tool events of a chunk with the rest of the window put before each (`PARTS`), and each
    session's event count."""
    knobs, n_events = model.knobs, len(out["op"])
    op, size, lines, arm, turn = out["op"], out["size_bytes"], out["lines_changed"], flat["arm"], out["turn"]
    session_start = np.zeros(n_events, dtype=bool)
    session_start[::per_session] = True
    arm_start = np.zeros(n_events, dtype=bool)
    session_local = np.repeat(np.arange(n_sessions), per_session)
    arm_start[_first_of_each(session_local * knobs.arms + arm, n_sessions, knobs.arms)] = True
    turn_start = session_start.copy()
    turn_start[1:] |= turn[1:] != turn[:-1]
    has = np.empty((n_events, len(PARTS)), dtype=bool)
    has[:, 0] = arm_start
    has[:, 1] = arm_start | (flat["phase_start"] & (flat["u_user"] < knobs.follow_up))
    has[:, 2] = turn_start & (flat["u_thinking"] < knobs.thinking_chance)
    has[:, 3] = turn_start & (flat["u_text"] < knobs.text_chance)
    has[:, 4:] = True

    def drawn(normal: np.ndarray, median: float, p90: float, low: int, high: int) -> np.ndarray:
        """Lognormal sizes in bytes, rounded and clipped to [low, high]."""
        return np.clip(np.rint(_lognormal(normal, median, p90)), low, high).astype(np.int64)

    call_size = drawn(flat["z_call"], knobs.call_median, knobs.call_p90, 16, CALL_MAX)
    call_size += int(round(knobs.call_framing_tokens * DEFAULT_RATIOS["json"]))
    is_edit, is_write = op == EDIT, op == WRITE
    # an edit's old and new strings: its lines each, neither longer than the file
    call_size[is_edit] += 2 * np.minimum(lines[is_edit] * BYTES_PER_LINE, size[is_edit])
    call_size[is_write] += size[is_write]  # the content written
    sizes = np.empty((n_events, len(PARTS)), dtype=np.int64)
    sizes[:, 0] = int(round(knobs.overhead_tokens * DEFAULT_RATIOS["overhead"]))
    sizes[:, 1] = drawn(flat["z_user"], knobs.user_median, knobs.user_p90, 1, MESSAGE_MAX)
    sizes[:, 2] = drawn(flat["z_thinking"], knobs.thinking_median, knobs.thinking_p90, 1, MESSAGE_MAX)
    sizes[:, 3] = drawn(flat["z_text"], knobs.text_median, knobs.text_p90, 1, MESSAGE_MAX)
    sizes[:, 4] = call_size
    sizes[:, 5] = size
    # paths: a call is numbered like its result (per session and tool from 1), messages per session and role
    call_base = model.n_targets + len(TOOLS) * per_session
    message_base = call_base + len(CALL_TOOLS) * per_session
    is_out = op == OUTPUT
    call_tool = np.where(is_out, 3 + flat["tool"].astype(np.int64), op.astype(np.int64))
    call_number = np.where(is_out, out["path"] - model.n_targets - flat["tool"].astype(np.int64) * per_session, 0)
    for tool_op in (READ, EDIT, WRITE):
        of_op = op == tool_op
        call_number[of_op] = _per_session_count(of_op, n_sessions)[of_op] - 1
    paths = np.empty((n_events, len(PARTS)), dtype=np.int64)
    paths[:, 0] = message_base + len(MESSAGE_ROLES) * per_session
    for column, role in ((1, 0), (2, 2), (3, 1)):
        paths[:, column] = message_base + role * per_session + _per_session_count(has[:, column], n_sessions) - 1
    paths[:, 4] = call_base + call_tool * per_session + call_number
    paths[:, 5] = out["path"]
    picked = np.flatnonzero(has.ravel())
    event, part = np.divmod(picked, len(PARTS))
    part_ops = np.array([OVERHEAD, MESSAGE, MESSAGE, MESSAGE, CALL, 0], dtype=np.int8)
    is_result = part == len(PARTS) - 1
    expanded = {
        "turn": turn[event], "ts_ms": out["ts_ms"][event],
        "op": np.where(is_result, op[event], part_ops[part]).astype(np.int8),
        "path": paths.ravel()[picked], "size_bytes": sizes.ravel()[picked], "arm": out["arm"][event],
        "lines_changed": np.where(is_result, lines[event], 0),
        "truncated": is_result & out["truncated"][event],
    }
    counts = has.sum(axis=1).reshape(n_sessions, per_session).sum(axis=1)
    return expanded, counts


def _resolve_repo(repo: Repo | str | os.PathLike | None, knobs: Knobs, rng: np.random.Generator) -> Repo:
    """The repository to draw files from: ``repo`` itself, a checkout's files, or a synthetic one from ``rng``."""
    if repo is None:
        return synthetic_repo(rng, files=knobs.repo_files, hubs=knobs.hub_files, size_median=knobs.file_size_median,
                              size_p90=knobs.file_size_p90, size_max=knobs.file_size_max)
    if isinstance(repo, Repo):
        return repo
    return repo_from_checkout(repo, hubs=knobs.hub_files)


def generate(preset: str | Knobs = DEFAULT_PRESET, sessions: int = 1, seed: int = 0, *,
             repo: Repo | str | os.PathLike | None = None, check: bool = True, **overrides: Any) -> pd.DataFrame:
    """A synthetic trace of ``sessions`` sessions of ``preset`` (knobs changed by ``overrides``).

    Pure given ``seed``: the same arguments give an identical frame, and session ``k`` is the
    same whatever ``sessions`` is. ``repo`` is a `Repo`, a checkout directory, or None for a
    synthetic repository drawn from the seed. The frame has canonical dtypes (built so), is
    validated against the schema unless ``check`` is false, and carries its recipe in ``attrs``.
    Each session has ``tool_calls`` file and tool-output events per arm, and with ``conversation``
    an input per tool call and the messages and overhead around them. Runs in O(events) time and
    memory.

    >>> t = generate("mixed", sessions=2, seed=7)
    >>> ops = t["op"].astype(str)
    >>> t["session"].nunique(), int(ops.isin(["read", "edit", "write", "output"]).sum()), int((ops == "call").sum())
    (2, 500, 500)
    >>> sorted(generate("mixed", sessions=2, seed=7, conversation=False)["op"].unique())
    ['edit', 'output', 'read', 'write']
    """
    parts = list(_parts(preset, sessions, seed, repo, overrides))
    model, per_session = parts[0][0], parts[0][1]
    out = {name: np.concatenate([part[3][name] for part in parts]) if len(parts) > 1 else parts[0][3][name]
           for name in parts[0][3]}
    session_events = np.concatenate([part[4] for part in parts])
    del parts
    df = _frame(model, out, session_events, per_session, preset, int(seed))
    df.attrs["generator"] = _recipe(preset, sessions, seed, repo, overrides)
    if check:
        _validate_in_slices(df, session_events, source=f"generate({preset!r})")
    return df


def generate_chunks(preset: str | Knobs = DEFAULT_PRESET, sessions: int = 1, seed: int = 0, *,
                    repo: Repo | str | os.PathLike | None = None, check: bool = True,
                    **overrides: Any) -> Iterator[pd.DataFrame]:
    """`generate`'s trace a few whole sessions at a time (about `CHUNK_EVENTS` events a frame), in order:
    the same rows, each frame with categories of its own and the recipe in ``attrs``, so that a trace
    of any length is written in memory that follows a chunk (`traces.io.save_chunks`)."""
    for model, per_session, first, part, counts in _parts(preset, sessions, seed, repo, overrides):
        df = _frame(model, part, counts, per_session, preset, int(seed), first=first)
        df.attrs["generator"] = _recipe(preset, sessions, seed, repo, overrides)
        if check:
            _validate_in_slices(df, counts, source=f"generate({preset!r}) sessions {first}-{first + len(counts) - 1}")
        yield df


def _recipe(preset, sessions: int, seed: int, repo, overrides: dict) -> dict[str, Any]:
    return {"preset": preset if isinstance(preset, str) else "custom", "sessions": int(sessions),
            "seed": int(seed), "overrides": dict(overrides),
            "repo": None if repo is None or isinstance(repo, Repo) else str(repo)}


def _parts(preset, sessions: int, seed: int, repo, overrides: dict) -> Iterator[tuple]:
    """The model, events per session and arm, and, a chunk of sessions at a time, its first session, its
    events as flat arrays and each session's event count (checking the arguments first)."""
    knobs = knobs_of(preset, **overrides)
    if isinstance(sessions, bool) or not isinstance(sessions, (int, np.integer)) or sessions < 1:
        raise ValueError(f"sessions must be a positive integer, got {sessions!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    check_size(knobs, int(sessions))
    per_session = knobs.tool_calls * knobs.arms
    root = np.random.default_rng(int(seed))
    (repo_rng,) = root.spawn(1)
    model = _Model(knobs, _resolve_repo(repo, knobs, repo_rng))
    session_rngs = root.spawn(int(sessions))
    per_chunk = max(1, CHUNK_EVENTS // per_session)
    for first in range(0, int(sessions), per_chunk):
        stop = min(int(sessions), first + per_chunk)
        rngs: list[np.random.Generator] = []
        starts = np.empty(stop - first, dtype=np.int64)
        for index, session_rng in enumerate(session_rngs[first:stop]):
            starts[index] = BASE_EPOCH_MS + int(session_rng.random() * START_SPREAD_MS)
            rngs.extend(session_rng.spawn(knobs.arms) if knobs.arms > 1 else [session_rng])
        part, part_counts = _chunk(model, rngs, range(first, stop), starts)
        yield model, per_session, first, part, part_counts


def check_size(knobs: Knobs, sessions: int) -> None:
    """`ValueError` when ``sessions`` sessions of ``knobs`` would pass `MAX_EVENTS`, counting two
    events (input and result) per tool call with the conversation."""
    per_session = knobs.tool_calls * knobs.arms
    tool_calls = sessions * per_session
    events = tool_calls * (2 if knobs.conversation else 1)
    if events > MAX_EVENTS:
        with_inputs = f" (and as many inputs: {events:,} events at least)" if knobs.conversation else ""
        raise ValueError(f"{sessions} sessions x {per_session} tool calls = {tool_calls:,} tool calls{with_inputs}; "
                         f"the limit is {MAX_EVENTS:,} events")


def _validate_in_slices(df: pd.DataFrame, session_events: np.ndarray, source: str) -> None:
    """Validate ``df`` a few whole sessions at a time, so checking a huge trace stays in bounded memory."""
    ends = np.cumsum(session_events)
    first = 0
    while first < len(df):
        # whole sessions up to about VALIDATE_ROWS rows, at least one
        stop = int(ends[max(np.searchsorted(ends, first + VALIDATE_ROWS, side="right") - 1,
                            np.searchsorted(ends, first, side="right"))])
        validate(df.iloc[first:stop],
                 source=f"{source} rows {first}-{stop - 1}" if (first, stop) != (0, len(df)) else source)
        first = stop


def _path_name(code: int, paths: tuple[str, ...], n_targets: int, per_session: int) -> str:
    """The path of a generator's path code: a file, a tool output, a tool call's input, a message or the overhead."""
    if code < n_targets:
        return paths[code]
    region, number = divmod(code - n_targets, per_session)
    if region < len(TOOLS):
        return f"tool://{TOOLS[region]}/{number + 1}"
    region -= len(TOOLS)
    if region < len(CALL_TOOLS):
        return f"call://{CALL_TOOLS[region]}/{number + 1}"
    region -= len(CALL_TOOLS)
    if region < len(MESSAGE_ROLES):
        return f"msg://{MESSAGE_ROLES[region]}/{number + 1}"
    return "overhead://system"


def _frame(model: _Model, out: dict[str, np.ndarray], session_events: np.ndarray, per_session: int,
           preset: str | Knobs, seed: int, first: int = 0) -> pd.DataFrame:
    """The trace frame of sessions ``first``, ...: categoricals built from codes, unused path categories dropped."""
    path_code = out.pop("path")
    sessions = len(session_events)
    n_codes = model.n_targets + (len(TOOLS) + len(CALL_TOOLS) + len(MESSAGE_ROLES)) * per_session + 1
    used = np.bincount(path_code, minlength=n_codes) > 0
    remap = np.cumsum(used) - 1
    paths = model.repo.all_paths
    names = [_path_name(int(code), paths, model.n_targets, per_session) for code in np.flatnonzero(used)]
    label = preset if isinstance(preset, str) else "custom"
    session_names = [f"{label}-{seed}-{index:05d}" for index in range(first, first + sessions)]
    arm_names = ["main"] + [f"arm{index}" for index in range(1, model.knobs.arms)]
    path_codes = remap[path_code].astype(np.int32)
    session_codes = np.repeat(np.arange(sessions, dtype=np.int32), session_events)
    return pd.DataFrame({
        "session": pd.Categorical.from_codes(session_codes, categories=pd.Index(session_names, dtype=str)),
        "turn": out["turn"], "ts_ms": out["ts_ms"],
        "op": pd.Categorical.from_codes(out["op"], categories=list(OPS)),
        "path": pd.Categorical.from_codes(path_codes, categories=pd.Index(names, dtype=str)),
        "size_bytes": out["size_bytes"],
        "arm": pd.Categorical.from_codes(out["arm"], categories=pd.Index(arm_names, dtype=str)),
        "lines_changed": out["lines_changed"], "truncated": out["truncated"],
    }, copy=False)
