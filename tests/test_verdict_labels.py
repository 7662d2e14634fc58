"""Labels from feedback verdicts (datasets/verdict_labels.py): occurrences by hand, no
verdict before its own search, counted unreplayable verdicts, and an experiment on a store
ingested from ContextKit artifacts scored on them end to end."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.datasets.schema import EVENTS, QUERIES, Dataset
from msprlab.datasets.simulate import complete_events, order_events
from msprlab.datasets.verdict_labels import occurrences, relabel
from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import ExperimentError, load_experiment
from msprlab.reports.load import load_bundle
from msprlab.reports.markdown import render_markdown

T0 = datetime(2024, 5, 1, 9, 0)
MIN = timedelta(minutes=1)
FIXTURE = Path(__file__).parent / "fixtures" / "contextkit"


def verdicts(rows: list[tuple[float, str | None, str | None, str, bool]]) -> Dataset:
    """Feedback events (minutes after T0, user, query hash, memory, helpful)."""
    frame = pl.DataFrame(
        [{"ts": T0 + m * MIN, "kind": "feedback", "user_id": u, "query_id": q,
          "query": None if q is None else f"text of {q}", "memory_id": mem, "helpful": h}
         for m, u, q, mem, h in rows], schema_overrides={"ts": EVENTS["ts"]})
    events = order_events(complete_events(frame))
    queries = pl.DataFrame([{"query_id": q, "text": f"text of {q}", "user_id": None}
                            for q in sorted({r[2] for r in rows if r[2]})],
                           schema={k: QUERIES[k] for k in ("query_id", "text", "user_id")})
    return Dataset("contextkit", "test", "d1", events=events, queries=complete(queries))


def complete(queries: pl.DataFrame) -> pl.DataFrame:
    return queries.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in QUERIES.items()
                                 if c not in queries.columns]).select(list(QUERIES))


def test_occurrences_open_at_the_first_verdict_and_close_after_the_window() -> None:
    ds = verdicts([(0, "u", "h1", "m1", True), (10, "u", "h1", "m2", False),
                   (29, "u", "h1", "m1", False),    # within 30 min of the first: same search
                   (31, "u", "h1", "m3", True),     # after the window: the next search
                   (5, "v", "h1", "m1", True),      # another user: another search
                   (40, "u", "h2", "m9", True)])
    rel = relabel(ds, window=30 * MIN, limit=10)
    assert rel.questions == {"h1#0": "h1", "h1#1": "h1", "h1#2": "h1", "h2#0": "h2"}
    searches = rel.dataset.events.filter(pl.col("kind") == "search")
    opened = dict(zip(searches["query_id"], searches["ts"], strict=True))
    tick = timedelta(microseconds=1)
    assert opened == {"h1#0": T0 - tick, "h1#1": T0 + 5 * MIN - tick,
                      "h1#2": T0 + 31 * MIN - tick, "h2#0": T0 + 40 * MIN - tick}
    assert searches.filter(pl.col("query_id") == "h1#1")["user_id"].to_list() == ["v"]
    assert set(searches["limit"]) == {10}
    qrels = {(q, m): r for q, m, r in rel.dataset.qrels.iter_rows()}
    # m1's last verdict in u's first occurrence was unhelpful: judged not relevant
    assert qrels == {("h1#0", "m1"): 0, ("h1#0", "m2"): 0, ("h1#1", "m1"): 1,
                     ("h1#2", "m3"): 1, ("h2#0", "m9"): 1}
    assert rel.verdicts == 5 and rel.without_query == rel.without_owner == 0


def test_one_user_from_two_agents_or_runs_is_two_searches() -> None:
    ds = verdicts([(0, "u", "h1", "m1", True), (2, "u", "h1", "m2", True),
                   (4, "u", "h1", "m3", False)])
    scoped = ds.events.with_columns(
        agent_id=pl.when(pl.col("memory_id") == "m2").then(pl.lit("agent-b"))
        .otherwise(pl.lit("agent-a")),
        run_id=pl.when(pl.col("memory_id") == "m3").then(pl.lit("run-2"))
        .otherwise(pl.lit("run-1")))
    rel = relabel(replace(ds, events=scoped), window=30 * MIN, limit=10)
    searches = rel.dataset.events.filter(pl.col("kind") == "search").sort("ts")
    # Within one window, yet three owner scopes: three searches, each in its own scope.
    assert searches.select("agent_id", "run_id").rows() == [
        ("agent-a", "run-1"), ("agent-b", "run-1"), ("agent-a", "run-2")]
    assert sorted(rel.dataset.qrels.select("query_id", "memory_id").rows()) == [
        ("h1#0", "m1"), ("h1#1", "m2"), ("h1#2", "m3")]


def test_verdicts_without_a_query_or_an_owner_are_counted_not_dropped() -> None:
    ds = verdicts([(0, "u", "h1", "m1", True), (1, "u", None, "m2", True),
                   (2, None, "h3", "m3", True)])
    rel = relabel(ds, window=30 * MIN, limit=5)
    assert (rel.without_query, rel.without_owner) == (1, 1)
    assert list(rel.questions) == ["h1#0"]
    # they stay on the timeline as the feedback they are
    assert rel.dataset.events.filter(pl.col("kind") == "feedback").height == 3


def test_bad_settings_and_stores_with_qrels_are_refused() -> None:
    ds = verdicts([(0, "u", "h1", "m1", True)])
    with pytest.raises(ValueError, match="the window must be positive"):
        relabel(ds, window=timedelta(0), limit=10)
    with pytest.raises(ValueError, match="the limit must be >= 1"):
        relabel(ds, window=MIN, limit=0)
    labelled = relabel(ds, window=MIN, limit=10).dataset
    with pytest.raises(ValueError, match="the store has qrels already"):
        relabel(labelled, window=MIN, limit=10)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.sampled_from(["u", "v"]),
                          st.sampled_from(["h1", "h2", None]), st.sampled_from(["a", "b", "c"]),
                          st.booleans()), min_size=1, max_size=40),
       st.integers(1, 60))
def test_no_verdict_precedes_or_meets_the_search_it_labels(rows, window) -> None:
    ds = verdicts([(float(m), u, q, mem, h) for m, u, q, mem, h in rows])
    rel = relabel(ds, window=window * MIN, limit=10)
    events = rel.dataset.events
    assert events["event_id"].to_list() == list(range(events.height))
    position = {q: i for i, q, kind in events.select("event_id", "query_id", "kind").iter_rows()
                if kind == "search"}
    tagged = occurrences(ds.events.filter(pl.col("kind") == "feedback",
                                          pl.col("query_id").is_not_null()), window * MIN)
    search_ts = dict(events.filter(pl.col("kind") == "search").select("query_id", "ts")
                     .iter_rows())
    for occurrence, ts, opened in tagged.select("occurrence", "ts", "opened").iter_rows():
        assert search_ts[occurrence] < ts     # strictly before every verdict it is labelled by
        assert opened <= ts <= opened + window * MIN
        assert occurrence in position
    labelled = rel.dataset.qrels.group_by("query_id").len()
    assert labelled.height == len(rel.questions)


def write_definition(tmp_path: Path, store: Path, extra: str = "") -> Path:
    definition = tmp_path / "ck.toml"
    definition.write_text(f"""
name = "ck"
seed = 1
[dataset]
source = "store"
store = "{store}"
labels = "verdicts"
[split]
test_fraction = 0.5
[engine.context_graph]
enabled = true
[engine.mspr]
enabled = true
feedback = {{ enabled = true }}
success = {{ enabled = true }}
frequency = {{ enabled = true }}
[metrics]
names = ["ndcg@10", "judged@10"]
min_support = 1
bootstrap = 50
[ablation]
arms = ["off", "on-zero"]
[tune]
trials = 3
{extra}""")
    return definition


def test_a_verdict_experiment_needs_a_judged_metric(tmp_path) -> None:
    definition = write_definition(tmp_path, tmp_path / "s.duckdb")
    definition.write_text(definition.read_text().replace('"ndcg@10", "judged@10"', '"ndcg@10"'))
    with pytest.raises(ExperimentError, match="add a judged@K metric"):
        load_experiment(definition)


def test_verdict_labels_need_an_ingested_store(tmp_path) -> None:
    definition = tmp_path / "x.toml"
    definition.write_text('[dataset]\nsource = "synthetic"\nlabels = "verdicts"\n'
                          '[metrics]\nnames = ["ndcg@10", "judged@10"]\n')
    with pytest.raises(ExperimentError, match='reads an ingested store'):
        load_experiment(definition)


def test_run_on_contextkit_artifacts_scores_on_verdicts(tmp_path, capsys) -> None:
    store = tmp_path / "ck.duckdb"
    assert main(["ingest", "contextkit", "--feedback-db", str(FIXTURE / "feedback_events.db"),
                 "--success-db", str(FIXTURE / "query_success.db"),
                 "--graph-jsonl", str(FIXTURE / "context_graph.jsonl"),
                 "--qdrant-path", str(FIXTURE / "qdrant"), "--store", str(store)]) == 0
    capsys.readouterr()
    definition = write_definition(tmp_path, store)
    # the fixture's production is not the definition's engine, and its queries have no
    # vectors: the run stops before any table, naming what differs
    assert main(["run", str(definition), "--root", str(tmp_path), "--no-track"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "replay fidelity FAILED" in out and "ablation ladder" not in out
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
    # with on_fail = "warn" it goes on, every verdict-labelled figure naming the failure
    definition = write_definition(tmp_path, store, '[fidelity]\non_fail = "warn"\n')
    assert main(["run", str(definition), "--root", str(tmp_path), "--no-track"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "labels: feedback verdicts (replay fidelity FAILED" in out
    assert "labels: 5 feedback verdicts" in out
    assert "1 verdicts without a query text and 1 without a user, agent or run id" in out
    assert "labels: feedback verdicts" in out and "labels: dataset qrels" not in out
    assert "judged@10" in out
    [bundle] = (tmp_path / "results").iterdir()
    per_search = pl.read_parquet(bundle / "ablation" / "per_search" / "off.parquet")
    # the unit is the question (the query hash), not the occurrence
    assert not any("#" in q for q in per_search["query_id"])
    provenance = json.loads((bundle / "provenance.json").read_text())
    assert provenance["labels"]["source"] == "feedback verdicts"
    fidelity = json.loads((bundle / "fidelity.json").read_text())
    assert fidelity["passed"] is False and fidelity["projected_queries"] is True
    assert provenance["labels"]["fidelity"].startswith("replay fidelity FAILED")
    assert (provenance["labels"]["verdicts"], provenance["labels"]["without_query"]) == (5, 1)
    summary = " ".join(render_markdown(load_bundle(bundle)).split())
    assert "Labels: feedback verdicts (replay fidelity FAILED" in summary
    assert "n counts distinct questions" in summary
    assert "labels: 5 feedback verdicts" in summary and "the dataset's qrels" not in summary
    assert "Judged share of each arm's top 10 (judged@10, per query): off 62.5%" in summary
