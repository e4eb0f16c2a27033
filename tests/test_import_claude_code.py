"""Claude Code importer: every tool kind, partial reads, edits, subagents, compactions, bad lines."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import import_paths
from ctxbench.traces.importers.claude_code import session_files
from ctxbench.traces.schema import validate

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "claude-code"
APP = "def main():\n    return 1\n"
APP_42 = "def main():\n    return 42\n"
T0 = 1767607200000  # 2026-01-05T10:00:00Z


def rows(df, columns=("turn", "op", "path", "size_bytes", "arm", "lines_changed")):
    picked = df[list(columns)]
    picked = picked.astype({c: str for c in ("op", "path", "arm", "session") if c in picked.columns})
    return [tuple(r) for r in picked.itertuples(index=False)]


@pytest.fixture(scope="module")
def imported():
    return import_paths("claude-code", [FIXTURES], conversation=False)


@pytest.fixture(scope="module")
def sess_a(imported):
    df, _ = imported
    return df[df["session"] == "sess-a"].reset_index(drop=True)


def test_every_tool_kind_maps_to_its_event(sess_a):
    assert rows(sess_a) == [
        (0, "read", "/repo/app.py", len(APP), "main", 0),
        (0, "read", "/repo/big.py#L10-14", len("line10\nline11\nline12\nline13\nline14"), "main", 0),
        (1, "edit", "/repo/app.py", len(APP_42), "main", 1),            # structured result
        (2, "edit", "/repo/app.py", len(APP_42) + 11 - 2, "main", 2),   # estimated: "42" -> "4242\n# done"
        (3, "edit", "/repo/util.py", len("bb\n\n\n"), "main", 3),       # MultiEdit, replace_all
        (4, "write", "/repo/new.py", len("x = 1\ny = 2\n"), "main", 2),
        (5, "output", "tool://bash/1", len("ok\n"), "main", 0),
        (5, "output", "tool://grep/1", len("hit1\nhit2"), "main", 0),
        (5, "output", "tool://glob/1", len("<tool_use_error>bad pattern</tool_use_error>"), "main", 0),
        (6, "output", "tool://webfetch/1", len("Example Domain"), "main", 0),
        (6, "output", "tool://websearch/1", len("results: 3 links"), "main", 0),
        (7, "output", "tool://task/1", len("All tests pass.agentId: a1b2c3"), "main", 0),
        (7, "output", "tool://bash/2", 0, "main", 0),
        (8, "read", "/repo/app.py", len(APP_42), "a1b2c3", 0),           # no structured result: prefixes stripped
        (9, "output", "tool://bash/3", len("PASS"), "a1b2c3", 0),
        (10, "read", "/repo/app.py", len(APP_42), "main", 0),
    ]


def test_lines_sharing_a_message_id_form_one_turn_in_call_order(sess_a):
    turn0 = sess_a[sess_a["turn"] == 0]
    # the partial read's result arrived first, yet the calls keep the order they were made in
    assert list(turn0["path"].astype(str)) == ["/repo/app.py", "/repo/big.py#L10-14"]
    assert sorted(sess_a[sess_a["turn"] == 5]["path"].astype(str)) == ["tool://bash/1", "tool://glob/1",
                                                                      "tool://grep/1"]


def test_timestamps_come_from_the_lines_and_never_go_back(sess_a, imported):
    _, report = imported
    assert sess_a["ts_ms"].iloc[0] == T0 + 3000
    assert sess_a["ts_ms"].iloc[1] == T0 + 4000
    # the WebFetch/WebSearch line has no usable timestamp: the previous line's time is used
    assert list(sess_a.loc[sess_a["turn"] == 6, "ts_ms"]) == [T0 + 62500, T0 + 62500]
    assert sess_a["ts_ms"].is_monotonic_increasing
    # the subagent's turns start before the parent's parallel Bash call at 10:03:40 ends its turn
    assert report.clamped["sess-a"] == 2
    assert list(sess_a.loc[sess_a["arm"] == "a1b2c3", "ts_ms"]) == [T0 + 220000, T0 + 220000]


def test_usage_input_tokens_are_summed_per_turn(sess_a):
    per_turn = sess_a.groupby("turn")["usage_input_tokens"].agg(["min", "max"])
    assert (per_turn["min"] == per_turn["max"]).all()
    assert list(per_turn["max"]) == [1110, 1502, 1551, 1651, 1751, 1851, 1951, 2051, 4003, 4201, 20005]


def test_compaction_is_a_marker_and_metadata(imported, sess_a):
    df, report = imported
    assert df.attrs["compactions"] == [{"session": "sess-a", "arm": "main", "turn": 10,
                                        "ts_ms": T0 + 360000, "trigger": "auto", "pre_tokens": 150000}]
    assert report.compactions == df.attrs["compactions"]
    assert list(sess_a.index[sess_a["compact_before"]]) == [len(sess_a) - 1]
    assert df["compact_before"].sum() == 1


def test_corrupt_and_truncated_lines_are_counted_not_fatal(imported):
    _, report = imported
    main = next(f for f in report.files if f.path.endswith("sess-a.jsonl"))
    assert (main.malformed, main.malformed_at) == (2, [18, 38])
    assert main.notes["no_result"] == 1        # the Read whose result line was truncated
    assert main.notes["orphan_result"] == 1
    assert main.notes["failed_call"] == 1
    assert main.notes["estimated_size"] == 1
    assert main.notes["missing_timestamp"] == 1
    assert report.malformed == 2


def test_sessions_and_arms(imported):
    df, report = imported
    assert list(df["session"].astype(str).unique()) == ["sess-a", "sess-b"]
    assert rows(df[df["session"] == "sess-b"]) == [(0, "output", "tool://bash/1", len("app.py\nbig.py\n"), "main", 0)]
    assert report.sessions["sess-a"]["arms"] == 2
    assert report.sessions["sess-a"]["read"] == 4 and report.sessions["sess-a"]["output"] == 8
    validate(df)  # schema holds: contiguous sessions, turns and times non-decreasing


def test_session_files_follow_the_claude_code_layout():
    files = [Path("p/s1.jsonl"), Path("p/s1/subagents/agent-a9.jsonl"), Path("p/s2/subagents/agent-b.jsonl")]
    assert session_files(files) == {("s1", "p"): [("main", files[0]), ("a9", files[1])], ("s2", "p"): [("b", files[2])]}


def test_two_projects_with_a_transcript_of_one_name_are_two_sessions(tmp_path):
    for project in ("one", "two"):
        (tmp_path / project).mkdir()
        shutil.copy(FIXTURES / "sess-a.jsonl", tmp_path / project / "sess-a.jsonl")
    df, report = import_paths("claude-code", [tmp_path / "one", tmp_path / "two"], conversation=False)
    assert sorted(set(df["session"].astype(str))) == ["sess-a", "sess-a#2"]
    assert set(df["arm"].astype(str)) == {"main"}             # not one session with arms main and main~2
    alone, _ = import_paths("claude-code", [tmp_path / "one"], conversation=False)
    assert (df["session"].astype(str) == "sess-a").sum() == len(alone)   # no edit of the other invalidates it
    assert report.renamed == [("sess-a", "sess-a#2")]


def _write(tmp_path: Path, records: list[dict], name: str = "s.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _call(msg_id, tool_id, tool, args, ts="2026-01-05T10:00:00Z", **extra):
    return {"type": "assistant", "timestamp": ts, "sessionId": "s", **extra,
            "message": {"id": msg_id, "role": "assistant", "content": [
                {"type": "tool_use", "id": tool_id, "name": tool, "input": args}]}}


def _result(tool_id, content, structured=None, ts="2026-01-05T10:00:01Z", **extra):
    line = {"type": "user", "timestamp": ts, "sessionId": "s", **extra,
            "message": {"role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": content}]}}
    if structured is not None:
        line["toolUseResult"] = structured
    return line


def test_read_past_the_end_is_an_output(tmp_path):
    path = _write(tmp_path, [
        _call("m1", "t1", "Read", {"file_path": "/r/a.py", "offset": 500}),
        _result("t1", "<system-reminder>the file has 20 lines</system-reminder>",
                {"type": "text", "file": {"filePath": "/r/a.py", "content": "", "numLines": 0, "startLine": 500,
                                          "totalLines": 20}}),
    ])
    df, report = import_paths("claude-code", [path], conversation=False)
    assert rows(df, ("op", "path")) == [("output", "tool://read/1")]
    assert report.files[0].notes["failed_call"] == 1


def test_edit_sizes_from_a_patch_or_the_new_string(tmp_path):
    body = "one\ntwo\n"
    path = _write(tmp_path, [
        _call("m1", "t1", "Read", {"file_path": "/r/a.py"}),
        _result("t1", "     1→one\n     2→two\n     3→"),
        _call("m2", "t2", "Edit", {"file_path": "/r/a.py", "old_string": "two", "new_string": "three"}),
        _result("t2", "updated", {"filePath": "/r/a.py", "oldString": "two", "newString": "three",
                                  "structuredPatch": [{"lines": [" one", "-two", "+three"]}]}),
        _call("m3", "t3", "Edit", {"file_path": "/r/b.py", "old_string": "x", "new_string": "yy\nzz"}),
        _result("t3", "updated"),
    ])
    df, report = import_paths("claude-code", [path], conversation=False)
    assert rows(df, ("op", "path", "size_bytes", "lines_changed")) == [
        ("read", "/r/a.py", len(body), 0),
        ("edit", "/r/a.py", len("one\nthree\n"), 1),   # last known size + the patch's byte change
        ("edit", "/r/b.py", len("yy\nzz"), 2),          # nothing known: the new string alone
    ]
    assert report.files[0].notes["estimated_size"] == 1


def test_inline_sidechain_lines_become_their_agents_arm(tmp_path):
    path = _write(tmp_path, [
        _call("m1", "t1", "Bash", {"command": "ls"}),
        _result("t1", "a"),
        _call("m2", "t2", "Bash", {"command": "pwd"}, ts="2026-01-05T10:00:02Z", isSidechain=True, agentId="x7"),
        _result("t2", "/r", ts="2026-01-05T10:00:03Z", isSidechain=True, agentId="x7"),
    ])
    df, _ = import_paths("claude-code", [path], conversation=False)
    assert rows(df, ("turn", "path", "arm")) == [(0, "tool://bash/1", "main"), (1, "tool://bash/2", "x7")]


def test_a_file_that_is_not_a_transcript_is_an_error_naming_it(tmp_path):
    path = _write(tmp_path, [{"session": "s", "op": "read"}], name="trace.jsonl")
    with pytest.raises(TraceError, match="trace.jsonl: not a Claude Code transcript"):
        import_paths("claude-code", [path], conversation=False)
    with pytest.raises(TraceError, match="missing.jsonl: no such file"):
        import_paths("claude-code", [tmp_path / "missing.jsonl"], conversation=False)


def test_import_streams_line_by_line(tmp_path):
    body = "x" * 49_999 + "\n"
    records = []
    for i in range(100):
        records.append(_call(f"m{i}", f"t{i}", "Bash", {"command": "cat log"}))
        records.append(_result(f"t{i}", body, {"stdout": body, "stderr": ""}))
    path = _write(tmp_path, records)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        df, _ = import_paths("claude-code", [path], conversation=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(df) == 100 and (df["size_bytes"] == len(body)).all()
    assert size > 10_000_000
    assert peak < size / 5  # a few lines at a time, never the whole file


def test_ids_and_types_that_are_json_lists_or_objects_are_malformed_data_not_a_crash(tmp_path):
    # a tool_result naming its call by a list, a record type that is an object: counted, never a TypeError
    lines = [
        {"type": "assistant", "sessionId": "s", "timestamp": "2026-01-05T10:00:00Z",
         "message": {"id": "m1", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}},
        {"type": "user", "sessionId": "s", "timestamp": "2026-01-05T10:00:01Z",
         "message": {"content": [{"type": "tool_result", "tool_use_id": ["t1"], "content": "ok"}]}},
        {"type": {"kind": "user"}, "sessionId": "s"},
        {"type": "assistant", "sessionId": "s", "timestamp": "2026-01-05T10:00:02Z",
         "message": {"id": "m2", "content": [{"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}]}},
        {"type": "user", "sessionId": "s", "timestamp": "2026-01-05T10:00:03Z",
         "message": {"content": [{"type": "tool_result", "tool_use_id": "t2", "content": "done"}]}},
    ]
    log = tmp_path / "s.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for fmt in ("claude-code", "auto"):
        df, report = import_paths(fmt, [log], conversation=False)
        assert rows(df) == [(0, "output", "tool://bash/1", len("done"), "main", 0)]
        assert dict(report.notes()) == {"orphan_result": 1, "no_result": 1}
        assert report.malformed == 1
