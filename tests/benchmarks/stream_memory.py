"""Peak memory and time of `ctxbench run` and `ctxbench stats` as traces grow, session size fixed.

Builds traces of N events (sessions of one preset, 7,800 events each for ``long``), then measures
each command with ``/usr/bin/time -v`` where it exists (else the rusage of a wrapper process): the
largest resident set of the command and its workers, and the wall time. Memory that follows the
largest session, not the trace, stays flat as N grows.

    python tests/benchmarks/stream_memory.py --events 1e6 1e7 1e8 --dir /tmp/stream
    python tests/benchmarks/stream_memory.py --events 1e6 --ctxbench /path/to/main/.venv/bin/ctxbench \
        --ctxbench .venv/bin/ctxbench --layout old --dir /tmp/stream

``--unique-paths`` suffixes every path with its session, so that the trace holds as many distinct
paths as it has file, output, call and message events (the worst case for one dictionary of paths);
``--layout old`` writes the Parquet files as earlier versions did (one dictionary of every path, in
every row group; built in memory). The trace of N events is reused when it exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

SESSIONS_PER_CHUNK = 16
_RUSAGE_WRAPPER = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
                   "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
                   "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - t, rc)")


def build_trace(path: Path, events: int, *, preset: str = "long", unique_paths: bool = False, layout: str = "new",
                seed: int = 0) -> int:
    """Write a trace of at least ``events`` events to ``path`` (whole sessions of ``preset``, seeded), a chunk
    of sessions at a time; returns its events. ``layout`` ``old`` writes it as earlier versions did."""
    from ctxbench.traces.generate import generate
    from ctxbench.traces.io import save_chunks

    written = 0

    def chunks():
        nonlocal written
        index = 0
        while written < events:
            df = generate(preset, sessions=SESSIONS_PER_CHUNK, seed=seed + index)
            names = df["session"].cat.categories.astype(str)
            df["session"] = pd.Categorical.from_codes(df["session"].cat.codes,
                                                      categories=[f"c{index:05d}-{n}" for n in names])
            if unique_paths:   # each session's paths its own
                codes, names = pd.factorize(df["session"].cat.codes.to_numpy().astype(np.int64) * (1 << 32)
                                            + df["path"].cat.codes.to_numpy())
                sessions = df["session"].cat.categories.to_numpy(dtype=object)
                paths = df["path"].cat.categories.to_numpy(dtype=object)
                df["path"] = pd.Categorical.from_codes(codes, categories=[   # suffixed: tool:// and msg:// keep their kind
                    f"{paths[k & 0xFFFFFFFF]}@{sessions[k >> 32]}" for k in names.tolist()])
            written += len(df)
            index += 1
            yield df

    meta = {"benchmark": {"preset": preset, "events": events, "unique_paths": unique_paths, "seed": seed}}
    if layout == "old":
        _write_old_layout(list(chunks()), path, meta)
    else:
        save_chunks(chunks(), path, metadata=meta, check=False)
    return written


def _write_old_layout(frames: list[pd.DataFrame], path: Path, meta: dict) -> None:
    """One table, categorical columns as one dictionary each, in pyarrow's default row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctxbench.traces.io import META_KEY

    df = pd.concat(frames, ignore_index=True)
    for column in ("session", "path", "arm"):
        df[column] = pd.api.types.union_categoricals([f[column] for f in frames])
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: json.dumps(meta).encode()})
    pq.write_table(table, path, compression="zstd")


def measure(argv: list[str]) -> dict:
    """Peak resident set (MiB, the largest process of the command) and wall time (s) of ``argv``."""
    gnu_time = shutil.which("time") if Path("/usr/bin/time").exists() else None
    if gnu_time:
        started = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-v", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        wall = time.perf_counter() - started
        peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
        if done.returncode != 0 or peak is None:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
        return {"peak_mib": int(peak.group(1)) / 1024, "wall_s": wall}
    done = subprocess.run([sys.executable, "-c", _RUSAGE_WRAPPER, *argv], capture_output=True, text=True)
    peak, wall, rc = done.stdout.split()
    if int(rc) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
    return {"peak_mib": int(peak) / 1024, "wall_s": float(wall)}


def commands(ctxbench: str, trace: Path, out: Path, workers: int | None) -> dict[str, list[str]]:
    """The commands measured: the run of the issue (lru, per-turn log off) and the trace's statistics."""
    run = [ctxbench, "run", "--traces", str(trace), "--strategy", "lru", "--no-turns", "--out", str(out)]
    if workers is not None:
        run += ["--workers", str(workers)]
    return {"run": run, "stats": [ctxbench, "stats", str(trace), "--json"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", nargs="+", type=float, default=[1e5, 1e6], help="trace sizes, in events")
    parser.add_argument("--dir", type=Path, required=True, help="where traces and results go")
    parser.add_argument("--ctxbench", action="append", help="ctxbench executables to compare (default: this one's)")
    parser.add_argument("--preset", default="long")
    parser.add_argument("--unique-paths", action="store_true")
    parser.add_argument("--layout", choices=("new", "old"), default="new")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--only", choices=("run", "stats"), action="append", help="measure only these commands")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    executables = args.ctxbench or [str(Path(sys.executable).with_name("ctxbench"))]
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for events in (int(e) for e in args.events):
        name = f"{args.preset}-{events}{'-unique' if args.unique_paths else ''}-{args.layout}.parquet"
        trace = args.dir / name
        if not trace.exists():
            started = time.perf_counter()
            written = build_trace(trace, events, preset=args.preset, unique_paths=args.unique_paths,
                                  layout=args.layout)
            print(f"built {trace} ({written:,} events) in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for executable in executables:
            for command, argv_ in commands(executable, trace, args.dir / "results", args.workers).items():
                if args.only and command not in args.only:
                    continue
                figures = measure(argv_)
                rows.append({"ctxbench": executable, "command": command, "events": events, **figures})
                print(f"{executable}  {command:5s}  {events:>12,} events  peak {figures['peak_mib']:8.0f} MiB  "
                      f"{figures['wall_s']:8.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
