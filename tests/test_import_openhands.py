"""OpenHands importer: read/edit/write/run events, turns by model response, streaming JSON arrays."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ctxbench.sim.cli import main
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import import_paths
from ctxbench.traces.importers._jsonstream import json_array_items
from ctxbench.traces.importers.report import FileReport

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "openhands"
APP = "def main():\n    return 1\n"
APP_42 = "def main():\n    return 42\n"


def rows(df, columns=("turn", "op", "path", "size_bytes", "lines_changed", "usage_input_tokens")):
    picked = df[list(columns)]
    picked = picked.astype({c: str for c in ("op", "path", "session") if c in picked.columns})
    return [tuple(r) for r in picked.itertuples(index=False)]


@pytest.fixture(scope="module")
def events():
    return json.loads((FIXTURES / "session.json").read_text())


def test_read_edit_write_run_events(events):
    df, report = import_paths("openhands", [FIXTURES / "session.json"], conversation=False)
    big = next(e for e in events if e.get("cause") == 6)["content"]
    error = next(e for e in events if e.get("observation") == "error")["content"]
    assert rows(df) == [
        (0, "read", "/workspace/app.py", len(APP), 0, 2000),
        (0, "output", "tool://run/1", len("app.py\nbig.py\n"), 0, 2000),   # same model response: same turn
        (1, "read", "/workspace/big.py#L10-20", len(big), 0, 2600),
        (2, "edit", "/workspace/app.py", len(APP_42), 1, 3100),           # extras.new_content
        (3, "write", "/workspace/test_app.py", len("def test():\n    assert True\n"), 2, 3300),  # create
        (4, "write", "/workspace/notes.txt", len("todo: more tests\n"), 1, 3400),
        (5, "output", "tool://read/1", len(error), 0, 3500),               # error observation
        (6, "output", "tool://run_ipython/1", len("42\n"), 0, 3600),
        (7, "edit", "/workspace/app.py", len(APP_42) + 2, 1, 3800),       # estimated: "42" -> "4242"
    ]
    assert df["ts_ms"].iloc[0] == 1740819605000  # 2025-03-01T09:00:05 (no zone: UTC)
    notes = report.files[0].notes
    assert (notes["failed_call"], notes["no_result"], notes["orphan_result"], notes["estimated_size"]) == (1, 1, 1, 1)
    assert (report.files[0].malformed, report.files[0].malformed_at) == (1, [23])


def test_an_object_with_history_imports_like_the_array(tmp_path, events):
    wrapped = tmp_path / "session.json"
    wrapped.write_text(json.dumps({"id": "conv", "history": events}))
    array, _ = import_paths("openhands", [FIXTURES / "session.json"], conversation=False)
    df, _ = import_paths("openhands", [wrapped], conversation=False)
    assert rows(df) == rows(array)


def test_evaluation_output_lines_are_sessions():
    df, report = import_paths("openhands", [FIXTURES / "output.jsonl"], conversation=False)
    assert rows(df, ("session", "turn", "op", "path", "size_bytes")) == [
        ("proj__repo-1", 0, "output", "tool://run/1", len("a\nb\n")),
        ("proj__repo-2", 0, "output", "tool://run/1", len("3 passed\n")),
    ]
    assert (report.files[0].malformed, report.files[0].malformed_at) == (1, [3])  # the truncated third line


def test_not_openhands_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "package.json"
    path.write_text('{"name": "x", "version": "1.0.0"}')
    with pytest.raises(TraceError, match="package.json: not OpenHands events"):
        import_paths("openhands", [path], conversation=False)
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2, 3]")
    with pytest.raises(TraceError, match="numbers.json: not OpenHands events"):
        import_paths("openhands", [numbers], conversation=False)


def _items(text: str, chunk: int) -> tuple[list, FileReport]:
    report = FileReport("mem", "openhands")
    return [item for _, item in json_array_items(io.StringIO(text), report, chunk=chunk)], report


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 16])
def test_json_array_items_match_a_whole_parse(chunk):
    text = (FIXTURES / "session.json").read_text()
    items, report = _items(text, chunk)
    assert items == json.loads(text)
    assert (report.records, report.malformed) == (len(items), 0)


@pytest.mark.parametrize("chunk", [2, 5, 1 << 16])
def test_json_array_items_refuse_a_truncated_or_broken_array(chunk):
    with pytest.raises(TraceError, match=r"input: truncated at element 2: the file ends before the array's closing"):
        _items('[{"id": 1}, 12345, {"id": 2, "x": [1, 2', chunk)
    with pytest.raises(TraceError, match=r"input: truncated after element 1"):
        _items('[{"id": 1}, 12345', chunk)
    with pytest.raises(TraceError, match=r"input: broken after element 0: expected ',' or '\]', found '\{'"):
        _items('[{"id": 1} {"id": 2}]', chunk)
    assert _items(" [ ] ", chunk)[0] == []


def test_a_truncated_events_file_is_refused_and_nothing_is_written(tmp_path, capsys):
    cut = tmp_path / "events.json"
    text = (FIXTURES / "session.json").read_text()
    cut.write_text(text[:len(text) // 2])
    out = tmp_path / "t.parquet"
    assert main(["import", "openhands", str(cut), "--out", str(out)]) == 2
    assert "events.json: truncated" in capsys.readouterr().err and not out.exists()


def test_event_ids_that_are_json_lists_or_objects_are_unanswerable_not_a_crash(tmp_path):
    events = [
        {"id": [1], "source": "agent", "action": "run", "args": {"command": "ls"}},
        {"id": 2, "source": "environment", "observation": "run", "cause": {"id": 1}, "content": "x"},
        {"id": 3, "source": "agent", "action": "run", "args": {"command": "pwd"}},
        {"id": 4, "source": "environment", "observation": "run", "cause": 3, "content": "/w\n"},
    ]
    log = tmp_path / "events.json"
    log.write_text(json.dumps(events))
    df, report = import_paths("openhands", [log], conversation=False)
    assert rows(df, ("op", "path", "size_bytes")) == [("output", "tool://run/1", len("/w\n"))]
    assert dict(report.notes()) == {"orphan_result": 1, "no_result": 1, "missing_timestamp": 2}
