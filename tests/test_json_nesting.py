"""JSON nested too deeply is malformed input wherever ctxbench reads JSON: skipped in line logs, exit 2 elsewhere."""

import json
from pathlib import Path

import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.errors import ContractViolation
from ctxbench.strategies.contract import load_request, parse_json
from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.registry import parse_spec
from test_external import ANSWER_LRU, replay, script
from ctxbench.traces import safejson
from ctxbench.traces.io import load

FIXTURES = Path(__file__).parent / "fixtures" / "importers"
DEPTH = 100_000
DEEP = "[" * DEPTH + "]" * DEPTH


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "RecursionError" not in err, err
    return err


def test_safejson_turns_deep_nesting_into_a_decode_error():
    with pytest.raises(safejson.JSONTooDeep, match="nested too deeply") as info:
        safejson.loads(DEEP)
    assert isinstance(info.value, json.JSONDecodeError) and isinstance(info.value, ValueError)
    assert safejson.loads("[[1]]") == [[1]]
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        parse_json(DEEP)


@pytest.mark.parametrize("fmt", ["claude-code", "auto"])
def test_a_deep_claude_code_line_is_skipped_and_counted(tmp_path, capsys, fmt):
    log = tmp_path / "sess-a.jsonl"
    lines = (FIXTURES / "claude-code" / "sess-a.jsonl").read_text().rstrip("\n").split("\n")
    log.write_text("\n".join(lines[:3] + ['{"type": "user", "message": ' + DEEP + "}"] + lines[3:]) + "\n")
    out = tmp_path / "t.parquet"
    assert main(["import", fmt, str(log), "--out", str(out), "--json", "--no-conversation"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["malformed"] == 3  # the fixture's two, and this one
    assert 4 in report["files"][0]["malformed_at"]
    assert len(load(out)) == 14


def test_a_deep_openhands_jsonl_line_is_skipped_and_counted(tmp_path, capsys):
    log = tmp_path / "output.jsonl"
    log.write_text((FIXTURES / "openhands" / "output.jsonl").read_text().rstrip("\n") + '\n{"history": ' + DEEP + "}\n")
    assert main(["import", "openhands", str(log), "--out", str(tmp_path / "t.csv"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["malformed"] >= 1


@pytest.mark.parametrize("fmt, name, text", [
    ("swe-agent", "run.traj", '{"trajectory": ' + DEEP + "}"),
    ("auto", "run.traj", '{"trajectory": ' + DEEP + "}"),
    ("openhands", "events.json", '[{"id": 0, "action": "read", "args": ' + DEEP + "}]"),
    ("openhands", "events.json", DEEP),
    ("auto", "events.json", '[{"id": 0, "source": "agent", "action": "run", "args": ' + DEEP + "}]"),
])
def test_a_deep_whole_file_log_exits_2_with_one_line(tmp_path, capsys, fmt, name, text):
    log = tmp_path / name
    log.write_text(text)
    out = tmp_path / "t.csv"
    assert main(["import", fmt, str(log), "--out", str(out)]) == 2
    assert str(log) in _one_error_line(capsys)
    assert not out.exists()


def test_a_deep_line_in_a_jsonl_trace_exits_2_naming_the_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    row = '{"session": "s", "turn": 0, "ts_ms": 0, "op": "read", "path": "a", "size_bytes": 1}'
    trace.write_text(row + "\n" + row[:-1] + ', "x": ' + DEEP + "}\n")
    assert main(["stats", str(trace)]) == 2
    assert f"{trace}: line 2: not valid JSON (a value nested too deeply to parse)" in _one_error_line(capsys)


def test_deep_parquet_metadata_exits_2(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"session": ["s"], "turn": [0], "ts_ms": [0], "op": ["read"], "path": ["a"], "size_bytes": [1]})
    path = tmp_path / "t.parquet"
    pq.write_table(table.replace_schema_metadata({b"ctxbench": DEEP.encode()}), path)
    assert main(["stats", str(path)]) == 2
    assert "nested too deeply" in _one_error_line(capsys)


def test_a_deep_meta_json_exits_2(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("session,turn,ts_ms,op,path,size_bytes\ns,0,0,read,a,10\ns,1,1,read,b,10\n")
    out = tmp_path / "r"
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--out", str(out), "--workers", "1",
                 "--no-report", "--no-bracket"]) == 0
    capsys.readouterr()
    (out / "meta.json").write_text(DEEP)
    for argv in (["report", str(out)], ["snapshots", str(out), "--out", str(tmp_path / "s.jsonl")]):
        assert main(argv) == 2
        assert "meta.json" in _one_error_line(capsys)


def test_deep_json_in_strategy_requests_specs_and_replies(tmp_path):
    with pytest.raises(StrategyInputError, match="nested too deeply"):
        load_request('{"state": ' + DEEP + ', "budget": {"maxBytes": 1}}')
    with pytest.raises(StrategyLoadError, match="nested too deeply"):   # one line, exit 2, from any command
        parse_spec("lru?max_entries=" + "%5B" * 5000 + "%5D" * 5000)
    spec = script(tmp_path, "deep.py", ANSWER_LRU + '        print(\'{"evict": \' + "[" * 100000 + "]" * 100000 + "}", '
                                                    "flush=True)\n")
    with pytest.raises(ContractViolation, match="not JSON"):
        replay(spec)
