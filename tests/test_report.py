"""`msprlab report`: the bundle reader, the markdown and HTML renderers, the command line.

The fixture bundle `tests/fixtures/report_bundle/locomo-fixture-run-20260105-100000/` is
built by `tests/fixtures/report_bundle/make_bundle.py` (deterministic). The golden summary
`tests/fixtures/report_bundle/summary.golden.md` holds the markdown with timestamps
normalised; after an intended change to the summary, regenerate it with

    cd tests && ../.venv/bin/python -c "import test_report as t; t.regenerate_golden()"

and review the diff.
"""

from __future__ import annotations

import base64
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from msprlab.experiments.cli import main
from msprlab.reports import BundleError, load_bundle, plots, render_html, render_markdown
from msprlab.reports._format import fmt, fmt_p, significance
from msprlab.reports.study import study_view

FIXTURES = Path(__file__).parent / "fixtures" / "report_bundle"
BUNDLE = FIXTURES / "locomo-fixture-run-20260105-100000"
GOLDEN = FIXTURES / "summary.golden.md"
CHROMIUM = Path("/usr/bin/chromium")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def normalise(text: str) -> str:
    return _TIMESTAMP.sub("<timestamp>", text)


def regenerate_golden() -> None:
    """Rewrite the golden summary from the fixture bundle (see the module docstring)."""
    GOLDEN.write_text(normalise(render_markdown(load_bundle(BUNDLE))), encoding="utf-8")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A writable copy of the fixture bundle (same folder name)."""
    return Path(shutil.copytree(BUNDLE, tmp_path / BUNDLE.name))


@pytest.fixture(scope="module")
def fixture_html() -> str:
    """The fixture bundle's HTML, rendered once for the module."""
    return render_html(load_bundle(BUNDLE))


def images(html: str) -> list[bytes]:
    found = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    return [base64.b64decode(b) for b in found]


# ---- the bundle reader ---------------------------------------------------------------------

def test_fixture_bundle_is_complete_and_small():
    results = load_bundle(BUNDLE)
    assert results.missing == ()
    assert results.ablation_per_query == dict.fromkeys(
        ("all", "frequency", "no-feedback", "no-frequency", "no-success", "off", "on-zero",
         "personal"), 120)
    assert results.test_runs == {"off": 9, "on-zero": 9, "tuned": 9}
    assert results.side_effects is not None and set(results.side_effects["block"]) == {
        "feedback", "success", "frequency"}
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    # 260 KB since the decision's verdicts (~30 KB) joined; keep the fixtures small.
    assert size < 280_000, f"report fixtures hold {size:,} bytes; keep them under 280 KB"


def test_not_a_bundle_names_the_files_looked_for(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(BundleError, match=r"is not a results bundle: none of "
                                          r"ablation/summary\.parquet, .*study/trials\.parquet"
                                          r".*\(found: notes\.txt\)"):
        load_bundle(tmp_path)


def test_a_part_without_its_columns_is_an_error_naming_file_and_columns(bundle: Path):
    path = bundle / "test" / "comparison.parquet"
    pl.read_parquet(path).drop("p_t_adj", "correction").write_parquet(path)
    with pytest.raises(BundleError, match=r"test/comparison\.parquet: missing column\(s\) "
                                          r"\['p_t_adj', 'correction'\]"):
        load_bundle(bundle)


def test_a_funnel_file_without_its_columns_is_an_error_naming_it(bundle: Path):
    path = bundle / "test" / "funnel.parquet"
    pl.read_parquet(path).drop("mean").write_parquet(path)
    with pytest.raises(BundleError, match=r"test/funnel\.parquet: missing column\(s\) "
                                          r"\['mean'\]"):
        load_bundle(bundle)


def test_the_funnel_is_the_ladder_then_tuned_per_query():
    funnel = load_bundle(BUNDLE).funnel
    assert funnel is not None
    assert funnel.get_column("arm").unique(maintain_order=True).to_list() == [
        "off", "on-zero", "personal", "frequency", "all", "tuned"]
    stored = pl.read_parquet(BUNDLE / "test" / "funnel.parquet").filter(
        pl.col("arm") == "tuned", pl.col("unit") == "query", pl.col("group_by") == "overall")
    tuned = funnel.filter(pl.col("arm") == "tuned", pl.col("group_by") == "overall").row(
        0, named=True)
    for r in stored.iter_rows(named=True):  # every stage and the share, per query
        assert tuned[r["metric"]] == r["mean"], r["metric"]
    assert tuned["n"] == 40 and funnel.height == 6 * 8  # 6 arms, overall + 7 groups


def test_malformed_json_is_an_error_naming_the_file(bundle: Path):
    (bundle / "study" / "summary.json").write_text("{not json")
    with pytest.raises(BundleError, match=r"study/summary\.json: not valid JSON"):
        load_bundle(bundle)


# ---- formatting and the study view ---------------------------------------------------------

@pytest.mark.parametrize(("p_adj", "marks"), [
    (0.01, "yes"), (0.049, "yes"), (0.05, ""), (0.2, ""), (math.nan, ""), (None, ""),
])
def test_significance_marks_an_adjusted_p_below_alpha(p_adj, marks):
    assert significance(p_adj) == marks


@pytest.mark.parametrize(("value", "text"), [
    (0.12345, "0.1235"), (math.nan, "–"), (None, "–"), (1234, "1,234"), (True, "yes"),
    ("tuned", "tuned"),
])
def test_fmt(value, text):
    assert fmt(value) == text


def test_fmt_p():
    assert [fmt_p(p) for p in (0.0004, 0.0123, math.nan)] == ["<0.001", "0.012", "–"]


def test_study_view_reads_the_summary():
    results = load_bundle(BUNDLE)
    view = study_view(results.trials, results.study)
    assert view.objectives == ("ndcg@10",)
    assert (view.best_number, view.best_values) == (41, {"ndcg@10": 0.1712})
    assert view.best_weights["beta_bm25"] == 0.62
    assert view.baseline_values == {"ndcg@10": 0.151}
    assert view.counts == {"COMPLETE": 59, "FAIL": 1}
    assert set(view.importance["ndcg@10"]) == set(view.params)


def test_study_view_without_a_summary_takes_the_best_complete_trial():
    trials = load_bundle(BUNDLE).trials
    assert trials is not None
    view = study_view(trials, None)
    best = trials.filter(pl.col("state") == "COMPLETE").sort("ndcg@10", descending=True).row(
        0, named=True)
    assert view.objectives == ("ndcg@10",)  # the numeric column that is not a weight
    assert view.best_number == best["number"] == 41
    assert view.importance == {}
    assert len(view.params) == 6  # every weight varies, so every weight was searched


def test_study_view_accepts_flat_importance():
    view = study_view(None, {"objectives": [], "importance": {"alpha_dense": 0.7,
                                                               "beta_bm25": 0.3}})
    assert view.importance == {"objective": {"alpha_dense": 0.7, "beta_bm25": 0.3}}


# ---- markdown ------------------------------------------------------------------------------

def test_markdown_summary_matches_the_golden_file():
    assert normalise(render_markdown(load_bundle(BUNDLE))) == GOLDEN.read_text(encoding="utf-8")


def test_markdown_holds_headline_tables_and_provenance():
    text = render_markdown(load_bundle(BUNDLE))
    for needle in ("### By intent label", "### By question type",
                   "## Ablation: change against off, overall (per query)",
                   "| EXPLORATORY † | 2 |",            # below the minimum support of 10
                   "Bonferroni within each family",  # the method, said once per table
                   "m = ndcg@10: 1 (by question_type), 2 (by seen)",  # its sizes (intent: V rows)
                   "| +0.1167 | [+0.0869, +0.1466] | <0.001 V |",  # a per-intent verdict's row
                   "| +0.1148 | [+0.0998, +0.1298] | <0.001 C |",  # a confirmatory row
                   "- Turn MSPR on with the tuned weights: +0.1148 ndcg@10 per query over off",
                   "## Side effects at zero weight (ndcg@10)",
                   "| feedback | per query | 40 |",
                   "## Stage funnel (per query, test window)",
                   "| arm | n | seed recall | pool recall | ceiling | achieved | share | lost |",
                   "**data digest**: d1ge57", "**git commit**: 0123456789abcdef",
                   "run 5f1e5f1e5f1e5f1e5f1e5f1e5f1e5f1e"):
        assert needle in text, needle


# ---- HTML ----------------------------------------------------------------------------------

def test_html_is_self_contained_with_png_images(fixture_html: str):
    html = fixture_html
    assert not re.search(r"(src|href)=\"(?!data:|#)", html), "a non-inline resource"
    assert "<script" not in html and "<link" not in html and "@import" not in html
    pngs = images(html)
    # test-window chart, ablation chart, stage funnel, history, importance, parallel coordinates
    assert len(pngs) == 6
    assert all(p.startswith(PNG_SIGNATURE) for p in pngs)
    assert all(b"Software" not in p and b"matplotlib" not in p for p in pngs)
    for needle in ("1. Test window", "2. Ablation ladder", "3. Weight search",
                   "4. Recommended weights", "5. Isolation audit", "6. Provenance",
                   "&#34;beta_bm25&#34;: 0.62",
                   "Bonferroni within each family", "6 (by intent)", "&lt;0.001 C", "&lt;0.001 V",
                   '<th colspan="4">strict</th>',
                   "PED-ANOVA (optuna.importance)", "best trial (41)",
                   "Side effects at zero weight (ndcg@10)", "searches whose top 10 changed",
                   "1. Test window: tuned weights against off, per query",
                   "Means per arm, overall, per query"):
        assert needle in html, needle


def test_html_shows_the_stage_funnel(fixture_html: str):
    html = fixture_html
    section = html[html.index('<h3 id="funnel">'):html.index('<section id="study">')]
    for needle in ("Stage funnel (ndcg@10, per query, test window)",
                   "<th>arm</th><th class=\"num\">n</th><th class=\"num\">seed recall</th>",
                   "<td>tuned</td><td class=\"num\">40</td><td class=\"num\">36.4%</td>",
                   "labels: the dataset&#39;s qrels; the unit is the query",
                   "Stage funnel by intent label", "Stage funnel by question type",
                   "<td>EXPLORATORY †</td>", "shared by every arm shown"):
        assert needle in section, needle
    assert section.index("<td>all</td>") < section.index("<td>tuned</td>")
    assert len(images(section)) == 1


def test_a_bundle_without_the_funnel_lists_it_as_missing(bundle: Path):
    for part in ("ablation/funnel.parquet", "test/funnel.parquet"):
        (bundle / part).unlink()
    results = load_bundle(bundle)
    assert results.funnel is None
    assert results.missing == ("ablation/funnel.parquet", "test/funnel.parquet")
    html, text = render_html(results), render_markdown(results)
    assert "<code>ablation/funnel.parquet</code>, <code>test/funnel.parquet</code>" in html
    assert 'id="funnel"' not in html and len(images(html)) == 5
    assert "Not in this bundle: `ablation/funnel.parquet`, `test/funnel.parquet`." in text


def test_a_tune_bundle_shows_the_test_windows_funnel(bundle: Path):
    shutil.rmtree(bundle / "ablation")
    html = render_html(load_bundle(bundle))
    section = html[html.index('<section id="ablation">'):html.index('<section id="study">')]
    assert "Not in this bundle: ablation/." in section
    rows = re.findall(r"<tr><td>([a-z-]+)</td>", section[:section.index("<h4>")])
    assert rows == ["off", "on-zero", "tuned"]


def test_the_funnel_names_the_arms_whose_pool_differs(bundle: Path):
    path = bundle / "test" / "funnel.parquet"
    frame = pl.read_parquet(path)
    frame.with_columns(mean=pl.when(pl.col("arm") == "tuned", pl.col("metric") == "ceiling")
                       .then(pl.col("mean") + 0.1).otherwise(pl.col("mean"))
                       ).write_parquet(path)
    html = render_html(load_bundle(bundle))
    assert "the pools of tuned differ" in html


def test_funnel_chart_is_deterministic_and_needs_overall_rows():
    funnel = load_bundle(BUNDLE).funnel
    assert funnel is not None
    one = plots.funnel_chart(funnel, "ndcg@10")
    assert one.startswith(PNG_SIGNATURE) and one == plots.funnel_chart(funnel.clone(), "ndcg@10")
    assert one != plots.funnel_chart(funnel.filter(pl.col("arm") != "tuned"), "ndcg@10")
    with pytest.raises(ValueError, match="no overall funnel rows"):
        plots.funnel_chart(funnel.filter(pl.col("group_by") != "overall"), "ndcg@10")


def test_html_rendering_is_byte_identical(fixture_html: str):
    assert render_html(load_bundle(BUNDLE)) == fixture_html


@pytest.mark.slow
def test_html_rendering_is_byte_identical_across_processes(fixture_html: str, tmp_path: Path):
    """Another interpreter, hash seed and default backend give the same bytes."""
    code = ("import sys; from msprlab.reports import load_bundle, render_html; "
            "sys.stdout.write(render_html(load_bundle(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(BUNDLE)], capture_output=True,
                          timeout=120, env={"PYTHONHASHSEED": "12345", "MPLBACKEND": "pdf",
                                            "PATH": "/usr/bin:/bin",
                                            "MPLCONFIGDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == fixture_html


def test_html_does_not_depend_on_where_the_bundle_sits(bundle: Path, fixture_html: str):
    assert render_html(load_bundle(bundle)) == fixture_html


def test_png_bytes_are_identical_for_identical_input():
    comparison = load_bundle(BUNDLE).ablation_comparison
    assert comparison is not None
    one = plots.ablation_chart(comparison, "ndcg@10")
    assert one == plots.ablation_chart(comparison.clone(), "ndcg@10")
    assert one != plots.ablation_chart(comparison, "mrr")


@pytest.mark.parametrize(("remove", "html_note", "md_note"), [
    (["study", "test", "best_weights.contextkit.json"],
     "Not in this bundle: study/trials.parquet, study/summary.json.",
     "Not in this bundle (no test/comparison.parquet)"),
    (["ablation"], "Not in this bundle: ablation/.",
     "Not in this bundle: the bundle has no ablation/ (a `tune` run)."),
    (["isolation"], "Not in this bundle: isolation/audit.parquet.",
     "Not in this bundle: isolation/audit.parquet is absent."),
    (["provenance.json"], "Not in this bundle: provenance.json.",
     "Not in this bundle: provenance.json is absent."),
    (["study/summary.json"], "Parameter importance: not in this bundle",
     "Not in this bundle: `study/summary.json`."),
    (["ablation/funnel.parquet", "test/funnel.parquet"],
     "Not in this bundle: ablation/funnel.parquet, test/funnel.parquet.",
     "Not in this bundle: ablation/funnel.parquet and test/funnel.parquet are absent"),
])
def test_missing_parts_render_with_a_note(bundle: Path, remove, html_note, md_note):
    for part in remove:
        path = bundle / part
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    results = load_bundle(bundle)
    html, text = render_html(results), render_markdown(results)
    assert html_note in html
    assert md_note in text
    assert all(p.startswith(PNG_SIGNATURE) for p in images(html))


def test_an_ablate_bundle_renders_its_ablation(bundle: Path):
    for part in ("study", "test", "best_weights.contextkit.json", "isolation", "decision"):
        path = bundle / part
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    html = render_html(load_bundle(bundle))
    assert len(images(html)) == 2  # the ablation chart and the ladder's stage funnel
    assert "ndcg@10 change against off, by intent label" in html
    assert "Stage funnel (ndcg@10, per query, test window)" in html
    assert "<td>tuned</td>" not in html  # test/funnel.parquet went with test/


# ---- the command line ----------------------------------------------------------------------

def test_report_writes_into_the_bundle_and_prints_the_paths(bundle: Path, capsys,
                                                            fixture_html: str):
    assert main(["report", str(bundle)]) == 0
    out = capsys.readouterr().out
    html, md = bundle / "report.html", bundle / "summary.md"
    assert f"report: {html}" in out and f"summary: {md}" in out
    assert html.read_text(encoding="utf-8") == fixture_html
    assert md.read_text(encoding="utf-8") == render_markdown(load_bundle(BUNDLE))


def test_report_out_folder(bundle: Path, tmp_path: Path):
    out = tmp_path / "rendered" / "here"
    assert main(["report", str(bundle), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "summary.md"]
    assert not (bundle / "report.html").exists()


@pytest.mark.parametrize(("name", "message"), [
    ("", r"is not a results bundle: none of ablation/summary\.parquet"),
    ("nope", r"nope: no such folder, and not an MLflow run id"),
    ("file.txt", r"file\.txt: a file, not a folder"),
])
def test_report_exits_2_when_run_is_not_a_bundle(tmp_path: Path, capsys, name, message):
    (tmp_path / "file.txt").write_text("not a bundle")
    assert main(["report", str(tmp_path / name)]) == 2
    assert re.search(message, " ".join(capsys.readouterr().out.split()))


def test_report_help_explains_run(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["report", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "an MLflow run id (32 hex digits)" in text and "--tracking-uri" in text


def test_report_from_a_run_id_downloads_its_artifacts(tmp_path: Path, monkeypatch, capsys):
    mlflow_artifacts = pytest.importorskip("mlflow.artifacts")
    calls = []

    def download(*, run_id, tracking_uri, dst_path):
        calls.append((run_id, tracking_uri, dst_path))
        shutil.copytree(BUNDLE, dst_path, dirs_exist_ok=True)
        return dst_path

    monkeypatch.setattr(mlflow_artifacts, "download_artifacts", download)
    monkeypatch.chdir(tmp_path)
    run_id = "ab" * 16
    assert main(["report", run_id, "--tracking-uri", "sqlite:///x.db"]) == 0
    assert calls == [(run_id, "sqlite:///x.db", str(Path("out") / f"mlflow-{run_id}"))]
    assert (tmp_path / "out" / f"mlflow-{run_id}" / "report.html").is_file()


@pytest.mark.slow
def test_report_from_a_real_mlflow_run(tmp_path: Path, monkeypatch, capsys):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("report-test",
                                          artifact_location=(tmp_path / "art").as_uri())
    with mlflow.start_run(experiment_id=experiment) as run:
        mlflow.log_artifacts(str(BUNDLE))
    out = tmp_path / "rendered"
    assert main(["report", run.info.run_id, "--tracking-uri", uri, "--out", str(out)]) == 0
    assert (out / "summary.md").read_text(encoding="utf-8") == render_markdown(
        load_bundle(BUNDLE)).replace(f"Bundle `{BUNDLE.name}`", "Bundle `rendered`")
    assert main(["report", "cd" * 16, "--tracking-uri", uri]) == 2
    assert "not found" in capsys.readouterr().out


# ---- headless Chromium ---------------------------------------------------------------------

def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, timeout=180, check=False)


def _near(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 14) -> np.ndarray:
    return (np.abs(pixels[..., :3].astype(int) - np.array(rgb)) <= tolerance).all(axis=-1)


@pytest.mark.skipif(not CHROMIUM.is_file(),
                    reason=f"{CHROMIUM} is absent: install Debian's chromium (apt-get install "
                           "chromium) to render the report in a real browser")
def test_report_renders_in_headless_chromium(fixture_html: str, tmp_path: Path):
    from PIL import Image

    page = tmp_path / "report.html"
    page.write_text(fixture_html, encoding="utf-8")
    url = page.as_uri()
    shot = tmp_path / "shot.png"
    started = time.perf_counter()
    done = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,4000", url)
    assert done.returncode == 0 and shot.is_file(), done.stderr.decode()[-2000:]
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape == (4000, 1280, 3)
    # Non-blank wherever the page has content: every 500-px band of the top 3,500 px
    # (header, tables, the two delta charts, the ablation matrices) varies.
    for top in range(0, 3500, 500):
        band = pixels[top:top + 500]
        assert band.std() > 10, f"band {top}-{top + 500} px is blank (std {band.std():.1f})"
    # The figures were decoded and drawn: the first arm's bar colour (#1f77b4 at alpha 0.9
    # on white) covers many pixels; the tables were styled: header cells (#f2f4f7) show.
    assert _near(pixels, (53, 132, 188)).sum() > 5_000
    assert _near(pixels, (242, 244, 247), tolerance=2).sum() > 5_000
    dom = _chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    text = dom.stdout.decode()
    assert text.count("<img ") == 6
    assert text.count("<table") >= 10
    assert 'id="isolation"' in text and '<th colspan="4">compat</th>' in text
    assert time.perf_counter() - started < 60


def test_the_html_means_are_per_query():
    """The summary holds both units; the report's means table shows the per-query ones."""
    results = load_bundle(BUNDLE)
    summary = pl.read_parquet(BUNDLE / "ablation" / "summary.parquet")
    query = summary.filter(pl.col("unit") == "query", pl.col("group_by") == "overall",
                           pl.col("metric") == "ndcg@10", pl.col("arm") == "on-zero")
    search = summary.filter(pl.col("unit") == "search", pl.col("group_by") == "overall",
                            pl.col("metric") == "ndcg@10", pl.col("arm") == "on-zero")
    assert query["mean"].item() != search["mean"].item()
    html = render_html(results)
    assert f"{query['mean'].item():.4f}" in html
    assert results.ablation_summary is not None
    assert set(results.ablation_summary["unit"]) == {"query"}
