"""The reference rankers (experiments/references.py): BM25 scores by hand, the replay's
visibility, the seeds' own vectors, and `msprlab ablate` printing and bundling them."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from test_experiments import SMALL

from msprlab.datasets.schema import (
    EDGES,
    EMBEDDINGS,
    EVENTS,
    MEMORIES,
    QRELS,
    QUERIES,
    QUERY_EMBEDDINGS,
    Dataset,
    empty,
)
from msprlab.engine import EngineConfig
from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import load_experiment
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.references import bm25_rankings, reference_frame, reference_runs
from msprlab.experiments.replay import replay
from msprlab.experiments.stages.prepare import prepare_store
from msprlab.experiments.stages.replay_tables import replay_tables, window_table

T0 = datetime(2024, 1, 1)
K1, B = 1.5, 0.75  # bm25s's defaults


def lucene_bm25(docs: list[list[str]], query: list[str]) -> list[float]:
    """BM25's Lucene variant, as bm25s documents it: idf = ln(1 + (N - df + .5) / (df + .5)),
    tf part = tf / (tf + k1 (1 - b + b dl / avgdl)), summed over the query's tokens."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    out = []
    for doc in docs:
        score = 0.0
        for token in query:
            df = sum(token in d for d in docs)
            if df == 0:
                continue
            tf = doc.count(token)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf / (tf + K1 * (1 - B + B * len(doc) / avgdl))
        out.append(score)
    return out


def test_bm25_scores_are_the_lucene_variant_by_hand() -> None:
    docs = ["Apple banana apple", "apple cherry", "banana cherry cherry durian", "kiwi"]
    rows = np.array([0, 1, 2], dtype=np.int64)  # kiwi is not visible: not in N or avgdl
    # "the" is an English stopword and "zzz" is in no memory: both score nothing.
    [(found, scores)] = bm25_rankings(docs, ["the apple DURIAN zzz"], [(rows, [0])], [10])
    expected = lucene_bm25([d.lower().split() for d in docs[:3]], ["apple", "durian"])
    assert expected[2] > expected[0] > expected[1] > 0  # the order the variant gives
    assert found == [2, 0, 1]
    np.testing.assert_allclose(scores, [expected[2], expected[0], expected[1]], rtol=1e-6)


def test_bm25_returns_only_memories_that_share_a_token_at_most_limit() -> None:
    docs = ["red fox", "red hen", "blue sky", "red red red"]
    rows = np.arange(4, dtype=np.int64)
    [(found, _), (none, _)] = bm25_rankings(docs, ["red", "the of"], [(rows, [0, 1])], [2, 10])
    assert found == [3, 0]  # "red red red" first; three match, the limit keeps two
    assert none == []       # only stopwords: nothing matches


def _frame(schema: pl.Schema, rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema,
                        orient="row")


def visibility_world() -> Dataset:
    """Searches at T0+2h and T0+4h by user u. Visible at the first: m0, m1, m5. m2 (the
    query's text, the query's vector) is deleted at T0+1h; m3 is added at T0+3h (visible at
    the second search only); m4 is another user's."""
    h = timedelta(hours=1)
    memories = [("m0", "apple pie recipe", "u", T0, None, [1.0, 0.0]),
                ("m1", "banana bread", "u", T0, None, [0.8, 0.6]),
                ("m2", "apple bread", "u", T0, T0 + h, [1.0, 0.01]),
                ("m3", "apple bread crumble", "u", T0 + 3 * h, None, [1.0, 0.02]),
                ("m4", "apple bread", "other", T0, None, [1.0, 0.0]),
                ("m5", "cherry jam", "u", T0, None, [0.0, 1.0])]
    mem = _frame(MEMORIES, [{"memory_id": m, "text": t, "user_id": u, "created_at": c,
                             "deleted_at": d} for m, t, u, c, d, _ in memories])
    emb = _frame(EMBEDDINGS, [{"memory_id": m, "embedder": "hand", "vector": v}
                              for m, *_, v in memories])
    queries = _frame(QUERIES, [{"query_id": "q", "text": "apple bread", "user_id": "u"}])
    qemb = _frame(QUERY_EMBEDDINGS, [{"query_id": "q", "embedder": "hand",
                                      "vector": [1.0, 0.0]}])
    qrels = _frame(QRELS, [{"query_id": "q", "memory_id": m, "relevance": 1}
                           for m in ("m0", "m2", "m3", "m4")])
    events = _frame(EVENTS, [{"event_id": i, "ts": T0 + at * h, "seq": i, "kind": "search",
                              "query_id": "q", "user_id": "u", "query": "apple bread",
                              "filters": "{}", "limit": 10} for i, at in enumerate((2, 4))])
    return Dataset("hand", "1", "hand-world", memories=mem, embeddings=emb,
                   edges=empty(EDGES), events=events, queries=queries, qrels=qrels,
                   query_embeddings=qemb)


def test_visibility_is_the_replays_own() -> None:
    ds = visibility_world()
    table = replay(ds, EngineConfig())
    bm25, dense, _ = reference_runs(ds, table)
    # BM25 over {m0, m1, m5} (N 3, avgdl 7/3): "bread" in the shorter m1 beats "apple" in m0
    assert bm25.rankings == [["m1", "m0"], ["m3", "m1", "m0"]]
    # m3's vector is [1, 0.02]: a shade below m0's cosine
    assert dense.rankings == [["m0", "m1", "m5"], ["m0", "m3", "m1", "m5"]]
    assert bm25.visible_sets == dense.visible_sets == 2
    for run in (bm25, dense):
        seen = {m for ids in run.rankings for m in ids}
        assert not seen & {"m2", "m4"}  # deleted before the search; another user's
    # the replay's candidates agree: what the engine could see, the references see
    assert set(table.candidates["memory_id"]) <= {"m0", "m1", "m3", "m5"}


def test_reference_frame_scores_with_the_ladders_ideal() -> None:
    ds = visibility_world()
    table = replay(ds, EngineConfig())
    bm25, dense, _ = reference_runs(ds, table)
    metrics = [parse_metric("ndcg@10"), parse_metric("recall@10")]
    frame = reference_frame(table, bm25, metrics)
    # four judged relevant (m2 and m4 never visible still count in the ideal DCG)
    ideal = sum(1 / math.log2(r + 2) for r in range(4))
    assert frame["ndcg@10"].to_list() == pytest.approx(
        [(1 / math.log2(3)) / ideal, (1 + 1 / math.log2(4)) / ideal], abs=1e-12)
    assert frame["recall@10"].to_list() == [0.25, 0.5]
    assert frame.columns[:5] == ["search", "event_id", "query_id", "intent", "question_type"]
    assert reference_frame(table, dense, metrics)["ndcg@10"][0] == pytest.approx(1 / ideal)


def test_dense_reference_heads_are_the_replays_seeds(tmp_path) -> None:
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL)
    cfg = load_experiment(definition)
    prepared = replay_tables(cfg, prepare_store(cfg, tmp_path), {"off": cfg.engine})
    table = window_table(prepared, "off", "test")
    dense = reference_runs(prepared.dataset, table)[1]
    seeds = (table.candidates.filter("was_seed").sort("search", "dense", "position",
                                                      descending=[False, True, False])
             .group_by("search", maintain_order=True).agg("memory_id", "dense"))
    assert seeds.height > 10
    for search, ids, _ in seeds.iter_rows():
        assert set(dense.rankings[search][:len(ids)]) == set(ids)


def test_ablate_prints_and_bundles_the_references(tmp_path, capsys) -> None:
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL + '[ablation]\narms = ["off", "on-zero"]\n')
    assert main(["ablate", str(definition), "--root", str(tmp_path), "--no-track"]) == 0
    out = capsys.readouterr().out
    assert "reference rankers (not tuned), test window: ndcg@10 per query / per search" in out
    assert "bm25s defaults" in out
    [bundle] = list((tmp_path / "results").iterdir())
    summary = pl.read_parquet(bundle / "references" / "summary.parquet")
    assert set(summary["arm"]) == {"bm25", "dense", "pool-ideal"}
    assert set(summary["unit"]) == {"query", "search"}
    assert {"overall", "intent", "question_type"} <= set(summary["group_by"])
    comparison = pl.read_parquet(bundle / "references" / "comparison.parquet")
    assert set(comparison["reference"]) == {"off"}
    assert set(comparison["arm"]) == {"bm25", "dense", "pool-ideal"}


def test_references_can_be_turned_off(tmp_path, capsys) -> None:
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL + '[ablation]\narms = ["off", "on-zero"]\n'
                          "[references]\nenabled = false\n")
    assert load_experiment(definition).references.enabled is False
    assert main(["ablate", str(definition), "--root", str(tmp_path), "--no-track"]) == 0
    out = capsys.readouterr().out
    assert "reference rankers: off" in out and "reference rankers (not tuned)" not in out
    [bundle] = list((tmp_path / "results").iterdir())
    assert not (bundle / "references").exists()


def test_a_misspelt_references_key_is_refused(tmp_path) -> None:
    definition = tmp_path / "bad.toml"
    definition.write_text("[references]\nenable = false\n")
    with pytest.raises(ValueError, match="references: unknown key 'enable'; known keys: "
                                         "enabled"):
        load_experiment(definition)
