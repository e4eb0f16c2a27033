"""The trace schema: each error class named by row and column, and lossless round trips."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from ctxbench.traces.errors import TraceError
from ctxbench.traces.generate import generate
from ctxbench.traces.io import load, save
from ctxbench.traces.schema import COLUMNS, OPS, validate


def _tiny() -> pd.DataFrame:
    return pd.DataFrame({
        "session": ["s1", "s1", "s1", "s2", "s2"],
        "turn": [0, 1, 1, 0, 2],
        "ts_ms": [1000, 2000, 2000, 5000, 9000],
        "op": ["read", "edit", "output", "write", "read"],
        "path": ["a.py", "a.py", "tool://bash/1", "b.py", "b.py"],
        "size_bytes": [100, 120, 30, 80, 80],
    })


def _error(df: pd.DataFrame) -> str:
    with pytest.raises(TraceError) as info:
        validate(df, source="t.csv")
    message = str(info.value)
    assert "\n" not in message and message.startswith("t.csv: ")
    return message


def test_valid_trace_gets_canonical_dtypes():
    out = validate(_tiny())
    only_where_given = ("kind", "model", "exact_tokens", "truncated")   # only where a trace has them
    assert list(out.columns) == [c for c in COLUMNS if c not in only_where_given]
    for column in ("session", "path", "arm", "op"):
        assert isinstance(out[column].dtype, pd.CategoricalDtype)
    assert tuple(out["op"].cat.categories) == OPS
    for column in ("turn", "ts_ms", "size_bytes", "lines_changed"):
        assert out[column].dtype == np.int64
    assert (out["arm"] == "main").all() and (out["lines_changed"] == 0).all()


def test_truncated_is_optional_and_read_as_true_or_false():
    df = pd.DataFrame({"session": ["s"] * 3, "turn": [0, 0, 1], "ts_ms": [0, 0, 5], "op": ["read", "output", "edit"],
                       "path": ["a.py", "tool://bash/1", "a.py"], "size_bytes": [76_000, 30_000, 76_000],
                       "truncated": ["true", "0", "1"]})
    out = validate(df)
    assert out["truncated"].dtype == bool and out["truncated"].tolist() == [True, False, True]
    assert "truncated" not in validate(df.drop(columns="truncated")).columns   # an older trace: nothing cut


def test_a_bad_truncated_value_names_row_and_column():
    df = _tiny().assign(truncated=["false", "maybe"] + ["false"] * (len(_tiny()) - 2))
    message = _error(df)
    assert "row 1, column 'truncated': expected true or false, got 'maybe'" in message


@pytest.mark.parametrize("op", ["message", "call", "overhead"])
def test_only_a_tools_result_can_be_truncated(op):
    df = pd.DataFrame({"session": ["s", "s"], "turn": [0, 0], "ts_ms": [0, 0], "op": ["read", op],
                       "path": ["a.py", "msg://user/1"], "size_bytes": [10, 20], "truncated": [True, True]})
    message = _error(df)
    assert f"row 1, column 'truncated': a {op} event cannot be truncated" in message and "row 0" not in message


@pytest.mark.parametrize("column", ["session", "turn", "ts_ms", "op", "path", "size_bytes"])
def test_missing_column_is_named(column):
    assert _error(_tiny().drop(columns=[column])) == f"t.csv: column {column!r}: missing column"


def test_negative_size_names_row_and_column():
    df = _tiny()
    df.loc[3, "size_bytes"] = -5
    assert _error(df) == "t.csv: row 3, column 'size_bytes': must be >= 0, got -5"


@pytest.mark.parametrize("bad", [2.5, "12kb"])
def test_non_integer_size_names_row_and_column(bad):
    df = _tiny().astype({"size_bytes": object})
    df.loc[2, "size_bytes"] = bad
    assert _error(df) == f"t.csv: row 2, column 'size_bytes': expected an integer, got {bad!r}"


def test_unknown_op_names_row_and_column():
    df = _tiny()
    df.loc[1, "op"] = "delete"
    message = _error(df)
    assert message.startswith("t.csv: row 1, column 'op': unknown op 'delete'")
    assert "read, edit, write, output" in message


def test_turn_going_backwards_names_row_and_session():
    df = _tiny()
    df.loc[2, "turn"] = 0
    assert _error(df) == "t.csv: row 2, column 'turn': goes backwards within session 's1' (1 then 0)"


def test_time_going_backwards_names_row_and_session():
    df = _tiny()
    df.loc[4, "ts_ms"] = 4000
    assert _error(df) == "t.csv: row 4, column 'ts_ms': goes backwards within session 's2' (5000 then 4000)"


def test_backwards_across_sessions_is_fine():
    df = _tiny()
    assert df.loc[3, "turn"] < df.loc[2, "turn"] and df.loc[3, "ts_ms"] > 0
    validate(df)


@pytest.mark.parametrize("empty", ["", None])
def test_empty_path_names_row_and_column(empty):
    df = _tiny()
    df.loc[0, "path"] = empty
    assert _error(df) == "t.csv: row 0, column 'path': empty value"


def test_several_problems_are_all_named():
    df = _tiny()
    df.loc[1, "op"] = "nope"
    df.loc[4, "size_bytes"] = -1
    message = _error(df)
    assert re.search(r"row 1, column 'op'", message) and re.search(r"row 4, column 'size_bytes'", message)


def _awkward() -> pd.DataFrame:
    """Values that break naive CSV/JSON writers: commas, quotes, newlines, unicode, NA-like names."""
    paths = ["dir, with comma/a.py", 'q"uote.py', "new\nline.md", "ü/ñ/文件.py", "NA", "null", "None", " lead.py"]
    n = len(paths)
    return validate(pd.DataFrame({
        "session": ["s,1"] * 4 + ["NA"] * (n - 4),
        "turn": np.arange(n), "ts_ms": 1_735_689_600_000 + 1000 * np.arange(n),
        "op": ["read", "edit", "write", "output", "read", "edit", "read", "output"],
        "path": paths, "size_bytes": [0, 2**40, 7, 1, 2, 3, 4, 5],
        "arm": ["main", "arm1", "main", "arm1", "main", "main", "arm1", "main"],
        "lines_changed": [0, 12, 3, 0, 0, 1, 0, 0],
    }))


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal values and canonical dtypes (category order may differ between formats)."""
    assert list(a.columns) == list(b.columns)
    for column in a.columns:
        if isinstance(a[column].dtype, pd.CategoricalDtype):
            assert isinstance(b[column].dtype, pd.CategoricalDtype), column
            assert a[column].astype(str).tolist() == b[column].astype(str).tolist(), column
        else:
            assert b[column].dtype == a[column].dtype, column
            assert np.array_equal(a[column].to_numpy(), b[column].to_numpy()), column


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".csv.gz", ".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize("make", [_awkward, lambda: generate("mixed", sessions=2, seed=5, arms=2, tool_calls=40)],
                         ids=["awkward", "generated"])
def test_round_trip_is_lossless(tmp_path, suffix, make):
    df = make()
    path = save(df, tmp_path / f"t{suffix}")
    _same(df, load(path))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_parquet_keeps_the_generator_recipe(tmp_path):
    df = generate("debug-loop", sessions=1, seed=9, tool_calls=30)
    back = load(save(df, tmp_path / "t.parquet"))
    assert back.attrs["generator"]["preset"] == "debug-loop"
    assert back.attrs["generator"]["seed"] == 9
    assert back.attrs["generator"]["overrides"] == {"tool_calls": 30}


def test_save_writes_any_path_atomically_by_itself(tmp_path):
    target = tmp_path / "t.csv"
    target.write_text("a user's file\n")   # save has no output-safety rule: that is the command line's
    assert save(_tiny(), target) == target
    _same(validate(_tiny()), load(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_save_to_a_temporary_in_the_format_of_the_final_path(tmp_path):
    tmp = tmp_path / ".t.csv.gz.partial"
    save(_tiny(), tmp, format_of=tmp_path / "t.csv.gz")
    final = tmp.rename(tmp_path / "t.csv.gz")
    _same(validate(_tiny()), load(final))
    with pytest.raises(TraceError, match=r"^t\.csv: row 0, column 'size_bytes': must be >= 0"):
        save(_tiny().assign(size_bytes=-1), tmp_path / "x", format_of="t.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv.gz"]


def test_a_save_that_cannot_write_names_the_path_and_leaves_no_temporary(tmp_path):
    (tmp_path / "t.csv").mkdir()
    with pytest.raises(TraceError, match=r"t\.csv: cannot write: Is a directory"):
        save(_tiny(), tmp_path / "t.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"] and not any((tmp_path / "t.csv").iterdir())
