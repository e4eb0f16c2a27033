"""Fidelity: simulated occupancy against real input tokens, on a hand-worked trace, the CLI and real sessions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np

from ctxbench.sim.analysis.fidelity import GROUPS, aligned_turns, fidelity, window_composition
from ctxbench.traces.io import save
from ctxbench.traces.tokens import DEFAULT_TOKENS, KINDS, TokenRatios
from real_data import REAL_DATA

DATA = REAL_DATA

# turn: (op, path, size_bytes, real input tokens, compaction before)
HAND = [
    (0, "read", "a.py", 100, 1000, False),
    (1, "output", "tool://bash/1", 200, 1100, False),
    (2, "read", "b.py", 300, 1300, False),
    (3, "read", "a.py", 100, 0, False),      # usage unknown: not compared
    (4, "edit", "a.py", 150, 1650, False),
    (5, "output", "tool://bash/2", 50, 900, True),   # the real context was compacted here
    (6, "read", "c.py", 10, 1000, False),
]


def hand_trace(rows=HAND, session="s", arm="main") -> pd.DataFrame:
    return pd.DataFrame({
        "session": session, "turn": [r[0] for r in rows], "ts_ms": [1000 * r[0] for r in rows],
        "op": [r[1] for r in rows], "path": [r[2] for r in rows], "size_bytes": [r[3] for r in rows],
        "arm": arm, "usage_input_tokens": [r[4] for r in rows], "compact_before": [r[5] for r in rows],
    })


def test_occupancy_before_each_turn_restarts_at_a_compaction():
    turns = aligned_turns(hand_trace(), bytes_per_token=1)
    # before turn t: what turns < t of the same segment left resident (a.py's edit replaces it)
    assert turns["sim_bytes"].tolist() == [0, 100, 300, 600, 600, 0, 50]
    assert turns["segment"].tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert turns["real_tokens"].tolist() == [1000, 1100, 1300, 0, 1650, 900, 1000]


def test_hand_worked_figures():
    # compared pairs (sim, real): (0,1000) (100,1100) (300,1300) (600,1650) (0,900) (50,1000)
    # means 175 and 3475/3; Sxy = 323750, Sxx = 278750, Syy = 1146250/3
    row = fidelity(hand_trace(), bytes_per_token=1, strategy="lru").iloc[0]   # the managed replay
    assert (row["session"], row["arm"], row["turns_compared"], row["segments"]) == ("s", "main", 6, 2)
    assert row["evictions"] == 0
    assert row["pearson"] == pytest.approx(323750 / math.sqrt(278750 * 1146250 / 3), rel=1e-12)
    assert row["slope"] == pytest.approx(259 / 223, rel=1e-12)               # Sxy / Sxx
    assert row["intercept_tokens"] == pytest.approx(638950 / 669, rel=1e-12)  # 3475/3 - 259/223 * 175
    # ranks (ties averaged): sim 1.5 4 5 6 1.5 3, real 2.5 4 5 6 1 2.5 -> 65/4 / sqrt(17 * 17)
    assert row["spearman"] == pytest.approx(65 / 68, rel=1e-12)
    # ratios 0, 1/11, 3/13, 4/11, 0, 1/20 -> median (1/20 + 1/11) / 2
    assert row["median_ratio"] == pytest.approx(31 / 440, rel=1e-12)
    assert row["sim_tokens_mean"] == pytest.approx(175)
    assert row["real_tokens_mean"] == pytest.approx(3475 / 3)


def test_bytes_per_token_scales_the_simulated_side_only():
    one = fidelity(hand_trace(), bytes_per_token=1).iloc[0]
    four = fidelity(hand_trace(), bytes_per_token=4).iloc[0]
    assert four["median_ratio"] == pytest.approx(one["median_ratio"] / 4)
    assert four["slope"] == pytest.approx(one["slope"] * 4)
    assert four["intercept_tokens"] == pytest.approx(one["intercept_tokens"])
    assert four["pearson"] == pytest.approx(one["pearson"])


def test_unbounded_replay_lifts_the_entry_cap_and_a_budget_evicts():
    rows = [(t, "output", f"tool://bash/{t}", 40, 1000 + 10 * t, False) for t in range(150)]
    trace = hand_trace(rows)
    unbounded = aligned_turns(trace, bytes_per_token=1)
    assert unbounded["evictions"].sum() == 0          # lru's default cap is 100 entries
    assert unbounded["sim_bytes"].tolist() == [40 * t for t in range(150)]
    assert fidelity(trace, bytes_per_token=1)["pearson"].iloc[0] == pytest.approx(1.0)
    budgeted = fidelity(trace, bytes_per_token=1, budget_tokens=400).iloc[0]
    assert budgeted["evictions"] == 140
    assert aligned_turns(trace, bytes_per_token=1, budget_tokens=400)["sim_bytes"].max() == 400


def test_each_arm_is_its_own_context():
    main_rows = hand_trace()
    sub = hand_trace([(10, "read", "z.py", 5000, 200, False), (11, "read", "y.py", 10, 300, False)], arm="sub")
    rows = fidelity(pd.concat([main_rows, sub], ignore_index=True), bytes_per_token=1)
    assert rows["arm"].tolist() == ["main", "sub"]
    assert rows["turns_compared"].tolist() == [6, 2]
    assert rows.set_index("arm").loc["sub", "sim_tokens_mean"] == 2500   # 0 then 5000: no main files


def test_traces_without_real_counts_are_bad_input():
    plain = hand_trace().drop(columns=["usage_input_tokens", "compact_before"])
    with pytest.raises(InputError, match="no 'usage_input_tokens' column"):
        fidelity(plain)
    with pytest.raises(InputError, match="0 everywhere"):
        fidelity(hand_trace().assign(usage_input_tokens=0))
    with pytest.raises(InputError, match="bytes per token"):
        fidelity(hand_trace(), bytes_per_token=0)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_cli_table_and_json(tmp_path, capsys, suffix):
    path = save(hand_trace(), tmp_path / f"t{suffix}")
    assert main(["fidelity", str(path), "--bytes-per-token", "1", "--strategy", "lru"]) == 0
    text = capsys.readouterr().out
    assert "session s" in text and "0.992" in text and "955" in text   # pearson, overhead 638950/669
    assert main(["fidelity", str(path), "--bytes-per-token", "1", "--strategy", "lru", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["turns_compared"], row["segments"]) == (6, 2)
    assert row["spearman"] == pytest.approx(65 / 68)


def test_cli_without_usage_exits_2(tmp_path, capsys):
    path = save(hand_trace().drop(columns=["usage_input_tokens", "compact_before"]), tmp_path / "plain.csv")
    assert main(["fidelity", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxbench fidelity: error: the trace has no 'usage_input_tokens' column")
    assert "\n" not in err


# ----- the whole window ----------------------------------------------------------------------

WINDOW = [  # turn, op, path, size, real tokens, compaction before
    (0, "overhead", "overhead://system", 1000, 0, False),
    (0, "message", "msg://user/1", 40, 0, False),
    (1, "message", "msg://assistant/1", 20, 1100, False),
    (1, "call", "call://read/1", 30, 1100, False),
    (1, "read", "a.py", 300, 1100, False),
    (2, "call", "call://bash/1", 10, 1450, False),
    (2, "output", "tool://bash/1", 100, 1450, False),
    (3, "read", "a.py", 300, 1600, False),             # a re-read at the same size adds nothing
    (4, "message", "msg://summary/1", 80, 0, True),    # compacted: the summary and what was re-attached
    (4, "overhead", "overhead://compaction/1", 50, 0, False),
    (5, "message", "msg://assistant/2", 10, 1200, False),
]


def window_trace(rows=WINDOW):
    return hand_trace(rows)


def test_the_whole_window_before_each_call():
    turns = aligned_turns(window_trace(), bytes_per_token=1)
    # overhead and conversation stay; after the compaction only the arm's overhead is carried over
    assert turns["sim_bytes"].tolist() == [0, 1040, 1390, 1500, 1000, 1130]
    assert turns["pinned_bytes"].tolist() == [0, 1040, 1090, 1100, 1000, 1130]
    assert turns["segment"].tolist() == [0, 0, 0, 0, 1, 1]
    row = fidelity(window_trace(), bytes_per_token=1).iloc[0]
    # pairs (1040, 1100) (1390, 1450) (1500, 1600) (1130, 1200): ratios 0.945, 0.959, 0.9375, 0.942
    assert row["median_ratio"] == pytest.approx((1040 / 1100 + 1130 / 1200) / 2)
    assert row["overhead_tokens"] == 1000 and row["turns_compared"] == 4


def test_kinds_count_at_their_own_bytes_per_token():
    ratios = TokenRatios({"code": 2.0, "output": 2.0, "prose": 4.0, "thinking": 1.0, "json": 1.0, "overhead": 2.0})
    turns = aligned_turns(window_trace(), bytes_per_token=ratios)
    # before turn 2: 1000/2 + 40/4 + 20/4 + 30/1 + 300/2 = 695 tokens
    assert turns["sim_tokens"].tolist()[:3] == [0, 510, 695]
    composed = window_composition(window_trace(), ratios)
    assert composed["sim_tokens"].tolist() == pytest.approx(turns["sim_tokens"].tolist())
    before_2 = composed.iloc[2]
    assert (before_2["overhead"], before_2["conversation"], before_2["calls"], before_2["files"],
            before_2["outputs"]) == (500, 15, 30, 150, 0)
    assert (before_2["bytes_prose"], before_2["bytes_code"], before_2["bytes_json"]) == (60, 300, 30)


@st.composite
def whole_sessions(draw):
    ops = ["read", "edit", "write", "output", "message", "call", "overhead"]
    rows = []
    for turn in range(draw(st.integers(1, 12))):
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(ops))
            path = {"output": f"tool://t/{turn}", "message": f"msg://user/{turn}", "call": f"call://t/{turn}",
                    "overhead": "overhead://system"}.get(op) or draw(st.sampled_from(["a", "b", "c"]))
            rows.append((turn, op, path, draw(st.integers(0, 500)), draw(st.integers(0, 3000)),
                         draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans())))
    return rows


def test_the_whole_window_keeps_every_copy_of_a_re_read():
    # before turn 4: a.py (100), the bash output (200), b.py (300) and a.py read again (100)
    composed = window_composition(hand_trace(), 1)
    assert composed["sim_tokens"].tolist() == [0, 100, 300, 600, 700, 0, 50]
    row = fidelity(hand_trace(), bytes_per_token=1).iloc[0]   # the default: the whole window, every copy
    assert row["median_ratio"] == pytest.approx(np.median([0, 100 / 1100, 300 / 1300, 700 / 1650, 0, 50 / 1000]))


CHANGES = [  # turn, op, path, size, real tokens, compaction before
    (0, "read", "a.py", 100, 1000, False),
    (1, "call", "call://edit/1", 40, 1100, False),
    (1, "edit", "a.py", 150, 1100, False),       # its call and its returned text are events: it adds nothing
    (1, "output", "tool://edit/1", 20, 1100, False),
    (2, "edit", "b.py", 70, 1200, False),        # alone: the tool's confirmation (130 bytes of output)
    (3, "write", "a.py", 90, 1300, False),       # over a file the arm had, alone: the file
    (4, "read", "a.py", 90, 1400, False),
]


def test_a_change_adds_its_call_and_returned_text_once():
    composed = window_composition(hand_trace(CHANGES), 1)
    assert composed["sim_tokens"].tolist() == [0, 100, 160, 290, 380]
    assert composed["bytes_output"].tolist() == [0, 0, 20, 150, 150]
    assert composed["bytes_code"].tolist() == [0, 100, 100, 100, 190]


def _transcript_windows(trace: pd.DataFrame, ratio) -> list[float]:
    """The unbounded transcript model's window before each turn, in tokens."""
    from ctxbench.sim.analysis.fidelity import check_ratios
    from ctxbench.sim.engine.replay import budget_for_tokens, replay_session, split_sessions
    from ctxbench.traces.schema import validate

    ratios = check_ratios(ratio)
    [session] = split_sessions(validate(trace, source="test"), check=False)
    log = replay_session(session, "claude-code", budget_for_tokens(10**12, ratios), bytes_per_token=ratios
                         ).arm_logs["main"]
    return [0.0, *(log.columns["window_bytes"][:-1] / ratios.reference)]


def test_the_transcript_model_holds_what_the_composition_counts():
    assert _transcript_windows(hand_trace(CHANGES), 1) == [0, 100, 160, 290, 380]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(whole_sessions(), st.sampled_from([1.0, None]))
def test_the_composition_adds_up_to_the_unbounded_transcript(rows, ratio):
    trace = hand_trace(rows).assign(compact_before=False)   # the transcript model compacts by itself
    composed = window_composition(trace, ratio)
    replayed = _transcript_windows(trace, ratio)
    # the engine rounds each event's cost to a reference byte: at most half a byte per event apart
    reference = TokenRatios.uniform(1.0).reference if ratio else DEFAULT_TOKENS.reference
    assert np.allclose(composed["sim_tokens"], replayed, atol=len(rows) * 0.5 / reference + 1e-9)
    assert np.allclose(composed[list(GROUPS)].sum(axis=1), composed["sim_tokens"])


# Measured on the bundled real sessions with the shipped defaults (calibrated on 258c7280 alone, see
# traces/tokens.py): the goal is a median simulated / real within 0.9-1.1 and Pearson >= 0.98 on
# every arm with more than one recorded call, 8463c716 included (not calibrated on).
CALIBRATED_ON, HELD_OUT = "258c7280-ae70-4798-800f-63464d01a85d", "8463c716-a2ea-4c14-9efa-87158ebd9f20"
REAL_CALLS = {(CALIBRATED_ON, "main"): 152, (CALIBRATED_ON, "a881341"): 3, (CALIBRATED_ON, "acompact-fffbd0"): 1,
              (HELD_OUT, "main"): 143, (HELD_OUT, "a7be2f0"): 13, (HELD_OUT, "acompact-f46190"): 1,
              ("short", "main"): 1, ("subagent", "main"): 12, ("tool_heavy", "main"): 4}


@pytest.fixture(scope="module")
def real():
    from ctxbench.traces.importers import import_paths

    return import_paths("claude-code", [DATA / "claude-code"])[0]


@pytest.mark.real_sessions
def test_real_sessions_meet_the_goal_with_the_shipped_defaults(real):
    rows = fidelity(real).set_index(["session", "arm"])
    assert rows["turns_compared"].to_dict() == REAL_CALLS
    for (session, arm), row in rows.iterrows():
        if row["turns_compared"] < 2:
            assert row["median_ratio"] == pytest.approx(1.0, abs=0.02)   # one call: its overhead was measured on it
            continue
        assert 0.9 <= row["median_ratio"] <= 1.1, (session, arm, row["median_ratio"])
        assert row["pearson"] >= 0.98, (session, arm, row["pearson"])
        assert row["evictions"] == 0
    for session in (CALIBRATED_ON, HELD_OUT):
        main = rows.loc[(session, "main")]
        assert main["segments"] == 2 and 25_000 < main["overhead_tokens"] < 27_000
        assert 0.85 < main["slope"] < 1.15


@pytest.mark.real_sessions
def test_real_sessions_files_and_outputs_alone_fall_far_short(real):
    from ctxbench.traces.importers import import_paths

    files_only = import_paths("claude-code", [DATA / "claude-code"], conversation=False)[0]
    rows = fidelity(files_only, bytes_per_token=3.8).set_index(["session", "arm"])
    for session in (CALIBRATED_ON, HELD_OUT):
        assert rows.loc[(session, "main"), "median_ratio"] < 0.4   # measured 0.25 and 0.32 before this model


@pytest.mark.real_sessions
def test_real_sessions_need_the_compaction_segments(real):
    continuous = fidelity(real.assign(compact_before=False)).set_index(["session", "arm"])
    for session in (CALIBRATED_ON, HELD_OUT):
        main = continuous.loc[(session, "main")]
        assert main["pearson"] < 0.6 or main["median_ratio"] > 1.3


def test_cli_writes_the_figure_and_the_rows(tmp_path, capsys):
    path = save(window_trace(), tmp_path / "w.parquet")
    out = tmp_path / "fid"
    assert main(["fidelity", str(path), "--out", str(out), "--bytes-per-token", "1"]) == 0
    doc = json.loads((out / "fidelity.json").read_text())
    assert doc["rows"][0]["turns_compared"] == 4 and doc["rows"][0]["token_ratios"] == "given"
    assert doc["token_ratios"] == {"given": dict.fromkeys(KINDS, 1.0)}
    assert (out / "figures" / "window.png").stat().st_size > 1000 and (out / "figures" / "window.svg").is_file()
    calls = pd.read_csv(out / "calls.csv")
    assert calls["replayed_tokens"].tolist() == [0, 1040, 1390, 1500, 1000, 1130]
    # a directory ctxbench did not write is refused before any work
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    capsys.readouterr()
    assert main(["fidelity", str(path), "--out", str(foreign)]) == 2
    assert str(foreign) in capsys.readouterr().err
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_cli_unknown_session_for_the_figure_exits_2_and_writes_nothing(tmp_path, capsys):
    path = save(window_trace(), tmp_path / "w.parquet")
    assert main(["fidelity", str(path), "--out", str(tmp_path / "fid"), "--session", "nope"]) == 2
    assert "no session 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "fid").exists()


@pytest.mark.parametrize("content, message", [
    ('{"code": 2.0, "verse": 3.0}', "verse: unknown content kind 'verse'"),
    ('{"ratios": {"prose": "four"}}', "ratios.prose: bytes per token must be a number"),
    ('{"json": 0}', "json: bytes per token must be between 0.001 and 1,000,000, got 0"),
    ('{"json": 1e9}', "json: bytes per token must be between"),
    ('{"code": true}', "code: bytes per token must be a number"),
    ("[1, 2]", "must be a JSON object"),
    ("{not json", "not a JSON document"),
])
def test_cli_token_ratios_file_is_checked(tmp_path, capsys, content, message):
    path = save(window_trace(), tmp_path / "w.parquet")
    ratios = tmp_path / "r.json"
    ratios.write_text(content)
    for command in (["fidelity", str(path)], ["run", "--traces", str(path), "--strategy", "lru", "--workers", "1",
                                              "--no-report", "--out", str(tmp_path / "res")]):
        assert main(command + ["--token-ratios", str(ratios)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and str(ratios) in err and "\n" not in err, err
    assert not (tmp_path / "res").exists()


def test_cli_token_ratios_file_counts_and_excludes_bytes_per_token(tmp_path, capsys):
    path = save(window_trace(), tmp_path / "w.parquet")
    ratios = tmp_path / "r.json"
    ratios.write_text(json.dumps(dict.fromkeys(["code", "output", "prose", "thinking", "json", "overhead"], 1.0)))
    assert main(["fidelity", str(path), "--token-ratios", str(ratios), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["median_ratio"] == pytest.approx((1040 / 1100 + 1130 / 1200) / 2)
    assert main(["fidelity", str(path), "--token-ratios", str(ratios), "--bytes-per-token", "2"]) == 2
    assert "give one" in capsys.readouterr().err
