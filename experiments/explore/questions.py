"""The explorer read back from a results bundle: the questions of the test window with the
change between two arms, and one question opened (what `msprlab explain` prints and the
report's page shows).

A question's value under an arm is the mean of the primary metric over its test searches
(the bundle's per-search frames: the per-query unit of every table); its change is arm B's
value less arm A's: improved above `TIE`, degraded below -`TIE`, unchanged within it (two
orders that are both ideal give nDCG 1 up to the last bit of a double), and not counted
where the question has no relevant memory.
Its overlap is the mean over its searches of Jaccard@10 and RBO_ext (p = 0.9) of the two
arms' top 10 (`overlap`), searches where both lists are empty left out.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.engine.batch import FEATURES

from .. import bundle as layout
from .lists import FATES, LISTS, LOST, MEMORIES, SEARCHES, TERMS, WEIGHT_COLUMNS
from .overlap import P, jaccard, rbo_ext

__all__ = ["DEFAULT_ARMS", "TIE", "ExploreData", "ExploreError", "label_text", "load_explore",
           "open_question", "question_table", "tally"]

DEFAULT_ARMS = ("off", "tuned")  # tuned against off, as the headline
TIE = 1e-12  # a change this small is no change: rounding, not ranking


class ExploreError(ValueError):
    """The bundle has no explorer data, or a question, arm or search it does not hold (the
    message says what it does hold)."""


@dataclass(frozen=True)
class ExploreData:
    """A bundle's explorer frames (`lists`), the per-search values of the primary metric
    per arm (event_id, query_id, seen, value) and what labels them."""

    folder: Path
    lists: pl.DataFrame
    lost: pl.DataFrame
    searches: pl.DataFrame
    weights: pl.DataFrame
    memories: pl.DataFrame
    values: dict[str, pl.DataFrame]
    metric: str
    labels: str

    @property
    def arms(self) -> list[str]:
        return list(self.values)


def _read(path: Path, schema: pl.Schema) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ExploreError(f"{path}: cannot be read as Parquet ({exc})") from None
    if absent := [c for c in schema.names() if c not in frame.columns]:
        raise ExploreError(f"{path}: missing column(s) {absent}; was it written by msprlab?")
    return frame


def load_explore(folder: Path | str) -> ExploreData:
    """The explorer data of the bundle in `folder` (raises `ExploreError` naming what is
    missing)."""
    folder = Path(folder)
    if not (folder / layout.EXPLORE_LISTS).is_file():
        what = ("no such folder" if not folder.exists() else
                f"no {layout.EXPLORE_LISTS} (a bundle of `msprlab run` or `tune` written by "
                "this version holds it; `ablate` has no test window)")
        raise ExploreError(f"{folder}: {what}; give a results bundle folder such as "
                           "results/locomo-run-STAMP")
    frames = {name: _read(folder / part, schema) for name, part, schema in (
        ("lists", layout.EXPLORE_LISTS, LISTS), ("lost", layout.EXPLORE_LOST, LOST),
        ("searches", layout.EXPLORE_SEARCHES, SEARCHES),
        ("weights", layout.EXPLORE_WEIGHTS, WEIGHT_COLUMNS),
        ("memories", layout.EXPLORE_MEMORIES, MEMORIES))}
    record = {}
    if (folder / layout.PROVENANCE).is_file():
        record = json.loads((folder / layout.PROVENANCE).read_text(encoding="utf-8"))
    metric = ((record.get("config") or {}).get("metrics") or {}).get("primary") or "ndcg@10"
    labels = (record.get("labels") or {}).get("source") or "dataset qrels"
    values = {}
    for arm in frames["lists"].get_column("arm").unique(maintain_order=True).to_list():
        path = folder / layout.per_search_file(layout.TEST, arm)
        frame = _read(path, pl.Schema({"event_id": pl.Int64, "query_id": pl.String}))
        if metric not in frame.columns:
            raise ExploreError(f"{path}: no column {metric!r} (the primary metric)")
        seen = pl.col("seen") if "seen" in frame.columns else pl.lit(None, pl.String)
        values[arm] = frame.select("event_id", "query_id", seen.alias("seen"),
                                   value=pl.col(metric).cast(pl.Float64))
    order = sorted(values, key=lambda a: (a != "off", a != "on-zero", a == "tuned", a))
    return ExploreData(folder, **frames, values={a: values[a] for a in order}, metric=metric,
                       labels=labels)


def check_arms(data: ExploreData, arms: Sequence[str] | None) -> tuple[str, str]:
    """The two arms to compare (A, then B): `arms`, else tuned against off."""
    chosen = tuple(arms) if arms else DEFAULT_ARMS
    if len(chosen) != 2 or chosen[0] == chosen[1]:
        raise ExploreError(f"--arms takes two different arms, got {' '.join(chosen)}")
    unknown = [a for a in chosen if a not in data.values]
    if unknown:
        raise ExploreError(f"arm {unknown[0]!r} is not in this bundle's test window; its arms "
                           f"are {', '.join(data.arms)}")
    return chosen[0], chosen[1]


def top_lists(data: ExploreData, arm: str) -> dict[int, list[str]]:
    """event_id -> the arm's top memory ids, best first."""
    rows = data.lists.filter(pl.col("arm") == arm).sort("event_id", "rank")
    found = dict(rows.group_by("event_id", maintain_order=True).agg("memory_id").iter_rows())
    return {int(e): found.get(e, []) for e in data.searches.get_column("event_id")}


def search_overlaps(data: ExploreData, a: str, b: str) -> pl.DataFrame:
    """Per test search: Jaccard@10 and RBO_ext of the two arms' top lists."""
    first, second = top_lists(data, a), top_lists(data, b)
    events = list(first)
    return pl.DataFrame({
        "event_id": events,
        "jaccard": [jaccard(first[e], second[e]) for e in events],
        "rbo": [rbo_ext(first[e], second[e], P) for e in events]},
        schema={"event_id": pl.Int64, "jaccard": pl.Float64, "rbo": pl.Float64})


def question_table(data: ExploreData, a: str, b: str) -> pl.DataFrame:
    """One row per question: query_id, query, searches, intent, question_type, seen, the
    two arms' values, change (B - A; NaN: no relevant memory), jaccard and rbo."""
    per_search = (data.values[a].select("event_id", "query_id", "seen", value_a="value")
                  .join(data.values[b].select("event_id", value_b="value"), on="event_id")
                  .join(data.searches.select("event_id", "query", "intent", "question_type",
                                             "ts"), on="event_id")
                  .join(search_overlaps(data, a, b), on="event_id")
                  .sort("ts"))
    return (per_search.group_by("query_id", maintain_order=True).agg(
        pl.col("query").first(), searches=pl.len(), intent=pl.col("intent").mode().first(),
        question_type=pl.col("question_type").first(), seen=pl.col("seen").first(),
        value_a=pl.col("value_a").mean(), value_b=pl.col("value_b").mean(),
        jaccard=pl.col("jaccard").fill_nan(None).mean(),
        rbo=pl.col("rbo").fill_nan(None).mean(),
    ).with_columns(change=pl.col("value_b") - pl.col("value_a"))
        .sort("query_id"))


def tally(questions: pl.DataFrame) -> dict[str, Any]:
    """Improved / degraded / unchanged questions (and those without a relevant memory,
    not counted), and the mean overlaps over all questions."""
    change = questions.get_column("change").fill_nan(None)
    return {"questions": questions.height,
            "improved": int((change > TIE).sum()), "degraded": int((change < -TIE).sum()),
            "unchanged": int((change.abs() <= TIE).sum()),
            "no_relevant": int(change.null_count()),
            "jaccard": _mean(questions.get_column("jaccard")),
            "rbo": _mean(questions.get_column("rbo"))}


def _mean(column: pl.Series) -> float:
    kept = column.drop_nulls().drop_nans()
    return float(kept.mean()) if kept.len() else math.nan  # type: ignore[arg-type]


def label_text(grade: int | None, labels: str) -> str:
    """A memory's label as the page and `explain` print it."""
    if grade is None:
        return "unjudged"
    if labels == "feedback verdicts":
        return "helpful" if grade > 0 else "unhelpful"
    return f"grade {grade}" if grade > 0 else "judged not relevant"


def closest(query_id: str, known: Sequence[str], n: int = 5) -> list[str]:
    """The ids nearest `query_id` by difflib's ratio, ties to the nearer length, then in
    order (the first ids when none is near)."""
    scored = []
    for key in known:
        ratio = difflib.SequenceMatcher(None, query_id, key).ratio()
        if ratio >= 0.3:
            scored.append((-ratio, abs(len(key) - len(query_id)), key))
    return [key for *_, key in sorted(scored)[:n]] or sorted(known)[:n]


def open_question(data: ExploreData, query_id: str, arms: Sequence[str] | None = None,
                  search: int | str | None = None) -> dict[str, Any]:
    """One question opened for two arms: per search (the first by default; `search` an
    event id, or "all"), both arms' top lists with each score's parts, and the relevant
    memories outside them with where each arm lost them. JSON-ready."""
    a, b = check_arms(data, arms)
    known = data.searches.get_column("query_id").unique().sort().to_list()
    if query_id not in known:
        raise ExploreError(f"question {query_id!r} is not in this bundle's test window; the "
                           f"closest ids: {', '.join(closest(query_id, known))}")
    mine = data.searches.filter(pl.col("query_id") == query_id).sort("ts", "event_id")
    events = mine.get_column("event_id").to_list()
    if search is None:
        chosen = events[:1]
    elif search == "all":
        chosen = events
    elif isinstance(search, int) and search in events:
        chosen = [search]
    else:
        raise ExploreError(f"search {search!r} is not one of question {query_id!r}'s test "
                           f"searches (event ids {', '.join(map(str, events))}, or all)")
    row = question_table(data, a, b).filter(pl.col("query_id") == query_id).row(0, named=True)
    return {
        "bundle": str(data.folder), "query_id": query_id, "query": row["query"],
        "metric": data.metric, "labels": data.labels, "arms": [a, b],
        "value": {a: _num(row["value_a"]), b: _num(row["value_b"])},
        "change": _num(row["change"]), "jaccard": _num(row["jaccard"]),
        "rbo": _num(row["rbo"]), "searches": events,
        "opened": [_search(data, int(e), a, b) for e in chosen]}


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _search(data: ExploreData, event: int, a: str, b: str) -> dict[str, Any]:
    info = data.searches.filter(pl.col("event_id") == event).row(0, named=True)
    texts = dict(data.memories.iter_rows())
    lists = {arm: data.lists.filter(pl.col("arm") == arm, pl.col("event_id") == event)
             .sort("rank") for arm in (a, b)}
    shown = {m for frame in lists.values() for m in frame.get_column("memory_id")}
    lost = data.lost.filter(pl.col("event_id") == event, pl.col("arm").is_in([a, b]))
    arms_out = {}
    for arm in (a, b):
        value = data.values[arm].filter(pl.col("event_id") == event).get_column("value")
        arms_out[arm] = {
            "value": _num(value.item()) if value.len() else None,
            "weights": data.weights.filter(pl.col("arm") == arm, pl.col("event_id") == event)
            .drop("arm", "event_id").row(0, named=True),
            "ranked": [_ranked(r, texts, data.labels) for r in lists[arm].iter_rows(named=True)],
            "lost": [_lost(r, texts, data.labels) for r in
                     lost.filter(pl.col("arm") == arm).iter_rows(named=True)]}
    unshown = []
    for memory in lost.filter(~pl.col("memory_id").is_in(list(shown))).get_column(
            "memory_id").unique(maintain_order=True).to_list():
        fates = {r["arm"]: _fate(r) for r in lost.filter(pl.col("memory_id") == memory)
                 .iter_rows(named=True)}
        grade = lost.filter(pl.col("memory_id") == memory).get_column("grade").item(0)
        unshown.append({"memory_id": memory, "text": texts.get(memory),
                        "label": label_text(grade, data.labels), "grade": grade,
                        "fates": fates})
    overlap = search_overlaps(data, a, b).filter(pl.col("event_id") == event).row(
        0, named=True)
    return {"event_id": event, "ts": info["ts"].isoformat(), "query": info["query"],
            "intent": info["intent"], "question_type": info["question_type"],
            "jaccard": _num(overlap["jaccard"]), "rbo": _num(overlap["rbo"]),
            "arms": arms_out, "unshown": unshown}


def _ranked(r: dict[str, Any], texts: dict[str, str], labels: str) -> dict[str, Any]:
    return {"rank": r["rank"], "memory_id": r["memory_id"], "text": texts.get(r["memory_id"]),
            "label": label_text(r["grade"], labels), "grade": r["grade"],
            "origin": "seed" if r["seed"] else "graph", "score": r["score"],
            "terms": {f: r[t] for f, t in zip(FEATURES, TERMS, strict=True)},
            "features": {f: r[f] for f in FEATURES},
            "relevance": r["relevance"], "role": r["role"]}


def _fate(r: dict[str, Any]) -> dict[str, Any]:
    out = {"fate": r["fate"], "why": FATES[r["fate"]], "pool": r["pool"]}
    if r["fate"] == "ranked":
        out |= {"rank": r["rank"], "origin": "seed" if r["seed"] else "graph"}
    return out


def _lost(r: dict[str, Any], texts: dict[str, str], labels: str) -> dict[str, Any]:
    return {"memory_id": r["memory_id"], "text": texts.get(r["memory_id"]),
            "label": label_text(r["grade"], labels), "grade": r["grade"], **_fate(r)}
