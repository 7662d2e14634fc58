"""The synthetic generator: shapes, schemas, determinism, planted weights and grades,
intent phrasing and edge synthesis against the engine's builder."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets.schema import TABLES, require
from msprlab.datasets.synthetic import (
    SIGNALS,
    PlantedWeights,
    SyntheticSpec,
    generate_synthetic,
)
from msprlab.datasets.validate import validate
from msprlab.engine import EdgeBuilder
from msprlab.engine.config import EdgesConfig, IntentConfig
from msprlab.engine.graph import ContextGraph
from msprlab.engine.intent import IntentRouter
from msprlab.engine.text import lexical_overlap, tokens

SPEC = SyntheticSpec(n_tenants=2, n_users=5, memories_per_user=30, queries_per_user=6,
                     span_days=10.0)


@pytest.fixture(scope="module")
def generated():
    return generate_synthetic(SPEC, seed=7)


def test_tables_have_the_spec_shapes_and_the_schemas(generated) -> None:
    ds, truth = generated
    n_memories, n_queries = 5 * 30, 5 * 6
    counts = ds.counts()
    assert counts["memories"] == counts["embeddings"] == counts["events"] == n_memories
    assert counts["queries"] == n_queries
    assert counts["qrels"] == n_queries * sum(SPEC.grade_counts)
    for name, schema in TABLES.items():
        require(ds.tables()[name], schema, what=name)
    validate(ds)  # the event store's own ingest rules
    assert ds.memories["memory_id"].is_unique().all()
    assert ds.memories["created_at"].is_sorted()
    assert ds.embeddings["vector"].list.len().unique().to_list() == [SPEC.dim]
    assert truth.query_vectors.shape == (n_queries, SPEC.dim)
    assert truth.pairs.height == n_queries * 30
    assert set(ds.memories["tenant_id"]) <= {"t0", "t1"}
    assert set(ds.memories["role"]) <= set(SPEC.roles)
    # Each user lives in one tenant with one role.
    per_user = ds.memories.group_by("user_id").agg(pl.col("tenant_id", "role").n_unique())
    assert per_user["tenant_id"].max() == per_user["role"].max() == 1
    assert (ds.events["kind"].cast(pl.String) == "memory_added").all()
    assert ds.events["memory_id"].to_list() == ds.memories["memory_id"].to_list()


def test_same_seed_gives_identical_frames_and_another_seed_does_not(generated) -> None:
    ds, truth = generated
    again, truth_again = generate_synthetic(SPEC, seed=7)
    for name, frame in ds.tables().items():
        assert_frame_equal(frame, again.tables()[name])
    assert_frame_equal(truth.pairs, truth_again.pairs)
    assert np.array_equal(truth.query_vectors, truth_again.query_vectors)
    assert ds.digest == again.digest
    other, _ = generate_synthetic(SPEC, seed=8)
    assert other.digest != ds.digest
    assert not other.memories["text"].equals(ds.memories["text"])


def test_planted_weights_are_returned_and_are_the_weights_of_the_utility() -> None:
    weights = PlantedWeights(dense=0.5, lexical=0.05, graph=0.25, personal=0.0,
                             frequency=0.15, success=0.3)
    spec = replace(SPEC, weights=weights, relevance_noise=0.02)
    _, truth = generate_synthetic(spec, seed=3)
    assert truth.weights == weights
    features = truth.pairs.select(SIGNALS).to_numpy()
    assert features.min() >= 0.0 and features.max() <= 1.0
    fitted, *_ = np.linalg.lstsq(features, truth.pairs["utility"].to_numpy(), rcond=None)
    np.testing.assert_allclose(fitted, weights.as_array(), atol=0.02)


def test_grades_are_in_range_and_follow_the_planted_utility(generated) -> None:
    ds, truth = generated
    assert ds.qrels["relevance"].is_between(1, 3).all()
    counts = ds.qrels.group_by("query_id", "relevance").len()
    expected = {3: SPEC.grade_counts[2], 2: SPEC.grade_counts[1], 1: SPEC.grade_counts[0]}
    assert all(n == expected[g] for g, n in counts.select("relevance", "len").iter_rows())
    # Within each query a higher grade never has a lower utility.
    judged = truth.pairs.filter(pl.col("relevance") > 0)
    worst = judged.group_by("query_id", "relevance").agg(
        low=pl.col("utility").min(), high=pl.col("utility").max()).sort("query_id",
                                                                         "relevance")
    unjudged = truth.pairs.filter(pl.col("relevance") == 0).group_by("query_id").agg(
        high=pl.col("utility").max())
    floor = worst.filter(pl.col("relevance") == 1).join(unjudged, on="query_id")
    assert (floor["low"] >= floor["high_right"]).all()
    # Qrels only name memories of the query's own user.
    owners = ds.qrels.join(ds.queries, on="query_id").join(ds.memories, on="memory_id",
                                                           suffix="_memory")
    assert (owners["user_id"] == owners["user_id_memory"]).all()


def test_query_phrasings_trigger_their_intent_rule(generated) -> None:
    ds, _ = generated
    router = IntentRouter(IntentConfig())
    labels = [router.classify(text).label.value for text in ds.queries["text"]]
    assert labels == ds.queries["question_type"].to_list()
    big, _ = generate_synthetic(replace(SPEC, queries_per_user=60), seed=1)
    assert set(big.queries["question_type"]) == {"FACTUAL", "CONVERSATIONAL", "DOCUMENTARY",
                                                 "EXPLORATORY", "UNKNOWN"}
    assert all(router.classify(t).label.value == label
               for t, label in big.queries.select("text", "question_type").iter_rows())


def test_edges_match_the_engines_builder_run_in_time_order(generated) -> None:
    ds, _ = generated
    graph, builder, cfg = ContextGraph(), EdgeBuilder(), EdgesConfig()
    vectors = dict(zip(ds.embeddings["memory_id"], ds.embeddings["vector"].to_list(),
                       strict=True))
    for row in ds.memories.to_dicts():
        builder.on_memory_created(
            graph, cfg, memory_id=row["memory_id"], text=row["text"], user_id=row["user_id"],
            agent_id=row["agent_id"], run_id=row["run_id"],
            metadata=json.loads(row["metadata"]), embedding=vectors[row["memory_id"]],
            now=row["created_at"], tenant_id=row["tenant_id"])
    engine = {(e.src, e.dst, e.type.value): (e.weight, e.created_at) for e in graph.edges()}
    ours = {(s, d, t): (w, c) for s, d, t, w, c in
            ds.edges.select("src", "dst", "type", "weight", "created_at").iter_rows()}
    assert set(ours) == set(engine)
    for key, (weight, created) in ours.items():
        assert weight == pytest.approx(engine[key][0], abs=1e-12)
        assert created == engine[key][1]
    assert set(ds.edges["type"]) == {"REPLY_TO", "TEMPORAL_NEXT", "TOPIC_SIMILAR"}


BAD_SPECS = [
    ({"n_users": 0}, "`n_users >= 1 (an integer)` must hold, but got 0"),
    ({"dim": 2.5}, "`dim >= 1 (an integer)` must hold, but got 2.5"),
    ({"words_per_topic": 2}, "`words_per_topic >= 3 (an integer)` must hold, but got 2"),
    ({"span_days": -1.0}, "`0 < span_days < inf` must hold, but got -1.0"),
    ({"relevance_noise": float("nan")}, "`0 <= relevance_noise < inf` must hold, but got nan"),
    ({"roles": ()}, "`roles is a non-empty tuple of names` must hold, but got ()"),
    ({"phrasing": (("FACTUAL", 0.5), ("SMALLTALK", 0.5))},
     "`phrasing labels are distinct, from ['CONVERSATIONAL', 'DOCUMENTARY', 'EXPLORATORY', "
     "'FACTUAL', 'UNKNOWN']` must hold, but got ['FACTUAL', 'SMALLTALK']"),
    ({"phrasing": (("FACTUAL", 0.5), ("UNKNOWN", 0.4))},
     "`phrasing shares are >= 0 and sum to 1` must hold, but got [0.5, 0.4]"),
    ({"grade_counts": (0, 0, 0)}, "`grade_counts is 3 integers >= 0 with a positive sum`"),
]


@pytest.mark.parametrize(("change", "message"), BAD_SPECS)
def test_bad_specs_are_rejected_with_the_invariant(change: dict[str, object],
                                                   message: str) -> None:
    with pytest.raises(ValueError, match="SyntheticSpec: " + re.escape(message)):
        SyntheticSpec(**change)  # type: ignore[arg-type]


@pytest.mark.parametrize(("change", "message"), [
    ({"dense": -0.1}, "`0 <= dense < inf` must hold, but got -0.1"),
    ({"graph": True}, "`0 <= graph < inf` must hold, but got True"),
    ({name: 0.0 for name in SIGNALS}, "`at least one weight > 0` must hold"),
])
def test_bad_planted_weights_are_rejected(change: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match="PlantedWeights: " + re.escape(message)):
        PlantedWeights(**change)


def test_start_moves_the_whole_timeline() -> None:
    small = replace(SPEC, n_users=2, memories_per_user=8, queries_per_user=2)
    early, _ = generate_synthetic(small, seed=1)
    late, _ = generate_synthetic(replace(small, start=datetime(2027, 1, 5)), seed=1)
    shift = late.memories["created_at"] - early.memories["created_at"]
    assert shift.n_unique() == 1
    assert early.memories["created_at"].min() >= SPEC.start


def test_planted_signals_follow_their_documented_definitions(generated) -> None:
    ds, truth = generated
    texts = dict(ds.memories.select("memory_id", "text").iter_rows())
    queries = dict(ds.queries.select("query_id", "text").iter_rows())
    vectors = dict(zip(ds.embeddings["memory_id"], ds.embeddings["vector"].to_list(),
                       strict=True))
    row_of = {q: i for i, q in enumerate(ds.queries["query_id"])}
    sample = truth.pairs.sample(200, seed=1)
    for qid, mid, dense, lexical in sample.select("query_id", "memory_id", "dense",
                                                  "lexical").iter_rows():
        assert lexical == lexical_overlap(tokens(queries[qid]), texts[mid])
        v = np.asarray(vectors[mid], dtype=np.float64)
        cos = float(truth.query_vectors[row_of[qid]] @ v / np.linalg.norm(v))
        assert dense == pytest.approx(max(0.0, cos), abs=1e-12)
    # graph is the BFS reach from the query's dense seeds: checked against a brute force
    # over walks of one and two undirected edges.
    floor, top_k = 0.1, 10
    weight: dict[tuple[str, str], float] = {}
    for a, b, w in ds.edges.select("src", "dst", "weight").iter_rows():
        if w >= floor and a != b:
            for key in ((a, b), (b, a)):
                weight[key] = max(weight.get(key, 0.0), w)
    around: dict[str, dict[str, float]] = {}
    for (a, b), w in weight.items():
        around.setdefault(a, {})[b] = w
    for qid, part in truth.pairs.group_by("query_id"):
        ranked = part.with_row_index().sort("dense", "index", descending=[True, False])
        seeds = set(ranked["memory_id"].head(top_k))
        expected = dict.fromkeys(part["memory_id"], 0.0)
        for s_ in seeds:
            expected[s_] = 1.0
        for s_ in seeds:
            for b, w in around.get(s_, {}).items():
                if b in expected:
                    expected[b] = max(expected[b], w)
                for c, w2 in around.get(b, {}).items():
                    if c in expected:
                        expected[c] = max(expected[c], w * w2)
        got = dict(part.select("memory_id", "graph").iter_rows())
        assert got == pytest.approx(expected, abs=1e-12), qid


def test_reach_on_the_sparse_graph_equals_the_dense_walk() -> None:
    """`_reach` keeps the graph sparse (an n x n array would not fit at 250k memories):
    against the dense walk written out here, on a world with parallel and reverse edges."""
    from msprlab.datasets.synthetic import _reach
    from msprlab.engine.config import RetrievalConfig
    spec = SyntheticSpec(n_users=3, memories_per_user=20, queries_per_user=2)
    ds, _ = generate_synthetic(spec, seed=5)
    ids = ds.memories["memory_id"].to_list()
    rng = np.random.default_rng(0)
    extra = ds.edges.sample(n=10, seed=1).with_columns(  # reverse copies, other weights
        src=pl.col("dst"), dst=pl.col("src"), weight=pl.Series(rng.uniform(0, 1, 10)))
    edges = pl.concat([ds.edges, extra])
    per_user = spec.memories_per_user
    rows = np.repeat(np.arange(spec.n_users) * per_user, spec.queries_per_user)[:, None] + \
        np.arange(per_user)
    cosine = rng.uniform(-1, 1, rows.shape)
    index = {m: i for i, m in enumerate(ids)}
    retrieval = RetrievalConfig()
    dense = np.zeros((len(ids), len(ids)))
    for s, d, w in edges.select("src", "dst", "weight").iter_rows():
        w = min(max(w, 0.0), 1.0)
        if w >= retrieval.edge_weight_floor and s != d:
            a, b = index[s], index[d]
            dense[a, b] = dense[b, a] = max(dense[a, b], w)
    want = np.zeros(cosine.shape)
    seeds = np.argsort(-cosine, axis=1, kind="stable")[:, :retrieval.seed_top_k]
    np.put_along_axis(want, seeds, 1.0, axis=1)
    for q in range(cosine.shape[0]):
        local = dense[np.ix_(rows[q], rows[q])]
        for _ in range(retrieval.expansion_depth):
            want[q] = np.maximum(want[q], (want[q][:, None] * local).max(axis=0))
    np.testing.assert_array_equal(_reach(spec, ds.memories, edges, cosine, rows), want)
