"""TREC qrels and run files: round trips, the tie surrogate, and bad lines."""

from __future__ import annotations

import math

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets.trec import read_qrels, read_run, write_qrels, write_run
from msprlab.datasets.validate import IngestError

QRELS = pl.DataFrame({"query_id": ["q1", "q1", "q2"], "memory_id": ["m1", "m7", "m2"],
                      "relevance": [2, 0, 1]})


def run_frame(rows: list[tuple[str, str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"query_id": pl.String, "memory_id": pl.String,
                                      "rank": pl.Int64, "score": pl.Float64}, orient="row")


def test_qrels_round_trip(tmp_path):
    path = tmp_path / "qrels.txt"
    write_qrels(QRELS, path)
    assert path.read_text() == "q1 0 m1 2\nq1 0 m7 0\nq2 0 m2 1\n"
    assert_frame_equal(read_qrels(path), QRELS)


def test_qrels_reader_takes_any_whitespace_blank_lines_and_crlf(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_bytes(b"q1\t0  m1 2\r\n\r\n  q1 0 m7 0  \r\nq2 0 m2 1")
    assert_frame_equal(read_qrels(path), QRELS)
    with_rows = read_qrels(path, provenance=True)
    assert with_rows["_row"].to_list() == [1, 3, 4]
    assert with_rows["_file"].unique().to_list() == ["qrels.txt"]


def test_run_round_trip_keeps_decreasing_scores_exactly(tmp_path):
    run = run_frame([("q1", "m3", 1, 0.30000000000000004), ("q1", "m1", 2, 1e-300),
                     ("q2", "m2", 1, -0.5), ("q2", "m9", 2, -1.25)])
    path = tmp_path / "run.txt"
    assert write_run(run, path, tag="bm25") == 0
    assert path.read_text().splitlines()[0] == "q1 Q0 m3 1 0.30000000000000004 bm25"
    assert_frame_equal(read_run(path), run)


def test_run_is_written_by_query_then_rank(tmp_path):
    run = run_frame([("q2", "a", 2, 1.0), ("q1", "b", 2, 1.0), ("q2", "c", 1, 2.0),
                     ("q1", "d", 1, 3.0)])
    path = tmp_path / "run.txt"
    write_run(run, path)
    assert [line.split()[2] for line in path.read_text().splitlines()] == ["d", "b", "c", "a"]


@pytest.mark.parametrize(("scores", "why"), [
    ([0.9, 0.5, 0.5], "tie"),
    ([0.5, 0.7, 0.1], "increase"),
    ([0.9, math.nan, 0.1], "nan"),
    ([0.9, None, 0.1], "null"),
])
def test_non_decreasing_scores_get_the_rank_surrogate(tmp_path, scores, why):
    rows = [("q1", f"m{r}", r, s) for r, s in enumerate(scores, start=1)]
    rows += [("q2", "m1", 1, 0.4), ("q2", "m2", 2, 0.2)]  # fine: written as given
    path = tmp_path / "run.txt"
    assert write_run(run_frame(rows), path) == 1, why
    back = read_run(path)
    assert back.filter(pl.col("query_id") == "q1")["score"].to_list() == [3.0, 2.0, 1.0]
    assert back.filter(pl.col("query_id") == "q2")["score"].to_list() == [0.4, 0.2]
    # trec_eval's order (score descending, then memory id descending) is the written order.
    external = back.sort(["query_id", "score", "memory_id"], descending=[False, True, True])
    assert external["memory_id"].to_list() == back["memory_id"].to_list()


def test_surrogate_follows_rank_order_even_with_gaps(tmp_path):
    run = run_frame([("q1", "x", 10, 1.0), ("q1", "y", 3, 1.0), ("q1", "z", 7, 1.0)])
    path = tmp_path / "run.txt"
    write_run(run, path)
    assert path.read_text().splitlines() == ["q1 Q0 y 3 3.0 msprlab", "q1 Q0 z 7 2.0 msprlab",
                                             "q1 Q0 x 10 1.0 msprlab"]


@pytest.mark.parametrize(("text", "reader", "message"), [
    ("q1 0 m1 2\nq1 0 m2\n", read_qrels,
     "qrels.txt line 2: expected 4 fields (query_id iteration memory_id relevance), got 3: "
     "'q1 0 m2'"),
    ("q1 0 m1 2\n\nq1 0 m2 high\n", read_qrels,
     "qrels.txt line 3: field 'relevance': expected an integer, got 'high'"),
    ("q1 0 m1 2.5\n", read_qrels,
     "qrels.txt line 1: field 'relevance': expected an integer, got '2.5'"),
    ("q1 Q0 m1 1 0.5 t\nq1 Q0 m2 2 0.4\n", read_run,
     "qrels.txt line 2: expected 6 fields (query_id Q0 memory_id rank score tag), got 5: "
     "'q1 Q0 m2 2 0.4'"),
    ("q1 Q0 m1 first 0.5 t\n", read_run,
     "qrels.txt line 1: field 'rank': expected an integer, got 'first'"),
    ("q1 Q0 m1 1 high t\n", read_run,
     "qrels.txt line 1: field 'score': expected a number, got 'high'"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, text, reader, message):
    path = tmp_path / "qrels.txt"
    path.write_text(text)
    with pytest.raises(IngestError) as info:
        reader(path)
    assert str(info.value) == message


def test_non_utf8_file_is_reported(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_bytes(b"q1 0 m\xff 1\n")
    with pytest.raises(IngestError, match=r"^qrels.txt: not UTF-8 text"):
        read_qrels(path)


@pytest.mark.parametrize(("run", "message"), [
    (run_frame([("q1", "m 1", 1, 0.5)]),
     "run row 0: field 'memory_id': a TREC id must be non-empty and free of whitespace, "
     "got 'm 1'"),
    (run_frame([("q1", "m1", 1, 0.5), ("q1", "m1", 2, 0.4)]),
     "run row 1: duplicate query_id='q1', memory_id='m1'"),
    (run_frame([("q1", "m1", 1, 0.5), ("q1", "m2", 1, 0.4)]),
     "run row 1: duplicate query_id='q1', rank=1"),
    (run_frame([("q1", "m1", 1, 0.5)]).drop("rank"),
     "run: missing column(s) ['rank'] (found columns ['query_id', 'memory_id', 'score'])"),
])
def test_unwritable_runs_are_refused_and_nothing_is_written(tmp_path, run, message):
    path = tmp_path / "run.txt"
    with pytest.raises(ValueError) as info:
        write_run(run, path)
    assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []


def test_qrels_writer_refuses_null_relevance(tmp_path):
    bad = QRELS.with_columns(relevance=pl.Series([1, None, 2]))
    with pytest.raises(ValueError, match=r"^qrels row 1: field 'relevance': required, got null$"):
        write_qrels(bad, tmp_path / "q.txt")
