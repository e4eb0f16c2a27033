"""Each session's model: recorded by every importer, kept by every trace format, checked by the schema, and the
family whose token ratios replays count the session with."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from real_data import REAL_DATA

from ctxbench.sim.cli import main
from ctxbench.sim.engine.replay import split_sessions
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import import_paths
from ctxbench.traces.io import load, save
from ctxbench.traces.model_ratios import (DEFAULT_FAMILY, FAMILIES, FAMILY_RATIOS, FAMILY_SOURCES, GIVEN, family_table,
                                 model_family, session_ratios, trace_models)
from ctxbench.traces.schema import validate


@pytest.mark.parametrize("model, family", [
    ("claude-opus-4-6", "claude"), ("claude-haiku-4-5-20251001", "claude"), ("sonnet", "claude"),
    ("litellm_proxy/anthropic/claude-sonnet-4-20250514", "claude"), ("anthropic.claude-3-5-sonnet", "claude"),
    ("gpt-5.3-codex", "openai"), ("gpt-4o", "openai"), ("openai/gpt-4.1-mini", "openai"), ("o3", "openai"),
    ("o4-mini", "openai"), ("codex-mini-latest", "openai"), ("chatgpt-4o-latest", "openai"),
    ("deepseek-chat", "deepseek"), ("deepseek/deepseek-reasoner", "deepseek"), ("DeepSeek-V3", "deepseek"),
    ("gemini-2.5-pro", "gemini"), ("Qwen/Qwen3-Coder-480B", "qwen"), ("llama-3.1-70b", "other"),
    ("omni", "other"), ("o", "other"), ("", ""), (None, ""), (5, ""),
])
def test_the_family_of_a_model_name(model, family):
    assert model_family(model) == family


def test_every_family_uses_its_own_ratios_or_the_default_familys():
    rows = {row["family"]: row for row in family_table()}
    assert list(rows) == list(FAMILIES) and set(FAMILY_SOURCES) == set(FAMILIES)
    assert rows["claude"]["uses"] == "claude" and rows["deepseek"]["uses"] == "deepseek"
    for family in ("openai", "gemini", "qwen", "other"):   # no bundled session of theirs fits better
        assert rows[family]["uses"] == DEFAULT_FAMILY and rows[family]["ratios"] == FAMILY_RATIOS["claude"].to_dict()
    assert session_ratios("deepseek-chat", 3.8)[0] == GIVEN
    assert session_ratios("deepseek-chat", {"claude": FAMILY_RATIOS["claude"]})[0] == "claude"   # not in the table


@pytest.mark.real_sessions
def test_every_importer_records_the_model_its_log_names():
    df, _ = import_paths("auto", [REAL_DATA / agent for agent in ("claude-code", "codex", "mini-swe-agent",
                                                                   "openhands-v1", "swe-agent")])
    models = {row["session"][:8]: (row["model"], row["ratios"]) for row in trace_models(df)}
    assert models["258c7280"] == models["8463c716"] == ("claude-opus-4-6", "claude")   # subagents: sonnet, haiku
    assert models["019c8a59"] == ("gpt-5.3-codex", "claude") and models["019e9625"] == ("gpt-5.5", "claude")
    assert models["django__"] == ("deepseek-chat", "deepseek")
    assert models["sqlfluff"] == ("deepseek-reasoner", "deepseek")
    assert models["1fdca86f"] == ("litellm_proxy/anthropic/claude-sonnet-4-20250514", "claude")   # base_state.json
    assert models["replay__"] == ("gpt-4o", "claude")             # SWE-agent's replay_config
    assert models["function"] == ("", "claude")                   # a trajectory that names no model
    # the subagent's own model is kept on its turns
    arms = df[df["session"].astype(str).str.startswith("258c7280") & (df["arm"].astype(str) == "a881341")]
    assert set(arms["model"].astype(str)) - {""} == {"claude-sonnet-4-5-20250929"}


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl.gz"])
def test_the_model_and_exact_counts_survive_every_trace_format(tmp_path, suffix):
    trace = validate(pd.DataFrame({
        "session": ["a", "a", "b"], "turn": [0, 1, 0], "ts_ms": [0, 1, 0], "op": ["message", "output", "read"],
        "path": ["msg://user/1", "tool://bash/1", "x.py"], "size_bytes": [10, 20, 30],
        "model": ["", "1", "deepseek-chat"], "exact_tokens": [3, 0, 0]}))
    back = load(save(trace, tmp_path / f"t{suffix}"))
    assert back["model"].astype(str).tolist() == ["", "1", "deepseek-chat"]   # "1" stays a name, not a number
    assert back["exact_tokens"].tolist() == [3, 0, 0]
    assert [s.model for s in split_sessions(back)] == ["1", "deepseek-chat"]


@pytest.mark.parametrize("value, message", [
    (7, "row 1, column 'model': expected a model name, got 7"),
    ("x" * 201, "row 1, column 'model': a model name is at most 200 characters"),
    ("gpt\n5", "row 1, column 'model': a model name is at most 200 characters without control characters"),
])
def test_a_model_that_is_not_a_name_is_refused(tmp_path, capsys, value, message):
    frame = pd.DataFrame({"session": ["s", "s"], "turn": [0, 1], "ts_ms": [0, 1], "op": ["read", "read"],
                          "path": ["a", "b"], "size_bytes": [1, 2], "model": ["claude-opus-4-6", value]})
    with pytest.raises(TraceError, match=message):
        validate(frame)
    path = tmp_path / "t.jsonl"
    path.write_text(frame.to_json(orient="records", lines=True))
    assert main(["stats", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "column 'model'" in err and "\n" not in err


def test_an_unusable_model_name_in_a_log_is_counted_not_recorded(tmp_path):
    doc = {"trajectory_format": "mini-swe-agent-1", "info": {"config": {"model": {"model_name": "m" * 300}}},
           "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
                        {"role": "assistant", "content": "```bash\nls\n```",
                         "extra": {"response": {"model": 12, "usage": {"prompt_tokens": 50}}}},
                        {"role": "user", "content": "<returncode>0</returncode><output>a</output>"}]}
    path = tmp_path / "s.traj.json"
    path.write_text(json.dumps(doc))
    df, report = import_paths("mini-swe-agent", [path])
    assert "model" not in df.columns and report.notes()["unusable_model"] == 2


def test_stats_shows_each_sessions_model_and_counts_with_its_familys_ratios(tmp_path, capsys):
    rows = {"session": ["d"] * 3, "turn": [0, 1, 2], "ts_ms": [0, 1, 2], "op": ["read"] * 3,
            "path": ["a.py", "b.py", "c.py"], "size_bytes": [3660, 3660, 3660], "model": ["deepseek-chat"] * 3}
    path = save(validate(pd.DataFrame(rows)), tmp_path / "t.parquet")
    assert main(["stats", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["models"] == [{"session": "d", "model": "deepseek-chat", "family": "deepseek", "ratios": "deepseek"}]
    assert doc["ratios"] == "deepseek" and doc["overall"]["unique_tokens"] == pytest.approx(3 * 1000)
    assert main(["stats", str(path), "--json", "--bytes-per-token", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ratios"] == "given" and doc["overall"]["unique_tokens"] == pytest.approx(3 * 3660)
    assert main(["stats", str(path)]) == 0
    assert "tokens below: at the deepseek ratios" in capsys.readouterr().out
