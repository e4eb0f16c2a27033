"""Trace statistics on a hand-worked trace, reuse distances against a brute force, comparisons."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.schema import validate
from traces.stats import compare, reuse_distances, stats, summary


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
    assert s1["unique_tokens"] == pytest.approx(700 / 3.8)
    assert s1["budget_ratio"] == pytest.approx(700 / 3.8 / 200_000)
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
    assert o["unique_bytes"] == 800 and o["unique_tokens"] == pytest.approx(800 / 3.8)
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


def test_budget_and_bytes_per_token_are_used():
    o = stats(hand_trace(), budget_tokens=100, bytes_per_token=2.0)
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
