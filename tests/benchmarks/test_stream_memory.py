"""Peak memory of `ctxbench run --strategy lru --no-turns` and `ctxbench stats` follows the largest session,
not the trace: ten times the sessions, of one size, add next to nothing (tests/benchmarks/stream_memory.py
measures the same at full scale). Chunks and row groups are made small here, so that small traces hold
many of each, as the large ones do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_memory import build_trace, measure  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads peak RSS")]

SMALL = ("import sys; import ctxbench.traces.io as io; io.CHUNK_ROWS = 4096; io.ROW_GROUP_ROWS = 2048; "
         "from ctxbench.sim.cli import main; sys.exit(main(sys.argv[1:]))")
#: What each event beyond the smaller trace may add to the peak, in bytes (earlier versions: about 600).
MAX_BYTES_PER_EVENT = 40


def _traces(tmp_path: Path) -> tuple[tuple[int, Path], tuple[int, Path]]:
    import ctxbench.traces.io as io

    sizes = []
    for events in (40_000, 400_000):
        path = tmp_path / f"t{events}.parquet"
        io_rows, io.ROW_GROUP_ROWS = io.ROW_GROUP_ROWS, 2048
        try:
            sizes.append((build_trace(path, events, preset="mixed", unique_paths=True), path))
        finally:
            io.ROW_GROUP_ROWS = io_rows
    return sizes[0], sizes[1]


@pytest.mark.parametrize("command", [["run", "--strategy", "lru", "--no-turns", "--workers", "1"], ["stats", "--json"]])
def test_peak_memory_does_not_grow_with_the_trace(tmp_path, command):
    (small_events, small), (large_events, large) = _traces(tmp_path)
    peaks = []
    for trace in (small, large):
        argv = [sys.executable, "-c", SMALL, command[0]] + (["--traces"] if command[0] == "run" else []) + [str(trace)]
        if command[0] == "run":
            argv += command[1:] + ["--out", str(tmp_path / "results")]
        else:
            argv += command[1:]
        peaks.append(measure(argv)["peak_mib"])
    per_event = (peaks[1] - peaks[0]) * 2**20 / (large_events - small_events)
    assert per_event < MAX_BYTES_PER_EVENT, f"peaks {peaks} MiB: {per_event:.0f} bytes an added event"
