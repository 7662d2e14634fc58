"""Bad-input table for `validate`: each row rule and table rule, with its exact message."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from msprlab.datasets.generic import read_generic
from msprlab.datasets.schema import PROVENANCE, Dataset
from msprlab.datasets.validate import IngestError, locate, validate

EXAMPLE = Path(__file__).parents[1] / "datasets" / "data" / "example_generic"


@pytest.fixture(scope="module")
def example() -> Dataset:
    """The shipped example without provenance, so rows are named `table row i`."""
    ds = read_generic(EXAMPLE)
    return dataclasses.replace(ds, **{name: frame.drop(PROVENANCE, strict=False)
                                      for name, frame in ds.tables().items()})


def cell(table: str, row: int, column: str, value: Any) -> Callable[[Dataset], Dataset]:
    """A mutation: set one cell of one table."""
    def mutate(ds: Dataset) -> Dataset:
        frame = getattr(ds, table)
        rows = frame.to_dicts()
        rows[row][column] = value
        return dataclasses.replace(ds, **{table: pl.DataFrame(rows, schema=frame.schema)})
    return mutate


def frame_op(table: str, op: Callable[[pl.DataFrame], pl.DataFrame]) -> Callable[[Dataset],
                                                                                  Dataset]:
    return lambda ds: dataclasses.replace(ds, **{table: op(getattr(ds, table))})


def chain(*mutations: Callable[[Dataset], Dataset]) -> Callable[[Dataset], Dataset]:
    def mutate(ds: Dataset) -> Dataset:
        for m in mutations:
            ds = m(ds)
        return ds
    return mutate


def duplicate_row(table: str, row: int) -> Callable[[Dataset], Dataset]:
    return frame_op(table, lambda f: pl.concat([f, f[row]]))


T = datetime.fromisoformat
EDGE_TYPES = ("REPLY_TO, TOPIC_SIMILAR, DOCUMENT_LINK, TEMPORAL_NEXT, UPDATED_FROM, CAUSAL, "
              "SUPPORTS, CONTRADICTS, REFINES, ELABORATES")

# (id, mutation, exact message). Example events: 0-4 memory_added, 5 search q1, 6 access,
# 7 feedback, 8 memory_updated, 9 search q2, 10 feedback, 11 memory_deleted.
CASES = [
    ("schema-missing-column", frame_op("memories", lambda f: f.drop("text")),
     "memories: missing column 'text' (found columns ['memory_id', 'user_id', 'agent_id', "
     "'run_id', 'tenant_id', 'sub_tenant_id', 'role', 'allowed_roles', 'metadata', "
     "'created_at', 'updated_at', 'deleted_at'])"),
    ("schema-wrong-type", frame_op("qrels", lambda f: f.with_columns(pl.col("relevance")
                                                                      .cast(pl.Float64))),
     "qrels: column 'relevance' is Float64, expected Int64 (found columns ['query_id', "
     "'memory_id', 'relevance'])"),
    ("schema-extra-column", frame_op("queries", lambda f: f.with_columns(lang=pl.lit("en"))),
     "queries: unexpected column 'lang' (found columns ['query_id', 'text', 'user_id', "
     "'agent_id', 'run_id', 'question_type', 'lang'])"),
    ("memory-id-null", cell("memories", 1, "memory_id", None),
     "memories row 1: field 'memory_id': required, got null"),
    ("memory-id-duplicate", cell("memories", 3, "memory_id", "m2"),
     "memories row 3: field 'memory_id': duplicate memory_id='m2' (first at memories row 1)"),
    ("updated-before-created", cell("memories", 1, "updated_at", T("2024-02-01")),
     "memories row 1: field 'updated_at': must be at or after created_at "
     "2024-03-01 09:00:05, got 2024-02-01 00:00:00"),
    ("deleted-at-created", cell("memories", 3, "deleted_at", T("2024-03-06 08:00")),
     "memories row 3: field 'deleted_at': must be after created_at 2024-03-06 08:00:00, "
     "got 2024-03-06 08:00:00"),
    ("query-id-duplicate", cell("queries", 2, "query_id", "q1"),
     "queries row 2: field 'query_id': duplicate query_id='q1' (first at queries row 0)"),
    ("embedding-unknown-memory", cell("embeddings", 4, "memory_id", "m9"),
     "embeddings row 4: field 'memory_id': unknown memory_id 'm9' (not in memories)"),
    ("embedding-empty", cell("embeddings", 0, "vector", []),
     "embeddings row 0: field 'vector': expected a non-empty vector, got []"),
    ("embedding-nan", cell("embeddings", 2, "vector", [0.1, math.nan, 0.0, 0.0]),
     "embeddings row 2: field 'vector': expected finite numbers, got a NaN or infinite value"),
    ("embedding-dimension", cell("embeddings", 3, "vector", [0.1, 0.2, 0.3]),
     "embeddings row 3: field 'vector': expected 4 numbers like the embedder's first vector, "
     "got 3"),
    ("embedding-duplicate", duplicate_row("embeddings", 1),
     "embeddings row 5: field 'embedder': duplicate memory_id='m2', embedder='toy-4d' "
     "(first at embeddings row 1)"),
    ("edge-unknown-type", cell("edges", 1, "type", "RELATED"),
     f"edges row 1: field 'type': expected one of {EDGE_TYPES}, got 'RELATED'"),
    ("edge-weight-range", cell("edges", 0, "weight", 1.5),
     "edges row 0: field 'weight': expected a number in [0, 1], got 1.5"),
    ("edge-weight-nan", cell("edges", 0, "weight", math.nan),
     "edges row 0: field 'weight': expected a number in [0, 1], got nan"),
    ("edge-unknown-dst", cell("edges", 1, "dst", "m0"),
     "edges row 1: field 'dst': unknown memory_id 'm0' (not in memories)"),
    ("edge-duplicate", duplicate_row("edges", 0),
     "edges row 2: field 'type': duplicate src='m2', dst='m1', type='TEMPORAL_NEXT' "
     "(first at edges row 0)"),
    ("qrel-negative", cell("qrels", 1, "relevance", -1),
     "qrels row 1: field 'relevance': expected an integer >= 0, got -1"),
    ("qrel-unknown-memory", cell("qrels", 2, "memory_id", "m9"),
     "qrels row 2: field 'memory_id': unknown memory_id 'm9' (not in memories)"),
    ("qrel-unknown-query", cell("qrels", 0, "query_id", "q7"),
     "qrels row 0: field 'query_id': unknown query_id 'q7' (not in queries)"),
    ("qrel-duplicate", cell("qrels", 2, "memory_id", "m2"),
     "qrels row 2: field 'memory_id': duplicate query_id='q2', memory_id='m2' "
     "(first at qrels row 1)"),
    ("event-ts-null", cell("events", 4, "ts", None),
     "events row 4: field 'ts': required, got null"),
    ("search-without-query", cell("events", 5, "query", None),
     "events row 5: field 'query': required for search events, got null"),
    ("search-without-limit", cell("events", 9, "limit", None),
     "events row 9: field 'limit': required for search events, got null"),
    ("search-negative-limit", cell("events", 5, "limit", -1),
     "events row 5: field 'limit': expected an integer >= 0, got -1"),
    ("feedback-without-verdict", cell("events", 7, "helpful", None),
     "events row 7: field 'helpful': required for feedback events, got null"),
    ("feedback-without-memory", cell("events", 10, "memory_id", None),
     "events row 10: field 'memory_id': required for feedback events, got null"),
    ("access-without-memory", cell("events", 6, "memory_id", None),
     "events row 6: field 'memory_id': required for access events, got null"),
    ("added-unknown-memory", cell("events", 2, "memory_id", "m33"),
     "events row 2: field 'memory_id': unknown memory_id 'm33' (not in memories)"),
    ("event-unknown-query", cell("events", 9, "query_id", "q9"),
     "events row 9: field 'query_id': unknown query_id 'q9' (not in queries)"),
    ("shown-unknown-memory", cell("events", 9, "shown", ["m3", "m8"]),
     "events row 9: field 'shown': unknown memory_id 'm8' at position 1 (not in memories)"),
    ("same-ts-and-seq", cell("events", 4, "seq", 3),
     "events row 4: field 'seq': ts 2024-03-06 08:00:00 with seq 3 is also at events row 3: "
     "events that share a timestamp need distinct seq (the tie-break)"),
    ("event-id-not-dense", cell("events", 3, "event_id", 30),
     "events row 3: field 'event_id': expected 3 (event_id is dense 0..n-1 in (ts, seq) "
     "order), got 30"),
    ("event-id-out-of-order", chain(cell("events", 3, "event_id", 4),
                                    cell("events", 4, "event_id", 3)),
     "events row 3: field 'event_id': expected 3 (event_id is dense 0..n-1 in (ts, seq) "
     "order), got 4"),
    # The first bad row wins, whichever rule it breaks.
    ("first-bad-row-wins", chain(cell("qrels", 3, "relevance", -2),
                                 cell("qrels", 1, "memory_id", "m404")),
     "qrels row 1: field 'memory_id': unknown memory_id 'm404' (not in memories)"),
    # Row rules come before table rules: a bad row below a duplicate is reported first.
    ("row-rule-before-duplicate", chain(cell("memories", 1, "memory_id", "m1"),
                                        cell("memories", 4, "updated_at", T("2000-01-01"))),
     "memories row 4: field 'updated_at': must be at or after created_at "
     "2024-03-06 08:00:00, got 2000-01-01 00:00:00"),
]


def test_example_is_valid(example):
    validate(example)


@pytest.mark.parametrize(("mutate", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_reported_exactly(example, mutate, message):
    with pytest.raises(IngestError) as info:
        validate(mutate(example))
    assert str(info.value) == message


def test_error_keeps_its_parts(example):
    with pytest.raises(IngestError) as info:
        validate(cell("qrels", 1, "relevance", -1)(example))
    assert (info.value.where, info.value.field) == ("qrels row 1", "relevance")
    assert info.value.reason == "expected an integer >= 0, got -1"
    assert isinstance(info.value, ValueError)


def test_unsorted_events_with_timeline_ids_are_valid(example):
    validate(frame_op("events", lambda f: f.reverse())(example))


@pytest.mark.parametrize(("file", "row", "expected"), [
    ("memories.jsonl", 12, "memories.jsonl line 12"),
    ("memories.parquet", 3, "memories.parquet row 3"),
    ("locomo10.json", "$[0].qa[7]", "locomo10.json $[0].qa[7]"),
])
def test_locate_names_lines_rows_and_paths(file, row, expected):
    frame = pl.DataFrame({"_file": [file], "_row": [row]})
    assert locate(frame, "memories", 0) == expected
