"""The window without eviction (traces/window.py) is what the replay engine's two models hold with nothing evicted,
in both engines: the one definition behind the windows of `ctxbench stats` and `ctxbench fidelity`."""

import numpy as np
import pandas as pd
import pytest

from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.engine.replay import _confirmation, replay_session, resolve_session, split_sessions
from ctxbench.strategies.contract import ContextBudget
from ctxbench.traces.generate import generate
from ctxbench.traces.vocabulary import CONFIRMATION, CONTENT, NOTHING
from ctxbench.traces.window import window_changes
from whole_window import conversational

ENGINES = [False, True] if BUILT else [False]
UNBOUNDED = ContextBudget(2**50)


class KeepsEverything:
    def evict(self, state, budget):
        return []


class EditsNothing:
    def edit(self, items, window):
        return []


def windows_at_turn_ends(stream, costs, model, confirmation):
    """The window before each turn end of one arm's stream, from `window_changes` alone."""
    names, codes = np.unique(np.asarray(stream.paths, dtype=object), return_inverse=True)
    adds, replaces = window_changes(np.asarray(stream.ops), codes, list(names), model=model)
    delta = np.where(adds == CONTENT, costs, np.where(adds == CONFIRMATION, confirmation, 0))
    delta[replaces >= 0] -= costs[replaces[replaces >= 0]]
    assert ((adds == NOTHING) | (adds == CONTENT) | (adds == CONFIRMATION)).all()
    return np.cumsum(delta)[np.asarray(stream.ends, np.int64) - 1]


@pytest.mark.parametrize("compiled", ENGINES)
@pytest.mark.parametrize("preset, claims", [("debug-loop", None), ("claude-code-like", None),
                                            ("parallel-hubs", "disabled")])
def test_the_window_of_each_model_is_the_engines_with_nothing_evicted(preset, claims, compiled):
    df = generate(preset, sessions=1, seed=11, tool_calls=60) if claims else conversational(
        generate(preset, sessions=1, seed=11, tool_calls=60))
    (st,) = split_sessions(df)
    resolved = resolve_session(st, ClaimConfig(mode=claims) if claims else None, compiled=compiled)
    confirmation = _confirmation(resolved.tokens)
    for model, strategy in (("managed", KeepsEverything), ("transcript", EditsNothing)):
        result = replay_session(resolved, None, UNBOUNDED, strategy_for_arm=lambda arm: strategy(), compiled=compiled)
        for arm, log in result.arm_logs.items():
            stream = resolved.streams[arm]
            costs = np.asarray(stream.sizes if stream.costs is None else stream.costs, np.int64)
            expected = windows_at_turn_ends(stream, costs, model, confirmation)
            assert log.columns["window_bytes"].tolist() == expected.tolist(), (model, arm)


def test_the_models_differ_as_documented():
    names = ["a.py", "msg://user/0", "call://edit/1", "tool://edit/1"]
    ops = np.array([0, 0, 4, 5, 1, 3, 1])          # read, read again, message, call, edit with its result, edit
    paths = np.array([0, 0, 1, 2, 0, 3, 0])
    managed, replaced = window_changes(ops, paths, names, model="managed")
    assert managed.tolist() == [CONTENT] * 7 and replaced.tolist() == [-1, 0, -1, -1, 1, -1, 4]
    transcript, none = window_changes(ops, paths, names, model="transcript")
    assert transcript.tolist() == [CONTENT, CONTENT, CONTENT, CONTENT, NOTHING, CONTENT, CONFIRMATION]
    assert (none == -1).all()
    units = np.array([0, 1, 0, 0, 0, 0, 1])        # the second read is another arm's: nothing to replace
    assert window_changes(ops, paths, names, units, model="managed")[1].tolist() == [-1, -1, -1, -1, 0, -1, 1]
    with pytest.raises(ValueError, match="model"):
        window_changes(ops, paths, names, model="both")


def test_stats_and_fidelity_count_the_window_by_it():
    from ctxbench.sim.analysis.fidelity import window_composition
    from ctxbench.traces.stats import stats

    df = conversational(generate("debug-loop", sessions=1, seed=2, tool_calls=30))
    df["usage_input_tokens"] = 0
    window = stats(df)["window"]["sessions"]
    composition = window_composition(df)
    (st,) = split_sessions(df)
    managed = replay_session(st, KeepsEverything(), UNBOUNDED).log
    transcript = replay_session(st, EditsNothing(), UNBOUNDED).log
    reference = resolve_session(st).tokens.reference
    assert window["peak_tokens"].iloc[0] == pytest.approx(managed.columns["window_bytes"].max() / reference)
    # the composition is the window before each turn: the transcript's window at the previous turn end
    before = pd.Series(transcript.columns["window_bytes"][:-1] / reference)
    assert composition["sim_tokens"].iloc[1:].reset_index(drop=True).tolist() == pytest.approx(before.tolist(), rel=1e-3)
