"""The integer limits of traces: every value exact or refused (exit 2, quoted as written), no overflow past them."""

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxbench.sim.engine.arm as engine_arm
from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.cli import main
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.measures import TURN_FIELDS, TurnLog, summarise
from ctxbench.traces.errors import TraceError
from ctxbench.traces.io import load
from ctxbench.traces.schema import INT_COLUMNS, LIMITS, MAX_TOTAL, MAX_VALUE, exact_sum, validate
from ctxbench.traces.stats import stats

HEADER = ("session", "turn", "ts_ms", "op", "path", "size_bytes", "lines_changed")
FAST = ["--workers", "1", "--no-bracket", "--no-report"]


def _row(**values) -> dict:
    row = {"session": "s", "turn": 0, "ts_ms": 0, "op": "edit", "path": "a.py", "size_bytes": 10, "lines_changed": 1}
    row.update(values)
    return row


def write_trace(path: Path, rows: list[dict]) -> Path:
    """``rows`` written by hand (no pandas), so each value is in the file exactly as given."""
    name = path.name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:
        if ".csv" in name:
            fh.write(",".join(HEADER) + "\n")
            for row in rows:
                fh.write(",".join(str(row[c]) for c in HEADER) + "\n")
        else:
            for row in rows:
                fh.write("{" + ", ".join(f'"{c}": {row[c] if isinstance(row[c], (int, _Raw)) else json.dumps(row[c])}'
                                         for c in HEADER) + "}\n")
    return path


class _Raw(str):
    """A value written into a JSON line as it is (a number's text, ``true``, ``null``)."""


def _exit_and_error(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return code, err


# --- the reproductions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [2**63, 2**70, 2**62])
def test_huge_size_in_a_csv_is_refused_by_stats_and_run_quoting_it(tmp_path, capsys, value):
    trace = write_trace(tmp_path / "t.csv", [_row(size_bytes=value), _row(turn=1, ts_ms=1, size_bytes=value)])
    for argv in (["stats", trace], ["run", "--traces", trace, "--strategy", "lru", "--out", tmp_path / "r", *FAST]):
        code, err = _exit_and_error(capsys, *argv)
        assert code == 2, argv
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert f"{trace}: row 0, column 'size_bytes'" in err
        assert str(value) in err and "-9223372036854775808" not in err
    assert not (tmp_path / "r").exists()


def test_sizes_adding_up_past_the_limit_are_refused(tmp_path, capsys):
    half = MAX_TOTAL // 2 + 1
    trace = write_trace(tmp_path / "t.csv", [_row(size_bytes=half), _row(turn=1, ts_ms=1, size_bytes=half)])
    code, err = _exit_and_error(capsys, "stats", trace)
    assert code == 2
    assert "column 'size_bytes'" in err and f"{2 * half:,}" in err and "2**50" in err


def test_the_traces_of_one_run_are_held_to_the_total_together(tmp_path, capsys):
    half = MAX_TOTAL // 2 + 1
    a = write_trace(tmp_path / "a.csv", [_row(size_bytes=half)])
    b = write_trace(tmp_path / "b.csv", [_row(size_bytes=half)])
    assert main(["stats", str(a)]) == 0  # each alone is fine
    capsys.readouterr()
    code, err = _exit_and_error(capsys, "run", "--traces", a, b, "--strategy", "lru", "--out", tmp_path / "r", *FAST)
    assert code == 2 and "--traces" in err and f"{2 * half:,}" in err


@pytest.mark.parametrize("text, quoted", [
    ("1e20", "'1e20'"), ("1.5", "'1.5'"), ("", "''"), ("12kb", "'12kb'"), ("1_000", "'1_000'"),
    ("1.0000000000000000001", "'1.0000000000000000001'"), ("nan", "'nan'"), ("-inf", "'-inf'"),
    ("9" * 5000, "'" + "9" * 5000 + "'"),
])
def test_csv_cells_that_are_no_integer_in_range_are_quoted_as_written(tmp_path, text, quoted):
    trace = write_trace(tmp_path / "t.csv", [_row(), _row(turn=1, ts_ms=1, size_bytes=text)])
    with pytest.raises(TraceError) as info:
        load(trace)
    assert f"row 1, column 'size_bytes'" in str(info.value) and quoted in str(info.value)


@pytest.mark.parametrize("text, quoted", [
    ("1e20", "1e20"), ("1.5", "1.5"), ("true", "True"), ("null", "None"), ('"12kb"', "'12kb'"), ("[1]", "[1]"),
    ("1.0000000000000000001", "1.0000000000000000001"), ("18446744073709551616", "18446744073709551616"),
])
def test_jsonl_values_that_are_no_integer_in_range_are_quoted_as_written(tmp_path, text, quoted):
    trace = write_trace(tmp_path / "t.jsonl", [_row(), _row(turn=1, ts_ms=1, size_bytes=_Raw(text))])
    with pytest.raises(TraceError) as info:
        load(trace)
    assert "row 1, column 'size_bytes'" in str(info.value) and quoted in str(info.value)


@pytest.mark.parametrize("text, value", [("5.0", 5), ("1e3", 1000), ('"7"', 7), ('"007"', 7), ('" +7 "', 7)])
def test_integers_written_otherwise_load_exactly(tmp_path, text, value):
    for name in ("t.csv", "t.jsonl"):
        raw = text.strip('"') if name.endswith(".csv") else _Raw(text)
        trace = write_trace(tmp_path / name, [_row(), _row(turn=1, ts_ms=1, size_bytes=raw)])
        assert load(trace)["size_bytes"].tolist() == [10, value], name


def test_parquet_unsigned_float_decimal_and_text_columns_are_exact_or_refused(tmp_path):
    base = {"session": ["s", "s"], "turn": [0, 1], "ts_ms": [0, 1], "op": ["read", "read"], "path": ["a", "b"]}
    cases = {
        "u64": (pa.array([5, 2**63], pa.uint64()), "9223372036854775808"),
        "f64": (pa.array([5.0, 1e20], pa.float64()), "1e+20"),
        "dec": (pa.array([Decimal(5), Decimal(2**60)], pa.decimal128(38, 0)), str(2**60)),
        "txt": (pa.array(["5", str(2**70)], pa.string()), f"'{2**70}'"),
    }
    for name, (sizes, quoted) in cases.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({**{k: pa.array(v) for k, v in base.items()}, "size_bytes": sizes}), path)
        with pytest.raises(TraceError, match="row 1, column 'size_bytes'") as info:
            load(path)
        assert quoted in str(info.value), name
    ok = tmp_path / "ok.parquet"
    pq.write_table(pa.table({**{k: pa.array(v) for k, v in base.items()},
                             "size_bytes": pa.array([5, MAX_VALUE - 5], pa.uint64())}), ok)
    assert load(ok)["size_bytes"].tolist() == [5, MAX_VALUE - 5]


def test_a_dataframe_passed_to_the_api_is_held_to_the_limits():
    df = pd.DataFrame([_row(size_bytes=2**62)])
    with pytest.raises(TraceError, match="must be at most 1,125,899,906,842,624"):
        validate(df)
    canonical = validate(pd.DataFrame([_row()])).assign(size_bytes=np.int64(2**62))
    with pytest.raises(TraceError, match="size_bytes"):  # canonical dtypes must not skip the check
        stats(canonical)
    with pytest.raises(TraceError, match="ts_ms"):
        validate(pd.DataFrame([_row(ts_ms=-(2**51))]))


# --- the property ----------------------------------------------------------------------------------------------


wide = st.one_of(st.integers(-2**80, 2**80), st.integers(-2**51, 2**51),
                 st.sampled_from([0, -1, MAX_VALUE, MAX_VALUE + 1, -MAX_VALUE, -MAX_VALUE - 1, 2**63 - 1, 2**63,
                                  -(2**63), -(2**63) - 1, 2**64]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=wide, column=st.sampled_from(sorted(INT_COLUMNS)), name=st.sampled_from(["t.csv", "t.jsonl", "t.csv.gz"]))
def test_any_integer_loads_with_its_exact_value_or_is_refused_quoting_it(tmp_path, value, column, name):
    trace = write_trace(tmp_path / name, [_row(**{column: value})])
    low, high = LIMITS[column]
    try:
        df = load(trace)
    except TraceError as exc:
        assert not low <= value <= high
        assert f"{trace}: row 0, column {column!r}" in str(exc) and str(value) in str(exc)
    else:
        assert low <= value <= high
        assert df[column].dtype == np.int64 and int(df[column].iloc[0]) == value


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=wide, name=st.sampled_from(["t.csv", "t.jsonl"]))
def test_stats_and_run_take_any_size_exactly_or_exit_2(tmp_path, capsys, value, name):
    trace = write_trace(tmp_path / name, [_row(op="read", size_bytes=value)])
    out = tmp_path / "r"
    code_stats = main(["stats", str(trace), "--json"])
    stats_out = capsys.readouterr()
    code_run = main(["run", "--traces", str(trace), "--strategy", "lru", "--out", str(out), "--budget-tokens", "1e9",
                     "--workers", "1", "--no-report", "--no-bracket"])
    run_err = capsys.readouterr().err
    if 0 <= value <= MAX_VALUE:
        assert (code_stats, code_run) == (0, 0)
        assert json.loads(stats_out.out)["overall"]["unique_bytes"] == value
        turns = pd.read_parquet(out / "turns.parquet")
        assert int(turns["miss_bytes"].sum()) == value
    else:
        assert (code_stats, code_run) == (2, 2)
        for err in (stats_out.err, run_err):
            assert len(err.strip().splitlines()) == 1 and str(value) in err and "'size_bytes'" in err


# --- no overflow past the limits -------------------------------------------------------------------------------


def _extreme_trace() -> pd.DataFrame:
    """Sessions at the limits: sizes adding up to 2**50, turns and timestamps at both ends of the range."""
    big = MAX_TOTAL // 8
    rows = []
    for k, (s, t0, ts0) in enumerate((("a", 0, -MAX_VALUE), ("b", MAX_VALUE - 3, MAX_VALUE - 3))):
        for i, (op, path) in enumerate((("read", "x"), ("edit", "x"), ("read", "y"), ("read", "x"))):
            rows.append({"session": s, "turn": t0 + i, "ts_ms": ts0 + i, "op": op, "path": path,
                         "size_bytes": big, "lines_changed": big // 4 if op == "edit" else 0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("compiled", [True, False])
def test_replays_and_statistics_at_the_limits_do_not_overflow(monkeypatch, compiled):
    if compiled and not BUILT:
        pytest.skip("the compiled engine is not built")
    monkeypatch.setattr(engine_arm, "ENABLED", compiled)
    df = validate(_extreme_trace())
    budget = (MAX_TOTAL // 8) * 1.5 / 3.8  # one big entry fits, two do not: evictions and re-reads
    grid = run_grid(df, ["lru", "importance", "size", "gdsf"], [budget, 2**52 / 3.8], workers=1)
    r = grid.results
    assert (r["violations"] == 0).all()
    small = r[r["budget_tokens"] == budget]
    live = small[~small["strategy"].str.startswith("opt:")]
    assert (live["reread_bytes"] > 0).all() and (r["reread_bytes"] <= 2 * MAX_TOTAL).all()
    assert r["mean_occupancy"].between(0, 1).all() and np.isfinite(r["reread_tokens"]).all()
    overall = stats(df)["overall"]
    assert overall["unique_bytes"] == 4 * (MAX_TOTAL // 8)  # x and y in each session, each at its largest
    assert (stats(df)["sessions"]["duration_s"] == 0.003).all()


def test_mean_occupancy_sums_turns_exactly():
    turns = 10_000
    table = np.zeros((turns, len(TURN_FIELDS)), dtype=np.int64)
    table[:, TURN_FIELDS.index("occupancy_bytes")] = MAX_VALUE  # the sum passes 2**63
    row = summarise(TurnLog(table), max_bytes=2 * MAX_VALUE)
    assert row["mean_occupancy"] == 0.5


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50))
def test_exact_sum_is_the_exact_sum(values):
    assert exact_sum(np.array(values, dtype=np.int64)) == sum(values)
