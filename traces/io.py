"""Load, stream and save traces as Parquet, CSV or JSON lines (gzip for CSV/JSONL), chosen by suffix."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from ctxbench.traces import safejson
from ctxbench.traces.errors import OutOfRoom, TraceError, no_room
from ctxbench.traces.schema import INT_COLUMNS, Carry, validate

__all__ = ["FORMATS", "trace_format", "load", "save", "save_chunks", "open_trace", "TraceReader", "META_KEY",
           "ROW_GROUP_ROWS", "CHUNK_ROWS"]

FORMATS = {".parquet": "parquet", ".csv": "csv", ".csv.gz": "csv", ".jsonl": "jsonl", ".jsonl.gz": "jsonl"}
META_KEY = b"ctxbench"   # every Parquet trace ctxbench writes carries it: the mark that the file is ctxbench's
_TEXT_COLUMNS = {"session": str, "path": str, "arm": str, "op": str, "model": str}
#: The rows of a Parquet row group that `save` aims at: a group ends at the end of a session once it
#: holds this many rows, and a session longer than twice this is cut every this many rows.
ROW_GROUP_ROWS = 1 << 16
#: The rows of a chunk that `open_trace` aims at; a chunk holds whole sessions, at least one.
CHUNK_ROWS = 1 << 17
#: Columns written as plain text, so that each row group's dictionary holds only its own values
#: (one dictionary of every path, repeated in each row group, is what made large traces slow).
_PLAIN_COLUMNS = ("session", "path", "arm")


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


def _checked_path(path: str | os.PathLike) -> tuple[Path, str, bool]:
    """The path, format and gzip flag of a trace file to read; `TraceError` if it is none."""
    p = Path(path)
    if p.is_dir():
        raise TraceError(f"{p}: is a directory, expected a trace file")
    fmt, gz = trace_format(p)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    if not p.is_file():
        raise TraceError(f"{p}: not a regular file")
    return p, fmt, gz


def _read_failure(p: Path, fmt: str, gz: bool, exc: Exception) -> TraceError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return TraceError(f"{p}: cannot read as {fmt}{' (gzip)' if gz else ''}: {detail}")


def load(path: str | os.PathLike, *, check: bool = True) -> pd.DataFrame:
    """Read a whole trace file and validate it; any failure raises `TraceError` naming the file.

    Parquet files keep ``df.attrs`` (metadata written by `save`); CSV and JSONL do not. Integer
    columns are read exactly, and a value that is no integer in range is quoted as written.
    `open_trace` reads a file session by session instead, in memory that follows its largest session.
    """
    p, fmt, gz = _checked_path(path)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            file = pq.ParquetFile(p, read_dictionary=_text_columns(p))
            df = file.read().to_pandas()
            df.attrs.update(_metadata(p, file.schema_arrow.metadata))
        elif fmt == "csv":
            df = _read_csv(p, gz)
        else:
            df = _read_jsonl(p, gz)
    except TraceError:
        raise
    except Exception as exc:
        raise _read_failure(p, fmt, gz, exc) from None
    if len(df.columns) == 0:
        raise TraceError(f"{p}: empty file, no columns")
    return validate(df, source=str(p)) if check else df


def _text_columns(p: Path) -> list[str]:
    """The columns of `_PLAIN_COLUMNS` a Parquet file holds: read as dictionaries, one per row group."""
    import pyarrow.parquet as pq

    return [c for c in _PLAIN_COLUMNS if c in pq.read_schema(p).names]


def _metadata(p: Path, metadata: dict | None) -> dict:
    """The ctxbench metadata of a Parquet file (`META_KEY`), as a dict."""
    raw = (metadata or {}).get(META_KEY)
    if not raw:
        return {}
    meta = safejson.loads(raw)
    if not isinstance(meta, dict):
        raise TraceError(f"{p}: its ctxbench metadata is not a JSON object")
    return meta


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
            record = _json_record(p, number, line, **options)
            if record is not None:
                yield record


def _json_record(p: Path, number: int, line: str, **options: Any) -> dict | None:
    """The object on line ``number`` (None for a blank line)."""
    if not line.strip():
        return None
    try:
        record = safejson.loads(line, **options)
    except ValueError as exc:
        raise TraceError(f"{p}: line {number}: not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise TraceError(f"{p}: line {number}: expected a JSON object, got {type(record).__name__}")
    return record


def _read_jsonl(p: Path, gz: bool) -> pd.DataFrame:
    """A JSON-lines trace, integer columns exact (numbers kept as written when the fast reader cannot)."""
    df = pd.DataFrame.from_records(list(_json_records(p, gz)))
    odd = _unparsed_int_columns(df)
    if odd:  # read again keeping each number's text, for exact values and messages that quote it
        _exact_numbers(df, odd, _json_records(p, gz, parse_float=safejson.NumberText))
    return df


def _exact_numbers(df: pd.DataFrame, columns: list[str], records: Iterable[dict]) -> None:
    """Replace ``columns`` of ``df`` by their values in ``records`` (the same rows, numbers as written)."""
    values: dict[str, list] = {c: [] for c in columns}
    for record in records:
        for column, column_values in values.items():
            column_values.append(record.get(column))
    for column, column_values in values.items():
        df[column] = pd.Series(column_values, dtype=object, index=df.index)


# ----- reading session by session --------------------------------------------------------------------

class TraceReader:
    """A trace file read in chunks of whole sessions, each validated as it is read (`open_trace`).

    ``attrs`` is the file's ctxbench metadata (Parquet), ``rows`` its row count where the format
    records it (Parquet), else None. Iterating yields canonical frames (`traces.schema.validate`),
    each holding whole sessions in file order; a problem is a `TraceError` naming the file and the
    row of the whole file, raised when the chunk holding it is read. ``on_chunk``, when given, sees
    each chunk before it is yielded (a caller's own checks across files).
    """

    def __init__(self, path: str | os.PathLike, *, check: bool = True, chunk_rows: int = CHUNK_ROWS,
                 on_chunk: "Callable[[pd.DataFrame], None] | None" = None) -> None:
        self.path, self.format, self.gzip = _checked_path(path)
        self.check, self.chunk_rows = check, max(1, int(chunk_rows))
        self.on_chunk = on_chunk
        self.attrs: dict = {}
        self.rows: int | None = None
        if self.format == "parquet":
            import pyarrow.parquet as pq

            try:
                self._parquet = pq.ParquetFile(self.path, read_dictionary=_text_columns(self.path))
                self.attrs = _metadata(self.path, self._parquet.schema_arrow.metadata)
            except TraceError:
                raise
            except Exception as exc:
                raise _read_failure(self.path, self.format, self.gzip, exc) from None
            self.rows = self._parquet.metadata.num_rows

    def distinct(self, column: str) -> set[str] | None:
        """The distinct values of the text ``column`` (empty if the file has no such column), read on their own
        (Parquet); None where the format cannot read one column alone (CSV, JSON lines)."""
        if self.format != "parquet":
            return None
        if column not in self._parquet.schema_arrow.names:
            return set()
        import pyarrow.compute as pc

        values: set[str] = set()
        try:
            for batch in self._parquet.iter_batches(columns=[column], batch_size=1 << 20):
                array = batch.column(0)
                array = array.dictionary if hasattr(array, "dictionary") else pc.unique(array)
                values.update("" if v is None else str(v) for v in array.to_pylist())
        except Exception as exc:
            raise _read_failure(self.path, self.format, self.gzip, exc) from None
        return values

    def __iter__(self) -> Iterator[pd.DataFrame]:
        """The file's sessions, whole, in validated frames of at most ``chunk_rows`` rows, or one session."""
        carry = Carry()
        cutter = _Cutter(self.chunk_rows)
        last: object = None   # the session of the last row read
        for piece in self._pieces():
            starts = piece.session_starts(continues=last)
            last = piece.last_session() if piece.rows else last
            for pieces in cutter.add(piece, starts):
                yield self._checked(_join(pieces), carry)
        pieces = cutter.rest()
        if pieces is not None:
            yield self._checked(_join(pieces), carry)

    def _checked(self, frame: pd.DataFrame, carry: Carry) -> pd.DataFrame:
        if len(frame.columns) == 0:
            raise TraceError(f"{self.path}: empty file, no columns")
        if not self.check:
            return frame
        validated = validate(frame, source=str(self.path), carry=carry)
        validated.attrs = dict(self.attrs)
        if self.on_chunk is not None:
            self.on_chunk(validated)
        return validated

    def _pieces(self) -> Iterator["_Piece"]:
        """The file's rows in order, in pieces of about ``chunk_rows`` rows (cut anywhere)."""
        try:
            if self.format == "parquet":
                yield from self._parquet_pieces()
            elif self.format == "csv":
                yield from self._csv_pieces()
            else:
                yield from self._jsonl_pieces()
        except TraceError:
            raise
        except Exception as exc:
            raise _read_failure(self.path, self.format, self.gzip, exc) from None

    def _parquet_pieces(self) -> Iterator["_Piece"]:
        import pyarrow as pa

        file = self._parquet
        if not file.metadata.num_row_groups:
            yield _ArrowPiece(file.schema_arrow.empty_table())
        # A row group at a time (reading ahead across groups, as iter_batches does, holds memory that
        # grows with the file); a group written by other programs may hold millions of rows: a batch
        # at a time.
        batch_rows = max(self.chunk_rows, 1024)
        for group in range(file.metadata.num_row_groups):
            if file.metadata.row_group(group).num_rows <= 2 * batch_rows:
                yield _ArrowPiece(_compact_dictionaries(file.read_row_group(group)))
                continue
            for batch in file.iter_batches(batch_size=batch_rows, row_groups=[group]):
                yield _ArrowPiece(_compact_dictionaries(pa.Table.from_batches([batch])))

    def _csv_pieces(self) -> Iterator["_Piece"]:
        text: Iterator[pd.DataFrame] | None = None   # the integer columns again as text, once a chunk needs it
        done = 0
        with _open_text(self.path, self.gzip, "r") as fh, contextlib.ExitStack() as stack:
            for chunk in pd.read_csv(fh, dtype=_TEXT_COLUMNS, keep_default_na=False, na_values=[""],
                                     chunksize=self.chunk_rows):
                odd = _unparsed_int_columns(chunk)
                if odd and text is None:   # from the start, in the same chunks: this chunk's is the next one
                    again = stack.enter_context(_open_text(self.path, self.gzip, "r"))
                    text = pd.read_csv(again, dtype=str, keep_default_na=False, na_values=[],
                                       usecols=lambda c: c in INT_COLUMNS, chunksize=self.chunk_rows)
                    for _ in range(done):
                        next(text)
                if text is not None:
                    as_text = next(text)
                    for column in odd:   # the text written, for exact values and messages that quote it
                        chunk[column] = as_text[column].to_numpy(dtype=object)
                done += 1
                yield _FramePiece(chunk)

    def _jsonl_pieces(self) -> Iterator["_Piece"]:
        lines: list[tuple[int, str]] = []
        records: list[dict] = []
        yielded = False
        with _open_text(self.path, self.gzip, "r") as fh:
            for number, line in enumerate(fh, 1):
                record = _json_record(self.path, number, line)
                if record is None:
                    continue
                records.append(record)
                lines.append((number, line))
                if len(records) >= self.chunk_rows:
                    yield _FramePiece(self._jsonl_frame(records, lines))
                    records, lines, yielded = [], [], True
        if records or not yielded:
            yield _FramePiece(self._jsonl_frame(records, lines))

    def _jsonl_frame(self, records: list[dict], lines: list[tuple[int, str]]) -> pd.DataFrame:
        df = pd.DataFrame.from_records(records)
        odd = _unparsed_int_columns(df)
        if odd:   # parse again keeping each number's text
            exact = (_json_record(self.path, number, line, parse_float=safejson.NumberText) for number, line in lines)
            _exact_numbers(df, odd, exact)
        return df


class _Cutter:
    """Cuts rows read in pieces into chunks of whole sessions of at most ``limit`` rows (or one session).

    Each piece comes with the rows where a session starts in it; a chunk is cut at a session start
    as soon as the rows held would pass the limit, so only a session longer than the limit makes a
    longer chunk.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending: list[_Piece] = []
        self.rows = 0          # rows held
        self.open_at = 0       # rows held before the start of the last session held
        self.cut_any = False

    def add(self, piece: "_Piece", starts: np.ndarray) -> Iterator[list["_Piece"]]:
        """The chunks complete once ``piece`` (sessions starting at ``starts``) is added."""
        starts = np.asarray(starts, dtype=np.int64)
        while self.rows + piece.rows > self.limit:
            cuts = starts[(starts > 0) | (self.rows > 0)]   # where a chunk may end: before a session starts
            fits = cuts[self.rows + cuts <= self.limit]
            if len(fits):             # whole sessions fill the room: cut at the last session start in it
                cut = int(fits[-1])
            elif self.open_at > 0:    # the last session held goes past the limit: the ones before it go
                yield self._take(self.open_at)
                continue
            elif len(cuts):           # one session alone passes the limit: cut where it ends
                cut = int(cuts[0])
            else:
                break
            head, piece = piece.split(cut)
            starts = starts[starts >= cut] - cut
            self.pending.append(head)
            self.rows += head.rows
            yield self._take(self.rows)
        if piece.rows or not self.pending:
            if len(starts):
                self.open_at = self.rows + int(starts[-1])
            self.pending.append(piece)
            self.rows += piece.rows

    def _take(self, rows: int) -> list["_Piece"]:
        """The first ``rows`` rows held (a session boundary), no longer held."""
        taken: list[_Piece] = []
        left = rows
        while left:
            piece = self.pending.pop(0)
            if piece.rows > left:
                piece, rest = piece.split(left)
                self.pending.insert(0, rest)
            taken.append(piece)
            left -= piece.rows
        self.rows -= rows
        self.open_at = max(self.open_at - rows, 0)
        self.cut_any = True
        return taken or [self.pending[0]]

    def rest(self) -> list["_Piece"] | None:
        """What is held at the end of the file (None when nothing is, and a chunk was cut already)."""
        if self.rows or (self.pending and not self.cut_any):
            return self.pending
        return None


class _Piece:
    """Rows read from a file, before they are cut into whole sessions."""

    rows: int

    def session_starts(self, continues: object) -> np.ndarray:
        """The rows where a session starts (0 too, unless the first row's session is ``continues``)."""
        raise NotImplementedError

    def last_session(self) -> object:
        raise NotImplementedError

    def split(self, at: int) -> tuple["_Piece", "_Piece"]:
        raise NotImplementedError


class _ArrowPiece(_Piece):
    """Rows of a Parquet file, as an Arrow table (joined, its row groups' dictionaries are united)."""

    def __init__(self, table) -> None:
        self.table, self.rows = table, table.num_rows

    def _sessions(self):
        import pyarrow as pa

        column = self.table.column("session")
        return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column

    def session_starts(self, continues: object) -> np.ndarray:
        import pyarrow.compute as pc

        if "session" not in self.table.column_names or not self.rows:
            return np.zeros(0, dtype=np.int64)
        sessions = self._sessions()
        first = [0] if sessions[0].as_py() != continues or continues is None else []
        if self.rows < 2:
            return np.asarray(first, dtype=np.int64)
        changed = pc.fill_null(pc.not_equal(sessions.slice(1), sessions.slice(0, self.rows - 1)), True)
        return np.r_[np.asarray(first, dtype=np.int64), np.flatnonzero(np.asarray(changed)) + 1]

    def last_session(self) -> object:
        return self._sessions()[self.rows - 1].as_py() if "session" in self.table.column_names else None

    def split(self, at: int) -> tuple["_ArrowPiece", "_ArrowPiece"]:
        return _ArrowPiece(self.table.slice(0, at)), _ArrowPiece(self.table.slice(at))


class _FramePiece(_Piece):
    """Rows of a CSV or JSON-lines file, as read (text columns not yet categorical)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame, self.rows = frame, len(frame)

    def _sessions(self) -> np.ndarray:
        return self.frame["session"].astype("string").to_numpy(dtype=object, na_value=None)

    def session_starts(self, continues: object) -> np.ndarray:
        if "session" not in self.frame.columns or not self.rows:
            return np.zeros(0, dtype=np.int64)
        keys = self._sessions()
        first = [0] if keys[0] != continues or continues is None else []
        return np.r_[np.asarray(first, dtype=np.int64), np.flatnonzero(keys[1:] != keys[:-1]) + 1]

    def last_session(self) -> object:
        return self._sessions()[-1] if "session" in self.frame.columns else None

    def split(self, at: int) -> tuple["_FramePiece", "_FramePiece"]:
        return _FramePiece(self.frame.iloc[:at]), _FramePiece(self.frame.iloc[at:])


def _join(pieces: list[_Piece]) -> pd.DataFrame:
    """One frame of the rows of ``pieces`` (all of one kind), in order, numbered from 0."""
    import pyarrow as pa

    pieces = [p for p in pieces if p.rows] or pieces[:1]
    if isinstance(pieces[0], _ArrowPiece):
        return _arrow_frame(pa.concat_tables([p.table for p in pieces]))
    frames = [p.frame for p in pieces]
    return (frames[0] if len(frames) == 1 else pd.concat(frames)).reset_index(drop=True)


def _arrow_frame(table) -> pd.DataFrame:
    """``table`` as a frame, each dictionary column a categorical whose categories are the dictionary's
    values as Python objects (its row groups' dictionaries united first): made from the codes and
    the values directly, which costs a fraction of pyarrow's conversion for large dictionaries."""
    import pyarrow as pa
    import pyarrow.compute as pc

    coded = [name for name, kind in zip(table.column_names, table.schema.types) if pa.types.is_dictionary(kind)]
    if not coded:
        return table.to_pandas()
    table = _compact_dictionaries(table.unify_dictionaries())   # a slice keeps its whole row group's dictionary
    frame = table.drop_columns(coded).to_pandas() if len(coded) < table.num_columns else \
        pd.DataFrame(index=pd.RangeIndex(table.num_rows))
    for name in coded:
        column = table.column(name)
        kind = column.type
        values = column.chunk(0).dictionary if column.num_chunks else pa.array([], kind.value_type)
        indices = pa.chunked_array([chunk.indices for chunk in column.chunks], type=kind.index_type)
        codes = pc.fill_null(indices, -1).to_numpy() if table.num_rows else np.zeros(0, dtype=np.int8)
        labels = values.to_numpy(zero_copy_only=False)
        frame[name] = pd.Categorical.from_codes(codes, categories=pd.Index(labels, dtype=object, copy=False))
    return frame[table.column_names]


def _compact_dictionaries(table):
    """``table`` with each dictionary column's dictionary cut to the values it uses, where it holds many more.

    A file written before row groups followed sessions repeats the dictionary of every path of the
    trace in each row group, and a slice of a row group keeps the group's; cut, a chunk holds only
    its own paths.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for index, column in enumerate(table.columns):
        if pa.types.is_dictionary(column.type) and \
                sum(len(chunk.dictionary) for chunk in column.chunks) > 2 * table.num_rows + 64:
            plain = pc.cast(column, column.type.value_type)
            table = table.set_column(index, table.field(index).name, pc.dictionary_encode(plain))
    return table


def open_trace(path: str | os.PathLike, *, check: bool = True, chunk_rows: int = CHUNK_ROWS,
               on_chunk: "Callable[[pd.DataFrame], None] | None" = None) -> TraceReader:
    """A trace file to read in chunks of whole sessions (`TraceReader`), so that memory follows its
    largest session rather than its length; the file is opened (and its format checked) now.

    Parquet files are read a row group at a time: those `save` writes end where sessions end, and
    each holds a dictionary of only its own paths; a file written otherwise (by earlier versions,
    or another program) is read the same way, at the cost of cutting the dictionary each of its row
    groups repeats. CSV and JSON lines are read in chunks of ``chunk_rows`` lines.
    """
    return TraceReader(path, check=check, chunk_rows=chunk_rows, on_chunk=on_chunk)


# ----- writing ---------------------------------------------------------------------------------------

def save(df: pd.DataFrame, path: str | os.PathLike, *, check: bool = True,
         metadata: dict[str, Any] | None = None, format_of: str | os.PathLike | None = None) -> Path:
    """Validate ``df`` and write it to ``path`` atomically: a temporary beside it, then a rename over it.

    The format follows the suffix of ``format_of`` (default ``path``), which messages name too:
    a caller that writes a temporary of its own passes the final path. ``metadata`` (merged over
    ``df.attrs``) is stored in Parquet files only, under `META_KEY`, which marks the file as
    ctxbench's. Parquet row groups end where sessions end (`ROW_GROUP_ROWS`), with session, path
    and arm as plain text, so that `open_trace` reads the file session by session. Whatever is at
    ``path`` is replaced; deciding whether it may be is the caller's. A file that cannot be written
    raises `TraceError` naming it, and leaves ``path`` as it was.
    """
    shown = Path(format_of) if format_of is not None else Path(path)
    trace_format(shown)
    out = validate(df, source=str(shown)) if check else df
    return save_chunks([out], path, metadata={**out.attrs, **(metadata or {})}, check=False, format_of=format_of)


def save_chunks(chunks: Iterable[pd.DataFrame], path: str | os.PathLike, *, metadata: dict[str, Any] | None = None,
                check: bool = True, format_of: str | os.PathLike | None = None) -> Path:
    """Write the trace made of ``chunks`` (frames in order, each validated as the next rows of one file
    when ``check``) to ``path`` atomically, as `save` writes one frame; memory follows the chunks.

    Every chunk must have the first one's columns and types. ``metadata`` (merged over the first chunk's
    ``attrs``) is stored as `save` stores it.
    """
    p = Path(path)
    shown = Path(format_of) if format_of is not None else p
    fmt, gz = trace_format(shown)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_temporary(p)
    except OSError as exc:
        raise TraceError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    carry = Carry() if check else None
    checked = (validate(chunk, source=str(shown), carry=carry) if carry is not None else chunk for chunk in chunks)
    try:
        _write(checked, tmp, fmt, gz, metadata or {})
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


def _write(chunks: Iterable[pd.DataFrame], path: Path, fmt: str, gz: bool, meta: dict[str, Any]) -> None:
    """Write the frames ``chunks`` in order to ``path`` in ``fmt`` (gzip-compressed when ``gz``), Parquet with ``meta``."""
    if fmt == "parquet":
        with _RowGroups(path, meta) as out:
            for chunk in chunks:
                out.add(chunk)
        return
    with _open_text(path, gz, "w") as fh:
        first = None
        for chunk in chunks:
            if fmt == "csv":
                chunk.to_csv(fh, index=False, header=first is None)
            elif len(chunk):
                chunk.to_json(fh, orient="records", lines=True)   # each ends with a newline
            first = chunk if first is None else first
        if fmt == "jsonl" and first is not None and not fh.tell():
            first.to_json(fh, orient="records", lines=True)


class _RowGroups:
    """A Parquet trace written chunk by chunk, in row groups that end where sessions end (`_groups`)."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path, self.meta = path, meta
        self.writer = None
        self.schema = None
        self.pending = None   # the rows not written yet, an Arrow table

    def __enter__(self) -> "_RowGroups":
        return self

    def add(self, df: pd.DataFrame) -> None:
        import pyarrow as pa

        if self.schema is None:
            self.meta = {**df.attrs, **self.meta}   # the first chunk's attrs, as `save` keeps a frame's
        table = self._arrow(df)
        self.pending = table if self.pending is None else pa.concat_tables([self.pending, table])
        self._write(final=False)

    def _write(self, final: bool) -> None:
        done = 0
        for start, stop in _groups(self.pending, final=final):
            self._flush(self.pending.slice(start, stop - start))
            done = stop
        if done:
            self.pending = self.pending.slice(done)

    def _arrow(self, df: pd.DataFrame):
        import pyarrow as pa

        table = pa.Table.from_pandas(df, preserve_index=False)
        for name in _PLAIN_COLUMNS:
            if name in table.column_names and pa.types.is_dictionary(table.schema.field(name).type):
                table = table.set_column(table.schema.get_field_index(name), name,
                                         table.column(name).cast(pa.string()))
        table = table.replace_schema_metadata({META_KEY: json.dumps(self.meta, default=str).encode()})
        if self.schema is None:
            self.schema = table.schema
        elif not table.schema.equals(self.schema):
            table = table.select(self.schema.names).cast(self.schema)
        return table

    def _flush(self, table) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None:
                if self.pending is None:
                    raise TraceError(f"{self.path}: nothing to write")
                self._write(final=True)
                if self.writer is None:   # no rows: the columns alone
                    self._flush(self.pending)
        finally:
            if self.writer is not None:
                self.writer.close()


def _groups(table, *, final: bool) -> list[tuple[int, int]]:
    """The row groups (start, stop) to write now from ``table``'s rows. A group ends at the first end of a
    session at or past `ROW_GROUP_ROWS` rows when that is within twice as many; otherwise at the last
    end of a session before (a long session starts groups of its own), or, inside one long session,
    after `ROW_GROUP_ROWS` rows (a reader joins the pieces). Unless ``final``, rows whose group depends
    on rows not yet given stay for the next call."""
    import pyarrow.compute as pc

    target = ROW_GROUP_ROWS
    n = table.num_rows
    ends = np.zeros(0, dtype=np.int64)
    if "session" in table.column_names and n > 1:
        different = pc.fill_null(pc.not_equal(table.column("session").slice(1), table.column("session").slice(0, n - 1)),
                                 True)
        ends = np.flatnonzero(np.asarray(different)) + 1
    out = []
    start = 0
    while n - start >= target:
        i = int(np.searchsorted(ends, start + target))
        if i < len(ends) and ends[i] - start <= 2 * target:
            stop = int(ends[i])
        elif i == len(ends) and n - start < 2 * target and not final:
            break   # the session may end within twice the target: wait for its rows
        elif i > 0 and ends[i - 1] > start:
            stop = int(ends[i - 1])
        else:
            stop = start + target
        out.append((start, stop))
        start = stop
    if final and start < n:
        out.append((start, n))
    return out
