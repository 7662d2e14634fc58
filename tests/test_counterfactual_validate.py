"""The validation of verdict labellings on a generated world
(experiments/counterfactual/validate.py), on the committed ContextKit world."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from msprlab.experiments.cli.exits import stdout_console
from msprlab.experiments.counterfactual.validate import main, true_examination
from msprlab.experiments.counterfactual.validation_report import report, summarize

WORLD = Path(__file__).parent / "fixtures" / "contextkit_world"
SHIPPED = Path(__file__).parents[1] / "experiments" / "configs" / "contextkit.toml"


def _world(root: Path, store: Path) -> Path:
    """The fixture world as the worlds generator lays one out: truth/, world.json and a
    matched.toml (production's [engine]: decay off, the library's weights)."""
    folder = root / "fixture-world"
    folder.mkdir(parents=True)
    shutil.copytree(WORLD / "truth", folder / "truth")
    shutil.copy(WORLD / "world.json", folder / "world.json")
    text = SHIPPED.read_text().replace('store = "runs/contextkit.duckdb"', f'store = "{store}"')
    assert "decay = { enabled = true" in text
    text = text.replace("decay = { enabled = true", "decay = { enabled = false")
    (folder / "matched.toml").write_text(text)
    return folder


def test_every_labelling_is_checked_against_the_truth(contextkit_world_store, tmp_path,
                                                      capsys) -> None:
    _world(tmp_path / "worlds", contextkit_world_store)
    out = tmp_path / "out"
    code = main([str(tmp_path / "worlds"), "--variants", "matched", "--trials", "3",
                 "--resamples", "5", "--work", str(tmp_path / "work"), "--out", str(out)])
    assert code == 0
    rows = pl.read_parquet(out / "rows.parquet")
    labellings = set(rows["labelling"])
    assert {"verdict ndcg@10", "verdict bpref", "snips", "ips", "snips (true lists)"} <= \
        labellings
    assert set(rows["arm"]) >= {"on-zero", "tuned", "all"} and "off" not in set(rows["arm"])
    assert rows.filter(pl.col("labelling") == "snips")["truth"].is_not_nan().all()
    curves = pl.read_parquet(out / "curves.parquet")
    assert curves["truth"].to_list() == pytest.approx([r ** -1.0 for r in range(1, 11)])
    assert (out / "position_bias.png").read_bytes()[:4] == b"\x89PNG"
    printed = " ".join(capsys.readouterr().out.split())
    assert "matched definitions: each arm's change against off" in printed
    assert "position bias, fixture-world / matched: largest error" in printed
    # the replay is production here: the reconstructed lists hold nearly every verdict
    assert "logged lists: the replayed production arm" in printed
    assert "issue 40's bar with snips (matched definitions; on-zero and tuned" in printed
    assert "of 1 worlds (replay proven in" in printed
    # the table again from the files, without a replay
    assert main(["--from", str(out), "--out", str(tmp_path / "again")]) == 0
    again = pl.read_parquet(tmp_path / "again" / "rows.parquet")
    assert again.equals(rows)
    assert "issue 40's bar with snips" in capsys.readouterr().out


def test_the_summary_counts_signs_errors_and_coverage() -> None:
    rows = pl.DataFrame({"labelling": ["a", "a", "b"], "delta": [0.1, -0.05, 0.3],
                         "ci_low": [0.0, -0.1, 0.25], "ci_high": [0.2, 0.0, 0.35],
                         "truth": [0.12, 0.02, 0.1], "truth_all": [0.1, 0.0, 0.1]})
    summary = {r["labelling"]: r for r in summarize(rows).iter_rows(named=True)}
    assert summary["a"]["sign_agreement"] == 0.5
    assert summary["a"]["mae"] == pytest.approx((0.02 + 0.07) / 2)
    assert summary["a"]["coverage"] == 0.5 and summary["a"]["within_002"] == 0.5
    assert summary["b"]["coverage"] == 0.0 and summary["b"]["mae"] == pytest.approx(0.2)


def _result(world: str, delta: float, low: float, high: float, truth: float,
            passed: bool) -> dict[str, object]:
    rows = pl.DataFrame({"arm": ["on-zero", "tuned"], "labelling": ["snips", "snips"],
                         "delta": [delta, delta], "ci_low": [low, low],
                         "ci_high": [high, high], "truth": [truth, truth],
                         "truth_all": [truth, truth]}).with_columns(
        world=pl.lit(world), variant=pl.lit("matched"))
    curve = pl.DataFrame({"rank": [1, 2], "examination": [1.0, 0.5], "ci_low": [1.0, 0.4],
                          "ci_high": [1.0, 0.6], "truth": [1.0, 0.55]}).with_columns(
        world=pl.lit(world), variant=pl.lit("matched"))
    return {"rows": rows, "curve": curve, "fidelity": "f", "passed": passed, "notes": [],
            "seconds": 1.0}


def test_the_bar_counts_worlds_within_002_or_covered(tmp_path, capsys) -> None:
    """Issue 40's bar: within 0.02 of the truth, or the CI covers it; a world meets it when
    on-zero and tuned both do, and the rows say where the replay was proven."""
    results = [_result("near", 0.05, 0.04, 0.06, 0.065, True),      # 0.015 off: met
               _result("covered", 0.10, 0.0, 0.2, 0.05, True),      # covered: met
               _result("missed", 0.10, 0.08, 0.12, 0.05, False)]    # neither
    report(results, tmp_path, stdout_console(140))
    printed = " ".join(capsys.readouterr().out.split())
    assert ("issue 40's bar with snips (matched definitions; on-zero and tuned against off "
            "within 0.02 of the truth or covered by the 95% CI): 4 of 6 rows, 2 of 3 worlds "
            "(replay proven in 4 rows)") in printed


def test_the_generators_curve_is_read_or_derived(tmp_path) -> None:
    (tmp_path / "world.json").write_text(json.dumps(
        {"truth": {"examination": [1.0, 0.5]}, "settings": {}}))
    assert true_examination(tmp_path, 3)[:2] == [1.0, 0.5]
    (tmp_path / "world.json").write_text(json.dumps(
        {"settings": {"click_model": {"eta": 0.5}}}))
    assert true_examination(tmp_path, 2) == pytest.approx([1.0, 2 ** -0.5])


def test_a_folder_without_worlds_is_bad_input(tmp_path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert "holds no world" in capsys.readouterr().out
