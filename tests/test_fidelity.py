"""Is the replay production? `experiments/fidelity` on the ContextKit world the real library
made (tests/fixtures/contextkit_world: decay off, MSPR recording feedback at the library's
deltas, weights 0, WordLlama vectors), and on small frames whose answer is known."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from msprlab.datasets.store import load_dataset
from msprlab.experiments.arms import experiment_arms
from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import ExperimentError, load_experiment
from msprlab.experiments.fidelity.candidates import (
    feedback_options,
    half_life_from_edges,
    setting_changes,
)
from msprlab.experiments.fidelity.production import production_of
from msprlab.experiments.fidelity.stage import DECAY_NODES_NOTE, fidelity_stage, stop_message
from msprlab.experiments.stages.replay_tables import replay_tables

WORLD = Path(__file__).parent / "fixtures" / "contextkit_world"
SHIPPED = Path(__file__).parents[1] / "experiments" / "configs" / "contextkit.toml"


@pytest.fixture
def world_store(contextkit_world_store) -> Path:
    return contextkit_world_store


def definition(tmp_path: Path, store: Path, *replacements: tuple[str, str],
               name: str = "ck.toml") -> Path:
    text = SHIPPED.read_text().replace('store = "runs/contextkit.duckdb"', f'store = "{store}"')
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


DECAY_OFF = ("decay = { enabled = true", "decay = { enabled = false")


def fidelity_of(path: Path, store: Path):
    cfg = load_experiment(path)
    ladder = experiment_arms(cfg, ablation=True).ladder
    prepared = replay_tables(cfg, store, {"off": ladder["off"]})
    return fidelity_stage(cfg, prepared)


# ---- production's end state -------------------------------------------------------------
def test_production_is_read_from_the_node_states_edges_and_verdict_records(world_store):
    ds = load_dataset(world_store)
    production = production_of(ds)
    assert production is not None
    info = json.loads((WORLD / "world.json").read_text())["counts"]
    assert production.nodes.height == info["memories"]
    assert production.records.height == info["verdicts"] == ds.feedback_records.height
    assert production.edges.height == ds.edges.height
    # the world recorded no rank: nothing to compare ranks with
    assert production.ranked == 0


def test_a_store_without_node_state_has_no_production(world_store):
    ds = load_dataset(world_store)
    bare = replace(ds, memories=ds.memories.with_columns(metadata=pl.lit("{}")))
    assert production_of(bare) is None


# ---- the check on the world -------------------------------------------------------------
def test_productions_settings_reproduce_its_end_state(world_store, tmp_path):
    fid = fidelity_of(definition(tmp_path, world_store, DECAY_OFF), world_store)
    f = fid.figures
    assert fid.passed and not fid.candidates and not fid.differing
    # bit for bit where the library's arithmetic is the engine's
    assert (f.nodes, f.edges, f.deltas) == (1.0, 1.0, 1.0)
    assert f.in_top >= 0.95 and f.in_top_helpful >= 0.95
    assert f.edges_missing == f.edges_extra == 0
    assert "replay fidelity passed" in fid.summary()


def test_decay_on_is_found_out_and_decay_off_named(world_store, tmp_path):
    fid = fidelity_of(definition(tmp_path, world_store), world_store)
    assert not fid.passed and {"nodes", "edges"} <= set(fid.failing)
    assert fid.figures.deltas == 1.0  # the deltas do not depend on decay
    assert fid.candidates[0].name == "the definition's [engine]"
    tried = {c.name: c for c in fid.candidates}
    assert tried["decay off"].figures.nodes == 1.0 and tried["decay off"].figures.edges == 1.0
    assert fid.differing == {"context_graph.decay.enabled": (True, False)}
    message = stop_message(fid, Path("ck.toml"))
    assert "context_graph.decay.enabled = false (the definition: true)" in message
    # decay's unlogged reads are noted, but the stop names a setting: the note stays out
    assert DECAY_NODES_NOTE in fid.notes and "last read" not in message
    # where no setting comes closer (production ran decay), the stop says why nodes fail
    alone = replace(fid, candidates=fid.candidates[:1], differing={})
    assert f"Also, {DECAY_NODES_NOTE}." in stop_message(alone, Path("ck.toml"))
    # the figures of each configuration are cached beside the store: a second check reads them
    again = fidelity_of(definition(tmp_path, world_store), world_store)
    assert again.figures == fid.figures and again.differing == fid.differing


def test_other_feedback_deltas_are_found_out_from_delta_applied(world_store, tmp_path):
    path = definition(tmp_path, world_store, DECAY_OFF, (
        "boost_delta = 0.15, penalty_delta = 0.10", "boost_delta = 0.3, penalty_delta = 0.2"))
    fid = fidelity_of(path, world_store)
    assert "deltas" in fid.failing and fid.figures.deltas < 0.9
    assert fid.differing["mspr.feedback.boost_delta"] == (0.3, 0.15)
    assert fid.differing["mspr.feedback.penalty_delta"] == (0.2, 0.1)
    best = next(c for c in fid.candidates if c.changes == fid.differing)
    assert best.figures.deltas == 1.0 and best.figures.nodes == 1.0


def test_the_search_can_be_switched_off_and_thresholds_set(world_store, tmp_path):
    path = definition(tmp_path, world_store, ("on_fail = \"stop\"",
                                              "on_fail = \"warn\"\nsearch = false"))
    fid = fidelity_of(path, world_store)
    assert not fid.passed and fid.on_fail == "warn" and not fid.candidates
    lenient = definition(tmp_path, world_store, ("min_nodes = 0.95", "min_nodes = 0.0"),
                         ("min_edges = 0.95", "min_edges = 0.0"),
                         ("min_in_top = 0.90", "min_in_top = 0.5"), name="lenient.toml")
    assert fidelity_of(lenient, world_store).passed


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("min_nodes", "1.5", "fidelity.min_nodes = 1.5 is out of range: it must be a number in [0, 1]"),
    ("on_fail", '"ignore"', "fidelity.on_fail: 'ignore' is not one of stop, warn"),
    ("tolerance", "-1", "fidelity.tolerance = -1.0 is out of range"),
    ("bogus", "1", "fidelity: unknown key 'bogus'"),
])
def test_a_bad_fidelity_setting_is_refused(tmp_path, key, value, needle):
    path = tmp_path / "x.toml"
    text = SHIPPED.read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith(f"{key} ="))
    path.write_text(text.replace("[fidelity]\n", f"[fidelity]\n{key} = {value}\n"))
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    assert needle in str(info.value)


# ---- estimates from the snapshot -----------------------------------------------------------
def test_the_half_life_is_read_off_decayed_edges():
    t0 = datetime(2026, 1, 1)
    half = 10.0  # days
    rows = []
    for i, (kind, w0) in enumerate((("TEMPORAL_NEXT", 0.6), ("REPLY_TO", 1.0),
                                    ("DOCUMENT_LINK", 0.8))):
        hours = 24.0 * (3 + 4 * i)
        rows.append({"type": kind, "weight": w0 * math.exp(-math.log(2) / (half * 24) * hours),
                     "created_at": t0, "updated_at": t0 + timedelta(hours=hours)})
    rows.append({"type": "TOPIC_SIMILAR", "weight": 0.3, "created_at": t0,
                 "updated_at": t0 + timedelta(days=50)})  # its creation weight is unknown
    edges = pl.DataFrame(rows)
    assert half_life_from_edges(edges) == pytest.approx(half, rel=1e-9)
    fresh = edges.with_columns(updated_at=pl.col("created_at"))
    assert half_life_from_edges(fresh) is None


def test_feedback_deltas_and_the_cap_are_read_off_the_records():
    cfg = load_experiment("contextkit")
    records = pl.DataFrame({
        "memory_id": ["a", "a", "a", "b", "b", "c"],
        "user_id": ["u", "u", "u", "u", "u", "v"],
        "helpful": [True, True, True, False, True, True],
        "delta_applied": [0.1, 0.1, 0.05, -0.05, 0.1, 0.1]})
    [(name, config)] = list(feedback_options(cfg.engine, records))
    fb = config.mspr.feedback
    assert (fb.boost_delta, fb.penalty_delta, fb.max_boost_per_memory) == (0.1, 0.05, 0.25)
    assert "boost 0.1, penalty 0.05, cap 0.25" in name
    changes = setting_changes(cfg.engine, config)
    assert changes["mspr.feedback.max_boost_per_memory"] == (0.6, 0.25)
    same = replace(cfg.engine, mspr=config.mspr)
    assert list(feedback_options(same, records)) == []  # nothing to try: already the same


def test_a_decayed_snapshots_edges_are_entered_at_their_creation_weights():
    from msprlab.datasets.schema import EDGES, Dataset
    from msprlab.datasets.sources.contextkit import edges_at_creation, last_tick
    t0 = datetime(2026, 1, 1)
    half = 30.0
    decayed = 0.6 * math.exp(-math.log(2) / (half * 24) * 100)  # 100 hours of decay
    edges = pl.DataFrame({
        "src": ["a", "b", "c", "d"], "dst": ["b", "c", "d", "a"],
        "type": ["TEMPORAL_NEXT", "CAUSAL", "REPLY_TO", "TOPIC_SIMILAR"],
        "weight": [decayed, 0.5, 1.0, 0.9],
        "created_at": [t0] * 4,
        "updated_at": [t0 + timedelta(hours=100), t0 + timedelta(hours=200), t0,
                       t0 + timedelta(hours=10_000)],
        "evidence": [None] * 4}, schema=EDGES)
    ds = Dataset("contextkit", "1", "x", edges=edges)
    restored = edges_at_creation(ds, half).edges["weight"].to_list()
    assert restored[0] == pytest.approx(0.6, rel=1e-12)
    assert restored[1:3] == [0.5, 1.0]  # decay skips CAUSAL; REPLY_TO was never changed
    assert restored[3] == 1.0  # capped: no weight is created above 1
    assert last_tick(edges) == t0 + timedelta(hours=10_000)
    assert last_tick(edges.filter(pl.col("type") == "REPLY_TO")) is None


def test_a_passed_check_goes_into_the_bundle_and_mlflow(world_store, tmp_path):
    """The figures are printed, written to fidelity.json and logged to the parent run."""
    mlflow = pytest.importorskip("mlflow")
    path = definition(tmp_path, world_store, DECAY_OFF, ("trials = 300", "trials = 2"),
                      ("min_support = 30", "min_support = 5"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["ablate", str(path), "--root", str(tmp_path), "--tracking-uri", uri]) == 0
    [bundle] = (tmp_path / "results").iterdir()
    written = json.loads((bundle / "fidelity.json").read_text())
    assert written["passed"] is True and written["figures"]["nodes"] == 1.0
    mlflow.set_tracking_uri(uri)
    runs = pl.from_pandas(mlflow.search_runs(experiment_names=["msprlab-contextkit"],
                                             output_format="pandas"))
    parent = runs.filter(pl.col("tags.mlflow.runName") == "ablate:contextkit").row(
        0, named=True)
    assert parent["metrics.fidelity/nodes"] == 1.0 and parent["metrics.fidelity/passed"] == 1.0
    assert parent["metrics.fidelity/in_top"] == written["figures"]["in_top"]
    assert parent["tags.msprlab.fidelity"] == "passed"


def test_the_check_on_a_set_of_worlds(world_store, tmp_path, capsys):
    """`fidelity.on_worlds` on a folder laid out as `parity.worlds` writes one: the matched
    definition goes on, the mismatched one and the projected queries stop."""
    from msprlab.experiments.fidelity.on_worlds import main as on_worlds
    assert on_worlds([str(tmp_path)]) == 2  # no world there
    folder = tmp_path / "set" / "w"
    folder.mkdir(parents=True)
    shutil.copy(world_store, folder / "store.duckdb")
    world = tmp_path / "world"
    shutil.copytree(WORLD, world)  # opening a Qdrant folder locks it
    assert main(["ingest", "contextkit", "--feedback-db", str(world / "feedback_events.db"),
                 "--graph-jsonl", str(world / "context_graph.jsonl"), "--qdrant-path",
                 str(world / "qdrant"), "--store", str(folder / "store-projected.duckdb")]) == 0
    definition(folder, folder / "store.duckdb", DECAY_OFF, name="matched.toml")
    definition(folder, folder / "store.duckdb", name="mismatched.toml")
    capsys.readouterr()
    records = tmp_path / "records.json"
    assert on_worlds([str(tmp_path / "set"), "--json", str(records)]) == 0
    found = {r["definition"]: r for r in json.loads(records.read_text())}
    assert found["matched"]["passed"] and found["matched"]["nodes"] == 1.0
    assert not found["mismatched"]["passed"]
    assert found["mismatched"]["named"] == {"context_graph.decay.enabled": [True, False]}
    assert found["mismatched"]["true"] == found["mismatched"]["named"]
    assert found["mismatched"]["named_against_true"] == "1 of 1 true"
    assert not found["projected"]["passed"] and "in_top" in found["projected"]["failing"]
    assert found["projected"]["true"] == {} and found["projected"]["named"] == {}
    # the shipped definition with the projection fallback: decay is still found out
    both = found["mismatched-projected"]
    assert not both["passed"] and both["named_against_true"] == "1 of 1 true"
    assert "stops (exit 2)" in capsys.readouterr().out


@pytest.mark.parametrize(("named", "true", "expected"), [
    ({}, {}, "none to name"),
    ({"a.b.c": [1, 2]}, {}, "named without a difference"),
    ({"x.decay.half_life_days": [30.0, 58.9]}, {"x.decay.half_life_days": [30.0, 60.0]},
     "1 of 1 true"),
    ({"x.decay.half_life_days": [30.0, 40.0]}, {"x.decay.half_life_days": [30.0, 60.0]},
     "0 of 1 true; wrong half_life_days"),
    ({"x.decay.enabled": [True, False]},
     {"x.decay.enabled": [True, False], "x.r.epsilon_frequency": [0.0, 0.05]},
     "1 of 2 true; missed epsilon_frequency"),
])
def test_named_settings_are_compared_with_the_true_differences(named, true, expected):
    from msprlab.experiments.fidelity.on_worlds import named_against_true
    assert named_against_true(named, true) == expected
