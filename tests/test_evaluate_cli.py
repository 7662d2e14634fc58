"""`msprlab evaluate QRELS RUN`: outputs, trec_eval's order on tied scores, bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from msprlab.datasets.trec import read_qrels, read_run
from msprlab.experiments.cli import main
from msprlab.experiments.cli.evaluate import evaluate_run, rank_like_trec_eval
from msprlab.experiments.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from msprlab.experiments.measures.metrics import parse_metric

QRELS = """\
q1 0 m1 2
q1 0 m2 0
q1 0 m3 1
q2 0 m4 1
q3 0 m5 0
q9 0 m1 1
"""
# q1: m2 (0) and m3 (1) tie at 0.5; trec_eval puts the larger id first: m3, then m2.
# q2: its only relevant memory is not returned. q3: nothing relevant. q7: no qrels.
RUN = """\
q1 Q0 m1 1 0.9 test
q1 Q0 m2 2 0.5 test
q1 Q0 m3 3 0.5 test
q1 Q0 m8 4 0.1 test
q2 Q0 m6 1 2.0 test
q3 Q0 m5 1 1.0 test
q7 Q0 m1 1 1.0 test
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels.write_text(QRELS)
    run.write_text(RUN)
    return str(qrels), str(run)


def expected_q1() -> dict[str, float]:
    # Order m1 (2), m3 (1), m2 (0), m8 (unjudged); the query has 2 relevant memories.
    dcg = 2 + 1 / math.log2(3)
    return {"ndcg@10": dcg / dcg, "recall@100": 1.0, "mrr": 1.0, "map": (1 + 1) / 2,
            "precision@2": 1.0, "judged@10": 3 / 4}


def test_json_per_query(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["evaluate", *files, "--json", "--per-query", "-m", "ndcg@10", "-m",
                 "recall@100", "-m", "mrr", "-m", "map", "-m", "P@2", "-m", "judged@10"])
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK
    assert out["metrics"] == ["ndcg@10", "recall@100", "mrr", "map", "precision@2", "judged@10"]
    assert out["queries"] == {"evaluated": 3, "no_relevant": 1, "run_without_qrels": 1,
                              "qrels_without_run": 1}
    rows = {row["query_id"]: row for row in out["per_query"]}
    assert list(rows) == ["q1", "q2", "q3"]
    for name, value in expected_q1().items():
        assert rows["q1"][name] == pytest.approx(value, abs=1e-15), name
    assert rows["q2"]["ndcg@10"] == 0.0 and rows["q2"]["judged@10"] == 0.0
    assert rows["q3"]["ndcg@10"] is None and rows["q3"]["judged@10"] == 1.0  # NaN -> null
    summary = {row["metric"]: row for row in out["summary"]}
    assert summary["ndcg@10"] == {"metric": "ndcg@10", "mean": pytest.approx(0.5), "n": 2,
                                  "n_no_relevant": 1}
    assert summary["judged@10"]["n"] == 3 and summary["judged@10"]["mean"] == pytest.approx(
        (0.75 + 0 + 1) / 3)


def test_default_table(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", *files]) == EXIT_OK
    out = capsys.readouterr().out
    for line in ("ndcg@10      0.5000   2             1", "recall@100   0.5000   2",
                 "mrr          0.5000", "map          0.5000"):
        assert line in out, out
    assert "per query" not in out
    assert ("3 queries evaluated (in both qrels and run); 1 without a relevant memory" in out
            and "1 run queries without qrels and 1 qrels queries without a run" in out)


def test_per_query_table(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", *files, "--per-query", "--metric", "NDCG_cut_10"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "per query" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s*q\d", line)]
    assert rows == [["q1", "1.0000"], ["q2", "0.0000"], ["q3", "-"]]


def as_dicts(frame: pl.DataFrame, column: str) -> dict[str, dict[str, Any]]:
    """query_id -> memory_id -> `column`, as pytrec_eval takes qrels and runs."""
    out: dict[str, dict[str, Any]] = {}
    for query_id, memory_id, value in frame.select("query_id", "memory_id", column).iter_rows():
        out.setdefault(query_id, {})[memory_id] = value
    return out


def test_tied_scores_follow_trec_eval(tmp_path: Path) -> None:
    """Random runs with many tied scores and ids of varied length: same values as
    pytrec_eval per query (its order: score descending, then id descending by strcmp)."""
    rng = np.random.default_rng(0)
    qrels_lines, run_lines = [], []
    for q in range(60):
        docs = [f"m{i}" for i in rng.choice(200, 40, replace=False)]  # m7 vs m70 vs m100
        for doc in docs[:25]:
            qrels_lines.append(f"q{q} 0 {doc} {rng.integers(0, 3)}")
        for i, doc in enumerate(docs[5:]):
            run_lines.append(f"q{q} Q0 {doc} {i + 1} {rng.integers(0, 4) / 2} tag")
    (tmp_path / "qrels").write_text("\n".join(qrels_lines))
    (tmp_path / "run").write_text("\n".join(run_lines))
    qrels, run = read_qrels(tmp_path / "qrels"), read_run(tmp_path / "run")
    names = ["ndcg@5", "ndcg@10", "recall@5", "precision@5", "mrr", "map", "hit@1"]
    result = evaluate_run(qrels, run, [parse_metric(n) for n in names])
    trec = {"ndcg@5": "ndcg_cut_5", "ndcg@10": "ndcg_cut_10", "recall@5": "recall_5",
            "precision@5": "P_5", "mrr": "recip_rank", "map": "map", "hit@1": "success_1"}
    reference = pytrec_eval.RelevanceEvaluator(
        as_dicts(qrels, "relevance"),
        {"ndcg_cut.5,10", "recall.5", "P.5", "recip_rank", "map", "success.1"}
    ).evaluate(as_dicts(run, "score"))
    checked = 0
    for row in result.per_query.iter_rows(named=True):
        for name in names:
            if not math.isnan(row[name]):
                assert row[name] == pytest.approx(reference[row["query_id"]][trec[name]],
                                                  abs=1e-9), (row["query_id"], name)
                checked += 1
    assert checked > 300
    # The other tie order (ids ascending, as ir_measures sorts) gives different values here.
    flipped = run.with_columns(score=run["score"] * 1.0).sort(
        ["query_id", "score", "memory_id"], descending=[False, True, False])
    assert rank_like_trec_eval(run)["memory_id"].to_list() != flipped["memory_id"].to_list()


def test_judged_only_measures_follow_trec_eval_on_ties_and_negative_relevance(
        tmp_path: Path) -> None:
    """bpref as pytrec_eval's, the condensed lists as its ndcg_cut / P with -J, on tied runs
    whose qrels also hold negative relevance (trec_eval: in the pool, not judged)."""
    rng = np.random.default_rng(1)
    qrels_lines, run_lines = [], []
    for q in range(60):
        docs = [f"m{i}" for i in rng.choice(200, 40, replace=False)]
        for doc in docs[:20]:
            qrels_lines.append(f"q{q} 0 {doc} {rng.integers(-1, 3)}")
        for i, doc in enumerate(docs[5:]):  # 15 judged memories returned among 35
            run_lines.append(f"q{q} Q0 {doc} {i + 1} {rng.integers(0, 4) / 2} tag")
    (tmp_path / "qrels").write_text("\n".join(qrels_lines))
    (tmp_path / "run").write_text("\n".join(run_lines))
    qrels, run = read_qrels(tmp_path / "qrels"), read_run(tmp_path / "run")
    trec = {"bpref": "bpref", "ndcg_condensed@5": "ndcg_cut_5", "ndcg_condensed": "ndcg",
            "precision_condensed@5": "P_5", "ndcg@5": "ndcg_cut_5", "precision@5": "P_5"}
    result = evaluate_run(qrels, run, [parse_metric(name) for name in trec])
    reference = {judged_only: pytrec_eval.RelevanceEvaluator(
        as_dicts(qrels, "relevance"), {"bpref", "ndcg_cut.5", "ndcg", "P.5"},
        judged_docs_only_flag=judged_only).evaluate(as_dicts(run, "score"))
        for judged_only in (False, True)}
    checked = 0
    for row in result.per_query.iter_rows(named=True):
        for name, measure in trec.items():
            if not math.isnan(row[name]):
                expected = reference["condensed" in name][row["query_id"]][measure]
                assert row[name] == pytest.approx(expected, abs=1e-9), (row["query_id"], name)
                checked += 1
    assert checked > 300
    # Read as 0 (judged non-relevant), the negative rows would change bpref.
    as_zero = evaluate_run(qrels.with_columns(pl.col("relevance").clip(lower_bound=0)), run,
                           [parse_metric("bpref")])
    assert not as_zero.per_query["bpref"].equals(result.per_query["bpref"])


def test_bpref_and_condensed_metrics(files: tuple[str, str],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", *files, "--json", "--per-query", "--metric", "bpref",
                 "-m", "ndcg'@10", "-m", "P'@2"]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"] == ["bpref", "ndcg_condensed@10", "precision_condensed@2"]
    rows = {row["query_id"]: row for row in out["per_query"]}
    # q1: m1 (2), m3 (1), m2 (0), m8 (unjudged): R = 2, N = 1, nothing non-relevant above a
    # relevant memory; the condensed list drops m8 only. q2: its relevant memory is not
    # returned. q3: nothing relevant.
    assert rows["q1"] == {"query_id": "q1", "bpref": 1.0, "ndcg_condensed@10": 1.0,
                          "precision_condensed@2": 1.0}
    assert rows["q2"]["bpref"] == 0.0 and rows["q3"]["bpref"] is None
    summary = {row["metric"]: row for row in out["summary"]}
    assert summary["bpref"] == {"metric": "bpref", "mean": 0.5, "n": 2, "n_no_relevant": 1}


def test_rank_field_is_ignored() -> None:
    run = pl.DataFrame({"query_id": ["q", "q", "q"], "memory_id": ["a", "b", "c"],
                        "rank": [1, 2, 3], "score": [1.0, 2.0, 2.0]})
    assert rank_like_trec_eval(run)["memory_id"].to_list() == ["c", "b", "a"]


@pytest.mark.parametrize(("qrels", "run", "message"), [
    ("q1 0 m1\n", RUN, r"qrels.txt line 1: expected 4 fields"),
    (QRELS, "q1 Q0 m1 1 high test\n", r"run.txt line 1: field 'score': expected a number"),
    (QRELS, RUN + "q1 Q0 m1 9 0.2 test\n", r"run.txt line 8: run lists memory 'm1' again "
                                          r"for query 'q1'; .* \(first at line 1\)"),
    (QRELS + "q1 0 m1 1\n", RUN, r"qrels.txt line 7: qrels lists memory 'm1' again"),
    (QRELS, "q5 Q0 m1 1 1.0 t\n", r"no query is in both"),
])
def test_bad_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], qrels: str,
                          run: str, message: str) -> None:
    (tmp_path / "qrels.txt").write_text(qrels)
    (tmp_path / "run.txt").write_text(run)
    code = main(["evaluate", str(tmp_path / "qrels.txt"), str(tmp_path / "run.txt"), "--json"])
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert captured.out == ""  # errors go to stderr, so stdout stays valid for --json
    assert re.search(message, captured.err), captured.err


def test_missing_file_exit_2(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", files[0], files[1] + ".missing"]) == EXIT_BAD_INPUT
    assert "No such file" in capsys.readouterr().err


def test_unknown_metric_exit_2(files: tuple[str, str],
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", *files, "--metric", "ndcg@10", "--metric", "infAP"]) == 2
    err = capsys.readouterr().err
    assert "unknown metric 'infAP'; accepted:" in err
    assert "judged@K" in err and "recip_rank" in err and "bpref" in err


def test_help_explains_order_queries_and_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("tied scores are broken by memory id in descending byte order",
                   "as trec_eval does without -c", "default: ndcg@10, recall@100, mrr, map",
                   "--per-query", "--json", "Exit status: 0 success; 2 bad input",
                   "judged@K divides by min(K, memories returned)",
                   "bpref is trec_eval's bpref", "Sakai's nDCG' and P'",
                   "the run with its unjudged memories removed"):
        assert phrase in text, phrase
