"""Read JSON logs incrementally: JSON lines one at a time, a top-level JSON array element by element.

Every parse goes through `traces.safejson`: a value nested too deeply is a malformed line (skipped
and counted) in a line-based log, and an error naming the file in a whole-file one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ctxbench.traces import safejson
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers.report import FileReport

__all__ = ["open_text", "reading", "json_lines", "json_array_items", "read_head", "load_document"]

CHUNK = 1 << 16


def open_text(path: str | os.PathLike) -> IO[str]:
    """Open a log as UTF-8 text (undecodable bytes replaced); `TraceError` naming it if it cannot be read."""
    file = Path(path)
    if file.is_dir():
        raise TraceError(f"{file}: is a directory, expected a file")
    try:
        return open(file, encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise TraceError(f"{file}: cannot read: {exc.strerror or exc}") from None


@contextlib.contextmanager
def reading(path: str | os.PathLike) -> Iterator[IO[str]]:
    """`open_text` for a block that reads the log: a read failure in it is a `TraceError` naming the file."""
    with open_text(path) as fh:
        try:
            yield fh
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_head(path: str | os.PathLike, size: int = CHUNK) -> str:
    """The first ``size`` characters of a file (for format detection)."""
    with reading(path) as fh:
        return fh.read(size)


def json_lines(fh: IO[str], report: FileReport) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` per line that holds a JSON object; count other lines as malformed.

    Blank lines are ignored; a truncated last line is just another malformed line.
    """
    for number, line in enumerate(fh, 1):
        if not line.strip():
            continue
        report.records += 1
        try:
            obj = safejson.loads(line)
        except ValueError:
            report.skip(number)
            continue
        if not isinstance(obj, dict):
            report.skip(number)
            continue
        yield number, obj


def json_array_items(fh: IO[str], report: FileReport, *, chunk: int = CHUNK) -> Iterator[tuple[int, object]]:
    """Yield ``(index, element)`` of a top-level JSON array without reading the whole file at once.

    Raises `TraceError` naming the file and the element if the file does not start with ``[``, if an
    element is nested too deeply to parse, or if the array is truncated or broken (the file ends, or
    something other than ``,`` or ``]`` follows an element): a whole-file log must be complete, and
    the rest of a broken one cannot be resynchronised.
    """
    name = getattr(fh, "name", "input")
    decoder = json.JSONDecoder()
    buf, pos, eof = "", 0, False

    def more(size: int) -> bool:
        """Read up to ``size`` more characters into the buffer; False at the end."""
        nonlocal buf, pos, eof
        if eof:
            return False
        data = fh.read(size)
        if not data:
            eof = True
            return False
        buf, pos = buf[pos:] + data, 0
        return True

    def skip_space() -> str:
        """The next character that is not blank, reading on as needed; "" at the end."""
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos < len(buf):
                return buf[pos]
            if not more(chunk):
                return ""

    if skip_space() != "[":
        raise TraceError(f"{name}: not a JSON array of events")
    pos += 1
    index = 0
    if skip_space() == "]":
        return
    while True:
        want = chunk
        while True:
            try:
                item, end = safejson.raw_decode(decoder, buf, pos)
            except safejson.JSONTooDeep as exc:
                raise TraceError(f"{name}: element {index}: {exc}") from None
            except ValueError:
                item, end = None, -1
            # an element ending exactly at the buffer's end may be cut (a number, say): read on first
            if end != -1 and (end < len(buf) or eof):
                break
            if not more(want):
                if end != -1:
                    break
                raise TraceError(f"{name}: truncated at element {index}: the file ends before the array's closing ']'")
            want *= 2  # a large element: grow the read so re-decoding stays linear overall
        report.records += 1
        pos = end
        yield index, item
        index += 1
        sep = skip_space()
        if sep == "]":
            return
        if sep != ",":
            raise TraceError(f"{name}: broken after element {index - 1}: expected ',' or ']', found "
                             f"{sep!r}" if sep else f"{name}: truncated after element {index - 1}: the file ends "
                             "before the array's closing ']'")
        pos += 1
        skip_space()


def load_document(path: str | os.PathLike) -> object:
    """Parse a whole JSON file (a single document, read at once); `TraceError` naming it on failure."""
    with reading(path) as fh:
        try:
            return safejson.load(fh)
        except ValueError as exc:
            raise TraceError(f"{path}: not valid JSON ({exc})") from None
