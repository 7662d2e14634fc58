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

import numpy as np
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


# ---- settings, the set and its definitions (no library needed) -------------------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["--eta", "-1"], "`0 <= eta < inf` must hold"),
    (["--preference-share", "2"], "--preference-share must be a number in [0, 1], got 2.0"),
    (["--rank-share", "-0.1"], "--rank-share must be a number in [0, 1], got -0.1"),
    (["--decay", "maybe"], "expected on or off, got 'maybe'"),
    (["--boost", "1.5"], "--boost-delta must be a number in [0, 1], got 1.5"),
    (["--half-life", "0"], "--half-life-days must be a number in [0.001, 1e+06], got 0.0"),
])
def test_bad_world_settings_exit_2(tmp_path, capsys, argv, message):
    try:
        code = main(["--out", str(tmp_path / "w"), *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "w").exists()


def test_productions_engine_block_is_the_configuration_it_ran(tmp_path):
    from msprlab.experiments.experiment_config import load_experiment
    from msprlab.experiments.parity.worlds import WORLDS, definition
    for world in WORLDS:
        p = world.settings.production
        matched = tmp_path / f"{world.name}.toml"
        matched.write_text(definition(world, tmp_path / "s.duckdb", matched=True))
        engine = load_experiment(matched).engine
        assert engine.decay.enabled == p.decay
        if p.decay:
            assert engine.decay.half_life_days == p.half_life_days
        fb, r = engine.mspr.feedback, engine.retrieval
        assert (fb.boost_delta, fb.penalty_delta, fb.max_boost_per_memory) == (
            p.boost_delta, p.penalty_delta, p.max_boost_per_memory)
        assert (r.delta_personal, r.epsilon_frequency, r.zeta_success) == (
            p.delta_personal, p.epsilon_frequency, p.zeta_success)
        mismatched = tmp_path / f"{world.name}-x.toml"
        mismatched.write_text(definition(world, tmp_path / "s.duckdb", matched=False))
        other = load_experiment(mismatched).engine
        assert other != engine  # the mismatched definition is not production's
        assert "[fidelity]" in mismatched.read_text()  # the rest of the definition stays


def test_a_world_command_gives_the_settings_back():
    from msprlab.experiments.parity.world import _parser
    from msprlab.experiments.parity.world_settings import settings_from_args
    from msprlab.experiments.parity.worlds import WORLDS
    from msprlab.experiments.parity.worlds_manifest import world_command
    for world in WORLDS:
        argv = world_command(world.name, world.settings).split()[3:]  # after `-m module`
        assert settings_from_args(_parser().parse_args(argv)) == world.settings, world.name


def test_the_examination_curve_is_the_click_models():
    from msprlab.datasets.clicks import PositionBasedModel, expected_click_rates
    settings = WorldSettings(click_model=PositionBasedModel(eta=0.7, noise=0.0, max_grade=1))
    curve = settings.examination()
    assert curve[0] == 1.0 and curve[1] == pytest.approx(2 ** -0.7)
    # with noise 0 a relevant memory is clicked exactly when examined
    rates = expected_click_rates(settings.click_model, np.ones(10, dtype=np.int64))
    np.testing.assert_allclose(rates, curve)


@pytest.mark.parity
def test_a_world_with_the_applications_embedder_replays_as_production(tmp_path, monkeypatch,
                                                                       capsys):
    """A tiny world made with the embedder msprlab lacks, production's own weights, ranks
    recorded and a truth that follows past verdicts: its truth holds what the users did,
    and the matched definition replays production (the fidelity check passes) while the
    shipped one stops naming what differs."""
    monkeypatch.setenv("OUTHAD_CONTEXTKIT_TELEMETRY", "false")
    monkeypatch.setenv("OUTHAD_CONTEXTKIT_DIR", str(tmp_path / "library-home"))
    pytest.importorskip("outhad_contextkit")
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures" / "application"))
    from msprlab.experiments.cli import main as msprlab
    from msprlab.experiments.parity.world_settings import Production
    from msprlab.experiments.parity.worlds import World, definition
    settings = WorldSettings(conversations=2, sessions=2, searches=120, seed=3, rank_share=1.0,
                             preference_share=0.5, embedder="app_embedding:embed",
                             production=Production(delta_personal=0.1, zeta_success=0.1))
    folder = tmp_path / "w"
    info = generate_world(folder, settings)
    assert info["embedder"]["shipped_by_msprlab"] is False and info["embedder"]["dim"] == 96
    assert info["truth"]["examination"] == settings.examination()
    searches = pl.read_parquet(folder / "truth" / "searches.parquet")
    assert searches["verdict_ranks"].list.len().sum() == info["counts"]["verdicts"]
    assert info["counts"]["verdicts_with_rank"] == info["counts"]["verdicts"]  # share 1.0
    with sqlite3.connect(f"{(folder / 'feedback_events.db').resolve().as_uri()}?immutable=1",
                         uri=True) as conn:
        ranks = [json.loads(m)["rank"] for (m,) in conn.execute(
            "SELECT metadata_json FROM feedback_events ORDER BY id")]
    conn.close()
    assert ranks == [r for rs in searches["verdict_ranks"].to_list() for r in rs]
    # a preference question's truth holds the memories its user judged helpful for it
    truth = {(h, m) for h, _, m, _ in qrels(folder)}
    for row in searches.filter(pl.col("preference")).iter_rows(named=True):
        liked = {row["shown"][r - 1] for r, ok in zip(row["verdict_ranks"],
                                                       row["verdict_helpful"], strict=True)
                 if ok}
        assert {(row["query_hash"], m) for m in liked} <= truth
    store = tmp_path / "s.duckdb"
    assert msprlab(["ingest", "contextkit", "--feedback-db", str(folder / "feedback_events.db"),
                    "--graph-jsonl", str(folder / "context_graph.jsonl"), "--qdrant-path",
                    str(folder / "qdrant"), "--query-embedder", "app_embedding:embed",
                    "--store", str(store)]) == 0
    world = World("tiny", "a test", settings)
    for matched, code in ((True, 0), (False, 2)):
        path = tmp_path / f"{matched}.toml"
        path.write_text(definition(world, store, matched=matched).replace(
            "min_support = 10", "min_support = 1").replace("trials = 300", "trials = 2")
            .replace("min_ranks = 0.70", "min_ranks = 0.5"))
        capsys.readouterr()
        assert msprlab(["ablate", str(path), "--root", str(tmp_path), "--no-track"]) == code
        out = " ".join(capsys.readouterr().out.split())
        assert ("replay fidelity passed: nodes 100.0%, edges 100.0%, deltas 100.0%" in out
                if matched else "context_graph.decay.enabled = false" in out)
