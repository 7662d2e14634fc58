"""Every value of a definition is checked when it is loaded, before any work: a bad one is
exit 2 with one message naming the key, the value and what is allowed, and nothing is
written. One row per bad input (as obp's tests of its estimators' arguments): the value
put into a valid definition, the exit status, a regex the message matches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msprlab.experiments.cli import main
from msprlab.experiments.cli.exits import EXIT_BAD_INPUT

# A valid definition, section -> key -> TOML literal; a row sets one key (None removes it).
BASE: dict[str, dict[str, str]] = {
    "": {"name": '"checks"', "seed": "3"},
    "dataset": {"source": '"synthetic"', "store": '"runs/small.duckdb"', "searches": "240",
                "users": "3", "memories_per_user": "20", "queries_per_user": "4"},
    "split": {"test_fraction": "0.4"},
    "engine.context_graph": {"enabled": "true"},
    "engine.mspr": {"enabled": "true", "feedback": "{ enabled = true }",
                    "success": "{ enabled = true, min_sample_size = 1 }",
                    "frequency": "{ enabled = true }"},
    "metrics": {"names": '["ndcg@10", "mrr"]', "min_support": "5", "bootstrap": "200"},
    "tune": {"trials": "10"},
}


def definition(section: str, key: str, literal: str | None) -> str:
    sections = {name: dict(keys) for name, keys in BASE.items()}
    sections.setdefault(section, {})
    if literal is None:
        sections[section].pop(key, None)
    else:
        sections[section][key] = literal
    lines = [f"{k} = {v}" for k, v in sections.pop("").items()]
    for name, keys in sections.items():
        lines += [f"\n[{name}]", *(f"{k} = {v}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


# (section, key, TOML literal, exit status, message regex)
ROWS = [
    # the nine of issue 39 that were exit 3, seven of them here (the Parquet and the full
    # disk are tested below)
    ("ablation", "weights", "{ delta_personal = 5.0 }", 2,
     r"ablation\.weights\.delta_personal = 5\.0 is out of range: it must be a number in \[0, 1\]"),
    ("ablation", "weights", "{ delta_personal = -1.0 }", 2,
     r"ablation\.weights\.delta_personal = -1\.0 is out of range: .* in \[0, 1\]"),
    ("ablation", "weights", '{ zeta_success = "high" }', 2,
     r"ablation\.weights\.zeta_success: expected a number, got 'high'"),
    ("", "seed", "-1", 2, r"seed = -1 is out of range: it must be an integer >= 0"),
    ("metrics", "bootstrap", "0", 2,
     r"metrics\.bootstrap = 0 is out of range: it must be an integer >= 1"),
    ("metrics", "min_support", "-3", 2,
     r"metrics\.min_support = -3 is out of range: it must be an integer >= 0"),
    ("dataset", "searches", "0", 2,
     r"dataset\.searches = 0 is out of range: it must be an integer >= 1"),
    # the top level
    ("", "seed", "1.5", 2, r"seed: expected int, got 1\.5"),
    ("", "name", "3", 2, r"name: expected str, got 3"),
    ("", "description", "[1]", 2, r"description: expected str, got \[1\]"),
    ("", "colour", '"red"', 2, r"unknown key 'colour'; known top-level keys: name, descr"),
    # dataset
    ("dataset", "source", '"beir"', 2, r"dataset\.source: 'beir' is not one of locomo-log"),
    ("dataset", "store", '""', 2, r"dataset\.store = '': must not be empty"),
    ("dataset", "searches", '"many"', 2, r"dataset\.searches: expected int, got 'many'"),
    ("dataset", "click_model", '"ubm"', 2, r"dataset\.click_model: 'ubm' is not one of pbm"),
    ("dataset", "seed", "-2", 2, r"dataset\.seed = -2 is out of range: .*integer >= 0"),
    ("dataset", "split", '"dev"', 2, r"dataset\.split: 'dev' is not one of test, train"),
    ("dataset", "embedder", '"bert"', 2, r"dataset\.embedder: 'bert' is not one of "),
    ("dataset", "users", "0", 2, r"dataset\.users = 0 is out of range: .*integer >= 1"),
    ("dataset", "memories_per_user", "-5", 2, r"dataset\.memories_per_user = -5 is out of"),
    ("dataset", "queries_per_user", "0", 2, r"dataset\.queries_per_user = 0 is out of range"),
    ("dataset", "labels", '"clicks"', 2, r"dataset\.labels: 'clicks' is not one of qrels"),
    ("dataset", "labels", '"verdicts"', 2, r"dataset\.labels = \"verdicts\" reads an ingest"),
    ("dataset", "verdict_window_minutes", "0", 2,
     r"dataset\.verdict_window_minutes = 0\.0 is out of range: it must be a number > 0"),
    ("dataset", "verdict_window_minutes", "nan", 2,
     r"dataset\.verdict_window_minutes: expected float, got nan"),
    ("dataset", "verdict_limit", "0", 2, r"dataset\.verdict_limit = 0 is out of range"),
    # split
    ("split", "test_fraction", "1.5", 2,
     r"split\.test_fraction = 1\.5 is out of range: it must be a number in \(0, 1\)"),
    ("split", "test_fraction", "0", 2, r"split\.test_fraction = 0\.0 is out of range"),
    ("split", "gap_days", "-1", 2, r"split\.gap_days = -1\.0 is out of range: .* >= 0"),
    ("split", "per_user", '"yes"', 2, r"split\.per_user: expected bool, got 'yes'"),
    # replay
    ("replay", "frequency", '"live"', 2, r"replay\.frequency: 'live' is not one of "),
    ("replay", "limit", "-1", 2, r"replay\.limit = -1 is out of range: .*integer >= 0"),
    ("replay", "policy", '"strict"', 2, r"replay\.policy: 'strict' is not one of "),
    # engine (the engine's own checks)
    ("engine.context_graph.retrieval", "seed_top_k", "-1", 2,
     r"engine: context_graph\.retrieval\.seed_top_k must be in \[1, 100\], got -1"),
    ("engine.context_graph.retrieval", "alpha_dense", "7", 2,
     r"engine: context_graph\.retrieval\.alpha_dense must be in \[0, 1\], got 7"),
    ("engine.mspr", "enabeld", "true", 2, r"engine: unknown key mspr\.enabeld"),
    # metrics
    ("metrics", "names", "[]", 2, r"metrics\.names = \[\]: must not be empty"),
    ("metrics", "names", '["ndgc@10"]', 2, r"unknown metric 'ndgc@10'"),
    ("metrics", "names", '["mrr", "mrr"]', 2, r"metrics\.names: \['mrr', 'mrr'\] names a "),
    ("metrics", "primary", '"recall@10"', 2, r"metrics\.primary 'recall@10' must be one of"),
    ("metrics", "bootstrap", "true", 2, r"metrics\.bootstrap: expected int, got True"),
    ("metrics", "correction", '"sidak"', 2, r"metrics\.correction: 'sidak' is not one of "),
    ("metrics", "min_judged_ratio", "2", 2,
     r"metrics\.min_judged_ratio = 2\.0 is out of range: it must be a number in \[0, 1\]"),
    # ablation
    ("ablation", "arms", "[]", 2, r"ablation\.arms = \[\]: must not be empty"),
    ("ablation", "arms", '["baseline"]', 2, r"'off'.*'on-zero'"),
    ("ablation", "arms", '["off", "of"]', 2, r"ablation\.arms: 'of' is not one of off"),
    ("ablation", "arms", '["off", "off"]', 2, r"ablation\.arms: \['off', 'off'\] names an"),
    ("ablation", "weights", "{ alpha_dense = 0.5 }", 2,
     r"ablation\.weights: unknown weight 'alpha_dense'; the arms switch on delta_personal"),
    ("ablation", "weights", "[0.5]", 2, r"ablation\.weights: expected dict, got \[0\.5\]"),
    # references
    ("references", "enabled", "1", 2, r"references\.enabled: expected bool, got 1"),
    # tune
    ("tune", "trials", "0", 2, r"tune\.trials = 0 is out of range: it must be an integer >= 1"),
    ("tune", "trials", '"many"', 2, r"tune\.trials: expected int"),
    ("tune", "trails", "3", 2, r"tune: unknown key 'trails'; known keys: trials, sampler"),
    ("tune", "workers", "0", 2, r"tune\.workers = 0 is out of range"),
    ("tune", "sampler", '"grid"', 2, r"tune\.sampler: 'grid' is not one of tpe, cmaes, random"),
    ("tune", "pruner", '"median"', 2, r"tune\.pruner: 'median' is not one of none, wilcoxon"),
    ("tune", "objectives", "[]", 2, r"tune\.objectives = \[\]: must not be empty"),
    ("tune", "objectives", '["recall@10"]', 2, r"'recall@10' measures 'recall@10', which is"),
    ("tune", "objectives", '["ndcg@10/intent"]', 2, r"use METRIC or METRIC/intent/LABEL"),
    ("tune", "objectives", '["ndcg@10/intent/NOPE"]', 2, r"intent 'NOPE' is not one of FACT"),
    ("tune", "objectives", '["ndcg@10", "ndcg@10"]', 2, r"names an objective twice"),
    ("tune", "objectives", '["ndcg@10", "mrr"]\nsampler = "cmaes"', 2,
     r"tune: sampler = 'cmaes' handles a single objective, but tune\.objectives has 2"),
    ("tune", "objectives", '["ndcg@10", "mrr"]\npruner = "wilcoxon"', 2,
     r"tune: pruner = 'wilcoxon' handles a single objective"),
    ("tune", "ranges", "{ alpha = [0, 1] }", 2,
     r"tune\.ranges: unknown weights \['alpha'\]; the weights are alpha_dense"),
    ("tune", "ranges", "{ alpha_dense = [0.5, 0.2] }", 2,
     r"tune\.ranges: `0 <= low < high <= 1` must hold for alpha_dense, but got \(0\.5, 0\.2\)"),
    ("tune", "ranges", "{ alpha_dense = [0.5, 0.5] }", 2, r"must hold for alpha_dense, but got"),
    ("tune", "ranges", "{ alpha_dense = [-1, 0.5] }", 2, r"must hold for alpha_dense, but got"),
    ("tune", "ranges", '{ alpha_dense = ["a", 1] }', 2,
     r"tune\.ranges: alpha_dense must be a \(low, high\) pair of numbers, got \['a', 1\]"),
    ("tune", "ranges", "{}", 2, r"tune\.ranges: name at least one weight to search"),
    ("tune", "heartbeat", "0", 2, r"tune\.heartbeat = 0 is out of range: .*integer >= 1"),
    ("tune", "heartbeat", "40", 2, r"`1 <= heartbeat < heartbeat_grace` .* got 40 and 30"),
    ("tune", "storage", "7", 2, r"tune\.storage: expected str, got 7"),
    # fidelity
    ("fidelity", "on_fail", '"ignore"', 2, r"fidelity\.on_fail: 'ignore' is not one of stop, warn"),
    ("fidelity", "min_ranks", "1.5", 2,
     r"fidelity\.min_ranks = 1\.5 is out of range: it must be a number in \[0, 1\]"),
    ("fidelity", "tolerance", "inf", 2, r"fidelity\.tolerance: expected float, got inf"),
    # tracking
    ("tracking", "uri", '""', 2, r"tracking\.uri = '': must not be empty"),
    ("tracking", "experiment", '""', 2, r"tracking\.experiment = '': must not be empty"),
]


@pytest.mark.parametrize(("section", "key", "literal", "status", "message"), ROWS,
                         ids=[f"{s or 'top'}.{k}={v.splitlines()[0]}" for s, k, v, _, _
                              in ROWS])
def test_a_bad_value_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        section: str, key: str, literal: str, status: int,
                                        message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(definition(section, key, literal))
    root = tmp_path / "root"
    code = main(["run", str(path), "--root", str(root), "--no-track"])
    out = capsys.readouterr()
    err = " ".join((out.out + out.err).split())
    assert code == status == EXIT_BAD_INPUT, err
    assert re.search(message, err), err
    assert str(path) in err and "Traceback" not in err
    assert not root.exists()  # refused before any work: no store, no results


def test_a_search_space_the_engine_fixes_entirely_is_refused_at_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fixed.toml"
    path.write_text(definition("engine.mspr", "success", "{ enabled = false }").replace(
        "[tune]", "[tune]\nranges = { zeta_success = [0, 1] }"))
    root = tmp_path / "root"
    code = main(["run", str(path), "--root", str(root), "--no-track"])
    out = capsys.readouterr()
    err = " ".join((out.out + out.err).split())
    assert code == EXIT_BAD_INPUT, err
    assert "tune.ranges: every weight in the search space is fixed at 0 (zeta_success " \
           "(mspr.success off))" in err
    assert not root.exists()


def test_the_base_definition_is_valid(tmp_path: Path) -> None:
    from msprlab.experiments.experiment_config import load_experiment
    path = tmp_path / "good.toml"
    path.write_text(definition("", "seed", "3"))
    assert load_experiment(path).seed == 3
