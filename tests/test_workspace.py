"""Multi-arm replay: invalidation, claims, thrashing, escalation, determinism."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.sim.analysis.claim_modes import compare_claim_modes, parse_claim_modes
from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.errors import InputError
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.replay import budget_for_tokens, replay_session, split_sessions

COLUMNS = ["session", "turn", "ts_ms", "op", "path", "size_bytes", "arm", "lines_changed"]
BIG = budget_for_tokens(10_000)  # 38,000 bytes: nothing is ever evicted in these traces


def session(rows):
    return split_sessions(pd.DataFrame(rows, columns=COLUMNS))[0]


def replay(rows, mode="disabled", **options):
    return replay_session(session(rows), "lru", BIG, claims=ClaimConfig(mode=mode, **options))


# main reads a.py, arm1 reads a.py, main edits it (5 lines), arm1 edits it without re-reading
# (7 lines), main reads it again.
OVERWRITE = [
    ("s", 0, 0, "read", "a.py", 100, "main", 0),
    ("s", 1, 1_000, "read", "a.py", 100, "arm1", 0),
    ("s", 2, 2_000, "edit", "a.py", 120, "main", 5),
    ("s", 3, 3_000, "edit", "a.py", 130, "arm1", 7),
    ("s", 4, 4_000, "read", "a.py", 130, "main", 0),
]


def test_change_by_one_arm_invalidates_the_other():
    r = replay(OVERWRITE)
    by_arm = {a["arm"]: a for a in r.arms}
    # arm1's edit at turn 3 needs a.py, which main changed at turn 2: invalidation miss (120 bytes).
    assert by_arm["arm1"]["invalidation_misses"] == 1
    assert by_arm["arm1"]["invalidation_bytes"] == 120
    # main's read at turn 4 needs arm1's revision: invalidation miss too.
    assert by_arm["main"]["invalidation_misses"] == 1
    assert by_arm["main"]["compulsory_misses"] == 1
    assert r.row["capacity_misses"] == 0


def test_overwrite_of_unsaved_change_is_a_thrashing_event_with_lines_lost():
    r = replay(OVERWRITE, "disabled")
    assert r.thrashing == [{"path": "a.py", "victim_arm": "main", "overwriter_arm": "arm1",
                            "victim_change_at": 2_000, "overwrite_at": 3_000, "lines_lost": 5}]
    by_arm = {a["arm"]: a for a in r.arms}
    assert by_arm["main"]["lines_lost"] == 5
    assert by_arm["arm1"]["lines_overwritten"] == 5
    assert r.row["lines_lost"] == 5


def test_reading_before_changing_merges_instead_of_losing():
    rows = OVERWRITE[:3] + [("s", 3, 2_500, "read", "a.py", 120, "arm1", 0),
                            ("s", 4, 3_000, "edit", "a.py", 130, "arm1", 7)]
    assert replay(rows).row["lines_lost"] == 0


def test_saved_change_cannot_be_lost():
    rows = [(s, t, ts + (400_000 if t >= 3 else 0), op, p, b, a, n) for s, t, ts, op, p, b, a, n in OVERWRITE]
    assert replay(rows, settle_ms=300_000).row["lines_lost"] == 0


def test_strict_mode_blocks_the_second_writer_until_the_claim_expires():
    r = replay(OVERWRITE, "strict", settle_ms=10_000)
    assert r.row["lines_lost"] == 0
    by_arm = {a["arm"]: a for a in r.arms}
    # main's claim runs from 2,000 to 12,000; arm1 asks at 3,000 and waits 9,000 ms, one turn.
    assert by_arm["arm1"]["blocked_ms"] == 9_000
    assert by_arm["arm1"]["blocked_turns"] == 1
    assert by_arm["main"]["blocked_turns"] == 0


def test_strict_handoff_gives_the_change_to_the_holder():
    r = replay(OVERWRITE, "strict", on_conflict="handoff")
    by_arm = {a["arm"]: a for a in r.arms}
    assert by_arm["arm1"]["handoffs"] == 1
    assert r.row["lines_lost"] == 0 and r.row["blocked_ms"] == 0


def test_priority_wins_a_contested_claim():
    r = replay(OVERWRITE, "strict", priorities=(("arm1", 1),))
    assert r.row["blocked_turns"] == 0 and r.row["lines_lost"] == 0


def test_directory_claim_hands_changes_over_but_allows_reads():
    rows = [("s", 0, 0, "read", "src/a.py", 10, "main", 0),
            ("s", 1, 10, "read", "src/a.py", 10, "arm1", 0),
            ("s", 2, 20, "write", "src/a.py", 30, "arm1", 3)]
    r = replay(rows, "strict", directory_claims=(("main", "src/*"),))
    by_arm = {a["arm"]: a for a in r.arms}
    assert by_arm["arm1"]["handoffs"] == 1
    assert by_arm["arm1"]["compulsory_misses"] == 1  # its read went through


def _ping_pong(n):
    """Two arms alternately edit one file without reading it: every edit after the first overwrites."""
    rows = []
    for k in range(n):
        arm = "main" if k % 2 == 0 else "arm1"
        rows.append(("s", k, k * 1_000, "edit", "hub.py", 100 + k, arm, 2))
    return rows


def test_lazy_mode_escalates_at_the_threshold():
    r = replay(_ping_pong(6), "lazy", thrashing_threshold=2, pause_ms=100)
    steps = [e["step"] for e in r.escalations]
    # overwrite 1: below threshold; 2: notify; 3: enable_claims -> claims stop the rest.
    assert steps == ["notify", "enable_claims"]
    assert r.row["thrashing_events"] == 3
    assert r.row["blocked_turns"] > 0


def test_lazy_without_detection_never_escalates():
    r = replay(_ping_pong(6), "lazy", thrashing_detection=False)
    assert r.escalations == [] and r.row["thrashing_events"] == 5


def test_disabled_counts_but_never_escalates():
    r = replay(_ping_pong(6), "disabled")
    assert r.escalations == [] and r.row["lines_lost"] == 10


def test_pause_arm_after_enable_claims_when_claims_cannot_hold():
    # with settle_ms=0 claims expire at once, so overwrites continue and the ladder reaches pause_arm
    r = replay(_ping_pong(8), "lazy", thrashing_threshold=1, settle_ms=0)
    assert [e["step"] for e in r.escalations][:3] == []  # settle 0: nothing stays unsaved, nothing lost
    r = replay(_ping_pong(8), "lazy", thrashing_threshold=1, settle_ms=500)
    assert r.row["lines_lost"] == 0  # each change settles before the other arm's next edit (1,000 ms later)


def test_bad_claim_config_is_bad_input():
    with pytest.raises(InputError, match="claim mode"):
        ClaimConfig(mode="sometimes")
    with pytest.raises(InputError, match="twice"):
        parse_claim_modes("strict,strict")


arm_rows = st.lists(
    st.tuples(st.sampled_from(["main", "arm1", "arm2"]), st.sampled_from(["read", "edit", "write"]),
              st.sampled_from(["a.py", "b.py", "hub.py"]), st.integers(1, 500), st.integers(0, 9),
              st.integers(0, 120_000)),
    min_size=1, max_size=40)


def _rows(drawn):
    rows, ts = [], 0
    for turn, (arm, op, path, size, lines, gap) in enumerate(drawn):
        ts += gap
        rows.append(("s", turn, ts, op, path, size, arm, lines))
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arm_rows, st.sampled_from(["wait", "handoff"]))
def test_strict_never_loses_lines(drawn, on_conflict):
    r = replay(_rows(drawn), "strict", on_conflict=on_conflict, settle_ms=60_000)
    assert r.row.get("lines_lost", 0) == 0  # single-arm draws have no workspace and lose nothing
    assert r.thrashing == []


@settings(max_examples=20, deadline=None)
@given(arm_rows)
def test_multi_arm_replay_is_deterministic(drawn):
    rows = _rows(drawn)
    a = replay(rows, "lazy", thrashing_threshold=1)
    b = replay(rows, "lazy", thrashing_threshold=1)
    assert a.row["log_hash"] == b.row["log_hash"]
    assert a.thrashing == b.thrashing

    def stable(arm_rows):
        return [{k: v for k, v in row.items() if not k.endswith("_ns")} for row in arm_rows]

    assert stable(a.arms) == stable(b.arms)


def test_grid_compares_claim_modes():
    df = pd.DataFrame(OVERWRITE, columns=COLUMNS)
    grid = run_grid(df, ["lru"], [10_000], workers=1, claims=parse_claim_modes("strict,lazy,disabled"))
    assert list(grid.results["claims"]) == ["strict", "lazy", "disabled"]
    table = compare_claim_modes(grid.arms).set_index("claims")
    assert table.loc["strict", "lines_lost"] == 0
    assert table.loc["disabled", "lines_lost"] == 5
    assert table.loc["strict", "blocked_turns"] == 1
    assert len(grid.thrashing) == 2  # lazy and disabled


def test_context_snapshots_per_arm(tmp_path):
    import json

    from ctxbench.sim.cli import main
    from ctxbench.traces.io import save

    save(pd.DataFrame(OVERWRITE, columns=COLUMNS), tmp_path / "t.csv")
    out = tmp_path / "res"
    assert main(["run", "--traces", str(tmp_path / "t.csv"), "--strategy", "lru", "--budget-tokens", "1000",
                 "--claims", "strict,disabled", "--workers", "1", "--out", str(out), "--bytes-per-token", "3.8"]) == 0
    assert main(["snapshots", str(out), "--out", str(tmp_path / "s.jsonl"), "--arm", "main",
                 "--strategy", "lru"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    disabled = [x for x in lines if x["claims"] == "disabled"]
    # main acts in turns 0, 2, 4; resident bytes 100, 120, then arm1's 130-byte revision
    assert [x["turn"] for x in disabled] == [0, 2, 4]
    assert [x["utilization"] for x in disabled] == [round(b / 3800, 4) for b in (100, 120, 130)]
    assert all(x["files"] == 1 for x in disabled)
    assert main(["snapshots", str(out), "--out", str(tmp_path / "x.jsonl"), "--arm", "nobody"]) == 2
    assert not (tmp_path / "x.jsonl").exists()



def test_max_directories_evicts_least_recently_used_directories():
    from ctxbench.sim.engine.turn_by_turn import TurnByTurnContext
    from ctxbench.strategies.registry import make

    m = TurnByTurnContext(make("lru?max_entries=none"), budget_for_tokens(10_000), max_directories=2)
    m.apply_turn(0, [("read", "src/a.py", 10, 0), ("read", "src/b.py", 10, 1)])
    m.apply_turn(1, [("read", "lib/c.py", 10, 2), ("output", "tool://bash/1", 10, 3)])
    m.apply_turn(2, [("read", "src/a.py", 10, 4)])          # src is recent again; lib is now older
    m.apply_turn(3, [("read", "docs/d.md", 10, 5)])         # a third directory: lib goes
    assert sorted(m.resident_ids()) == ["docs/d.md:0", "src/a.py:0", "src/b.py:0", "tool://bash/1:0"]
    assert m.directory_evictions == 1
    assert m.log.evictions.tolist() == [0, 0, 0, 1]
    m.apply_turn(4, [("read", "lib/c.py", 10, 6)])          # evicted by the directory cap: a capacity miss
    assert m.log.capacity.tolist()[-1] == 1
    with pytest.raises(ValueError, match="max_directories"):
        TurnByTurnContext(make("lru"), BIG, max_directories=0)


def test_run_with_file_and_directory_caps(tmp_path):
    from ctxbench.sim.cli import main
    from ctxbench.traces.io import save

    save(pd.DataFrame(OVERWRITE, columns=COLUMNS), tmp_path / "t.csv")
    out = tmp_path / "res"
    assert main(["run", "--traces", str(tmp_path / "t.csv"), "--strategy", "lru", "--budget-tokens", "1000",
                 "--max-files", "1", "--max-directories", "1", "--workers", "1", "--no-report", "--no-bracket",
                 "--out", str(out)]) == 0
    results = pd.read_parquet(out / "results.parquet")
    assert (results["directory_evictions"] == 0).all()   # a.py lives in one directory
    assert main(["run", "--traces", str(tmp_path / "t.csv"), "--max-directories", "0", "--out", str(out)]) == 2


def test_report_of_a_trace_mixing_single_and_multi_arm_sessions(tmp_path):
    from ctxbench.sim.cli import main
    from ctxbench.traces.io import save

    rows = OVERWRITE + [("t", 0, 0, "read", "b.py", 10, "main", 0)]
    save(pd.DataFrame(rows, columns=COLUMNS), tmp_path / "t.csv")
    out = tmp_path / "res"
    assert main(["run", "--traces", str(tmp_path / "t.csv"), "--strategy", "lru", "fifo", "--budget-tokens", "1000",
                 "--claims", "strict,lazy", "--workers", "1", "--out", str(out)]) == 0
    assert "## Price of purity" in (out / "report.md").read_text()
