"""The event store: one validated dataset in one DuckDB file, written all or nothing.

`ingest` validates a `Dataset`, builds a new database in a temp file beside the store and
`os.replace`s it over the old one, so a failure or a kill at any point leaves the old
store exactly as it was (a killed ingest may leave its temp file behind; the next ingest
into that folder removes the temp files of processes that no longer run).

One store holds one dataset. Re-ingesting a dataset with the digest the store already
holds is a no-op. A dataset with another digest (another source, or a changed one) is
refused with `StoreConflictError` unless `replace=True`: results elsewhere name the data
by its digest, so a store never changes its contents silently.

Tables are those of `schema.TABLES` plus `manifest` (one row: source, version, digest,
counts as JSON, ingested_at). Events are stored in timeline order (event_id) with an index
on (ts, seq); the other tables keep the order of their frames. Provenance columns
(`_file`, `_row`) are not written. `load_dataset` reads the frames back exactly.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
from polars.datatypes import DataTypeClass

from .atomic import pid_alive
from .schema import EVENT_KINDS, MANIFEST, TABLES, Dataset
from .validate import IngestError, validate

__all__ = ["IngestReport", "Progress", "StoreConflictError", "ingest", "load_dataset",
           "manifest", "open_store"]

# progress(stage, done, total): called before each stage and once more when all are done.
Progress = Callable[[str, int, int], None]

_KIND_TYPE = "event_kind"
_STAGES = ("validate", *TABLES, "manifest", "index", "commit")


class StoreConflictError(ValueError):
    """The store holds another dataset, and the ingest was not asked to replace it."""


class StoreError(ValueError):
    """A file given as an event store that cannot be read as one."""


@dataclass(frozen=True)
class IngestReport:
    """What an ingest did. `written` is False when the store already held this digest."""

    path: Path
    source: str
    version: str
    digest: str
    counts: dict[str, int]
    written: bool
    replaced_digest: str | None
    seconds: float

    def summary(self) -> str:
        if not self.written:
            return (f"{self.path}: unchanged, it already holds {self.source} {self.version} "
                    f"(digest {self.digest[:12]})")
        replaced = f", replacing digest {self.replaced_digest[:12]}" if self.replaced_digest else ""
        return (f"{self.path}: wrote {self.source} {self.version} (digest {self.digest[:12]})"
                f"{replaced} in {self.seconds:.2f} s")


def _sql_type(dtype: pl.DataType | DataTypeClass) -> str:
    if isinstance(dtype, pl.List):
        return f"{_sql_type(dtype.inner)}[]"
    if isinstance(dtype, pl.Enum):
        return _KIND_TYPE
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    names = ((pl.String, "VARCHAR"), (pl.Int64, "BIGINT"), (pl.Float64, "DOUBLE"),
             (pl.Float32, "FLOAT"), (pl.Boolean, "BOOLEAN"))
    return next(name for known, name in names if dtype == known)


def _create_table(name: str, schema: pl.Schema) -> str:
    columns = ", ".join(f'"{c}" {_sql_type(t)}' for c, t in schema.items())
    return f"CREATE TABLE {name} ({columns})"


def _quoted(schema: pl.Schema) -> str:
    return ", ".join(f'"{c}"' for c in schema)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def _sweep_stale(path: Path) -> None:
    """Remove temp files that killed ingests left beside `path` (their process is gone)."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(\d+)\.[0-9a-f]+\.tmp(\.wal)?$")
    for entry in path.parent.iterdir():
        match = pattern.match(entry.name)
        if match and not pid_alive(int(match.group(1))):
            entry.unlink(missing_ok=True)


@contextmanager
def _atomic_database(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to a new database that replaces `path` only if the block succeeds."""
    tmp = _temp_name(path)
    wal = tmp.with_name(tmp.name + ".wal")
    try:
        try:
            con = duckdb.connect(str(tmp))
        except duckdb.Error as exc:  # a folder that cannot hold the file
            raise IngestError(f"--store {path}", f"cannot create the store there "
                              f"({_reason(exc)}); give a writable path") from None
        try:
            yield con
            con.execute("CHECKPOINT")
        # e.g. a full disk: DuckDB says so as an IO error, or as a commit that failed
        except (duckdb.IOException, duckdb.FatalException, duckdb.TransactionException) as exc:
            raise IngestError(f"--store {path}", f"writing the store failed "
                              f"({_reason(exc)}); nothing was replaced") from None
        finally:
            con.close()
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
        wal.unlink(missing_ok=True)


def _reason(exc: Exception) -> str:
    return str(exc).splitlines()[0].removeprefix("IO Error: ")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _outgoing(frame: pl.DataFrame, name: str, schema: pl.Schema) -> pl.DataFrame:
    """The frame as written: schema columns only, events in timeline order.

    The event kind goes out as text: DuckDB casts it to its ENUM faster than it converts
    Arrow dictionary arrays, and sorting in Polars is faster than ORDER BY in the insert.
    """
    frame = frame.select(schema.names())
    if name != "events":
        return frame
    if not frame.select(pl.col("event_id").diff().drop_nulls().gt(0).all()).item():
        frame = frame.sort("event_id")
    return frame.with_columns(pl.col("kind").cast(pl.String))


def _write(con: duckdb.DuckDBPyConnection, ds: Dataset, ingested_at: datetime,
           progress: Progress) -> None:
    kinds = ", ".join(f"'{k}'" for k in EVENT_KINDS)
    con.execute(f"CREATE TYPE {_KIND_TYPE} AS ENUM ({kinds})")
    step = 1
    for name, schema in TABLES.items():
        progress(name, step, len(_STAGES))
        con.execute(_create_table(name, schema))
        con.register("_frame", _outgoing(getattr(ds, name), name, schema))
        try:
            con.execute(f"INSERT INTO {name} SELECT {_quoted(schema)} FROM _frame")
        finally:
            con.unregister("_frame")
        step += 1
    progress("manifest", step, len(_STAGES))
    con.execute(_create_table("manifest", MANIFEST))
    con.execute("INSERT INTO manifest VALUES (?, ?, ?, ?, ?, ?)",
                [ds.source, ds.version, ds.digest, json.dumps(ds.counts()), ingested_at,
                 json.dumps(ds.embedders())])
    progress("index", step + 1, len(_STAGES))
    con.execute("CREATE INDEX events_timeline ON events (ts, seq)")
    progress("commit", step + 2, len(_STAGES))


def _held(path: Path) -> dict[str, Any] | None:
    """The manifest of the store at `path`, None if there is no file there."""
    if not path.exists():
        return None
    try:
        return manifest(path)
    except (duckdb.Error, ValueError) as exc:
        return {"source": None, "digest": None, "problem": str(exc)}


def ingest(ds: Dataset, store_path: Path, *, replace: bool = False,
           progress: Progress | None = None) -> IngestReport:
    """Validate `ds` and write it to the store at `store_path`, all or nothing.

    Parameters
    ----------
    ds : the dataset; its frames must have the schemas of `schema.TABLES`.
    store_path : the DuckDB file; its folder is created if needed.
    replace : overwrite a store that holds another dataset (another digest), or a file
        that is not a store. Without it such an ingest raises `StoreConflictError`.
    progress : called as `progress(stage, done, total)` before each stage.

    The digest is compared first (an unchanged dataset is neither validated nor written
    again), then the dataset is validated, then the store's contents are checked.

    Raises
    ------
    IngestError : a row breaks the contract; nothing is written.
    StoreConflictError : the store holds another dataset and `replace` is False.
    """
    started = time.perf_counter()
    store_path = Path(store_path)
    report = _progress_or_silent(progress)
    held = _held(store_path)
    if held is not None and held["digest"] == ds.digest:
        return IngestReport(store_path, held["source"], held["version"], held["digest"],
                            held["counts"], False, None, time.perf_counter() - started)
    report("validate", 0, len(_STAGES))
    validate(ds)
    if held is not None and not replace:
        raise StoreConflictError(_conflict_message(store_path, held, ds))
    store_path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(store_path)
    ingested_at = datetime.now(UTC).replace(tzinfo=None)
    with _atomic_database(store_path) as con:
        _write(con, ds, ingested_at, report)
    report("done", len(_STAGES), len(_STAGES))
    return IngestReport(store_path, ds.source, ds.version, ds.digest, ds.counts(), True,
                        held["digest"] if held else None, time.perf_counter() - started)


def _progress_or_silent(progress: Progress | None) -> Progress:
    return progress if progress is not None else (lambda stage, done, total: None)


def _conflict_message(path: Path, held: dict[str, Any], ds: Dataset) -> str:
    incoming = f"{ds.source} {ds.version} (digest {ds.digest[:12]})"
    if held["digest"] is None:
        return (f"{path} exists but is not an msprlab event store ({held['problem']}); "
                f"refusing to overwrite it with {incoming}. Choose another path, or pass "
                "replace=True (--replace) to overwrite it.")
    return (f"{path} holds {held['source']} {held['version']} (digest {held['digest'][:12]}, "
            f"ingested {held['ingested_at']:%Y-%m-%d %H:%M:%S} UTC), not {incoming}. One store "
            "holds one dataset: choose another path, or pass replace=True (--replace) to "
            "replace it.")


# Tables added after the first stores were written: a store without them reads them empty.
_OPTIONAL = frozenset({"query_embeddings"})


def open_store(path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the store at `path`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no event store here; create one with "
                                "`msprlab ingest SOURCE ... --store PATH`")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:  # not DuckDB, truncated, or locked by a writer
        raise StoreError(f"{path}: cannot be opened as an event store ({_reason(exc)}); give a "
                         "store written by `msprlab ingest`, or ingest it again") from None
    tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    missing = sorted((set(TABLES) | {"manifest"}) - tables - _OPTIONAL)
    if missing:
        con.close()
        raise StoreError(f"{path}: a DuckDB file but not an msprlab event store (missing "
                         f"tables {missing}); give a store written by `msprlab ingest`")
    return con


def manifest(path: Path) -> dict[str, Any]:
    """The store's manifest: source, version, digest, counts (a dict) and ingested_at."""
    con = open_store(path)
    try:
        row = con.sql("SELECT * FROM manifest").pl()
    finally:
        con.close()
    if row.height != 1:
        raise StoreError(f"{path}: the manifest has {row.height} rows, expected 1; ingest "
                         "the store again")
    record: dict[str, Any] = row.row(0, named=True)
    record["counts"] = json.loads(record["counts"])
    # A store written before the manifest described its vectors: unknown, not "none".
    record["embedders"] = json.loads(record["embedders"]) if record.get("embedders") else None
    return record


def load_dataset(path: Path) -> Dataset:
    """Read every table of the store back into a `Dataset` (events in timeline order)."""
    con = open_store(path)
    try:
        meta = con.sql("SELECT source, version, digest FROM manifest").fetchall()[0]
        frames = {}
        present = {row[0] for row in con.execute(
            "SELECT table_name FROM duckdb_tables()").fetchall()}
        for name, schema in TABLES.items():
            if name not in present:  # an optional table a store from an older msprlab lacks
                frames[name] = pl.DataFrame(schema=schema)
                continue
            order = " ORDER BY event_id" if name == "events" else ""
            held = {row[0] for row in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ?",
                [name]).fetchall()}
            # a column added since an older msprlab wrote the store: null in its rows
            kept = pl.Schema({c: t for c, t in schema.items() if c in held})
            frame = con.sql(f"SELECT {_quoted(kept)} FROM {name}{order}").pl()
            frames[name] = frame.with_columns(
                pl.lit(None, dtype=t).alias(c) for c, t in schema.items() if c not in held
            ).select(schema.names()).cast(dict(schema.items()))
    finally:
        con.close()
    return Dataset(source=meta[0], version=meta[1], digest=meta[2], **frames)
