"""Importers on the bundled real sessions (data/real-sessions), against counts made by hand.

Hand counts (``grep -v '"type":"progress"' FILE | grep -o '"name":"Read"' | wc -l`` and the like,
over each session's main file and its ``subagents/*.jsonl``; progress lines echo subagent messages):

========================================  =====  ====  =====  ====  ==========================
session                                   Read   Edit  Write  Bash  Reads that return no file
========================================  =====  ====  =====  ====  ==========================
258c7280-ae70-4798-800f-63464d01a85d      42     35    13     79    1 (file does not exist)
8463c716-a2ea-4c14-9efa-87158ebd9f20      47     22    5      85    3 (too large, a directory,
                                                                      offset past the end)
========================================  =====  ====  =====  ====  ==========================

Each of the two has one ``compact_boundary`` line (auto, 167094 and 167731 tokens before it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxbench.traces.importers import import_paths
from real_data import REAL_DATA

DATA = REAL_DATA
pytestmark = [pytest.mark.real_sessions]

UUID_SESSIONS = {
    # session: (read events, edits, writes, bash outputs, compaction preTokens)
    "258c7280-ae70-4798-800f-63464d01a85d": (41, 35, 13, 79, 167094),
    "8463c716-a2ea-4c14-9efa-87158ebd9f20": (44, 22, 5, 85, 167731),
}


def tool_uses(session: str, tool: str) -> int:
    """``tool_use`` blocks of ``tool`` in a session's files, counted on the raw lines (progress lines skipped)."""
    pattern = re.compile(r'"type":"tool_use","id":"[^"]+","name":"' + tool + '"')
    root = DATA / "claude-code"
    files = [root / f"{session}.jsonl", *sorted((root / session).glob("subagents/*.jsonl"))]
    return sum(len(pattern.findall(line)) for f in files for line in f.read_text(encoding="utf-8").split("\n")
               if '"type":"progress"' not in line)


@pytest.fixture(scope="module")
def claude():
    return import_paths("claude-code", [DATA / "claude-code"], conversation=False)


def test_claude_code_counts(claude):
    df, report = claude
    assert report.malformed == 0
    for session, (reads, edits, writes, bash, _) in UUID_SESSIONS.items():
        s = df[df["session"] == session]
        paths = s["path"].astype(str)
        assert (s["op"] == "read").sum() == reads
        assert (s["op"] == "edit").sum() == edits == tool_uses(session, "Edit") + tool_uses(session, "MultiEdit")
        assert (s["op"] == "write").sum() == writes == tool_uses(session, "Write")
        assert paths.str.startswith("tool://bash/").sum() == bash == tool_uses(session, "Bash")
        # every Read call is a read event, or an output when no file content came back
        assert reads + paths.str.startswith("tool://read/").sum() == tool_uses(session, "Read")


def test_claude_code_compactions(claude):
    df, _ = claude
    compactions = {c["session"]: c for c in df.attrs["compactions"]}
    assert set(compactions) == set(UUID_SESSIONS)
    for session, expected in UUID_SESSIONS.items():
        text = (DATA / "claude-code" / f"{session}.jsonl").read_text(encoding="utf-8")
        assert [int(t) for t in re.findall(r'"preTokens":(\d+)', text)] == [expected[4]]
        assert compactions[session]["pre_tokens"] == expected[4]
        assert compactions[session]["trigger"] == "auto"
        s = df[df["session"] == session]
        marked = s[s["compact_before"]]
        assert len(marked) == 1
        assert marked["arm"].iloc[0] == "main"
        assert marked["turn"].iloc[0] == compactions[session]["turn"]


def test_claude_code_subagents_and_usage(claude):
    df, _ = claude
    arms = {s: set(df.loc[df["session"] == s, "arm"].astype(str)) for s in UUID_SESSIONS}
    assert arms == {"258c7280-ae70-4798-800f-63464d01a85d": {"main", "a881341"},
                    "8463c716-a2ea-4c14-9efa-87158ebd9f20": {"main", "a7be2f0"}}
    sub = df[df["arm"] == "a7be2f0"]
    assert (len(sub), (sub["op"] == "read").sum()) == (19, 6)
    main = df[df["session"].isin(list(UUID_SESSIONS)) & (df["arm"] == "main")]
    assert (main["usage_input_tokens"] > 0).all()


def test_swe_agent_one_turn_per_step():
    df, report = import_paths("swe-agent", [DATA / "swe-agent"], conversation=False)
    assert report.malformed == 0
    for path in sorted((DATA / "swe-agent").glob("*.traj")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        steps = doc.get("trajectory") or [m for m in doc["history"] if m.get("role") == "assistant" and "action" in m]
        s = df[df["session"] == path.stem]
        assert s["turn"].nunique() == len(s) == len(steps)
    counts = df.groupby(["session", "op"], observed=True).size().unstack(fill_value=0)
    pydicom = next(name for name in counts.index if "pydicom" in name)
    assert dict(counts.loc[pydicom]) == {"read": 1, "edit": 2, "write": 1, "output": 8}


def test_openhands_v1_conversations_are_named_by_their_id_and_keep_their_condensations():
    df, report = import_paths("openhands", [DATA / "openhands-v1"])
    ids = sorted(p.name for p in (DATA / "openhands-v1").iterdir() if p.is_dir())
    assert sorted(report.sessions) == ids and not report.renamed          # not four "event_service"s
    marked = df[df["compact_before"]].groupby("session")["turn"].min()
    condensed = {p.parts[-4] for p in (DATA / "openhands-v1").glob("*/event_service/events/*.json")
                 if '"kind": "Condensation"' in p.read_text(encoding="utf-8")
                 or '"kind":"Condensation"' in p.read_text(encoding="utf-8")}
    assert set(marked.index) == condensed and len(condensed) == 2
    assert [c["trigger"] for c in report.compactions] == ["condenser", "condenser"]


def test_fidelity_compares_the_condensation_points_of_sessions_without_token_counts(tmp_path, capsys):
    from ctxbench.sim.cli import main

    trace = tmp_path / "oh.parquet"
    assert main(["import", "openhands", str(DATA / "openhands-v1"), "--out", str(trace)]) == 0
    capsys.readouterr()
    assert main(["fidelity", str(trace)]) == 2                       # no window to compare without --policy
    assert "with --policy" in capsys.readouterr().err
    assert main(["fidelity", str(trace), "--policy", "openhands-summarizing", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4 and {r["comparisons"] for r in rows} == {"compactions"}
    assert all(r["turns_compared"] == 0 and r["pearson"] is None for r in rows)
    compared = [r for r in rows if r["compactions_real"]]
    assert len(compared) == 2 and all(r["compactions_sim"] and isinstance(r["calls_apart"], int) for r in compared)
    # counted as the SDK's view counts events, the condenser (80 events, keep 4) condenses where the agent did,
    # before call 41 of both, and not at all in the two conversations where the agent never condensed
    assert [(r["compactions_real"], r["compactions_sim"][:1]) for r in compared] == [([41], [41])] * 2
    assert all(abs(r["calls_apart"]) <= 3 for r in compared)
    assert all(r["compactions_sim"] == [] for r in rows if not r["compactions_real"])
    out = tmp_path / "fid"
    assert main(["fidelity", str(trace), "--policy", "openhands-summarizing", "--out", str(out)]) == 0
    assert json.loads((out / "fidelity.json").read_text())["rows"][0]["comparisons"] == "compactions"
