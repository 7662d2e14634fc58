"""Statistical recovery: the planted weights of the synthetic world can be recovered by tuning
on the train window (STYLE.md 11, after obp's checks against synthetic ground truth).

The world plants its utility on the signals the replayed ranker computes (dense and lexical
exactly, graph as the BFS reach from the dense seeds); the grades, and so the simulated
clicks, verdicts and success rows, follow it. For tuning to see those signals the test
window must have graph expansion (the synthetic experiment's ranker decays edges slowly
enough that they are alive: with the library's 30-day half-life they are pruned months
before) and the features must not be collinear. The tuned weights are compared with the
planted ones by the cosine of the normalised vectors (`experiments.recovery`).

The fast tests use a small world whose log spans about as long as the shipped one (600
searches, 6 h apart: ~150 days); the slow one is the shipped experiment's world.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from msprlab.datasets.build import LogSpec, build_synthetic, default_p_helpful, make_click_model
from msprlab.datasets.clicks import VerdictModel
from msprlab.datasets.synthetic import SyntheticSpec
from msprlab.engine.batch import FEATURES, WEIGHTS
from msprlab.engine.roles import policy_from_name
from msprlab.experiments.arms import baseline_arm
from msprlab.experiments.experiment_config import load_experiment
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Arm, Scorer
from msprlab.experiments.measures.splits import split_searches
from msprlab.experiments.recovery import cosine, planted_arm, read_planted, recovery
from msprlab.experiments.replay import replay
from msprlab.experiments.tune import Objective, SearchSpace, tune

CFG = load_experiment("synthetic")
SMALL = SyntheticSpec(n_users=6, memories_per_user=40, queries_per_user=6)
# The experiment's log for the synthetic world (experiments/stages/prepare.py), at another pace.
SMALL_LOG = LogSpec(n_searches=600, mean_gap_seconds=6 * 3600.0,
                    click_model=make_click_model("pbm", max_grade=3),
                    verdict_model=VerdictModel(p_helpful=default_p_helpful(3)))
# Bounds the shipped world meets with room (measured: expansion share 0.80 and max |corr|
# 0.53 on the shipped world's test window, 0.75 and 0.52 on the small one; cosine 0.94
# and 0.98). With the library's 30-day half-life: share 0.001, max |corr| 0.83.
MIN_EXPANSION_SHARE = 0.5
MAX_ABS_CORRELATION = 0.6
MIN_COSINE = 0.9


def _windows(dataset, engine):
    table = replay(dataset, engine, policy=policy_from_name(CFG.replay.policy))
    split = split_searches(table.searches, CFG.split.spec())
    return (table.subset((split == "train").to_numpy()),
            table.subset((split == "test").to_numpy()))


@pytest.fixture(scope="module")
def small():
    dataset, truth = build_synthetic(SMALL, SMALL_LOG, seed=3)
    return dataset, truth, _windows(dataset, CFG.engine)


def expansion_share(table) -> float:
    return 1.0 - float(table.candidates["was_seed"].mean())


def max_abs_correlation(table) -> float:
    features = np.stack([table.candidates[f].to_numpy() for f in FEATURES])
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = np.corrcoef(features)
    off = matrix[~np.eye(len(FEATURES), dtype=bool)]
    return float(np.nan if np.isnan(off).any() else np.abs(off).max())


def test_edges_are_alive_in_the_test_window(small) -> None:
    dataset, _, (_, test) = small
    assert test.searches.height > 100
    # The test window lies months after the last memory (and edge) was written.
    last_edge = dataset.edges["created_at"].max()
    assert (test.searches["ts"].min() - last_edge).days > 60
    assert expansion_share(test) > MIN_EXPANSION_SHARE
    # The same world under the library's 30-day half-life: every edge pruned by then.
    library = replace(CFG.engine, decay=replace(CFG.engine.decay, half_life_days=30.0))
    _, pruned = _windows(dataset, library)
    assert expansion_share(pruned) < 0.05


def test_features_are_not_collinear_in_the_test_window(small) -> None:
    _, _, (_, test) = small
    assert max_abs_correlation(test) < MAX_ABS_CORRELATION  # a constant column fails too


def _tuned(train, n_trials: int) -> Arm:
    with tempfile.TemporaryDirectory(prefix="test-recovery-") as folder:
        result = tune(Scorer.of(train, [parse_metric("ndcg@10")]), baseline_arm(CFG),
                      SearchSpace(dict(CFG.tune.ranges)), [Objective("ndcg@10")],
                      n_trials=n_trials, seed=CFG.seed, study_name="recovery",
                      storage=Path(folder) / "recovery.journal")
    return result.best[0]


def _check_recovery(truth, train, test, n_trials: int) -> dict:
    tuned = _tuned(train, n_trials)
    planted = {s: getattr(truth.weights, s) for s in FEATURES}
    found = recovery(Scorer.of(test, [parse_metric("ndcg@10")]), tuned, planted,
                     metric="ndcg@10")
    report = (f"cosine {found['cosine']:.3f}; test ndcg@10 tuned {found['tuned_value']:.4f}, "
              f"planted {found['planted_value']:.4f}; tuned {found['tuned']}")
    assert found["cosine"] >= MIN_COSINE, report
    assert found["tuned_value"] >= 0.99 * found["planted_value"], report
    return found


def test_tuning_recovers_the_planted_weights_on_a_small_world(small) -> None:
    _, truth, (train, test) = small
    _check_recovery(truth, train, test, n_trials=150)


@pytest.mark.slow
def test_tuning_recovers_the_planted_weights_of_the_shipped_world() -> None:
    d = CFG.dataset
    spec = SyntheticSpec(n_users=d.users, memories_per_user=d.memories_per_user,
                         queries_per_user=d.queries_per_user)
    log = replace(SMALL_LOG, n_searches=d.searches,
                  mean_gap_seconds=LogSpec(n_searches=1).mean_gap_seconds)
    dataset, truth = build_synthetic(spec, log, seed=d.seed)
    train, test = _windows(dataset, CFG.engine)
    assert expansion_share(test) > MIN_EXPANSION_SHARE
    assert max_abs_correlation(test) < MAX_ABS_CORRELATION
    _check_recovery(truth, train, test, n_trials=CFG.tune.trials)


# ---- the recovery measure itself -----------------------------------------------------------
def test_cosine_is_scale_free_and_names_the_weights_in_order() -> None:
    a = np.array([0.5, 0.3, 0.2, 0.0, 0.0, 0.0])
    assert cosine(a, 3 * a) == pytest.approx(1.0)
    assert cosine(a, np.array([0.0, 0, 0, 1, 0, 0])) == 0.0
    assert np.isnan(cosine(a, np.zeros(6)))
    arm = planted_arm({"dense": 2.0, "lexical": 1.0, "graph": 0.0, "personal": 0.5,
                       "frequency": 0.0, "success": 0.0})
    # WEIGHTS order (frequency before personal), scaled into [0, 1].
    assert dict(zip(WEIGHTS, arm.weights, strict=True)) == {
        "alpha_dense": 1.0, "beta_bm25": 0.5, "gamma_graph": 0.0, "epsilon_frequency": 0.0,
        "delta_personal": 0.25, "zeta_success": 0.0}
    with pytest.raises(ValueError, match="no value for success"):
        planted_arm({"dense": 1.0, "lexical": 0, "graph": 0, "personal": 0, "frequency": 0})


def test_recovery_of_the_planted_weights_themselves_is_exact_and_flat_weights_show(small):
    _, truth, (_, test) = small
    planted = {s: getattr(truth.weights, s) for s in FEATURES}
    scorer = Scorer.of(test, [parse_metric("ndcg@10")])
    found = recovery(scorer, planted_arm(planted), planted, metric="ndcg@10")
    assert found["cosine"] == pytest.approx(1.0)
    assert found["tuned_value"] == found["planted_value"]
    # Sweeping dense moves the metric; a wrong direction scores worse.
    assert found["sensitivity"]["alpha_dense"]["range"] > 0.01
    wrong = recovery(scorer, Arm("wrong", (0.0, 0.0, 1.0, 1.0, 1.0, 0.0)), planted,
                     metric="ndcg@10")
    assert wrong["cosine"] < 0.5 and wrong["tuned_value"] < found["planted_value"]


def test_read_planted_needs_the_sidecar_of_this_dataset(tmp_path) -> None:
    store = tmp_path / "w.duckdb"
    assert read_planted(store, "abc") is None
    (tmp_path / "w.duckdb.truth.json").write_text(json.dumps(
        {"digest": "abc", "planted_weights": {"dense": 0.5}}), encoding="utf-8")
    assert read_planted(store, "abc") == {"dense": 0.5}
    assert read_planted(store, "other") is None
