"""mini-swe-agent importer: bash commands mapped to reads, writes, edits and outputs; usage per call; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from importer_checks import file_events, through_every_command
from ctxbench.sim.cli import main
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import detect, import_paths
from ctxbench.traces.importers._shell import classify

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "mini-swe-agent"
FIXTURE = FIXTURES / "fixture__app-1.traj.json"
WHOLE_FILE = len(("<returncode>0</returncode>\n<output>\n" + "def f():\n    return 1\n" * 20 + "</output>").encode())


@pytest.fixture(scope="module")
def imported():
    return import_paths("mini-swe-agent", [FIXTURES], conversation=False)


def test_each_command_maps_to_the_file_event_it_unambiguously_is(imported):
    df, _ = imported
    assert file_events(df) == [
        (0, "read", "/repo/src/app.py", WHOLE_FILE),               # cd /repo && cat src/app.py
        (1, "read", "/repo/src/app.py#L3-6", 89),                  # sed -n '3,6p'
        (1, "read", "/repo/src/app.py#L10-12", 97),                # nl -ba | sed -n '10,12p'
        (2, "read", "/repo/tests/test_app.py#L1-5", 79),           # head -n 5, relative to the last cd
        (3, "write", "/repo/repro.py", len(b"import app\nprint(app.f())")),   # the here-document
        (4, "edit", "/repo/src/app.py", WHOLE_FILE + len(b"def g():\n    return 2")),   # appended: estimated
        (4, "edit", "/repo/src/app.py", WHOLE_FILE + len(b"def g():\n    return 2")),   # sed -i: size kept
        (5, "output", "tool://bash/1", 67),                        # grep: a search, not the file
        (5, "output", "tool://bash/2", 92),                        # a failed command
        (6, "output", "tool://bash/3", 222),                       # a read the agent cut to head and tail
        (7, "read", "/repo/setup.py", 82),                         # the text format's fenced block
    ]


def test_the_report_counts_what_was_tolerated(imported):
    _, report = imported
    notes = report.notes()
    assert notes["estimated_size"] == 2 and notes["failed_call"] == 1 and notes["truncated_output"] == 1
    assert notes["orphan_result"] == 1 and notes["no_result"] == 1     # the last call had no answer
    assert report.malformed == 1                                       # the record that is not a message
    assert list(report.sessions) == ["fixture__app-1"]


def test_the_conversation_and_each_calls_usage():
    df, _ = import_paths("mini-swe-agent", [FIXTURE], conversation=True)
    ops = df["op"].astype(str)
    assert (ops == "call").sum() == 12 and (ops == "overhead").sum() == 1
    assert df.loc[ops == "message", "path"].astype(str).str.startswith("msg://thinking/").sum() == 1
    usage = df.groupby("turn")["usage_input_tokens"].max().tolist()
    assert usage == [0, 1200, 1800, 2100, 2300, 2500, 2700, 2900, 3100, 3300]
    # the overhead is what the first call's 1,200 tokens hold beyond the task before it
    overhead = int(df.loc[ops == "overhead", "size_bytes"].iloc[0])
    assert 2_800 < overhead < 3_400
    assert df["ts_ms"].is_monotonic_increasing and df["ts_ms"].max() == 1_016_000


@pytest.mark.parametrize("command, expected", [
    ("cat a.py", ("read", "a.py", None, None)),
    ("cat a.py b.py", ("output", "", None, None)),
    ("cat a.py | grep x", ("output", "", None, None)),
    ("nl a.py", ("read", "a.py", None, None)),
    ("head -20 a.py", ("read", "a.py", 1, 20)),
    ("head a.py", ("read", "a.py", 1, 10)),
    ("tail -20 a.py", ("output", "", None, None)),
    ("sed -n '7p' a.py", ("read", "a.py", 7, 7)),
    ("sed -n '9,3p' a.py", ("output", "", None, None)),
    ("sed -n '1,5p' a.py 2>&1", ("read", "a.py", 1, 5)),
    ("sed -i 's/a/b/' a.py", ("sed-edit", "a.py", None, None)),
    ("cat a.py > b.py", ("output", "", None, None)),
    ("python -c 'print(1)'", ("output", "", None, None)),
    ("cat 'unbalanced", ("output", "", None, None)),
])
def test_classify(command, expected):
    assert classify(command)[:4] == expected


def test_bundled_sessions_and_auto_detection(tmp_path):
    assert detect(FIXTURE) == "mini-swe-agent"
    assert through_every_command(FIXTURES, tmp_path, "claude-code") == [0, 0, 0, 0]


def test_not_a_trajectory_is_an_error_naming_the_file(tmp_path):
    bad = tmp_path / "x.traj.json"
    bad.write_text(json.dumps({"messages": "no", "trajectory_format": "mini-swe-agent-1"}))
    with pytest.raises(TraceError, match="x.traj.json: not a mini-swe-agent trajectory"):
        import_paths("mini-swe-agent", [bad])


def test_a_truncated_file_is_refused_and_nothing_is_written(tmp_path, capsys):
    cut = tmp_path / "cut.traj.json"
    cut.write_text(FIXTURE.read_text()[:2_000])
    out = tmp_path / "m.parquet"
    assert main(["import", "mini-swe-agent", str(cut), "--out", str(out)]) == 2
    assert "cut.traj.json" in capsys.readouterr().err and not out.exists()


def test_a_command_that_is_not_text_is_one_malformed_record(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["messages"][2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": 7})
    bad = tmp_path / "b.traj.json"
    bad.write_text(json.dumps(doc))
    df, report = import_paths("mini-swe-agent", [bad], conversation=False)
    assert report.malformed == 2
    assert not any(op == "read" and path == "/repo/src/app.py" for _, op, path, _ in file_events(df))
    assert ("tests/test_app.py#L1-5" in set(df["path"].astype(str)))   # no cd seen: the path stays relative


@pytest.mark.real_sessions
def test_each_bundled_trajectory_replays_within_5_percent_of_its_recorded_input_tokens():
    from ctxbench.sim.analysis.fidelity import fidelity
    from real_data import REAL_DATA

    rows = fidelity(import_paths("mini-swe-agent", [REAL_DATA / "mini-swe-agent"])[0]).set_index("session")
    assert len(rows) == 2 and (rows["token_ratios"] == "deepseek").all()
    # django-13265 1.019, sqlfluff-1733 0.980 (docs/design.md §7): the whole window, call by call
    assert rows["median_ratio"].between(0.95, 1.05).all(), rows["median_ratio"].to_dict()
    assert (rows["pearson"] >= 0.999).all()
