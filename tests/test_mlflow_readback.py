"""What `msprlab run` logs to MLflow, read back with `mlflow.search_runs`, agrees with the
results bundle and the rendered report: one headline, one key convention, provenance on
every run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from test_experiments import SMALL

from msprlab.experiments.cli import main

mlflow = pytest.importorskip("mlflow")

PRIMARY = "ndcg_at_10"
PROVENANCE = ("msprlab.dataset_digest", "msprlab.config_hash", "msprlab.git_commit")


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> tuple[pl.DataFrame, Path, Path]:
    root = tmp_path_factory.mktemp("tracked")
    definition = root / "small.toml"
    definition.write_text(SMALL.replace("trials = 10", "trials = 4"))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    assert main(["run", str(definition), "--root", str(root), "--tracking-uri", uri]) == 0
    [bundle] = (root / "results").iterdir()
    assert main(["report", str(bundle)]) == 0
    mlflow.set_tracking_uri(uri)
    runs = pl.from_pandas(mlflow.search_runs(experiment_names=["msprlab"],
                                             output_format="pandas"))
    return runs, bundle, root


def _one(runs: pl.DataFrame, name: str) -> dict:
    rows = runs.filter(pl.col("tags.mlflow.runName") == name)
    assert rows.height == 1, f"{name}: {rows.height} runs"
    return rows.row(0, named=True)


def test_the_parent_run_holds_the_headline_of_the_test_window(logged) -> None:
    runs, bundle, _ = logged
    parent = _one(runs, "run:small")
    summary = pl.read_parquet(bundle / "test" / "summary.parquet").filter(
        pl.col("metric") == "ndcg@10", pl.col("group_by") == "overall", pl.col("unit") == "query")
    assert set(summary["arm"]) == {"off", "on-zero", "tuned"}
    for r in summary.iter_rows(named=True):
        assert parent[f"metrics.headline/{r['arm']}/{PRIMARY}"] == pytest.approx(r["mean"],
                                                                               abs=1e-12)
    comparison = pl.read_parquet(bundle / "test" / "comparison.parquet").filter(
        pl.col("metric") == "ndcg@10", pl.col("group_by") == "overall", pl.col("unit") == "query")
    for r in comparison.iter_rows(named=True):
        stem = f"metrics.headline/tuned_minus_{r['reference']}/{PRIMARY}"
        assert parent[stem] == pytest.approx(r["delta"], abs=1e-12)
        assert parent[f"{stem}/ci_low"] <= parent[stem] <= parent[f"{stem}/ci_high"]


def test_every_child_carries_the_parents_provenance(logged) -> None:
    runs, _, _ = logged
    parent = _one(runs, "run:small")
    children = runs.filter(pl.col("tags.mlflow.parentRunId") == parent["run_id"])
    names = set(children["tags.mlflow.runName"])
    assert {"arm:off", "arm:on-zero", "arm:all", "test:off", "test:on-zero",
            "test:tuned", "study"} <= names
    for tag in PROVENANCE:
        assert parent[f"tags.{tag}"]
        assert set(children[f"tags.{tag}"]) == {parent[f"tags.{tag}"]}, tag


def test_arm_and_test_children_use_one_key_convention(logged) -> None:
    runs, bundle, _ = logged
    ladder = pl.read_parquet(bundle / "ablation" / "summary.parquet")
    match = {r["arm"]: r["rate"] for r in
             pl.read_parquet(bundle / "ablation" / "match.parquet").iter_rows(named=True)}
    for r in ladder.filter(pl.col("metric") == "ndcg@10").iter_rows(named=True):
        child = _one(runs, f"arm:{r['arm']}")
        group = "" if r["group_by"] == "overall" else f"/{r['group_by']}/{r['group']}"
        prefix = "" if r["unit"] == "query" else "per_search/"
        assert child[f"metrics.{prefix}{PRIMARY}{group}"] == pytest.approx(r["mean"], abs=1e-12)
        n_key = f"metrics.{prefix}n{group}"
        assert child[n_key] == r["n"], n_key
        assert child["metrics.match/rate"] == pytest.approx(match[r["arm"]], abs=1e-12)
    arms = pl.read_parquet(bundle / "ablation" / "arms.parquet")
    off = _one(runs, "arm:off")
    assert off["params.switch.mspr"] == str(arms.filter(pl.col("name") == "off")
                                            ["switch.mspr" if "switch.mspr" in arms.columns
                                             else "mspr"].item())
    test = pl.read_parquet(bundle / "test" / "summary.parquet")
    for r in test.filter(pl.col("metric") == "ndcg@10", pl.col("unit") == "query",
                         pl.col("group_by") == "intent").iter_rows(named=True):
        child = _one(runs, f"test:{r['arm']}")
        assert child[f"metrics.{PRIMARY}/intent/{r['group']}"] == pytest.approx(r["mean"],
                                                                               abs=1e-12)
        assert child[f"metrics.n/intent/{r['group']}"] == r["n"]


def test_side_effect_arms_are_logged_like_the_ladder(logged) -> None:
    runs, bundle, _ = logged
    keys = {c for c in runs.columns if c.startswith("metrics.")}

    def logged_keys(name: str) -> set[str]:
        run = _one(runs, name)
        return {k for k in keys if run[k] is not None and not (
            isinstance(run[k], float) and math.isnan(run[k]))}

    ladder = logged_keys("arm:on-zero")
    assert f"metrics.{PRIMARY}" in ladder and f"metrics.per_search/{PRIMARY}" in ladder
    assert any(k.startswith("metrics.funnel/") for k in ladder)
    for name in ("no-feedback", "no-success", "no-frequency"):
        run = _one(runs, f"arm:{name}")
        assert run["tags.msprlab.arm_kind"] == "side-effect"
        # the same keys as a ladder arm (a group one arm never reaches may differ)
        assert logged_keys(f"arm:{name}") == ladder, name
        # and the values of its own per-search frame in the bundle
        frame = pl.read_parquet(bundle / "ablation" / "per_search" / f"{name}.parquet")
        values = frame["ndcg@10"].drop_nans().drop_nulls()
        assert run[f"metrics.per_search/{PRIMARY}"] == pytest.approx(values.mean(), abs=1e-12)
        assert run["metrics.per_search/n"] == values.len()


def test_the_report_prints_the_logged_headline(logged) -> None:
    runs, bundle, _ = logged
    parent = _one(runs, "run:small")
    text = (bundle / "summary.md").read_text()
    for arm in ("off", "tuned"):
        value = parent[f"metrics.headline/{arm}/{PRIMARY}"]
        assert f"{value:.4f}" in text, arm
    delta = parent[f"metrics.headline/tuned_minus_off/{PRIMARY}"]
    assert f"{delta:+.4f}" in text
    provenance = json.loads((bundle / "provenance.json").read_text())
    assert provenance["dataset"]["digest"] == parent["tags.msprlab.dataset_digest"]
    assert not math.isnan(delta)


def test_reference_rankers_are_children_of_kind_reference(logged) -> None:
    runs, bundle, _ = logged
    summary = pl.read_parquet(bundle / "references" / "summary.parquet").filter(
        pl.col("metric") == "ndcg@10")
    for r in summary.iter_rows(named=True):
        child = _one(runs, f"reference:{r['arm']}")
        assert child["tags.msprlab.arm_kind"] == "reference"
        group = "" if r["group_by"] == "overall" else f"/{r['group_by']}/{r['group']}"
        prefix = "" if r["unit"] == "query" else "per_search/"
        assert child[f"metrics.{prefix}{PRIMARY}{group}"] == pytest.approx(r["mean"], abs=1e-12)
        assert child[f"metrics.{prefix}n{group}"] == r["n"]
        assert child["metrics.cost/seconds"] >= 0
    assert set(summary["arm"]) == {"bm25", "dense", "pool-ideal"}
