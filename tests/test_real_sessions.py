"""The bundled real sessions: every agent's folder unpacks with its licence, into a new folder only."""

from __future__ import annotations

import pytest

from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers import detect
from ctxbench.traces.real_sessions import AGENTS, BUNDLE, unpack


def test_every_agent_unpacks_with_its_licence_and_sessions_of_its_format(tmp_path):
    root = unpack(tmp_path / "real")
    assert sorted(p.name for p in root.iterdir()) == sorted(AGENTS)
    for agent in AGENTS:
        assert (root / agent / "LICENSE").read_text().startswith("MIT License")
    assert {detect(p) for p in (root / "claude-code").glob("*.jsonl")} == {"claude-code"}
    assert {detect(p) for p in (root / "mini-swe-agent").glob("*.traj.json")} == {"mini-swe-agent"}
    assert {detect(p) for p in (root / "swe-agent").glob("*.traj")} == {"swe-agent"}
    assert len(list((root / "openhands-v1").glob("*/event_service/events/event-*.json"))) > 100
    assert (BUNDLE / "PROVENANCE.md").is_file()


def test_a_folder_that_is_not_empty_is_never_unpacked_into(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(TraceError, match="not empty"):
        unpack(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]
