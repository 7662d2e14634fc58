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


def _quoted(column: str) -> pl.Expr:
    """A string column as JSON string literals."""
    return pl.col(column).map_elements(json.dumps, return_dtype=pl.String)


def _text(column: str) -> pl.Expr:
    """A number, bool or null column as JSON text (Polars writes each double as the
    shortest text that reads back to the same double, so nothing is rounded)."""
    return pl.col(column).cast(pl.String).fill_null("null")


def _arrays(frame: pl.DataFrame, items: list[pl.Expr]) -> dict[tuple[str, int], str]:
    """(arm, event_id) -> a JSON array of the rows' arrays (`items` per row), in order."""
    row = pl.concat_str([pl.lit("["), pl.concat_str(items, separator=","), pl.lit("]")])
    grouped = (frame.with_columns(row=row).group_by("arm", "event_id", maintain_order=True)
               .agg(pl.col("row").str.join(",")))
    return {(arm, event): f"[{rows}]" for arm, event, rows in grouped.iter_rows()}


def _chunks(data: ExploreData, ids: list[str]) -> dict[str, str]:
    """File name -> `msprlabExplore.chunk(i, {...});` for each run of `PER_CHUNK` questions:
    per question its searches (time order), per search and arm the value, the weights,
    the list ([rank, memory_id, grade, seed, score, relevance, role, the 6 terms]) and the
    relevant memories outside it ([memory_id, grade, fate, rank, pool, seed])."""
    lists = _arrays(data.lists.sort("arm", "event_id", "rank"), [
        _text("rank"), _quoted("memory_id"), _text("grade"), _text("seed"), _text("score"),
        _text("relevance"), _text("role"), *(_text(t) for t in TERMS)])
    lost = _arrays(data.lost, [_quoted("memory_id"), _text("grade"), _quoted("fate"),
                               _text("rank"), _text("pool"), _text("seed")])
    weights = {(arm, event): f"[{text}]" for arm, event, text in data.weights.select(
        "arm", "event_id", pl.concat_str([_text(w) for w in WEIGHTS], separator=",")
    ).iter_rows()}
    values = {(arm, e): json.dumps(_num(v)) for arm, frame in data.values.items()
              for e, v in frame.select("event_id", "value").iter_rows()}
    chunk_of = {qid: i // PER_CHUNK for i, qid in enumerate(ids)}
    searches: dict[str, list[str]] = {}
    events = data.searches.sort("ts", "event_id").select(
        "query_id", "event_id", pl.col("ts").dt.strftime("%Y-%m-%d %H:%M:%S"), "intent")
    for qid, e, ts, intent in events.iter_rows():
        arms = ",".join(
            f'{json.dumps(arm)}:{{"v":{values.get((arm, e), "null")},'
            f'"w":{weights.get((arm, e), "[]")},"l":{lists.get((arm, e), "[]")},'
            f'"x":{lost.get((arm, e), "[]")}}}' for arm in data.arms)
        searches.setdefault(qid, []).append(
            f'{{"e":{e},"ts":{json.dumps(ts)},"intent":{json.dumps(intent)},"a":{{{arms}}}}}')
    # The texts of the memories each chunk shows or names as lost.
    chunk_events = events.select("event_id", chunk=pl.col("query_id").replace_strict(
        chunk_of, return_dtype=pl.Int64))
    used = (pl.concat([data.lists.select("event_id", "memory_id"),
                       data.lost.select("event_id", "memory_id")])
            .join(chunk_events, on="event_id").unique(["chunk", "memory_id"])
            .join(data.memories, on="memory_id", how="left").sort("chunk", "memory_id"))
    texts = {chunk: dict(zip(frame["memory_id"], frame["text"].fill_null(""), strict=True))
             for (chunk,), frame in used.group_by("chunk", maintain_order=True)}
    out = {}
    for index in range(0, len(ids), PER_CHUNK):
        chunk = index // PER_CHUNK
        questions = ",".join(f"{json.dumps(qid)}:[{','.join(searches[qid])}]"
                             for qid in ids[index:index + PER_CHUNK])
        out[f"{chunk:04d}.js"] = (f'msprlabExplore.chunk({chunk},{{"questions":{{{questions}}},'
                                  f'"texts":{_json(texts.get(chunk, {}))}}});\n')
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

