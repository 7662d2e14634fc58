"""Bad inputs to `msprlab ingest generic` and `msprlab ingest contextkit`, one row each.

Every case starts from a valid input (the shipped generic example, the ContextKit fixture)
already ingested into a store, breaks it one way and runs the CLI: exit status 2, a message
naming the file, the line or row and the field, no traceback, and the store byte for byte
as it was, with no temp file left beside it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from qdrant_client import QdrantClient
from test_contextkit_source import COLLECTION, FILES, FIXTURE, mid, sql
from test_contextkit_source import edit_line as edit_graph_line
from test_generic import EXAMPLE, edit_line, to_parquet

from msprlab.experiments.cli import main

ROOT = os.geteuid() == 0
AS_ROOT = pytest.mark.skipif(ROOT, reason="running as root: chmod 000 does not stop root "
                                          "from reading the file, so nothing is refused")


@dataclass(frozen=True)
class Case:
    name: str
    spoil: Callable[[Path], None]  # breaks the input under this folder
    expect: tuple[str, ...]        # each must appear in the message


def _append(path: Path, record: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def _prepend(path: Path, record: dict) -> None:
    path.write_text(json.dumps(record) + "\n" + path.read_text())


def _replace_text(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}: the case no longer breaks anything"
    path.write_text(text.replace(old, new, 1))


# ---- generic ----------------------------------------------------------------------------
def _as_parquet(folder: Path, table: str, change: Callable[[pl.DataFrame], pl.DataFrame]) -> None:
    """Replace `table`'s JSONL by a Parquet file of the example's data, changed."""
    parquet = to_parquet(folder)
    frame = change(pl.read_parquet(parquet / f"{table}.parquet"))
    shutil.rmtree(parquet)
    (folder / f"{table}.jsonl").unlink()
    frame.write_parquet(folder / f"{table}.parquet")


def _created(values: pl.Series) -> Callable[[pl.DataFrame], pl.DataFrame]:
    return lambda frame: frame.with_columns(values.alias("created_at"))


def _ms(*values: int) -> pl.Series:
    return pl.Series([0, 0, 0, 0, *values], dtype=pl.Int64).cast(pl.Datetime("ms"))


def _truncated_parquet(folder: Path) -> None:
    _as_parquet(folder, "edges", lambda frame: frame)
    data = (folder / "edges.parquet").read_bytes()
    (folder / "edges.parquet").write_bytes(data[: len(data) // 2])


def _empty_parquet(folder: Path) -> None:
    _as_parquet(folder, "edges", lambda frame: frame)
    (folder / "edges.parquet").write_bytes(b"")


def _folder_for(name: str) -> Callable[[Path], None]:
    def spoil(folder: Path) -> None:
        if name.endswith(".parquet"):
            _as_parquet(folder, name.removesuffix(".parquet"), lambda frame: frame)
        (folder / name).unlink()
        (folder / name).mkdir()
        if name.endswith(".parquet"):  # a Parquet reader would read the folder's files
            pl.DataFrame({"src": ["m1"]}).write_parquet(folder / name / "part.parquet")
    return spoil


def _link(name: str, target: str) -> Callable[[Path], None]:
    def spoil(folder: Path) -> None:
        if name.endswith(".parquet"):
            _as_parquet(folder, name.removesuffix(".parquet"), lambda frame: frame)
        (folder / name).unlink()
        (folder / name).symlink_to(folder / target)
    return spoil


def _unreadable(name: str) -> Callable[[Path], None]:
    def spoil(folder: Path) -> None:
        if name.endswith(".parquet"):
            _as_parquet(folder, name.removesuffix(".parquet"), lambda frame: frame)
        (folder / name).chmod(0)
    return spoil


def _short_query_vectors(folder: Path) -> None:
    path = folder / "query_embeddings.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "vector": r["vector"][:3]}) + "\n" for r in rows))


def _memory(n: int, **change: object) -> Callable[[Path], None]:
    return lambda folder: edit_line(folder / "memories.jsonl", n, dict(change))


GENERIC = [
    # 1. timestamps out of range, as text and as Parquet values
    Case("offset-past-year-9999", _memory(2, created_at="9999-12-31T23:30:00-02:00"),
         ("memories.jsonl line 2: field 'created_at': expected a timestamp within years "
          "1-9999 once converted to UTC",)),
    Case("offset-before-year-1", lambda f: edit_line(f / "events.jsonl", 1,
                                                    {"ts": "0001-01-01T00:00:00+05:00"}),
         ("events.jsonl line 1: field 'ts': expected a timestamp within years 1-9999",)),
    Case("year-99999-text", _memory(3, created_at="99999-01-01T00:00:00"),
         ("memories.jsonl line 3: field 'created_at': expected an ISO-8601 timestamp",)),
    Case("epoch-1e30", lambda f: edit_line(f / "events.jsonl", 1, {"ts": 1e30}),
         ("events.jsonl line 1: field 'ts': expected an ISO-8601 timestamp, got 1e+30",)),
    Case("parquet-year-99999", lambda f: _as_parquet(
        f, "memories", _created(_ms(99_999 * 365 * 86_400_000))),
         ("memories.parquet row 4: field 'created_at': expected a timestamp within years "
          "1-9999, got 3153568464000000 ms",)),
    Case("parquet-past-microsecond-range", lambda f: _as_parquet(
        f, "memories", _created(_ms(9_000_000_000_000_000))),
         ("memories.parquet row 4: field 'created_at': expected a timestamp within years",)),
    Case("parquet-date-year-20000", lambda f: _as_parquet(
        f, "memories", _created(pl.Series([0, 0, 0, 0, 6_575_000], dtype=pl.Int32)
                                .cast(pl.Date))),
         ("memories.parquet row 4: field 'created_at': expected a timestamp within years "
          "1-9999, got 6575000 days",)),
    # 2. files that cannot be read as tables
    Case("parquet-truncated", _truncated_parquet,
         ("edges.parquet: not a readable Parquet file", "write it again")),
    Case("parquet-empty", _empty_parquet, ("edges.parquet: not a readable Parquet file",)),
    Case("parquet-is-a-folder", _folder_for("edges.parquet"),
         ("edges.parquet: cannot be read (Is a directory)",)),
    Case("jsonl-is-a-folder", _folder_for("edges.jsonl"),
         ("edges.jsonl: cannot be read (Is a directory)",)),
    Case("parquet-link-loop", _link("edges.parquet", "edges.parquet"),
         ("edges.parquet: cannot be read", "symbolic links")),
    Case("parquet-dangling-link", _link("edges.parquet", "nowhere.parquet"),
         ("edges.parquet: cannot be read", "No such file or directory")),
    Case("tsv-link-loop", _link("qrels.tsv", "qrels.tsv"),
         ("qrels.tsv: cannot be read (Too many levels of symbolic links)",)),
    Case("jsonl-unreadable", _unreadable("memories.jsonl"),
         ("memories.jsonl: cannot be read (Permission denied)",)),
    Case("parquet-unreadable", _unreadable("edges.parquet"),
         ("edges.parquet: cannot be read", "Permission denied")),
    # 3. query vectors in another space than the memories'
    Case("query-vectors-shorter", _short_query_vectors,
         ("query_embeddings.jsonl line 1: field 'vector': expected 4 numbers like the "
          "memories' 'toy-4d' vectors (embeddings), got 3",)),
    # 4. memories and their events disagree
    Case("no-created-at-with-events", _memory(2, created_at="<drop>"),
         ("memories.jsonl line 2: field 'created_at': required when the store has events",)),
    Case("event-of-unknown-memory", lambda f: edit_line(f / "events.jsonl", 7,
                                                       {"memory_id": "m9"}),
         ("events.jsonl line 7: field 'memory_id': unknown memory_id 'm9'",)),
    Case("deleted-before-created", lambda f: _append(f / "events.jsonl", {
        "ts": "2024-02-01T00:00:00Z", "kind": "memory_deleted", "memory_id": "m4"}),
         ("events.jsonl line 13: field 'ts': memory_deleted of 'm4' at 2024-02-01 00:00:00 "
          "is before the memory's created_at",)),
    Case("deleted-but-never-deleted", lambda f: _append(f / "events.jsonl", {
        "ts": "2024-05-01T00:00:00Z", "kind": "memory_deleted", "memory_id": "m1"}),
         ("events.jsonl line 13: field 'kind': memory_deleted of 'm1' is for a memory "
          "without deleted_at",)),
    Case("updated-before-added", lambda f: _prepend(f / "events.jsonl", {
        "ts": "2024-03-01T09:00:00Z", "kind": "memory_updated", "memory_id": "m1"}),
         ("events.jsonl line 1: field 'kind': memory_updated of 'm1' comes before its "
          "memory_added (at events.jsonl line 2)",)),
    Case("added-twice", lambda f: _append(f / "events.jsonl", {
        "ts": "2024-03-02T00:00:00Z", "kind": "memory_added", "memory_id": "m1"}),
         ("events.jsonl line 13: field 'kind': memory_added of 'm1' a second time (first "
          "at events.jsonl line 1)",)),
    Case("added-after-created", lambda f: edit_line(f / "events.jsonl", 1,
                                                    {"ts": "2024-03-01T09:30:00Z"}),
         ("events.jsonl line 1: field 'ts': memory_added of 'm1' at 2024-03-01 09:30:00 is "
          "not at the memory's created_at 2024-03-01 09:00:00",)),
    Case("deleted-twice", lambda f: _append(f / "events.jsonl", {
        "ts": "2024-05-02T00:00:00Z", "kind": "memory_deleted", "memory_id": "m4"}),
         ("events.jsonl line 13: field 'kind': memory_deleted of 'm4' a second time",)),
    # 5. ids that TREC files or owner filters cannot carry
    Case("empty-memory-id", lambda f: _append(f / "memories.jsonl", {
        "memory_id": "", "text": "x", "created_at": "2024-03-01T00:00:00Z"}),
         ("memories.jsonl line 6: field 'memory_id': expected a non-empty id without "
          "whitespace, got ''",)),
    Case("query-id-with-space", lambda f: _append(f / "queries.jsonl", {
        "query_id": "q 4", "text": "x", "user_id": "bob"}),
         ("queries.jsonl line 4: field 'query_id': expected a non-empty id without "
          "whitespace, got 'q 4'",)),
    Case("user-id-with-tab", _memory(5, user_id="bob\t"),
         ("memories.jsonl line 5: field 'user_id': expected a non-empty id",)),
    Case("event-user-id-empty", lambda f: edit_line(f / "events.jsonl", 7, {"user_id": ""}),
         ("events.jsonl line 7: field 'user_id': expected a non-empty id",)),
    # 6. a key given twice in one JSON object
    Case("duplicate-key", lambda f: _replace_text(f / "memories.jsonl", '"text": "Bob is',
                                                  '"text": "x", "text": "Bob is'),
         ("memories.jsonl line 4: field 'text': duplicate key 'text' at text",)),
    Case("duplicate-key-nested", lambda f: _replace_text(
        f / "events.jsonl", '"filters": {"user_id": "alice"', '"filters": {"user_id": "bob", '
                                                             '"user_id": "alice"'),
         ("events.jsonl line 6: field 'filters': duplicate key 'user_id' at filters.user_id",)),
    Case("duplicate-key-parquet-metadata", lambda f: _as_parquet(
        f, "memories", lambda frame: frame.with_columns(
            metadata=pl.lit('{"topic": "a", "topic": "b"}'))),
         ("memories.parquet row 0: field 'metadata': duplicate key 'topic'",)),
]


# ---- contextkit ---------------------------------------------------------------------------
def _payload(point: int, **change: object) -> Callable[[Path], None]:
    def spoil(root: Path) -> None:
        client = QdrantClient(path=str(root / FILES["qdrant_path"]))
        client.set_payload(COLLECTION, dict(change), points=[mid(point)])
        client.close()
    return spoil


def _qdrant_storage(root: Path) -> Path:
    [storage] = (root / "qdrant" / "collection").glob("*/storage.sqlite")
    return storage


def _ck(name: str, action: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda root: action(root / FILES[name])


def _replace_file(kind: str) -> Callable[[Path], None]:
    def spoil(path: Path) -> None:
        path.unlink()
        if kind == "folder":
            path.mkdir()
        elif kind == "loop":
            path.symlink_to(path)
        else:
            path.symlink_to(path.with_name("nowhere.db"))
    return spoil


def _feedback(statement: str) -> Callable[[Path], None]:
    return _ck("feedback_db", lambda path: sql(path, statement))


CONTEXTKIT = [
    # 1. timestamps out of range
    Case("sqlite-offset-past-year-9999", _feedback(
        "UPDATE feedback_events SET timestamp = '9999-12-31T23:59:00-08:00' WHERE id = 2"),
         ("feedback_events.db row id=2: field 'timestamp': expected a timestamp within years "
          "1-9999 once converted to UTC",)),
    Case("success-offset-before-year-1", _ck("success_db", lambda p: sql(
        p, "UPDATE query_success SET timestamp = '0001-01-01T00:00:00+01:00' WHERE id = 2")),
         ("query_success.db row id=2: field 'timestamp': expected a timestamp within years",)),
    Case("sqlite-year-99999", _feedback(
        "UPDATE feedback_events SET timestamp = '99999-01-01T00:00:00' WHERE id = 2"),
         ("feedback_events.db row id=2: field 'timestamp': expected an ISO-8601 timestamp",)),
    Case("sqlite-epoch-1e30", _feedback("UPDATE feedback_events SET timestamp = 1e30 "
                                        "WHERE id = 2"),
         ("feedback_events.db row id=2: field 'timestamp': expected an ISO-8601 timestamp",)),
    Case("graph-offset-past-year-9999", _ck("graph_jsonl", lambda p: edit_graph_line(
        p, 2, {"created_at": "9999-12-31T23:59:00-08:00"})),
         ("context_graph.jsonl line 2: field 'created_at': expected a timestamp within years",)),
    Case("payload-offset-past-year-9999", _payload(3, created_at="9999-12-31T23:00:00-08:00"),
         (f"qdrant collection '{COLLECTION}' point {mid(3)}: field 'created_at': expected a "
          "timestamp within years",)),
    # 2. files that cannot be read
    Case("sqlite-truncated", _ck("feedback_db", lambda p: p.write_bytes(p.read_bytes()[:4096])),
         ("feedback_events.db: cannot read it as SQLite",)),
    Case("sqlite-empty", _ck("feedback_db", lambda p: p.write_bytes(b"")),
         ("feedback_events.db: no table 'feedback_events'",)),
    Case("graph-empty", _ck("graph_jsonl", lambda p: p.write_bytes(b"")),
         ("context_graph.jsonl: no export envelope on line 1",)),
    Case("sqlite-is-a-folder", _ck("feedback_db", _replace_file("folder")),
         ("feedback_events.db: not a file (given as --feedback-db)",)),
    Case("sqlite-link-loop", _ck("feedback_db", _replace_file("loop")),
         ("feedback_events.db: a dangling symbolic link or a link loop",
          "given as --feedback-db")),
    Case("graph-dangling-link", _ck("graph_jsonl", _replace_file("dangling")),
         ("context_graph.jsonl: a dangling symbolic link or a link loop (to ",
          "nowhere.db; given as --graph-jsonl")),
    Case("sqlite-unreadable", _ck("feedback_db", lambda p: p.chmod(0)),
         ("feedback_events.db: cannot be read (Permission denied; given as --feedback-db)",)),
    Case("qdrant-file-unreadable", lambda root: (root / "qdrant" / "meta.json").chmod(0),
         ("meta.json: cannot be read (Permission denied; given as --qdrant-path)",)),
    Case("qdrant-storage-not-sqlite", lambda root: _qdrant_storage(root).write_text("x" * 200),
         ("qdrant: the Qdrant storage is damaged (DatabaseError: file is not a database)",
          "given as --qdrant-path")),
    Case("qdrant-storage-truncated", lambda root: os.truncate(_qdrant_storage(root), 100),
         ("qdrant: the Qdrant storage is damaged (DatabaseError",)),
    Case("qdrant-meta-not-json", lambda root: (root / "qdrant" / "meta.json").write_text("{"),
         ("qdrant: the Qdrant storage is damaged (JSONDecodeError",)),
    # 3. verdicts out of time order; a table another library version wrote
    Case("verdicts-out-of-order", _feedback(
        "UPDATE feedback_events SET timestamp = '2024-03-02T10:12:30+00:00' WHERE id = 4"),
         ("feedback_events.db row id=4: field 'timestamp': 2024-03-02T10:12:30 is earlier "
          "than row id=3's 2024-03-02T10:14:20",)),
    Case("feedback-table-of-another-version", _feedback(
        "ALTER TABLE feedback_events RENAME COLUMN query_hash TO qhash"),
         ("feedback_events.db: table 'feedback_events' has no column ['query_hash']",
          "as outhad-contextkitai 0.1.4 writes it")),
    Case("verdict-memory-in-neither-collection-nor-graph", _feedback(
        "UPDATE feedback_events SET memory_id = 'gone' WHERE id = 2"),
         ("feedback_events.db row id=2: field 'memory_id': unknown memory_id 'gone'",)),
    # 5. ids
    Case("verdict-user-id-empty", _feedback("UPDATE feedback_events SET user_id = '' "
                                            "WHERE id = 2"),
         ("feedback_events.db row id=2: field 'user_id': expected a non-empty id",)),
    Case("payload-user-id-with-space", _payload(3, user_id="al ice"),
         (f"point {mid(3)}: field 'user_id': expected a non-empty id without whitespace",)),
    # 6. a key given twice in one JSON object
    Case("graph-duplicate-key", _ck("graph_jsonl", lambda p: edit_graph_line(
        p, 9, '{"kind": "edge", "kind": "node", "data": {}}')),
         ("context_graph.jsonl line 9: field 'kind': duplicate key 'kind' at kind",)),
    Case("graph-duplicate-key-nested", _ck("graph_jsonl", lambda p: _replace_text(
        p, '{"data": {"access_count": 2,', '{"data": {"access_count": 1, "access_count": 2,')),
         ("context_graph.jsonl line 2: field 'data': duplicate key 'access_count' at "
          "data.access_count",)),
]

_UNREADABLE = {"jsonl-unreadable", "parquet-unreadable", "sqlite-unreadable",
               "qdrant-file-unreadable"}


def _params(cases: list[Case]) -> list[object]:
    return [pytest.param(c, id=c.name, marks=[AS_ROOT] if c.name in _UNREADABLE else [])
            for c in cases]


def _generic_argv(root: Path, store: Path) -> list[str]:
    return ["ingest", "generic", str(root), "--store", str(store)]


def _contextkit_argv(root: Path, store: Path) -> list[str]:
    flags = [part for name, file in FILES.items()
             for part in (f"--{name.replace('_', '-')}", str(root / file))]
    return ["ingest", "contextkit", *flags, "--store", str(store)]


def _assert_refused(argv: list[str], store: Path, expect: tuple[str, ...],
                    capsys: pytest.CaptureFixture[str]) -> None:
    before = store.read_bytes()
    assert main(argv) == 2
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())
    for part in expect:
        assert part in out, f"{part!r} not in the output {out!r}"
    assert "Traceback" not in out and "nothing was written" in out
    assert store.read_bytes() == before
    assert sorted(p.name for p in store.parent.iterdir()) == [store.name]  # no temp file


@pytest.fixture
def ingested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Path]:
    """Copy a valid input to tmp_path/input, ingest it to tmp_path/store/...; the store."""
    def make(source: Path, argv: Callable[[Path, Path], list[str]]) -> Path:
        root, store = tmp_path / "input", tmp_path / "store" / "store.duckdb"
        shutil.copytree(source, root)
        assert main(argv(root, store)) == 0
        capsys.readouterr()
        return store
    return make


@pytest.mark.parametrize("case", _params(GENERIC))
def test_generic_bad_input_is_exit_2_naming_where(case, ingested, tmp_path, capsys):
    store = ingested(EXAMPLE, _generic_argv)
    case.spoil(tmp_path / "input")
    _assert_refused(_generic_argv(tmp_path / "input", store), store, case.expect, capsys)


@pytest.mark.parametrize("case", _params(CONTEXTKIT))
def test_contextkit_bad_input_is_exit_2_naming_where(case, ingested, tmp_path, capsys):
    store = ingested(FIXTURE, _contextkit_argv)
    case.spoil(tmp_path / "input")
    _assert_refused(_contextkit_argv(tmp_path / "input", store), store, case.expect, capsys)


def test_the_cases_are_distinct():
    names = [c.name for c in GENERIC + CONTEXTKIT]
    assert len(names) == len(set(names)) and set(names) >= _UNREADABLE
