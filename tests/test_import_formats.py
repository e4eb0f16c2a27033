"""The table of log formats: one protocol for every importer, and a new format is one module plus one entry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.traces.importers import AUTO, FORMAT_NAMES, FORMATS, IMPORTERS, detect
from ctxbench.traces.importers.detect import Head

ROOT = Path(__file__).resolve().parents[1]

TOY_IMPORTER = '''\
"""Toy logs: one JSON object a line, {"toy": OP, "path": PATH, "bytes": N}, each line a turn."""

from ctxbench.traces.importers._jsonstream import json_lines, reading
from ctxbench.traces.importers.builder import SessionBuilder, SessionReader

FORMAT = "toy"
LABEL = "Toy"
KIND = "a toy log"
SUFFIXES = (".toylog",)
HELP = "toy logs (*.toylog): one event a line."


def sniff(head):
    return head.record is not None and isinstance(head.record.get("toy"), str)


def read(files, *, conversation, report):
    for path in sorted(files):
        reader = SessionReader(SessionBuilder(path.stem), report.file(path, FORMAT, path.stem, "main"),
                               conversation)
        arm = reader.arm()
        with reading(path) as fh:
            for number, record in json_lines(fh, reader.report):
                call = reader.call(reader.builder.new_turn(arm, number * 1000), number * 1000, "toy")
                if record["toy"] == "output":
                    reader.output(call, record["bytes"])
                else:
                    reader.file_event(call, record["toy"], record["path"], record["bytes"])
        yield reader.finish()
'''


def test_every_importer_has_the_same_protocol():
    assert [importer.FORMAT for importer in IMPORTERS] == ["claude-code", "codex", "gemini", "swe-agent", "mini-swe-agent", "openhands"]
    assert FORMAT_NAMES == (*FORMATS, AUTO) and list(FORMATS.values()) == list(IMPORTERS)
    for importer in IMPORTERS:
        for name, kind in (("FORMAT", str), ("LABEL", str), ("KIND", str), ("HELP", str), ("SUFFIXES", tuple)):
            assert isinstance(getattr(importer, name), kind), (importer.__name__, name)
        assert importer.SUFFIXES and all(s.startswith(".") for s in importer.SUFFIXES)
        assert callable(importer.sniff) and callable(importer.read)
        assert not importer.sniff(Head("{}", {})) and not importer.sniff(Head("{}"))


def test_detect_shows_each_line_to_every_format_before_the_next_line(tmp_path):
    openhands_record = {"instance_id": "x", "history": [{"id": 0, "source": "agent", "action": "run"}]}
    claude_record = {"type": "user", "sessionId": "s", "message": {"content": "hi"}}
    log = tmp_path / "mixed.jsonl"
    log.write_text(json.dumps(openhands_record) + "\n" + json.dumps(claude_record) + "\n")
    assert detect(log) == "openhands"
    log.write_text(json.dumps(claude_record) + "\n" + json.dumps(openhands_record) + "\n")
    assert detect(log) == "claude-code"


def test_an_unrecognised_file_names_every_format_of_the_table(tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"a": 1}')
    with pytest.raises(ValueError) as exc:
        detect(notes)
    assert str(exc.value) == (f"{notes}: format not recognised (expected a Claude Code transcript, "
                              "a Codex CLI rollout, a Gemini CLI chat recording, a SWE-agent trajectory, a mini-swe-agent trajectory or OpenHands events)")


def test_a_new_format_is_one_module_and_one_table_entry(tmp_path):
    package = tmp_path / "copy"
    # The copy stands first on the path as ``ctxbench.traces``; the rest of ctxbench comes from the install.
    shutil.copytree(ROOT / "traces", package / "ctxbench" / "traces", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "ctxbench" / "__init__.py", package / "ctxbench")
    (package / "ctxbench" / "traces" / "importers" / "toy.py").write_text(TOY_IMPORTER)
    table = package / "ctxbench" / "traces" / "importers" / "formats.py"
    text = table.read_text()
    for old, new in (("import claude_code, codex, gemini, mini_swe_agent, openhands, swe_agent",
                      "import claude_code, codex, gemini, mini_swe_agent, openhands, swe_agent, toy"),
                     ("= (claude_code, codex, gemini, swe_agent, mini_swe_agent, openhands)",
                      "= (claude_code, codex, gemini, swe_agent, mini_swe_agent, openhands, toy)")):
        assert text.count(old) == 1
        text = text.replace(old, new)
    table.write_text(text)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "run.toylog").write_text('{"toy": "read", "path": "a.py", "bytes": 10}\n'
                                     '{"toy": "output", "bytes": 3}\n{"broken\n')
    shutil.copy(ROOT / "tests" / "fixtures" / "importers" / "swe-agent" / "windowed.traj", logs)
    script = f"""
import contextlib, io, json, sys
import ctxbench.traces
assert ctxbench.traces.__file__.startswith({str(package)!r}), ctxbench.traces.__file__
from ctxbench.sim.cli import main
from ctxbench.traces.io import load
helps = []
for argv in (["--help"], ["import", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()) as text, contextlib.suppress(SystemExit):
        main(argv)
    helps.append(" ".join(text.getvalue().split()))
codes = [main(["import", "toy", {str(logs / "run.toylog")!r}, "--out", "toy.csv"]),
         main(["import", "auto", {str(logs)!r}, "--out", "auto.csv"])]
trace = load("auto.csv")
print(json.dumps({{"helps": helps, "codes": codes,
                   "toy": load("toy.csv")[["op", "path", "size_bytes"]].astype(str).values.tolist(),
                   "sessions": sorted(set(trace["session"].astype(str)))}}))
"""
    env = {**os.environ, "PYTHONPATH": str(package), "COLUMNS": "400"}   # no line wrapping inside a word
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["codes"] == [0, 0]
    assert result["toy"] == [["read", "a.py", "10"], ["output", "tool://toy/1", "3"]]
    assert result["sessions"] == ["run", "windowed"]
    commands, import_help = result["helps"]
    assert "import real agent logs (Claude Code, Codex CLI, Gemini CLI, SWE-agent, mini-swe-agent, OpenHands, Toy) as a trace" in commands
    assert "gives each session's overhead. toy toy logs (*.toylog): one event a line." \
        in import_help
    assert "log format: claude-code, codex, gemini, swe-agent, mini-swe-agent, openhands, toy, auto" in import_help
