"""What the importer tests share: the file events of an import, and an import taken through every command."""

from __future__ import annotations

from pathlib import Path

from ctxbench.sim.cli import main


def file_events(df) -> list[tuple[int, str, str, int]]:
    """``(turn, op, path, size)`` of each read, edit, write and output, in trace order."""
    picked = df[df["op"].astype(str).isin(("read", "edit", "write", "output"))]
    return [(int(t), str(o), str(p), int(s)) for t, o, p, s in
            picked[["turn", "op", "path", "size_bytes"]].itertuples(index=False)]


def through_every_command(logs: Path, tmp_path: Path, policy: str) -> list[int]:
    """The exit codes of ``import auto``, ``stats``, ``run`` (lru and ``policy``) and ``fidelity`` on ``logs``."""
    out = tmp_path / "imported.parquet"
    return [main(["import", "auto", str(logs), "--out", str(out)]),
            main(["stats", str(out)]),
            main(["run", "--traces", str(out), "--strategy", "lru", policy, "--out", str(tmp_path / "r"),
                  "--workers", "1", "--no-report"]),
            main(["fidelity", str(out)])]
