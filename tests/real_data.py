"""The bundled real sessions (data/real-sessions), unpacked once per test process into a folder of its own."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from ctxbench.traces.real_sessions import unpack

_ROOT = Path(tempfile.mkdtemp(prefix="ctxbench-real-sessions-"))
atexit.register(shutil.rmtree, _ROOT, True)
#: One folder per agent (claude-code, codex, mini-swe-agent, openhands-v1, swe-agent), each with its LICENSE.
REAL_DATA: Path = unpack(_ROOT / "data")
