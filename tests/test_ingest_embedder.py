"""`msprlab ingest generic DIR --embedder NAME`: a folder without vectors becomes a store
that replays, with the embedder, its settings and dimension in the manifest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from msprlab.datasets.store import load_dataset, manifest
from msprlab.experiments.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "datasets" / "data" / "example_generic"


@pytest.fixture
def bare(tmp_path) -> Path:
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLE, folder)
    for name in ("embeddings.jsonl", "query_embeddings.jsonl"):
        (folder / name).unlink()
    return folder


def test_embedder_fills_both_vector_tables_and_the_manifest(bare, tmp_path, capsys) -> None:
    store = tmp_path / "s.duckdb"
    assert main(["ingest", "generic", str(bare), "--store", str(store),
                 "--embedder", "tfidf-svd"]) == 0
    ds = load_dataset(store)
    assert ds.embeddings.height == ds.memories.height
    assert ds.query_embeddings.height == ds.queries.height
    record = manifest(store)
    assert record["version"].endswith("+tfidf-svd")
    [memories, queries] = record["embedders"]
    assert (memories["table"], queries["table"]) == ("embeddings", "query_embeddings")
    dims = {len(v) for v in ds.embeddings["vector"].to_list()}
    assert memories["dim"] == queries["dim"] == dims.pop()
    assert "scikit-learn" in memories["made_by"] and "('seed', 0)" in memories["made_by"]
    capsys.readouterr()
    assert main(["replay", str(store)]) == 0  # the seeds can be found now


def test_without_an_embedder_replay_says_how_to_add_one(bare, tmp_path, capsys) -> None:
    store = tmp_path / "s.duckdb"
    assert main(["ingest", "generic", str(bare), "--store", str(store)]) == 0
    assert manifest(store)["embedders"] == []
    capsys.readouterr()
    assert main(["replay", str(store)]) == 2
    assert "--embedder tfidf-svd" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("name", "needle"), [
    ("bogus", "use one of tfidf-svd"),
    ("sentence-transformers", "not an embedder ingest can build by name")])
def test_an_unknown_embedder_is_bad_input(bare, tmp_path, capsys, name, needle) -> None:
    store = tmp_path / "s.duckdb"
    assert main(["ingest", "generic", str(bare), "--store", str(store),
                 "--embedder", name]) == 2
    out = capsys.readouterr()
    assert needle in " ".join((out.out + out.err).split()) and not store.exists()


def test_a_folder_with_vectors_refuses_a_second_set(tmp_path, capsys) -> None:
    store = tmp_path / "s.duckdb"
    assert main(["ingest", "generic", str(EXAMPLE), "--store", str(store),
                 "--embedder", "tfidf-svd"]) == 2
    assert "already holds vectors" in capsys.readouterr().out and not store.exists()


CONTEXTKIT = Path(__file__).parent / "fixtures" / "contextkit"


@pytest.mark.parametrize(("name", "message"), [
    ("wordllama", "--query-embedder: wordllama gives 256-dim vectors, the stored memory "
                  "vectors have [4]: not the embedder that made them"),
    ("tfidf-svd", "--query-embedder: tfidf-svd fits its own space on the texts"),
    ("nope", "--query-embedder 'nope': not an embedder ingest can build by name"),
])
def test_contextkit_query_embedder_must_match_the_stored_vectors(tmp_path, capsys, name,
                                                                 message) -> None:
    store = tmp_path / "ck.duckdb"
    code = main(["ingest", "contextkit", "--feedback-db",
                 str(CONTEXTKIT / "feedback_events.db"), "--qdrant-path",
                 str(CONTEXTKIT / "qdrant"), "--graph-jsonl",
                 str(CONTEXTKIT / "context_graph.jsonl"), "--store", str(store),
                 "--query-embedder", name])
    assert code == 2
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())
    assert message in out
    assert not store.exists()
