"""The stage funnel (experiments/measures/funnel.py): seed and pool recall and the pool's ceiling by
hand, the ceiling as an upper bound of every weight vector, and `msprlab ablate` printing,
bundling and logging it."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_experiments import SMALL

from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import load_experiment
from msprlab.experiments.measures.funnel import funnel_frame, ideal_rankings, shares
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Arm, Scorer
from msprlab.experiments.references import pool_ideal_run, reference_frame
from msprlab.experiments.replay import CandidateTable
from msprlab.experiments.stages.prepare import prepare_store
from msprlab.experiments.stages.replay_tables import replay_tables, window_table

NDCG = parse_metric("ndcg@10")


def hand_table() -> CandidateTable:
    """Search 0 asks q: relevant m1 (grade 2), m2 and m3 (grade 1), m4 judged not relevant.
    Its pool: seeds m4 and m1, expansion m2 and the unjudged m5; m3 is never found.
    Search 1 asks r, whose one relevant memory is not in its pool (lost); search 2 asks z,
    which has no relevant memory (undefined, NaN)."""
    searches = pl.DataFrame({"search": [0, 1, 2], "event_id": [10, 11, 12],
                             "query_id": ["q", "r", "z"], "limit": [10, 10, 10],
                             "intent_label": ["FACTUAL"] * 3, "question_type": ["x"] * 3})
    rows = [(0, 0, "m4", True, 0, 1.0), (0, 1, "m1", True, 2, 1.0), (0, 2, "m2", False, 1, 1.0),
            (0, 3, "m5", False, None, 1.0), (1, 0, "m6", True, None, 1.0),
            (2, 0, "m7", True, 0, 1.0)]
    candidates = pl.DataFrame(rows, schema={"search": pl.Int64, "position": pl.Int64,
                                            "memory_id": pl.String, "was_seed": pl.Boolean,
                                            "grade": pl.Int64, "role": pl.Float64},
                              orient="row")
    qrels = pl.DataFrame({"query_id": ["q", "q", "q", "q", "r", "z"],
                          "memory_id": ["m1", "m2", "m3", "m4", "m8", "m7"],
                          "relevance": [2, 1, 1, 0, 1, 0]})
    return CandidateTable(searches, candidates, qrels, {})


def achieved(values: list[float]) -> pl.DataFrame:
    return pl.DataFrame({"search": [0, 1, 2], "event_id": [10, 11, 12],
                         "query_id": ["q", "r", "z"], "intent": ["FACTUAL"] * 3,
                         "question_type": ["x"] * 3, "ndcg@10": values})


def dcg(grades: list[int]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(grades))


def test_the_funnel_by_hand() -> None:
    table = hand_table()
    assert ideal_rankings(table) == [["m1", "m2", "m4", "m5"], ["m6"], ["m7"]]
    frame = funnel_frame(table, achieved([0.25, 0.0, float("nan")]), metric=NDCG)
    first = frame.row(0, named=True)
    assert first["seed_recall"] == pytest.approx(1 / 3)
    assert first["pool_recall"] == pytest.approx(2 / 3)
    # the ideal DCG counts m3 too, though no arm could return it
    assert first["ceiling"] == pytest.approx(dcg([2, 1]) / dcg([2, 1, 1]), abs=1e-12)
    assert first["achieved"] == 0.25 and first["lost"] == 0.0
    lost = frame.row(1, named=True)
    assert (lost["seed_recall"], lost["pool_recall"], lost["ceiling"], lost["lost"]) == (
        0.0, 0.0, 0.0, 1.0)
    assert all(math.isnan(v) for k, v in frame.row(2, named=True).items()
               if k in ("seed_recall", "pool_recall", "ceiling", "achieved", "lost"))


def test_the_role_filter_shrinks_the_pool() -> None:
    table = hand_table()
    denied = CandidateTable(table.searches, table.candidates.with_columns(
        role=pl.when(pl.col("memory_id") == "m1").then(0.0).otherwise(1.0)), table.qrels, {})
    assert ideal_rankings(denied, roles=False)[0][0] == "m1"
    assert ideal_rankings(denied, roles=True)[0] == ["m2", "m4", "m5"]
    frame = funnel_frame(denied, achieved([0.0, 0.0, 0.0]), metric=NDCG, roles=True)
    assert frame["pool_recall"][0] == pytest.approx(1 / 3)
    assert frame["seed_recall"][0] == 0.0


def test_the_limit_cuts_the_ideal_order() -> None:
    table = hand_table()
    short = CandidateTable(table.searches.with_columns(limit=pl.lit(1)), table.candidates,
                           table.qrels, {})
    assert ideal_rankings(short) == [["m1"], ["m6"], ["m7"]]


def test_a_frame_from_another_table_is_refused() -> None:
    with pytest.raises(ValueError, match="funnel: the arm's frame has 2 searches, the table 3"):
        funnel_frame(hand_table(), achieved([0.1, 0.2, 0.3]).head(2), metric=NDCG)


def test_shares_are_the_ratio_of_the_means() -> None:
    summary = pl.DataFrame({
        "arm": ["a"] * 5, "unit": ["query"] * 5, "group_by": ["overall"] * 5,
        "group": ["overall"] * 5,
        "metric": ["seed_recall", "pool_recall", "ceiling", "achieved", "lost"],
        "mean": [0.2, 0.4, 0.5, 0.125, 0.1], "n": [8] * 5, "low_support": [False] * 5})
    row = shares(summary).row(0, named=True)
    assert row["share"] == 0.25 and row["n"] == 8 and row["pool_recall"] == 0.4


@pytest.fixture(scope="module")
def small_test_window(tmp_path_factory) -> tuple[Scorer, CandidateTable]:
    root = tmp_path_factory.mktemp("funnel")
    definition = root / "small.toml"
    definition.write_text(SMALL)
    cfg = load_experiment(definition)
    prepared = replay_tables(cfg, prepare_store(cfg, root), {"all": cfg.engine})
    table = window_table(prepared, "all", "test")
    return Scorer.of(table, [NDCG]), table


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6), st.booleans())
def test_no_weights_beat_the_ceiling(small_test_window, weights, intent) -> None:
    scorer, table = small_test_window
    arm = Arm("w", tuple(weights), intent=intent)
    frame = funnel_frame(table, scorer.frame(arm), metric=NDCG)
    defined = frame.filter(pl.col("ceiling").is_not_nan())
    assert defined.height > 10
    assert (defined["achieved"] <= defined["ceiling"] + 1e-12).all()
    # an arm's recall@pool is the pool's: the weights only reorder
    assert (defined["pool_recall"] >= defined["seed_recall"]).all()


def test_the_pool_ideal_reference_is_the_ceiling(small_test_window) -> None:
    scorer, table = small_test_window
    frame = funnel_frame(table, scorer.frame(Arm("w", (1, 1, 1, 0, 0, 0))), metric=NDCG)
    ideal = reference_frame(table, pool_ideal_run(table), [NDCG])
    np.testing.assert_array_equal(ideal["ndcg@10"].to_numpy(), frame["ceiling"].to_numpy())


def test_ablate_prints_bundles_and_logs_the_funnel(tmp_path, capsys) -> None:
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL + '[ablation]\narms = ["off", "on-zero"]\n'
                          f'[tracking]\nuri = "sqlite:///{tmp_path}/mlflow.db"\n'
                          'experiment = "funnel"\n')
    assert main(["ablate", str(definition), "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "stage funnel, test window: where ndcg@10 is lost" in out
    assert "stage funnel by intent" in out and "stage funnel by question type" in out
    [bundle] = list((tmp_path / "results").iterdir())
    funnel = pl.read_parquet(bundle / "ablation" / "funnel.parquet")
    assert set(funnel["arm"]) == {"off", "on-zero"}
    assert set(funnel["metric"]) == {"seed_recall", "pool_recall", "ceiling", "achieved",
                                     "lost", "share"}
    assert {"overall", "intent", "question_type"} <= set(funnel["group_by"])
    per_search = pl.read_parquet(bundle / "ablation" / "funnel" / "per_search" / "off.parquet")
    ladder = pl.read_parquet(bundle / "ablation" / "per_search" / "off.parquet")
    assert per_search["achieved"].equals(ladder["ndcg@10"], null_equal=True)

    import mlflow
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["funnel"],
                              filter_string="tags.`msprlab.arm` = 'off'")
    [row] = [r for _, r in runs.iterrows() if r["tags.msprlab.arm_kind"] == "ladder"]
    overall = funnel.filter(pl.col("arm") == "off", pl.col("unit") == "query",
                            pl.col("group_by") == "overall")
    expected = dict(zip(overall["metric"], overall["mean"], strict=True))
    for metric in ("seed_recall", "pool_recall", "ceiling", "achieved", "share"):
        assert row[f"metrics.funnel/{metric}"] == pytest.approx(expected[metric], abs=1e-12)
