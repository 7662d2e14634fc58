"""The report's question-by-question explorer in a real browser: Debian's Chromium driven by
Playwright for Python (`executable_path`, nothing downloaded), the page opened from the
bundle folder as a file (no server). Sorted by the change, filtered to one question and
opened, both arms' lists must be the bundle's TREC runs for every search of the question,
every shown score must equal its parts (1e-12), and the memories shown as lost must be
those `msprlab explain` names.

Without /usr/bin/chromium the test is skipped, saying why; under CI (CI=true) it fails
instead, since `.ci/run` installs Chromium before the tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright
from test_explore import bundle, trec_lists  # noqa: F401  (the module's bundle fixture)

from msprlab.experiments.cli import main
from msprlab.experiments.explore.lists import DEPTH
from msprlab.experiments.explore.questions import load_explore, open_question

CHROMIUM = Path("/usr/bin/chromium")
# Offline: without these Chromium tries to reach its vendor's servers at start.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        why = (f"{CHROMIUM} is absent: install Debian's chromium (apt-get install chromium) "
               "to test the report's explorer in a real browser")
        if os.environ.get("CI"):
            pytest.fail(why + " (.ci/run installs it)")
        pytest.skip(why)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield launched
        launched.close()


def _rows(page, arm: str) -> list[dict]:
    return page.eval_on_selector_all(
        f"table.xp-list[data-arm='{arm}'] tr.xp-row",
        """rows => rows.map(r => ({rank: Number(r.dataset.rank), memory: r.dataset.memory,
            score: Number(r.dataset.score), terms: JSON.parse(r.dataset.terms),
            relevance: Number(r.dataset.relevance), role: Number(r.dataset.role),
            shown: r.cells[3].textContent}))""")


def _check_search(page, folder: Path, event: int, arms: tuple[str, str]) -> None:
    for arm in arms:
        rows = _rows(page, arm)
        assert [r["memory"] for r in rows] == trec_lists(folder, arm)[event][:DEPTH], arm
        assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
        for r in rows:
            total = r["terms"][0]
            for term in r["terms"][1:]:
                total = total + term
            assert abs(r["score"] - (total * r["relevance"]) * r["role"]) <= 1e-12
            assert r["shown"] == f"{r['score']:.4f}"


def test_the_explorer_opens_a_question_with_the_trec_runs_lists(bundle, browser):  # noqa: F811
    assert main(["report", str(bundle)]) == 0
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto((bundle / "report.html").as_uri())
    assert "improved" in page.inner_text("#xp-tally")

    page.click("#xp-table th[data-key='change']")   # first click: largest change first
    changes = page.eval_on_selector_all(
        "#xp-rows td.xp-change", "cells => cells.map(c => c.dataset.change)")
    numbers = [float(c) for c in changes if c]
    assert numbers == sorted(numbers, reverse=True) and len(numbers) >= 2
    assert all(c for c in changes[:len(numbers)])  # questions without a value come last
    qid = page.get_attribute("#xp-rows tr", "data-qid")

    page.fill("#xp-filter", qid)
    shown = page.eval_on_selector_all("#xp-rows tr", "rows => rows.map(r => r.dataset.qid)")
    assert shown[0] == qid and all(qid in other for other in shown)
    page.click(f"#xp-rows tr[data-qid='{qid}']")
    page.wait_for_selector("table.xp-list tr.xp-row")
    assert page.inner_text("#xp-title").startswith(qid)

    data = load_explore(bundle)
    events = page.eval_on_selector_all("#xp-search option", "os => os.map(o => o.value)")
    expected = open_question(data, qid, ("off", "tuned"), "all")
    assert [int(e) for e in events] == expected["searches"]
    for event, opened in zip(events, expected["opened"], strict=True):
        page.select_option("#xp-search", event)
        page.wait_for_selector(f"#xp-search option[value='{event}']:checked", state="attached")
        _check_search(page, bundle, int(event), ("off", "tuned"))
        lost = page.eval_on_selector_all("#xp-lost tr[data-neither='true']",
                                         "rows => rows.map(r => r.dataset.memory)")
        assert sorted(lost) == sorted(m["memory_id"] for m in opened["unshown"])
        one_list = page.eval_on_selector_all("#xp-lost tr[data-neither='false']",
                                             "rows => rows.map(r => r.dataset.memory)")
        missed = {m["memory_id"] for part in opened["arms"].values() for m in part["lost"]}
        assert sorted(one_list) == sorted(missed - set(lost))

    page.select_option("#xp-a", "on-zero")       # any two arms of the bundle
    page.wait_for_selector("table.xp-list[data-arm='on-zero'] tr.xp-row")
    assert page.inner_text("#xp-tally").startswith("tuned against on-zero")
    _check_search(page, bundle, int(page.input_value("#xp-search")), ("on-zero", "tuned"))

    assert not errors, errors
    assert requests and all(url.startswith("file://") for url in requests), requests
    assert any("/report-explore/" in url for url in requests)
    page.close()
