"""Fidelity: simulated occupancy against real input tokens, on a hand-worked trace, the CLI and real sessions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import main
from sim.errors import InputError
from sim.analysis.fidelity import aligned_turns, fidelity
from traces.io import save

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

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
    row = fidelity(hand_trace(), bytes_per_token=1).iloc[0]
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
    assert main(["fidelity", str(path), "--bytes-per-token", "1"]) == 0
    text = capsys.readouterr().out
    assert "session s" in text and "0.992" in text and "955" in text   # pearson, overhead 638950/669
    assert main(["fidelity", str(path), "--bytes-per-token", "1", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["turns_compared"], row["segments"]) == (6, 2)
    assert row["spearman"] == pytest.approx(65 / 68)


def test_cli_without_usage_exits_2(tmp_path, capsys):
    path = save(hand_trace().drop(columns=["usage_input_tokens", "compact_before"]), tmp_path / "plain.csv")
    assert main(["fidelity", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxbench fidelity: error: the trace has no 'usage_input_tokens' column")
    assert "\n" not in err


# Measured on the two real sessions (main arm, unbounded, 3.8 bytes/token): turns compared, and
# Pearson, Spearman, median sim/real, overhead tokens, slope as measured.
REAL = {
    "258c7280-ae70-4798-800f-63464d01a85d": {False: (149, 0.9776, 0.9745, 0.2484, 31218, 2.767),
                                             True: (152, 0.9788, 0.9766, 0.2583, 30289, 2.662)},
    "8463c716-a2ea-4c14-9efa-87158ebd9f20": {False: (141, 0.9789, 0.9829, 0.3184, 36645, 2.221),
                                             True: (143, 0.9888, 0.9965, 0.3664, 37992, 1.903)},
}


@pytest.fixture(scope="module", params=[False, True], ids=["tools", "messages"])
def real(request):
    from traces.importers import import_paths

    if not (DATA / "claude-code").is_dir():
        pytest.skip("../shared/data is absent")
    paths = [p for s in REAL for p in (DATA / "claude-code" / f"{s}.jsonl", DATA / "claude-code" / s)]
    df, _ = import_paths("claude-code", paths, include_messages=request.param)
    return request.param, df


@pytest.mark.shared_data
def test_real_sessions_figures(real):
    include_messages, df = real
    rows = fidelity(df, bytes_per_token=3.8).set_index(["session", "arm"])
    for session, by_mode in REAL.items():
        n, pearson, spearman, ratio, overhead, slope = by_mode[include_messages]
        row = rows.loc[(session, "main")]
        assert (row["turns_compared"], row["segments"], row["evictions"]) == (n, 2, 0)
        assert row["pearson"] == pytest.approx(pearson, abs=5e-4)
        assert row["spearman"] == pytest.approx(spearman, abs=5e-4)
        assert row["median_ratio"] == pytest.approx(ratio, abs=5e-4)
        assert row["intercept_tokens"] == pytest.approx(overhead, abs=1)
        assert row["slope"] == pytest.approx(slope, abs=1e-3)
        assert pearson > 0.97 and 0.2 < ratio < 0.4 and 25_000 < overhead < 40_000
    # subagents are compared on their own turns
    assert rows.loc[("258c7280-ae70-4798-800f-63464d01a85d", "a881341"), "turns_compared"] == \
        (3 if include_messages else 2)
    assert rows.loc[("8463c716-a2ea-4c14-9efa-87158ebd9f20", "a7be2f0"), "turns_compared"] == \
        (13 if include_messages else 12)


@pytest.mark.shared_data
def test_real_sessions_need_the_compaction_segments(real):
    _, df = real
    continuous = fidelity(df.assign(compact_before=False)).set_index(["session", "arm"])
    for session in REAL:
        assert continuous.loc[(session, "main"), "pearson"] < 0.3   # measured -0.04 to 0.27
