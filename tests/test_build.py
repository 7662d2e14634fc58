"""`msprlab.datasets.build`: settings validated on construction, digests that cover every
parameter, and the builds the ingest verbs call, on small inputs."""

from __future__ import annotations

import json
from dataclasses import replace

import polars as pl
import pytest

from msprlab.datasets.build import (
    LogSpec,
    build_synthetic,
    default_logging_config,
    default_p_helpful,
    make_click_model,
    with_embeddings,
)
from msprlab.datasets.clicks import (
    CascadeModel,
    DependentClickModel,
    PositionBasedModel,
    VerdictModel,
)
from msprlab.datasets.embed import TfidfSvdEmbedder
from msprlab.datasets.sidecars import index_rows, truth_record
from msprlab.datasets.synthetic import SyntheticSpec, generate_synthetic
from msprlab.datasets.validate import validate
from msprlab.engine import EngineConfig

SMALL = SyntheticSpec(n_users=2, memories_per_user=12, queries_per_user=2)


def test_the_default_logging_ranker_records_mspr_state_with_zero_weights() -> None:
    cfg = default_logging_config()
    assert cfg.mspr.enabled and cfg.mspr.feedback.enabled and cfg.mspr.success.enabled
    assert cfg.mspr.frequency.enabled and not cfg.mspr.intent.enabled
    r = cfg.retrieval
    assert (r.delta_personal, r.epsilon_frequency, r.zeta_success) == (0.0, 0.0, 0.0)
    assert replace(cfg, mspr=EngineConfig().mspr) == EngineConfig()


@pytest.mark.parametrize(("name", "options", "expected"), [
    ("pbm", {"eta": 0.5, "max_grade": 1}, PositionBasedModel(eta=0.5, max_grade=1)),
    ("cascade", {"noise": 0.2}, CascadeModel(noise=0.2)),
    ("dcm", {"continuation": (0.9,)}, DependentClickModel(continuation=(0.9,))),
])
def test_make_click_model(name, options, expected) -> None:
    assert make_click_model(name, **options) == expected


@pytest.mark.parametrize(("name", "options", "message"), [
    ("ubm", {}, "unknown click model 'ubm'; known: pbm, cascade, dcm"),
    ("dcm", {"eta": 1.0}, "eta applies to the pbm click model only"),
    ("pbm", {"continuation": (0.5,)}, "continuation applies to the dcm click model only"),
])
def test_make_click_model_rejects(name, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_click_model(name, **options)


def test_default_p_helpful() -> None:
    assert default_p_helpful(1) == (0.1, 0.95)
    assert default_p_helpful(3) == VerdictModel().p_helpful
    with pytest.raises(ValueError, match=r"give one probability per grade 0\.\.2"):
        default_p_helpful(2)


@pytest.mark.parametrize(("change", "message"), [
    ({"n_searches": 0}, "`n_searches >= 1` must hold, but got 0"),
    ({"n_searches": True}, "`n_searches >= 1` must hold, but got True"),
    ({"limit": 0}, "`limit >= 1` must hold"),
    ({"zipf_s": -1.0}, "`zipf_s >= 0` must hold"),
    ({"mean_gap_seconds": float("inf")}, "`mean_gap_seconds > 0` must hold"),
    ({"verdict_model": VerdictModel(p_helpful=(0.1, 0.9))},
     r"grades 0\.\.3, so p_helpful needs 4 values"),
])
def test_log_spec_rejects(change, message) -> None:
    with pytest.raises(ValueError, match=message):
        LogSpec(**{"n_searches": 10} | change)


def test_synthetic_build_is_deterministic_and_its_digest_covers_the_log() -> None:
    log = LogSpec(n_searches=20)
    first, truth = build_synthetic(SMALL, log, seed=3)
    again, _ = build_synthetic(SMALL, log, seed=3)
    assert first.digest == again.digest
    assert first.events.equals(again.events)
    validate(first)
    digests = {first.digest,
               build_synthetic(SMALL, log, seed=4)[0].digest,
               build_synthetic(SMALL, replace(log, n_searches=21), seed=3)[0].digest,
               build_synthetic(SMALL, replace(log, click_model=CascadeModel()), seed=3)[0].digest,
               build_synthetic(SMALL, None, seed=3)[0].digest}
    assert len(digests) == 5
    record = truth_record(truth, SMALL, seed=3, digest=first.digest)
    assert record["planted_weights"]["dense"] == SMALL.weights.dense
    assert json.loads(json.dumps(record)) == record  # plain JSON, round-trips exactly


def test_with_embeddings_folds_the_vectors_into_the_digest() -> None:
    ds, _ = generate_synthetic(SMALL, seed=1)
    bare = replace(ds, embeddings=ds.embeddings.clear())
    embedded = with_embeddings(bare, TfidfSvdEmbedder(dim=4))
    validate(embedded)
    assert embedded.embeddings.height == bare.memories.height
    assert embedded.embeddings["embedder"].unique().to_list() == ["tfidf-svd"]
    assert embedded.digest == with_embeddings(bare, TfidfSvdEmbedder(dim=4)).digest
    assert len({bare.digest, embedded.digest,
                with_embeddings(bare, TfidfSvdEmbedder(dim=5)).digest}) == 3


def test_index_rows_carry_the_owner_payload() -> None:
    ds, _ = generate_synthetic(SMALL, seed=1)
    ids, vectors, payloads, embedder = index_rows(ds)
    assert ids == ds.memories["memory_id"].to_list()
    assert vectors.shape == (ds.memories.height, SMALL.dim)
    assert embedder == "synthetic-topics"
    first = ds.memories.row(0, named=True)
    assert payloads[0] == {"user_id": first["user_id"], "run_id": first["run_id"],
                           "tenant_id": first["tenant_id"], "role": first["role"],
                           "allowed_roles": first["allowed_roles"]}
    with pytest.raises(ValueError, match="needs the vectors of one embedder"):
        index_rows(replace(ds, embeddings=ds.embeddings.clear()))
    assert pl.Series(ids).is_unique().all()
