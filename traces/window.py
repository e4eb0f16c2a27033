"""What each event adds to its arm's window when nothing is evicted, under either model of the context: the one
definition behind the whole window of `traces.stats` and of ``sim.analysis.fidelity`` (docs/design.md §7, §8).

- The **managed** model holds each path once, at its latest size: an event adds its content and replaces the
  content the previous event of the same path in the same arm had put there (what the replay engine's managed
  context holds with an unbounded budget); pinned content (messages, tool calls' inputs, overhead) only adds.
- The **transcript** model is the agent's append-only transcript: every event adds what
  `traces.vocabulary.transcript_adds` says (its content; the tool's confirmation; nothing) and replaces nothing
  (what the engine's transcript model holds with no policy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxbench.traces.vocabulary import CONTENT, INVALIDATE, NOTHING, PINNED_CODES, transcript_adds

__all__ = ["MODELS", "window_changes"]

#: The models of a window.
MODELS = ("managed", "transcript")


def window_changes(ops: np.ndarray, paths: np.ndarray, path_names: Sequence[str], units: np.ndarray | None = None, *,
                   model: str) -> tuple[np.ndarray, np.ndarray]:
    """Per event (``ops``, ``paths`` as codes into ``path_names``; ``units`` tells the arms apart, one arm when
    None; events of an arm in the order they happen): what it adds to its arm's window (a code of
    `traces.vocabulary.ADDS`) and the earlier event whose content it replaces there (-1: none), under ``model``.

    >>> names = ["a.py", "msg://user/0"]
    >>> [c.tolist() for c in window_changes(np.array([0, 4, 0]), np.array([0, 1, 0]), names, model="managed")]
    [[1, 1, 1], [-1, -1, 0]]
    >>> [c.tolist() for c in window_changes(np.array([2, 0]), np.array([0, 0]), names, model="transcript")]
    [[2, 1], [-1, -1]]
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    ops, paths = np.asarray(ops, np.int64), np.asarray(paths, np.int64)
    n = len(ops)
    units = np.zeros(n, np.int64) if units is None else np.asarray(units, np.int64)
    replaces = np.full(n, -1, np.int64)
    if model == "transcript":
        adds = np.empty(n, np.int8)
        order = np.argsort(units, kind="stable")
        bounds = np.flatnonzero(np.r_[True, units[order][1:] != units[order][:-1], True]) if n else np.zeros(1, int)
        names = np.asarray(path_names, dtype=object)
        for start, stop in zip(bounds[:-1], bounds[1:]):
            rows = order[start:stop]
            adds[rows] = transcript_adds(ops[rows].tolist(), names[paths[rows]].tolist())
        return adds, replaces
    adds = np.where(ops == INVALIDATE, NOTHING, CONTENT).astype(np.int8)
    touches = np.flatnonzero(~np.isin(ops, PINNED_CODES) & (ops != INVALIDATE))
    key = units[touches] * (len(path_names) + 1) + paths[touches]
    order = np.argsort(key, kind="stable")
    same = key[order][1:] == key[order][:-1]
    replaces[touches[order[1:][same]]] = touches[order[:-1][same]]
    return adds, replaces
