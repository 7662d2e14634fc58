"""Validate a `Dataset` against the event store's contract before anything is written.

`validate` checks every frame against its schema (`schema.require`) and then the row rules
below, vectorised with Polars. It raises `IngestError` for the first bad row of the first
bad table (tables in the order memories, queries, embeddings, edges, qrels, events). Within
a table the row rules come first (nulls, ranges, references, kind-specific fields); the
table rules (uniqueness, timeline order) are checked once every row passes the row rules,
so a duplicate or an order error is never a side effect of a bad row further down.

Row rules:

- ids are never null: memory_id, query_id, an embedding's memory_id and embedder, an
  edge's src and dst, a qrel's pair, an event's event_id, ts, seq and kind;
- qrels: relevance >= 0, a known query and a known memory;
- embeddings: a known memory, a non-empty vector of finite numbers;
- query_embeddings: a known query, a non-empty vector of finite numbers;
- edges: known src and dst, `type` one of the engine's `EdgeType` names, weight in [0, 1];
- memories and edges: updated_at >= created_at; a memory's deleted_at after created_at;
- memories: no metadata key is a payload field (`schema.PAYLOAD_FIELDS`: the replay builds
  those from the memory's columns, and a metadata key would overwrite them); created_at is
  set when there are events (the replay adds a memory at its created_at);
- memory_id, query_id and user_id are non-empty and free of whitespace (TREC files split
  on it; owner filters compare exactly);
- events: memory_* / feedback / access / click need memory_id; search needs query and limit >= 0;
  feedback needs helpful; every memory_id, query_id and shown id given must be known.

Table rules: unique memory_id, query_id, (memory_id, embedder), (query_id, embedder),
(src, dst, type) and
(query_id, memory_id) in qrels; every vector of one embedder has the same length, and a
query vector the length of the memories' vectors of its embedder; events have unique
(ts, seq) and event_id is dense 0..n-1 in (ts, seq) order; memory events agree with the
memories table (none before created_at, memory_added at created_at, memory_deleted only
with deleted_at, one memory_added and one memory_deleted at most, memory_added before the
others).

Where a row is reported: sources may add the provenance columns `_file` and `_row`. An
integer `_row` is a 1-based line number for line-oriented text files (.jsonl, .tsv, .txt,
.csv) and a 0-based row index otherwise (Parquet); a string `_row` is shown as it is (for
example a JSON path). Without provenance a row is named by its table and 0-based index.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath
from typing import Any

import polars as pl

from msprlab.engine.graph import EdgeType

from .schema import PAYLOAD_FIELDS, TABLES, Dataset, require

__all__ = ["LINE_SUFFIXES", "IngestError", "first_bad_row", "locate", "show", "validate"]

# Files whose integer `_row` is a 1-based line number.
LINE_SUFFIXES = frozenset({".jsonl", ".ndjson", ".tsv", ".txt", ".csv", ".qrels", ".run"})
EDGE_TYPES = tuple(t.value for t in EdgeType)
_MEMORY_KINDS = ("memory_added", "memory_updated", "memory_deleted", "feedback", "access",
                 "click")


class IngestError(ValueError):
    """A source row or file that breaks the store's contract: where, which field, and why.

    `str(error)` reads ``memories.jsonl line 12: field 'created_at': expected an ISO-8601
    timestamp, got 'yesterday'``; the parts are kept as `where`, `field` and `reason`.
    """

    def __init__(self, where: str, reason: str, *, field: str | None = None) -> None:
        self.where, self.field, self.reason = where, field, reason
        prefix = f"{where}: field {field!r}: " if field else f"{where}: "
        super().__init__(prefix + reason)


def show(value: Any) -> str:
    """A value as an error message quotes it: strings quoted, timestamps in ISO form."""
    if value is None:
        return "null"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, pl.Series):
        return repr(value.to_list())
    return repr(value)


def locate(frame: pl.DataFrame, table: str, index: int) -> str:
    """Name row `index` of `frame` for a person: its file and line or row, else table and row."""
    if "_file" not in frame.columns:
        return f"{table} row {index}"
    file = frame["_file"][index]
    if "_row" not in frame.columns:
        return f"{file} ({table} row {index})"
    row = frame["_row"][index]
    if isinstance(row, str):
        return f"{file} {row}"
    unit = "line" if PurePath(str(file)).suffix.lower() in LINE_SUFFIXES else "row"
    return f"{file} {unit} {row}"


def first_bad_row(frame: pl.DataFrame, bad: pl.Expr) -> int | None:
    """Index of the first row where `bad` is true (null counts as false), or None."""
    hit = frame.select(bad.fill_null(False).arg_true().first()).item()
    return None if hit is None else int(hit)


@dataclass(frozen=True)
class _Rule:
    field: str
    bad: pl.Expr  # true where a row breaks the rule
    reason: Callable[[pl.DataFrame, int], str]


def _required(column: str) -> _Rule:
    return _Rule(column, pl.col(column).is_null(), lambda f, i: "required, got null")


def _id(column: str, *, why: str) -> _Rule:
    text = pl.col(column)
    return _Rule(column, (text.str.len_bytes() == 0) | text.str.contains(r"\s"),
                 lambda f, i: f"expected a non-empty id without whitespace, got "
                              f"{show(f[column][i])}; rename it everywhere it is used ({why})")


# Why an id must be one token: memory and query ids are written to TREC qrels and run
# files, which split on whitespace (`msprlab evaluate` refuses such files), and an owner
# id is what a search's filters match exactly.
_TREC_ID = "TREC qrels and run files split fields on whitespace"
_OWNER_ID = "search filters compare owner ids exactly, so a stray space makes another owner"


def _known(column: str, known: pl.Series, table: str) -> _Rule:
    bad = pl.col(column).is_not_null() & ~pl.col(column).is_in(known.implode())
    return _Rule(column, bad, lambda f, i: f"unknown {known.name} {show(f[column][i])} "
                                           f"(not in {table})")


def _not_before(later: str, earlier: str, *, strict: bool) -> _Rule:
    bad = pl.col(later) <= pl.col(earlier) if strict else pl.col(later) < pl.col(earlier)
    word = "after" if strict else "at or after"
    return _Rule(later, bad, lambda f, i: f"must be {word} {earlier} {show(f[earlier][i])}, "
                                          f"got {show(f[later][i])}")


def _unique(columns: Sequence[str], table: str) -> _Rule:
    key = pl.struct(columns) if len(columns) > 1 else pl.col(columns[0])

    def reason(frame: pl.DataFrame, i: int) -> str:
        values = {c: frame[c][i] for c in columns}
        first = first_bad_row(frame, pl.all_horizontal(pl.col(c) == v for c, v in values.items()))
        shown = ", ".join(f"{c}={show(v)}" for c, v in values.items())
        return f"duplicate {shown} (first at {locate(frame, table, first or 0)})"

    return _Rule(columns[-1], ~key.is_first_distinct(), reason)


def _first_broken(frame: pl.DataFrame, rules: Sequence[_Rule]) -> tuple[int, _Rule] | None:
    """The first row that breaks any rule, and the first rule it breaks."""
    if not rules or frame.height == 0:
        return None
    flags = frame.select([r.bad.fill_null(False).alias(f"r{k}") for k, r in enumerate(rules)])
    row = first_bad_row(flags, pl.any_horizontal(pl.all()))
    if row is None:
        return None
    return row, next(r for r, broken in zip(rules, flags.row(row), strict=True) if broken)


def _check(frame: pl.DataFrame, table: str, rules: Sequence[_Rule]) -> None:
    """Raise for the first row that breaks any rule, naming the first rule it breaks."""
    if (broken := _first_broken(frame, rules)) is not None:
        row, rule = broken
        raise IngestError(locate(frame, table, row), rule.reason(frame, row), field=rule.field)


def _memories(*, timeline: bool) -> tuple[list[_Rule], list[_Rule]]:
    rows = [_required("memory_id"), _id("memory_id", why=_TREC_ID),
            _id("user_id", why=_OWNER_ID),
            _not_before("updated_at", "created_at", strict=False),
            _not_before("deleted_at", "created_at", strict=True),
            _Rule("metadata", pl.col("metadata").map_batches(_has_reserved_key,
                                                             return_dtype=pl.Boolean),
                  lambda f, i: f"key {_reserved_key(f['metadata'][i])!r} is a payload field "
                               "the memory's own columns set, and would overwrite it at replay "
                               f"(reserved: {', '.join(PAYLOAD_FIELDS)}); rename it")]
    if timeline:  # the replay adds each memory to the timeline at its created_at
        rows.append(_Rule("created_at", pl.col("created_at").is_null(),
                          lambda f, i: "required when the store has events (a replay adds "
                                       "each memory at its created_at); give every memory "
                                       "its creation time"))
    return rows, [_unique(["memory_id"], "memories")]


# A metadata text that may name a reserved key: the key quoted and followed by a colon, or
# an escape (a key may be spelt with one). Only these are parsed.
_MAYBE_RESERVED = r'"(?:' + "|".join(map(re.escape, PAYLOAD_FIELDS)) + r')"\s*:|\\'


def _reserved_key(metadata: str | None) -> str | None:
    """The first top-level key of a metadata JSON object that is a payload field."""
    try:
        parsed = json.loads(metadata) if metadata else None
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    return next((key for key in PAYLOAD_FIELDS if key in parsed), None)


def _has_reserved_key(metadata: pl.Series) -> pl.Series:
    maybe = metadata.str.contains(_MAYBE_RESERVED).fill_null(False)
    bad = [False] * metadata.len()
    for i in maybe.arg_true().to_list():
        bad[i] = _reserved_key(metadata[i]) is not None
    return pl.Series(bad, dtype=pl.Boolean)


def _queries() -> tuple[list[_Rule], list[_Rule]]:
    rows = [_required("query_id"), _id("query_id", why=_TREC_ID), _id("user_id", why=_OWNER_ID)]
    return rows, [_unique(["query_id"], "queries")]


def _embeddings(ids: pl.Series, *, key: str = "memory_id", table: str = "embeddings",
                known_in: str = "memories", like: pl.DataFrame | None = None,
                ) -> tuple[list[_Rule], list[_Rule]]:
    """Rules of an embeddings table; `like`: the memories' embeddings, which query vectors
    must match in length."""
    vector = pl.col("vector")
    dims = vector.list.len()
    rows = [_required(key), _required("embedder"),
            _known(key, ids, known_in),
            _Rule("vector", vector.is_null() | (dims == 0),
                  lambda f, i: f"expected a non-empty vector, got {show(f['vector'][i])}"),
            _Rule("vector", vector.list.eval(~pl.element().is_finite()).list.any(),
                  lambda f, i: "expected finite numbers, got a NaN or infinite value")]
    same_dim = _Rule("vector", dims != dims.first().over("embedder"),
                     lambda f, i: f"expected {_first_dim(f, i)} numbers like the embedder's "
                                  f"first vector, got {len(f['vector'][i])}")
    other_dims = [] if like is None else [_memory_dims(like)]
    return rows, [same_dim, *other_dims, _unique([key, "embedder"], table)]


def _memory_dims(embeddings: pl.DataFrame) -> _Rule:
    """A query vector has the length of the memories' vectors of its embedder."""
    first = embeddings.group_by("embedder", maintain_order=True).agg(
        pl.col("vector").first().list.len().alias("dim"))
    dims = dict(zip(first["embedder"].to_list(), first["dim"].to_list(), strict=True))
    expected = pl.col("embedder").replace_strict(dims, default=None, return_dtype=pl.UInt32)

    def reason(frame: pl.DataFrame, i: int) -> str:
        embedder = frame["embedder"][i]
        return (f"expected {dims[embedder]} numbers like the memories' {embedder!r} vectors "
                f"(embeddings), got {len(frame['vector'][i])}: a query vector must be in "
                "the memories' embedding space")
    return _Rule("vector", pl.col("vector").list.len() != expected, reason)


def _first_dim(frame: pl.DataFrame, i: int) -> int:
    return len(frame.filter(pl.col("embedder") == frame["embedder"][i])["vector"][0])


def _edges(memory_ids: pl.Series) -> tuple[list[_Rule], list[_Rule]]:
    weight = pl.col("weight")
    rows = [_required("src"), _required("dst"),
            _known("src", memory_ids, "memories"), _known("dst", memory_ids, "memories"),
            _Rule("type", pl.col("type").is_null() | ~pl.col("type").is_in(EDGE_TYPES),
                  lambda f, i: f"expected one of {', '.join(EDGE_TYPES)}, "
                               f"got {show(f['type'][i])}"),
            _Rule("weight", weight.is_null() | weight.is_nan() | ~weight.is_between(0.0, 1.0),
                  lambda f, i: f"expected a number in [0, 1], got {show(f['weight'][i])}"),
            _not_before("updated_at", "created_at", strict=False)]
    return rows, [_unique(["src", "dst", "type"], "edges")]


def _qrels(memory_ids: pl.Series, query_ids: pl.Series) -> tuple[list[_Rule], list[_Rule]]:
    relevance = pl.col("relevance")
    rows = [_required("query_id"), _required("memory_id"),
            _known("query_id", query_ids, "queries"),
            _known("memory_id", memory_ids, "memories"),
            _Rule("relevance", relevance.is_null() | (relevance < 0),
                  lambda f, i: f"expected an integer >= 0, got {show(f['relevance'][i])}")]
    return rows, [_unique(["query_id", "memory_id"], "qrels")]


def _events(memory_ids: pl.Series, query_ids: pl.Series) -> tuple[list[_Rule], list[_Rule]]:
    def needs(column: str, kinds: Sequence[str]) -> _Rule:
        return _Rule(column, pl.col("kind").is_in(kinds) & pl.col(column).is_null(),
                     lambda f, i: f"required for {f['kind'][i]} events, got null")

    unknown_shown = pl.col("shown").list.eval(~pl.element().is_in(memory_ids.implode()))
    rows = [_required("event_id"), _required("ts"), _required("seq"), _required("kind"),
            _id("user_id", why=_OWNER_ID),
            needs("memory_id", _MEMORY_KINDS), needs("query", ("search",)),
            needs("limit", ("search",)), needs("helpful", ("feedback",)),
            _Rule("limit", pl.col("limit") < 0,
                  lambda f, i: f"expected an integer >= 0, got {f['limit'][i]}"),
            _known("memory_id", memory_ids, "memories"),
            _known("query_id", query_ids, "queries"),
            _Rule("shown", unknown_shown.list.any(), _unknown_shown(memory_ids))]
    return rows, []


def _unknown_shown(memory_ids: pl.Series) -> Callable[[pl.DataFrame, int], str]:
    def reason(frame: pl.DataFrame, i: int) -> str:
        shown = pl.Series(frame["shown"][i], dtype=pl.String)
        position = first_bad_row(shown.to_frame(), ~pl.first().is_in(memory_ids.implode()))
        return (f"unknown memory_id {show(shown[position or 0])} at position {position} "
                "(not in memories)")
    return reason


def _timeline(frame: pl.DataFrame) -> None:
    """(ts, seq) unique, and event_id == position in (ts, seq) order."""
    broken = (frame.select("ts", "seq", "event_id")
              .with_row_index("_i")
              .sort("ts", "seq", maintain_order=True)
              .with_columns(_expected=pl.int_range(pl.len(), dtype=pl.Int64),
                            _tie=(pl.col("ts") == pl.col("ts").shift(1))
                            & (pl.col("seq") == pl.col("seq").shift(1)))
              .filter(pl.col("_tie") | (pl.col("event_id") != pl.col("_expected")))
              .sort("_i"))
    if broken.height == 0:
        return
    first = broken.row(0, named=True)
    i = first["_i"]
    where = locate(frame, "events", i)
    if first["_tie"]:
        earlier = first_bad_row(frame, (pl.col("ts") == frame["ts"][i])
                                & (pl.col("seq") == frame["seq"][i]))
        raise IngestError(where, f"ts {show(frame['ts'][i])} with seq {frame['seq'][i]} is "
                          f"also at {locate(frame, 'events', earlier or 0)}: events that share "
                          "a timestamp need distinct seq (the tie-break)", field="seq")
    raise IngestError(where, f"expected {first['_expected']} (event_id is dense 0..n-1 in "
                      f"(ts, seq) order), got {first['event_id']}", field="event_id")


_ADDED, _UPDATED, _DELETED = "memory_added", "memory_updated", "memory_deleted"


def _memory_history(events: pl.DataFrame, memories: pl.DataFrame) -> None:
    """Each memory's events agree with its row in memories and with one another."""
    kind, ts = pl.col("kind"), pl.col("ts")
    added, deleted = kind == _ADDED, kind == _DELETED
    history = (events.with_row_index("_i")
               .filter(kind.is_in([_ADDED, _UPDATED, _DELETED]))
               .join(memories.select("memory_id", "created_at", "deleted_at"),
                     on="memory_id", how="left")
               .sort("ts", "seq")
               .with_columns(
                   _adds_before=(added.cum_sum() - added).over("memory_id"),
                   _deletes_before=(deleted.cum_sum() - deleted).over("memory_id"),
                   _added_i=pl.col("_i").filter(added).first().over("memory_id"),
                   _deleted_i=pl.col("_i").filter(deleted).first().over("memory_id")))

    def said(text: str) -> Callable[[pl.DataFrame, int], str]:
        def reason(f: pl.DataFrame, i: int) -> str:
            values = {k: show(f[k][i]) for k in ("ts", "created_at", "deleted_at")}
            for name, column in (("added", "_added_i"), ("deleted", "_deleted_i")):
                if f[column][i] is not None:  # where that memory's event is
                    values[name] = locate(events, "events", f[column][i])
            return f"{f['kind'][i]} of {f['memory_id'][i]!r} " + text.format(**values)
        return reason

    rules = [
        _Rule("ts", ts < pl.col("created_at"), said(
            "at {ts} is before the memory's created_at {created_at} (memories): nothing "
            "happens to a memory before it exists")),
        _Rule("kind", deleted & pl.col("deleted_at").is_null(), said(
            "is for a memory without deleted_at (memories), and a replay deletes a memory at "
            "its deleted_at: set it, or drop the event")),
        _Rule("kind", added & (pl.col("_adds_before") > 0), said(
            "a second time (first at {added}): a memory is added once")),
        _Rule("kind", ~added & pl.col("_added_i").is_not_null() & (pl.col("_adds_before") == 0),
              said("comes before its memory_added (at {added}) on the timeline: a memory is "
                   "added before it is updated or deleted")),
        _Rule("kind", deleted & (pl.col("_deletes_before") > 0), said(
            "a second time (first at {deleted}): a memory is deleted once")),
        _Rule("ts", added & (ts != pl.col("created_at")), said(
            "at {ts} is not at the memory's created_at {created_at} (memories): the events "
            "record the same history as the table, and a replay adds a memory at its "
            "created_at; set one to the other")),
    ]
    if (broken := _first_broken(history, rules)) is not None:
        row, rule = broken
        raise IngestError(locate(events, "events", history["_i"][row]),
                          rule.reason(history, row), field=rule.field)


def _require(frame: pl.DataFrame, table: str) -> None:
    try:
        require(frame, TABLES[table], what=table)
    except ValueError as exc:
        where = table
        if "_file" in frame.columns and frame.height:
            where = f"{frame['_file'][0]} ({table})"
        raise IngestError(where, str(exc).removeprefix(f"{table}: ")) from None


def validate(ds: Dataset) -> None:
    """Raise `IngestError` for the first row of `ds` that breaks the store's contract.

    Examples
    --------
    >>> from msprlab.datasets.schema import MEMORIES
    >>> memories = pl.DataFrame({"memory_id": ["m1", "m1"]}).with_columns(
    ...     pl.lit(None, dtype=t).alias(c) for c, t in MEMORIES.items() if c != "memory_id"
    ... ).select(MEMORIES.names())
    >>> try:
    ...     validate(Dataset("doc", "1", "0", memories=memories))
    ... except IngestError as error:
    ...     print(error)
    memories row 1: field 'memory_id': duplicate memory_id='m1' (first at memories row 0)
    """
    frames = ds.tables()
    for table, frame in frames.items():
        _require(frame, table)
    memory_ids = frames["memories"]["memory_id"].drop_nulls()
    query_ids = frames["queries"]["query_id"].drop_nulls()
    plans = {
        "memories": _memories(timeline=frames["events"].height > 0),
        "queries": _queries(),
        "embeddings": _embeddings(memory_ids),
        "edges": _edges(memory_ids),
        "qrels": _qrels(memory_ids, query_ids),
        "events": _events(memory_ids, query_ids),
        "query_embeddings": _embeddings(query_ids, key="query_id", table="query_embeddings",
                                        known_in="queries", like=frames["embeddings"]),
    }
    for table, (row_rules, table_rules) in plans.items():
        frame = frames[table]
        _check(frame, table, row_rules)
        _check(frame, table, table_rules)
        if table == "events" and frame.height:
            _timeline(frame)
            _memory_history(frame, frames["memories"])
    if frames["feedback_records"].height:
        _feedback_records(frames["feedback_records"], frames["events"])


_RECORD_KEY = ("memory_id", "ts", "user_id", "helpful")


def _feedback_records(records: pl.DataFrame, events: pl.DataFrame) -> None:
    """Each record is production's own of one feedback event (same memory, time, user and
    verdict), with a finite delta."""
    if (bad := first_bad_row(records, ~pl.col("delta_applied").is_finite()
                             | pl.col("ts").is_null() | pl.col("memory_id").is_null())) is not None:
        raise IngestError(locate(records, "feedback_records", bad),
                          "expected a memory id, a time and a finite delta_applied")
    feedback = events.filter(pl.col("kind") == "feedback").select(_RECORD_KEY)
    ordinal = pl.int_range(pl.len()).over(list(_RECORD_KEY)).alias("_k")
    known = feedback.with_columns(ordinal).with_columns(_event=pl.lit(True))
    matched = records.with_columns(ordinal).join(known, on=[*_RECORD_KEY, "_k"], how="left",
                                                 nulls_equal=True, maintain_order="left")
    if (bad := first_bad_row(matched, pl.col("_event").is_null())) is not None:
        raise IngestError(locate(records, "feedback_records", bad),
                          "no feedback event with the same memory, time, user and verdict")
