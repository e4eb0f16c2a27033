"""`ctxbench bench`: what the pure contract costs, replaying one trace with lru in ctxbench and plain caches, and
what the offline Belady-Size bound costs beside ctxbench's lru."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from ctxbench.sim.analysis.bracket import belady_size_replay
from ctxbench.sim.cli.commands._options import check_int, int_option
from ctxbench.sim.errors import InputError
from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, replay_session
from ctxbench.strategies.contract import ContextBudget
from ctxbench.traces.generate import MAX_EVENTS

NAME = "bench"
HELP = "events/s of ctxbench's replay against a cachetools loop and libcachesim, on the same lru trace"
DESCRIPTION = """\
Replay one seeded trace (one read per turn, Zipf popularity over a fixed set of files, one size
per file, time strictly increasing) with least-recently-used eviction, three ways, in one run:

  ctxbench     replay_session with 'lru?max_entries=none': the whole replay (resolution, the
               engine, the per-turn log, its digest, the metrics); the built-in lru's kernel
               runs inside the compiled engine, as it does in every replay
  cachetools   a plain loop over cachetools.LRUCache (maxsize in bytes)
  libcachesim  libcachesim's LRU (C), one get() per request, when libcachesim is installed

and, beside them, ctxbench's replay of the offline Belady-Size bound on the same trace
(belady_size_replay, the opt:belady-size row of every run), as a multiple of the lru replay's time.

The runs are interleaved and repeated (--repeat); each figure is the median. Printed: events/s
of each, ctxbench's ratio to each, and the miss counts and missed bytes of each lru, which must be
equal (the semantics match on this trace; no file is larger than the budget). Exit 1 when they
differ.

Examples:
  ctxbench bench
  ctxbench bench --events 50000 --budget-tokens 50000 --json
"""

LRU_SPEC = "lru?max_entries=none"
MAX_FILES, MAX_REPEAT = 1_000_000, 1_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int_option("--events", 1, MAX_EVENTS), default=100_000, metavar="N",
                   help=f"reads in the trace, at most {MAX_EVENTS:,} (default 100000)")
    p.add_argument("--budget-tokens", type=float, default=200_000, metavar="N",
                   help="context budget in tokens, at least one byte and at most 2**53 bytes (default 200000)")
    p.add_argument("--files", type=int_option("--files", 1, MAX_FILES), default=4_000, metavar="N",
                   help=f"distinct files, at most {MAX_FILES:,} (default 4000)")
    p.add_argument("--zipf", type=float, default=1.1, metavar="S", help="Zipf exponent of popularity (default 1.1)")
    p.add_argument("--repeat", type=int_option("--repeat", 1, MAX_REPEAT), default=3, metavar="N",
                   help=f"timed repetitions, median kept, at most {MAX_REPEAT:,} (default 3)")
    p.add_argument("--seed", type=int_option("--seed", 0), default=0, help="trace seed, >= 0 (default 0)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")


def zipf_read_session(events: int, files: int, max_size: int, rng: np.random.Generator, *,
                      zipf: float = 1.1) -> SessionTrace:
    """One read per turn; file k is read with probability ∝ 1/(k+1)^zipf; one size per file.

    Sizes are lognormal (median 1.7 KB, p90 17 KB, as measured on real sessions), at most
    ``max_size``; ``ts_ms`` is the turn number, so strictly increasing.

    >>> st = zipf_read_session(5, 3, 100, np.random.default_rng(0))
    >>> len(st), st.ops.tolist(), st.turns.tolist()
    (5, [0, 0, 0, 0, 0], [0, 1, 2, 3, 4])
    """
    weights = 1.0 / np.arange(1, files + 1, dtype=float) ** zipf
    ids = rng.choice(files, size=events, p=weights / weights.sum())
    sizes = np.minimum(np.exp(rng.normal(math.log(1700), math.log(10) / 1.2816, files)).astype(np.int64) + 1,
                       max_size)
    names = np.array([f"src/m{k // 100:03d}/f{k:05d}.py" for k in range(files)], dtype=object)
    turns = list(range(events))
    return SessionTrace(session="bench", turns=turns, ops=[0] * events, paths=names[ids].tolist(),
                        sizes=sizes[ids].tolist(), ts_ms=list(turns), trace="bench")


def run_ctxbench(st: SessionTrace, max_bytes: int) -> tuple[int, int]:
    """(misses, missed bytes) of ``st`` replayed by ctxbench with lru and no entry cap."""
    result = replay_session(st, LRU_SPEC, ContextBudget(max_bytes=max_bytes))
    return result.row["misses"], int(result.log.columns["miss_bytes"].sum())


def run_belady_size(st: SessionTrace, max_bytes: int) -> tuple[int, int]:
    """(misses, missed bytes) of ``st`` replayed by ctxbench under the offline Belady-Size bound."""
    result = belady_size_replay(st, ContextBudget(max_bytes=max_bytes))
    return result.row["misses"], int(result.log.columns["miss_bytes"].sum())


def run_cachetools(paths: list[str], sizes: list[int], max_bytes: int) -> tuple[int, int]:
    """(misses, missed bytes) of a plain `cachetools.LRUCache` loop over the reads, its maxsize in bytes."""
    from cachetools import LRUCache

    cache = LRUCache(maxsize=max_bytes, getsizeof=int)
    get = cache.get
    misses = missed = 0
    for path, size in zip(paths, sizes):
        if get(path) is None:
            misses += 1
            missed += size
            cache[path] = size
    return misses, missed


def libcachesim_requests(st: SessionTrace) -> list:
    """libcachesim `Request` objects for ``st`` (integer object ids, one per path)."""
    import libcachesim

    ids: dict[str, int] = {}
    out = []
    for vtime, (path, size) in enumerate(zip(st.paths, st.sizes.tolist())):
        req = libcachesim.Request()
        req.obj_id = ids.setdefault(path, len(ids))
        req.obj_size = size
        req.clock_time = vtime
        out.append(req)
    return out


def run_libcachesim(requests: list, max_bytes: int) -> tuple[int, int]:
    """(misses, missed bytes) of libcachesim's LRU, its cache size in bytes."""
    import libcachesim

    cache = libcachesim.LRU(max_bytes, hashpower=max(12, int(math.log2(len(requests) + 1)) + 1))
    get = cache.get
    misses = missed = 0
    for req in requests:
        if not get(req):
            misses += 1
            missed += req.obj_size
    return misses, missed


def _available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def bench(events: int, budget_tokens: float, *, files: int = 4_000, zipf: float = 1.1, repeat: int = 3,
          seed: int = 0) -> dict:
    """Time the three replays, interleaved, ``repeat`` times each; medians, ratios and miss counts."""
    check_int("--events", events, 1, MAX_EVENTS)
    check_int("--files", files, 1, MAX_FILES)
    check_int("--repeat", repeat, 1, MAX_REPEAT)
    check_int("--seed", seed, 0)
    if not (math.isfinite(zipf) and zipf >= 0):
        raise InputError(f"--zipf must be a non-negative number, got {zipf}")
    max_bytes = budget_for_tokens(budget_tokens, option="--budget-tokens").max_bytes
    st = zipf_read_session(events, files, max_bytes, np.random.default_rng(seed), zipf=zipf)
    runners: dict[str, Callable[[], tuple[int, int]]] = {"ctxbench": lambda: run_ctxbench(st, max_bytes)}
    missing = []
    for name, module in (("cachetools", "cachetools"), ("libcachesim", "libcachesim")):
        if not _available(module):
            missing.append(name)
    if "cachetools" not in missing:
        sizes = st.sizes.tolist()   # Python ints, as a plain loop has them
        runners["cachetools"] = lambda: run_cachetools(st.paths, sizes, max_bytes)
    if "libcachesim" not in missing:
        requests = libcachesim_requests(st)
        runners["libcachesim"] = lambda: run_libcachesim(requests, max_bytes)
    timed = {**runners, "belady-size": lambda: run_belady_size(st, max_bytes)}
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    outcome: dict[str, tuple[int, int]] = {}
    for _ in range(repeat):
        for name, fn in timed.items():
            t0 = time.perf_counter()
            outcome[name] = fn()
            seconds[name].append(time.perf_counter() - t0)
    rates = {name: events / statistics.median(seconds[name]) for name in runners}
    return {
        "events": events, "files": files, "zipf": zipf, "seed": seed, "repeat": repeat,
        "budget_tokens": budget_tokens, "budget_bytes": max_bytes,
        "runners": {name: {"events_per_s": rates[name], "median_s": statistics.median(seconds[name]),
                           "seconds": seconds[name], "misses": outcome[name][0], "miss_bytes": outcome[name][1]}
                    for name in runners},
        "ratios": {name: rates["ctxbench"] / rates[name] for name in runners if name != "ctxbench"},
        "belady_size": {"median_s": statistics.median(seconds["belady-size"]), "seconds": seconds["belady-size"],
                        "misses": outcome["belady-size"][0], "miss_bytes": outcome["belady-size"][1],
                        "over_lru": statistics.median(seconds["belady-size"]) / statistics.median(seconds["ctxbench"])},
        "missing": missing,
        "misses_equal": len({outcome[name] for name in runners}) == 1,
    }


def run(args) -> int:
    report = bench(args.events, args.budget_tokens, files=args.files, zipf=args.zipf, repeat=args.repeat,
                   seed=args.seed)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print(f"lru on {report['events']:,} reads of {report['files']:,} files (Zipf {report['zipf']}), "
              f"budget {report['budget_tokens']:,.0f} tokens = {report['budget_bytes']:,} bytes, "
              f"median of {report['repeat']}:")
        for name, r in report["runners"].items():
            ratio = report["ratios"].get(name)
            versus = "" if ratio is None else f"   ctxbench = {ratio:.2f}× {name}"
            print(f"  {name:<12} {r['events_per_s']:>12,.0f} events/s{versus}")
        for name in report["missing"]:
            print(f"  {name:<12} not installed (pip install {name})")
        belady = report["belady_size"]
        print(f"  {'belady-size':<12} {report['events'] / belady['median_s']:>12,.0f} events/s   "
              f"{belady['over_lru']:.2f}× the time of ctxbench's lru replay ({belady['misses']:,} misses)")
        counts = ", ".join(f"{name} {r['misses']:,} ({r['miss_bytes']:,} bytes)"
                           for name, r in report["runners"].items())
        print(f"misses: {counts}: {'equal' if report['misses_equal'] else 'DIFFERENT'}")
    return 0 if report["misses_equal"] else 1
