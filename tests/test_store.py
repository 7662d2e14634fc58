"""The event store: exact round trips, the digest no-op, replace rules, and atomicity."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
from bench.bench_ingest import generate
from polars.testing import assert_frame_equal

from msprlab.datasets import store as store_module
from msprlab.datasets.generic import read_generic
from msprlab.datasets.schema import PROVENANCE, TABLES, Dataset
from msprlab.datasets.store import (
    StoreConflictError,
    ingest,
    load_dataset,
    manifest,
    open_store,
)
from msprlab.datasets.validate import IngestError

EXAMPLE = Path(__file__).parents[1] / "datasets" / "data" / "example_generic"


@pytest.fixture(scope="module")
def small() -> Dataset:
    return generate(n_memories=300, n_queries=200, n_events=3_000, dim=8, seed=7)


@pytest.fixture(scope="module")
def other() -> Dataset:
    return generate(n_memories=100, n_queries=50, n_events=500, dim=8, seed=8)


def assert_same_dataset(actual: Dataset, expected: Dataset) -> None:
    assert (actual.source, actual.version, actual.digest) == (
        expected.source, expected.version, expected.digest)
    for name, frame in expected.tables().items():
        assert_frame_equal(actual.tables()[name], frame.drop(PROVENANCE, strict=False))


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".wal")))


def test_every_table_round_trips_exactly(small, tmp_path):
    assert all(frame.height > 0 for frame in small.tables().values())
    assert small.memories["deleted_at"].null_count() > 0  # nulls round trip too
    assert small.events["shown"].null_count() > 0
    path = tmp_path / "store.duckdb"
    report = ingest(small, path)
    assert report.written and report.replaced_digest is None
    assert_same_dataset(load_dataset(path), small)


def test_empty_tables_round_trip(tmp_path):
    ds = read_generic(EXAMPLE)
    only_memories = Dataset("generic", "1", "digest-only-memories", memories=ds.memories)
    path = tmp_path / "store.duckdb"
    ingest(only_memories, path)
    assert_same_dataset(load_dataset(path), only_memories)


def test_provenance_is_not_written_and_events_come_back_in_timeline_order(tmp_path):
    ds = read_generic(EXAMPLE)
    shuffled = dataclasses.replace(ds, events=ds.events.reverse())
    path = tmp_path / "store.duckdb"
    ingest(shuffled, path)
    back = load_dataset(path)
    assert_same_dataset(back, ds)
    con = open_store(path)
    try:
        columns = {r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE column_name LIKE '\\_%' ESCAPE '\\'"
        ).fetchall()}
        indexes = con.execute("SELECT index_name, expressions FROM duckdb_indexes()").fetchall()
    finally:
        con.close()
    assert columns == set()
    assert indexes == [("events_timeline", "[ts, seq]")]


def test_manifest_records_source_digest_and_counts(small, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    meta = manifest(path)
    assert {k: meta[k] for k in ("source", "version", "digest", "counts")} == {
        "source": "bench", "version": "1", "digest": small.digest, "counts": small.counts()}
    assert meta["ingested_at"].tzinfo is None


def test_same_digest_is_a_noop(small, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    before = path.stat()
    report = ingest(small, path)
    assert not report.written and report.counts == small.counts()
    assert "unchanged" in report.summary()
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_another_dataset_is_refused_unless_replace(small, other, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    with pytest.raises(StoreConflictError, match=r"holds bench 1 \(digest [0-9a-f]{12}, "
                                                 r"ingested .* UTC\), not bench 1"):
        ingest(other, path)
    assert_same_dataset(load_dataset(path), small)
    report = ingest(other, path, replace=True)
    assert report.replaced_digest == small.digest
    assert_same_dataset(load_dataset(path), other)


def test_a_file_that_is_not_a_store_is_refused_unless_replace(other, tmp_path):
    path = tmp_path / "notes.duckdb"
    path.write_text("my notes")
    with pytest.raises(StoreConflictError, match=r"exists but is not an msprlab event store"):
        ingest(other, path)
    assert path.read_text() == "my notes"
    ingest(other, path, replace=True)
    assert_same_dataset(load_dataset(path), other)


def test_invalid_dataset_writes_nothing(small, other, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    bad = dataclasses.replace(other, qrels=other.qrels.with_columns(relevance=pl.lit(-1,
                                                                                     pl.Int64)))
    with pytest.raises(IngestError, match=r"^qrels row 0: field 'relevance'"):
        ingest(bad, path, replace=True)
    assert_same_dataset(load_dataset(path), small)
    assert leftovers(tmp_path) == []


def test_failure_mid_write_leaves_the_old_store_and_no_temp_files(small, other, tmp_path,
                                                                  monkeypatch):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    real = store_module._outgoing
    seen: list[str] = []

    def failing(frame: pl.DataFrame, name: str, schema: pl.Schema) -> pl.DataFrame:
        seen.append(name)
        if name == "events":  # memories, embeddings and edges are already written
            assert leftovers(tmp_path), "the temp database should exist by now"
            raise OSError("disk full")
        return real(frame, name, schema)

    monkeypatch.setattr(store_module, "_outgoing", failing)
    with pytest.raises(OSError, match="disk full"):
        ingest(other, path, replace=True)
    assert seen == ["memories", "embeddings", "edges", "events"]
    assert leftovers(tmp_path) == []
    assert_same_dataset(load_dataset(path), small)


def test_open_store_is_read_only_and_refuses_a_missing_path(small, tmp_path):
    path = tmp_path / "store.duckdb"
    with pytest.raises(FileNotFoundError, match="no event store here"):
        open_store(path)
    ingest(small, path)
    con = open_store(path)
    try:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("DELETE FROM qrels")
    finally:
        con.close()


KILLED_INGEST = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from msprlab.datasets.store import ingest
    from bench.bench_ingest import generate

    store, marker = Path(sys.argv[1]), Path(sys.argv[2])
    ds = generate(n_memories=500, n_queries=200, n_events=5_000, dim=8, seed=9)

    def progress(stage, done, total):
        if stage == "events":  # memories, embeddings and edges are in the temp database
            marker.write_text("writing")
            time.sleep(60)

    ingest(ds, store, replace=True, progress=progress)
""")


def test_sigkill_during_ingest_leaves_the_old_store(small, other, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    marker = tmp_path / "marker"
    benches = str(Path(__file__).parent)  # tests/: where `bench.bench_ingest` lives
    child = subprocess.Popen([sys.executable, "-c", KILLED_INGEST, str(path), str(marker)],
                             env={**os.environ, "PYTHONPATH": benches})
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert child.poll() is None, "the ingest ended before it was killed"
            assert time.monotonic() < deadline, "the ingest never reached the events table"
            time.sleep(0.02)
        assert leftovers(tmp_path), "the temp database should be there, half written"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert_same_dataset(load_dataset(path), small)
    # The next ingest into the folder removes what the killed one left behind.
    ingest(other, path, replace=True)
    assert leftovers(tmp_path) == []
    assert_same_dataset(load_dataset(path), other)


def test_schema_tables_are_all_stored(small, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    con = open_store(path)
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    finally:
        con.close()
    assert names == {*TABLES, "manifest"}


def test_a_column_an_older_msprlab_did_not_write_reads_as_null(small, tmp_path):
    path = tmp_path / "store.duckdb"
    ingest(small, path)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE feedback_records DROP COLUMN success_row")
    con.execute("DROP TABLE query_embeddings")
    con.close()
    ds = load_dataset(path)
    assert ds.feedback_records["success_row"].null_count() == ds.feedback_records.height > 0
    assert ds.feedback_records.drop("success_row").equals(
        small.feedback_records.drop("success_row"))
    assert ds.query_embeddings.height == 0
