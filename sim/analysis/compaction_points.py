"""Where a policy compacts an imported session against where the real agent compacted it (``fidelity --policy``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, replay_session, split_sessions
from ctxbench.sim.errors import InputError
from ctxbench.strategies.isolation import built_kind, run_user_code
from ctxbench.traces.model_ratios import session_ratios
from ctxbench.traces.schema import validate
from ctxbench.traces.tokens import TokenRatios

__all__ = ["COMPACT_COLUMN", "COMPACTION_COLUMNS", "real_compactions", "compaction_points"]

COMPACT_COLUMN = "compact_before"
COMPACTION_COLUMNS = ("session", "arm", "compactions_real", "compactions_sim", "calls_apart", "summary_prompt_real",
                      "summary_prompt_sim", "summary_over_window")


def real_compactions(trace_df: pd.DataFrame) -> dict[tuple[str, str], list[int]]:
    """Per (session, arm): the turns before which the real agent compacted (the importer's ``compact_before``
    markers; CSV and JSON lines may bring them back as text), in order; arms without one are left out."""
    if COMPACT_COLUMN not in trace_df.columns:
        return {}
    flags = trace_df[COMPACT_COLUMN]
    if flags.dtype != bool:
        flags = flags.astype(str).str.strip().str.lower().isin(("true", "1", "1.0"))
    marked = trace_df[flags.to_numpy()]
    arms = marked["arm"].astype(str) if "arm" in marked.columns else pd.Series("main", index=marked.index)
    out: dict[tuple[str, str], list[int]] = {}
    for session, arm, turn in zip(marked["session"].astype(str), arms, marked["turn"]):
        turns = out.setdefault((session, arm), [])
        if int(turn) not in turns:
            turns.append(int(turn))
    return {key: sorted(turns) for key, turns in out.items()}


def compaction_points(trace_df: pd.DataFrame, policy="claude-code", window_tokens: float = 200_000,
                      tokens: "TokenRatios | float | None" = None, settings: ReplaySettings | None = None) -> pd.DataFrame:
    """One row per (session, arm) of ``trace_df`` (`COMPACTION_COLUMNS`): the turns before which the real
    agent compacted (``compactions_real``), those before which ``policy`` compacts the same arm replayed as
    a transcript in a window of ``window_tokens`` (``compactions_sim``: the turn after the turn end where
    it compacted, so both name the first turn whose call saw the compacted context; one at the arm's last
    turn end is left out: the real agent made no call after its last turn, so had nothing to compact for), and
    ``calls_apart``: how many of the arm's turns (calls) the first simulated compaction comes after the
    first real one (negative: before it; None when either has none). The summarization call is measured
    too: ``summary_prompt_sim``, the first simulated summarization call's prompt in tokens;
    ``summary_prompt_real``, the real input tokens of the last call before the first real compaction
    (the window the agent summarized, where the trace has ``usage_input_tokens``); and
    ``summary_over_window``, how many simulated summarization calls were larger than the window
    (None where there is nothing to compare).

    ``tokens`` are the token ratios of the replay for every session, or a table by model family (``None``:
    `traces.model_ratios.FAMILY_RATIOS`) whose ratios each session's model picks. A spec or
    object that is not a transcript policy is an `InputError`. The policy runs as in a run
    (`strategies.isolation.run_user_code`): code ctxbench does not ship in a process of its own, where ending
    it (``os._exit``, a crash, a signal) is a contract violation naming policy, session and turn;
    ``settings`` (`sim.engine.settings.ReplaySettings`): its ``evict_timeout_ms`` limits each call into it.
    """
    if built_kind(policy) != "policy":   # built in a process of its own for code ctxbench does not ship
        raise InputError(f"--policy {policy!r} is not a context policy; policies: claude-code, codex, ... "
                         "(see 'ctxbench strategies')")
    df = validate(trace_df, source="fidelity")
    real = real_compactions(trace_df)
    usage = _turn_usage(trace_df)
    replayed = run_user_code(policy, _arm_compactions, split_sessions(df, check=False), policy, window_tokens, tokens,
                             settings, noun="policy", loaded=True)
    rows = []
    for session, arm, turns, done, prompts in replayed:
        simulated = [turns[i + 1] for i in done if i + 1 < len(turns)]
        observed = real.get((session, arm), [])
        before = [t for t in usage.get((session, arm), {}) if observed and t < observed[0]]
        rows.append({"session": session, "arm": arm, "compactions_real": observed, "compactions_sim": simulated,
                     "calls_apart": _calls_apart(turns, observed, simulated),
                     "summary_prompt_real": usage[(session, arm)][max(before)] if before else None,
                     "summary_prompt_sim": prompts[0] if prompts else None,
                     "summary_over_window": sum(p > window_tokens for p in prompts) if prompts else None})
    return pd.DataFrame(rows, columns=list(COMPACTION_COLUMNS)).astype(
        {c: object for c in ("calls_apart", "summary_prompt_real", "summary_prompt_sim", "summary_over_window")})


def _turn_usage(trace_df: pd.DataFrame) -> dict[tuple[str, str], dict[int, int]]:
    """Per (session, arm): each turn's real input tokens (the largest its rows give; turns without are left out)."""
    if "usage_input_tokens" not in trace_df.columns:
        return {}
    usage = pd.to_numeric(trace_df["usage_input_tokens"], errors="coerce")
    known = usage.notna().to_numpy() & (usage.fillna(0).to_numpy() > 0)
    arms = trace_df["arm"].astype(str) if "arm" in trace_df.columns else pd.Series("main", index=trace_df.index)
    out: dict[tuple[str, str], dict[int, int]] = {}
    for session, arm, turn, tokens in zip(trace_df["session"].astype(str)[known], arms[known], trace_df["turn"][known],
                                          usage[known]):
        turns = out.setdefault((session, arm), {})
        turns[int(turn)] = max(turns.get(int(turn), 0), int(tokens))
    return out


def _arm_compactions(policy_for_arm, sessions: list[SessionTrace], policy, window_tokens: float, tokens,
                     settings: ReplaySettings | None) -> list[tuple[str, str, list[int], list[int]]]:
    """Per (session, arm) replayed under ``policy`` (built by ``policy_for_arm`` when given) in a window of
    ``window_tokens`` at its model's ratios: its turns, the indices of the turns at whose end it compacted and
    its summarization calls' prompts in tokens (but the last turn end's)."""
    out = []
    for st in sessions:
        ratios = session_ratios(st.model, tokens)[1]
        budget = budget_for_tokens(window_tokens, ratios, option="--window")
        result = replay_session(st, policy, budget, bytes_per_token=ratios, strategy_for_arm=policy_for_arm,
                                settings=settings)
        for arm, log in result.arm_logs.items():
            prompts = log.columns["summary_prompt_bytes"][:-1]   # the last turn end's call is not compared
            out.append((st.session, arm, log.columns["turn"].tolist(),
                        np.flatnonzero(log.columns["compactions"]).tolist(),
                        [round(p / ratios.reference) for p in prompts[prompts > 0].tolist()]))
    return out


def _calls_apart(turns: list[int], real: list[int], simulated: list[int]) -> int | None:
    """The first simulated compaction's place in the arm's turns less the first real one's."""
    if not real or not simulated:
        return None
    place = {turn: i for i, turn in enumerate(turns)}
    first_real = place.get(real[0], int(np.searchsorted(turns, real[0])))
    first_sim = place.get(simulated[0], len(turns))
    return first_sim - first_real
