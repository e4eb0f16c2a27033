"""The whole window on import: messages, tool calls' inputs, file changes' replies and each window's
overhead, for every format (OpenHands V1 included); --no-conversation gives the trace as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxbench.sim.cli import main
from ctxbench.traces.importers import detect, import_paths
from ctxbench.traces.importers.claude_code import call_size
from ctxbench.traces.importers.openhands import NO_OBSERVATION
from ctxbench.traces.io import load
from ctxbench.traces.schema import PINNED_OPS
from ctxbench.traces.tokens import DEFAULT_OVERHEAD_TOKENS, DEFAULT_RATIOS

FIXTURES = Path(__file__).parent / "fixtures" / "importers"
V1 = Path(__file__).parent / "fixtures" / "openhands-v1"
R = DEFAULT_RATIOS


def rows(df, columns=("turn", "op", "path", "size_bytes")):
    return [tuple(r) for r in df[list(columns)].astype(object).itertuples(index=False)]


def line(kind, ts, **fields):
    return json.dumps({"type": kind, "sessionId": "w", "uuid": f"u{ts}", "timestamp": f"2026-01-05T10:00:{ts:02d}.000Z",
                       **fields})


def assistant(ts, msg_id, content, tokens):
    usage = {"input_tokens": 1, "cache_creation_input_tokens": tokens - 101, "cache_read_input_tokens": 100}
    return line("assistant", ts, message={"id": msg_id, "role": "assistant", "content": content, "usage": usage})


READ = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/r/a.py"}, "caller": {"x": 1}}
EDIT = {"type": "tool_use", "id": "toolu_2", "name": "Edit",
        "input": {"file_path": "/r/a.py", "old_string": "1", "new_string": "2"}}
WEB = {"type": "tool_use", "id": "toolu_3", "name": "WebFetch", "input": {"url": "https://x", "prompt": "p"}}
CONFIRM = "The file /r/a.py has been updated."


def transcript(path: Path, *, usage: bool = True) -> Path:
    lines = [
        line("user", 0, message={"role": "user", "content": "Fix it."}),
        assistant(1, "m1", [{"type": "thinking", "thinking": "Think.", "signature": "s" * 500},
                            {"type": "text", "text": "Reading."}, READ], 1110),
        line("user", 2, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "     1→x = 1\n"}]},
             toolUseResult={"type": "text", "file": {"filePath": "/r/a.py", "content": "x = 1\n", "numLines": 1,
                                                     "startLine": 1, "totalLines": 1}}),
        assistant(3, "m2", [EDIT, WEB], 1500),
        line("user", 4, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": CONFIRM}]},
             toolUseResult={"filePath": "/r/a.py", "oldString": "1", "newString": "2", "originalFile": "x = 1\n"}),
        line("user", 5, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_3", "content": "Example Domain"},
            {"type": "text", "text": "Thanks"}]}),
        line("system", 6, subtype="compact_boundary", compactMetadata={"trigger": "auto", "preTokens": 1600}),
        line("user", 7, message={"role": "user", "content": "Summary text"}, isCompactSummary=True),
        assistant(8, "m3", [{"type": "text", "text": "Done."}], 2000),
    ]
    if not usage:
        lines = [text.replace('"usage"', '"no_usage"') for text in lines]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_claude_code_window_hand_worked(tmp_path):
    df, report = import_paths("claude-code", [transcript(tmp_path / "w.jsonl")])
    overhead = round((1110 - len("Fix it.") / R["prose"]) * R["overhead"])
    reattached = round((2000 - len("Summary text") / R["prose"] - overhead / R["overhead"]) * R["overhead"])
    assert rows(df) == [
        (0, "overhead", "overhead://system", overhead),
        (0, "message", "msg://user/1", len("Fix it.")),
        (1, "message", "msg://thinking/1", len("Think.")),            # the signature is not counted
        (1, "message", "msg://assistant/1", len("Reading.")),
        (1, "call", "call://read/1", call_size(READ)),
        (1, "read", "/r/a.py", len("x = 1\n")),                        # the file, without line numbers
        (2, "call", "call://edit/1", call_size(EDIT)),
        (2, "edit", "/r/a.py", len("x = 2\n")),
        (2, "output", "tool://edit/1", len(CONFIRM)),                  # what the edit returned
        (2, "call", "call://webfetch/1", call_size(WEB)),
        (2, "output", "tool://webfetch/1", len("Example Domain")),
        (2, "message", "msg://user/2", len("Thanks")),                 # in the arm's latest turn
        (3, "overhead", "overhead://compaction/1", reattached),        # context re-attached with the summary
        (3, "message", "msg://summary/1", len("Summary text")),
        (4, "message", "msg://assistant/2", len("Done.")),
    ]
    assert call_size(READ) == len(json.dumps({k: READ[k] for k in ("type", "id", "name", "input")}))
    assert df.groupby("turn")["usage_input_tokens"].max().tolist() == [0, 1110, 1500, 0, 2000]
    assert df["compact_before"].tolist() == [False] * 12 + [True, False, False]
    assert df["kind"].tolist() == [""] * 10 + ["prose"] + [""] * 4     # a web page is prose
    assert report.conversation and df.attrs["import"]["conversation"] is True


def test_the_window_replays_to_its_first_call_exactly(tmp_path):
    from ctxbench.sim.analysis.fidelity import aligned_turns

    turns = aligned_turns(import_paths("claude-code", [transcript(tmp_path / "w.jsonl")])[0])
    first = turns[turns["real_tokens"] > 0].groupby("segment").head(1)
    # the overhead is measured from each window's first call: the window before it is that call's input
    assert first["sim_tokens"].to_numpy() == pytest.approx([1110, 2000], abs=1)


def test_no_conversation_is_the_trace_of_files_and_outputs(tmp_path):
    log = transcript(tmp_path / "w.jsonl")
    without, report = import_paths("claude-code", [log], conversation=False)
    assert rows(without) == [(0, "read", "/r/a.py", 6), (1, "edit", "/r/a.py", 6),
                             (1, "output", "tool://webfetch/1", len("Example Domain"))]
    assert "kind" not in without.columns and not set(without["op"].astype(str)) & set(PINNED_OPS)
    assert not report.conversation and without.attrs["import"]["conversation"] is False
    full, _ = import_paths("claude-code", [log])
    files = full[full["op"].isin(["read", "edit", "write"])]
    assert rows(files, ("op", "path", "size_bytes")) == rows(without[without["op"] != "output"],
                                                            ("op", "path", "size_bytes"))


def test_default_overhead_without_usage_is_counted(tmp_path):
    df, report = import_paths("claude-code", [transcript(tmp_path / "w.jsonl", usage=False)])
    overhead = df[df["op"] == "overhead"]
    assert rows(overhead) == [(0, "overhead", "overhead://system", round(DEFAULT_OVERHEAD_TOKENS * R["overhead"]))]
    assert report.notes()["default_overhead"] == 1
    assert "windows given the default overhead" in report.summary()


def test_each_subagent_has_its_own_overhead(tmp_path):
    main_log = transcript(tmp_path / "s.jsonl")
    sub = tmp_path / "s" / "subagents" / "agent-x1.jsonl"
    sub.parent.mkdir(parents=True)
    sub.write_text(line("user", 10, message={"role": "user", "content": "Look."}) + "\n"
                   + assistant(11, "k1", [{"type": "text", "text": "Ok."}], 500) + "\n")
    df, _ = import_paths("claude-code", [tmp_path])
    sub_rows = df[df["arm"] == "x1"]
    assert rows(sub_rows, ("op", "path", "size_bytes")) == [
        ("overhead", "overhead://system", round((500 - len("Look.") / R["prose"]) * R["overhead"])),
        ("message", "msg://user/3", 5),                   # numbered over the session, in time order
        ("message", "msg://assistant/3", 3)]
    assert (df[df["arm"] == "main"]["op"] == "overhead").sum() == 2


def test_swe_agent_history_gives_the_overhead_and_the_task():
    df, report = import_paths("swe-agent", [FIXTURES / "swe-agent" / "editor_history.traj"])
    doc = json.loads((FIXTURES / "swe-agent" / "editor_history.traj").read_text())
    history = [m for m in doc["history"] if isinstance(m, dict)]
    fixed = sum(len(m["content"]) for m in history if m["role"] == "system" or m.get("is_demo"))
    head = rows(df.iloc[:2], ("turn", "op", "path", "size_bytes"))
    assert head == [(0, "overhead", "overhead://system", fixed), (0, "message", "msg://user/1", len("Fix f() so it returns 2."))]
    calls = df[df["op"] == "call"]
    steps = [m for m in history if m["role"] == "assistant" and not m.get("is_demo")]
    assert calls["size_bytes"].tolist()[:1] == [len(steps[0]["action"].encode())]
    assert "default_overhead" not in report.notes()


def test_swe_agent_without_history_gets_the_default_overhead():
    df, report = import_paths("swe-agent", [FIXTURES / "swe-agent" / "windowed.traj"])
    assert df["size_bytes"].iloc[0] == round(DEFAULT_OVERHEAD_TOKENS * R["overhead"])
    assert report.notes()["default_overhead"] == 1


def test_openhands_v0_messages_calls_and_measured_overhead():
    df, _ = import_paths("openhands", [FIXTURES / "openhands" / "session.json"])
    events = [e for e in json.loads((FIXTURES / "openhands" / "session.json").read_text()) if isinstance(e, dict)]
    first = next(e for e in events if e.get("tool_call_metadata"))
    tokens = first["tool_call_metadata"]["model_response"]["usage"]["prompt_tokens"]
    prompt = events[0]["args"]["content"]
    assert rows(df.iloc[:2], ("op", "path", "size_bytes")) == [
        ("overhead", "overhead://system", round((tokens - len(prompt) / R["prose"]) * R["overhead"])),
        ("message", "msg://user/1", len(prompt))]
    assert "msg://assistant/1" in set(df["path"].astype(str))
    assert (df["op"] == "call").sum() == sum(1 for e in events if e.get("source") == "agent"
                                             and isinstance(e.get("action"), str) and e["action"] not in NO_OBSERVATION)


def test_openhands_v1_conversation_directory():
    df, report = import_paths("openhands", [V1 / "conversations"])
    ev = {p.name.split("-")[2].split(".")[0]: json.loads(p.read_text())
          for p in sorted((V1 / "conversations" / "conv1" / "events").glob("*.json")) if p.name != "event-00013-e13.json"}
    system = ev["e0"]
    overhead = len(system["system_prompt"]["text"]) + len(json.dumps(system["tools"]))
    size = lambda e: len(json.dumps(e["tool_call"]))  # noqa: E731
    assert rows(df) == [
        (0, "overhead", "overhead://system", overhead),
        (0, "message", "msg://user/1", len("Make main() return 42.")),
        (1, "message", "msg://assistant/1", len("Look at the file.")),
        (1, "message", "msg://thinking/1", len("The bug is in app.py.")),
        (1, "call", "call://file_editor/1", size(ev["e2"])),
        (1, "read", "/workspace/app.py", len("     1\tdef main():\n     2\t    return 1\n")),
        (2, "call", "call://terminal/1", size(ev["e4"])),
        (2, "output", "tool://terminal/1", len("1 failed\n")),
        (3, "message", "msg://assistant/2", len("Fix the return value.")),
        (3, "call", "call://file_editor/2", size(ev["e6"])),
        (3, "edit", "/workspace/app.py", len("def main():\n    return 42\n")),    # the file after the edit
        (3, "output", "tool://edit/1", len("The file /workspace/app.py has been edited.")),
        (4, "call", "call://file_editor/3", size(ev["e8"])),
        (4, "output", "tool://edit/2", len("File not found")),                # an agent error: a failed call
        (4, "message", "msg://summary/1", len("Ran the tests; one failed.")),
        (5, "message", "msg://assistant/3", len("Done: main() returns 42.")),
    ]
    assert set(df["session"].astype(str)) == {"conv1"}
    assert (report.malformed, report.files[0].malformed_at) == (1, [13])   # the event file cut off mid-write
    notes = report.notes()
    assert (notes["condensation"], notes["failed_call"]) == (1, 1)
    assert [Path(p).name for p in report.ignored] == ["base_state.json"]


def test_openhands_v1_output_jsonl_and_array():
    df, report = import_paths("openhands", [V1 / "output.jsonl", V1 / "events.json"])
    assert sorted(set(df["session"].astype(str))) == ["events", "proj__v1-1", "proj__v1-3"]
    one = df[df["session"] == "proj__v1-1"]
    assert rows(one, ("op", "path")) == [("overhead", "overhead://system"), ("message", "msg://user/1"),
                                         ("call", "call://terminal/1"), ("output", "tool://terminal/1"),
                                         ("message", "msg://assistant/1")]
    assert rows(df[df["session"] == "events"]) == rows(one)
    # proj__v1-3 has no system prompt and no usage: the default overhead, counted
    three = df[df["session"] == "proj__v1-3"]
    assert three["size_bytes"].iloc[0] == round(DEFAULT_OVERHEAD_TOKENS * R["overhead"])
    assert report.notes()["default_overhead"] == 1
    assert report.malformed == 1


@pytest.mark.parametrize("path, expected", [
    (V1 / "output.jsonl", "openhands"), (V1 / "events.json", "openhands"),
    (V1 / "conversations" / "conv1" / "events" / "event-00002-e2.json", "openhands"),
    (V1 / "conversations" / "conv1" / "events" / "event-00013-e13.json", "openhands"),   # cut off, by its head
    (FIXTURES / "openhands" / "session.json", "openhands"), (FIXTURES / "openhands" / "output.jsonl", "openhands"),
    (FIXTURES / "claude-code" / "sess-a.jsonl", "claude-code"),
    (FIXTURES / "swe-agent" / "editor_history.traj", "swe-agent"),
])
def test_detect_tells_the_formats_apart(path, expected):
    assert detect(path) == expected


def test_auto_reads_a_v1_conversation_like_openhands():
    auto, auto_report = import_paths("auto", [V1])
    explicit, _ = import_paths("openhands", [V1])
    assert rows(auto, ("session", "turn", "op", "path", "size_bytes")) == \
        rows(explicit, ("session", "turn", "op", "path", "size_bytes"))
    assert [Path(p).name for p in auto_report.ignored] == ["base_state.json"]


def test_cli_no_conversation_flag(tmp_path, capsys):
    log = transcript(tmp_path / "w.jsonl")
    assert main(["import", "claude-code", str(log), "--out", str(tmp_path / "all.csv")]) == 0
    capsys.readouterr()
    assert main(["import", "claude-code", str(log), "--out", str(tmp_path / "files.csv"), "--no-conversation",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["conversation"] is False
    assert len(load(tmp_path / "all.csv")) == 15 and len(load(tmp_path / "files.csv")) == 3
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-conversation" in text and "fixed overhead" in text
