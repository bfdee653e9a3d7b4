"""Reading input datasets: local parquet/JSONL/JSON/CSV files or directories, or a hub id via `datasets`.

A source spec is a local path, or `OWNER/NAME[:CONFIG][@SPLIT]` for the hub (loaded with
`datasets.load_dataset`). Every problem names the file and the column.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from rft.io import read_jsonl

_TABLE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")


class DataError(Exception):
    """Bad input or output data; the message names the file (and column or line)."""


@dataclass(frozen=True)
class Source:
    """Where a dataset comes from: a local path, or a hub id with optional config and split."""

    spec: str
    path: Path | None = None
    hub_id: str | None = None
    config: str | None = None
    split: str = "train"

    @property
    def label(self) -> str:
        """How the source is named in messages and reports."""
        return str(self.path) if self.path else self.spec


def parse_source(spec: str, default_split: str = "train") -> Source:
    """A local path if it exists, else a hub id `OWNER/NAME[:CONFIG][@SPLIT]`; anything else is an error."""
    path = Path(spec).expanduser()
    if path.exists():
        return Source(spec, path=path, split=default_split)
    rest, _, split = spec.partition("@")
    hub_id, _, config = rest.partition(":")
    parts = hub_id.split("/")
    if (
        len(parts) != 2
        or not all(parts)
        or spec.startswith((".", "/", "~"))
        or hub_id.endswith(_TABLE_SUFFIXES)
    ):
        raise DataError(f"{spec}: no such file or directory (and not a hub id OWNER/NAME[:CONFIG][@SPLIT])")
    return Source(spec, hub_id=hub_id, config=config or None, split=split or default_split)


def data_files(path: Path) -> list[Path]:
    """The table files of a local path: the file itself, or a directory's parquet files (else JSONL/JSON/CSV)."""
    if path.is_file():
        return [path]
    found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _TABLE_SUFFIXES)
    parquet = [p for p in found if p.suffix == ".parquet"]
    files = parquet or found
    if not files:
        raise DataError(f"{path}: no .parquet, .jsonl, .json or .csv files in this directory")
    return files


def load_hub_table(hub_id: str, config: str | None, split: str, cache_dir: str | None = None) -> pa.Table:
    """One split of a hub dataset as an Arrow table (memory-mapped from the `datasets` cache)."""
    import datasets  # heavy import, only for hub sources

    try:
        ds = datasets.load_dataset(hub_id, config, split=split, cache_dir=cache_dir)
    except Exception as e:  # noqa: BLE001 - any loader failure becomes one clear message
        raise DataError(f"{hub_id}: could not load split {split!r} ({type(e).__name__}: {e})") from None
    return ds.data.table if hasattr(ds.data, "table") else pa.Table.from_batches(ds.data.to_batches())


def read_file_table(path: Path) -> pa.Table:
    """One local file as an Arrow table; an unreadable file raises DataError naming it."""
    try:
        if path.suffix == ".parquet":
            return pq.read_table(path)
        if path.suffix == ".csv":
            return pacsv.read_csv(path)
        if path.suffix == ".json":
            text = path.read_text(encoding="utf-8")
            if text.lstrip().startswith("["):
                return pa.Table.from_pylist(json.loads(text))
        return pa.Table.from_pylist(read_jsonl(path))
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable ({type(e).__name__}: {e})") from None


def read_table(source: Source) -> pa.Table:
    """The whole source as one Arrow table (for the small eval inputs)."""
    if source.hub_id:
        return load_hub_table(source.hub_id, source.config, source.split)
    tables = [read_file_table(p) for p in data_files(source.path)]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as e:
        raise DataError(f"{source.label}: files have incompatible columns ({e})") from None


def resolve_columns(names: list[str], wanted: dict[str, tuple[str, ...]], where: str) -> dict[str, str]:
    """Map each logical column to the actual column name, matching any capitalisation and aliases.

    `wanted` maps a logical name to the accepted names in order of preference; a missing one raises
    DataError naming `where` and the column.
    """
    lower = {n.lower(): n for n in names}
    out: dict[str, str] = {}
    for logical, aliases in wanted.items():
        actual = next((lower[a.lower()] for a in aliases if a.lower() in lower), None)
        if actual is None:
            accepted = " or ".join(repr(a) for a in aliases)
            raise DataError(f"{where}: missing column {accepted} (columns: {', '.join(names) or 'none'})")
        out[logical] = actual
    return out


def string_column(table: pa.Table, column: str, where: str) -> list[str]:
    """A column as Python strings (null -> ""); integers are written in decimal, other types are errors."""
    arr = table.column(column)
    if pa.types.is_integer(arr.type):
        arr = pc.cast(arr, pa.string())
    elif not (
        pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_null(arr.type)
    ):
        raise DataError(f"{where}: column {column!r} has type {arr.type}, expected strings")
    return ["" if v is None else v for v in arr.to_pylist()]


@dataclass
class BatchStream:
    """Record batches of selected columns over all files of a large source, with the total row count."""

    source: Source
    columns: dict[str, tuple[str, ...]]
    batch_size: int = 65536

    def files(self) -> list[tuple[str, object]]:
        """(label, handle) per file: a pyarrow ParquetFile, or an in-memory table for other formats/hub."""
        if self.source.hub_id:
            table = load_hub_table(self.source.hub_id, self.source.config, self.source.split)
            return [(self.source.spec, table)]
        out: list[tuple[str, object]] = []
        for path in data_files(self.source.path):
            if path.suffix == ".parquet":
                try:
                    out.append((str(path), pq.ParquetFile(path)))
                except (pa.ArrowException, OSError) as e:
                    raise DataError(f"{path}: unreadable parquet ({type(e).__name__}: {e})") from None
            else:
                out.append((str(path), read_file_table(path)))
        return out

    def iter_batches(
        self, files: list[tuple[str, object]]
    ) -> Iterator[tuple[str, pa.RecordBatch, dict[str, str]]]:
        """Yield (file label, batch, logical->actual column map), checking the columns of every file."""
        for label, handle in files:
            names = handle.schema_arrow.names if isinstance(handle, pq.ParquetFile) else handle.schema.names
            cols = resolve_columns(names, self.columns, label)
            if isinstance(handle, pq.ParquetFile):
                batches = handle.iter_batches(
                    batch_size=self.batch_size, columns=list(dict.fromkeys(cols.values()))
                )
            else:
                batches = handle.select(list(dict.fromkeys(cols.values()))).to_batches(
                    max_chunksize=self.batch_size
                )
            try:
                for batch in batches:
                    yield label, batch, cols
            except (pa.ArrowException, OSError) as e:
                raise DataError(f"{label}: unreadable ({type(e).__name__}: {e})") from None


def num_rows(files: list[tuple[str, object]]) -> int:
    """Total rows over the files returned by BatchStream.files()."""
    return sum(h.metadata.num_rows if isinstance(h, pq.ParquetFile) else h.num_rows for _, h in files)
