"""The ContextKit world (`experiments/parity/world.py`): the committed fixture ingests
with the counts its world.json announces and its truth is keyed by the verdicts' query
hashes; a parity test regenerates a tiny world twice with the real library and finds the
same files; bad command lines exit 2.

The committed world (`tests/fixtures/contextkit_world/`) is read from a copy: opening a
Qdrant folder puts a `.lock` file in it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from msprlab.datasets.schema import Dataset
from msprlab.datasets.sources.contextkit import load_contextkit
from msprlab.datasets.store import ingest, load_dataset
from msprlab.engine.success import hash_query
from msprlab.experiments.parity.world import WorldSettings, generate_world, main

FIXTURE = Path(__file__).parent / "fixtures" / "contextkit_world"
INPUTS = {"feedback_db": "feedback_events.db", "success_db": "query_success.db",
          "graph_jsonl": "context_graph.jsonl", "qdrant_path": "qdrant"}
SQLITE = ("feedback_events.db", "query_success.db")
SAME_BYTES = (*SQLITE, "context_graph.jsonl", "world.json", "truth/qrels.tsv",
              "truth/memories.tsv")


def read_world(folder: Path) -> Dataset:
    return load_contextkit(**{name: folder / file for name, file in INPUTS.items()})


def qrels(folder: Path) -> list[tuple[str, str, str, str]]:
    lines = (folder / "truth" / "qrels.tsv").read_text().splitlines()
    return [tuple(line.split("\t")) for line in lines]  # type: ignore[misc]


def check_world(folder: Path, ds: Dataset) -> None:
    """What every world must hold: the counts of world.json, truth keyed like the log."""
    info = json.loads((folder / "world.json").read_text())
    counts = info["counts"]
    verdicts = ds.events.filter(pl.col("kind") == "feedback")
    assert ds.memories.height == counts["memories"] == ds.embeddings.height
    assert ds.memories["deleted_at"].null_count() == ds.memories.height
    assert verdicts.height == counts["verdicts"]
    assert verdicts["helpful"].sum() == counts["verdicts_helpful"]
    assert verdicts["query_id"].null_count() == counts["verdicts_without_query"]
    assert ds.queries.height == counts["questions_judged"]
    assert {len(v) for v in ds.embeddings["vector"].to_list()} == {info["embedder"]["dim"]}
    with sqlite3.connect(f"{(folder / 'query_success.db').resolve().as_uri()}?immutable=1",
                         uri=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM query_success").fetchone()[0] == \
            counts["success_rows"] == counts["verdicts"] - counts["verdicts_without_query"]
    conn.close()

    feedback_hashes = set(verdicts["query_id"].drop_nulls().to_list())
    truth = qrels(folder)
    assert len(truth) == counts["qrels"] > 0
    assert {h for h, _, _, _ in truth} <= feedback_hashes
    assert {m for _, _, m, _ in truth} <= set(ds.memories["memory_id"].to_list())
    assert {(it, rel) for _, it, _, rel in truth} == {("0", "1")}

    searches = pl.read_parquet(folder / "truth" / "searches.parquet")
    assert searches.height == counts["searches"]
    assert searches["verdicts"].sum() == counts["verdicts"]
    assert searches["search"].to_list() == list(range(searches.height))
    assert searches["ts"].is_sorted()
    assert all(hash_query(q) == h for q, h in searches.select("query", "query_hash").iter_rows())
    assert feedback_hashes <= set(searches["query_hash"].to_list())
    memory_ids = set(ds.memories["memory_id"].to_list())
    assert all(set(shown) <= memory_ids for shown in searches["shown"].to_list())
    owners = dict(ds.memories.select("memory_id", "user_id").iter_rows())
    for user, shown in searches.select("user_id", "shown").iter_rows():
        assert {owners[m] for m in shown} <= {user}  # a search shows its user's memories only
    mapped = (folder / "truth" / "memories.tsv").read_text().splitlines()[1:]
    assert {line.split("\t")[0] for line in mapped} == memory_ids


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Dataset]:
    folder = tmp_path_factory.mktemp("world") / "contextkit_world"
    shutil.copytree(FIXTURE, folder)
    return folder, read_world(folder)


def test_committed_world_ingests_with_the_counts_it_announces(committed, tmp_path):
    folder, ds = committed
    check_world(folder, ds)
    store = tmp_path / "store.duckdb"
    report = ingest(ds, store)
    assert report.written and load_dataset(store).counts() == report.counts
    info = json.loads((folder / "world.json").read_text())
    assert info["library"] == {"name": "outhad-contextkitai", "version": "0.1.4"}
    assert info["embedder"]["name"] == "wordllama" and info["embedder"]["dim"] == 256
    assert info["counts"]["verdicts"] >= 200  # "a few hundred verdicts"


def test_every_truth_query_hash_is_a_feedback_query_hash(committed):
    folder, ds = committed
    feedback = set(ds.events.filter(pl.col("kind") == "feedback")["query_id"].drop_nulls())
    truth = {h for h, _, _, _ in qrels(folder)}
    assert truth and truth <= feedback
    assert truth <= set(ds.queries["query_id"].to_list())


def test_fixture_size_stays_small():
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    assert size < 2.1e6


@pytest.mark.parametrize(("argv", "message"), [
    (["--conversations", "0"], "--conversations must be a whole number 1..10, got 0"),
    (["--conversations", "11"], "--conversations must be a whole number 1..10, got 11"),
    (["--searches", "0"], "--searches must be a whole number >= 1, got 0"),
    (["--sessions", "0"], "--sessions must be a whole number >= 1, got 0"),
    (["--no-query-share", "1.5"], "--no-query-share must be a number in [0, 1], got 1.5"),
    (["--seed", "-1"], "--seed must be a whole number >= 0, got -1"),
])
def test_bad_settings_exit_2(tmp_path, capsys, argv, message):
    assert main(["--out", str(tmp_path / "w"), *argv]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "w").exists()


def test_bad_out_folder_exits_2(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["--out", str(file)]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    assert main(["--out", str(other)]) == 2
    assert "pass --replace" in " ".join(capsys.readouterr().err.split())
    assert main(["--out", str(other), "--replace"]) == 2
    assert "holds no world.json" in " ".join(capsys.readouterr().err.split())
    assert (other / "keep.txt").read_text() == "x"


# ---- parity: the real library --------------------------------------------------------------
TINY = WorldSettings(conversations=2, sessions=1, searches=40, seed=5)


def qdrant_rows(folder: Path) -> dict[str, list[Any]]:
    """Every table of the collection's storage.sqlite, rows sorted."""
    (storage,) = (folder / "qdrant" / "collection").glob("*/storage.sqlite")
    with sqlite3.connect(f"{storage.resolve().as_uri()}?immutable=1", uri=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master "
                                             "WHERE type = 'table' ORDER BY name")]
        rows = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}
    conn.close()
    return rows


@pytest.mark.parity
def test_tiny_world_is_reproducible_and_ingests(tmp_path, monkeypatch):
    # Read when the library is first imported (importorskip imports it): telemetry off,
    # and its home folder here rather than in ~/.outhad_contextkit.
    monkeypatch.setenv("OUTHAD_CONTEXTKIT_TELEMETRY", "false")
    monkeypatch.setenv("OUTHAD_CONTEXTKIT_DIR", str(tmp_path / "library-home"))
    pytest.importorskip("outhad_contextkit")
    first, second = tmp_path / "first", tmp_path / "second"
    generate_world(first, TINY)
    generate_world(second, TINY)
    for name in SAME_BYTES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert qdrant_rows(first) == qdrant_rows(second)
    assert (first / "qdrant" / "meta.json").read_bytes() == \
        (second / "qdrant" / "meta.json").read_bytes()
    assert pl.read_parquet(first / "truth" / "searches.parquet").equals(
        pl.read_parquet(second / "truth" / "searches.parquet"))
    assert not list(first.rglob(".lock")) and not list(first.rglob("*-wal"))

    info = json.loads((first / "world.json").read_text())
    assert info["counts"]["searches"] == TINY.searches and info["seed"] == TINY.seed
    assert info["settings"]["locomo_conversations"] == ["conv-26", "conv-30"]
    check_world(first, read_world(first))
    store = tmp_path / "store.duckdb"
    assert ingest(read_world(first), store).written
