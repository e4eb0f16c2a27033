"""The grid reading trace files session by session: the same rows as from frames in memory, the per-turn
log written as it goes equal to the one kept in memory, rows gathered compactly but exactly."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxbench.sim.analysis.grid as grid
from processes import small_trace
from ctxbench.sim.analysis.claim_modes import parse_claim_modes
from ctxbench.sim.analysis.grid import _Rows, run_grid
from ctxbench.sim.analysis.turn_log import TurnWriter
from ctxbench.sim.engine.replay import InternedPaths, iter_sessions, split_sessions
from ctxbench.traces.generate import generate
from ctxbench.traces.io import load, open_trace, save

TIMED = ("replay_s", "evict_p50_ns", "evict_p90_ns", "evict_p99_ns", "evict_max_ns")


def _untimed(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in TIMED + ("evict_ns",) if c in frame.columns]).reset_index(drop=True)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A trace of ten sessions, more than the grid reads ahead of its workers here (one core: four)."""
    monkeypatch.setattr(grid, "cores", lambda: 1)
    trace = pd.concat([generate("mixed", sessions=6, seed=2, tool_calls=60),
                       generate("debug-loop", sessions=4, seed=3, tool_calls=60)], ignore_index=True)
    save(trace, tmp_path / "t.parquet")
    return tmp_path


@pytest.mark.parametrize("workers", [1, 2])
def test_sessions_read_from_a_file_as_needed_give_the_rows_of_the_frame(files, workers, monkeypatch):
    monkeypatch.setattr(grid, "cores", lambda: workers)   # two workers where asked: eight sessions read ahead
    path = files / "t.parquet"
    kept = run_grid({"t": load(path)}, ["lru", "importance"], [8_000], workers=workers, progress=False, bracket=True)
    streamed = run_grid({"t": open_trace(path, chunk_rows=500)}, ["lru", "importance"], [8_000], workers=workers,
                        progress=False, bracket=True, turns_to=files / "turns.parquet")
    pd.testing.assert_frame_equal(_untimed(streamed.results), _untimed(kept.results))
    assert streamed.turns.empty and streamed.turns_file == files / "turns.parquet"
    written = pd.read_parquet(files / "turns.parquet")
    pd.testing.assert_frame_equal(_untimed(written), _untimed(_roundtrip(kept.turns, files / "kept.parquet")))


def _roundtrip(frame: pd.DataFrame, path) -> pd.DataFrame:
    frame.to_parquet(path, index=False)   # as `write_results_dir` writes a per-turn log kept in memory
    return pd.read_parquet(path)


def test_the_log_written_as_it_goes_gains_claims_when_a_later_session_has_arms(tmp_path):
    """Single-arm sessions first: the rows written before the first claim mode are copied in with none."""
    single = generate("mixed", sessions=2, seed=4, tool_calls=80)
    multi = generate("parallel-hubs", sessions=2, seed=5, tool_calls=40)
    traces = {"one": single, "many": multi}
    claims = parse_claim_modes("strict,disabled")
    TurnWriter.GROUP_ROWS, saved = 10, TurnWriter.GROUP_ROWS   # several row groups before and after
    try:
        streamed = run_grid(traces, ["lru"], [6_000], workers=1, progress=False, claims=claims,
                            turns_to=tmp_path / "turns.parquet")
    finally:
        TurnWriter.GROUP_ROWS = saved
    kept = run_grid(traces, ["lru"], [6_000], workers=1, progress=False, claims=claims)
    assert "claims" in kept.turns.columns and kept.turns["claims"].isna().any()
    written = pd.read_parquet(tmp_path / "turns.parquet")
    pd.testing.assert_frame_equal(_untimed(written), _untimed(_roundtrip(kept.turns, tmp_path / "kept.parquet")))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary left


def test_a_run_without_per_turn_rows_writes_no_log(tmp_path):
    result = run_grid(generate("mixed", sessions=2, seed=1, tool_calls=30), ["lru"], [5_000], workers=1,
                      progress=False, keep_turns=False, turns_to=tmp_path / "turns.parquet")
    assert result.turns_file is None and not (tmp_path / "turns.parquet").exists()


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=3))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.dictionaries(st.sampled_from("abcdef"), _VALUES, max_size=6), max_size=8))
def test_rows_gathered_compactly_make_the_frame_pandas_makes(rows):
    gathered = _Rows()
    for row in rows:
        gathered.add(row)
    expected = pd.DataFrame(rows)
    got = gathered.frame()
    if not rows:
        assert got.empty and expected.empty
        return
    pd.testing.assert_frame_equal(got, expected)


def test_sessions_keep_their_paths_interned_once(tmp_path):
    trace = generate("long", sessions=2, seed=1, tool_calls=300)
    sessions = split_sessions(trace)
    for st_ in sessions:
        assert isinstance(st_.paths, InternedPaths)
        assert len(st_.paths.names) == len(set(st_.paths.tolist())) < len(st_)
        assert st_.paths.codes.dtype == np.int32
    names = trace["path"].astype(str).tolist()
    assert sum((s.paths.tolist() for s in sessions), []) == names
    save(trace, tmp_path / "t.parquet")
    streamed = list(iter_sessions(open_trace(tmp_path / "t.parquet", chunk_rows=1)))
    assert [s.paths for s in streamed] == [s.paths for s in sessions]
    assert all(np.array_equal(a.kinds, b.kinds) for a, b in zip(streamed, sessions))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks worker processes")
def test_a_worker_dying_while_sessions_are_read_as_needed_is_recovered(tmp_path, monkeypatch):
    from test_dead_worker import EXITING

    monkeypatch.setattr(grid, "cores", lambda: 1)
    (tmp_path / "exiting.py").write_text(EXITING)
    monkeypatch.syspath_prepend(str(tmp_path))
    small_trace(tmp_path / "t.csv", sessions=tuple(f"s{i}" for i in range(7)))
    specs = ["lru", "exiting:exit3_on_call4"]
    streamed = run_grid(open_trace(tmp_path / "t.csv", chunk_rows=12), specs, [1_500], progress=False, strict=False)
    kept = run_grid(load(tmp_path / "t.csv"), specs, [1_500], progress=False, strict=False)
    pd.testing.assert_frame_equal(_untimed(streamed.results), _untimed(kept.results))
    assert (streamed.results.loc[streamed.results["strategy"] == specs[1], "violations"] == 12 - 3).all()
