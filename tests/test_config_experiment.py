"""The configuration search end to end (issue 38): `msprlab tune` on a small synthetic
world with `[tune.settings]`, its bundle, `msprlab score` reproducing the best trials,
and a definition the search cannot run refused before any work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from test_experiments import SMALL

from msprlab.experiments.bundle import (
    CONFIG_DECISION,
    CONFIG_FUNNEL,
    CONFIG_SETTINGS,
    CONFIG_SNIPPET,
    CONFIG_SUMMARY,
    CONFIG_TRIALS,
    SNIPPET,
    STUDY_SUMMARY,
)
from msprlab.experiments.cli import main

SETTINGS = """
config_trials = 10
points_per_state = 2
trials_per_point = 2

[tune.settings]
"context_graph.retrieval.expansion_depth" = [1, 3]
"context_graph.retrieval.algorithm" = ["bfs", "ppr"]
"mspr.feedback.boost_delta" = { low = 0.05, high = 0.25, step = 0.1 }
"""


def definition(tmp_path: Path, extra: str = SETTINGS) -> Path:
    path = tmp_path / "small-config.toml"
    path.write_text(SMALL.replace('name = "small"', 'name = "small-config"') + extra,
                    encoding="utf-8")
    return path


def score(path: Path, snippet: Path, root: Path, capsys: Any) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["score", str(path), "--config", str(snippet), "--root", str(root),
                 "--json"]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


@pytest.mark.slow
def test_tune_searches_the_settings_and_score_reproduces_the_best_trials(
        tmp_path: Path, capsys: Any) -> None:
    path = definition(tmp_path)
    assert main(["tune", str(path), "--root", str(tmp_path), "--no-track"]) == 0
    printed = capsys.readouterr().out
    assert "configuration search:" in printed and "walk(s) over the timeline" in printed
    bundle = next((tmp_path / "results").glob("small-config-tune-*"))
    for part in (CONFIG_TRIALS, CONFIG_SUMMARY, CONFIG_DECISION, CONFIG_FUNNEL,
                 CONFIG_SETTINGS, CONFIG_SNIPPET):
        assert (bundle / part).is_file(), part
    trials = pl.read_parquet(bundle / CONFIG_TRIALS)
    assert trials.height == 10 and "mspr.feedback.boost_delta" in trials.columns
    summary = json.loads((bundle / CONFIG_SUMMARY).read_text())
    assert summary["walks"]["walks"] >= 1 and summary["chosen"]["settings"]
    decision = pl.read_parquet(bundle / CONFIG_DECISION)
    assert decision["reference"].to_list() == ["off", "on-zero", "tuned"]
    assert set(pl.read_parquet(bundle / CONFIG_FUNNEL)["arm"]) == {"chosen", "tuned", "off",
                                                                   "on-zero"}
    # the chosen configuration's snippet gives its trial's train value exactly, and the
    # weights-only snippet the weights-only study's
    chosen = score(path, bundle / CONFIG_SNIPPET, tmp_path, capsys)
    assert chosen["windows"]["train"]["objectives"]["ndcg@10"] == summary["chosen"]["values"][
        "ndcg@10"]
    assert main(["report", str(bundle)]) == 0  # the report's configuration section
    assert "## Configuration search" in (bundle / "summary.md").read_text()
    assert 'id="configuration"' in (bundle / "report.html").read_text()
    weights = score(path, bundle / SNIPPET, tmp_path, capsys)
    best = json.loads((bundle / STUDY_SUMMARY).read_text())["best"][0]["values"]["ndcg@10"]
    assert weights["windows"]["train"]["objectives"]["ndcg@10"] == best
    assert weights["reaching"] == {}  # the experiment's own settings


@pytest.mark.slow
def test_cost_beside_the_metric_makes_a_pareto_front_whose_best_on_the_metric_is_chosen(
        tmp_path: Path, capsys: Any) -> None:
    path = definition(tmp_path, SETTINGS.replace(
        "config_trials = 10", 'config_trials = 10\nobjectives = ["ndcg@10", "cost"]'))
    assert main(["tune", str(path), "--root", str(tmp_path), "--no-track"]) == 0
    bundle = next((tmp_path / "results").glob("small-config-tune-*"))
    summary = json.loads((bundle / CONFIG_SUMMARY).read_text())
    assert summary["pareto"] and summary["objectives"] == ["ndcg@10", "cost"]
    trials = pl.read_parquet(bundle / CONFIG_TRIALS)
    assert (trials["cost"] == trials["cost_ms"]).all() and (trials["cost"] > 0).all()
    front = [(r["ndcg@10"], r["cost"]) for r in trials.iter_rows(named=True)
             if not any(o["ndcg@10"] >= r["ndcg@10"] and o["cost"] <= r["cost"]
                        and (o["ndcg@10"], o["cost"]) != (r["ndcg@10"], r["cost"])
                        for o in trials.iter_rows(named=True))]
    chosen = summary["chosen"]["values"]
    assert (chosen["ndcg@10"], chosen["cost"]) in front
    assert chosen["ndcg@10"] == max(v for v, _ in front)
    assert len(summary["best_settings"]) >= len(set(front))  # the front's trials (ties too)


@pytest.mark.parametrize("extra, message", [
    ('\n[tune.settings]\n"context_graph.retrieval.expansion_depth" = [1, 9]\n',
     "expansion_depth must be in [0, 4], got 5"),
    ('\n[tune.settings]\n"mspr.success.min_sample_size" = [2, 4]\n',
     "configured value 1 is not among the values searched"),
    ('\nconfig_trials = 0\n[tune.settings]\n"context_graph.retrieval.expansion_depth" = [1, 3]\n',
     "tune.config_trials"),
    ('\nobjectives = ["ndcg@10", "cost"]\n', "\"cost\" (the engine's time per search)"),
])
def test_a_configuration_search_it_cannot_run_is_exit_2_before_any_work(
        tmp_path: Path, capsys: Any, extra: str, message: str) -> None:
    path = definition(tmp_path, extra)
    assert main(["tune", str(path), "--root", str(tmp_path), "--no-track"]) == 2
    printed = capsys.readouterr()
    assert message in (printed.out + printed.err).replace("\n", " ")
    assert not (tmp_path / "runs").exists()  # nothing built


def test_score_refuses_a_file_it_cannot_read(tmp_path: Path, capsys: Any) -> None:
    path = definition(tmp_path, "")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert main(["score", str(path), "--config", str(bad), "--root", str(tmp_path)]) == 2
    assert "not valid JSON" in _printed(capsys)
    bad.write_text(json.dumps({"context_graph": {"retrieval": {"expansion_depth": 7}}}),
                   encoding="utf-8")
    assert main(["score", str(path), "--config", str(bad), "--root", str(tmp_path)]) == 2
    assert "expansion_depth" in _printed(capsys)
    assert main(["score", str(path), "--config", str(tmp_path / "none.json"), "--root",
                 str(tmp_path)]) == 2


def _printed(capsys: Any) -> str:
    found = capsys.readouterr()
    return str(found.out + found.err)
