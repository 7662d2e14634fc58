"""The verdict table is the first table `run` prints, and the console, the bundle's
decision files, the markdown summary, the HTML report and the MLflow parent run's tags say
the same (one `msprlab run` of the small synthetic world, tracked, then `msprlab report`)."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import polars as pl
import pytest
from markupsafe import escape
from test_experiments import SMALL

from msprlab.experiments.cli import main
from msprlab.experiments.decision import COLUMNS, VERDICTS
from msprlab.experiments.decision.render import cells

mlflow = pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def decided(tmp_path_factory) -> tuple[str, Path, Path]:
    root = tmp_path_factory.mktemp("decided")
    definition = root / "small.toml"
    definition.write_text(SMALL.replace("trials = 10", "trials = 4"))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", str(definition), "--root", str(root), "--tracking-uri", uri]) == 0
    [bundle] = (root / "results").iterdir()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(bundle)]) == 0
    return printed.getvalue(), bundle, root


def test_the_verdict_table_is_the_first_table(decided) -> None:
    out, bundle, _ = decided
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if "test window" in line or "ablation" in line)
    assert lines[first].startswith("decision, test window: a verdict per candidate")
    assert out.index("decision, test window") < out.index("ablation arms: switches")
    table = pl.read_parquet(bundle / "decision" / "verdicts.parquet")
    for row in cells(table):  # every row printed as the bundle holds it
        assert row[0] in out and row[8] in out and row[5].split(" [")[0] in out


def test_bundle_files_agree_and_hold_the_rule(decided) -> None:
    _, bundle, _ = decided
    table = pl.read_parquet(bundle / "decision" / "verdicts.parquet")
    assert table.columns == list(COLUMNS)
    as_csv = pl.read_csv(bundle / "decision" / "verdicts.csv", schema=table.schema)
    assert as_csv.select("candidate", "verdict", "family_size").equals(
        table.select("candidate", "verdict", "family_size"))
    assert set(table["verdict"]) <= set(VERDICTS)
    expected = {"tuned", "on-zero", "personal", "frequency", "success", "intent", "roles",
                "all", "record-feedback", "record-success", "record-frequency"}
    assert set(table["candidate"]) == expected
    tested = table.filter(pl.col("tested"))
    assert (tested["family_size"] == tested.height).all()
    for r in tested.iter_rows(named=True):  # the CI pairs with the adjusted p
        if abs(r["p_adj"] - r["alpha"]) > 1e-9 and r["p"] * r["family_size"] < 1:
            assert (r["ci_low"] > 0 or r["ci_high"] < 0) == (r["p_adj"] < r["alpha"])
    by_intent = pl.read_parquet(bundle / "decision" / "by_intent.parquet")
    assert by_intent.height == 0 or by_intent["family"][0] == "exploratory: by intent"


def test_markdown_and_html_open_with_the_same_table(decided) -> None:
    _, bundle, _ = decided
    table = pl.read_parquet(bundle / "decision" / "verdicts.parquet")
    markdown = (bundle / "summary.md").read_text()
    assert markdown.index("## Decision") < markdown.index("## Test window")
    html = (bundle / "report.html").read_text()
    assert html.index('id="decision"') < html.index('id="test"')
    for row in cells(table):
        md_row = "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
        assert md_row in markdown
        assert "".join(f"<td>{escape(c)}</td>" for c in row) in html


def test_mlflow_tags_carry_the_verdicts(decided) -> None:
    _, bundle, root = decided
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    runs = pl.from_pandas(mlflow.search_runs(experiment_names=["msprlab"],
                                             output_format="pandas"))
    parent = runs.filter(pl.col("tags.mlflow.runName") == "run:small").row(0, named=True)
    table = pl.read_parquet(bundle / "decision" / "verdicts.parquet")
    for r in table.iter_rows(named=True):
        assert parent[f"tags.msprlab.decision.{r['candidate']}"] == r["verdict"]
        if not math.isnan(r["delta"]):
            assert parent[f"metrics.decision/{r['candidate']}/delta"] == pytest.approx(
                r["delta"], abs=1e-12)


def test_one_comparison_one_interval_across_the_bundle(decided) -> None:
    # A detail row asking a verdict row's question (same arms, metric, unit, group) carries
    # that row's interval and adjusted p, marked C (confirmatory) or V (per intent), and no
    # other row of the bundle shows that comparison with other figures.
    _, bundle, _ = decided
    verdicts = pl.read_parquet(bundle / "decision" / "verdicts.parquet").filter(
        pl.col("group_by") == "overall")
    by_intent = pl.read_parquet(bundle / "decision" / "by_intent.parquet")
    seen = 0
    for stem, flipped in (("test/comparison", False), ("ablation/comparison", False),
                          ("ablation/side_effects", True)):
        detail = pl.read_parquet(bundle / f"{stem}.parquet")
        for v in pl.concat([verdicts, by_intent]).iter_rows(named=True):
            arm = "on-zero" if v["candidate"].startswith("record-") else v["candidate"]
            pair = (v["reference"], arm) if flipped else (arm, v["reference"])
            hits = detail.filter(pl.col("arm") == pair[0], pl.col("reference") == pair[1],
                                 pl.col("metric") == v["metric"], pl.col("unit") == v["unit"],
                                 pl.col("group_by") == v["group_by"],
                                 pl.col("group") == v["group"])
            for r in hits.iter_rows(named=True):
                seen += 1
                assert r["confirmatory"] and r["mark"] == (
                    "C" if v["family"] == "confirmatory" else "V"), (stem, v["candidate"])
                assert (r["ci_low"], r["ci_high"]) == (v["ci_low"], v["ci_high"])
                assert r["p_t_adj"] == v["p_adj"] or (math.isnan(r["p_t_adj"])
                                                      and math.isnan(v["p_adj"]))
        others = detail.filter(~pl.col("confirmatory"), pl.col("tested"))
        for r in others.iter_rows(named=True):  # the exploratory rows pair CI and p too
            if abs(r["p_t_adj"] - 0.05) > 1e-9 and r["p_t"] * r["family_size"] < 1:
                assert (r["ci_low"] > 0 or r["ci_high"] < 0) == (r["p_t_adj"] < 0.05)
    assert seen >= verdicts.height


def test_the_answer_is_the_same_everywhere_and_the_table_fits_100_columns(decided) -> None:
    from rich.console import Console

    from msprlab.experiments.decision.answer import HEADING, answer
    from msprlab.experiments.decision.render import console_table

    out, bundle, _ = decided
    table = pl.read_parquet(bundle / "decision" / "verdicts.parquet")
    lines = answer(table, snippet="best_weights.contextkit.json")
    assert lines and HEADING in out
    flat = " ".join(out.split())
    markdown, html = (bundle / "summary.md").read_text(), (bundle / "report.html").read_text()
    for line in lines:
        assert " ".join(line.split()) in flat  # wrapped in the console
        assert f"- {line}" in markdown
        assert f"<li>{escape(line)}</li>" in html
    printed = io.StringIO()
    Console(file=printed, width=100).print(console_table(table, title="t", caption_text="c"))
    assert max(len(line) for line in printed.getvalue().splitlines()) <= 100
    assert "…" not in printed.getvalue(), "a cell cut to fit"
    for row in cells(table):  # each row on one line: candidate, Δ [CI] and verdict
        assert any(row[0] in line and row[5] in line and row[8] in line
                   for line in printed.getvalue().splitlines()), row


def test_the_markdown_carries_the_explorers_counts(decided) -> None:
    from msprlab.experiments.explore.questions import load_explore, question_table, tally

    _, bundle, _ = decided
    count = tally(question_table(load_explore(bundle), "off", "tuned"))
    markdown = (bundle / "summary.md").read_text()
    assert (f"Question by question (tuned against off, ndcg@10 per question): "
            f"{count['improved']:,} improved, {count['degraded']:,} degraded, "
            f"{count['unchanged']:,} unchanged ({count['no_relevant']:,} without a relevant "
            f"memory, not counted); the two arms' top 10s overlap by a mean Jaccard@10 of "
            f"{count['jaccard']:.3f} and a mean RBO (p = 0.9) of {count['rbo']:.3f}") in markdown
    assert count["improved"] + count["degraded"] + count["unchanged"] + count[
        "no_relevant"] == count["questions"] > 0
