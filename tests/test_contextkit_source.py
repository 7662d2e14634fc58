"""ContextKit artifacts as a source: golden facts of the fixture, bad rows, missing inputs.

The fixture (`tests/fixtures/contextkit/`) was written by the library itself through
`tests/fixtures/make_contextkit_fixture.py`; these tests read the committed files only.
Each test works on a copy, since opening a Qdrant folder puts a `.lock` file in it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from qdrant_client import QdrantClient

from msprlab.datasets.schema import PROVENANCE
from msprlab.datasets.sources.contextkit import NODE_STATE_KEY, load_contextkit
from msprlab.datasets.store import ingest, load_dataset
from msprlab.datasets.validate import IngestError, validate
from msprlab.engine.success import hash_query
from msprlab.experiments.cli.ingest import add_ingest_commands

FIXTURE = Path(__file__).parent / "fixtures" / "contextkit"
COLLECTION = "outhad_contextkit"
FILES = {"feedback_db": "feedback_events.db", "success_db": "query_success.db",
         "graph_jsonl": "context_graph.jsonl", "qdrant_path": "qdrant"}


def mid(n: int) -> str:
    """The fixture's n-th memory id (the fixture script numbers them)."""
    return f"00000000-0000-4eed-8000-{n:012d}"


@pytest.fixture
def artifacts(tmp_path: Path) -> dict[str, Path]:
    shutil.copytree(FIXTURE, tmp_path / "ck")
    return {name: tmp_path / "ck" / file for name, file in FILES.items()}


def sql(path: Path, statement: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement)
    conn.close()


def edit_line(path: Path, number: int, change: dict | str | None) -> None:
    lines = path.read_text().splitlines()
    if change is None:
        del lines[number - 1]
    elif isinstance(change, str):
        lines[number - 1] = change
    else:
        entry = json.loads(lines[number - 1])
        entry["data"].update(change)
        lines[number - 1] = json.dumps(entry)
    path.write_text("\n".join(lines) + "\n")


def test_fixture_golden_counts_and_records(artifacts):
    ds = load_contextkit(**artifacts)
    assert ds.source == "contextkit"
    assert ds.counts() == {"memories": 6, "embeddings": 6, "edges": 11, "events": 15,
                           "queries": 3, "qrels": 0, "query_embeddings": 0,
                           "feedback_records": 7}
    # production's own record of each verdict, for the fidelity check: the delta it applied
    # and the application's metadata, as feedback_events.db holds them
    records = ds.feedback_records.drop(PROVENANCE)
    assert records["delta_applied"].to_list() == [0.15, -0.1, 0.15, -0.1, 0.15, 0.15, 0.15]
    assert json.loads(records["metadata"][0]) == {"rank": 1, "source": "ui"}
    assert records.select("memory_id", "ts", "user_id", "helpful").rows() == ds.events.filter(
        pl.col("kind") == "feedback").select("memory_id", "ts", "user_id", "helpful").rows()
    first = ds.memories.drop(PROVENANCE).row(0, named=True)
    state = json.loads(first.pop("metadata"))
    assert first == {
        "memory_id": mid(1), "text": "Alice moved to Lisbon in March 2024.", "user_id": "alice",
        "agent_id": None, "run_id": "s1", "tenant_id": "acme", "sub_tenant_id": None,
        "role": "user", "allowed_roles": ["admin", "support"],
        # The payload says 2024-03-01T01:00:00-08:00 (US/Pacific).
        "created_at": datetime(2024, 3, 1, 9), "updated_at": datetime(2024, 3, 1, 9),
        "deleted_at": None}
    assert state["topic"] == "travel"
    assert state[NODE_STATE_KEY] == {
        "version": 1, "prev_version_id": None, "relevance": 1.0, "relevance_floor": 1.0,
        "archived": False, "created_at": "2024-03-01T09:00:00",
        "updated_at": "2024-03-01T09:00:00", "access_count": 2, "helpful_count": 2,
        "unhelpful_count": 0, "last_accessed_at": "2024-03-03T10:14:20",
        "last_feedback_at": "2024-03-03T10:14:35", "tenant_id": "acme", "sub_tenant_id": None}
    last = ds.memories.row(-1, named=True)
    assert (last["memory_id"], last["text"], last["role"], last["deleted_at"]) == (
        mid(6), "Bob's favourite cuisine is Thai.", "assistant", datetime(2024, 3, 3, 10, 21, 45))
    assert (last["_file"], last["_row"]) == ("context_graph.jsonl", "line 7")
    last_meta = json.loads(last["metadata"])
    assert last_meta["actor_id"] == "helper-bot" and last_meta[NODE_STATE_KEY]["archived"]

    assert ds.events.drop(PROVENANCE).row(0, named=True) == {
        "event_id": 0, "ts": datetime(2024, 3, 1, 9), "seq": 0, "kind": "memory_added",
        "memory_id": mid(1), "query_id": None, "user_id": "alice", "agent_id": None,
        "run_id": "s1", "query": None, "filters": None, "limit": None, "shown": None,
        "helpful": None}
    assert ds.events.row(9, named=True) == {
        "event_id": 9, "ts": datetime(2024, 3, 2, 10, 14, 20), "seq": 9, "kind": "feedback",
        "memory_id": mid(5), "query_id": "fb1280f0b7f160c4", "user_id": "bob",
        "agent_id": "helper", "run_id": None, "query": "What is Bob allergic to?",
        "filters": None, "limit": None, "shown": None, "helpful": True,
        "_file": "feedback_events.db", "_row": "row id=3"}
    assert ds.events.drop(PROVENANCE).row(-1) == (
        14, datetime(2024, 3, 3, 10, 21, 45), 14, "memory_deleted", mid(6), None, "bob",
        "helper", None, None, None, None, None, None)
    assert ds.edges.drop(PROVENANCE).row(0) == (
        mid(1), mid(2), "REPLY_TO", 1.0, datetime(2024, 3, 1, 9, 0, 10),
        datetime(2024, 3, 1, 9, 0, 10), None)
    assert ds.edges.row(-1)[:3] + ds.edges.row(-1)[-2:] == (
        mid(6), mid(5), "TOPIC_SIMILAR", "context_graph.jsonl", "line 18")
    assert ds.edges.filter(type="DOCUMENT_LINK")["evidence"].to_list() == ["lisbon-guide"]
    assert ds.embeddings.row(0)[:2] == (mid(1), "contextkit")
    assert ds.embeddings["vector"][0].to_list() == pytest.approx([0.9, 0.1, 0.0, 0.1])
    # The deleted memory's vector comes from the graph's sidecar.
    assert ds.embeddings.row(-1, named=True)["_row"] == "line 24"
    assert ds.queries.drop(PROVENANCE).rows() == [
        ("ecf44e5aa8a979de", "Where does Alice live?", "alice", None, None, None),
        ("fb1280f0b7f160c4", "What is Bob allergic to?", "bob", "helper", None, None),
        ("7d7581fb298d134e", "Lisbon guide link", None, None, None, None)]
    validate(ds)


def test_fixture_ingests_and_reingest_is_a_noop(artifacts, tmp_path):
    store = tmp_path / "store.duckdb"
    first = ingest(load_contextkit(**artifacts), store)
    again = ingest(load_contextkit(**artifacts), store)
    assert first.written and not again.written
    assert load_dataset(store).counts() == first.counts


def test_update_keeps_node_tenant_and_adds_an_update_event(artifacts):
    ds = load_contextkit(**artifacts)
    # Memory.update rewrote the payload without tenant_id / allowed_roles / topic.
    updated = ds.memories.filter(memory_id=mid(2)).row(0, named=True)
    assert (updated["text"], updated["tenant_id"], updated["allowed_roles"]) == (
        "Alice prefers aisle seats on flights.", "acme", None)
    assert updated["updated_at"] == datetime(2024, 3, 2, 10, 1, 25)
    state = json.loads(updated["metadata"])[NODE_STATE_KEY]
    assert (state["version"], state["prev_version_id"]) == (2, mid(2))
    kinds = ds.events.filter(memory_id=mid(2))["kind"].cast(str).to_list()
    assert kinds == ["memory_added", "memory_updated", "feedback"]


def test_verdicts_keep_row_order_on_ties_and_hash_their_query(artifacts):
    feedback = load_contextkit(**artifacts).events.filter(kind="feedback")
    assert feedback["_row"].to_list() == [f"row id={i}" for i in range(1, 8)]
    tied = feedback.filter(ts=datetime(2024, 3, 2, 10, 14, 20))
    assert tied["memory_id"].to_list() == [mid(5), mid(6)]
    assert tied["seq"][0] < tied["seq"][1]
    for query, query_id in feedback.select("query", "query_id").iter_rows():
        assert query_id == hash_query(query)
    # Another spelling of the first question is the same query.
    assert feedback.filter(query="where does alice live? ")["query_id"][0] == "ecf44e5aa8a979de"


def test_timestamps_with_other_offsets_become_naive_utc(artifacts):
    sql(artifacts["feedback_db"],
        "UPDATE feedback_events SET timestamp = '2024-03-02T11:11:55+01:00' WHERE id = 1")
    ds = load_contextkit(**artifacts)  # the success row (+00:00) still matches: same instant
    assert ds.events.filter(_row="row id=1")["ts"][0] == datetime(2024, 3, 2, 10, 11, 55)


BAD_SQL = [
    ("feedback_db", "UPDATE feedback_events SET helpful = 7 WHERE id = 3",
     r"^feedback_events.db row id=3: field 'helpful': expected 0 or 1, got 7$"),
    ("feedback_db", "UPDATE feedback_events SET timestamp = 'yesterday' WHERE id = 2",
     r"^feedback_events.db row id=2: field 'timestamp': expected an ISO-8601 timestamp, "
     r"got 'yesterday'$"),
    ("feedback_db", "UPDATE feedback_events SET query_hash = 'abc' WHERE id = 1",
     r"^feedback_events.db row id=1: field 'query_hash': expected 'ecf44e5aa8a979de' "
     r"\(hash_query of the query 'Where does Alice live\?'\), got 'abc'$"),
    ("feedback_db", "UPDATE feedback_events SET memory_id = 'gone' WHERE id = 5",
     r"^feedback_events.db row id=5: field 'memory_id': unknown memory_id 'gone' "
     r"\(not in memories\)$"),
    ("success_db", "UPDATE query_success SET helpful = 2 WHERE id = 6",
     r"^query_success.db row id=6: field 'helpful': expected 0 or 1, got 2$"),
    ("success_db", "INSERT INTO query_success (query_hash, memory_id, user_id, helpful, "
                   "timestamp) SELECT query_hash, memory_id, user_id, helpful, timestamp "
                   "FROM query_success WHERE id = 1",
     r"^query_success.db row id=7: no verdict in --feedback-db is left with the same "
     r"query_hash, memory_id, user_id, helpful and timestamp: .*backfill_mspr.*"
     r"leave out --success-db"),
    ("success_db", "UPDATE query_success SET user_id = 'carol' WHERE id = 2",
     r"^query_success.db row id=2: no verdict in --feedback-db"),
]


@pytest.mark.parametrize(("name", "statement", "message"), BAD_SQL)
def test_bad_sqlite_row_names_file_row_and_field(artifacts, name, statement, message):
    sql(artifacts[name], statement)
    with pytest.raises(IngestError, match=message):
        load_contextkit(**artifacts)


BAD_LINES = [
    (8, {"weight": 1.5},
     r"^context_graph.jsonl line 8: field 'weight': expected a number in \[0, 1\], got 1.5$"),
    (9, {"type": "FRIEND_OF"}, r"^context_graph.jsonl line 9: field 'type': expected one of "),
    (2, {"created_at": "yesterday"},
     r"^context_graph.jsonl line 2: field 'created_at': expected an ISO-8601 timestamp"),
    (3, {"access_count": "2"},
     r"^context_graph.jsonl line 3: field 'access_count': expected an integer, got '2'$"),
    (20, '{"kind": "mystery", "data": {}}', r"^context_graph.jsonl line 20: field 'kind': "),
    (5, "{not json", r"^context_graph.jsonl line 5: not JSON"),
    (1, '{"kind": "node", "data": {}}',
     r"^context_graph.jsonl line 1: field '__envelope__': expected the export envelope"),
    (18, None, r"^context_graph.jsonl: the envelope announces 6 nodes and 11 edges, the file "
               r"holds 6 and 10 \(a truncated or edited export\?\)$"),
]


@pytest.mark.parametrize(("line", "change", "message"), BAD_LINES)
def test_bad_graph_line_names_line_and_field(artifacts, line, change, message):
    edit_line(artifacts["graph_jsonl"], line, change)
    with pytest.raises(IngestError, match=message):
        load_contextkit(**artifacts)


@pytest.mark.parametrize(("payload", "message"), [
    ({"created_at": "yesterday"}, r"field 'created_at': expected an ISO-8601 timestamp, "
                                  r"got 'yesterday'$"),
    ({"user_id": 42}, r"field 'user_id': expected a string or null, got 42$"),
    ({"data": None}, r"field 'data': expected a non-empty string, got null$"),
])
def test_bad_qdrant_payload_names_point_and_field(artifacts, payload, message):
    client = QdrantClient(path=str(artifacts["qdrant_path"]))
    client.set_payload(COLLECTION, payload, points=[mid(3)])
    client.close()
    where = rf"^qdrant collection '{COLLECTION}' point {mid(3)}: "
    with pytest.raises(IngestError, match=where + message):
        load_contextkit(**artifacts)


@pytest.mark.parametrize("name", list(FILES))
def test_missing_input_names_its_flag(artifacts, name):
    flag = "--" + name.replace("_", "-")
    artifacts[name] = artifacts[name].with_name("missing")
    kind = "folder" if name == "qdrant_path" else "file"
    with pytest.raises(IngestError, match=rf"missing: no such {kind} \(given as {flag}\)$"):
        load_contextkit(**artifacts)


@pytest.mark.parametrize(("change", "message"), [
    ({"graph_jsonl": None, "qdrant_path": None},
     r"^contextkit: the memories come from --qdrant-path or --graph-jsonl: give at least one"),
    ({"feedback_db": None}, r"query_success.db: --success-db needs --feedback-db"),
    ({"feedback_db": "graph_jsonl"},
     r"^context_graph.jsonl: cannot read it as SQLite \(file is not a database\); "
     r"--feedback-db expects ContextKit's feedback_events table as outhad-contextkitai "
     r"0.1.4 writes it \(artifacts of another library version are not read\)$"),
    ({"feedback_db": "success_db"},
     r"^query_success.db: no table 'feedback_events' \(found \['query_success', "
     r"'sqlite_sequence'\]\); --feedback-db expects"),
    ({"feedback_db": "qdrant_path"}, r"qdrant: not a file \(given as --feedback-db\)$"),
    ({"qdrant_path": "tmp"}, r"ck: not a Qdrant local folder: no meta.json \(given as "
                             r"--qdrant-path"),
])
def test_wrong_inputs_say_which_flag(artifacts, change, message):
    for name, other in change.items():
        if other is None:
            artifacts[name] = None
        elif other == "tmp":
            artifacts[name] = artifacts["qdrant_path"].parent
        else:
            artifacts[name] = artifacts[other]
    with pytest.raises(IngestError, match=message):
        load_contextkit(**artifacts)


def test_wrong_collection_and_locked_folder(artifacts):
    with pytest.raises(IngestError, match=r"no collection 'memories' \(found "
                                          r"\['outhad_contextkit'\]\); name it with --collection"):
        load_contextkit(**artifacts, collection="memories")
    holder = QdrantClient(path=str(artifacts["qdrant_path"]))
    try:
        with pytest.raises(IngestError, match=r"cannot open the Qdrant folder .*already "
                                              r"accessed.*\(given as --qdrant-path\)$"):
            load_contextkit(**artifacts)
    finally:
        holder.close()


def test_partial_inputs(artifacts):
    graph_only = load_contextkit(**{**artifacts, "qdrant_path": None})
    assert graph_only.memories["deleted_at"].null_count() == 6  # nothing says a node was deleted
    assert graph_only.embeddings.height == 6 and graph_only.edges.height == 11
    qdrant_only = load_contextkit(feedback_db=None, success_db=None, graph_jsonl=None,
                                  qdrant_path=artifacts["qdrant_path"])
    assert qdrant_only.counts() == {"memories": 5, "embeddings": 5, "edges": 0, "events": 6,
                                    "queries": 0, "qrels": 0, "query_embeddings": 0,
                                    "feedback_records": 0}
    assert NODE_STATE_KEY not in qdrant_only.memories["metadata"][0]
    # Verdicts without the success check (success history comes from replaying them).
    no_success = load_contextkit(**{**artifacts, "success_db": None})
    assert no_success.events.filter(kind="feedback").height == 7


def test_digest_follows_the_bytes_and_reading_leaves_no_side_files(artifacts):
    before = sorted(p.name for p in artifacts["feedback_db"].parent.iterdir())
    first = load_contextkit(**artifacts).digest
    assert load_contextkit(**artifacts).digest == first  # the .lock Qdrant adds is not hashed
    after = sorted(p.name for p in artifacts["feedback_db"].parent.iterdir())
    assert after == before  # no -wal / -shm beside the SQLite files
    sql(artifacts["feedback_db"], "UPDATE feedback_events SET metadata_json = '{}' WHERE id = 1")
    assert load_contextkit(**artifacts).digest != first
    assert load_contextkit(**{**artifacts, "success_db": None}).digest != first


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="msprlab")
    add_ingest_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def cli_args(paths: dict[str, Path], store: Path) -> list[str]:
    flags = [part for name, path in paths.items()
             for part in (f"--{name.replace('_', '-')}", str(path))]
    return ["ingest", "contextkit", *flags, "--store", str(store)]


def test_cli_ingests_and_exits_2_on_a_bad_row_or_missing_file(artifacts, tmp_path, capsys):
    store = tmp_path / "store.duckdb"
    assert run_cli(cli_args(artifacts, store)) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "wrote contextkit" in out and "events 15" in out and "edges 11" in out
    sql(artifacts["feedback_db"], "UPDATE feedback_events SET helpful = 7 WHERE id = 3")
    assert run_cli(cli_args(artifacts, store)) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "feedback_events.db row id=3: field 'helpful': expected 0 or 1, got 7" in out
    assert "nothing was written" in out
    missing = {**artifacts, "success_db": artifacts["success_db"].with_name("gone.db")}
    assert run_cli(cli_args(missing, store)) == 2
    assert "no such file (given as --success-db)" in " ".join(capsys.readouterr().out.split())
    assert load_dataset(store).counts()["events"] == 15
