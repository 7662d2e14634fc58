"""The generic format: the shipped example, JSONL and Parquet variants, errors with lines."""

from __future__ import annotations

import argparse
import json
import shutil
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets.generic import REQUIRED, read_generic
from msprlab.datasets.schema import PROVENANCE
from msprlab.datasets.store import ingest, load_dataset
from msprlab.datasets.validate import IngestError, validate
from msprlab.experiments.cli.ingest import add_ingest_commands

EXAMPLE = Path(__file__).parents[1] / "datasets" / "data" / "example_generic"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(EXAMPLE, target)
    return target


def edit_line(path: Path, number: int, change: dict | str) -> None:
    lines = path.read_text().splitlines()
    if isinstance(change, str):
        lines[number - 1] = change
    else:
        record = json.loads(lines[number - 1])
        record.update(change)
        lines[number - 1] = json.dumps({k: v for k, v in record.items() if v != "<drop>"})
    path.write_text("\n".join(lines) + "\n")


def test_example_golden_facts():
    ds = read_generic(EXAMPLE)
    assert (ds.source, ds.version) == ("generic", "1")
    assert ds.counts() == {"memories": 5, "embeddings": 5, "edges": 2, "events": 12,
                           "queries": 3, "qrels": 4, "query_embeddings": 3,
                           "feedback_records": 0}
    first = ds.memories.drop(PROVENANCE).row(0, named=True)
    assert first == {
        "memory_id": "m1", "text": "Alice moved to Lisbon in March 2024.", "user_id": "alice",
        "agent_id": None, "run_id": "s1", "tenant_id": "acme", "sub_tenant_id": None,
        "role": "user", "allowed_roles": ["user", "admin"], "metadata": '{"topic": "travel"}',
        "created_at": datetime(2024, 3, 1, 9), "updated_at": None, "deleted_at": None}
    assert ds.events.drop(PROVENANCE).row(9, named=True) == {
        "event_id": 9, "ts": datetime(2024, 4, 3, 18), "seq": 9, "kind": "search",
        "memory_id": None, "query_id": "q2", "user_id": "alice", "agent_id": None,
        "run_id": None, "query": "What seat does Alice like when flying?",
        "filters": '{"user_id": "alice"}', "limit": 2, "shown": ["m3", "m2"], "helpful": None}
    assert ds.qrels.row(-1) == ("q3", "m5", 1, "qrels.tsv", 4)
    validate(ds)


def test_example_ingests_and_reingest_is_a_noop(tmp_path):
    store = tmp_path / "example.duckdb"
    first = ingest(read_generic(EXAMPLE), store)
    again = ingest(read_generic(EXAMPLE), store)
    assert first.written and not again.written
    assert load_dataset(store).counts() == first.counts


def test_digest_covers_every_table_file(folder):
    before = read_generic(folder).digest
    assert read_generic(folder).digest == before
    (folder / "README.md").write_text("not a table")
    assert read_generic(folder).digest == before
    with (folder / "edges.jsonl").open("a") as handle:
        handle.write("\n")
    assert read_generic(folder).digest != before


@pytest.mark.parametrize(("file", "line", "change", "message"), [
    ("memories.jsonl", 3, {"created_at": "yesterday"},
     "memories.jsonl line 3: field 'created_at': expected an ISO-8601 timestamp, "
     "got 'yesterday'"),
    ("memories.jsonl", 2, '{"memory_id": "m2", "text": "unterminated}',
     "memories.jsonl line 2: invalid JSON: Unterminated string starting at column 29"),
    ("memories.jsonl", 4, '["m4", "text"]',
     "memories.jsonl line 4: expected a JSON object, got ['m4', 'text']"),
    ("memories.jsonl", 1, {"tags": ["x"]},
     "memories.jsonl line 1: unknown field(s) ['tags']; memories fields are memory_id, text, "
     "user_id, agent_id, run_id, tenant_id, sub_tenant_id, role, allowed_roles, metadata, "
     "created_at, updated_at, deleted_at (datasets/FORMAT.md)"),
    ("memories.jsonl", 5, {"text": "<drop>"},
     "memories.jsonl line 5: field 'text': required, missing"),
    ("memories.jsonl", 5, {"text": None},
     "memories.jsonl line 5: field 'text': required, got null"),
    ("memories.jsonl", 1, {"metadata": "topic=travel"},
     "memories.jsonl line 1: field 'metadata': expected a JSON object, got 'topic=travel'"),
    ("memories.jsonl", 1, {"allowed_roles": "admin"},
     "memories.jsonl line 1: field 'allowed_roles': expected a list of strings, got 'admin'"),
    ("events.jsonl", 6, {"limit": "3"},
     "events.jsonl line 6: field 'limit': expected an integer, got '3'"),
    ("events.jsonl", 6, {"limit": 3.0},
     "events.jsonl line 6: field 'limit': expected an integer, got 3.0"),
    ("events.jsonl", 8, {"helpful": "yes"},
     "events.jsonl line 8: field 'helpful': expected true or false, got 'yes'"),
    ("events.jsonl", 7, {"kind": "view"},
     "events.jsonl line 7: field 'kind': expected one of memory_added, memory_updated, "
     "memory_deleted, search, feedback, access, click, got 'view'"),
    ("embeddings.jsonl", 2, {"vector": [0.1, "x"]},
     "embeddings.jsonl line 2: field 'vector': expected a list of numbers, got [0.1, 'x']"),
    ("edges.jsonl", 1, {"weight": True},
     "edges.jsonl line 1: field 'weight': expected a number, got True"),
    # Rules between records come from validate, still with file and line.
    ("events.jsonl", 10, {"limit": "<drop>"},
     "events.jsonl line 10: field 'limit': required for search events, got null"),
    ("edges.jsonl", 2, {"dst": "m6"},
     "edges.jsonl line 2: field 'dst': unknown memory_id 'm6' (not in memories)"),
    ("qrels.tsv", 3, "q2 0 m9 1",
     "qrels.tsv line 3: field 'memory_id': unknown memory_id 'm9' (not in memories)"),
    ("queries.jsonl", 3, {"query_id": "q1"},
     "queries.jsonl line 3: field 'query_id': duplicate query_id='q1' "
     "(first at queries.jsonl line 1)"),
])
def test_bad_record_names_file_line_and_field(folder, tmp_path, file, line, change, message):
    edit_line(folder / file, line, change)
    store = tmp_path / "store.duckdb"
    with pytest.raises(IngestError) as info:
        ingest(read_generic(folder), store)
    assert str(info.value) == message
    assert not store.exists()


def test_events_are_put_in_timeline_order_with_file_order_as_tie_break(folder):
    lines = (folder / "events.jsonl").read_text().splitlines()
    # m5's add moved to the top of the file: same timestamp as m4's, earlier in the file.
    moved = [lines[4], *lines[:4], *lines[5:]]
    (folder / "events.jsonl").write_text("\n".join(moved) + "\n")
    events = read_generic(folder).events
    assert events["memory_id"].head(5).to_list() == ["m1", "m2", "m3", "m5", "m4"]
    assert events["_row"].head(5).to_list() == [2, 3, 4, 1, 5]
    assert events["event_id"].to_list() == list(range(12))


def test_seq_given_on_some_events_only_is_an_error(folder):
    edit_line(folder / "events.jsonl", 4, {"seq": 7})
    with pytest.raises(IngestError) as info:
        read_generic(folder)
    assert str(info.value) == ("events.jsonl line 4: field 'seq': give it for every event or "
                               "for none (datasets/FORMAT.md: the same-timestamp rule)")


@pytest.mark.parametrize(("files", "message"), [
    ({"memory.jsonl": ""}, "memory.jsonl: unknown table file; expected memories, queries, "
                           "qrels, events, edges, embeddings, query_embeddings "
                           "(datasets/FORMAT.md)"),
    ({"memories.csv": ""}, "memories.csv: unsupported format for memories; use one of "
                           "memories.jsonl, memories.parquet"),
    ({"memories.parquet": ""}, "both memories.jsonl and memories.parquet: keep one file "
                               "per table"),
])
def test_folder_layout_errors(folder, files, message):
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(IngestError) as info:
        read_generic(folder)
    assert str(info.value).endswith(message)


def test_missing_memories_file(tmp_path):
    with pytest.raises(IngestError, match=r"no memories file \(memories.jsonl or "):
        read_generic(tmp_path)


def to_parquet(folder: Path) -> Path:
    """The example as Parquet: zoned timestamps, narrow ints, float64 vectors, categoricals."""
    jsonl = read_generic(folder)
    target = folder.parent / "parquet"
    target.mkdir()
    for name, frame in jsonl.tables().items():
        if name not in REQUIRED:  # a table the generic format has no file for
            continue
        frame = frame.drop(PROVENANCE).with_columns(
            pl.col(c).dt.replace_time_zone("UTC").dt.convert_time_zone("Europe/Lisbon")
            for c, t in frame.schema.items() if isinstance(t, pl.Datetime))
        if name == "events":
            frame = frame.drop("event_id", "seq").with_columns(pl.col("limit").cast(pl.Int16))
        if name == "embeddings":
            frame = frame.with_columns(pl.col("vector").cast(pl.List(pl.Float64)),
                                       pl.col("embedder").cast(pl.Categorical))
        frame.write_parquet(target / f"{name}.parquet")
    return target


def test_parquet_variant_reads_the_same_data(folder):
    jsonl = read_generic(folder)
    parquet = read_generic(to_parquet(folder))
    for name, frame in jsonl.tables().items():
        assert_frame_equal(parquet.tables()[name].drop(PROVENANCE, strict=False),
                           frame.drop(PROVENANCE, strict=False))
    assert parquet.memories["_file"][0] == "memories.parquet"
    assert parquet.memories["_row"].to_list() == [0, 1, 2, 3, 4]


def test_parquet_errors_name_the_row_or_column(folder):
    target = to_parquet(folder)
    memories = pl.read_parquet(target / "memories.parquet")
    memories.with_columns(text=pl.when(pl.col("memory_id") == "m3").then(None)
                          .otherwise("text")).write_parquet(target / "memories.parquet")
    with pytest.raises(IngestError, match=r"^memories.parquet row 2: field 'text': required, "
                                          r"got null$"):
        read_generic(target)
    memories.with_columns(pl.col("memory_id").cast(pl.Categorical).to_physical()).write_parquet(
        target / "memories.parquet")
    with pytest.raises(IngestError, match=r"^memories.parquet: column 'memory_id' is UInt32, "
                                          r"expected String$"):
        read_generic(target)
    memories.with_columns(metadata=pl.when(pl.col("memory_id") == "m5").then(pl.lit("travel"))
                          .otherwise("metadata")).write_parquet(target / "memories.parquet")
    with pytest.raises(IngestError, match=r"^memories.parquet row 4: field 'metadata': expected "
                                          r"the text of a JSON object, got 'travel'$"):
        read_generic(target)
    as_text = memories.with_columns(pl.col("created_at").dt.to_string("%Y-%m-%dT%H:%M:%S%z"))
    as_text.write_parquet(target / "memories.parquet")
    assert_frame_equal(read_generic(target).memories, read_generic(folder).memories.with_columns(
        _file=pl.lit("memories.parquet"), _row=pl.int_range(5, dtype=pl.Int64)))
    as_text.with_columns(created_at=pl.when(pl.col("memory_id") == "m2").then(pl.lit("yesterday"))
                         .otherwise("created_at")).write_parquet(target / "memories.parquet")
    with pytest.raises(IngestError, match=r"^memories.parquet row 1: field 'created_at': expected "
                                          r"an ISO-8601 timestamp, got 'yesterday'$"):
        read_generic(target)
    memories.write_parquet(target / "memories.parquet")
    events = pl.read_parquet(target / "events.parquet")
    events.with_columns(pl.col("kind").cast(pl.String).replace("access", "open")).write_parquet(
        target / "events.parquet")
    with pytest.raises(IngestError, match=r"^events.parquet row 6: field 'kind': expected one "
                                          r"of .*, got 'open'$"):
        read_generic(target)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="msprlab")
    add_ingest_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_ingest_prints_counts_and_exits_2_on_a_bad_line(folder, tmp_path, capsys):
    store = tmp_path / "store.duckdb"
    assert run_cli(["ingest", "generic", str(EXAMPLE), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "wrote generic 1" in out and "events" in out and "12" in out
    assert run_cli(["ingest", "generic", str(EXAMPLE), "--store", str(store)]) == 0
    assert "unchanged" in capsys.readouterr().out
    edit_line(folder / "memories.jsonl", 3, {"created_at": "yesterday"})
    assert run_cli(["ingest", "generic", str(folder), "--store", str(store)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert ("memories.jsonl line 3: field 'created_at': expected an ISO-8601 timestamp, "
            "got 'yesterday'") in out
    assert load_dataset(store).digest == read_generic(EXAMPLE).digest


def test_cli_refuses_another_dataset_without_replace(folder, tmp_path, capsys):
    store = tmp_path / "store.duckdb"
    assert run_cli(["ingest", "generic", str(EXAMPLE), "--store", str(store)]) == 0
    edit_line(folder / "queries.jsonl", 3, {"question_type": "temporal"})
    assert run_cli(["ingest", "generic", str(folder), "--store", str(store)]) == 2
    assert "pass replace=True (--replace)" in " ".join(capsys.readouterr().out.split())
    assert run_cli(["ingest", "generic", str(folder), "--store", str(store), "--replace"]) == 0
    assert load_dataset(store).queries["question_type"][2] == "temporal"


@pytest.mark.parametrize("key", ["user_id", "role", "data", "created_at", "allowed_roles"])
def test_cli_refuses_a_metadata_key_named_like_a_payload_field(folder, tmp_path, capsys, key):
    """The replay builds these payload fields from the memory's columns; a metadata key of the
    same name would overwrite one silently: refused at ingest, nothing written."""
    from msprlab.datasets.schema import PAYLOAD_FIELDS
    from msprlab.experiments.cli import main
    assert key in PAYLOAD_FIELDS
    store = tmp_path / "store.duckdb"
    assert main(["ingest", "generic", str(EXAMPLE), "--store", str(store)]) == 0
    capsys.readouterr()
    before = store.read_bytes()
    edit_line(folder / "memories.jsonl", 4, {"metadata": {"topic": "work", key: "mallory"}})
    for target in (store, tmp_path / "new.duckdb"):
        assert main(["ingest", "generic", str(folder), "--store", str(target), "--replace"]) == 2
        out = " ".join(capsys.readouterr().out.split())
        assert f"memories.jsonl line 4: field 'metadata': key {key!r} is a payload field" in out
    assert store.read_bytes() == before
    assert not (tmp_path / "new.duckdb").exists()
    assert load_dataset(store).digest == read_generic(EXAMPLE).digest


def test_a_nested_or_unreserved_metadata_key_is_kept(folder, tmp_path):
    edit_line(folder / "memories.jsonl", 4, {"metadata": {"text": "x", "topic": {"role": 1}}})
    store = tmp_path / "store.duckdb"
    ingest(read_generic(folder), store)
    assert json.loads(load_dataset(store).memories["metadata"][3]) == {
        "text": "x", "topic": {"role": 1}}


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path)


def _dangling(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.with_name("nowhere.jsonl"))


@pytest.mark.parametrize(("spoil", "reason"), [
    (_directory, "Is a directory"), (_loop, "symbolic links"),
    (_dangling, "No such file or directory")])
def test_cli_an_unreadable_file_is_bad_input_naming_it(folder, tmp_path, capsys, spoil, reason):
    spoil(folder / "edges.jsonl")
    store = tmp_path / "store.duckdb"
    assert run_cli(["ingest", "generic", str(folder), "--store", str(store)]) == 2
    out = capsys.readouterr().out
    assert "edges.jsonl: cannot be read" in out and reason in out
    assert not store.exists()


def test_cli_an_integer_beyond_int64_is_bad_input_naming_its_line(folder, tmp_path, capsys):
    edit_line(folder / "events.jsonl", 10, {"limit": 2**63})
    store = tmp_path / "store.duckdb"
    assert run_cli(["ingest", "generic", str(folder), "--store", str(store)]) == 2
    out = capsys.readouterr().out
    assert "events.jsonl line 10: field 'limit': expected an integer within int64" in out
    assert not store.exists()
    edit_line(folder / "events.jsonl", 10, {"limit": 2**63 - 1})  # the largest int64 reads
    assert run_cli(["ingest", "generic", str(folder), "--store", str(store)]) == 0
