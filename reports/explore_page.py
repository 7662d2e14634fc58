"""The report's per-query explorer: the questions of the test window in the page, each
question's lists in chunk files beside it.

The page embeds the question list (per question: id, text, searches, intent, type, seen,
each arm's value, and the overlaps of every pair of arms) as JSON, so sorting, filtering
and the improved / degraded / unchanged counts work for any two arms without reading
anything else. A question's lists, with every score's parts and the fates of the relevant
memories the lists miss, are written to `report-explore/NNN.js` beside the page (a few
questions per file) and read when the question is opened, by a `<script>` element: that
loads from file:// (no server), where a browser refuses `fetch`. So the page stays small
at any number of test searches; the folder must stay beside it.

Everything comes from the bundle's explorer files (`experiments.explore.questions`), the
same `msprlab explain` reads; the same bundle gives the same bytes.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.engine.batch import FEATURES, WEIGHTS
from msprlab.experiments.explore.lists import FATES, TERMS
from msprlab.experiments.explore.overlap import P
from msprlab.experiments.explore.questions import (
    DEFAULT_ARMS,
    TIE,
    ExploreData,
    question_table,
)

__all__ = ["FOLDER", "PER_CHUNK", "ExplorePage", "explore_page", "write_chunks"]

FOLDER = "report-explore"   # beside report.html
PER_CHUNK = 20              # questions per chunk file
TEXT_CUT = 200              # question text in the list
_SCRIPT = Path(__file__).parent / "templates" / "explore.js"


@dataclass(frozen=True)
class ExplorePage:
    """What the template shows (`section`) and the chunk files (name -> text)."""

    section: dict[str, Any]
    chunks: dict[str, str]


def _num(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else float(value)


def _json(obj: Any) -> str:
    """Compact JSON, safe inside a <script> element."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False
                      ).replace("</", "<\\/")


def explore_page(data: ExploreData | None) -> ExplorePage | None:
    """The page section and chunk files of a bundle's explorer data (None: no data)."""
    if data is None:
        return None
    arms = data.arms
    defaults = [a for a in DEFAULT_ARMS if a in arms]
    if len(defaults) < 2:
        defaults = arms[:2]
    if len(arms) < 2:
        return None
    tables = {pair: question_table(data, *pair) for pair in combinations(arms, 2)}
    first = next(iter(tables.values()))
    ids = first.get_column("query_id").to_list()
    values = {arm: dict(frame.group_by("query_id").agg(pl.col("value").mean()).iter_rows())
              for arm, frame in data.values.items()}
    overlaps = {f"{min(a, b)}|{max(a, b)}": {
        r["query_id"]: [_num(r["jaccard"]), _num(r["rbo"])]
        for r in t.select("query_id", "jaccard", "rbo").iter_rows(named=True)}
        for (a, b), t in tables.items()}
    questions = []
    for i, r in enumerate(first.iter_rows(named=True)):
        qid = r["query_id"]
        text = r["query"] or ""
        questions.append({
            "id": qid, "text": text if len(text) <= TEXT_CUT else text[:TEXT_CUT - 1] + "…",
            "n": r["searches"], "intent": r["intent"], "type": r["question_type"],
            "seen": r["seen"], "chunk": i // PER_CHUNK,
            "v": {arm: _num(values[arm].get(qid)) for arm in arms},
            "o": {key: pairs.get(qid) for key, pairs in overlaps.items()}})
    chunks = _chunks(data, ids)
    files = list(chunks)
    size = sum(len(text.encode("utf-8")) for text in chunks.values())
    payload = {"arms": arms, "defaults": defaults, "metric": data.metric, "tie": TIE, "p": P,
               "features": list(FEATURES), "fates": FATES, "folder": FOLDER, "files": files,
               "verdicts": data.labels == "feedback verdicts", "questions": questions}
    section = {"data": _json(payload), "script": _SCRIPT.read_text(encoding="utf-8"),
               "questions": len(questions), "searches": data.searches.height,
               "arms": arms, "defaults": defaults, "metric": data.metric,
               "labels": data.labels, "folder": FOLDER, "files": len(files),
               "chunk_bytes": size, "per_chunk": PER_CHUNK, "tie": TIE, "p": P,
               "weights": list(WEIGHTS)}
    return ExplorePage(section, chunks)


def _chunks(data: ExploreData, ids: list[str]) -> dict[str, str]:
    """File name -> `msprlabExplore.chunk(i, {...});` for each run of `PER_CHUNK` questions:
    per question its searches (time order), per search and arm the value, the weights,
    the list ([rank, memory_id, grade, seed, score, relevance, role, 6 features, 6 terms])
    and the relevant memories outside it ([memory_id, grade, fate, rank, pool, seed])."""
    s = data.searches.sort("ts", "event_id")
    lists = data.lists.sort("arm", "event_id", "rank").select(
        "arm", "event_id", "rank", "memory_id", "grade", "seed", "score", "relevance", "role",
        *FEATURES, *TERMS)
    lost = data.lost.select("arm", "event_id", "memory_id", "grade", "fate", "rank", "pool",
                            "seed")
    weights = {(r[0], r[1]): list(r[2:]) for r in data.weights.select(
        "arm", "event_id", *WEIGHTS).iter_rows()}
    values = {(arm, e): _num(v) for arm, frame in data.values.items()
              for e, v in frame.select("event_id", "value").iter_rows()}
    by_search: dict[tuple[str, int], list[list[Any]]] = {}
    for row in lists.iter_rows():
        by_search.setdefault((row[0], row[1]), []).append(list(row[2:]))
    lost_by: dict[tuple[str, int], list[list[Any]]] = {}
    for row in lost.iter_rows():
        lost_by.setdefault((row[0], row[1]), []).append(list(row[2:]))
    texts = dict(data.memories.iter_rows())
    searches_of: dict[str, list[dict[str, Any]]] = {}
    for r in s.select("query_id", "event_id", "ts", "intent").iter_rows(named=True):
        e = r["event_id"]
        searches_of.setdefault(r["query_id"], []).append({
            "e": e, "ts": r["ts"].strftime("%Y-%m-%d %H:%M:%S"), "intent": r["intent"],
            "a": {arm: {"v": values.get((arm, e)), "w": weights.get((arm, e), []),
                        "l": by_search.get((arm, e), []), "x": lost_by.get((arm, e), [])}
                  for arm in data.arms}})
    out = {}
    for index in range(0, len(ids), PER_CHUNK):
        part = ids[index:index + PER_CHUNK]
        mine = {qid: searches_of[qid] for qid in part}
        used = sorted({row[1] for searches in mine.values() for search in searches
                       for side in search["a"].values() for row in side["l"]}
                      | {row[0] for searches in mine.values() for search in searches
                         for side in search["a"].values() for row in side["x"]})
        body = {"questions": mine, "texts": {m: texts.get(m, "") for m in used}}
        out[f"{index // PER_CHUNK:04d}.js"] = (
            f"msprlabExplore.chunk({index // PER_CHUNK},{_json(body)});\n")
    return out


def write_chunks(page: ExplorePage | None, out: Path) -> None:
    """Write the chunk files into `out/FOLDER/` (replacing what an earlier report left)."""
    folder = Path(out) / FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    if page is None:
        return
    folder.mkdir(parents=True)
    for name, text in page.chunks.items():
        (folder / name).write_text(text, encoding="utf-8", newline="\n")

