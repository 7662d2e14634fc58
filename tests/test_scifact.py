"""SciFact source: golden facts of the shipped files, abstract parsing, BM25 and its nDCG@10."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets.schema import MEMORIES, QRELS, QUERIES, TABLES, Dataset, require
from msprlab.datasets.sources.scifact import (
    SCIFACT_DIR,
    _sentences,
    bm25_ndcg10,
    bm25_weights,
    load_scifact,
)
from msprlab.datasets.validate import IngestError, validate

SHA256 = {
    "corpus.csv": "f4a79c38ef6abf2ebb23612d155e77b4add75cc94f218e9a5d70a454fe3190b4",
    "claims_train.csv": "e700ebf087eb3f64eca99e983ab6bc08ae66c9ae06c3073ce514ee8c08fdeab0",
    "claims_validation.csv": "801dbb1bc00b65ce768f8f78ca207c8fd5ff5ef87aaf7c1330f883eb395e8d76",
    "claims_test.csv": "d0458aa500b0c6478ed70e76d72433b395b5c253963f804d24211200f53be9a4",
    "qrels_test.tsv": "18a49075af697c9bcdb3cf7b3618a12b32be0697a7e15f10a07de09d914d59b2",
    "qrels_train.tsv": "4da2bae808e23316834044eb14db1674f9496190e49a57693f6f13b23d428272",
}


@pytest.fixture(scope="module")
def ds() -> Dataset:
    return load_scifact()


def test_shipped_files_and_card():
    for name, digest in SHA256.items():
        assert hashlib.sha256((SCIFACT_DIR / name).read_bytes()).hexdigest() == digest, name
    card = (SCIFACT_DIR / "CARD.md").read_text()
    for must in ("Wadden et al.", "CC BY 4.0", "ODC-By 1.0", "allenai/scifact",
                 "b42f1c3444b28884ddcfadffafbfe223646c6c37"):
        assert must in card


def test_counts(ds):
    assert ds.source == "scifact/test"
    assert ds.counts() == {"memories": 5183, "embeddings": 0, "edges": 0, "events": 0,
                           "queries": 300, "qrels": 339, "query_embeddings": 0,
                           "feedback_records": 0}
    assert ds.qrels["query_id"].n_unique() == 300
    assert ds.memories["user_id"].unique().to_list() == ["scifact"]
    train = load_scifact("train")
    assert train.counts() == {"memories": 5183, "embeddings": 0, "edges": 0, "events": 0,
                              "queries": 809, "qrels": 919, "query_embeddings": 0,
                           "feedback_records": 0}
    validate(train)


def test_tables_have_the_schema_and_pass_validation(ds):
    for name, frame in ds.tables().items():
        require(frame, TABLES[name], what=name)
    validate(ds)


def test_first_tenth_and_last_memory(ds):
    def record(memory_id, title, structured, row):
        return {"memory_id": memory_id, "user_id": "scifact", "agent_id": None, "run_id": None,
                "tenant_id": None, "sub_tenant_id": None, "role": None, "allowed_roles": None,
                "metadata": json.dumps({"title": title, "structured": structured}),
                "created_at": None, "updated_at": None, "deleted_at": None,
                "_file": "corpus.csv", "_row": row}

    rows = [ds.memories.row(i, named=True) for i in (0, 9, -1)]
    texts = [row.pop("text") for row in rows]
    assert rows == [
        record("4983", "Microstructural development of human newborn cerebral white matter "
               "assessed in vivo by diffusion tensor magnetic resonance imaging.", False,
               "row 1"),
        record("70490", "Simplifying likelihood ratios", False, "row 10"),
        record("198309074", "Adhesion molecules and chemokines: relation to anthropometric, "
               "body composition, biochemical and dietary variables", False, "row 5183"),
    ]
    assert [len(t) for t in texts] == [1941, 516, 1796]
    assert texts[0].startswith(
        "Microstructural development of human newborn cerebral white matter assessed in vivo "
        "by diffusion tensor magnetic resonance imaging. Alterations of the architecture")
    # Sentences are joined by one space, never glued together.
    assert "functional disabilities. A line scan" in texts[0]
    assert texts[1].startswith("Simplifying likelihood ratios Likelihood ratios are one of")
    assert [hashlib.sha256(t.encode()).hexdigest()[:16] for t in texts] == [
        "447f8da635b297f9", "825ace8564cf204f", "d9f5f426718bd3ae"]


def test_first_tenth_and_last_query_and_qrel(ds):
    def query(query_id, text, row):
        return {"query_id": query_id, "text": text, "user_id": "scifact", "agent_id": None,
                "run_id": None, "question_type": None, "_file": "claims_validation.csv",
                "_row": row}

    assert [ds.queries.row(i, named=True) for i in (0, 9, -1)] == [
        query("1", "0-dimensional biomaterials show inductive properties.", "row 1"),
        query("51", "ALDH1 expression is associated with better breast cancer outcomes.",
              "row 13"),
        query("1395", "p16INK4A accumulation is  linked to an abnormal wound response caused "
              "by the microinvasive step of advanced Oral Potentially Malignant Lesions "
              "(OPMLs).", "row 450"),
    ]
    assert [ds.qrels.row(i) for i in (0, 9, -1)] == [
        ("1", "31715818", 1, "qrels_test.tsv", "row 1"),
        ("50", "12580014", 1, "qrels_test.tsv", "row 10"),
        ("1395", "17717391", 1, "qrels_test.tsv", "row 339"),
    ]


def test_schemas_without_provenance(ds):
    assert ds.memories.drop("_file", "_row").schema == MEMORIES
    assert ds.queries.drop("_file", "_row").schema == QUERIES
    assert ds.qrels.drop("_file", "_row").schema == QRELS


def test_two_loads_give_identical_frames_and_digest(ds):
    again = load_scifact()
    assert again.digest == ds.digest
    for name, frame in ds.tables().items():
        assert_frame_equal(getattr(again, name), frame)
    assert load_scifact("train").digest != ds.digest


def test_unknown_split():
    with pytest.raises(ValueError, match=r"split must be one of \['test', 'train'\], got 'dev'"):
        load_scifact("dev")


# ---- abstract cells ---------------------------------------------------------------------------
@pytest.mark.parametrize(("cell", "sentences"), [
    ("['One.'\n 'Two.']", ["One.", "Two."]),
    ("['a' 'b' \"it's\"]", ["a", "b", "it's"]),
    ("['tab\\there' 'back\\\\slash']", ["tab\there", "back\\slash"]),
    ("['']", [""]),
    ("[]", []),
])
def test_sentences_of_an_abstract_cell(cell, sentences):
    assert _sentences(cell, file="corpus.csv", row=3) == sentences


def test_bad_abstract_cell_names_file_row_and_field():
    with pytest.raises(IngestError,
                       match=r"corpus.csv row 3: field 'abstract': cannot read the sentence"):
        _sentences("['unterminated", file="corpus.csv", row=3)


def test_missing_column(tmp_path):
    for name in SHA256:
        (tmp_path / name).write_bytes((SCIFACT_DIR / name).read_bytes())
    (tmp_path / "qrels_test.tsv").write_text("query-id\tdoc\tscore\n1\t2\t1\n")
    with pytest.raises(IngestError, match=r"qrels_test.tsv: missing columns \['corpus-id'\]"):
        load_scifact(directory=tmp_path)


def test_bad_score_names_file_row_and_field(tmp_path):
    for name in SHA256:
        (tmp_path / name).write_bytes((SCIFACT_DIR / name).read_bytes())
    (tmp_path / "qrels_test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t4983\t1\n"
                                             "3\t4983\tyes\n")
    message = r"qrels_test.tsv row 2: field 'score': expected an integer, got 'yes'"
    with pytest.raises(IngestError, match=message):
        load_scifact(directory=tmp_path)


# ---- BM25 -------------------------------------------------------------------------------------
def slow_bm25(docs: list[str], query: str, k1: float, b: float) -> list[float]:
    """Textbook BM25 with Lucene's idf, one document at a time (the oracle)."""
    tokenized = [re.findall(r"[a-z0-9]+", d.lower()) for d in docs]
    avgdl = sum(map(len, tokenized)) / len(tokenized)
    df = Counter(t for toks in tokenized for t in set(toks))
    scores = []
    for toks in tokenized:
        tf = Counter(toks)
        score = 0.0
        for term in re.findall(r"[a-z0-9]+", query.lower()):
            if tf[term]:
                idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] * (k1 + 1) / (
                    tf[term] + k1 * (1 - b + b * len(toks) / avgdl))
        scores.append(score)
    return scores


def test_bm25_weights_match_the_slow_oracle(ds):
    docs = ds.memories["text"].head(200).to_list()
    weights, vocabulary = bm25_weights(docs, k1=1.2, b=0.75)
    for query in [*ds.queries["text"].head(20).to_list(), "cell cell CELL", "zzz unknown"]:
        counts = np.zeros(len(vocabulary))
        for token in re.findall(r"[a-z0-9]+", query.lower()):
            if token in vocabulary:
                counts[vocabulary[token]] += 1
        fast = weights @ counts
        np.testing.assert_allclose(fast, slow_bm25(docs, query, 1.2, 0.75), rtol=1e-12,
                                   atol=1e-12)


def tiny(docs: list[str], query: str, relevant: dict[str, int]) -> Dataset:
    n = len(docs)
    memories = pl.DataFrame({"memory_id": [f"d{i}" for i in range(n)], "text": docs}).select(
        *(pl.col(c) if c in ("memory_id", "text") else pl.lit(None, t).alias(c)
          for c, t in MEMORIES.items()))
    queries = pl.DataFrame({"query_id": ["q"], "text": [query]}).select(
        *(pl.col(c) if c in ("query_id", "text") else pl.lit(None, t).alias(c)
          for c, t in QUERIES.items()))
    qrels = pl.DataFrame({"query_id": "q", "memory_id": list(relevant),
                          "relevance": list(relevant.values())}, schema=QRELS)
    return Dataset("tiny", "1", "0", memories=memories, queries=queries, qrels=qrels)


def test_ndcg_keeps_ties_in_memory_order_and_uses_all_judged_for_the_ideal():
    docs = ["zebra zebra"] + ["filler words here"] * 11
    # d5 scores 0 like d1..d11 and ties keep memory order, so it is ranked 6th.
    got = bm25_ndcg10(tiny(docs, "zebra", {"d0": 1, "d5": 1}))
    assert got == pytest.approx((1 + 1 / math.log2(7)) / (1 + 1 / math.log2(3)), abs=1e-15)
    # d11 is ranked 12th, outside the top 10, and still counts in the ideal DCG.
    got = bm25_ndcg10(tiny(docs, "zebra", {"d0": 1, "d11": 1}))
    assert got == pytest.approx(1 / (1 + 1 / math.log2(3)), abs=1e-15)
    # Linear gain: a grade-2 memory at rank 1 and a grade-1 memory unretrieved.
    got = bm25_ndcg10(tiny(docs, "zebra", {"d0": 2, "d11": 1}))
    assert got == pytest.approx(2 / (2 + 1 / math.log2(3)), abs=1e-15)


def test_ndcg_needs_a_query_with_a_relevant_memory():
    with pytest.raises(ValueError, match="no query has a relevant memory"):
        bm25_ndcg10(tiny(["a b"], "a", {"d0": 0}))


def test_bm25_ndcg10_on_the_test_split(ds):
    # BEIR reports about 0.665 for BM25 on SciFact; the card's check (k1=0.9, b=0.4) 0.659.
    assert bm25_ndcg10(ds) == pytest.approx(0.66221, abs=5e-6)

