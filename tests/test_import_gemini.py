"""Gemini CLI importer: each response a turn, read_file/write_file/replace and shell commands as file events, usage per response."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from importer_checks import through_every_command
from ctxbench.sim.cli import main
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import ImportReport, detect, import_paths
from ctxbench.traces.importers.gemini import read, response_text

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "gemini"
CHATS = FIXTURES / "8876362f" / "chats"
RECORDING = CHATS / "session-2025-12-03T06-35-477739d0.json"
LINES = CHATS / "session-2025-12-04T09-00-5f1e2d3c.jsonl"
FIRST, SECOND = "477739d0-1b78-4aa7-9116-02d08c952344", "5f1e2d3c-0000-4000-8000-000000000001"


def _shell(command: str, output: str, code: int) -> int:
    return len(f"Command: {command}\nDirectory: /repo\nOutput: {output}\nError: (none)\nExit Code: {code}\nSignal: (none)\n"
               "Background PIDs: (none)\nProcess Group PGID: 4242".encode())


def _files(df) -> list[tuple[str, int, str, str, int]]:
    picked = df[df["op"].astype(str).isin(("read", "edit", "write", "output"))]
    return [(str(s)[:8], int(t), str(o), str(p), int(b)) for s, t, o, p, b in
            picked[["session", "turn", "op", "path", "size_bytes"]].itertuples(index=False)]


@pytest.fixture(scope="module")
def imported():
    return import_paths("gemini", [FIXTURES], conversation=False)


def test_each_tool_call_maps_to_the_file_event_it_is(imported):
    df, _ = imported
    app = len(b"def f():\n    return 1\n")
    assert _files(df) == [
        ("477739d0", 0, "read", "/repo/app.py", app),
        ("477739d0", 0, "read", "/repo/big.py#L101-150", len(b"x = 1\n" * 50)),         # offset 100 is line 101
        ("477739d0", 1, "edit", "/repo/app.py", app + 1),                              # "return 1" -> "return 22"
        ("477739d0", 2, "output", "tool://run_shell_command/1", _shell("pytest -q", "1 failed", 1)),   # exit 1
        ("477739d0", 3, "read", "/repo/tests/test_app.py", _shell("cat tests/test_app.py", "import app", 0)),
        ("477739d0", 4, "write", "/repo/notes.md", len(b"# Notes\n")),
        ("477739d0", 4, "output", "tool://google_web_search/1", 75),
        ("477739d0", 4, "output", "tool://read_file/1", len(b"File not found: /repo/missing.py")),   # status error
        ("477739d0", 5, "write", "/repo/helper.py", len(b"def helper():\n    pass\n")),   # replace with no old string
        ("5f1e2d3c", 0, "read", "/repo/setup.py", len(b"from setuptools import setup\nsetup()\n")),   # the later line of g1
    ]


def test_the_report_counts_what_was_tolerated(imported):
    _, report = imported
    notes = report.notes()
    assert notes["failed_call"] == 2 and notes["estimated_size"] == 1 and notes["no_result"] == 1
    assert report.malformed == 2                     # a message that is not an object, a line with no type
    assert sorted(report.sessions) == [FIRST, SECOND]


def test_the_conversation_usage_and_web_results_as_prose():
    df, _ = import_paths("gemini", [RECORDING], conversation=True)
    ops = df["op"].astype(str)
    assert df.groupby("turn")["usage_input_tokens"].max().tolist() == [0, 8000, 8300, 8500, 8800, 9000, 9500, 0]
    assert df.loc[ops == "message", "path"].astype(str).tolist() == [
        "msg://user/1", "msg://thinking/1", "msg://user/2", "msg://assistant/1", "msg://assistant/2"]   # no info message
    assert (ops == "call").sum() == 10 and (ops == "overhead").sum() == 1
    web = df[df["path"].astype(str) == "tool://google_web_search/1"]
    assert web["kind"].astype(str).tolist() == ["prose"]
    assert not df["compact_before"].any()


def test_response_text():
    assert response_text([{"functionResponse": {"response": {"error": "boom"}}}]) == "boom"
    assert response_text([{"functionResponse": {"response": {"n": 1}}}, {"text": "!"}]) == '{"n": 1}!'
    assert response_text("plain") == "plain" and response_text(None) == ""


def test_a_recording_works_through_every_command(tmp_path):
    assert detect(RECORDING) == "gemini" and detect(LINES) == "gemini"
    assert through_every_command(FIXTURES, tmp_path, "gemini-cli") == [0, 0, 0, 0]


def test_files_beside_the_chats_are_ignored_and_a_bad_recording_is_an_error(tmp_path):
    (tmp_path / "logs.json").write_text(json.dumps([{"sessionId": "x", "message": "hi"}]))
    (tmp_path / "session-bad.json").write_text(json.dumps({"sessionId": "x", "messages": "no"}))
    report = ImportReport("gemini")
    with pytest.raises(TraceError, match="session-bad.json: not a Gemini CLI chat recording"):
        list(read(sorted(tmp_path.iterdir()), conversation=False, report=report))
    assert report.ignored == [str(tmp_path / "logs.json")]


def test_a_truncated_recording_is_refused_and_nothing_is_written(tmp_path, capsys):
    cut = tmp_path / "session-cut.json"
    cut.write_text(RECORDING.read_text()[:1_500])
    out = tmp_path / "g.parquet"
    assert main(["import", "gemini", str(cut), "--out", str(out)]) == 2
    assert "session-cut.json" in capsys.readouterr().err and not out.exists()
