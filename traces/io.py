"""Load and save traces as Parquet, CSV or JSON lines (gzip for CSV/JSONL), chosen by suffix."""

from __future__ import annotations

import gzip
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from ctxbench.traces import safejson
from ctxbench.traces.errors import OutOfRoom, TraceError, no_room
from ctxbench.traces.schema import INT_COLUMNS, validate

__all__ = ["FORMATS", "trace_format", "load", "save", "META_KEY"]

FORMATS = {".parquet": "parquet", ".csv": "csv", ".csv.gz": "csv", ".jsonl": "jsonl", ".jsonl.gz": "jsonl"}
META_KEY = b"ctxbench"   # every Parquet trace ctxbench writes carries it: the mark that the file is ctxbench's
_TEXT_COLUMNS = {"session": str, "path": str, "arm": str, "op": str, "model": str}


def trace_format(path: str | os.PathLike) -> tuple[str, bool]:
    """The format (``parquet``, ``csv`` or ``jsonl``) and whether gzip applies, from the suffix."""
    name = Path(path).name.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(suffix):
            return FORMATS[suffix], suffix.endswith(".gz")
    raise TraceError(f"{path}: unknown trace format; use one of {', '.join(FORMATS)}")


def _open_text(path: Path, gz: bool, mode: str) -> IO[str]:
    """Open a trace file as UTF-8 text, through gzip when ``gz``."""
    if gz:
        return gzip.open(path, mode + "t", encoding="utf-8", newline="")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8", newline="")


def load(path: str | os.PathLike, *, check: bool = True) -> pd.DataFrame:
    """Read a trace file and validate it; any failure raises `TraceError` naming the file.

    Parquet files keep ``df.attrs`` (metadata written by `save`); CSV and JSONL do not. Integer
    columns are read exactly, and a value that is no integer in range is quoted as written.
    """
    p = Path(path)
    if p.is_dir():
        raise TraceError(f"{p}: is a directory, expected a trace file")
    fmt, gz = trace_format(p)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    if not p.is_file():
        raise TraceError(f"{p}: not a regular file")
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(p)
            df = table.to_pandas()
            raw = (table.schema.metadata or {}).get(META_KEY)
            if raw:
                meta = safejson.loads(raw)
                if not isinstance(meta, dict):
                    raise TraceError(f"{p}: its ctxbench metadata is not a JSON object")
                df.attrs.update(meta)
        elif fmt == "csv":
            df = _read_csv(p, gz)
        else:
            df = _read_jsonl(p, gz)
    except TraceError:
        raise
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(f"{p}: cannot read as {fmt}{' (gzip)' if gz else ''}: {detail}") from None
    if len(df.columns) == 0:
        raise TraceError(f"{p}: empty file, no columns")
    return validate(df, source=str(p)) if check else df


def _unparsed_int_columns(df: pd.DataFrame) -> list[str]:
    """Integer columns that the fast reader did not read as int64 (too large, floats, text, gaps)."""
    return [c for c in INT_COLUMNS if c in df.columns and df[c].dtype != np.int64]


def _read_csv(p: Path, gz: bool) -> pd.DataFrame:
    """A CSV trace, integer columns exact (read again as text when the fast reader cannot)."""
    with _open_text(p, gz, "r") as fh:
        df = pd.read_csv(fh, dtype=_TEXT_COLUMNS, keep_default_na=False, na_values=[""])
    odd = _unparsed_int_columns(df)
    if odd:  # read those columns again as the text written, for exact values and messages that quote it
        with _open_text(p, gz, "r") as fh:
            text = pd.read_csv(fh, usecols=odd, dtype=str, keep_default_na=False, na_values=[])
        for column in odd:
            df[column] = text[column].to_numpy(dtype=object)
    return df


def _json_records(p: Path, gz: bool, **options: Any) -> Iterator[dict]:
    """The objects of a JSON-lines file, one per non-blank line; `TraceError` naming a line that is not one."""
    with _open_text(p, gz, "r") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = safejson.loads(line, **options)
            except ValueError as exc:
                raise TraceError(f"{p}: line {number}: not valid JSON ({exc})") from None
            if not isinstance(record, dict):
                raise TraceError(f"{p}: line {number}: expected a JSON object, got {type(record).__name__}")
            yield record


def _read_jsonl(p: Path, gz: bool) -> pd.DataFrame:
    """A JSON-lines trace, integer columns exact (numbers kept as written when the fast reader cannot)."""
    df = pd.DataFrame.from_records(list(_json_records(p, gz)))
    odd = _unparsed_int_columns(df)
    if odd:  # read again keeping each number's text, for exact values and messages that quote it
        columns = {c: [] for c in odd}
        for record in _json_records(p, gz, parse_float=safejson.NumberText):
            for column, values in columns.items():
                values.append(record.get(column))
        for column, values in columns.items():
            df[column] = pd.Series(values, dtype=object, index=df.index)
    return df


def save(df: pd.DataFrame, path: str | os.PathLike, *, check: bool = True,
         metadata: dict[str, Any] | None = None, format_of: str | os.PathLike | None = None) -> Path:
    """Validate ``df`` and write it to ``path`` atomically: a temporary beside it, then a rename over it.

    The format follows the suffix of ``format_of`` (default ``path``), which messages name too:
    a caller that writes a temporary of its own passes the final path. ``metadata`` (merged over
    ``df.attrs``) is stored in Parquet files only, under `META_KEY`, which marks the file as
    ctxbench's. Whatever is at ``path`` is replaced; deciding whether it may be is the caller's.
    A file that cannot be written raises `TraceError` naming it, and leaves ``path`` as it was.
    """
    p = Path(path)
    shown = Path(format_of) if format_of is not None else p
    fmt, gz = trace_format(shown)
    out = validate(df, source=str(shown)) if check else df
    meta = {**out.attrs, **(metadata or {})}
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_temporary(p)
    except OSError as exc:
        raise TraceError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    try:
        _write(out, tmp, fmt, gz, meta)
        os.replace(tmp, p)
    except OSError as exc:
        if no_room(exc):
            raise OutOfRoom(f"{shown}: no room to write: {exc.strerror or exc}") from None
        raise TraceError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return p


def _new_temporary(path: Path) -> Path:
    """A new empty file beside ``path``, hidden, created with the permissions the umask gives."""
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue


def _write(df: pd.DataFrame, path: Path, fmt: str, gz: bool, meta: dict[str, Any]) -> None:
    """Write ``df`` to ``path`` in ``fmt`` (gzip-compressed when ``gz``), Parquet with ``meta``."""
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), META_KEY: json.dumps(meta, default=str).encode()})
        pq.write_table(table, path, compression="zstd")
    elif fmt == "csv":
        with _open_text(path, gz, "w") as fh:
            df.to_csv(fh, index=False)
    else:
        with _open_text(path, gz, "w") as fh:
            df.to_json(fh, orient="records", lines=True)
