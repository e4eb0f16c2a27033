"""Fidelity of the trace model: the whole simulated window against the real input tokens per call."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ctxbench.sim.errors import InputError
from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, check_bytes_per_token, replay_session, strategy_label
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.isolation import check_loads, run_user_code
from ctxbench.strategies.registry import parse_spec
from ctxbench.traces.schema import OPS, validate
from ctxbench.traces.model_ratios import session_model, session_ratios
from ctxbench.traces.tokens import KINDS, TokenRatios, as_ratios, kind_codes
from ctxbench.traces.vocabulary import CONFIRMATION, CONFIRMATION_BYTES, CONFIRMATION_KIND, NOTHING, OUTPUT
from ctxbench.traces.window import window_changes

__all__ = ["USAGE_COLUMN", "COMPACT_COLUMN", "FIDELITY_COLUMNS", "GROUPS", "GROUP_LABELS", "aligned_turns",
           "window_composition", "fidelity", "summarise_pairs", "check_ratios", "by_session"]

USAGE_COLUMN = "usage_input_tokens"
COMPACT_COLUMN = "compact_before"
FIDELITY_COLUMNS = ("session", "arm", "comparisons", "turns_compared", "segments", "evictions", "pearson",
                    "spearman", "median_ratio", "intercept_tokens", "slope", "sim_tokens_mean", "real_tokens_mean",
                    "overhead_tokens")
#: What the window holds, by op: the bands of the window figure, bottom to top.
GROUPS = ("overhead", "conversation", "calls", "files", "outputs")
GROUP_LABELS = {"overhead": "overhead (system prompt, tools)", "conversation": "conversation",
                "calls": "tool-call inputs", "files": "file reads", "outputs": "tool outputs"}
_GROUP_OF_OP = {"overhead": 0, "message": 1, "call": 2, "read": 3, "edit": 3, "write": 3, "output": 4}
_OP_GROUP = np.array([_GROUP_OF_OP[op] for op in OPS], dtype=np.int64)
_OVERHEAD = OPS.index("overhead")
_UNBOUNDED = ContextBudget(max_bytes=sys.maxsize)


def check_ratios(bytes_per_token) -> TokenRatios:
    """``bytes_per_token`` (one number, `TokenRatios` or ``None``) as `TokenRatios`; an absurd number is `InputError`."""
    if bytes_per_token is not None and not isinstance(bytes_per_token, TokenRatios):
        check_bytes_per_token(bytes_per_token)
    return as_ratios(bytes_per_token)


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


def _usage(df: pd.DataFrame, required: bool) -> np.ndarray:
    """The real input tokens of each row (0: unknown) of a validated trace (`traces.schema.validate` holds the
    column to its range, as for every other integer column); `InputError` when required and absent."""
    if USAGE_COLUMN not in df.columns:
        if required:
            raise InputError(f"the trace has no '{USAGE_COLUMN}' column: real token counts come only from "
                             "logs that record them (Claude Code sessions imported with 'ctxbench import')")
        return np.zeros(len(df), dtype=np.int64)
    usage = df[USAGE_COLUMN].to_numpy(dtype=np.int64)
    if required and not (usage > 0).any():
        raise InputError(f"the trace has no real token counts ('{USAGE_COLUMN}' is 0 everywhere): "
                         "no window to compare (with --policy, its compaction points are compared)")
    return usage


@dataclass
class _Segment:
    """One compaction segment of one arm: its events (the arm's first overhead carried in front after a
    compaction), the real tokens of each of its turns, and the turn the carried events join."""

    session: str
    arm: str
    index: int
    events: pd.DataFrame
    usage: pd.Series
    carried: int


def _segments(trace_df: pd.DataFrame, *, usage_required: bool) -> list[_Segment]:
    """The trace cut into (session, arm, compaction segment) pieces, in order of first appearance.

    At a ``compact_before`` marker the real window was replaced by a summary: each segment starts
    from an empty window, but for the fixed overhead (the arm's overhead events before its first
    compaction), which stays.
    """
    df = validate(trace_df, source="fidelity")
    usage = _usage(df, usage_required)
    compact = _compact_flags(df[COMPACT_COLUMN]) if COMPACT_COLUMN in df.columns else np.zeros(len(df), bool)
    assert tuple(df["op"].cat.categories) == OPS
    ops = df["op"].cat.codes.to_numpy().astype(np.int64)
    paths = df["path"].astype(str).to_numpy(dtype=object)
    given = df["kind"].cat.codes.to_numpy() if "kind" in df.columns else None
    units = pd.MultiIndex.from_arrays([df["session"].astype(str), df["arm"].astype(str)]).factorize()[0]
    path_codes, path_names = pd.factorize(paths)
    frame = pd.DataFrame({
        "session": df["session"].astype(str), "arm": df["arm"].astype(str), "turn": df["turn"].to_numpy(),
        "ts_ms": df["ts_ms"].to_numpy(), "op": ops, "path": paths, "size": df["size_bytes"].to_numpy(),
        "kind": kind_codes(ops, list(paths), given), "usage": usage, "compact": compact,
        # what each event adds to its arm's transcript (the transcript model, over the arm's whole stream)
        "adds": window_changes(ops, path_codes, path_names, units, model="transcript")[0],
        "exact": df["exact_tokens"].to_numpy() if "exact_tokens" in df.columns else np.zeros(len(df), np.int64),
    })
    out: list[_Segment] = []
    for (session, arm), events in frame.groupby(["session", "arm"], sort=False):
        per_turn = events.groupby("turn", sort=True).agg(usage=("usage", "max"), compact=("compact", "any"))
        segment_of = per_turn["compact"].cumsum()
        events = events.assign(segment=events["turn"].map(segment_of).to_numpy())
        fixed = None
        for segment, seg in events.groupby("segment", sort=True):
            carried = 0
            if fixed is None:
                fixed = seg[seg["op"] == _OVERHEAD]
            elif len(fixed):
                seg = pd.concat([fixed.assign(turn=seg["turn"].iloc[0], ts_ms=seg["ts_ms"].iloc[0]), seg])
                carried = len(fixed)
            out.append(_Segment(str(session), str(arm), int(segment), seg.drop(columns="segment"),
                                per_turn["usage"], carried))
    return out


def _session_trace(seg: _Segment) -> SessionTrace:
    ev = seg.events
    return SessionTrace(session=seg.session, turns=ev["turn"].to_numpy(), ops=ev["op"].to_numpy(),
                        paths=ev["path"].tolist(), sizes=ev["size"].to_numpy(), ts_ms=ev["ts_ms"].to_numpy(),
                        kinds=ev["kind"].to_numpy(), exact_tokens=ev["exact"].to_numpy())


def _carried_bytes(seg: _Segment, ratios: TokenRatios) -> int:
    """Reference bytes of the overhead carried into a segment (in the window before its first turn)."""
    if not seg.carried:
        return 0
    head = seg.events.iloc[:seg.carried]
    return int(ratios.costs(head["size"].to_numpy(), head["kind"].to_numpy(), head["exact"].to_numpy()).sum())


def aligned_turns(trace_df: pd.DataFrame, bytes_per_token: "float | TokenRatios | None" = None,
                  strategy="lru", budget_tokens: float | None = None, settings: ReplaySettings | None = None) -> pd.DataFrame:
    """Per replayed turn: session, arm, segment, turn, the simulated window before the turn (pinned
    content and resident entries, in reference bytes and in tokens; its pinned part in bytes), the
    real tokens (0: unknown, not compared) and the turn's evictions; see `fidelity`.

    Raises `InputError` when the trace carries no real token counts. ``settings`` (`sim.engine.settings.ReplaySettings`): its ``evict_timeout_ms`` limits each call
    into the strategy, as in a run.
    """
    ratios = check_ratios(bytes_per_token)
    if budget_tokens is None:
        budget, spec = _UNBOUNDED, _unbounded_spec(strategy)
    else:
        budget, spec = budget_for_tokens(budget_tokens, ratios), strategy
    segments = _segments(trace_df, usage_required=True)
    logs = _replay_segments([_session_trace(seg) for seg in segments], spec, budget, strategy_label(strategy),
                            ratios, settings)
    rows = []
    for seg, (turn, occupancy, pinned, evictions) in zip(segments, logs):
        before = _carried_bytes(seg, ratios)
        window = occupancy + pinned
        rows.append(pd.DataFrame({
            "session": seg.session, "arm": seg.arm, "segment": seg.index, "turn": turn,
            "sim_bytes": np.r_[before, window[:-1]], "pinned_bytes": np.r_[before, pinned[:-1]],
            "real_tokens": seg.usage.reindex(turn).to_numpy(), "evictions": evictions,
        }))
    out = pd.concat(rows, ignore_index=True)
    out["sim_tokens"] = out["sim_bytes"] / ratios.reference
    return out[["session", "arm", "segment", "turn", "sim_bytes", "sim_tokens", "pinned_bytes", "real_tokens",
                "evictions"]]


def _replay_segments(segments: list[SessionTrace], spec, budget: ContextBudget, name: str,
                     ratios: TokenRatios, settings: ReplaySettings | None) -> list[tuple[np.ndarray, ...]]:
    """Each segment replayed (strictly) from an empty context, as a run replays it (`run_user_code`): code
    ctxbench does not ship in a process of its own, where ending it is a contract violation naming strategy,
    session and turn, and a factory that ends it a load error."""
    return run_user_code(spec, _segment_logs, segments, spec, budget, name, ratios, settings)


def _segment_logs(strategy_for_arm, segments: list[SessionTrace], spec, budget: ContextBudget, name: str,
                  ratios: TokenRatios, settings: ReplaySettings | None) -> list[tuple[np.ndarray, ...]]:
    """Per segment: its turns, the occupancy and pinned bytes after each and the evictions at each
    (``strategy_for_arm``, when given, builds the strategy)."""
    out = []
    for st in segments:
        log = replay_session(st, spec, budget, strategy_name=name, bytes_per_token=ratios,
                             strategy_for_arm=strategy_for_arm, settings=settings).log
        out.append(tuple(log.columns[c].copy() for c in ("turn", "occupancy_bytes", "pinned_bytes", "evictions")))
    return out


def window_composition(trace_df: pd.DataFrame, bytes_per_token: "float | TokenRatios | None" = None, *,
                       usage_required: bool = False) -> pd.DataFrame:
    """Per turn of each (session, arm, compaction segment): what the window held before it when
    nothing is evicted (the whole window of the real agent), and the real tokens (0: unknown).

    Columns: session, arm, segment, turn; ``bytes_<kind>`` for each content kind of
    `traces.tokens.KINDS` (bytes as the trace gives them, of the content its kinds' ratios count);
    ``exact_tokens``, the tokens of the content an import counted exactly (``exact_tokens`` of the
    trace: an OpenAI model's text), whatever its kind; one column per `GROUPS` band in tokens
    under ``bytes_per_token``; ``sim_tokens`` their sum; ``real_tokens``. The window is counted as
    the agent's append-only transcript holds it (`traces.window.window_changes`, the transcript model:
    `sim.engine.transcript` unbounded): every event adds its content, a re-read its copy again; an
    edit or a write whose tool-call input and returned text the trace holds adds nothing
    (`traces.vocabulary.accompanied_changes`); another edit, or a write of a file the arm had not
    touched, adds the tool's confirmation (`CONFIRMATION_BYTES` of output).
    """
    ratios = check_ratios(bytes_per_token)
    per_byte = np.array([1.0 / ratios.ratios[k] for k in KINDS])
    confirmation_group, confirmation_kind = _OP_GROUP[OUTPUT], KINDS.index(CONFIRMATION_KIND)
    rows = []
    for seg in _segments(trace_df, usage_required=usage_required):
        ev = seg.events
        turns, ops, adds = ev["turn"].to_numpy(), ev["op"].to_numpy(), ev["adds"].to_numpy()
        sizes, kinds, exact = ev["size"].to_numpy(), ev["kind"].to_numpy(), ev["exact"].to_numpy()
        groups = _OP_GROUP[ops]
        # bytes by band and kind, then the exact tokens by band (content an import counted exactly)
        totals = np.zeros((len(GROUPS), len(KINDS) + 1), dtype=np.int64)
        out_turns, states = [], []
        state = totals.copy()
        for i in range(len(ev)):
            if i and turns[i] != turns[i - 1]:
                out_turns.append(turns[i - 1])
                states.append(state)
                state = totals.copy()
            g, k, size = groups[i], kinds[i], int(sizes[i])
            if adds[i] == NOTHING:
                size = 0
            elif adds[i] == CONFIRMATION:
                g, k, size = confirmation_group, confirmation_kind, CONFIRMATION_BYTES
            elif exact[i] > 0:
                k, size = len(KINDS), int(exact[i])
            totals[g, k] += size
            if i == seg.carried - 1:
                state = totals.copy()   # the carried overhead was in the window before the first turn
        if len(ev):
            out_turns.append(turns[-1])
            states.append(state)
        if not states:
            continue
        cube = np.stack(states)                        # turn x group x (kind..., exact), before the turn
        frame = pd.DataFrame({"session": seg.session, "arm": seg.arm, "segment": seg.index, "turn": out_turns})
        for j, kind in enumerate(KINDS):
            frame[f"bytes_{kind}"] = cube[:, :, j].sum(axis=1)
        frame["exact_tokens"] = cube[:, :, -1].sum(axis=1)
        tokens = cube @ np.r_[per_byte, 1.0]           # turn x group
        for j, group in enumerate(GROUPS):
            frame[group] = tokens[:, j]
        frame["sim_tokens"] = tokens.sum(axis=1)
        frame["real_tokens"] = seg.usage.reindex(out_turns).to_numpy()
        rows.append(frame)
    columns = ["session", "arm", "segment", "turn", *(f"bytes_{k}" for k in KINDS), "exact_tokens", *GROUPS,
               "sim_tokens", "real_tokens"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


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


def _overhead_tokens(trace_df: pd.DataFrame, ratios: TokenRatios) -> dict[tuple[str, str], float]:
    """Each (session, arm)'s fixed overhead in tokens: its overhead events before its first compaction."""
    out = {}
    for seg in _segments(trace_df, usage_required=False):   # an arm's first segment comes first
        key = (seg.session, seg.arm)
        if key in out:
            continue
        head = seg.events[seg.events["op"] == _OVERHEAD]
        out[key] = float(ratios.tokens(head["size"].to_numpy(), [KINDS[k] for k in head["kind"]],
                                       head["exact"].to_numpy()).sum())
    return out


def by_session(trace_df: pd.DataFrame, chosen, compute) -> pd.DataFrame:
    """``compute(part, ratios)`` for each session's rows of ``trace_df``, with the ratios its model picks from
    ``chosen`` (`traces.model_ratios.session_ratios`: a table by family, ``None`` for the built-in one, or
    ratios for every session), concatenated with the column ``token_ratios`` naming them (a family, or
    ``given``)."""
    df = validate(trace_df, source="fidelity")
    parts = []
    for _, part in df.groupby("session", sort=False, observed=True):
        models = part.drop_duplicates("turn")["model"].astype(str) if "model" in part.columns else []
        label, ratios = session_ratios(session_model(models), chosen)
        parts.append(compute(part, ratios).assign(token_ratios=label))
    filled = [part for part in parts if len(part)]
    return pd.concat(filled, ignore_index=True) if filled else parts[0] if parts else \
        compute(df, as_ratios(None)).assign(token_ratios="")


def fidelity(trace_df: pd.DataFrame, bytes_per_token: "float | TokenRatios | None" = None, strategy=None,
             budget_tokens: float | None = None, policy=None, window_tokens: float = 200_000,
             settings: ReplaySettings | None = None) -> pd.DataFrame:
    """One row per (session, arm) with real token counts: how well the simulated window tracks them.

    A trace imported from logs that record usage carries, per turn, the input tokens the real
    model saw (``usage_input_tokens``: for Claude Code input + cache creation + cache read; 0
    when unknown). Each (session, arm) is replayed and its whole simulated window (the pinned
    overhead, conversation and tool-call inputs, plus the resident files and tool outputs, each
    kind at its bytes per token: ``bytes_per_token`` is one ratio or `traces.tokens.TokenRatios` for
    every session, or a table by model family, ``None`` for `traces.model_ratios.FAMILY_RATIOS`, whose
    ratios each session's model picks, named in the column ``token_ratios``: `by_session`) is
    compared, turn by turn, with those real counts.

    Decisions:

    - **Whole window** (the default, no ``strategy`` and no budget): the window as the agent's
      append-only transcript holds it, every copy (`window_composition`). A ``strategy`` or a
      budget replays the managed model instead (each path once, at its last size).
    - **Budget** of that replay: unbounded by default, since the real agent evicts nothing until it compacts. With
      no budget a registered strategy's entry cap is lifted too (``lru`` becomes
      ``lru?max_entries=none``) when its factory accepts that option; ``evictions`` in the
      result shows whether anything was evicted. A token budget replays what a strategy would
      have kept instead.
    - **Alignment**: the real count of turn *t* is the input that *produced* turn *t*'s calls, so
      it is compared with the simulated window at the end of the arm's previous turn (after its
      eviction), i.e. before turn *t*'s own output and results arrive. Turns whose real count is
      0 (unknown) are skipped.
    - **Compaction**: at a ``compact_before`` marker the real context was replaced by a summary, so
      each compaction segment of an arm is replayed separately from a window holding only the
      arm's fixed overhead (its overhead events before the first compaction); the summary and
      what the agent re-attached are the segment's own events (an import puts them there).
    - **Arms** are separate contexts (a subagent has its own window): each is replayed alone.

    Figures: Pearson and Spearman correlation, the median of simulated / real tokens, the
    least-squares fit ``real = intercept + slope * simulated`` (with the whole window modelled,
    ideally 0 and 1), the means, and the arm's fixed overhead in tokens. Columns are
    `FIDELITY_COLUMNS`; ``segments`` counts compaction segments replayed and ``evictions`` what
    the strategy evicted (0 in an unbounded replay). With a context ``policy`` (``claude-code``), each
    row also has the real and the simulated compaction points in a window of ``window_tokens``
    (`sim.analysis.compaction_points`). ``comparisons`` says what each row compares: ``window`` (the
    simulated window against the real input tokens), ``compactions`` (the compaction points) or both. A
    trace without real token counts gives, with a ``policy``, the compaction comparison alone (rows for
    every arm, the window's figures NaN); without one it is an `InputError`.

    The strategy and the policy run as in a run (`strategies.isolation.run_user_code`): code ctxbench does not
    ship in a process of its own, where ending it is a contract violation naming it, the session and the turn;
    ``settings`` (`sim.engine.settings.ReplaySettings`): its ``evict_timeout_ms`` limits each call into either.
    """
    if bytes_per_token is not None and not isinstance(bytes_per_token, Mapping):
        check_ratios(bytes_per_token)   # an absurd ratio named before any is made
    trace_df = validate(trace_df, source="fidelity")   # the schema's rules, a usage count's range among them
    if policy is None:
        _usage(trace_df, required=True)   # a trace with no counts at all is refused as a whole

    def one(part: pd.DataFrame, ratios: TokenRatios) -> pd.DataFrame:
        if policy is None and not _usage(part, required=False).any():
            return pd.DataFrame(columns=list(FIDELITY_COLUMNS))   # a session without counts has no rows
        return _fidelity(part, ratios, strategy, budget_tokens, policy, window_tokens, settings)

    return by_session(trace_df, bytes_per_token, one)


def _fidelity(trace_df: pd.DataFrame, ratios: TokenRatios, strategy, budget_tokens: float | None, policy,
              window_tokens: float, settings: ReplaySettings | None) -> pd.DataFrame:
    """`fidelity` of a trace counted with ``ratios``."""
    if policy is not None and not _usage(trace_df, required=False).any():
        return _compactions_only(trace_df, policy, window_tokens, ratios, settings)
    if strategy is None and budget_tokens is None:
        turns = window_composition(trace_df, ratios, usage_required=True).assign(evictions=0)
    else:
        turns = aligned_turns(trace_df, ratios, "lru" if strategy is None else strategy, budget_tokens,
                              settings)
    overhead = _overhead_tokens(trace_df, ratios)
    rows = []
    for (session, arm), g in turns.groupby(["session", "arm"], sort=False):
        evictions = int(g["evictions"].sum())
        compared = g[g["real_tokens"] > 0]
        if compared.empty:
            continue
        rows.append({
            "session": session, "arm": arm, "comparisons": "window", "turns_compared": len(compared),
            "segments": int(g["segment"].nunique()), "evictions": evictions,
            **summarise_pairs(compared["sim_tokens"], compared["real_tokens"]),
            "sim_tokens_mean": float(compared["sim_tokens"].mean()),
            "real_tokens_mean": float(compared["real_tokens"].mean()),
            "overhead_tokens": overhead.get((session, arm), 0.0),
        })
    out = pd.DataFrame(rows, columns=list(FIDELITY_COLUMNS))
    if policy is not None:
        from ctxbench.sim.analysis.compaction_points import compaction_points

        out = out.merge(compaction_points(trace_df, policy, window_tokens, ratios, settings=settings),
                        on=["session", "arm"], how="left")
        out["comparisons"] = "window, compactions"
        _optional_ints(out)
    return out


def _compactions_only(trace_df: pd.DataFrame, policy, window_tokens: float, ratios: TokenRatios,
                      settings: ReplaySettings | None) -> pd.DataFrame:
    """`fidelity`'s rows for a trace without real token counts: every arm's compaction points, nothing else."""
    from ctxbench.sim.analysis.compaction_points import compaction_points

    points = compaction_points(trace_df, policy, window_tokens, ratios, settings=settings)
    out = pd.DataFrame({"session": points["session"], "arm": points["arm"], "comparisons": "compactions",
                        "turns_compared": 0, "segments": 0, "evictions": 0})
    for name in FIDELITY_COLUMNS[6:]:
        out[name] = math.nan
    out = pd.concat([out[list(FIDELITY_COLUMNS)], points.drop(columns=["session", "arm"])], axis=1)
    _optional_ints(out)
    return out


def _optional_ints(out: pd.DataFrame) -> None:
    """The compaction columns that are counts or token counts, as ints or None (a merge makes them floats)."""
    for name in ("calls_apart", "summary_prompt_real", "summary_prompt_sim", "summary_over_window"):
        out[name] = pd.Series([None if v is None or pd.isna(v) else int(v) for v in out[name]], index=out.index,
                              dtype=object)
