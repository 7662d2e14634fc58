"""A configuration search (issue 38): settings and weights in one study, in rounds; each
trial's value is its point's table, replayed alone, scored with its weights."""

from __future__ import annotations

from typing import Any

import pytest
from config_search_world import METRICS, OBJECTIVE, search

from msprlab.experiments.errors import ExperimentError
from msprlab.experiments.measures.scoring import Scorer
from msprlab.experiments.replay import replay
from msprlab.experiments.tune import Objective, tune
from msprlab.experiments.tune.attrs import COST_ATTR, GROUP_ATTR, POINT_ATTR
from msprlab.experiments.tune.configuration import objective_values
from msprlab.experiments.tune.space import weights_of
from msprlab.experiments.variants.settings import SETTINGS

from replay_world import StripedPolicy, world


def run(n_trials: int = 16, *, storage: Any = ":memory:", seed: int = 3,
        objectives: Any = OBJECTIVE, **kwargs: Any) -> Any:
    config, train, base, weights = search(**kwargs)
    result = tune(train, base, weights, objectives, n_trials=n_trials, study_name="config",
                  storage=str(storage), configuration=config, seed=seed)
    return result, config, base


def test_each_trial_scores_its_point_as_a_replay_of_it_alone_would() -> None:
    result, config, base = run()
    log, _ = world(1)
    split = config.source.split
    trials = result.study.get_trials(deepcopy=False)
    assert len(trials) == 16 and all(t.state.name == "COMPLETE" for t in trials)
    for trial in trials:
        values = {k: trial.params[k] for k in config.settings.keys}
        point = config.point(values)
        table = replay(log, point.config, policy=StripedPolicy())
        scorer = Scorer.of(table.subset(split == "train"), METRICS)
        arm = base.__class__("again", weights_of(trial.params, base), base.intent, base.roles)
        assert objective_values(scorer, arm, OBJECTIVE) == (trial.value,)


def test_rounds_share_a_state_in_one_walk_and_search_each_points_weights() -> None:
    result, config, _ = run(20)
    trials = result.study.get_trials(deepcopy=False)
    state = [k for k in config.settings.keys if SETTINGS[k].touches == "state"]
    assert trials[0].user_attrs["msprlab_baseline"]
    groups = [t for t in trials if GROUP_ATTR in t.user_attrs]
    points = [t for t in trials if POINT_ATTR in t.user_attrs]
    assert groups and points
    for t in groups:
        lead = trials[t.user_attrs[GROUP_ATTR]]
        assert {k: t.params[k] for k in state} == {k: lead.params[k] for k in state}
    for t in points:
        source = trials[t.user_attrs[POINT_ATTR]]
        assert {k: t.params[k] for k in config.settings.keys} == {
            k: source.params[k] for k in config.settings.keys}
        assert t.user_attrs["msprlab_table"] == source.user_attrs["msprlab_table"]
    stats = config.source.store.stats
    assert stats.built == len({t.user_attrs["msprlab_table"] for t in trials})  # each once
    assert max(stats.sizes) >= 2  # a group's new points in one walk
    assert stats.as_dict()["variants_in_shared_walks"] >= 2
    leads = [t for t in trials if "msprlab_group_lead" in t.user_attrs]
    assert [t.user_attrs["msprlab_group_lead"] for t in leads][:3] == ["random"] * 3
    assert result.best_settings and set(result.best_settings[0]) == set(config.settings.keys)
    assert set(result.trials.columns) >= set(config.settings.keys)


def test_only_a_new_point_gets_trials_queued_to_search_its_weights() -> None:
    result, _, _ = run(40)
    trials = result.study.get_trials(deepcopy=False)
    sources = {t.user_attrs[POINT_ATTR] for t in trials if POINT_ATTR in t.user_attrs}
    table = {t.number: t.user_attrs["msprlab_table"] for t in trials}
    assert sources
    for number in sources:  # no earlier trial scored the source's table
        assert table[number] not in {table[n] for n in range(number)}
    assert len({table[n] for n in sources}) == len(sources)  # each point's trials queued once
    again = [t for t in trials if POINT_ATTR not in t.user_attrs and t.number not in sources
             and table[t.number] in {table[n] for n in sources if n < t.number}]
    assert again  # the sampler came back to a known point: it got no queued trials


def test_the_trials_frame_holds_the_settings_as_the_points_took_them() -> None:
    result, config, _ = run(16)
    frame = result.trials
    trials = {t.number: t for t in result.study.get_trials(deepcopy=False)}
    for row in frame.iter_rows(named=True):
        trial = trials[row["number"]]
        assert row["table"] == trial.user_attrs["msprlab_table"]
        assert row["cost_ms"] == trial.user_attrs[COST_ATTR] > 0
        values = {k: row[k] for k in config.settings.keys}
        assert config.source.key(config.point(values))[:16] == row["table"]
        floats = [v for v in values.values() if isinstance(v, float)]
        assert all(v == float(f"{v:.12g}") for v in floats)  # on the grid, not ulps off it


def test_a_configuration_study_is_repeatable_for_a_seed(tmp_path: Any) -> None:
    first, _, _ = run(12, storage=tmp_path / "a.journal")
    second, _, _ = run(12, storage=tmp_path / "b.journal")
    assert [(t.params, t.value) for t in first.study.get_trials(deepcopy=False)] == [
        (t.params, t.value) for t in second.study.get_trials(deepcopy=False)]


def test_a_resumed_study_runs_the_missing_trials_and_keeps_its_settings(tmp_path: Any) -> None:
    journal = tmp_path / "c.journal"
    run(8, storage=journal)
    again, _, _ = run(14, storage=journal)
    assert again.held == 8 and len(again.trials) == 14
    with pytest.raises(ExperimentError, match="created for other settings"):
        run(16, storage=journal, points_per_state=2)


def test_cost_is_minimised_beside_a_metric_into_a_pareto_front() -> None:
    result, _, _ = run(12, objectives=[Objective("ndcg@10"), Objective("cost")])
    assert [d.name for d in result.study.directions] == ["MAXIMIZE", "MINIMIZE"]
    for trial in result.study.get_trials(deepcopy=False):
        assert trial.values[1] == trial.user_attrs[COST_ATTR] > 0
    front = result.best_values
    assert front and all(not (a[0] >= b[0] and a[1] <= b[1] and a != b)
                         for a in front for b in front)  # no point dominates another


@pytest.mark.parametrize("kwargs, message", [
    ({"pruner": "wilcoxon"}, "runs without a pruner"),
    ({"sampler": "cmaes"}, "continuous parameters only"),
    ({"objectives": [Objective("cost")]}, "needs a metric to maximise beside cost"),
])
def test_what_a_configuration_search_cannot_run_is_refused(kwargs: dict[str, Any],
                                                            message: str) -> None:
    config, train, base, weights = search()
    objectives = kwargs.pop("objectives", OBJECTIVE)
    with pytest.raises(ExperimentError, match=message):
        tune(train, base, weights, objectives, n_trials=2, study_name="x", storage=":memory:",
             configuration=config, **kwargs)


def test_cost_is_refused_in_a_weights_only_study() -> None:
    _, train, base, weights = search()
    with pytest.raises(ExperimentError, match="weights-only study scores one table"):
        tune(train, base, weights, [Objective("ndcg@10"), Objective("cost")], n_trials=2,
             study_name="x", storage=":memory:")


def test_the_search_starts_from_the_weights_only_studys_best_weights() -> None:
    from dataclasses import replace

    from msprlab.experiments.tune.attrs import WARM_ATTR
    config, train, base, weights = search()
    only = tune(train, base, weights, OBJECTIVE, n_trials=12, study_name="w",
                storage=":memory:", seed=3)
    started = replace(config, start=weights.baseline(only.best[0]))
    result = tune(train, base, weights, OBJECTIVE, n_trials=14, study_name="c",
                  storage=":memory:", configuration=started, seed=3)
    trials = result.study.get_trials(deepcopy=False)
    # trial 1: the configured settings with the weights-only best: its value, exactly
    assert trials[1].user_attrs[WARM_ATTR] == "weights-only"
    assert trials[1].value == only.best_values[0][0]
    warm = [t for t in trials if isinstance(t.user_attrs.get(WARM_ATTR), int)]
    assert warm  # a new point's first queued trial takes the best weights so far
    for t in warm:
        source = trials[t.user_attrs[WARM_ATTR]]
        assert {k: t.params[k] for k in weights.ranges} == {
            k: source.params[k] for k in weights.ranges}
    assert result.best_values[0][0] >= only.best_values[0][0]
