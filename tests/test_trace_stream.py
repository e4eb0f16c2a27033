"""Traces read session by session: chunks of whole sessions equal to the whole file, row groups that
follow sessions, older layouts still read, and validation per chunk as strict as over the whole file."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxbench.traces.io as tio
from ctxbench.traces.errors import TraceError
from ctxbench.traces.generate import generate
from ctxbench.traces.io import META_KEY, load, open_trace, save, save_chunks
from ctxbench.traces.schema import MAX_TOTAL


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its categorical text as plain text: frames compared by value, whatever their categories."""
    return df.astype({c: str for c in ("session", "path", "arm", "op") if c in df.columns}).astype(object)


def _trace(lengths: list[int], seed: int = 0) -> pd.DataFrame:
    """Sessions of the given lengths, each with its own paths and a few repeated ones."""
    rng = np.random.default_rng(seed)
    rows = []
    for s, n in enumerate(lengths):
        for i in range(n):
            rows.append({"session": f"s{s}", "turn": i // 2, "ts_ms": 1000 * i, "op": "read" if i % 3 else "output",
                         "path": f"f{rng.integers(0, 4)}.py" if i % 3 else f"tool://bash/{i}",
                         "size_bytes": int(rng.integers(0, 5000))})
    return pd.DataFrame(rows)


def _chunks(path, rows: int) -> list[pd.DataFrame]:
    return list(open_trace(path, chunk_rows=rows))


def _old_layout(df: pd.DataFrame, path, row_group_size: int) -> None:
    """Write ``df`` as earlier versions did: one dictionary of every path, in each row group."""
    canonical = tio.validate(df)
    table = pa.Table.from_pandas(canonical, preserve_index=False)
    table = table.replace_schema_metadata({**table.schema.metadata, META_KEY: json.dumps({"from": "old"}).encode()})
    pq.write_table(table, path, row_group_size=row_group_size)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=8), rows=st.integers(1, 90),
       suffix=st.sampled_from([".parquet", ".csv", ".jsonl.gz"]))
def test_chunks_hold_whole_sessions_and_add_up_to_the_file(tmp_path_factory, lengths, rows, suffix):
    path = tmp_path_factory.mktemp("t") / f"t{suffix}"
    df = _trace(lengths)
    save(df, path)
    chunks = _chunks(path, rows)
    whole = load(path)
    pd.testing.assert_frame_equal(_plain(pd.concat([_plain(c) for c in chunks], ignore_index=True)), _plain(whole))
    seen = [set(c["session"].astype(str)) for c in chunks]
    assert sum(len(s) for s in seen) == len(lengths)   # no session in two chunks
    for chunk in chunks:   # at most `rows`, unless one session alone is longer
        assert len(chunk) <= max(rows, max(lengths))
        assert chunk.attrs == whole.attrs


def test_row_groups_end_where_sessions_end(tmp_path, monkeypatch):
    monkeypatch.setattr(tio, "ROW_GROUP_ROWS", 50)
    df = _trace([30, 30, 30, 200, 10])
    save(df, tmp_path / "t.parquet")
    file = pq.ParquetFile(tmp_path / "t.parquet")
    sizes = [file.metadata.row_group(i).num_rows for i in range(file.metadata.num_row_groups)]
    # 30+30 closes a group at 60; s2 closes one before the long s3, which is cut after 50 rows until its end
    # comes within 100; then the 10-row one
    assert sizes == [60, 30, 50, 50, 100, 10]
    groups = [set(file.read_row_group(i, columns=["session"]).column("session").to_pylist())
              for i in range(file.metadata.num_row_groups)]
    assert groups[:2] == [{"s0", "s1"}, {"s2"}] and all(g == {"s3"} for g in groups[2:5]) and groups[5] == {"s4"}
    assert file.schema_arrow.field("path").type == pa.string()   # each group its own dictionary of paths
    pd.testing.assert_frame_equal(_plain(load(tmp_path / "t.parquet")), _plain(tio.validate(df)))


@pytest.mark.parametrize("rows", [1, 7, 1000])
def test_a_file_written_by_earlier_versions_reads_the_same(tmp_path, rows):
    df = generate("mixed", sessions=3, seed=5)
    _old_layout(df, tmp_path / "old.parquet", row_group_size=500)
    assert len(pq.ParquetFile(tmp_path / "old.parquet").read_row_group(1).column("path").chunk(0).dictionary) == \
        df["path"].nunique()   # every group repeats the whole dictionary
    chunks = _chunks(tmp_path / "old.parquet", rows)
    assert all(len(c["path"].cat.categories) <= max(len(c), 64) * 3 for c in chunks)   # cut to each chunk's own
    pd.testing.assert_frame_equal(_plain(pd.concat([_plain(c) for c in chunks], ignore_index=True)), _plain(df))
    assert chunks[0].attrs == {"from": "old"}


def test_a_problem_in_a_later_chunk_names_the_row_of_the_whole_file(tmp_path):
    df = _trace([40, 40, 40])
    df.loc[95, "size_bytes"] = -3
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TraceError, match=r"^.*t\.csv: row 95, column 'size_bytes': must be >= 0, got -3$"):
        _chunks(tmp_path / "t.csv", 30)
    save(df, tmp_path / "t.parquet", check=False)
    with pytest.raises(TraceError, match=r"t\.parquet: row 95, column 'size_bytes': must be >= 0, got -3$"):
        _chunks(tmp_path / "t.parquet", 30)


def test_a_session_resuming_in_a_later_chunk_is_refused(tmp_path):
    df = _trace([20, 20, 20])
    df.loc[40:, "session"] = "s0"   # the third session is named as the first
    df.to_csv(tmp_path / "t.csv", index=False)
    expected = "row 40, column 'session': session 's0' resumes after other sessions' rows (first block at row 0)"
    for rows in (10, 25, 1000):
        with pytest.raises(TraceError, match=re.escape(expected)):
            _chunks(tmp_path / "t.csv", rows)


def test_sizes_passing_the_total_over_chunks_are_refused(tmp_path):
    third = MAX_TOTAL // 3 + 1
    df = _trace([2, 2, 2]).assign(size_bytes=[third, 0, third, 0, third, 0])
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TraceError, match=rf"column 'size_bytes': the values add up to {3 * third:,} by row 5, more "):
        _chunks(tmp_path / "t.csv", 2)
    with pytest.raises(TraceError, match=rf"the values add up to {3 * third:,}, more than"):
        load(tmp_path / "t.csv")


def test_csv_numbers_read_again_as_text_in_a_later_chunk_stay_exact(tmp_path):
    df = _trace([5, 5, 5]).astype({"size_bytes": object})
    df.loc[11, "size_bytes"] = "x7"           # and in a copy, a cell that is no number: quoted as written
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(TraceError, match=r"bad\.csv: row 11, column 'size_bytes': expected an integer, got 'x7'$"):
        _chunks(tmp_path / "bad.csv", 5)
    df.loc[11, "size_bytes"] = 7
    df.loc[12, "size_bytes"] = "12.0"          # a whole number written as a float: the fast reader gives floats
    df.loc[13, "size_bytes"] = str(2**49 + 1)  # beside it, the largest kind of number a trace holds
    df.to_csv(tmp_path / "t.csv", index=False)
    chunks = _chunks(tmp_path / "t.csv", 5)
    sizes = pd.concat([c["size_bytes"] for c in chunks], ignore_index=True)
    assert sizes.dtype == np.int64 and sizes[12] == 12 and sizes[13] == 2**49 + 1
    assert sizes.tolist() == load(tmp_path / "t.csv")["size_bytes"].tolist()


def test_chunks_written_in_order_are_validated_as_one_file(tmp_path):
    df = _trace([10, 10])
    later = df.iloc[5:].copy()
    later.loc[5, "turn"] = 0   # goes back from the turn of row 4 of the chunk before
    with pytest.raises(TraceError, match=r"t\.parquet: row 5, column 'turn': goes backwards within session 's0' "
                                         r"\(2 then 0\)"):
        save_chunks([df.iloc[:5], later], tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet").exists()
    save_chunks([df.iloc[:5], df.iloc[5:12], df.iloc[12:]], tmp_path / "t.parquet", metadata={"k": 1})
    pd.testing.assert_frame_equal(_plain(load(tmp_path / "t.parquet")), _plain(tio.validate(df)))
    assert load(tmp_path / "t.parquet").attrs == {"k": 1}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".jsonl.gz"])
def test_text_formats_written_in_chunks_equal_one_write(tmp_path, suffix):
    df = tio.validate(_trace([7, 9, 3]))
    save(df, tmp_path / f"one{suffix}")
    save_chunks([df.iloc[:4], df.iloc[4:4], df.iloc[4:]], tmp_path / f"many{suffix}")
    read = tio._open_text
    gz = suffix.endswith(".gz")
    with read(tmp_path / f"one{suffix}", gz, "r") as a, read(tmp_path / f"many{suffix}", gz, "r") as b:
        assert a.read() == b.read()

