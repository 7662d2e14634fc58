"""LoCoMo source: golden facts of the shipped file, the card's evidence defects, edges, digest."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets.embed import TfidfSvdEmbedder
from msprlab.datasets.schema import PROVENANCE, TABLES, require
from msprlab.datasets.sources.locomo import (
    LOCOMO_PATH,
    load_locomo,
    locomo_anomalies,
)
from msprlab.datasets.store import ingest, load_dataset
from msprlab.datasets.validate import IngestError, validate
from msprlab.engine.config import EdgesConfig
from msprlab.engine.edges import EdgeBuilder
from msprlab.engine.graph import ContextGraph

from locomo_excerpt import locomo_excerpt

DATA = LOCOMO_PATH.parent
SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"


@pytest.fixture(scope="module")
def ds():
    return load_locomo()


@pytest.fixture(scope="module")
def anomalies() -> pl.DataFrame:
    return locomo_anomalies()


@pytest.fixture(scope="module")
def samples() -> list[dict[str, Any]]:
    return json.loads(LOCOMO_PATH.read_bytes())


def mini_samples(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first two conversations cut to sessions 1-3 and five questions each."""
    return locomo_excerpt(samples, questions=5)


def write(tmp_path: Path, data: Any, name: str = "mini.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# ---- the shipped file ------------------------------------------------------------------
def test_shipped_file_matches_its_card():
    raw = (DATA / "locomo10.json").read_bytes()
    card = (DATA / "CARD.md").read_text()
    assert hashlib.sha256(raw).hexdigest() == SHA256
    assert f"sha256 `{SHA256}`" in card
    assert f"({len(raw):,} bytes)" in card
    assert "CC BY-NC 4.0" in card and "Maharana et al." in card
    assert "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376" in card
    license_text = (DATA / "LICENSE.txt").read_text()
    assert license_text.startswith("Attribution-NonCommercial 4.0 International")


# ---- golden facts ------------------------------------------------------------------------
def test_counts(ds):
    assert ds.source == "locomo"
    assert ds.counts() == {"memories": 5882, "embeddings": 0, "edges": 11220,
                           "events": 5882, "queries": 1986, "qrels": 2820, "query_embeddings": 0,
                           "feedback_records": 0}
    assert ds.memories["user_id"].n_unique() == 10
    assert ds.memories["run_id"].n_unique() == 272
    assert ds.queries["query_id"].is_in(ds.qrels["query_id"].implode()).sum() == 1982
    by_type = dict(ds.queries.group_by("question_type").len().iter_rows())
    assert by_type == {"multi-hop": 282, "temporal": 321, "open-domain": 96,
                       "single-hop": 841, "adversarial": 446}
    counts = ds.memories.group_by("user_id").len()
    assert counts["len"].min() == 369 and counts["len"].max() == 689
    with_caption = ds.memories.filter(pl.col("metadata").str.contains('"blip_caption"'))
    assert with_caption.height == 1226
    assert ds.memories.filter(pl.col("metadata").str.contains('"img_url"')).height == 910


def test_tables_have_the_schema_and_pass_validation(ds):
    for name, frame in ds.tables().items():
        require(frame, TABLES[name], what=name)
    validate(ds)


def test_first_tenth_and_last_memory(ds):
    def record(memory_id, text, run_id, metadata, at, row):
        return {"memory_id": memory_id, "text": text, "user_id": memory_id.split(":")[0],
                "agent_id": None, "run_id": run_id, "tenant_id": None, "sub_tenant_id": None,
                "role": None, "allowed_roles": None, "metadata": metadata, "created_at": at,
                "updated_at": at, "deleted_at": None, "_file": "locomo10.json", "_row": row}

    assert ds.memories.row(0, named=True) == record(
        "conv-26:D1:1", "Caroline: Hey Mel! Good to see you! How have you been?",
        "conv-26:session_1", '{"speaker": "Caroline", "dia_id": "D1:1", "session": 1}',
        datetime(2023, 5, 8, 13, 56), "[0].conversation.session_1[0]")
    assert ds.memories.row(9, named=True) == record(
        "conv-26:D1:10",
        "Melanie: Wow, Caroline! What kinda jobs are you thinkin' of? Anything that stands out?",
        "conv-26:session_1", '{"speaker": "Melanie", "dia_id": "D1:10", "session": 1}',
        datetime(2023, 5, 8, 13, 56, 9), "[0].conversation.session_1[9]")
    assert ds.memories.row(-1, named=True) == record(
        "conv-50:D30:24", "Calvin: Thanks! You too. Talk to you later!", "conv-50:session_30",
        '{"speaker": "Calvin", "dia_id": "D30:24", "session": 30}',
        datetime(2023, 11, 17, 10, 54, 23), "[9].conversation.session_30[23]")


def test_image_turn_text_and_metadata(ds):
    turn = ds.memories.filter(memory_id="conv-26:D1:5").row(0, named=True)
    assert turn["text"] == (
        "Caroline: The transgender stories were so inspiring! I was so happy and thankful for "
        "all the support. [image: a photo of a dog walking past a wall with a painting of a "
        "woman]")
    assert json.loads(turn["metadata"]) == {
        "speaker": "Caroline", "dia_id": "D1:5", "session": 1,
        "img_url": ["https://i.redd.it/l7hozpetnhlb1.jpg"],
        "blip_caption": "a photo of a dog walking past a wall with a painting of a woman",
        "query": "transgender pride flag mural"}


def test_first_tenth_and_last_query_and_qrel(ds):
    def query(query_id, text, question_type, row):
        return {"query_id": query_id, "text": text, "user_id": query_id.split(":")[0],
                "agent_id": None, "run_id": None, "question_type": question_type,
                "_file": "locomo10.json", "_row": row}

    assert ds.queries.row(0, named=True) == query(
        "conv-26:q0", "When did Caroline go to the LGBTQ support group?", "temporal",
        "[0].qa[0]")
    assert ds.queries.row(9, named=True) == query(
        "conv-26:q9", "When did Caroline meet up with her friends, family, and mentors?",
        "temporal", "[0].qa[9]")
    assert ds.queries.row(-1, named=True) == query(
        "conv-50:q203", "Where did Calvin take a stunning photo of a waterfall?", "adversarial",
        "[9].qa[203]")
    assert [ds.qrels.row(i) for i in (0, 9, -1)] == [
        ("conv-26:q0", "conv-26:D1:3", 1, "locomo10.json", "[0].qa[0].evidence[0]"),
        ("conv-26:q7", "conv-26:D2:14", 1, "locomo10.json", "[0].qa[7].evidence[1]"),
        ("conv-50:q203", "conv-50:D30:15", 1, "locomo10.json", "[9].qa[203].evidence[0]"),
    ]


def test_sessions_are_runs_starting_at_their_date_one_second_per_turn(ds, samples):
    conversation = samples[0]["conversation"]
    assert conversation["session_2_date_time"] == "1:14 pm on 25 May, 2023"
    session = ds.memories.filter(run_id="conv-26:session_2")
    assert session.height == len(conversation["session_2"])
    assert session["created_at"][0] == datetime(2023, 5, 25, 13, 14)
    assert session["created_at"].diff().drop_nulls().dt.total_seconds().unique().to_list() == [1]
    # "12:28 am" is just after midnight (%I reads 12 as 0).
    assert ds.memories.filter(run_id="conv-30:session_1")["created_at"][0] == datetime(
        2023, 1, 20, 16, 4)


def test_timeline_is_memory_added_in_time_order(ds):
    events = ds.events
    assert events["kind"].unique().to_list() == ["memory_added"]
    assert events["event_id"].to_list() == list(range(5882))
    assert events.select(pl.col("ts").diff().min()).item().total_seconds() >= 0
    first, last = events.row(0, named=True), events.row(-1, named=True)
    assert (first["ts"], first["seq"], first["memory_id"]) == (
        datetime(2022, 1, 21, 19, 31), 1451, "conv-42:D1:1")
    assert (last["ts"], last["seq"], last["memory_id"]) == (
        datetime(2024, 1, 12, 13, 41, 14), 2759, "conv-43:D29:15")
    joined = events.join(ds.memories, on="memory_id")
    assert joined.height == 5882
    assert (joined["ts"] == joined["created_at"]).all()
    assert (joined["run_id"] == joined["run_id_right"]).all()


# ---- evidence defects, as the card lists them ---------------------------------------------
def qrels_of(ds, query_id: str) -> list[str]:
    return ds.qrels.filter(query_id=query_id)["memory_id"].to_list()


@pytest.mark.parametrize(("query_id", "kind", "value", "resolved", "reason"), [
    ("conv-26:q37", "split", "D8:6; D9:17", "D8:6 D9:17", "2 ids in one string"),
    ("conv-49:q31", "split", "D9:1 D4:4 D4:6", "D9:1 D4:4 D4:6", "3 ids"),
    ("conv-49:q38", "split", "D22:1 D22:2 D9:10 D9:11", "D22:1 D22:2 D9:10 D9:11", "4 ids"),
    ("conv-49:q46", "split", "D21:18 D21:22 D11:15 D11:19", "D21:18 D21:22 D11:15 D11:19",
     "4 ids"),
    ("conv-43:q18", "normalised", "D:11:26", "D11:26", "read 'D:11:26' as 'D11:26'"),
    ("conv-50:q69", "normalised", "D30:05", "D30:5", "read 'D30:05' as 'D30:5'"),
    ("conv-42:q88", "unusable", "D", None, "not a turn id"),
    ("conv-42:q58", "unusable", "D10:19", None, "session 10 has turns 1..16; turn 19 is past"),
    ("conv-47:q38", "unusable", "D4:36", None, "session 4 has turns 1..25; turn 36 is past"),
    ("conv-50:q5", "duplicate", "D4:5", "D4:5", "one qrel"),
    ("conv-26:q30", "no_evidence", "[]", None, "abstention"),
    ("conv-26:q46", "no_evidence", "[]", None, "abstention"),
    ("conv-50:q39", "no_evidence", "[]", None, "abstention"),
    ("conv-50:q42", "no_evidence", "[]", None, "abstention"),
])
def test_each_evidence_defect_is_reported(anomalies, query_id, kind, value, resolved, reason):
    rows = anomalies.filter(query_id=query_id, kind=kind)
    assert rows.height == 1
    row = rows.row(0, named=True)
    assert (row["value"], row["resolved"]) == (value, resolved)
    assert reason in row["reason"]


def test_evidence_defects_are_repaired_or_left_out_of_the_qrels(ds):
    assert qrels_of(ds, "conv-26:q37") == ["conv-26:D8:6", "conv-26:D9:17"]
    assert qrels_of(ds, "conv-49:q46") == [f"conv-49:{d}" for d in
                                          ("D21:18", "D21:22", "D11:15", "D11:19")]
    assert "conv-43:D11:26" in qrels_of(ds, "conv-43:q18")
    assert qrels_of(ds, "conv-50:q69") == ["conv-50:D30:5"]
    assert qrels_of(ds, "conv-42:q88") == ["conv-42:D1:18", "conv-42:D1:20"]
    assert "conv-42:D10:19" not in qrels_of(ds, "conv-42:q58")
    assert len(qrels_of(ds, "conv-42:q58")) == 6
    assert qrels_of(ds, "conv-47:q38") == ["conv-47:D18:1", "conv-47:D18:7"]
    assert qrels_of(ds, "conv-50:q5") == ["conv-50:D4:5", "conv-50:D5:5"]
    for query_id in ("conv-26:q30", "conv-26:q46", "conv-50:q39", "conv-50:q42"):
        assert query_id in ds.queries["query_id"].to_list()  # kept, for abstention
        assert qrels_of(ds, query_id) == []


def test_no_evidence_id_is_dropped_silently(ds, samples, anomalies):
    """Every id the evidence names is a qrel, or an unusable or duplicate anomaly."""
    named = sum(len([p for p in re.split(r"[;\s]+", e) if p])
                for s in samples for q in s["qa"] for e in q["evidence"])
    kinds = dict(anomalies.group_by("kind").len().iter_rows())
    assert named == ds.qrels.height + kinds["unusable"] + kinds["duplicate"]
    assert {str(k): v for k, v in kinds.items()} == {
        "split": 4, "normalised": 2, "duplicate": 1, "unusable": 3, "no_evidence": 4,
        "date_without_session": 16}


def test_dates_without_turns_are_reported(samples, anomalies):
    dangling = anomalies.filter(kind="date_without_session")
    assert dangling["sample_id"].unique().to_list() == ["conv-26"]
    assert dangling["where"].to_list() == [f"conversation.session_{n}_date_time"
                                           for n in range(20, 36)]
    assert "session_20" not in samples[0]["conversation"]


def test_load_logs_the_anomalies(caplog):
    with caplog.at_level(logging.INFO, logger="msprlab.datasets.sources.locomo"):
        load_locomo()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["locomo10.json: 30 anomalies (date_without_session 16, duplicate 1, "
                        "no_evidence 4, normalised 2, split 4, unusable 3); see "
                        "locomo_anomalies()"]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 30
    assert any("conv-42 qa[88].evidence[1]: unusable 'D'" in m for m in infos)


# ---- edges --------------------------------------------------------------------------------
def test_edges_by_type(ds):
    by_type = dict(ds.edges.group_by("type").len().iter_rows())
    # One REPLY_TO/TEMPORAL_NEXT chain per session: 5,882 turns - 272 sessions.
    assert by_type == {"REPLY_TO": 5610, "TEMPORAL_NEXT": 5610}
    assert dict(ds.edges.group_by("type").agg(pl.col("weight").unique()).iter_rows()) == {
        "REPLY_TO": [1.0], "TEMPORAL_NEXT": [0.6]}


def test_chain_edges_join_consecutive_turns_of_one_session(ds):
    def end(side: str) -> pl.DataFrame:
        return ds.memories.select(pl.col("memory_id").alias(side),
                                  pl.col("run_id").alias(f"{side}_run"),
                                  pl.col("created_at").alias(f"{side}_at"))

    edges = ds.edges.join(end("src"), on="src").join(end("dst"), on="dst")
    assert edges.height == ds.edges.height
    assert (edges["src_run"] == edges["dst_run"]).all()
    assert (edges["dst_at"] - edges["src_at"]).dt.total_seconds().unique().to_list() == [1]
    assert (edges["created_at"] == edges["dst_at"]).all()  # stamped when the reply is added


def test_edges_follow_the_config():
    ds = load_locomo(edges=EdgesConfig(enable_reply_to=False))
    assert ds.edges["type"].unique().to_list() == ["TEMPORAL_NEXT"]
    ds = load_locomo(edges=EdgesConfig(enable_temporal_next=False, enable_reply_to=False))
    assert ds.edges.height == 0


def test_topic_similar_edges_appear_with_an_embedder(tmp_path, samples):
    path = write(tmp_path, mini_samples(samples))
    texts = load_locomo(path).memories["text"]
    embedder = TfidfSvdEmbedder(dim=16, seed=0).fit(texts.to_list())
    ds = load_locomo(path, embed=embedder.embed, embedder_name=embedder.name)
    validate(ds)
    topic = ds.edges.filter(type="TOPIC_SIMILAR")
    assert topic.height > 0
    assert (topic["weight"] >= EdgesConfig().topic_min_similarity).all()
    owner = pl.col("src").str.split(":").list.first() == pl.col("dst").str.split(":").list.first()
    assert topic.select(owner.all()).item()
    assert topic.group_by("src").len()["len"].max() <= EdgesConfig().topic_top_k
    assert ds.embeddings.height == ds.memories.height
    assert ds.embeddings["embedder"].unique().to_list() == ["tfidf-svd"]
    assert ds.digest != load_locomo(path).digest


def test_one_graph_per_conversation_gives_the_edges_of_one_shared_graph(tmp_path, samples):
    """The loader's per-owner graphs match feeding every turn to one graph and builder."""
    path = write(tmp_path, mini_samples(samples))
    texts = load_locomo(path).memories["text"].to_list()
    embedder = TfidfSvdEmbedder(dim=8, seed=0).fit(texts)  # small dim: many TOPIC_SIMILAR
    ds = load_locomo(path, embed=embedder.embed, embedder_name=embedder.name)
    cfg = EdgesConfig()
    graph, builder = ContextGraph(), EdgeBuilder()
    rows = (ds.memories.join(ds.embeddings, on="memory_id", maintain_order="left")
            .with_row_index("i").sort("created_at", "i"))
    for row in rows.iter_rows(named=True):
        builder.on_memory_created(
            graph, cfg, memory_id=row["memory_id"], text=row["text"], user_id=row["user_id"],
            agent_id=None, run_id=row["run_id"], metadata=json.loads(row["metadata"]),
            embedding=row["vector"], now=row["created_at"])
    shared = {(e.src, e.dst, e.type.value, e.weight, e.created_at) for e in graph.edges()}
    assert set(ds.edges.select("src", "dst", "type", "weight", "created_at").iter_rows()) == shared
    assert ds.edges.filter(type="TOPIC_SIMILAR").height > 100


@pytest.mark.slow
def test_topic_similar_on_the_whole_file():
    texts = load_locomo().memories["text"].to_list()
    embedder = TfidfSvdEmbedder(dim=256, seed=0).fit(texts)
    ds = load_locomo(embed=embedder.embed, embedder_name=embedder.name)
    validate(ds)
    assert dict(ds.edges.group_by("type").len().iter_rows()) == {
        "REPLY_TO": 5610, "TEMPORAL_NEXT": 5610, "TOPIC_SIMILAR": 106}


# ---- digest and determinism ----------------------------------------------------------------
def test_two_loads_give_identical_frames_and_digest(ds):
    again = load_locomo()
    assert again.digest == ds.digest
    for name, frame in ds.tables().items():
        assert_frame_equal(getattr(again, name), frame)


def test_digest_covers_the_parameters(ds):
    assert len(ds.digest) == 64
    assert load_locomo(edges=EdgesConfig(topic_top_k=3)).digest != ds.digest


def test_store_round_trip(ds, tmp_path):
    report = ingest(ds, tmp_path / "locomo.duckdb")
    assert report.written and report.counts == ds.counts()
    back = load_dataset(tmp_path / "locomo.duckdb")
    assert back.digest == ds.digest
    for name, frame in ds.tables().items():
        assert_frame_equal(getattr(back, name), frame.drop(PROVENANCE, strict=False))
    assert not ingest(ds, tmp_path / "locomo.duckdb").written  # same digest: a no-op


# ---- bad input ------------------------------------------------------------------------------
def _break(samples, change) -> list[dict[str, Any]]:
    broken = copy.deepcopy(mini_samples(samples))
    change(broken)
    return broken


def _set(obj: dict[str, Any], key: str, value: Any) -> None:
    obj[key] = value


BAD_INPUTS = [
    (lambda s: _set(s[0]["conversation"], "session_2_date_time", "yesterday"),
     r"mini.json \[0\].conversation: field 'session_2_date_time': cannot read 'yesterday' "
     r"as '%I:%M %p on %d %B, %Y'"),
    (lambda s: _set(s[1]["conversation"]["session_1"][2], "dia_id", "D1:30"),
     r"mini.json \[1\].conversation.session_1\[2\]: field 'dia_id': expected 'D1:3' "
     r"\(session 1, turn 3\), got 'D1:30'"),
    (lambda s: _set(s[0]["qa"][4], "category", 6),
     r"mini.json \[0\].qa\[4\]: field 'category': expected one of \[1, 2, 3, 4, 5\], got 6"),
    (lambda s: s[1].pop("qa"), r"mini.json \[1\]: field 'qa': missing"),
    (lambda s: _set(s[0]["qa"][0], "evidence", "D1:3"),
     r"mini.json \[0\].qa\[0\]: field 'evidence': expected list, got 'D1:3'"),
    (lambda s: _set(s[0]["conversation"]["session_1"][0], "text", None),
     r"field 'text': expected str, got None"),
]


@pytest.mark.parametrize(("change", "message"), BAD_INPUTS)
def test_bad_input_names_file_place_and_field(tmp_path, samples, change, message):
    path = write(tmp_path, _break(samples, change))
    with pytest.raises(IngestError, match=message):
        load_locomo(path)


def test_not_json(tmp_path):
    path = tmp_path / "mini.json"
    path.write_text('[{"sample_id": ')
    with pytest.raises(IngestError, match=r"mini.json line 1 column 16: not JSON"):
        load_locomo(path)


@pytest.mark.parametrize(("result", "message"), [
    (lambda texts: [[1.0, 0.0]] * (len(texts) - 1), r"shape \(116, dim >= 1\).*got shape"),
    (lambda texts: [[float("nan")]] * len(texts), r"non-finite value in row 0"),
])
def test_embed_must_return_one_finite_row_per_text(tmp_path, samples, result, message):
    path = write(tmp_path, mini_samples(samples))
    with pytest.raises(ValueError, match=message):
        load_locomo(path, embed=result)
