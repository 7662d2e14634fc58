"""The counterfactual stage in a verdict-labelled run (experiments/counterfactual/stage.py,
the reporter's `counterfactual`), and the definition's [counterfactual] table."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from msprlab.experiments.cli import main
from msprlab.experiments.errors import ExperimentError
from msprlab.experiments.experiment_config import load_experiment

SHIPPED = Path(__file__).parents[1] / "experiments" / "configs" / "contextkit.toml"


def _definition(tmp_path: Path, store: Path, *settings: tuple[str, str]) -> Path:
    """The shipped definition on the committed world with production's [engine] (decay
    off), two arms, no references: the least a run needs to reach the counterfactual."""
    text = SHIPPED.read_text().replace('store = "runs/contextkit.duckdb"', f'store = "{store}"')
    text = text.replace("decay = { enabled = true", "decay = { enabled = false")
    text = text.replace("min_support = 30", "min_support = 5")
    text = text.replace('arms = ["off", "on-zero", "personal", "frequency", "success", '
                        '"intent", "all"]', 'arms = ["off", "on-zero", "personal"]')
    assert 'arms = ["off", "on-zero", "personal"]' in text
    for old, new in settings:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "ck.toml"
    path.write_text(text + "\n[references]\nenabled = false\n")
    return path


def test_a_verdict_run_estimates_the_position_bias_and_each_arm(contextkit_world_store,
                                                                tmp_path, capsys) -> None:
    path = _definition(tmp_path, contextkit_world_store, ("resamples = 200", "resamples = 8"),
                       ("clip = 0.05", "clip = 0.1"))
    assert main(["ablate", str(path), "--no-track", "--root", str(tmp_path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "position bias from verdicts: P(examined at rank r) / P(rank 1)" in printed
    assert "counterfactual nDCG@10 from verdicts, test window, per query" in printed
    assert "clip 0.1" in printed and "8 question resamples" in printed
    (bundle,) = (tmp_path / "results").iterdir()
    estimates = pl.read_parquet(bundle / "counterfactual" / "estimates.parquet")
    # the ladder and the side-effect arms (on-zero less one recording block)
    assert set(estimates["arm"]) == {"off", "on-zero", "personal", "no-feedback",
                                     "no-success", "no-frequency"}
    assert set(estimates["estimator"]) == {"snips", "ips"}
    changes = pl.read_parquet(bundle / "counterfactual" / "changes.parquet")
    assert {"on-zero", "personal"} <= set(changes.filter(pl.col("reference") == "off")["arm"])
    assert "on-zero" in set(changes.filter(pl.col("reference") == "no-feedback")["arm"])
    curve = pl.read_parquet(bundle / "counterfactual" / "position_bias.parquet")
    assert curve["examination"][0] == 1.0 and curve.height == 10
    assert (bundle / "counterfactual" / "position_bias.png").read_bytes()[:4] == b"\x89PNG"
    per_query = pl.read_parquet(bundle / "counterfactual" / "per_query.parquet")
    assert {"arm", "question", "ips", "snips", "unshown", "bound"} <= set(per_query.columns)
    # the verdicts read the IPS estimate, and name the guardrails it adds
    assert "confirmatory family: ips ndcg@10" in printed
    verdicts = pl.read_parquet(bundle / "decision" / "verdicts.parquet")
    assert set(verdicts["metric"]) == {"ips ndcg@10"}
    on_zero = verdicts.filter(pl.col("candidate") == "on-zero").row(0, named=True)
    change = changes.filter(pl.col("arm") == "on-zero", pl.col("reference") == "off",
                            pl.col("estimator") == "ips").row(0, named=True)
    assert on_zero["delta"] == pytest.approx(change["delta"])
    off_unshown = estimates.filter(pl.col("arm") == "off", pl.col("estimator") == "snips"
                                   )["unshown"].item()
    # off ranks memories production never showed (20.9% of its top 10 here): bounded, so
    # its comparisons cannot ship, and the row says why
    assert off_unshown > 0.1
    assert on_zero["verdict"] == "inconclusive" and "logged support" in on_zero["reason"]


def test_the_stage_can_be_switched_off(contextkit_world_store, tmp_path, capsys) -> None:
    path = _definition(tmp_path, contextkit_world_store,
                       ("[counterfactual]\nenabled = true", "[counterfactual]\nenabled = false"))
    assert main(["ablate", str(path), "--no-track", "--root", str(tmp_path)]) == 0
    assert "position bias from verdicts" not in capsys.readouterr().out
    (bundle,) = (tmp_path / "results").iterdir()
    assert not (bundle / "counterfactual").exists()


@pytest.mark.parametrize(("setting", "needle"), [
    ("clip = 0", "counterfactual.clip = 0.0 is out of range: it must be a number in (0, 1]"),
    ("clip = 1.5", "counterfactual.clip = 1.5 is out of range: it must be a number in (0, 1]"),
    ("max_unshown = -0.1", "counterfactual.max_unshown = -0.1 is out of range: it must be a "
                           "number in [0, 1]"),
    ("resamples = 0", "counterfactual.resamples = 0 is out of range: it must be an integer "
                      ">= 1"),
    ('estimator = "dm"', "counterfactual.estimator: 'dm' is not one of snips, ips"),
    ("bogus = 1", "counterfactual: unknown key 'bogus'"),
])
def test_a_bad_counterfactual_setting_is_refused(tmp_path, setting, needle) -> None:
    path = tmp_path / "x.toml"
    key = setting.split(" =")[0]
    text = "\n".join(line for line in SHIPPED.read_text().splitlines()
                     if not line.startswith(f"{key} ="))
    path.write_text(text.replace("[counterfactual]\n", f"[counterfactual]\n{setting}\n"))
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    assert needle in str(info.value)
