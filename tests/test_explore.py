"""The per-query explorer: its lists are the TREC runs' lists, each score is its parts, every
relevant memory is shown or has a fate, overlaps are Webber et al.'s RBO_ext and Jaccard,
and `msprlab explain` prints the same lists (or exits 2 naming what the bundle holds)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_experiments import SMALL

from msprlab.datasets.store import load_dataset
from msprlab.engine.batch import FEATURES
from msprlab.experiments.cli import main
from msprlab.experiments.explore.lists import DEPTH, TERMS, explore_arms
from msprlab.experiments.explore.overlap import jaccard, rbo_ext
from msprlab.experiments.explore.questions import (
    TIE,
    load_explore,
    open_question,
    question_table,
    tally,
)
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Arm, Scorer

from replay_world import world

# ---- overlap ---------------------------------------------------------------------------------

# RBO_ext (p = 0.9) worked by hand from Webber et al. 2010, eq. 32, and checked against the
# reference implementation of Corsi and Urbano (SIGIR 2024, rbo.py, tie-free lists, where
# its w-variant is Webber's measure) to 2e-16 over 2,000 random pairs of uneven lists.
RBO_CASES = [
    ("12345", "23415", 0.828),  # X_d = 0, 1, 2, 4, 5: p^5 + (1-p)/p · Σ X_d/d · p^d
    ("abcdefg", "zcavwxy", 0.2882172857142857),
    ("abcdefghij", "jihgfedcba", 0.5116075656428571),
    ("abcde", "bafghijklm", 0.44289),           # uneven: 5 against 10
    ("abc", "cbadefghij", 0.855),               # uneven: 3 against 10
    ("abcdefghij", "klmnopqrst", 0.0),
    ("a", "ab", 1.0),                           # the shorter list's agreement continues
]


@pytest.mark.parametrize(("a", "b", "expected"), RBO_CASES)
def test_rbo_ext_matches_worked_and_reference_values(a, b, expected) -> None:
    assert rbo_ext(list(a), list(b), 0.9) == pytest.approx(expected, abs=1e-15)
    assert rbo_ext(list(b), list(a), 0.9) == pytest.approx(expected, abs=1e-15)


def test_rbo_ext_bounds_and_edges() -> None:
    ten = list("abcdefghij")
    assert rbo_ext(ten, ten) == pytest.approx(1.0, abs=1e-15)
    assert rbo_ext([], ten) == 0.0
    assert math.isnan(rbo_ext([], []))
    with pytest.raises(ValueError, match="p must be in"):
        rbo_ext(ten, ten, 1.0)
    # Agreement at the top weighs more: a swap at ranks 1-2 costs more than one at 9-10.
    top = ["b", "a", *ten[2:]]
    bottom = [*ten[:8], "j", "i"]
    assert rbo_ext(ten, top) < rbo_ext(ten, bottom) < 1.0


def test_jaccard() -> None:
    assert jaccard(list("abc"), list("bcd")) == 0.5
    assert jaccard([], list("a")) == 0.0
    assert math.isnan(jaccard([], []))


# ---- the explorer on a replay with intent routing and a soft role policy ---------------------

def _sum_of_parts(row: dict) -> float:
    total = row[TERMS[0]]
    for term in TERMS[1:]:
        total = total + row[term]
    return (total * row["relevance"]) * row["role"]


def test_lists_are_the_rankings_and_scores_are_their_parts_with_roles_and_intent() -> None:
    log, table = world(1)
    scorer = Scorer.of(table, [parse_metric("ndcg@10")])
    arms = {"routed": Arm("routed", (0.5, 0.2, 0.3, 0.2, 0.3, 0.2), intent=True, roles=True),
            "plain": Arm("plain", (0.55, 0.15, 0.3, 0.0, 0.0, 0.0))}
    explored = explore_arms({name: scorer for name in arms}, arms, log.memories)
    lists = explored.lists
    role_rows = 0
    for name, arm in arms.items():
        mine = lists.filter(pl.col("arm") == name)
        found = dict(mine.sort("event_id", "rank").group_by("event_id", maintain_order=True)
                     .agg("memory_id").iter_rows())
        events = table.searches["event_id"].to_list()
        assert [found.get(e, []) for e in events] == [r[:DEPTH] for r in scorer.rankings(arm)]
        for row in mine.iter_rows(named=True):
            assert abs(row["score"] - _sum_of_parts(row)) <= 1e-12
            for feature, term in zip(FEATURES, TERMS, strict=True):
                assert row[term] == pytest.approx(row[feature] * explored.weights.filter(
                    pl.col("arm") == name, pl.col("event_id") == row["event_id"])
                    [_weight(feature)].item(), abs=0.0)
        # The shown scores fall with rank once the role pass has rescored them.
        for _, group in mine.group_by("event_id"):
            shown = group.sort("rank")["score"].to_numpy()
            assert np.all(np.diff(shown) <= 0)
        role_rows += mine.filter(pl.col("role") != 1.0).height
    assert role_rows > 0  # the soft policy reweighted or denied some shown memories
    assert lists.filter(pl.col("arm") == "plain")["role"].unique().to_list() == [1.0]
    # Routed weights move with the intent label; the plain arm's never do.
    assert explored.weights.filter(pl.col("arm") == "routed")["alpha_dense"].n_unique() > 1
    assert explored.weights.filter(pl.col("arm") == "plain")["alpha_dense"].n_unique() == 1


def _weight(feature: str) -> str:
    return {"dense": "alpha_dense", "lexical": "beta_bm25", "graph": "gamma_graph",
            "frequency": "epsilon_frequency", "personal": "delta_personal",
            "success": "zeta_success"}[feature]


# ---- a bundle of `msprlab run` ----------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("explore")
    definition = root / "small.toml"
    definition.write_text(SMALL.replace("trials = 10", "trials = 4"))
    assert main(["run", str(definition), "--root", str(root), "--no-track"]) == 0
    [folder] = (root / "results").iterdir()
    return folder


def trec_lists(folder: Path, arm: str) -> dict[int, list[str]]:
    runs: dict[int, list[str]] = {}
    for line in (folder / "test" / "runs" / f"{arm}.trec").read_text().splitlines():
        query, _, memory, rank, _, _ = line.split()
        runs.setdefault(int(query[1:]), []).append(memory)
        assert int(rank) == len(runs[int(query[1:])])
    return runs


def test_bundle_lists_equal_the_trec_runs_and_every_relevant_memory_is_accounted(bundle):
    data = load_explore(bundle)
    assert data.arms == ["off", "on-zero", "tuned"]
    record = json.loads((bundle / "provenance.json").read_text())
    store = load_dataset(Path(record["dataset"]["store"]))
    relevant = store.qrels.filter(pl.col("relevance") > 0).group_by("query_id").agg("memory_id")
    relevant_of = {q: set(m) for q, m in relevant.iter_rows()}
    question = dict(data.searches.select("event_id", "occurrence").iter_rows())
    for arm in data.arms:
        runs = trec_lists(bundle, arm)
        mine = data.lists.filter(pl.col("arm") == arm)
        lists = dict(mine.sort("event_id", "rank").group_by("event_id", maintain_order=True)
                     .agg("memory_id").iter_rows())
        assert set(runs) == set(question)
        for event, run in runs.items():
            assert lists.get(event, []) == run[:DEPTH]
            lost = data.lost.filter(pl.col("arm") == arm, pl.col("event_id") == event)
            shown = {m for m in lists.get(event, []) if m in relevant_of.get(
                question[event], set())}
            assert shown.isdisjoint(lost["memory_id"].to_list())
            assert shown | set(lost["memory_id"]) == relevant_of.get(question[event], set())
            ranked = lost.filter(pl.col("fate") == "ranked")
            assert (ranked["rank"] > DEPTH).all() and (ranked["rank"] <= ranked["pool"]).all()
            # A relevant memory ranked within the returned list is where the run has it.
            for memory, rank in ranked.select("memory_id", "rank").iter_rows():
                if rank <= len(run):
                    assert run[rank - 1] == memory
        for row in mine.iter_rows(named=True):
            assert abs(row["score"] - _sum_of_parts(row)) <= 1e-12


def test_questions_tally_their_changes(bundle):
    data = load_explore(bundle)
    questions = question_table(data, "off", "tuned")
    counts = tally(questions)
    assert counts["questions"] == questions.height == data.searches["query_id"].n_unique()
    assert (counts["improved"] + counts["degraded"] + counts["unchanged"]
            + counts["no_relevant"]) == counts["questions"]
    per_search = data.values["tuned"].join(data.values["off"], on="event_id")
    first = questions.row(0, named=True)
    mine = per_search.filter(pl.col("query_id") == first["query_id"])
    assert first["change"] == pytest.approx(
        mine["value"].mean() - mine["value_right"].mean(), abs=1e-15)
    assert first["searches"] == mine.height
    assert 0.0 <= counts["jaccard"] <= 1.0 and 0.0 <= counts["rbo"] <= 1.0
    assert TIE < 1e-9


def test_explain_json_gives_the_trec_runs_lists(bundle, capsys):
    data = load_explore(bundle)
    query_id = question_table(data, "off", "tuned").sort("change")["query_id"][0]
    assert main(["explain", str(bundle), "--query", query_id, "--search", "all",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["arms"] == ["off", "tuned"] and out["query_id"] == query_id
    assert len(out["opened"]) == len(out["searches"]) >= 1
    for arm in out["arms"]:
        runs = trec_lists(bundle, arm)
        for search in out["opened"]:
            ranked = search["arms"][arm]["ranked"]
            assert [r["memory_id"] for r in ranked] == runs[search["event_id"]][:DEPTH]
            for r in ranked:
                total = 0.0
                for i, feature in enumerate(FEATURES):
                    total = r["terms"][feature] if i == 0 else total + r["terms"][feature]
                assert abs(r["score"] - total * r["relevance"] * r["role"]) <= 1e-12
                assert r["origin"] in ("seed", "graph") and r["label"]
    assert main(["explain", str(bundle), "--query", query_id]) == 0
    text = capsys.readouterr().out
    assert query_id in text and f"search e{out['searches'][0]}" in text


@pytest.mark.parametrize(("args", "message"), [
    (["--query", "{typo}"], "closest ids: {qid}"),
    (["--query", "{qid}", "--arms", "off", "nope"], "its arms are off, on-zero, tuned"),
    (["--query", "{qid}", "--arms", "off", "off"], "two different arms"),
    (["--query", "{qid}", "--search", "7"], "is not one of question '{qid}'"),
    (["--query", "{qid}", "--search", "latest"], "give a search's event id"),
])
def test_explain_bad_input_exits_2_naming_what_the_bundle_holds(bundle, capsys, args,
                                                                message):
    qid = load_explore(bundle).searches["query_id"].sort()[0]  # q000NN
    names = {"qid": qid, "typo": qid[:2] + qid[3:]}
    assert main(["explain", str(bundle), *(a.format(**names) for a in args)]) == 2
    assert message.format(**names) in capsys.readouterr().out


def test_explain_on_a_bundle_without_explorer_data_exits_2(tmp_path, capsys):
    assert main(["explain", str(tmp_path), "--query", "q1"]) == 2
    assert "no explore/lists.parquet" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "absent"), "--query", "q1"]) == 2
    assert "no such folder" in capsys.readouterr().out


def test_open_question_defaults_to_tuned_against_off_and_the_first_search(bundle):
    data = load_explore(bundle)
    query_id = data.searches.sort("ts")["query_id"][0]
    out = open_question(data, query_id)
    assert out["arms"] == ["off", "tuned"]
    assert [s["event_id"] for s in out["opened"]] == out["searches"][:1]


def test_the_report_embeds_the_questions_and_writes_each_questions_lists_beside_it(
        bundle, tmp_path):
    from msprlab.reports import load_bundle, write_report
    from msprlab.reports.explore_page import FOLDER, PER_CHUNK

    results = load_bundle(bundle)
    html, _ = write_report(results, tmp_path / "one")
    write_report(results, tmp_path / "two")
    assert html.read_bytes() == (tmp_path / "two" / "report.html").read_bytes()
    text = html.read_text()
    questions = load_explore(bundle).searches["query_id"].n_unique()
    data = json.loads(text.split('<script type="application/json" id="xp-data">')[1]
                      .split("</script>")[0])
    assert len(data["questions"]) == questions and data["defaults"] == ["off", "tuned"]
    files = sorted(p.name for p in (tmp_path / "one" / FOLDER).iterdir())
    assert files == data["files"] and len(files) == -(-questions // PER_CHUNK)
    section = text.split('id="questions"')[1].split("</section>")[0]
    assert f"{FOLDER}/" in section and "http://" not in section and "https://" not in section
    (tmp_path / "one" / FOLDER / "stale.js").write_text("")
    write_report(results, tmp_path / "one")
    assert not (tmp_path / "one" / FOLDER / "stale.js").exists()
