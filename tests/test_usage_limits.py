"""Recorded token counts at the edges: a count that is not a whole number from 0 to 2**40 is a malformed record
(its usage left out, the rest of it imported), and a trace's usage and compaction columns are validated like the others."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import import_paths
from ctxbench.traces.schema import validate

FIXTURES = Path(__file__).parent / "fixtures" / "importers"
BAD_COUNTS = [2**62, 2**63, -5, 12.5, True, "1200"]


def _claude(tmp_path: Path, count) -> Path:
    lines = (FIXTURES / "claude-code" / "sess-a.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line) if line.strip().startswith("{") else None
        usage = record.get("message", {}).get("usage") if isinstance(record, dict) and isinstance(
            record.get("message"), dict) else None
        if isinstance(usage, dict) and "input_tokens" in usage:
            usage["input_tokens"] = count
            lines[i] = json.dumps(record)
            break
    path = tmp_path / "sess-a.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _mini(tmp_path: Path, count) -> Path:
    doc = json.loads((FIXTURES / "mini-swe-agent" / "fixture__app-1.traj.json").read_text())
    first = next(m for m in doc["messages"] if m.get("role") == "assistant")
    first["extra"]["response"]["usage"]["prompt_tokens"] = count
    path = tmp_path / "m.traj.json"
    path.write_text(json.dumps(doc))
    return path


def _codex(tmp_path: Path, count) -> Path:
    source = next((FIXTURES / "codex").rglob("rollout-*.jsonl"))
    lines = source.read_text().splitlines()
    for i, line in enumerate(lines):
        if '"token_count"' in line:
            record = json.loads(line)
            record["payload"]["info"]["last_token_usage"]["input_tokens"] = count
            lines[i] = json.dumps(record)
            break
    path = tmp_path / "rollout-x.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _gemini(tmp_path: Path, count) -> Path:
    doc = json.loads(next((FIXTURES / "gemini").rglob("session-*.json")).read_text())
    next(m for m in doc["messages"] if isinstance(m, dict) and m.get("type") == "gemini")["tokens"]["input"] = count
    path = tmp_path / "session-x.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("fmt, make", [("claude-code", _claude), ("mini-swe-agent", _mini), ("codex", _codex),
                                       ("gemini", _gemini)])
@pytest.mark.parametrize("count", BAD_COUNTS)
def test_a_count_out_of_range_is_one_malformed_record_and_the_rest_imports(tmp_path, fmt, make, count):
    path = make(tmp_path, count)
    (tmp_path / "ok").mkdir()
    _, clean = import_paths(fmt, [make(tmp_path / "ok", 1200)])
    df, report = import_paths(fmt, [path])
    assert report.malformed == clean.malformed + 1
    assert df["usage_input_tokens"].max() < 2**40 and (df["usage_input_tokens"] >= 0).all()
    out = tmp_path / "t.parquet"
    assert main(["import", fmt, str(path), "--out", str(out)]) == 0
    assert main(["stats", str(out)]) == 0                 # what the import wrote, every command reads


def _trace(**extra) -> pd.DataFrame:
    return pd.DataFrame({"session": ["s", "s"], "turn": [0, 1], "ts_ms": [0, 1], "op": ["read", "read"],
                         "path": ["a", "b"], "size_bytes": [1, 2], **extra})


@pytest.mark.parametrize("column, values, message", [
    ("usage_input_tokens", ["12", "many"], "row 1, column 'usage_input_tokens': expected an integer, got 'many'"),
    ("usage_input_tokens", [28162.5, 0], "row 0, column 'usage_input_tokens': expected an integer, got 28162.5"),
    ("usage_input_tokens", [2**62, 0], "row 0, column 'usage_input_tokens': must be at most"),
    ("usage_input_tokens", [5, -1], "row 1, column 'usage_input_tokens': must be >= 0, got -1"),
    ("compact_before", ["maybe", "False"], "row 0, column 'compact_before': expected true or false, got 'maybe'"),
])
def test_a_traces_usage_and_compaction_columns_are_validated(column, values, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(_trace(**{column: values}))


def test_valid_usage_and_compaction_text_become_integers_and_booleans():
    t = validate(_trace(usage_input_tokens=["12", "0"], compact_before=["True", "false"]))
    assert t["usage_input_tokens"].tolist() == [12, 0] and str(t["usage_input_tokens"].dtype) == "int64"
    assert t["compact_before"].tolist() == [True, False] and t["compact_before"].dtype == bool


def test_a_csv_trace_with_text_usage_is_refused_naming_the_row(tmp_path, capsys):
    csv = tmp_path / "t.csv"
    _trace(usage_input_tokens=["12", "lots"]).to_csv(csv, index=False)
    assert main(["stats", str(csv)]) == 2
    assert "usage_input_tokens" in capsys.readouterr().err


@pytest.mark.parametrize("values, message", [
    (["12", "many"], "row 1, column 'usage_input_tokens': expected an integer, got 'many'"),
    ([2**62, 0], "row 0, column 'usage_input_tokens': must be at most"),
    ([5, -1], "row 1, column 'usage_input_tokens': must be >= 0, got -1"),
])
@pytest.mark.parametrize("policy", [None, "claude-code"])
def test_fidelity_on_a_frame_holds_usage_to_the_schemas_rule(values, message, policy):
    """A DataFrame handed to the API unvalidated meets the one rule of the schema, with the same message."""
    from ctxbench.sim.analysis.fidelity import fidelity

    with pytest.raises(TraceError, match="fidelity: " + message.replace("(", r"\(").replace(")", r"\)")):
        fidelity(_trace(usage_input_tokens=values), policy=policy)


def test_fidelity_reads_usage_given_as_text_as_the_schema_does():
    from ctxbench.sim.analysis.fidelity import fidelity

    rows = fidelity(_trace(usage_input_tokens=["1000", "1100"]), bytes_per_token=1)
    assert rows["turns_compared"].tolist() == [2] and rows["real_tokens_mean"].tolist() == [1050]
