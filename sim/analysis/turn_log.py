"""The per-turn log of a grid: written to Parquet as replays finish (`TurnWriter`), or kept as parts (`TurnParts`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["TurnWriter", "TurnParts", "turn_frame"]


def turn_frame(parts: list[tuple[dict, dict]]) -> pd.DataFrame:
    """Every kept per-turn log in one frame, keyed by trace, session, strategy and budget.

    Built once from the concatenated columns: a frame per replay would make the parent's
    serial work grow with the grid and cap the speed-up of parallel workers.
    """
    if not parts:
        return pd.DataFrame()
    return pd.DataFrame(_turn_columns(parts), copy=False)   # the arrays are new: no copy into one block


def _turn_columns(parts: list[tuple[dict, dict]], budget_dtype=None, claims: bool | None = None) -> dict[str, np.ndarray]:
    """The per-turn log of ``parts`` (each a replay's row and its turns' columns) as columns: the row's
    trace, session, strategy and budget repeated on each of its turns, the turns' own columns, and
    ``claims`` when a row has a claim mode (or as ``claims`` says)."""
    lengths = [len(turns["turn"]) for _, turns in parts]

    def key(name: str, dtype=object) -> np.ndarray:
        return np.repeat(np.array([row.get(name) for row, _ in parts], dtype=dtype), lengths)

    data = {"trace": key("trace"), "session": key("session"), "strategy": key("strategy"),
            "budget_tokens": key("budget_tokens", budget_dtype)}
    for name in parts[0][1]:
        data[name] = np.concatenate([turns[name] for _, turns in parts])
    if claims if claims is not None else any("claims" in row for row, _ in parts):
        data["claims"] = key("claims")
    return data


class TurnWriter:
    """The per-turn log written to a Parquet file as replays finish, never whole in memory.

    Its rows, columns and types are those `run_grid` puts in ``GridResult.turns`` (the budgets decide
    the type of ``budget_tokens``); rows are buffered up to `GROUP_ROWS` a row group. The ``claims``
    column is there once any replay has a claim mode (a session of several arms): rows written before
    the first such replay are copied in again with none when the file is closed. A file is written
    only when a row is.
    """

    GROUP_ROWS = 1 << 16

    def __init__(self, path: str | os.PathLike, budgets: Sequence[float]) -> None:
        self.path = Path(path)
        self.budget_dtype = np.array(list(budgets)).dtype
        self.rows = 0
        self.claims = False
        self._pending: list[tuple[dict, dict]] = []
        self._pending_rows = 0
        self._writer = None
        self._schema = None
        self._before_claims: Path | None = None   # the rows written before the first claim mode

    def __enter__(self) -> "TurnWriter":
        return self

    def write(self, parts: list[tuple[dict, dict]]) -> None:
        """Add replays' turns (each its row and its turns' columns) after those written so far."""
        if parts and not self.claims and any("claims" in row for row, _ in parts):
            self._flush()
            self.claims = True
            if self._writer is not None:
                self._writer.close()
                self._writer, self._schema = None, None
                self._before_claims = self.path.with_name(f".{self.path.name}.{os.getpid()}.before-claims")
                os.replace(self.path, self._before_claims)
        self._pending.extend(parts)
        self._pending_rows += sum(len(turns["turn"]) for _, turns in parts)
        if self._pending_rows >= self.GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow.parquet as pq

        if not self._pending:
            return
        table = _turn_table(self._pending, self.budget_dtype, self.claims)
        if self._writer is None:
            self._schema = table.schema
            text = [f.name for f in table.schema if f.name in _TEXT_COLUMNS]
            self._writer = pq.ParquetWriter(self.path, self._schema, use_dictionary=text)
        self._writer.write_table(table.cast(self._schema), row_group_size=max(1, table.num_rows))
        self.rows += table.num_rows
        self._pending, self._pending_rows = [], 0

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None:
                self._flush()
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        if self._before_claims is not None:
            try:
                if exc_type is None:
                    self._join_before_claims()
            finally:
                with contextlib.suppress(FileNotFoundError):
                    self._before_claims.unlink()

    def _join_before_claims(self) -> None:
        """The rows written before the first claim mode, with no claim mode, then the rest, in one file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        after = pq.ParquetFile(self.path)
        schema = after.schema_arrow
        joined = self.path.with_name(f".{self.path.name}.{os.getpid()}.joined")
        try:
            with pq.ParquetWriter(joined, schema) as out:
                before = pq.ParquetFile(self._before_claims)
                for index in range(before.metadata.num_row_groups):
                    group = before.read_row_group(index)
                    group = group.append_column("claims", pa.nulls(group.num_rows, pa.string()))
                    out.write_table(group.select(schema.names).cast(schema), row_group_size=max(1, group.num_rows))
                for index in range(after.metadata.num_row_groups):
                    group = after.read_row_group(index)
                    out.write_table(group, row_group_size=max(1, group.num_rows))
            os.replace(joined, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                joined.unlink()


_TEXT_COLUMNS = ("trace", "session", "strategy", "arm", "claims")


class TurnParts:
    """The per-turn log kept as each replay's columns, as the replays left them (no frame of the whole run),
    for a caller that writes it later (`save`, beside other work) and draws from it (`rows`)."""

    def __init__(self, budgets: Sequence[float]) -> None:
        self.budgets = tuple(budgets)
        self.parts: list[tuple[dict, dict]] = []

    def __enter__(self) -> "TurnParts":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def write(self, parts: list[tuple[dict, dict]]) -> None:
        self.parts.extend(parts)

    def __len__(self) -> int:
        return sum(len(turns["turn"]) for _, turns in self.parts)

    def strategies(self) -> pd.DataFrame:
        """The strategies with rows, one row each (column ``strategy``), as `sim.presentation.results.turn_strategies`."""
        return pd.DataFrame({"strategy": sorted({row["strategy"] for row, _ in self.parts})})

    def rows(self, keep: Callable[[dict], bool], columns: Sequence[str]) -> pd.DataFrame:
        """``columns`` of the rows of the replays whose row ``keep`` accepts, in log order (the replay's
        keys as categories)."""
        chosen = [part for part in self.parts if keep(part[0])]
        if not chosen:
            return pd.DataFrame()
        lengths = [len(turns["turn"]) for _, turns in chosen]
        out = {}
        for name in columns:
            if name in chosen[0][1]:
                out[name] = np.concatenate([turns[name] for _, turns in chosen])
            elif name == "budget_tokens":
                values = np.array([row[name] for row, _ in chosen], dtype=np.array(list(self.budgets)).dtype)
                out[name] = np.repeat(values, lengths)
            else:
                codes, names = pd.factorize(pd.Series([row.get(name) for row, _ in chosen], dtype=object))
                out[name] = pd.Categorical.from_codes(np.repeat(codes, lengths), categories=names)
        return pd.DataFrame(out, copy=False)

    def save(self, path: str | os.PathLike) -> Path | None:
        """Write the log to ``path`` as `TurnWriter` writes it (None, and no file, when it has no row)."""
        with TurnWriter(path, self.budgets) as writer:
            for start in range(0, len(self.parts), 64):
                writer.write(self.parts[start:start + 64])
        return writer.path if writer.rows else None


def _turn_table(parts: list[tuple[dict, dict]], budget_dtype, claims: bool):
    """`_turn_columns` as an Arrow table, built in Arrow (the replay's keys taken onto its rows, never a
    Python object a row), with the pandas metadata a frame of those columns gets."""
    import pyarrow as pa

    lengths = [len(turns["turn"]) for _, turns in parts]
    owner = pa.array(np.repeat(np.arange(len(parts)), lengths))

    def key(name: str):
        return pa.array([row.get(name) for row, _ in parts], type=pa.string()).take(owner)

    columns = {"trace": key("trace"), "session": key("session"), "strategy": key("strategy"),
               "budget_tokens": pa.array(np.repeat(np.array([row.get("budget_tokens") for row, _ in parts],
                                                             dtype=budget_dtype), lengths))}
    for name in parts[0][1]:
        values = np.concatenate([turns[name] for _, turns in parts])
        columns[name] = pa.array(values, type=pa.string() if name in _TEXT_COLUMNS else None)
    if claims:
        columns["claims"] = key("claims")
    table = pa.table(columns)
    return table.replace_schema_metadata(_pandas_metadata(table.schema))


def _pandas_metadata(schema) -> dict:
    """The pandas metadata `DataFrame.to_parquet` writes for a frame of ``schema``'s columns (text as str)."""
    import pyarrow as pa

    template = pd.DataFrame({f.name: np.array(["x"], dtype=object) if pa.types.is_string(f.type)
                             else np.zeros(1, dtype=f.type.to_pandas_dtype()) for f in schema})
    return pa.Table.from_pandas(template, preserve_index=False).schema.metadata
