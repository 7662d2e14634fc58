"""Relevance labels from feedback verdicts: search occurrences, replayable without leakage.

ContextKit's artifacts hold verdicts (`record_feedback`: a memory, helpful or not, the query
text, the user) but no log of the rankings shown and no relevance judgments. `relabel`
turns the verdicts of a store into judged searches:

- **Occurrences.** The verdicts of one owner scope (`user_id`, `agent_id`, `run_id`: the
  scope a search runs in) for one query hash (`query_id` of the feedback event) are taken
  in time order; the first opens an occurrence, and every later verdict within `window` of
  that first one joins it; the next verdict after the window opens the next occurrence.
  Each occurrence is one search. Verdicts of one user from two agents or runs are two
  searches, each in its own scope (keyed by the user alone, they merged into one search
  scoped to the first one's agent).
- **The search.** Placed 1 µs before the occurrence's first verdict (`ts`), with the
  query text, agent and run ids of that verdict, the owner scope of the user, limit
  `limit` (the artifacts do not say how many were shown) and no logged ranking. The
  timeline's tie-break puts a search after memory events of the same microsecond and
  before feedback and accesses, so the search sees every memory event up to its time and
  no verdict at or after its first one: no verdict ever informs the search it labels.
- **Labels.** Within an occurrence a memory's last verdict decides: helpful → relevance 1,
  unhelpful → 0 (judged not relevant); every other memory is unjudged. A later occurrence
  of the same query by the same user is labelled by its own verdicts only.
- **Ids.** An occurrence's query id is `HASH#K` (K counts the occurrences of that hash in
  time order, over all owner scopes); `questions` maps it back to the hash, the distinct question
  the per-query unit counts once.
- **Not replayable.** A verdict without a query hash (given without `query=`), or with
  one but no user, agent or run id (a search needs an owner scope), labels no search: it is
  counted (`Relabelled.without_query`, `without_owner`), never dropped silently, and stays
  on the timeline as the feedback it is.

A query vector per occurrence is the stored vector of its hash when the store has one (a
store ingested with `--query-embedder`), copied; otherwise replay projects it from the text.

>>> labelled = relabel(dataset, window=timedelta(minutes=30), limit=10)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import timedelta

import polars as pl

from .schema import EVENTS, QRELS, QUERIES, Dataset
from .simulate import order_events

__all__ = ["LABEL_SOURCE", "REVISION", "Relabelled", "occurrences", "relabel"]

LABEL_SOURCE = "feedback verdicts"
REVISION = "verdict-labels/2"  # part of the digest: a rule change makes new replays
#   (2: occurrences keyed by user, agent and run, not by user alone)
_SCOPE = ("user_id", "agent_id", "run_id")
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Relabelled:
    """A store's dataset with one search per occurrence and its verdicts as qrels.

    dataset : the input with the occurrence searches added to the timeline, the occurrence
        queries (and their vectors) in place of the hashes, and the verdict qrels.
    questions : occurrence query id -> query hash (the question).
    without_query : verdicts that carry no query hash, so label no search.
    without_owner : verdicts with a query but no user, agent or run id: a search needs an
        owner scope (the library refuses one without), so they label none either.
    verdicts : verdicts that label an occurrence (the last per memory and occurrence).
    """

    dataset: Dataset
    questions: dict[str, str]
    without_query: int
    without_owner: int
    verdicts: int


def occurrences(feedback: pl.DataFrame, window: timedelta) -> pl.DataFrame:
    """The occurrence of each verdict: `feedback` (events of kind feedback with a query id)
    with `occurrence` (its query id, `HASH#K`) and `opened` (the first verdict's time)."""
    if window <= timedelta(0):
        raise ValueError(f"verdict labels: the window must be positive, got {window}")
    rows = feedback.sort(*_SCOPE, "query_id", "ts", "seq", nulls_last=True)
    keys = rows.select(*_SCOPE, "query_id").rows()
    times = rows["ts"].to_list()
    opened, start, key = [], None, None
    for scope, ts in zip(keys, times, strict=True):
        if scope != key or ts > start + window:
            key, start = scope, ts
        opened.append(start)
    # K counts each hash's occurrences in time order (scopes in id order on a tie).
    rows = rows.with_columns(opened=pl.Series(opened, dtype=rows["ts"].dtype))
    firsts = (rows.select("query_id", *_SCOPE, "opened").unique(maintain_order=True)
              .sort("opened", *_SCOPE, nulls_last=True)
              .with_columns(k=pl.int_range(pl.len()).over("query_id")))
    return rows.join(firsts, on=["query_id", *_SCOPE, "opened"], nulls_equal=True,
                     maintain_order="left").with_columns(
        occurrence=pl.format("{}#{}", "query_id", "k")).drop("k")


def relabel(ds: Dataset, *, window: timedelta, limit: int) -> Relabelled:
    """`ds` with one search per verdict occurrence and its verdicts as the qrels (module
    docstring); the dataset digest adds the rule revision, window and limit."""
    if limit < 1:
        raise ValueError(f"verdict labels: the limit must be >= 1, got {limit}")
    if ds.qrels.height:
        raise ValueError("verdict labels: the store has qrels already; score on those "
                         "([dataset] labels = \"qrels\") or ingest the artifacts alone")
    events = ds.events
    feedback = events.filter(pl.col("kind") == "feedback")
    without = int(feedback["query_id"].is_null().sum())
    owned = pl.any_horizontal(pl.col(c).is_not_null() for c in ("user_id", "agent_id", "run_id"))
    unowned = int(feedback.filter(pl.col("query_id").is_not_null(), ~owned).height)
    tagged = occurrences(feedback.filter(pl.col("query_id").is_not_null(), owned), window)
    first = tagged.sort("ts", "seq").group_by("occurrence", maintain_order=True).first()
    searches = first.select(
        pl.lit(None, dtype=pl.Int64).alias("event_id"), (pl.col("opened") - _TICK).alias("ts"),
        pl.lit(None, dtype=pl.Int64).alias("seq"), pl.lit("search").cast(EVENTS["kind"])
        .alias("kind"), pl.lit(None, dtype=pl.String).alias("memory_id"),
        pl.col("occurrence").alias("query_id"), "user_id", "agent_id", "run_id", "query",
        pl.lit("{}").alias("filters"), pl.lit(limit, dtype=pl.Int64).alias("limit"),
        pl.lit(None, dtype=EVENTS["shown"]).alias("shown"),
        pl.lit(None, dtype=pl.Boolean).alias("helpful"))
    timeline = order_events(pl.concat([events, searches.cast(dict(EVENTS))],  # type: ignore[arg-type]
                                      how="vertical_relaxed").select(list(EVENTS)))
    last = tagged.sort("ts", "seq").group_by("occurrence", "memory_id", maintain_order=True).last()
    qrels = last.select(pl.col("occurrence").alias("query_id"), "memory_id",
                        relevance=pl.col("helpful").cast(pl.Int64)).sort("query_id", "memory_id")
    questions = dict(first.select("occurrence", "query_id").iter_rows())
    queries = first.select(pl.col("occurrence").alias("query_id"), pl.col("query").alias("text"),
                           "user_id", "agent_id", "run_id",
                           pl.lit(None, dtype=pl.String).alias("question_type"))
    vectors = ds.query_embeddings.join(first.select("query_id", "occurrence"), on="query_id"
                                       ).select(pl.col("occurrence").alias("query_id"),
                                                "embedder", "vector")
    spec = f"{ds.digest}|{REVISION}|window={window.total_seconds()}s|limit={limit}"
    labelled = replace(
        ds, digest=hashlib.sha256(spec.encode()).hexdigest(),
        version=f"{ds.version}+{REVISION}", events=timeline,
        queries=queries.cast(dict(QUERIES)).sort("query_id"),  # type: ignore[arg-type]
        qrels=qrels.cast(dict(QRELS)),  # type: ignore[arg-type]
        query_embeddings=vectors.sort("query_id"))
    return Relabelled(labelled, questions, without, unowned, qrels.height)
