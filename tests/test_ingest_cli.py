"""`msprlab ingest locomo | locomo-log | synthetic | scifact`: exit codes, manifests, counts,
no-op re-ingest, --replace, determinism, the Qdrant index and the truth file beside a store.

Small parameters throughout (a two-conversation LoCoMo cut, a 24-memory synthetic world);
the full LoCoMo run with embeddings is marked slow.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets.dense_index import QdrantIndex
from msprlab.datasets.sidecars import INDEX_MARKER, index_path, truth_path
from msprlab.datasets.sources.locomo import LOCOMO_PATH, locomo_anomalies
from msprlab.datasets.store import load_dataset, manifest
from msprlab.datasets.synthetic import SIGNALS, PlantedWeights
from msprlab.experiments.cli import main

from locomo_excerpt import locomo_excerpt

HAVE_WORDLLAMA = importlib.util.find_spec("wordllama") is not None  # a core dependency
NEEDS_WORDLLAMA = pytest.mark.skipif(not HAVE_WORDLLAMA, reason="needs wordllama")
WITHOUT_WORDLLAMA = pytest.mark.skipif(HAVE_WORDLLAMA, reason="checks the missing-extra hint")

SYNTHETIC = ["--users", "2", "--memories", "12", "--queries", "2", "--searches", "30"]


def flat(text: str) -> str:
    """Console output with its line wrapping undone."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    """The first two conversations cut to sessions 1-3 and the questions they answer."""
    out = locomo_excerpt(json.loads(LOCOMO_PATH.read_bytes()), questions=8)
    path = tmp_path_factory.mktemp("locomo") / "mini.json"
    path.write_text(json.dumps(out))
    return path


def locomo(mini: Path, store: Path, *extra: str) -> int:
    return main(["ingest", "locomo", "--file", str(mini), "--dim", "16", "--store", str(store),
                 *extra])


def locomo_log(mini: Path, store: Path, *extra: str, seed: str = "7") -> int:
    return main(["ingest", "locomo-log", "--file", str(mini), "--dim", "16", "--seed", seed,
                 "--searches", "60", "--store", str(store), *extra])


# ---- ingest locomo ----------------------------------------------------------------------
def test_locomo_writes_turns_embeddings_and_edges_and_prints_anomalies(mini, tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert locomo(mini, store) == 0
    out = flat(capsys.readouterr().out)
    held = manifest(store)
    ds = load_dataset(store)
    assert held["source"] == "locomo"
    assert held["counts"] == ds.counts()
    assert ds.memories.height == ds.embeddings.height == ds.events.height > 0
    assert ds.embeddings["embedder"].unique().to_list() == ["tfidf-svd"]
    assert len(ds.embeddings["vector"][0]) == 16
    assert set(ds.edges["type"]) == {"REPLY_TO", "TEMPORAL_NEXT", "TOPIC_SIMILAR"}
    for table, count in held["counts"].items():
        assert re.search(rf"\b{table} {count:,}\b", out), table
    anomalies = locomo_anomalies(mini)
    assert f"evidence anomalies in mini.json: {anomalies.height}," in out
    for kind, count in anomalies.group_by(pl.col("kind").cast(pl.String)).len().iter_rows():
        assert re.search(rf"\b{kind} {count}\b", out), kind
    assert not index_path(store).exists()  # --qdrant none is the default


def test_reingest_with_the_same_parameters_is_a_no_op(mini, tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert locomo(mini, store) == 0
    before = manifest(store)
    capsys.readouterr()
    assert locomo(mini, store) == 0
    assert "unchanged, it already holds locomo" in flat(capsys.readouterr().out)
    assert manifest(store) == before  # same ingested_at: nothing was rewritten


def test_other_parameters_are_refused_without_replace(mini, tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert locomo(mini, store) == 0
    before = manifest(store)
    capsys.readouterr()
    assert locomo(mini, store, "--dim", "8") == 2
    out = flat(capsys.readouterr().out)
    assert "One store holds one dataset" in out and "nothing was written" in out
    assert manifest(store) == before
    assert locomo(mini, store, "--dim", "8", "--replace") == 0
    after = manifest(store)
    assert after["digest"] != before["digest"]
    assert f"replacing digest {before['digest'][:12]}" in flat(capsys.readouterr().out)
    assert len(load_dataset(store).embeddings["vector"][0]) == 8


def test_a_bad_row_exits_2_naming_file_place_and_field(mini, tmp_path, capsys):
    samples = json.loads(mini.read_text())
    samples[1]["conversation"]["session_2"][3]["dia_id"] = "D2:9"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(samples))
    store = tmp_path / "s.duckdb"
    assert locomo(bad, store) == 2
    out = flat(capsys.readouterr().out)
    assert ("bad.json [1].conversation.session_2[3]: field 'dia_id': expected 'D2:4'" in out)
    assert "nothing was written" in out
    assert not store.exists()


def test_qdrant_local_builds_an_owner_filtered_index_beside_the_store(mini, tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert locomo(mini, store, "--qdrant", "local") == 0
    assert "with owner payloads" in flat(capsys.readouterr().out)
    folder = index_path(store)
    marker = json.loads((folder / INDEX_MARKER).read_text())
    ds = load_dataset(store)
    assert marker["digest"] == manifest(store)["digest"]
    assert (marker["points"], marker["dim"], marker["embedder"]) == (ds.memories.height, 16,
                                                                     "tfidf-svd")
    vector = ds.embeddings["vector"][0].to_numpy()
    owner = ds.memories["user_id"][-1]
    with QdrantIndex(dim=16, path=folder) as index:
        assert index.count() == ds.memories.height
        hits = index.search(vector, k=50, filters={"user_id": owner})
    mine = set(ds.memories.filter(pl.col("user_id") == owner)["memory_id"])
    assert hits and {m for m, _ in hits} <= mine
    assert locomo(mini, store, "--qdrant", "local") == 0
    assert "unchanged, it already indexes digest" in flat(capsys.readouterr().out)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert locomo(mini, store, "--dim", "8", "--replace") == 0
    assert "indexes digest" in flat(capsys.readouterr().out)  # the old index is stale


def test_qdrant_memory_checks_the_index_and_keeps_nothing(mini, tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert locomo(mini, store, "--qdrant", "memory") == 0
    rows = load_dataset(store).memories.height
    assert f"{rows} points loaded" in flat(capsys.readouterr().out)
    assert not index_path(store).exists()


# ---- ingest locomo-log ------------------------------------------------------------------
def test_locomo_log_is_deterministic_for_a_seed(mini, tmp_path):
    a, b, c = (tmp_path / f"{name}.duckdb" for name in "abc")
    assert locomo_log(mini, a) == 0
    assert locomo_log(mini, b) == 0
    assert locomo_log(mini, c, seed="8") == 0
    first, second, other = (load_dataset(p) for p in (a, b, c))
    assert first.digest == second.digest != other.digest
    assert_frame_equal(first.events, second.events)
    assert manifest(a)["source"] == "locomo+clicks"
    kinds = dict(first.events.group_by(pl.col("kind").cast(pl.String)).len().iter_rows())
    assert kinds["search"] == 60 and kinds["memory_added"] == first.memories.height
    assert kinds.get("access", 0) > 0 and kinds.get("feedback", 0) > 0


@pytest.mark.parametrize(("extra", "message"), [
    (["--click-model", "cascade", "--eta", "0.5"],
     "eta applies to the pbm click model only, but the click model is 'cascade'"),
    (["--continuation", "0.5"], "continuation applies to the dcm click model only"),
    (["--max-grade", "2"], "no default p_helpful for max grade 2"),
    (["--p-helpful", "0.1,0.5,0.9"], "the click model reads grades 0..1, so p_helpful needs 2"),
    (["--noise", "1.5"], "`0 <= noise <= 1` must hold, but got 1.5"),
    (["--searches", "0"], "`n_searches >= 1` must hold, but got 0"),
    (["--mean-gap-seconds", "0"], "`mean_gap_seconds > 0` must hold, but got 0.0"),
    pytest.param(["--embedder", "wordllama", "--dim", "100"],
                 "WordLlamaEmbedder.dim must be one of", marks=NEEDS_WORDLLAMA),
    pytest.param(["--embedder", "wordllama"], "WordLlamaEmbedder requires wordllama",
                 marks=WITHOUT_WORDLLAMA),
])
def test_bad_log_options_exit_2_before_any_work(mini, tmp_path, capsys, extra, message):
    store = tmp_path / "s.duckdb"
    assert locomo_log(mini, store, *extra) == 2
    out = flat(capsys.readouterr().out)
    assert message in out and "nothing was written" in out
    assert not store.exists()


def test_a_logging_config_file_changes_the_digest(mini, tmp_path):
    config = tmp_path / "ranker.json"
    config.write_text(json.dumps({"context_graph": {"retrieval": {"gamma_graph": 0.1}}}))
    assert locomo_log(mini, tmp_path / "a.duckdb") == 0
    assert locomo_log(mini, tmp_path / "b.duckdb", "--logging-config", str(config)) == 0
    assert manifest(tmp_path / "a.duckdb")["digest"] != manifest(tmp_path / "b.duckdb")["digest"]
    config.write_text(json.dumps({"mspr": {"enabled": "yes"}}))
    assert locomo_log(mini, tmp_path / "c.duckdb", "--logging-config", str(config)) == 2


@pytest.mark.parametrize("extra", [["--click-model", "cascade"],
                                   ["--click-model", "dcm", "--continuation", "0.9,0.5"]])
def test_every_click_model_logs(mini, tmp_path, extra):
    store = tmp_path / "s.duckdb"
    assert locomo_log(mini, store, *extra) == 0
    events = load_dataset(store).events
    assert events.filter(pl.col("kind") == "search").height == 60


# ---- ingest synthetic -------------------------------------------------------------------
def synthetic(store: Path, *extra: str, seed: str = "5") -> int:
    return main(["ingest", "synthetic", "--seed", seed, *SYNTHETIC, "--store", str(store),
                 *extra])


def test_synthetic_writes_the_world_its_log_and_the_planted_truth(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert synthetic(store) == 0
    out = flat(capsys.readouterr().out)
    held = manifest(store)
    assert held["source"] == "synthetic+clicks"
    assert (held["counts"]["memories"], held["counts"]["queries"]) == (24, 4)
    truth: dict[str, Any] = json.loads(truth_path(store).read_text())
    planted = PlantedWeights()
    assert truth["planted_weights"] == {s: getattr(planted, s) for s in SIGNALS}
    assert (truth["digest"], truth["seed"]) == (held["digest"], 5)
    for signal in SIGNALS:
        assert re.search(rf"\b{signal} {getattr(planted, signal):g}\b", out), signal


def test_synthetic_same_seed_same_data_other_weights_need_replace(tmp_path, capsys):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    assert synthetic(a) == 0 and synthetic(b) == 0
    assert manifest(a)["digest"] == manifest(b)["digest"]
    assert_frame_equal(load_dataset(a).events, load_dataset(b).events)
    truth_before = truth_path(a).read_text()
    assert synthetic(a, "--weights", "dense=1,graph=0") == 2
    assert truth_path(a).read_text() == truth_before  # refused: the truth file is untouched
    assert synthetic(a, "--weights", "dense=1,graph=0", "--replace") == 0
    truth = json.loads(truth_path(a).read_text())
    assert truth["planted_weights"]["dense"] == 1.0 and truth["planted_weights"]["graph"] == 0
    assert truth["digest"] == manifest(a)["digest"] != manifest(b)["digest"]


def test_synthetic_without_a_log(tmp_path):
    store = tmp_path / "s.duckdb"
    assert synthetic(store, "--searches", "0") == 0
    assert manifest(store)["source"] == "synthetic"
    kinds = load_dataset(store).events["kind"].cast(pl.String).unique().to_list()
    assert kinds == ["memory_added"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--users", "0"], "`n_users >= 1 (an integer)` must hold, but got 0"),
    (["--weights", "dense=0,lexical=0,graph=0,personal=0,frequency=0,success=0"],
     "`at least one weight > 0` must hold"),
    (["--searches", "-1"], "`--searches >= 0` must hold, but got -1"),
])
def test_bad_synthetic_options_exit_2(tmp_path, capsys, extra, message):
    assert synthetic(tmp_path / "s.duckdb", *extra) == 2
    assert message in flat(capsys.readouterr().out)
    assert not (tmp_path / "s.duckdb").exists()


def test_an_unknown_planted_signal_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        synthetic(tmp_path / "s.duckdb", "--weights", "dense=1,recency=2")
    assert exit_.value.code == 2
    assert "SIGNAL one of dense, lexical" in flat(capsys.readouterr().err)


# ---- ingest scifact ---------------------------------------------------------------------
def test_scifact_test_split(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert main(["ingest", "scifact", "--split", "test", "--store", str(store)]) == 0
    held = manifest(store)
    assert held["source"] == "scifact/test"
    assert {k: held["counts"][k] for k in ("memories", "queries", "qrels", "embeddings")} == {
        "memories": 5183, "queries": 300, "qrels": 339, "embeddings": 0}
    assert main(["ingest", "scifact", "--split", "train", "--store", str(store)]) == 2


# ---- help -------------------------------------------------------------------------------
@pytest.mark.parametrize(("verb", "phrases"), [
    ("locomo", ["TOPIC_SIMILAR", "STORE.qdrant/", "none (default)", "0.8 ms per point"]),
    ("locomo-log", ["MSPR weight 0", "Deterministic for a seed", "--p-helpful"]),
    ("synthetic", ["STORE.truth.json", "planted weights", "0: no log"]),
    ("scifact", ["BM25", "809 claims"]),
])
def test_help_explains_what_each_verb_builds(capsys, verb, phrases):
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", verb, "--help"])
    assert exit_.value.code == 0
    out = flat(capsys.readouterr().out)
    for phrase in phrases:
        assert phrase in out, phrase


# ---- the whole file ---------------------------------------------------------------------
@pytest.mark.slow
def test_full_locomo_with_the_default_embedder(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    assert main(["ingest", "locomo", "--store", str(store)]) == 0
    held = manifest(store)
    assert {k: held["counts"][k] for k in ("memories", "embeddings", "queries", "qrels")} == {
        "memories": 5882, "embeddings": 5882, "queries": 1986, "qrels": 2820}
    edges = load_dataset(store).edges
    assert dict(edges.group_by("type").len().iter_rows()) == {
        "REPLY_TO": 5610, "TEMPORAL_NEXT": 5610, "TOPIC_SIMILAR": 106}
    assert "evidence anomalies in locomo10.json: 30," in flat(capsys.readouterr().out)
