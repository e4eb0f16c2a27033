"""Fidelity of the trace model: simulated context occupancy against the real input tokens per turn."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from sim.errors import InputError
from sim.engine.rules import OP_CODES
from sim.engine.measures import DEFAULT_BYTES_PER_TOKEN
from strategies.isolation import check_loads, loads_code, run_isolated
from sim.engine.replay import SessionTrace, budget_for_tokens, check_bytes_per_token, replay_session, strategy_label
from strategies.contract import ContextBudget
from strategies.errors import StrategyLoadError
from strategies.registry import parse_spec
from traces.schema import MAX_VALUE, validate

__all__ = ["USAGE_COLUMN", "COMPACT_COLUMN", "FIDELITY_COLUMNS", "aligned_turns", "fidelity", "summarise_pairs"]

USAGE_COLUMN = "usage_input_tokens"
COMPACT_COLUMN = "compact_before"
FIDELITY_COLUMNS = ("session", "arm", "turns_compared", "segments", "evictions", "pearson", "spearman",
                    "median_ratio", "intercept_tokens", "slope", "sim_tokens_mean", "real_tokens_mean")
_UNBOUNDED = ContextBudget(max_bytes=sys.maxsize)


def _unbounded_spec(strategy):
    """``strategy`` without an entry cap when it is a registered name whose factory takes ``max_entries``."""
    if not isinstance(strategy, str):
        return strategy
    try:
        name, options = parse_spec(strategy)
    except StrategyLoadError:
        return strategy
    if ":" in name or "max_entries" in options:  # import paths and loader schemes are left as given
        return strategy
    lifted = f"{strategy}{'&' if '?' in strategy else '?'}max_entries=none"
    try:
        check_loads(lifted)   # an entry point's factory runs in a process of its own
    except StrategyLoadError:
        return strategy
    return lifted


def _compact_flags(values: pd.Series) -> np.ndarray:
    """The compaction markers as booleans (CSV and JSONL may bring them back as text)."""
    if values.dtype == bool:
        return values.to_numpy()
    text = values.astype(str).str.strip().str.lower()
    return text.isin(("true", "1", "1.0")).to_numpy()


def aligned_turns(trace_df: pd.DataFrame, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
                  strategy="lru", budget_tokens: float | None = None) -> pd.DataFrame:
    """Per replayed turn: session, arm, segment, turn, simulated occupancy before the turn (bytes
    and tokens), real tokens (0: unknown, not compared) and the turn's evictions; see `fidelity`.

    Raises `InputError` when the trace carries no real token counts.
    """
    check_bytes_per_token(bytes_per_token)
    if USAGE_COLUMN not in trace_df.columns:
        raise InputError(f"the trace has no '{USAGE_COLUMN}' column: real token counts come only from "
                         "Claude Code sessions imported with 'ctxbench import claude-code'")
    df = validate(trace_df, source="fidelity")
    numbers = pd.to_numeric(df[USAGE_COLUMN], errors="coerce").fillna(0).to_numpy(dtype=float)
    absurd = np.flatnonzero((numbers < 0) | (numbers > MAX_VALUE))
    if len(absurd):
        raise InputError(f"row {absurd[0]}, column '{USAGE_COLUMN}': must be between 0 and {MAX_VALUE:,} (2**50), "
                         f"got {df[USAGE_COLUMN].iloc[absurd[0]]!r}")
    usage = numbers.astype(np.int64)
    if not (usage > 0).any():
        raise InputError(f"the trace has no real token counts ('{USAGE_COLUMN}' is 0 everywhere): "
                         "nothing to compare")
    if budget_tokens is None:
        budget, spec = _UNBOUNDED, _unbounded_spec(strategy)
    else:
        budget, spec = budget_for_tokens(budget_tokens, bytes_per_token), strategy
    compact = _compact_flags(df[COMPACT_COLUMN]) if COMPACT_COLUMN in df.columns else np.zeros(len(df), bool)
    op_codes = np.array([OP_CODES[c] for c in df["op"].cat.categories], dtype=np.int64)[df["op"].cat.codes]
    frame = pd.DataFrame({
        "session": df["session"].astype(str), "arm": df["arm"].astype(str), "turn": df["turn"],
        "ts_ms": df["ts_ms"], "op": op_codes, "path": df["path"].astype(str), "size": df["size_bytes"],
        "usage": usage, "compact": compact,
    })
    segments: list[tuple[str, str, int, pd.Series, SessionTrace]] = []
    for (session, arm), events in frame.groupby(["session", "arm"], sort=False):
        per_turn = events.groupby("turn", sort=True).agg(usage=("usage", "max"), compact=("compact", "any"))
        segment_of = per_turn["compact"].cumsum()
        events = events.assign(segment=events["turn"].map(segment_of))
        for segment, seg in events.groupby("segment", sort=True):
            st = SessionTrace(session=session, turns=seg["turn"].tolist(), ops=seg["op"].tolist(),
                              paths=seg["path"].tolist(), sizes=seg["size"].tolist(), ts_ms=seg["ts_ms"].tolist())
            segments.append((session, arm, int(segment), per_turn["usage"], st))
    logs = _replay_segments([st for *_, st in segments], spec, budget, strategy_label(strategy), bytes_per_token)
    rows = []
    for (session, arm, segment, usage, _), (turn, after, evictions) in zip(segments, logs):
        rows.append(pd.DataFrame({
            "session": session, "arm": arm, "segment": segment, "turn": turn, "sim_bytes": np.r_[0, after[:-1]],
            "real_tokens": usage.reindex(turn).to_numpy(), "evictions": evictions,
        }))
    out = pd.concat(rows, ignore_index=True)
    out["sim_tokens"] = out["sim_bytes"] / bytes_per_token
    out = out[["session", "arm", "segment", "turn", "sim_bytes", "sim_tokens", "real_tokens", "evictions"]]
    return out


def _replay_segments(segments: list[SessionTrace], spec, budget: ContextBudget, name: str,
                     bytes_per_token: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each segment replayed (strictly) from an empty context; code ctxbench does not ship replays in a
    process of its own, where ending it is a contract violation naming strategy, session and turn."""
    if isinstance(spec, str) and loads_code(spec):
        check_loads(spec)   # a factory that ends its process is a load error, as in a run
        return run_isolated(spec, _segment_logs, segments, spec, budget, name, bytes_per_token)
    return _segment_logs(None, segments, spec, budget, name, bytes_per_token)


def _segment_logs(strategy_for_arm, segments: list[SessionTrace], spec, budget: ContextBudget, name: str,
                  bytes_per_token: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per segment: its turns, the occupancy after each and the evictions at each (``strategy_for_arm``, when
    given, builds the strategy)."""
    out = []
    for st in segments:
        log = replay_session(st, spec, budget, strategy_name=name, bytes_per_token=bytes_per_token,
                             strategy_for_arm=strategy_for_arm).log
        out.append((log.columns["turn"].copy(), log.columns["occupancy_bytes"].copy(), log.columns["evictions"].copy()))
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def summarise_pairs(sim_tokens, real_tokens) -> dict[str, float]:
    """Correlations, median ratio and the least-squares fit ``real = intercept + slope * sim``.

    >>> s = summarise_pairs([0, 10, 20], [5, 25, 45])
    >>> s["pearson"], s["median_ratio"], s["intercept_tokens"], s["slope"]
    (1.0, 0.4, 5.0, 2.0)
    """
    x = np.asarray(sim_tokens, dtype=float)
    y = np.asarray(real_tokens, dtype=float)
    if len(x) >= 2 and np.ptp(x) > 0:
        slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
        intercept = float(y.mean() - slope * x.mean())
    else:
        slope = intercept = float("nan")
    ranks = lambda v: pd.Series(v).rank(method="average").to_numpy()  # noqa: E731
    return {
        "pearson": _pearson(x, y),
        "spearman": _pearson(ranks(x), ranks(y)) if len(x) else float("nan"),
        "median_ratio": float(np.median(x / y)) if len(x) else float("nan"),
        "intercept_tokens": intercept,
        "slope": slope,
    }


def fidelity(trace_df: pd.DataFrame, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN, strategy="lru",
             budget_tokens: float | None = None, policy=None, window_tokens: float = 200_000) -> pd.DataFrame:
    """One row per (session, arm) with real token counts: how well simulated occupancy tracks them.

    An imported Claude Code trace records, per turn, the input tokens the real model saw
    (``usage_input_tokens``: input + cache creation + cache read, 0 when unknown). Each
    (session, arm) is replayed through `CodingContextManager` and its simulated occupancy (files
    and tool outputs, plus assistant text and thinking when the trace was imported with
    messages) is compared, turn by turn, with those real counts.

    Decisions:

    - **Budget**: unbounded by default, since the real agent evicts nothing until it compacts. With
      no budget a registered strategy's entry cap is lifted too (``lru`` becomes
      ``lru?max_entries=none``) when its factory accepts that option; ``evictions`` in the
      result shows whether anything was evicted. A token budget replays what a strategy would
      have kept instead.
    - **Alignment**: the real count of turn *t* is the input that *produced* turn *t*'s calls, so
      it is compared with the simulated occupancy at the end of the arm's previous turn (after its
      eviction), i.e. before turn *t*'s own results arrive; the first turn of a segment compares
      with an empty context. Turns whose real count is 0 (unknown) are skipped.
    - **Compaction**: at a ``compact_before`` marker the real context was replaced by a summary, so
      each compaction segment of an arm is replayed separately from an empty context; the summary
      is not modelled and lands in the fit's intercept with the system prompt and tool definitions.
    - **Arms** are separate contexts (a subagent has its own window): each is replayed alone.

    Figures: Pearson and Spearman correlation, the median of simulated / real tokens, and the
    least-squares fit ``real = intercept + slope * simulated``, whose intercept estimates the
    fixed overhead (system prompt, tool definitions, summaries) in tokens. Columns are
    `FIDELITY_COLUMNS`; ``segments`` counts compaction segments replayed and ``evictions`` what
    the strategy evicted (0 in an unbounded replay). With a context ``policy`` (``claude-code``), each
    row also has the real and the simulated compaction points in a window of ``window_tokens``
    (`sim.analysis.compaction_points`). Raises `InputError` when the trace carries no real token counts.
    """
    turns = aligned_turns(trace_df, bytes_per_token, strategy, budget_tokens)
    rows = []
    for (session, arm), g in turns.groupby(["session", "arm"], sort=False):
        evictions = int(g["evictions"].sum())
        compared = g[g["real_tokens"] > 0]
        if compared.empty:
            continue
        rows.append({
            "session": session, "arm": arm, "turns_compared": len(compared),
            "segments": int(g["segment"].nunique()), "evictions": evictions,
            **summarise_pairs(compared["sim_tokens"], compared["real_tokens"]),
            "sim_tokens_mean": float(compared["sim_tokens"].mean()),
            "real_tokens_mean": float(compared["real_tokens"].mean()),
        })
    out = pd.DataFrame(rows, columns=list(FIDELITY_COLUMNS))
    if policy is not None:
        from sim.analysis.compaction_points import compaction_points

        out = out.merge(compaction_points(trace_df, policy, window_tokens), on=["session", "arm"], how="left")
        out["calls_apart"] = pd.Series([None if pd.isna(v) else int(v) for v in out["calls_apart"]], index=out.index,
                                       dtype=object)
    return out
