"""The real agent sessions bundled with the source (data/real-sessions): where they are and how to unpack them."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from ctxbench.traces.errors import TraceError

__all__ = ["BUNDLE", "AGENTS", "unpack"]

#: The folder of the archives, their licences and their provenance, in a source checkout.
BUNDLE = Path(__file__).resolve().parents[1] / "data" / "real-sessions"
#: One archive per agent, named after the folder it unpacks to (and the importer that reads it).
AGENTS = ("claude-code", "codex", "mini-swe-agent", "openhands-v1", "swe-agent")


def unpack(dest: str | os.PathLike) -> Path:
    """Unpack every bundled archive into ``dest`` (which must not exist yet, or be empty), one folder per
    agent, each with its ``LICENSE``; return ``dest``. Only regular files and folders are extracted, never
    outside ``dest`` (tarfile's ``data`` filter); a missing or broken archive is a `TraceError`.
    """
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise TraceError(f"{dest}: not empty; the real sessions unpack into a new folder")
    dest.mkdir(parents=True, exist_ok=True)
    for agent in AGENTS:
        archive = BUNDLE / f"{agent}.tar.xz"
        try:
            with tarfile.open(archive, "r:xz") as tar:
                members = tar.getmembers()
                if any(not (m.isfile() or m.isdir()) for m in members):
                    raise TraceError(f"{archive}: holds something other than files and folders")
                tar.extractall(dest, members=members, filter="data")
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise TraceError(f"{archive}: cannot unpack the bundled sessions ({exc})") from None
        (dest / agent / "LICENSE").write_bytes((BUNDLE / f"LICENSE.{agent}").read_bytes())
    return dest
