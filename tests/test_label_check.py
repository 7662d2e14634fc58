"""Feedback labels against the truth (experiments/label_check.py), on the ContextKit world
the real library made (tests/fixtures/contextkit_world/)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from msprlab.experiments.arms import experiment_arms
from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import load_experiment
from msprlab.experiments.label_check import agreement, with_truth
from msprlab.experiments.label_check import main as check_main
from msprlab.experiments.replay import CandidateTable
from msprlab.experiments.stages.replay_tables import replay_tables

WORLD = Path(__file__).parent / "fixtures" / "contextkit_world"
SHIPPED = Path(__file__).parents[1] / "experiments" / "configs" / "contextkit.toml"


def test_truth_replaces_the_grades_of_the_same_candidates() -> None:
    searches = pl.DataFrame({"search": [0, 1], "query_id": ["h#0", "h#1"],
                             "question": ["h", "h"]})
    candidates = pl.DataFrame({"search": [0, 0, 1], "memory_id": ["a", "b", "a"],
                               "grade": [1, None, 0], "dense": [0.1, 0.2, 0.3]})
    verdicts = pl.DataFrame({"query_id": ["h#0", "h#1"], "memory_id": ["a", "a"],
                             "relevance": [1, 0]})
    truth = pl.DataFrame({"query_id": ["h", "h"], "memory_id": ["b", "c"],
                          "relevance": [1, 2]})
    relabelled = with_truth(CandidateTable(searches, candidates, verdicts, {}), truth)
    assert relabelled.candidates["grade"].to_list() == [None, 1, None]
    assert relabelled.candidates.columns == candidates.columns
    assert sorted(relabelled.qrels.rows()) == [("h#0", "b", 1), ("h#0", "c", 2),
                                               ("h#1", "b", 1), ("h#1", "c", 2)]


def test_agreement_is_kendall_and_pearson_over_the_arms() -> None:
    def summary(means: dict[str, float]) -> pl.DataFrame:
        return pl.DataFrame({"arm": list(means), "metric": "m", "group_by": "overall",
                             "unit": "query", "mean": list(means.values())})
    truth = summary({"off": 0.1, "a": 0.3, "b": 0.2, "c": 0.4})
    labels = summary({"off": 0.2, "a": 0.5, "b": 0.6, "c": 0.7})
    res = agreement(truth, labels, metric="m", truth_metric="m", arms=["off", "a", "b", "c"])
    assert res["tau"] == pytest.approx(stats.kendalltau([0.1, 0.3, 0.2, 0.4],
                                                        [0.2, 0.5, 0.6, 0.7]).statistic)
    assert res["delta_r"] == pytest.approx(stats.pearsonr([0.2, 0.1, 0.3],
                                                          [0.3, 0.4, 0.5]).statistic)
    flat = summary({"off": 0.5, "a": 0.5, "b": 0.5, "c": 0.5})
    res = agreement(truth, flat, metric="m", truth_metric="m", arms=["off", "a", "b", "c"])
    assert res["tau"] != res["tau"]  # NaN: a constant metric orders nothing


@pytest.fixture
def world_store(contextkit_world_store) -> Path:
    return contextkit_world_store


def test_the_world_checks_verdicts_against_its_truth(world_store, tmp_path, capsys) -> None:
    definition = tmp_path / "ck.toml"
    definition.write_text(SHIPPED.read_text().replace(
        'store = "runs/contextkit.duckdb"', f'store = "{world_store}"').replace(
        "min_support = 30", "min_support = 5").replace(
        "decay = { enabled = true", "decay = { enabled = false"))
    capsys.readouterr()
    assert check_main([str(definition), "--truth", str(WORLD / "truth" / "qrels.tsv")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "feedback labels against the truth" in out
    assert "the ladder's arms: ndcg@10 on verdicts vs ndcg@10 on the truth: Kendall's tau-b" in out
    assert "reference:bm25" in out and "reference:dense" in out
    # the same searches under both labels: the truth table has the verdict table's searches
    cfg = load_experiment(definition)
    ladder = experiment_arms(cfg, ablation=True).ladder
    prepared = replay_tables(cfg, world_store, {"off": ladder["off"]})
    table = prepared.table("off")
    truth = with_truth(table, pl.read_csv(WORLD / "truth" / "qrels.tsv", separator="\t",
                                          has_header=False, new_columns=[
                                              "query_id", "iter", "memory_id", "relevance"]))
    assert truth.searches.equals(table.searches)
    assert truth.candidates.select("search", "memory_id").equals(
        table.candidates.select("search", "memory_id"))


def test_a_definition_on_qrels_is_refused(capsys) -> None:
    assert check_main(["locomo", "--truth", str(WORLD / "truth" / "qrels.tsv")]) == 2
    assert 'dataset.labels must be "verdicts"' in capsys.readouterr().out


def test_the_shipped_definition_stops_where_production_ran_otherwise(world_store, tmp_path,
                                                                     capsys) -> None:
    """The world's production ran decay off; the shipped definition (decay on, the
    library's default) is not it: the run stops before any table and names the setting,
    measured by replaying it."""
    root = world_store.parents[1]
    definition = tmp_path / "ck.toml"
    definition.write_text(SHIPPED.read_text())
    capsys.readouterr()
    assert main(["ablate", str(definition), "--root", str(root), "--no-track"]) == 2
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())
    assert "replay fidelity FAILED" in out and "ablation ladder" not in out
    assert "copy production's settings into [engine]: context_graph.decay.enabled = false " \
           "(the definition: true)" in out
    assert "decay off 100.0% 100.0% 100.0%" in out  # the candidate tried, with its figures


def test_a_relative_store_is_under_root_and_chat_roles_are_named(world_store, tmp_path,
                                                                  capsys) -> None:
    # dataset.store = "runs/contextkit.duckdb" (the shipped definition's), found under --root
    root = world_store.parents[1]
    definition = tmp_path / "ck.toml"
    definition.write_text(SHIPPED.read_text().replace("min_support = 30", "min_support = 5")
                          .replace("trials = 300", "trials = 5").replace(
                              "decay = { enabled = true", "decay = { enabled = false"))
    capsys.readouterr()
    assert main(["ablate", str(definition), "--root", str(root), "--no-track"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"store {world_store}" in out
    assert "replay fidelity passed: nodes 100.0%, edges 100.0%, deltas 100.0%" in out
    # the world's memories came through Memory.add: their payload role is the chat role
    assert "the memories' payload role is a chat role (user)" in out and "quirk 15" in out
