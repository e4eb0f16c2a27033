"""Peak memory of `ctxbench run --strategy lru --no-turns` and `ctxbench stats` follows the largest session,
not the trace: three times the sessions, of one size, add next to nothing to it (tests/benchmarks/stream_memory.py
measures the same at full scale: 10M and 100M events)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_memory import build_trace, commands, measure  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads peak RSS")]

#: What each event beyond the smaller trace may add to the peak, in bytes. Measured (the least of two runs,
#: three times, beside a busy core): run -7 to 3, stats 17 to 22 (the trace-wide tallies of distinct paths:
#: every tool output has its own path here); earlier versions about 600 for both.
MAX_BYTES_PER_EVENT = 40
#: Each peak is the least of this many runs: Arrow's memory pool returns memory on its own schedule, so one
#: run's peak may stand 30-80 MiB above another's of the same command (2M events: 15-40 bytes an event).
#: Five runs of stats on a quiet machine: 377-397 MiB (1M events), 422-459 (3M), 24 bytes an event from the
#: least of each; the least of two, beside a test suite and a check, once gave 53.
RUNS = 3
CTXBENCH = str(Path(sys.executable).with_name("ctxbench"))


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[tuple[int, Path]]:
    folder = tmp_path_factory.mktemp("stream")
    return [(build_trace(folder / f"t{events}.parquet", events, unique_paths=True), folder / f"t{events}.parquet")
            for events in (1_000_000, 3_000_000)]


@pytest.mark.parametrize("command", ["run", "stats"])
def test_peak_memory_does_not_grow_with_the_trace(traces, tmp_path, command):
    peaks = [min(measure(commands(CTXBENCH, trace, tmp_path / "results", None)[command])["peak_mib"]
                 for _ in range(RUNS)) for _, trace in traces]
    per_event = (peaks[1] - peaks[0]) * 2**20 / (traces[1][0] - traces[0][0])
    assert per_event < MAX_BYTES_PER_EVENT, f"peaks {peaks} MiB: {per_event:.0f} bytes an added event"
