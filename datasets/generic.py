"""The bring-your-own-data format: a folder of JSONL or Parquet files, one per table.

`read_generic(folder)` reads `memories`, and optionally `queries`, `qrels`, `events`,
`edges` and `embeddings`, each as `NAME.jsonl` or `NAME.parquet` (qrels also as TREC
`qrels.tsv`), into a `Dataset` with provenance columns, so `validate` and the parser name
the file and line (JSONL, TSV) or row (Parquet, 0-based) of a bad record. The columns,
types and rules are documented in `datasets/FORMAT.md`.

The digest is the sha256 over the table files in name order (each file's name, size and
bytes), so re-ingesting an unchanged folder is a no-op.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from .schema import EVENT_KINDS, TABLES, Dataset, empty
from .store import Progress
from .strict_json import DuplicateKeyError, loads
from .trec import read_qrels
from .validate import IngestError, first_bad_row, locate, show

__all__ = ["FORMAT_VERSION", "REQUIRED", "SUFFIXES", "read_generic"]

FORMAT_VERSION = "1"
SUFFIXES: dict[str, tuple[str, ...]] = {
    "memories": (".jsonl", ".parquet"), "queries": (".jsonl", ".parquet"),
    "qrels": (".jsonl", ".parquet", ".tsv"), "events": (".jsonl", ".parquet"),
    "edges": (".jsonl", ".parquet"), "embeddings": (".jsonl", ".parquet"),
    "query_embeddings": (".jsonl", ".parquet"),
}
# Fields every record must carry (non-null). All other columns of the schema are optional.
REQUIRED: dict[str, tuple[str, ...]] = {
    "memories": ("memory_id", "text"), "queries": ("query_id", "text"),
    "qrels": ("query_id", "memory_id", "relevance"), "events": ("ts", "kind"),
    "edges": ("src", "dst", "type", "weight"), "embeddings": ("memory_id", "embedder", "vector"),
    "query_embeddings": ("query_id", "embedder", "vector"),
}
_OBJECT_COLUMNS = frozenset({"metadata", "filters"})  # a JSON object, stored as its text
_TABLE_LIKE = frozenset({".json", ".jsonl", ".ndjson", ".parquet", ".tsv", ".csv"})


class _Bad(Exception):
    """A value of the wrong JSON type; the reader adds the file, line and field."""


def _string(v: Any) -> str:
    if type(v) is not str:
        raise _Bad(f"expected a string, got {show(v)}")
    return v


_INT64 = (-(2**63), 2**63 - 1)


def _integer(v: Any) -> int:
    if type(v) is not int:
        raise _Bad(f"expected an integer, got {show(v)}")
    if not _INT64[0] <= v <= _INT64[1]:  # the store's columns are int64
        raise _Bad(f"expected an integer within int64, got one of {len(str(abs(v)))} digits")
    return v


def _number(v: Any) -> float:
    if type(v) not in (int, float):
        raise _Bad(f"expected a number, got {show(v)}")
    return float(v)


def _boolean(v: Any) -> bool:
    if type(v) is not bool:
        raise _Bad(f"expected true or false, got {show(v)}")
    return bool(v)


def _timestamp(v: Any) -> datetime:
    """ISO-8601 text; an offset or Z is converted to UTC, naive text is taken as UTC."""
    try:
        parsed = datetime.fromisoformat(v)
    except (TypeError, ValueError):
        raise _Bad(f"expected an ISO-8601 timestamp, got {show(v)}") from None
    if parsed.tzinfo is not None:
        try:
            parsed = parsed.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # e.g. 9999-12-31T23:00-02:00 is past the last UTC datetime
            raise _Bad(f"expected a timestamp within years 1-9999 once converted to UTC, "
                       f"got {show(v)}") from None
    return parsed


def _strings(v: Any) -> list[str]:
    if type(v) is not list or any(type(x) is not str for x in v):
        raise _Bad(f"expected a list of strings, got {show(v)}")
    return v


def _numbers(v: Any) -> list[float]:
    if type(v) is not list or any(type(x) not in (int, float) for x in v):
        raise _Bad(f"expected a list of numbers, got {show(v)}")
    return v


def _object(v: Any) -> str:
    if type(v) is not dict:
        raise _Bad(f"expected a JSON object, got {show(v)}")
    return json.dumps(v, ensure_ascii=False)


def _kind(v: Any) -> str:
    if v not in EVENT_KINDS:
        raise _Bad(f"expected one of {', '.join(EVENT_KINDS)}, got {show(v)}")
    return str(v)


def _converter(column: str, dtype: pl.DataType) -> Callable[[Any], Any]:
    if column in _OBJECT_COLUMNS:
        return _object
    if column == "kind":
        return _kind
    kinds: tuple[tuple[pl.DataType, Callable[[Any], Any]], ...] = (
        (pl.String(), _string), (pl.Int64(), _integer), (pl.Float64(), _number),
        (pl.Boolean(), _boolean), (pl.Datetime("us"), _timestamp),
        (pl.List(pl.String), _strings), (pl.List(pl.Float32), _numbers))
    return next(convert for known, convert in kinds if dtype == known)


def _read_jsonl(path: Path, table: str) -> pl.DataFrame:
    schema, required = TABLES[table], REQUIRED[table]
    fields = [(c, _converter(c, t), c in required) for c, t in schema.items()]
    columns: dict[str, list[Any]] = {c: [] for c in schema}
    lines: list[int] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            record = _parse_line(raw, path, number)
            if unknown := record.keys() - schema.keys():
                raise IngestError(f"{path.name} line {number}", f"unknown field(s) "
                                  f"{sorted(unknown)}; {table} fields are {', '.join(schema)} "
                                  "(datasets/FORMAT.md)")
            for column, convert, needed in fields:
                value = record.get(column)
                if value is None:
                    if needed:
                        reason = "required, got null" if column in record else "required, missing"
                        raise IngestError(f"{path.name} line {number}", reason, field=column)
                elif convert is not _string or type(value) is not str:  # the common case, inline
                    try:
                        value = convert(value)
                    except _Bad as bad:
                        raise IngestError(f"{path.name} line {number}", str(bad),
                                          field=column) from None
                columns[column].append(value)
            lines.append(number)
    frame = pl.DataFrame([pl.Series(c, columns[c], dtype=t) for c, t in schema.items()])
    return frame.with_columns(_file=pl.lit(path.name), _row=pl.Series(lines, dtype=pl.Int64))


def _parse_line(raw: bytes, path: Path, number: int) -> dict[str, Any]:
    where = f"{path.name} line {number}"
    try:
        record = loads(raw.decode("utf-8").rstrip("\r\n"))
    except UnicodeDecodeError as exc:
        raise IngestError(where, f"not UTF-8 text ({exc.reason})") from None
    except DuplicateKeyError as exc:
        raise IngestError(where, str(exc), field=exc.field) from None
    except json.JSONDecodeError as exc:
        at = exc.msg if exc.msg.endswith(" at") else f"{exc.msg} at"
        raise IngestError(where, f"invalid JSON: {at} column {exc.colno}") from None
    if type(record) is not dict:
        raise IngestError(where, f"expected a JSON object, got {show(record)}")
    return record


def _parquet_column(frame: pl.DataFrame, column: str, dtype: pl.DataType,
                    file: str) -> pl.Series:
    """One Parquet column coerced to the schema type, or an IngestError naming the row."""
    series = frame[column]
    source = series.dtype
    if column in _OBJECT_COLUMNS or column == "kind":
        ok = source in (pl.String, pl.Categorical) or isinstance(source, pl.Enum)
    elif dtype == pl.Datetime("us"):
        ok = isinstance(source, pl.Datetime) or source in (pl.Date, pl.String)
    elif isinstance(dtype, pl.List):
        ok = isinstance(source, pl.List | pl.Array) and (
            source.inner == pl.String if dtype.inner == pl.String else source.inner.is_numeric())
    elif dtype == pl.Int64:
        ok = source.is_integer()
    elif dtype == pl.Float64:
        ok = source.is_numeric()
    elif dtype == pl.String:
        ok = source in (pl.String, pl.Categorical) or isinstance(source, pl.Enum)
    else:
        ok = source == dtype
    if not ok:
        raise IngestError(file, f"column {column!r} is {source}, expected {dtype}")
    if isinstance(source, pl.Datetime | pl.Date):
        _check_time_range(series, file)
    if isinstance(source, pl.Datetime) and source.time_zone is not None:
        series = series.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
    if source == pl.String and dtype == pl.Datetime("us"):
        series = pl.Series(column, [_parquet_value(_timestamp, v, file, i, column)
                                    for i, v in enumerate(series)], dtype=dtype)
    if column == "kind":
        text = series.cast(pl.String)
        i = first_bad_row(text.to_frame(), ~pl.first().is_in(EVENT_KINDS))
        if i is not None:
            _parquet_value(_kind, text[i], file, i, column)
    try:
        series = series.cast(dtype)
    except pl.exceptions.InvalidOperationError as exc:
        raise IngestError(file, f"column {column!r}: {exc}") from None
    if column in _OBJECT_COLUMNS:
        for i, text in enumerate(series):
            _parquet_value(_object_text, text, file, i, column)
    return series


# The instants a Python datetime can hold (years 1-9999), in µs since 1970 (Parquet's
# physical values are UTC). Beyond them the cast to µs may wrap and the store would
# hold a time no reader can turn back into a datetime.
_FIRST_US, _LAST_US = -62_135_596_800_000_000, 253_402_300_799_999_999
_PER_US = {"us": 1, "ms": 1_000}  # ns always lies within (years 1677-2262)


def _check_time_range(series: pl.Series, file: str) -> None:
    dtype = series.dtype
    if isinstance(dtype, pl.Datetime):
        unit = str(dtype.time_unit)
        if unit not in _PER_US:
            return
        per = _PER_US[unit]
    else:
        unit, per = "days", 86_400_000_000
    physical = series.to_physical().cast(pl.Int64)
    i = first_bad_row(physical.to_frame(),
                      ~pl.first().is_between(_FIRST_US // per, _LAST_US // per))
    if i is not None:
        raise IngestError(f"{file} row {i}", f"expected a timestamp within years 1-9999, got "
                          f"{physical[i]} {unit} since 1970-01-01", field=series.name)


def _object_text(text: str) -> str:
    try:
        value = loads(text)
    except DuplicateKeyError as exc:
        raise _Bad(str(exc)) from None
    except json.JSONDecodeError:
        value = None
    if type(value) is not dict:
        raise _Bad(f"expected the text of a JSON object, got {show(text)}")
    return text


def _parquet_value(convert: Callable[[Any], Any], value: Any, file: str, i: int,
                   column: str) -> Any:
    if value is None:
        return None
    try:
        return convert(value)
    except _Bad as bad:
        raise IngestError(f"{file} row {i}", str(bad), field=column) from None


def _read_parquet(path: Path, table: str) -> pl.DataFrame:
    schema, required = TABLES[table], REQUIRED[table]
    try:
        raw = pl.read_parquet(path)
    except pl.exceptions.ComputeError as exc:  # empty, truncated or not Parquet at all
        reason = str(exc).split("\n", 1)[0]
        raise IngestError(path.name, f"not a readable Parquet file ({reason}); write it "
                          "again, or give the table as .jsonl") from None
    if unknown := [c for c in raw.columns if c not in schema]:
        raise IngestError(path.name, f"unknown column(s) {unknown}; {table} columns are "
                          f"{', '.join(schema)} (datasets/FORMAT.md)")
    if missing := [c for c in required if c not in raw.columns]:
        raise IngestError(path.name, f"missing required column(s) {missing}")
    columns = [_parquet_column(raw, c, t, path.name) if c in raw.columns
               else pl.Series(c, [None] * raw.height, dtype=t) for c, t in schema.items()]
    frame = pl.DataFrame(columns).with_columns(
        _file=pl.lit(path.name), _row=pl.int_range(pl.len(), dtype=pl.Int64))
    for column in required:
        i = first_bad_row(frame, pl.col(column).is_null())
        if i is not None:
            raise IngestError(f"{path.name} row {i}", "required, got null", field=column)
    return frame


def _all_or_none(frame: pl.DataFrame, column: str) -> bool:
    """Whether every event gives `column`; raise if only some do."""
    given = frame[column].is_not_null()
    if given.all() or not given.any():
        return bool(given.all()) and frame.height > 0
    i = first_bad_row(frame, pl.col(column).is_null() != pl.col(column).first().is_null())
    raise IngestError(locate(frame, "events", i or 0), "give it for every event or for none "
                      "(datasets/FORMAT.md: the same-timestamp rule)", field=column)


def _finish_events(frame: pl.DataFrame) -> pl.DataFrame:
    """Fill seq (file order) and event_id ((ts, seq) order) when the file leaves them out."""
    if not _all_or_none(frame, "seq"):
        frame = frame.with_columns(seq=pl.int_range(pl.len(), dtype=pl.Int64))
    if not _all_or_none(frame, "event_id"):
        frame = (frame.sort("ts", "seq", maintain_order=True)
                 .with_columns(event_id=pl.int_range(pl.len(), dtype=pl.Int64)))
    return frame


def _table_files(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        raise IngestError(str(folder), "not a folder (expected memories.jsonl|parquet and "
                          "the other table files of datasets/FORMAT.md)")
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.suffix.lower() not in _TABLE_LIKE:
            continue
        table, suffix = path.stem, path.suffix.lower()
        if path.is_dir():  # a Parquet reader would read a folder as a dataset of files
            raise IngestError(path.name, f"cannot be read (Is a directory); expected a "
                              f"readable file at {path}")
        if table not in SUFFIXES:
            raise IngestError(path.name, f"unknown table file; expected "
                              f"{', '.join(SUFFIXES)} (datasets/FORMAT.md)")
        if suffix not in SUFFIXES[table]:
            raise IngestError(path.name, f"unsupported format for {table}; use one of "
                              f"{', '.join(table + s for s in SUFFIXES[table])}")
        if table in found:
            raise IngestError(str(folder), f"both {found[table].name} and {path.name}: "
                              "keep one file per table")
        found[table] = path
    if "memories" not in found:
        raise IngestError(str(folder), "no memories file (memories.jsonl or memories.parquet)")
    return found


def _digest(paths: list[Path]) -> str:
    sha = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        sha.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                sha.update(chunk)
    return sha.hexdigest()


def read_generic(folder: Path, *, progress: Progress | None = None) -> Dataset:
    """Read a generic-format folder into a `Dataset` (not yet validated: `ingest` does that).

    Raises `IngestError` naming the file and line or row of the first record it cannot
    parse; rules between records (unique ids, known references) are `validate`'s.
    """
    folder = Path(folder)
    files = _table_files(folder)
    frames: dict[str, pl.DataFrame] = {}
    for done, (table, path) in enumerate(sorted(files.items(), key=lambda kv: kv[1].name)):
        if progress is not None:
            progress(path.name, done, len(files))
        try:
            if path.suffix.lower() == ".tsv":
                frames[table] = read_qrels(path, provenance=True)
            elif path.suffix.lower() == ".jsonl":
                frames[table] = _read_jsonl(path, table)
            else:
                frames[table] = _read_parquet(path, table)
        except OSError as exc:  # a directory, a dangling link or loop, no read permission
            raise IngestError(path.name, f"cannot be read ({exc.strerror or exc}); "
                              f"expected a readable file at {path}") from None
        if table == "events":
            frames[table] = _finish_events(frames[table])
    if progress is not None:
        progress("read", len(files), len(files))
    tables = {t: frames.get(t, empty(schema)) for t, schema in TABLES.items()}
    return Dataset(source="generic", version=FORMAT_VERSION,
                   digest=_digest(list(files.values())), **tables)
