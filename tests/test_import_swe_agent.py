"""SWE-agent importer: windowed views and edits, str_replace_editor, creates, outputs, bad records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import import_paths
from ctxbench.traces.importers.swe_agent import STEP_MS

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "swe-agent"


def rows(df, columns=("turn", "op", "path", "lines_changed")):
    picked = df[list(columns)]
    picked = picked.astype({c: str for c in ("op", "path") if c in picked.columns})
    return [tuple(r) for r in picked.itertuples(index=False)]


def observations(name: str) -> list[str]:
    doc = json.loads((FIXTURES / name).read_text())
    if doc.get("trajectory"):
        return [s["observation"] for s in doc["trajectory"] if isinstance(s, dict)]
    return [m["content"][0]["text"] for m in doc["history"] if isinstance(m, dict) and m.get("role") == "tool"]


@pytest.fixture(scope="module")
def imported():
    return import_paths("swe-agent", [FIXTURES], conversation=False)


def session(imported, name):
    df, _ = imported
    return df[df["session"] == name].reset_index(drop=True)


def test_windowed_views_edits_and_creates(imported):
    df = session(imported, "windowed")
    assert rows(df) == [
        (0, "output", "tool://find_file/1", 0),
        (1, "read", "/repo/src/app.py#L1-100", 0),      # relative header resolved against working_dir
        (2, "read", "/repo/src/app.py#L71-150", 0),     # goto
        (3, "read", "/repo/src/app.py#L1-100", 0),      # scroll_up: the same window again
        (4, "edit", "/repo/src/app.py#L1-100", 3),      # edit 5:6 with three new lines
        (5, "output", "tool://edit/1", 0),              # rejected edit
        (6, "write", "/repo/tests/test_app.py", 1),     # create: the whole (1-line) file is shown
        (7, "output", "tool://bash/1", 0),
        (8, "output", "tool://open/1", 0),              # the file was not found
        (9, "output", "tool://submit/1", 0),
    ]
    sizes = [len(o.encode()) for o in observations("windowed.traj")]
    assert list(df["size_bytes"]) == sizes


def test_str_replace_editor_history(imported):
    df = session(imported, "editor_history")
    assert rows(df) == [
        (0, "output", "tool://str_replace_editor/1", 0),   # a directory listing
        (1, "read", "/testbed/pkg/mod.py", 0),
        (2, "read", "/testbed/pkg/mod.py#L3-4", 0),
        (3, "edit", "/testbed/pkg/mod.py", 1),
        (4, "edit", "/testbed/pkg/mod.py", 1),
        (5, "output", "tool://str_replace_editor/2", 0),   # no replacement performed
        (6, "write", "/testbed/reproduce.py", 2),
        (7, "output", "tool://bash/1", 0),
        (8, "output", "tool://submit/1", 0),
    ]
    obs = [len(o.encode()) for o in observations("editor_history.traj")]
    full_view = obs[1]
    assert list(df["size_bytes"]) == [
        obs[0], full_view, obs[2],
        full_view,              # "    return 1" -> "    return 2": same length
        full_view + len("# end"),
        obs[5],
        len("from pkg.mod import f\nprint(f())\n"),  # --file_text
        obs[7], obs[8],
    ]


def test_synthetic_timestamps_one_second_per_step(imported):
    df = session(imported, "windowed")
    assert list(df["ts_ms"]) == [i * STEP_MS for i in range(len(df))]
    _, report = imported
    notes = {Path(f.path).name: f.notes for f in report.files}
    assert notes["windowed.traj"]["synthetic_timestamps"] == 10
    assert notes["windowed.traj"]["failed_call"] == 2
    assert notes["editor_history.traj"]["failed_call"] == 1
    assert notes["editor_history.traj"]["estimated_size"] == 2


def test_malformed_records_are_skipped_and_counted(imported):
    _, report = imported
    found = {Path(f.path).name: (f.malformed, f.malformed_at) for f in report.files}
    assert found == {"windowed.traj": (1, [9]), "editor_history.traj": (1, [16])}


def test_not_a_trajectory_is_an_error_naming_the_file(tmp_path):
    bad = tmp_path / "broken.traj"
    bad.write_text('{"trajectory": [')
    with pytest.raises(TraceError, match="broken.traj: not valid JSON"):
        import_paths("swe-agent", [bad], conversation=False)
    other = tmp_path / "other.traj"
    other.write_text('{"steps": []}')
    with pytest.raises(TraceError, match="other.traj: not a SWE-agent trajectory"):
        import_paths("swe-agent", [other], conversation=False)


@pytest.mark.parametrize("history", [-5, "abc", {"a": 1}])
def test_a_history_that_is_not_a_list_is_one_malformed_record(tmp_path, history):
    traj = tmp_path / "odd.traj"
    traj.write_text(json.dumps({"trajectory": [], "history": history}))
    df, report = import_paths("swe-agent", [traj], conversation=False)
    assert len(df) == 0
    assert (report.files[0].records, report.malformed) == (1, 1)
