"""The click-log simulator: determinism, the timeline, verdicts for shown memories only,
repeats, event kinds and counts, and click rates against the click model."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.datasets import simulate as simulate_module
from msprlab.datasets.clicks import (
    CascadeModel,
    DependentClickModel,
    PositionBasedModel,
    VerdictModel,
    expected_click_rates,
)
from msprlab.datasets.schema import EVENTS, Dataset, require
from msprlab.datasets.simulate import simulate_log
from msprlab.datasets.synthetic import SyntheticSpec, generate_synthetic
from msprlab.datasets.validate import validate
from msprlab.engine import EngineConfig
from msprlab.engine.config import (
    FeedbackConfig,
    FrequencyConfig,
    IntentConfig,
    MsprConfig,
    SuccessConfig,
)
from msprlab.engine.success import hash_query

N_SEARCHES = 200
SPEC = SyntheticSpec(n_users=4, memories_per_user=24, queries_per_user=5, span_days=4.0)


def all_signals() -> EngineConfig:
    base = EngineConfig()
    return replace(
        base, retrieval=replace(base.retrieval, delta_personal=0.2, epsilon_frequency=0.1,
                                zeta_success=0.2),
        mspr=MsprConfig(enabled=True, intent=IntentConfig(enabled=True),
                        feedback=FeedbackConfig(enabled=True),
                        frequency=FrequencyConfig(enabled=True),
                        success=SuccessConfig(enabled=True, min_sample_size=2)))


@pytest.fixture(scope="module")
def corpus():
    return generate_synthetic(SPEC, seed=21)


def run(corpus, **overrides):
    ds, truth = corpus
    kwargs = {"logging_config": all_signals(), "click_model": PositionBasedModel(eta=0.7),
              "n_searches": N_SEARCHES, "seed": 4, "mean_gap_seconds": 1800.0,
              "query_vectors": None if truth is None else truth.query_vectors} | overrides
    return simulate_log(ds, **kwargs)


@pytest.fixture(scope="module")
def log(corpus) -> Dataset:
    return run(corpus)


def searches(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("kind") == "search")


def sessions(events: pl.DataFrame) -> pl.DataFrame:
    """Every event with the id, query, owner and shown list of the latest search before it."""
    latest = pl.when(pl.col("kind") == "search").then(pl.col("event_id")).forward_fill()
    return events.with_columns(session=latest).join(
        searches(events).select(session="event_id", search_ts="ts",
                                search_query_id="query_id", search_user="user_id",
                                search_shown="shown"), on="session", how="left")


def test_same_seed_gives_identical_frames(corpus) -> None:
    first, again = run(corpus, n_searches=80), run(corpus, n_searches=80)
    for name, frame in first.tables().items():
        assert_frame_equal(frame, again.tables()[name])
    assert first.digest == again.digest
    other = run(corpus, n_searches=80, seed=5)
    assert other.digest != first.digest
    assert not searches(other.events)["shown"].equals(searches(first.events)["shown"])


def test_events_follow_the_schema_and_one_dense_timeline(log) -> None:
    events = log.events
    require(events, EVENTS, what="events")
    validate(log)  # the event store's own ingest rules
    n = events.height
    assert events["event_id"].to_list() == list(range(n))
    assert events["seq"].to_list() == list(range(n))
    assert events["ts"].is_sorted()
    kind_rank = events["kind"].to_physical()
    same_ts = events["ts"] == events["ts"].shift(1)
    assert ((kind_rank >= kind_rank.shift(1)) | ~same_ts).fill_null(True).all()
    for name in ("memories", "embeddings", "edges", "queries", "qrels"):
        assert log.tables()[name] is getattr(log, name)


def test_kinds_and_counts(corpus, log) -> None:
    ds, _ = corpus
    counts = dict(log.events.group_by("kind").len().select(
        pl.col("kind").cast(pl.String), "len").iter_rows())
    assert counts["memory_added"] == ds.memories.height
    assert counts["search"] == N_SEARCHES
    # judge_rate 1: every click has a verdict; PBM with noise gives plenty of clicks.
    assert counts["click"] == counts["feedback"] > N_SEARCHES // 2
    assert set(counts) == {"memory_added", "search", "access", "click", "feedback"}
    found = searches(log.events)
    # The logging ranker counts accesses: one access event per shown result.
    assert counts["access"] == found["shown"].list.len().sum()
    assert (found["limit"] == 10).all()
    assert found["shown"].list.len().is_between(1, 10).all()
    # Each search carries its user's tenant and role (synthetic users have one each).
    tenants = dict(ds.memories.select("user_id", "tenant_id").unique().iter_rows())
    roles = dict(ds.memories.select("user_id", "role").unique().iter_rows())
    for user, filters in found.select("user_id", "filters").iter_rows():
        assert json.loads(filters) == {"tenant_id": tenants[user], "role": roles[user]}
    verdicts = log.events.filter(pl.col("kind") == "feedback")
    assert verdicts["helpful"].is_not_null().all()
    assert 0 < verdicts["helpful"].mean() < 1  # type: ignore[operator]
    judged_half = run(corpus, verdict_model=VerdictModel(judge_rate=0.5), n_searches=60)
    half = judged_half.events.group_by("kind").len()
    n = dict(half.select(pl.col("kind").cast(pl.String), "len").iter_rows())
    assert 0 < n["feedback"] < n["click"]


def test_access_events_are_the_engine_access_counts(corpus, log) -> None:
    """Each search's access events are its shown results, at its timestamp, after it."""
    events = sessions(log.events)
    access = events.filter(pl.col("kind") == "access")
    assert (access["ts"] == access["search_ts"]).all()
    per_search = access.group_by("session", maintain_order=True).agg("memory_id")
    shown = searches(log.events).select(session="event_id", shown="shown")
    joined = shown.join(per_search, on="session", how="left")
    assert joined["memory_id"].to_list() == joined["shown"].to_list()
    # A logging ranker that does not count accesses logs none.
    quiet = run(corpus, logging_config=replace(all_signals(), mspr=replace(
        all_signals().mspr, frequency=FrequencyConfig(enabled=False))), n_searches=40)
    assert "access" not in quiet.events["kind"].cast(pl.String).to_list()


def test_query_vectors_are_stored_as_used(corpus, log) -> None:
    stored = log.query_embeddings
    assert stored["query_id"].to_list() == corpus[0].queries["query_id"].to_list()
    assert stored["embedder"].n_unique() == 1


def test_access_and_verdicts_follow_the_search_that_showed_the_memory(log) -> None:
    reactions = sessions(log.events).filter(pl.col("kind").is_in(["click", "feedback"]))
    assert reactions.height > 0
    assert (reactions["ts"] > reactions["search_ts"]).all()
    assert (reactions["query_id"] == reactions["search_query_id"]).all()
    assert (reactions["user_id"] == reactions["search_user"]).all()
    shown = reactions.select(pl.col("search_shown").list.contains(pl.col("memory_id")))
    assert shown.to_series().all()
    # A verdict comes after the access of the same memory in the same session.
    clicks = reactions.filter(pl.col("kind") == "click").select(
        "session", "memory_id", access_ts="ts")
    verdicts = reactions.filter(pl.col("kind") == "feedback").join(
        clicks, on=["session", "memory_id"], how="left")
    assert (verdicts["ts"] > verdicts["access_ts"]).all()
    # Verdict text is the text of the search it judges.
    texts = searches(log.events).select(session="event_id", search_text="query")
    joined = verdicts.join(texts, on="session")
    assert (joined["query"] == joined["search_text"]).all()


def test_searches_come_after_their_evidence_and_show_only_existing_own_memories(
        corpus, log) -> None:
    ds, _ = corpus
    added = log.events.filter(pl.col("kind") == "memory_added").select(
        "memory_id", added_id="event_id")
    found = searches(log.events).select("event_id", "query_id", "user_id", "shown")
    evidence = (found.join(ds.qrels.filter(pl.col("relevance") > 0), on="query_id")
                .join(added, on="memory_id"))
    assert (evidence["added_id"] < evidence["event_id"]).all()
    shown = (found.explode("shown").rename({"shown": "memory_id"})
             .join(added, on="memory_id", how="left")
             .join(ds.memories.select("memory_id", owner="user_id"), on="memory_id"))
    assert (shown["added_id"] < shown["event_id"]).all()
    assert (shown["owner"] == shown["user_id"]).all()


def test_queries_repeat_with_variants_that_hash_alike(log) -> None:
    found = searches(log.events)
    repeats = found.group_by("query_id").agg(pl.col("query"), n=pl.len()).filter(
        pl.col("n") > 1)
    assert repeats.height >= 3
    varied = 0
    for texts in repeats["query"]:
        assert len({hash_query(t) for t in texts}) == 1
        varied += len(set(texts)) > 1
    assert varied >= 3


def test_each_verdict_is_recorded_in_the_engine_as_it_is_logged(corpus, monkeypatch) -> None:
    calls = []
    real = simulate_module.record_feedback

    def spy(state, memory_id, **kwargs):
        calls.append((memory_id, kwargs["helpful"], kwargs["now"], kwargs["query"],
                      kwargs["user_id"]))
        return real(state, memory_id, **kwargs)

    monkeypatch.setattr(simulate_module, "record_feedback", spy)
    logged = run(corpus, n_searches=60)
    verdicts = logged.events.filter(pl.col("kind") == "feedback")
    assert calls == list(verdicts.select("memory_id", "helpful", "ts", "query",
                                         "user_id").iter_rows())


@pytest.mark.parametrize("model", [PositionBasedModel(eta=0.7), CascadeModel(noise=0.2),
                                   DependentClickModel()], ids=lambda m: type(m).__name__)
def test_logged_clicks_agree_with_the_click_model(corpus, model) -> None:
    ds, _ = corpus
    logged = run(corpus, click_model=model, n_searches=150)
    grade = {(q, m): g for q, m, g in ds.qrels.iter_rows()}
    expected = np.zeros(10)
    variance = np.zeros(10)
    observed = np.zeros(10)
    per_session = sessions(logged.events)
    for qid, shown in searches(logged.events).select("query_id", "shown").iter_rows():
        p = expected_click_rates(model, np.array([grade.get((qid, m), 0) for m in shown]))
        expected[:p.size] += p
        variance[:p.size] += p * (1 - p)
    clicks = per_session.filter(pl.col("kind") == "click")
    for memory_id, shown in clicks.select("memory_id", "search_shown").iter_rows():
        observed[shown.index(memory_id)] += 1
    z = np.abs(observed - expected) / np.sqrt(np.maximum(variance, 1e-12))
    assert z.max() <= 4.0, (observed, expected.round(1))


def test_default_seeds_project_query_text_and_custom_seeds_are_filtered(corpus) -> None:
    ds, _ = corpus
    projected = run(corpus, query_vectors=None, n_searches=40)
    assert searches(projected.events)["shown"].list.len().min() >= 1
    owner = dict(ds.queries.select("query_id", "user_id").iter_rows())
    mine = ds.memories.group_by("user_id").agg("memory_id")
    by_user = dict(mine.iter_rows())

    def seeds(query_id: str) -> list[tuple[str, float]]:
        return [("no-such-memory", 0.9)] + [(m, 0.5) for m in by_user[owner[query_id]][:12]]

    custom = run(corpus, seeds_fn=seeds, n_searches=40)
    shown = searches(custom.events).explode("shown")["shown"]
    assert "no-such-memory" not in shown.to_list()


def test_deleted_memories_are_not_shown_after_their_deletion(corpus) -> None:
    ds, truth = corpus
    middle = ds.memories["created_at"].max() - timedelta(days=1)  # type: ignore[operator]
    doomed = ds.memories["memory_id"].head(40).to_list()
    memories = ds.memories.with_columns(
        deleted_at=pl.when(pl.col("memory_id").is_in(doomed)).then(pl.lit(middle))
        .otherwise(pl.col("deleted_at")))
    changed = replace(ds, memories=memories, events=ds.events.clear())
    logged = simulate_log(changed, logging_config=all_signals(),
                          click_model=PositionBasedModel(), n_searches=100, seed=2,
                          mean_gap_seconds=1800.0, query_vectors=truth.query_vectors)
    kinds = logged.events["kind"].cast(pl.String)
    assert (kinds == "memory_deleted").sum() == len(doomed)
    late = searches(logged.events).filter(pl.col("ts") > middle).explode("shown")
    assert late.height > 0
    assert not set(late["shown"]) & set(doomed)


BAD_RUNS = [
    ({"n_searches": 0}, "simulate_log: `n_searches >= 1` must hold, but got n_searches=0"),
    ({"zipf_s": -1.0}, "`zipf_s >= 0` must hold, but got zipf_s=-1.0"),
    ({"mean_gap_seconds": 0}, "`mean_gap_seconds > 0` must hold, but got mean_gap_seconds=0"),
    ({"limit": 0}, "`limit >= 1` must hold, but got limit=0"),
    ({"click_model": CascadeModel(max_grade=2)},
     "qrels hold grade 3, but the click model reads grades up to 2"),
    ({"query_vectors": np.zeros((3, 2))}, "query_vectors has shape (3, 2), expected (20, "),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_RUNS)
def test_bad_arguments_are_rejected(corpus, overrides, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        run(corpus, **overrides)


def test_bad_inputs_are_rejected(corpus, log) -> None:
    ds, _ = corpus
    with pytest.raises(ValueError, match=r"already holds \d+ search, feedback or access"):
        run((log, None))
    early = ds.memories["created_at"].min()
    with pytest.raises(ValueError, match="is before the first answerable query"):
        run(corpus, start=early - timedelta(days=1))
    orphan = ds.qrels.with_columns(memory_id=pl.lit("m-unknown"))
    with pytest.raises(ValueError, match="qrels: memory_id 'm-unknown' is not in the dataset"):
        run((replace(ds, qrels=orphan), None))
    no_vectors = replace(ds, embeddings=ds.embeddings.clear())
    with pytest.raises(ValueError, match="has no embeddings, so the default seeds"):
        run((no_vectors, None))


def test_the_logging_replay_runs_with_the_collector_off_and_leaves_it_as_it_was(
        corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector's passes walk the growing engine state and free nothing (a replay
    makes no cycles): off inside, as it was after, also when the replay raises."""
    import gc
    inside, replay = [], simulate_module._replay

    def recorded(*args, **kwargs):
        inside.append(gc.isenabled())
        return replay(*args, **kwargs)
    monkeypatch.setattr(simulate_module, "_replay", recorded)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            run(corpus)
            assert gc.isenabled() is enabled
        def failing(*args, **kwargs):
            inside.append(gc.isenabled())
            raise RuntimeError("the logging ranker failed")
        monkeypatch.setattr(simulate_module, "_replay", failing)
        gc.enable()
        with pytest.raises(RuntimeError, match="logging ranker failed"):
            run(corpus)
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert inside == [False, False, False]
