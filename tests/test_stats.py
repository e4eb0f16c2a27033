"""Trace statistics on a hand-worked trace, reuse distances against a brute force, comparisons."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbench.sim.cli import main
from ctxbench.sim.engine.replay import replay_session, split_sessions
from ctxbench.strategies.contract import ContextBudget
from ctxbench.traces.generate import generate
from ctxbench.traces.schema import validate
from ctxbench.traces.stats import compare, reuse_distances, stats, summary
from ctxbench.traces.tokens import DEFAULT_TOKENS, KINDS, TokenRatios


def hand_trace() -> pd.DataFrame:
    """Two sessions whose every figure is worked out by hand in the tests below."""
    rows = [  # session, turn, ts_ms, op, path, size_bytes
        ("s1", 0, 0, "read", "a.py", 100),
        ("s1", 1, 1000, "read", "b.py", 200),
        ("s1", 2, 2000, "output", "tool://bash/1", 50),
        ("s1", 3, 3000, "read", "a.py", 100),     # re-read; distance 2 (b, bash/1)
        ("s1", 4, 4000, "edit", "a.py", 150),     # distance 0
        ("s1", 4, 4000, "read", "c.py", 300),     # same turn as the edit
        ("s1", 5, 9000, "read", "b.py", 200),     # re-read; distance 3 (bash/1, a, c; a twice)
        ("s2", 0, 0, "write", "n.py", 80),
        ("s2", 1, 500, "read", "n.py", 80),       # distance 0, but not a re-read: no earlier read
        ("s2", 2, 1500, "output", "tool://grep/1", 20),
    ]
    return validate(pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes"]))


@pytest.fixture(scope="module")
def result():
    return stats(hand_trace())


def test_per_session_figures(result):
    s = result["sessions"].set_index("session")
    s1, s2 = s.loc["s1"], s.loc["s2"]
    assert (s1["events"], s1["turns"], s1["reads"], s1["edits"], s1["writes"], s1["outputs"]) == (7, 6, 5, 1, 0, 1)
    assert (s2["events"], s2["turns"], s2["reads"], s2["edits"], s2["writes"], s2["outputs"]) == (3, 3, 1, 0, 1, 1)
    assert (s1["distinct_paths"], s1["distinct_files_read"], s1["rereads"]) == (4, 3, 2)
    assert (s2["distinct_paths"], s2["distinct_files_read"], s2["rereads"]) == (2, 1, 0)
    assert s1["reread_fraction"] == pytest.approx(0.4) and s2["reread_fraction"] == 0.0
    assert (s1["top_path"], s1["top_path_reads"]) == ("a.py", 2)  # a.py and b.py tie: name order
    assert (s2["top_path"], s2["top_path_reads"]) == ("n.py", 1)
    assert (s1["unique_bytes"], s2["unique_bytes"]) == (700, 100)  # a.py counted at its largest, 150
    # files at the code ratio (2.07 bytes a token), the bash output at the output ratio (4.31)
    assert s1["unique_tokens"] == pytest.approx(650 / 2.07 + 50 / 4.31, rel=1e-3)
    assert s1["budget_ratio"] == pytest.approx((650 / 2.07 + 50 / 4.31) / 200_000, rel=1e-3)
    assert (s1["output_bytes"], s2["output_bytes"]) == (50, 20)
    assert s1["output_bytes_share"] == pytest.approx(50 / 700) and s2["output_bytes_share"] == pytest.approx(0.2)
    assert (s1["bash_outputs"], s1["bash_bytes"], s2["bash_outputs"], s2["bash_bytes"]) == (1, 50, 0, 0)
    assert (s1["reuse_median"], s1["reuse_p90"]) == (2.0, pytest.approx(2.8))
    assert (s2["reuse_median"], s2["reuse_p90"]) == (0.0, 0.0)
    assert (s1["duration_s"], s2["duration_s"]) == (9.0, 1.5)
    assert (s["arms"] == 1).all()


def test_overall_figures(result):
    o = result["overall"]
    assert (o["sessions"], o["events"], o["turns"], o["arms"]) == (2, 10, 9, 1)
    assert o["events_by_op"] == {"read": 6, "edit": 1, "write": 1, "output": 2, "message": 0, "call": 0, "overhead": 0}
    assert o["distinct_paths"] == 6
    assert o["unique_bytes"] == 800
    assert o["unique_tokens"] == pytest.approx(730 / 2.07 + 70 / 4.31, rel=1e-3)
    assert o["reread_fraction"] == pytest.approx(2 / 6)
    assert o["output_bytes_share"] == pytest.approx(70 / 800)
    assert o["read_bytes"] == {"median": 150.0, "p90": 250.0}
    reuse = o["reuse_distance"]
    assert (reuse["count"], reuse["median"], reuse["p90"], reuse["mean"], reuse["max"]) == \
        (4, 1.0, pytest.approx(2.7), 1.25, 3)
    assert {k: v for k, v in reuse["histogram"].items() if v} == {"0": 2, "2-3": 2}
    assert o["duration_s"] == {"median": 5.25, "max": 9.0, "total": 10.5}
    assert [(p["path"], p["reads"], p["sessions"]) for p in o["top_paths"]] == \
        [("a.py", 2, 1), ("b.py", 2, 1), ("c.py", 1, 1), ("n.py", 1, 1)]
    assert o["outputs_by_tool"] == {"bash": {"count": 1, "bytes": 50}, "grep": {"count": 1, "bytes": 20}}
    assert o["sessions_over_budget"] == 0
    assert o["per_session_median"]["reads"] == 3.0 and o["per_session_median"]["reread_fraction"] == 0.2


def test_budget_and_one_ratio_are_used():
    assert stats(hand_trace(), tokens=3.8)["overall"]["unique_tokens"] == pytest.approx(800 / 3.8)
    o = stats(hand_trace(), budget_tokens=100, tokens=2.0)
    assert o["sessions"]["budget_ratio"].tolist() == [pytest.approx(3.5), pytest.approx(0.5)]
    assert o["overall"]["sessions_over_budget"] == 1 and o["overall"]["unique_tokens"] == 400
    with pytest.raises(ValueError, match="must be > 0"):
        stats(hand_trace(), budget_tokens=0)


def test_result_does_not_depend_on_dtypes_or_category_order(result):
    plain = hand_trace().astype({"session": str, "path": str, "op": str, "arm": str})
    shuffled = hand_trace()
    shuffled["path"] = shuffled["path"].cat.reorder_categories(shuffled["path"].cat.categories[::-1])
    for other in (stats(plain), stats(shuffled)):
        pd.testing.assert_frame_equal(other["sessions"], result["sessions"])
        assert other["overall"] == result["overall"]


def test_arms_are_counted_per_session():
    df = hand_trace()
    df["arm"] = pd.Categorical(["main", "arm1", "main", "main", "arm1", "main", "main", "main", "main", "main"])
    s = stats(validate(df))
    assert s["sessions"]["arms"].tolist() == [2, 1] and s["overall"]["arms"] == 2


def _brute(session: list[int], path: list[int]) -> tuple[list[int], list[int]]:
    dist, at = [], []
    for j in range(len(path)):
        earlier = [i for i in range(j) if session[i] == session[j] and path[i] == path[j]]
        if earlier:
            at.append(j)
            dist.append(len(set(path[earlier[-1] + 1:j])))
    return dist, at


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6)), max_size=80))
def test_reuse_distance_matches_a_brute_force(events):
    events = sorted(events, key=lambda e: e[0])  # sessions contiguous, order within kept
    session = [s for s, _ in events]
    path = [p for _, p in events]
    dist, at = reuse_distances(np.asarray(session, dtype=np.int64), np.asarray(path, dtype=np.int64))
    assert (dist.tolist(), at.tolist()) == _brute(session, path)


def test_reuse_distance_on_a_long_session_matches_a_brute_force():
    # over a thousand re-accesses in one session, with sessions of both sizes around it
    rng = np.random.default_rng(5)
    session = np.repeat([0, 1, 2], [40, 3000, 25])
    path = rng.zipf(1.3, len(session)) % 200
    dist, at = reuse_distances(session, path)
    assert len(at) > 2000
    expected = _brute(session.tolist(), path.tolist())
    assert (dist.tolist(), at.tolist()) == expected


def test_summary_and_compare(result):
    rows = dict(summary(result))
    assert rows["events"] == 10 and rows["re-read fraction"] == pytest.approx(1 / 3)
    only_s2 = hand_trace()
    only_s2 = validate(only_s2[only_s2["session"] == "s2"].reset_index(drop=True))
    table = compare(result, stats(only_s2), labels=("all", "s2"))
    assert list(table.columns) == ["all", "s2", "s2/all"]
    assert table.loc["events", "all"] == 10 and table.loc["events", "s2"] == 3
    assert table.loc["events", "s2/all"] == pytest.approx(0.3)
    assert table.loc["sessions over budget", "s2/all"] is None  # 0 in A: no ratio


# ----- the shape of a turn ---------------------------------------------------------------------------

def test_turn_shape_of_the_hand_trace(result):
    # calls per turn: s1 [1, 1, 1, 1, 2, 1] (the edit and c.py share turn 4), s2 [1, 1, 1]
    overall = result["overall"]
    assert overall["turn_calls"] == {"turns": 9, "median": 1.0, "p99": pytest.approx(1.92), "max": 2}
    # bytes: 100, 200, 50, 100, 450, 200 | 80, 80, 20; sorted the p99 lies 0.92 of the way from 200 to 450
    assert overall["turn_tool_bytes"] == {"turns": 9, "median": 100.0, "p99": pytest.approx(430.0), "max": 450}
    assert overall["truncated"] == 0   # no truncated column: nothing cut
    rows = dict(summary(result))
    assert (rows["tool calls per turn, max"], rows["tool bytes per turn, max"]) == (2, 450)
    assert rows["tool calls per turn, p99"] == pytest.approx(1.92)


def test_turns_are_counted_per_arm_without_pinned_content_and_cuts_are_counted():
    rows = [  # session, turn, op, path, size_bytes, arm, truncated
        ("s", 0, "message", "msg://user/1", 1000, "main", False),     # no tool call: not a turn's call
        ("s", 0, "read", "a.py", 10, "main", False),
        ("s", 0, "output", "tool://bash/1", 20, "main", False),       # main's turn 0: 2 calls, 30 bytes
        ("s", 0, "read", "b.py", 30, "arm1", False),                  # arm1's turn 0: 1 call, 30 bytes
        ("s", 1, "call", "call://bash/2", 500, "main", False),
        ("s", 1, "output", "tool://bash/2", 30_000, "main", True),    # cut at the cap: 1 call, 30,000 bytes
        ("s", 2, "message", "msg://assistant/1", 80, "main", False),  # a turn without a tool call
    ]
    df = pd.DataFrame(rows, columns=["session", "turn", "op", "path", "size_bytes", "arm", "truncated"])
    overall = stats(validate(df.assign(ts_ms=df["turn"] * 1000)))["overall"]
    # calls [2, 1, 1]: the p99 lies 0.98 of the way from 1 to 2; bytes [30, 30, 30,000]
    assert overall["turn_calls"] == {"turns": 3, "median": 1.0, "p99": pytest.approx(1.98), "max": 2}
    assert overall["turn_tool_bytes"] == {"turns": 3, "median": 30.0, "p99": pytest.approx(30 + 0.98 * 29_970),
                                          "max": 30_000}
    assert overall["truncated"] == 1


def test_compare_holds_a_trace_s_turns_against_a_preset_s(result, tmp_path, capsys):
    from ctxbench.traces.io import save

    walk = generate("file-walk", sessions=2, seed=1, parallel=1.0, turn_calls_max=0, turn_bytes_max=0)
    table = compare(result, stats(walk), labels=("mine", "walk"))
    assert table.loc["tool calls per turn, max", "mine"] == 2
    assert table.loc["tool calls per turn, max", "walk"] == stats(walk)["overall"]["turn_calls"]["max"] > 8
    save(hand_trace(), tmp_path / "mine.csv")
    save(walk, tmp_path / "walk.parquet")
    assert main(["stats", "--compare", str(tmp_path / "mine.csv"), str(tmp_path / "walk.parquet"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["a"]["turn_calls"]["max"] == 2 and shown["b"]["turn_calls"]["max"] > 8
    assert shown["a"]["turn_tool_bytes"]["max"] == 450


# ----- the whole window -----------------------------------------------------------------------------

#: Bytes per token chosen so that every cost is a whole number: the reference (code) is 2 bytes a token.
RATIOS = TokenRatios({"code": 2.0, "output": 2.0, "prose": 4.0, "thinking": 1.0, "json": 4.0, "overhead": 2.0})


def window_trace() -> pd.DataFrame:
    """Two arms of one session and a session of files only; every window figure is worked out below."""
    rows = [  # session, turn, op, path, size_bytes, arm        tokens; main's window at the turn's end
        ("s1", 0, "overhead", "overhead://system", 100_000, "main"),  # 50,000
        ("s1", 0, "message", "msg://user/1", 4_000, "main"),          # 1,000
        ("s1", 0, "call", "call://read/1", 400, "main"),              # 100
        ("s1", 0, "read", "a.py", 40_000, "main"),                    # 20,000; 71,100
        ("s1", 1, "message", "msg://thinking/1", 30_000, "main"),     # 30,000
        ("s1", 1, "call", "call://bash/1", 800, "main"),              # 200
        ("s1", 1, "output", "tool://bash/1", 60_000, "main"),         # 30,000; 131,300: 100K after 2 calls
        ("s1", 2, "call", "call://read/2", 400, "main"),              # 100
        ("s1", 2, "read", "a.py", 40_000, "main"),                    # a re-read adds nothing; 131,400
        ("s1", 3, "call", "call://edit/1", 8_000, "main"),            # 2,000
        ("s1", 3, "edit", "a.py", 20_000, "main"),                    # a.py 20,000 -> 10,000; 123,400
        ("s1", 4, "call", "call://write/1", 120_000, "main"),         # 30,000
        ("s1", 4, "write", "b.py", 100_000, "main"),                  # 50,000; 203,400: 167K and 200K after 5
        ("s1", 5, "overhead", "overhead://system", 100_000, "arm1"),  # arm1's own window: 50,000
        ("s1", 5, "call", "call://read/3", 400, "arm1"),              # 100
        ("s1", 5, "read", "a.py", 20_000, "arm1"),                    # 10,000; 60,100
        ("s2", 0, "read", "x.py", 1_000, "main"),                     # 500
        ("s2", 1, "output", "tool://grep/1", 200, "main"),            # 100; 600
    ]
    df = pd.DataFrame(rows, columns=["session", "turn", "op", "path", "size_bytes", "arm"])
    return validate(df.assign(ts_ms=df["turn"] * 1000)[["session", "turn", "ts_ms", "op", "path", "size_bytes",
                                                          "arm"]])


@pytest.fixture(scope="module")
def window():
    return stats(window_trace(), tokens=RATIOS)["window"]


def test_window_per_arm(window):
    w = window["sessions"].set_index(["session", "arm"])
    main, arm1, s2 = w.loc[("s1", "main")], w.loc[("s1", "arm1")], w.loc[("s2", "main")]
    assert list(w.index) == [("s1", "main"), ("s1", "arm1"), ("s2", "main")]
    assert (main["tool_calls"], arm1["tool_calls"], s2["tool_calls"]) == (5, 1, 2)
    assert (main["window_tokens"], main["peak_tokens"], main["pinned_tokens"]) == (203_400, 203_400, 113_400)
    assert (arm1["window_tokens"], arm1["pinned_tokens"], s2["window_tokens"], s2["pinned_tokens"]) == \
        (60_100, 50_100, 600, 0)
    # growth after each tool call from the second: 60,200, 100, -8,000, 80,000
    assert main["tokens_per_call_median"] == 30_150 and main["tokens_per_call_p90"] == pytest.approx(74_060)
    assert main["tokens_per_call_mean"] == 33_075
    assert np.isnan(arm1["tokens_per_call_median"]) and s2["tokens_per_call_median"] == 100
    assert (main["calls_to_100k"], main["calls_to_167k"], main["calls_to_200k"]) == (2, 5, 5)
    assert arm1[["calls_to_100k", "calls_to_167k", "calls_to_200k"]].isna().all()
    assert main[[f"{kind}_tokens" for kind in KINDS]].tolist() == [60_000, 30_000, 1_000, 30_000, 32_400, 50_000]
    assert arm1[[f"{kind}_tokens" for kind in KINDS]].tolist() == [10_000, 0, 0, 0, 100, 50_000]


def test_window_overall(window):
    o = window["overall"]
    assert o["arms"] == 3 and o["bytes_per_token"] == RATIOS.to_dict()
    by_kind = {kind: (row["events"], row["bytes"], row["tokens"]) for kind, row in o["by_kind"].items()}
    assert by_kind == {"code": (6, 141_000, 70_500), "output": (2, 60_200, 30_100), "prose": (1, 4_000, 1_000),
                       "thinking": (1, 30_000, 30_000), "json": (6, 130_000, 32_500),
                       "overhead": (2, 200_000, 100_000)}
    assert o["by_kind"]["code"]["share"] == pytest.approx(70_500 / 264_100)
    assert sum(row["share"] for row in o["by_kind"].values()) == pytest.approx(1.0)
    # growth pooled over arms: -8,000, 100, 100, 60,200, 80,000
    assert o["tokens_per_call"] == {"median": 100.0, "p90": pytest.approx(72_080), "mean": 26_480.0}
    assert o["calls_to"]["100000"] == {"arms": 1, "median": 2.0, "min": 2.0, "max": 2.0}
    assert o["calls_to"]["167000"]["median"] == 5.0 and o["calls_to"]["200000"]["arms"] == 1
    assert o["peak_tokens"] == {"arms": 3, "median": 60_100.0, "min": 600.0, "max": 203_400.0}


def test_file_figures_leave_the_pinned_content_out():
    s1 = stats(window_trace())["sessions"].set_index("session").loc["s1"]
    assert (s1["events"], s1["turns"], s1["arms"]) == (16, 6, 2)
    assert (s1["distinct_paths"], s1["unique_bytes"], s1["reads"], s1["rereads"]) == (3, 200_000, 3, 2)
    assert (s1["reuse_median"], s1["output_bytes_share"]) == (1.0, 0.3)  # a.py: bash between, nothing, b.py
    overall = stats(window_trace())["overall"]
    assert overall["distinct_paths"] == 5 and overall["unique_bytes"] == 201_200
    assert overall["events_by_op"] == {"read": 4, "edit": 1, "write": 1, "output": 2, "message": 2, "call": 6,
                                       "overhead": 2}
    assert overall["reuse_distance"]["histogram"]["0"] == 1 and overall["reuse_distance"]["count"] == 3


def test_the_kind_column_and_one_ratio_change_the_window():
    df = window_trace()
    df["kind"] = pd.Categorical([""] * len(df), categories=("",) + KINDS)
    df.loc[df["path"] == "call://write/1", "kind"] = "code"  # a write's content is code: 60,000 tokens
    main = stats(df, tokens=RATIOS)["window"]["sessions"].iloc[0]
    assert main["json_tokens"] == 2_400 and main["code_tokens"] == 120_000 and main["window_tokens"] == 233_400
    uniform = stats(window_trace(), tokens=4.0)["window"]["sessions"].iloc[0]
    assert uniform["window_tokens"] == (100_000 + 4_000 + 30_000 + 9_600 + 20_000 + 60_000 + 100_000 + 120_000) / 4


def test_the_window_peak_is_the_engine_s_without_a_budget():
    trace = generate("parallel-hubs", sessions=2, seed=3, tool_calls=80)
    window = stats(trace)["window"]["sessions"].set_index(["session", "arm"])
    for st in split_sessions(trace):
        result = replay_session(st, "lru?max_entries=none", ContextBudget(max_bytes=2**50))
        for arm, log in result.arm_logs.items():
            peak = int((log.columns["turn_bytes"] + log.columns["pinned_bytes"]).max())
            assert peak / DEFAULT_TOKENS.reference == pytest.approx(window.loc[(st.session, arm), "peak_tokens"])


def test_compare_shows_the_window_and_reads_results_without_it():
    rows = dict(summary(stats(window_trace(), tokens=RATIOS)))
    assert rows["window: peak tokens, max"] == 203_400 and rows["window: tool calls to 167K tokens, median"] == 5
    old = {"overall": stats(window_trace())["overall"]}  # a result from before the window
    table = compare(old, stats(window_trace(), tokens=RATIOS))
    assert table.loc["window: json share", "A"] is None and table.loc["window: json share", "B/A"] is None
    assert table.loc["reads", "B/A"] == 1.0


def test_the_command_shows_the_window_and_one_ratio_counts_everything(tmp_path, capsys):
    path = tmp_path / "w.csv"
    window_trace().to_csv(path, index=False)
    assert main(["stats", str(path)]) == 0
    text = capsys.readouterr().out
    for phrase in ("whole window by content kind", "tool calls to 167K tokens", "whole window per arm", "arm1"):
        assert phrase in text, phrase
    assert main(["stats", str(path), "--json", "--bytes-per-token", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["window"]["overall"]["bytes_per_token"].values()) == {2.0}
    assert doc["overall"]["unique_tokens"] == doc["overall"]["unique_bytes"] / 2
    main_arm = doc["window"]["sessions"][0]
    assert (main_arm["arm"], main_arm["window_tokens"], main_arm["calls_to_100k"]) == ("main", 221_800, 2)  # 443,600 bytes at 2 a token
    assert doc["window"]["sessions"][1]["calls_to_100k"] is None
    assert main(["stats", str(path), "--json"]) == 0  # unique tokens and the window at the calibrated ratios
    doc = json.loads(capsys.readouterr().out)
    assert doc["overall"]["bytes_per_token"] == doc["window"]["overall"]["bytes_per_token"] == DEFAULT_TOKENS.ratios


# ----- a trace read in chunks ----------------------------------------------------------------------

def _figures(result: dict) -> tuple[str, str]:
    from ctxbench.sim.cli.commands.stats import _jsonable

    return json.dumps(_jsonable(result["overall"])), json.dumps(_jsonable(result["window"]["overall"]))


@pytest.mark.parametrize("preset, sessions", [("mixed", 5), ("parallel-hubs", 3), ("claude-code-like", 4)])
def test_a_trace_read_in_chunks_has_the_figures_of_the_whole_frame(tmp_path, preset, sessions):
    from ctxbench.traces.io import open_trace, save

    trace = generate(preset, sessions=sessions, seed=3)
    save(trace, tmp_path / "t.parquet")
    whole = stats(trace)
    for rows in (1, 900):   # a chunk per session; two or three sessions a chunk
        chunked = stats(open_trace(tmp_path / "t.parquet", chunk_rows=rows))
        overall, window = _figures(chunked)
        assert overall == _figures(whole)[0]
        # the pooled mean growth is the exact sum's, correctly rounded; the rest as numpy gives it
        expected, got = json.loads(_figures(whole)[1]), json.loads(window)
        assert got.pop("tokens_per_call")["mean"] == pytest.approx(expected.pop("tokens_per_call")["mean"], rel=1e-15)
        assert got == expected
        pd.testing.assert_frame_equal(chunked["sessions"], whole["sessions"])
        pd.testing.assert_frame_equal(chunked["window"]["sessions"], whole["window"]["sessions"])


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-2**40, 2**40), min_size=1, max_size=60), parts=st.integers(1, 4),
       scale=st.sampled_from([None, 2.07, 3.8]))
def test_order_statistics_from_counts_are_numpys(values, parts, scale):
    from ctxbench.traces.stats import _Counts

    counts = _Counts()
    array = np.array(values, dtype=np.int64)
    for piece in np.array_split(array, parts):
        counts.add(piece)
    expected = np.percentile(array / scale if scale else array, [50, 90])
    assert counts.percentiles((50, 90), scale=scale) == list(expected)
    assert counts.total == sum(values) and counts.n == len(values) and counts.max() == max(values)
