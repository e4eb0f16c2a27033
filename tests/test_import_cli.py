"""``ctxbench import``: exit codes, auto detection, the written trace, nothing written on error."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ctxbench.sim.cli import main
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import detect
from ctxbench.traces.io import load

FIXTURES = Path(__file__).parent / "fixtures" / "importers"


def test_import_writes_a_trace_with_metadata(tmp_path, capsys):
    out = tmp_path / "real.parquet"
    assert main(["import", "claude-code", str(FIXTURES / "claude-code"), "--out", str(out), "--no-conversation"]) == 0
    df = load(out)
    assert len(df) == 17
    assert {"usage_input_tokens", "compact_before"} <= set(df.columns)
    assert df.attrs["compactions"][0]["pre_tokens"] == 150000
    text = capsys.readouterr().out
    assert "2 sessions (3 arms) from 3 files" in text
    assert "malformed records skipped: 2" in text
    assert "sess-a.jsonl: 2 (at 18, 38)" in text
    assert "compactions: 1" in text


def test_auto_detects_each_file_by_content(tmp_path, capsys):
    out = tmp_path / "mixed.jsonl"
    assert main(["import", "auto", str(FIXTURES), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out"] == str(out)
    assert sorted(report["sessions"]) == ["0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "477739d0-1b78-4aa7-9116-02d08c952344",
                                          "5f1e2d3c-0000-4000-8000-000000000001", "editor_history", "fixture__app-1",
                                          "proj__repo-1", "proj__repo-2", "sess-a", "sess-b", "session", "windowed"]
    assert {f["format"] for f in report["files"]} == {"claude-code", "codex", "gemini", "swe-agent", "mini-swe-agent", "openhands"}
    assert report["totals"]["events"] == len(load(out))
    assert report["malformed"] == 11      # the mini-swe-agent fixture's record that is not a message, two each of Codex and Gemini


@pytest.mark.parametrize("name, expected", [
    ("claude-code/sess-a.jsonl", "claude-code"),
    ("claude-code/sess-a/subagents/agent-a1b2c3.jsonl", "claude-code"),
    ("swe-agent/windowed.traj", "swe-agent"),
    ("swe-agent/editor_history.traj", "swe-agent"),
    ("openhands/session.json", "openhands"),
    ("openhands/output.jsonl", "openhands"),
    ("mini-swe-agent/fixture__app-1.traj.json", "mini-swe-agent"),
    ("gemini/8876362f/chats/session-2025-12-03T06-35-477739d0.json", "gemini"),
    ("codex/2025/12/08/rollout-2025-12-08T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl", "codex"),
])
def test_detect(name, expected):
    assert detect(FIXTURES / name) == expected


def test_detect_does_not_go_by_suffix(tmp_path):
    renamed = tmp_path / "session.traj"
    shutil.copy(FIXTURES / "openhands" / "session.json", renamed)
    assert detect(renamed) == "openhands"
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"a": 1}\n')
    with pytest.raises(TraceError, match="notes.jsonl: format not recognised"):
        detect(notes)


def test_auto_ignores_unrecognised_files_in_a_directory(tmp_path, capsys):
    shutil.copy(FIXTURES / "swe-agent" / "windowed.traj", tmp_path)
    (tmp_path / "package.json").write_text('{"name": "x"}')
    out = tmp_path / "out.csv"
    assert main(["import", "auto", str(tmp_path), "--out", str(out)]) == 0
    assert "ignored (format not recognised): 1 files" in capsys.readouterr().out
    assert set(load(out)["session"].astype(str)) == {"windowed"}


@pytest.mark.parametrize("args, message", [
    (["claude-code", "{tmp}/missing"], "missing: no such file or directory"),
    (["auto", "{tmp}/notes.jsonl"], "notes.jsonl: format not recognised"),
    (["swe-agent", "{tmp}/notes.jsonl"], "notes.jsonl: not valid JSON"),
    (["claude-code", "{tmp}/empty"], "empty: no claude-code files found"),
    (["claude-code", "{tmp}/blank.jsonl"], "no tool calls found; nothing to write"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, message):
    (tmp_path / "notes.jsonl").write_text('{"a": 1}\n{"a": 2\n')
    (tmp_path / "empty").mkdir()
    (tmp_path / "blank.jsonl").write_text("")
    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous")   # not ctxbench's: kept even with --force when the input is bad
    argv = ["import", *(a.format(tmp=tmp_path) for a in args), "--out", str(out), "--force"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxbench import: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.jsonl", "empty", "notes.jsonl", "out.parquet"]


def test_unknown_output_suffix_fails_before_reading(tmp_path, capsys):
    assert main(["import", "claude-code", str(tmp_path / "missing"), "--out", str(tmp_path / "out.txt")]) == 2
    assert "out.txt: unknown trace format" in capsys.readouterr().err


def test_help_and_unknown_format(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["import", "--help"])
    assert exc.value.code == 0
    assert "subagents/agent-<id>.jsonl" in capsys.readouterr().out
    assert main(["import", "cursor", "x", "--out", "y.parquet"]) == 2


def test_only_regular_files_are_read(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "sess-a.jsonl").write_text((FIXTURES / "claude-code" / "sess-a.jsonl").read_text())
    os.mkfifo(logs / "pipe.jsonl")            # opening it for reading would block the import
    out = tmp_path / "t.parquet"
    assert main(["import", "claude-code", str(logs), "--out", str(out)]) == 0
    assert set(load(out)["session"].astype(str)) == {"sess-a"}
    assert main(["import", "claude-code", str(logs / "pipe.jsonl"), "--out", str(tmp_path / "u.parquet")]) == 2
    assert "pipe.jsonl: not a regular file" in capsys.readouterr().err
