"""Experiment definitions, the ablation ladder, and `msprlab ablate` end to end on a small
synthetic world."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from msprlab.engine.batch import WEIGHTS
from msprlab.experiments.ablation import ladder, side_effects, switches
from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import (
    ExperimentError,
    load_experiment,
    shipped_experiments,
)
from msprlab.experiments.measures.scoring import arm_of

SMALL = """
name = "small"
seed = 3

[dataset]
source = "synthetic"
store = "runs/small.duckdb"
searches = 240
users = 3
memories_per_user = 20
queries_per_user = 4

[split]
test_fraction = 0.4

[engine.context_graph]
enabled = true

[engine.mspr]
enabled = true
feedback = { enabled = true }
success = { enabled = true, min_sample_size = 1 }
frequency = { enabled = true }
role = { enabled = false, hard_filter = false }

[replay]
policy = "composite"

[metrics]
names = ["ndcg@10", "mrr"]
min_support = 5
bootstrap = 200

[tune]
trials = 10
"""


def test_shipped_definitions_load() -> None:
    assert {"locomo", "synthetic", "scifact-sanity"} <= set(shipped_experiments())
    for name in shipped_experiments():
        cfg = load_experiment(name)
        assert cfg.metrics.primary in cfg.metrics.names
        assert len(cfg.digest()) == 64
        assert "decision" in cfg.raw  # every shipped definition states its decision rule
        assert cfg.decision.metric == cfg.metrics.primary


@pytest.mark.parametrize(("text", "message"), [
    ("colour = 1\n", "unknown key 'colour'; known top-level keys: name"),
    ("[decision]\nmargin = 0.01\n", "decision: unknown key 'margin'; known keys: metric, unit"),
    ("[decision]\nalpha = 0.7\n", "decision.alpha: `0 < alpha < 0.5` must hold, but got 0.7"),
    ("[decision]\npower = 0.01\n", "decision.power: `alpha < power < 1`"),
    ("[decision]\nunit = 'session'\n", "decision.unit: 'session' is not one of query, search"),
    ("[decision]\nreference = 'bm25'\n", "decision.reference: 'bm25' is not one of off"),
    ("[decision]\nequivalence_margin = 0\n", "decision.equivalence_margin: `0 < "),
    ("[decision]\nnoninferiority_margin = 2\n", "decision.noninferiority_margin: `0 < "),
    ("[decision]\nguardrails = ['seen']\n", "decision.guardrails: 'seen' is not one of"),
    ("[decision]\nmetric = 'map'\n", "decision.metric 'map' must be one of metrics.names"),
    ("[decision]\nalpha = 'low'\n", "decision.alpha: expected float"),
])
def test_bad_definitions_name_the_key(tmp_path, text, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_ladder_switches_one_signal_per_arm() -> None:
    cfg = load_experiment("synthetic")
    configs = ladder(cfg.engine, cfg.ablation.arms, cfg.ablation.weights)
    arms = {name: arm_of(name, c) for name, c in configs.items()}
    base = arms["on-zero"]
    assert base.weights[3:] == (0.0, 0.0, 0.0) and not base.intent and not base.roles
    # off: MSPR disabled, alpha/beta/gamma as in on-zero, nothing recorded
    assert arms["off"].weights == base.weights and not configs["off"].mspr.enabled
    assert switches(configs["off"]) == dict.fromkeys(switches(configs["off"]), False)
    moved = {name: [w for w, a, b in zip(WEIGHTS, arm.weights, base.weights, strict=True)
                    if a != b] for name, arm in arms.items()}
    assert moved["personal"] == ["delta_personal"]
    assert moved["frequency"] == ["epsilon_frequency"]
    assert moved["success"] == ["zeta_success"]
    assert moved["intent"] == [] and arms["intent"].intent and not arms["intent"].roles
    assert moved["roles"] == [] and arms["roles"].roles
    assert len(moved["all"]) == 3 and arms["all"].intent and arms["all"].roles
    # every MSPR arm keeps the state switches: they replay the same logged state
    assert {c.mspr.feedback.enabled for n, c in configs.items() if n != "off"} == {True}


def test_side_effects_switch_one_block_off_each() -> None:
    cfg = load_experiment("synthetic")
    effects = side_effects(cfg.engine)
    assert list(effects) == ["no-feedback", "no-success", "no-frequency"]
    for name, config in effects.items():
        block = name.removeprefix("no-")
        on = switches(config)
        assert on["mspr"] and not on[block]
        assert all(on[b] for b in ("feedback", "success", "frequency") if b != block)
        assert arm_of(name, config).weights[3:] == (0.0, 0.0, 0.0)


def test_baseline_arm_is_refused_with_its_replacements(tmp_path) -> None:
    definition = tmp_path / "old.toml"
    definition.write_text(SMALL + '[ablation]\narms = ["baseline", "personal"]\n')
    with pytest.raises(ExperimentError, match=r"'off'.*'on-zero'"):
        load_experiment(definition)


def test_ladder_refuses_a_signal_without_its_state() -> None:
    cfg = load_experiment("scifact-sanity")  # mspr off
    with pytest.raises(ValueError, match=r"mspr\.enabled must be on"):
        ladder(cfg.engine, ["off", "personal"], {})


def test_ablate_end_to_end(tmp_path, capsys) -> None:
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL)
    code = main(["ablate", str(definition), "--root", str(tmp_path), "--no-track"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ablation, test window: ndcg@10" in out and "isolation audit" in out
    bundles = list((tmp_path / "results").iterdir())
    assert len(bundles) == 1
    bundle = bundles[0]
    provenance = json.loads((bundle / "provenance.json").read_text())
    assert provenance["dataset"]["source"] == "synthetic+clicks"
    assert provenance["split"]["searches"]["test"] > 0
    comparison = pl.read_parquet(bundle / "ablation" / "comparison.parquet")
    signals = {"personal", "frequency", "success", "intent", "roles", "all"}
    against = {ref: set(comparison.filter(pl.col("reference") == ref)["arm"])
               for ref in ("off", "on-zero")}
    assert against == {"off": signals | {"on-zero"}, "on-zero": signals | {"off"}}
    assert set(comparison["unit"]) == {"query", "search"}
    effects = pl.read_parquet(bundle / "ablation" / "side_effects.parquet")
    assert set(effects["block"]) == {"feedback", "success", "frequency"}
    for column in ("delta", "ci_low", "ci_high"):  # no -0.0 where nothing moved
        values = effects[column].drop_nans().drop_nulls().to_numpy()
        assert not (np.signbit(values) & (values == 0)).any(), column
    arms = pl.read_parquet(bundle / "ablation" / "arms.parquet")
    assert arms.filter(pl.col("name") == "off")["mspr"].to_list() == [False]
    match = pl.read_parquet(bundle / "ablation" / "match.parquet")
    assert match.filter(pl.col("arm") == "on-zero")["logged"][0] > 0
    audit = pl.read_parquet(bundle / "isolation" / "audit.parquet")
    assert set(audit["mode"]) == {"compat", "strict"}
    assert (audit["returned"] > 0).all()
    # the second run reuses the store and the cached replays
    assert main(["ablate", str(definition), "--root", str(tmp_path), "--no-track"]) == 0
    assert "from the cache" in capsys.readouterr().out
    assert len(list((tmp_path / "runs").glob("*.duckdb"))) == 1


def test_a_definition_without_the_graph_path_is_bad_input(tmp_path, capsys) -> None:
    definition = tmp_path / "nograph.toml"
    definition.write_text(SMALL.replace("[engine.context_graph]\nenabled = true\n", ""))
    assert main(["ablate", str(definition), "--root", str(tmp_path), "--no-track"]) == 2
    assert "context_graph.enabled" in capsys.readouterr().out


def test_missing_experiment_is_bad_input(tmp_path, capsys) -> None:
    assert main(["ablate", "nonexistent", "--root", str(tmp_path), "--no-track"]) == 2
    assert "no experiment 'nonexistent'" in capsys.readouterr().out
    assert not Path(tmp_path, "results").exists()


def test_a_smaller_seed_count_changes_the_candidate_table(tmp_path) -> None:
    from msprlab.experiments.stages.prepare import prepare_store
    from msprlab.experiments.stages.replay_tables import replay_tables
    tables = {}
    for top_k in (10, 3):
        definition = tmp_path / f"seeds{top_k}.toml"
        definition.write_text(SMALL.replace(
            "[engine.context_graph]\nenabled = true\n",
            f"[engine.context_graph]\nenabled = true\nretrieval = {{ seed_top_k = {top_k} }}\n"))
        cfg = load_experiment(definition)
        store = prepare_store(cfg, tmp_path)
        prepared = replay_tables(cfg, store, {"tuned": cfg.engine})
        tables[top_k] = prepared.table("tuned").candidates
    assert tables[3]["was_seed"].sum() < tables[10]["was_seed"].sum()
    assert tables[3].height < tables[10].height
