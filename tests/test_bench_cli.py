"""`ctxbench bench`: runs on a small trace, prints events/s, ratios and equal miss counts (no timing asserts)."""

import json
import re
from importlib.util import find_spec

import numpy as np

from ctxbench.sim.cli import main
from ctxbench.sim.cli.commands.bench import run_cachetools, run_ctxbench, zipf_read_session
from ctxbench.traces.tokens import DEFAULT_TOKENS

OTHERS = [name for name in ("cachetools", "libcachesim") if find_spec(name)]


def test_bench_prints_rates_ratios_and_equal_misses(capsys):
    assert main(["bench", "--events", "3000", "--files", "200", "--budget-tokens", "20000", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ctxbench\s+[\d,]+ events/s", out)
    for name in OTHERS:
        assert re.search(rf"{name}\s+[\d,]+ events/s\s+ctxbench = \d+\.\d\d× {name}", out)
    assert re.search(r"belady-size\s+[\d,]+ events/s\s+\d+\.\d\d× the time of ctxbench's lru replay "
                     r"\([\d,]+ misses\)", out)
    line = next(x for x in out.splitlines() if x.startswith("misses:"))
    counts = re.findall(r"(\w+) ([\d,]+) \(([\d,]+) bytes\)", line)
    assert len(counts) == 1 + len(OTHERS) and len({(m, b) for _, m, b in counts}) == 1
    assert line.endswith("equal")


def test_bench_json(capsys):
    assert main(["bench", "--events", "2000", "--files", "100", "--budget-tokens", "5000", "--repeat", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["misses_equal"] is True
    assert set(report["runners"]) == {"ctxbench", *OTHERS}
    assert set(report["ratios"]) == set(OTHERS)
    misses = {r["misses"] for r in report["runners"].values()}
    assert len(misses) == 1 and 0 < misses.pop() < 2000
    assert report["budget_bytes"] == int(5_000 * DEFAULT_TOKENS.reference)
    assert all(r["events_per_s"] > 0 and len(r["seconds"]) == 1 for r in report["runners"].values())
    belady = report["belady_size"]
    assert belady["over_lru"] > 0 and len(belady["seconds"]) == 1
    assert 0 < belady["misses"] <= report["runners"]["ctxbench"]["misses"]   # the offline bound misses no more


def test_bench_trace_is_seeded_and_counts_agree():
    one = zipf_read_session(500, 50, 3_000, np.random.default_rng(7))
    two = zipf_read_session(500, 50, 3_000, np.random.default_rng(7))
    assert one.paths == two.paths and np.array_equal(one.sizes, two.sizes) and one.sizes.max() <= 3_000
    assert (np.diff(one.ts_ms) > 0).all()
    if "cachetools" in OTHERS:
        assert run_ctxbench(one, 10_000) == run_cachetools(one.paths, one.sizes.tolist(), 10_000)


def test_bench_bad_input_is_one_line_exit_2(capsys):
    assert main(["bench", "--events", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--events" in err[0]
    assert main(["bench", "--budget-tokens", "-5"]) == 2
