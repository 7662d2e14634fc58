"""LoCoMo (locomo10) as a `Dataset`: dialog turns as memories, QA items as queries.

The shipped file is `datasets/data/locomo/locomo10.json`; its card (`CARD.md`, source
commit, sha256, CC BY-NC 4.0 license) sits beside it. Mapping:

- **Memories.** Each dialog turn is one memory, owned by its conversation:
  `user_id = sample_id` (the card: each conversation is its own memory store; the two
  speakers share it), `memory_id = f"{sample_id}:{dia_id}"`. The speaker goes into both
  the text and the metadata: `text = "speaker: text"`, plus `" [image: blip_caption]"`
  for turns that share an image (the card's reference retrieval numbers used this text).
  `metadata` (JSON) holds `speaker`, `dia_id`, `session` and the upstream image fields
  (`img_url`, `blip_caption`, `query`, `re-download`) when the turn has them.
- **Runs and time.** Session `n` is the run `f"{sample_id}:session_{n}"`. It starts at its
  `session_<n>_date_time` ("1:56 pm on 8 May, 2023", read as naive UTC); its k-th turn
  (k = 0, 1, ...) is created at start + k seconds (`TURN_SPACING`), so turns keep their
  order and a session spans under a minute. `created_at = updated_at`; none is deleted.
- **Timeline.** One `memory_added` event per turn, ordered by (`ts`, `seq`) with `seq` the
  turn's position in the file. There are no search events: the click simulator places
  the questions on the timeline. A question should be asked after its evidence exists,
  i.e. after its latest evidence turn (every evidence turn is in the past once the last
  session has started).
- **Edges.** The engine's own `EdgeBuilder.on_memory_created` (MSPR.md section 4) is called
  for every turn in time order with the turn's time as `now` and `EdgesConfig` as given.
  Each conversation gets its own graph and builder: edges never join two owners, and the
  builder's session cache is keyed by run, so this gives the same edges as one shared
  graph without scoring every memory against the other nine conversations. With the
  defaults each session is one REPLY_TO/TEMPORAL_NEXT chain (turns are 1 s apart, inside
  the 1,800 s window). No turn carries a document ref (the engine reads them from the
  `url`/`doc_id`/... payload keys and from URLs in the text; `img_url` is none of those),
  so there is no DOCUMENT_LINK.
  TOPIC_SIMILAR needs embeddings: pass `embed` (texts -> array of shape (n, dim)); with
  the default `embed=None` no memory has a vector and no TOPIC_SIMILAR edge is made.
- **Queries and qrels.** QA item i of a conversation is the query `f"{sample_id}:q{i}"`
  (i counts from 0, as the card's "conv-26 #30" does), owned by `sample_id`, with the
  category name as `question_type` (`CATEGORIES`). Each usable evidence turn is a qrel
  of relevance 1. Evidence strings are repaired as the card says (split on `[;\\s]+`,
  `D:11:26` -> `D11:26`, `D30:05` -> `D30:5`); what cannot be resolved (`D`, ids past the
  end of their session) is left out of the qrels, and every repair or omission is an
  anomaly row (`locomo_anomalies`, also logged by `load_locomo`). A question without
  usable evidence stays a query without qrels (abstention, EVALUATION.md).

The digest is the sha256 of the file bytes, the mapping parameters (loader revision, turn
spacing, `EdgesConfig`, embedder name) and, when `embed` is given, the vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from msprlab.engine.config import EdgesConfig, as_dict
from msprlab.engine.edges import EdgeBuilder
from msprlab.engine.graph import ContextGraph, MemoryEdge

from ..schema import EDGES, EMBEDDINGS, EVENTS, MEMORIES, QRELS, QUERIES, Dataset
from ..validate import IngestError

__all__ = ["ANOMALIES", "CATEGORIES", "LOCOMO_PATH", "load_locomo", "locomo_anomalies"]

LOCOMO_PATH = Path(__file__).resolve().parents[1] / "data" / "locomo" / "locomo10.json"
SOURCE = "locomo"
VERSION = "locomo10 (snap-research/LoCoMo@3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376)"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
TURN_SPACING = timedelta(seconds=1)
DEFAULT_EDGES = EdgesConfig()  # the library's defaults (frozen, so safe to share)
# Bump when the mapping above changes: it is part of the digest.
_LOADER_REVISION = 1
_IMAGE_FIELDS = ("img_url", "blip_caption", "query", "re-download")

_SESSION = re.compile(r"session_(\d+)")
_SESSION_DATE = re.compile(r"session_(\d+)_date_time")
_EVIDENCE_SEPARATOR = re.compile(r"[;\s]+")
# `D<session>:<turn>`, also with the stray colon of 'D:11:26'; int() drops zero padding.
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")

Embed = Callable[[list[str]], np.ndarray]

ANOMALY_KINDS = ("split", "normalised", "duplicate", "unusable", "no_evidence",
                 "no_usable_evidence", "date_without_session")
ANOMALIES = pl.Schema({
    "sample_id": pl.String,
    "where": pl.String,      # JSON path inside the sample, e.g. "qa[37].evidence[0]"
    "query_id": pl.String,   # null for anomalies outside the QA list
    "kind": pl.Enum(ANOMALY_KINDS),
    "value": pl.String,      # the upstream string as found
    "resolved": pl.String,   # what it became (a dia_id), null when nothing usable
    "reason": pl.String,
})

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Turn:
    where: str  # JSON path in the file, the `_row` provenance
    memory_id: str
    text: str
    sample_id: str
    run_id: str
    at: datetime
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Parsed:
    turns: list[_Turn]
    queries: list[dict[str, Any]]
    qrels: list[tuple[str, str, str]]  # (query_id, memory_id, JSON path of the evidence)
    anomalies: list[dict[str, Any]]


def _get(obj: Any, key: str, kind: type, *, file: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise IngestError(f"{file} {where}", f"expected an object, got {obj!r:.80}")
    if key not in obj:
        raise IngestError(f"{file} {where}", "missing", field=key)
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise IngestError(f"{file} {where}", f"expected {kind.__name__}, got {value!r:.80}",
                          field=key)
    return value


def _parse(raw: bytes, file: str) -> _Parsed:
    try:
        samples = json.loads(raw)
    except json.JSONDecodeError as e:
        raise IngestError(f"{file} line {e.lineno} column {e.colno}",
                          f"not JSON ({e.msg})") from e
    if not isinstance(samples, list):
        raise IngestError(file, f"expected a list of samples, got {type(samples).__name__}")
    parsed = _Parsed([], [], [], [])
    for index, sample in enumerate(samples):
        where = f"[{index}]"
        sample_id = _get(sample, "sample_id", str, file=file, where=where)
        conversation = _get(sample, "conversation", dict, file=file, where=where)
        session_sizes = _read_sessions(conversation, sample_id, parsed, file=file, where=where)
        qa = _get(sample, "qa", list, file=file, where=where)
        for q_index, item in enumerate(qa):
            _read_question(item, q_index, sample_id, session_sizes, parsed,
                           file=file, where=f"{where}.qa[{q_index}]")
    return parsed


def _read_sessions(conversation: dict[str, Any], sample_id: str, parsed: _Parsed, *,
                   file: str, where: str) -> dict[int, int]:
    """Append the turns of every session; return session number -> number of turns."""
    numbers = sorted(int(m.group(1)) for key in conversation
                     if (m := _SESSION.fullmatch(key)))
    sizes: dict[int, int] = {}
    for n in numbers:
        key = f"session_{n}"
        turns = _get(conversation, key, list, file=file, where=f"{where}.conversation")
        stamp = _get(conversation, f"{key}_date_time", str, file=file,
                     where=f"{where}.conversation")
        try:
            start = datetime.strptime(stamp, SESSION_DATE_FORMAT)
        except ValueError as e:
            raise IngestError(f"{file} {where}.conversation",
                              f"cannot read {stamp!r} as {SESSION_DATE_FORMAT!r}",
                              field=f"{key}_date_time") from e
        for k, turn in enumerate(turns):
            turn_where = f"{where}.conversation.{key}[{k}]"
            dia_id = _get(turn, "dia_id", str, file=file, where=turn_where)
            if dia_id != f"D{n}:{k + 1}":
                raise IngestError(f"{file} {turn_where}", f"expected 'D{n}:{k + 1}' (session "
                                  f"{n}, turn {k + 1}), got {dia_id!r}", field="dia_id")
            speaker = _get(turn, "speaker", str, file=file, where=turn_where)
            said = _get(turn, "text", str, file=file, where=turn_where)
            metadata: dict[str, Any] = {"speaker": speaker, "dia_id": dia_id, "session": n}
            metadata.update((f, turn[f]) for f in _IMAGE_FIELDS if f in turn)
            caption = turn.get("blip_caption")
            text = f"{speaker}: {said}" + (f" [image: {caption}]" if caption else "")
            parsed.turns.append(_Turn(
                where=turn_where, memory_id=f"{sample_id}:{dia_id}", text=text,
                sample_id=sample_id, run_id=f"{sample_id}:{key}",
                at=start + k * TURN_SPACING, metadata=metadata))
        sizes[n] = len(turns)
    for key in conversation:
        m = _SESSION_DATE.fullmatch(key)
        if m and int(m.group(1)) not in sizes:
            parsed.anomalies.append(_anomaly(
                sample_id, f"conversation.{key}", None, "date_without_session",
                str(conversation[key]), None, f"no session_{m.group(1)} turns; date ignored"))
    return sizes


def _read_question(item: Any, q_index: int, sample_id: str, session_sizes: dict[int, int],
                   parsed: _Parsed, *, file: str, where: str) -> None:
    question = _get(item, "question", str, file=file, where=where)
    category = _get(item, "category", int, file=file, where=where)
    if category not in CATEGORIES:
        raise IngestError(f"{file} {where}", f"expected one of {sorted(CATEGORIES)}, "
                          f"got {category!r}", field="category")
    evidence = _get(item, "evidence", list, file=file, where=where)
    query_id = f"{sample_id}:q{q_index}"
    parsed.queries.append({"query_id": query_id, "text": question, "user_id": sample_id,
                           "question_type": CATEGORIES[category], "_row": where})
    kept = _resolve_evidence(evidence, sample_id, query_id, f"qa[{q_index}]", session_sizes,
                             parsed.anomalies)
    parsed.qrels.extend((query_id, f"{sample_id}:{dia_id}", f"{where}.evidence[{e_index}]")
                        for dia_id, e_index in kept)
    if not evidence:
        parsed.anomalies.append(_anomaly(
            sample_id, f"qa[{q_index}].evidence", query_id, "no_evidence", "[]", None,
            "empty evidence list; kept as a query without qrels (abstention)"))
    elif not kept:
        parsed.anomalies.append(_anomaly(
            sample_id, f"qa[{q_index}].evidence", query_id, "no_usable_evidence",
            json.dumps(evidence), None,
            "no evidence id resolves to a turn; kept as a query without qrels (abstention)"))


def _resolve_evidence(evidence: list[Any], sample_id: str, query_id: str, where: str,
                      session_sizes: dict[int, int],
                      anomalies: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The distinct turn ids the evidence names, in order, each with the index of its entry.

    Every repair or omission is appended to `anomalies`.
    """
    kept: dict[str, int] = {}
    for e_index, raw in enumerate(evidence):
        at = f"{where}.evidence[{e_index}]"

        def note(kind: str, value: str, resolved: str | None, reason: str, at: str = at) -> None:
            anomalies.append(_anomaly(sample_id, at, query_id, kind, value, resolved, reason))

        if not isinstance(raw, str):
            note("unusable", json.dumps(raw), None, "evidence entry is not a string")
            continue
        parts = [p for p in _EVIDENCE_SEPARATOR.split(raw) if p]
        if len(parts) != 1:
            note("split", raw, " ".join(parts), f"{len(parts)} ids in one string, split on [;\\s]+")
        for part in parts:
            m = _EVIDENCE_ID.fullmatch(part)
            if m is None:
                note("unusable", part, None, "not a turn id of the form D<session>:<turn>")
                continue
            session, turn = int(m.group(1)), int(m.group(2))
            dia_id = f"D{session}:{turn}"
            if dia_id != part:
                note("normalised", part, dia_id, f"read {part!r} as {dia_id!r}")
            size = session_sizes.get(session)
            if size is None:
                note("unusable", part, None, f"the conversation has no session {session}")
            elif not 1 <= turn <= size:
                note("unusable", part, None,
                     f"session {session} has turns 1..{size}; turn {turn} is past its end")
            elif dia_id in kept:
                note("duplicate", part, dia_id, "repeated evidence id; one qrel")
            else:
                kept[dia_id] = e_index
    return list(kept.items())


def _anomaly(sample_id: str, where: str, query_id: str | None, kind: str, value: str,
             resolved: str | None, reason: str) -> dict[str, Any]:
    return {"sample_id": sample_id, "where": where, "query_id": query_id, "kind": kind,
            "value": value, "resolved": resolved, "reason": reason}


def locomo_anomalies(path: str | Path = LOCOMO_PATH) -> pl.DataFrame:
    """Every repair or omission `load_locomo` makes, one row each (schema `ANOMALIES`).

    Kinds: `split` (several ids in one string), `normalised` ('D:11:26' -> 'D11:26',
    'D30:05' -> 'D30:5'), `duplicate` (a repeated id), `unusable` (left out of the qrels:
    'D', ids past the end of their session), `no_evidence` and `no_usable_evidence` (the
    query is kept without qrels), `date_without_session` (a session date with no turns).
    """
    path = Path(path)
    return pl.DataFrame(_parse(path.read_bytes(), path.name).anomalies, schema=ANOMALIES)


def load_locomo(path: str | Path = LOCOMO_PATH, *, edges: EdgesConfig = DEFAULT_EDGES,
                embed: Embed | None = None, embedder_name: str = "external",
                recipe: str | None = None) -> Dataset:
    """Read locomo10.json into memories, edges, events, queries and qrels (module docstring).

    Parameters
    ----------
    path : the locomo10 JSON file; the shipped copy by default.
    edges : the edge-synthesis switches and thresholds handed to the engine's EdgeBuilder.
    embed : texts -> array, shape (n_texts, dim); called once with every memory text in
        memory order. Its rows fill the embeddings table and drive TOPIC_SIMILAR.
        None (default): no embeddings, so no TOPIC_SIMILAR edges.
    embedder_name : the `embedder` column of the embeddings table (and part of the digest).
    recipe : what makes the vectors (`embed.recipe`), hashed into the digest in their
        place; None hashes the vectors' bytes (an `embed` the caller cannot describe).

    Anomalies in the evidence are logged (see `locomo_anomalies` for the table).

    Examples
    --------
    >>> ds = load_locomo()
    >>> ds.memories.height, ds.queries.height, ds.qrels.height
    (5882, 1986, 2820)

    With TOPIC_SIMILAR edges (fitting the embedder takes seconds):

    >>> from msprlab.datasets.embed import TfidfSvdEmbedder
    >>> e = TfidfSvdEmbedder().fit(ds.memories["text"].to_list())  # doctest: +SKIP
    >>> topical = load_locomo(embed=e.embed, embedder_name=e.name)  # doctest: +SKIP
    """
    path = Path(path)
    raw = path.read_bytes()
    parsed = _parse(raw, path.name)
    _log(parsed.anomalies, path.name)
    turns = parsed.turns
    vectors = None if embed is None else _embed(embed, [t.text for t in turns])

    params = {"loader_revision": _LOADER_REVISION, "turn_spacing_s": TURN_SPACING.seconds,
              "edges": as_dict(edges), "embedder": None if embed is None else embedder_name}
    digest = hashlib.sha256(raw)
    digest.update(json.dumps(params, sort_keys=True).encode())
    if vectors is not None:
        digest.update(repr(vectors.shape).encode())
        digest.update(recipe.encode() if recipe is not None else vectors.tobytes())

    file = path.name
    memories = _frame(MEMORIES, {
        "memory_id": [t.memory_id for t in turns], "text": [t.text for t in turns],
        "user_id": [t.sample_id for t in turns], "run_id": [t.run_id for t in turns],
        "metadata": [json.dumps(t.metadata, ensure_ascii=False) for t in turns],
        "created_at": [t.at for t in turns], "updated_at": [t.at for t in turns],
    }, file, [t.where for t in turns])
    events = (memories.select("memory_id", "user_id", "run_id", "_file", "_row",
                              ts="created_at", seq=pl.int_range(pl.len(), dtype=pl.Int64),
                              kind=pl.lit("memory_added", EVENTS["kind"]))
              .sort("ts", "seq")
              .with_columns(event_id=pl.int_range(pl.len(), dtype=pl.Int64)))
    events = events.select(*(pl.col(c) if c in events.columns else pl.lit(None, t).alias(c)
                             for c, t in EVENTS.items()), "_file", "_row")
    queries = _frame(QUERIES, {c: [q[c] for q in parsed.queries]
                               for c in ("query_id", "text", "user_id", "question_type")},
                     file, [q["_row"] for q in parsed.queries])
    qrels = _frame(QRELS, {"query_id": [q for q, _, _ in parsed.qrels],
                           "memory_id": [m for _, m, _ in parsed.qrels], "relevance": 1},
                   file, [where for _, _, where in parsed.qrels])
    embeddings = pl.DataFrame(schema=EMBEDDINGS)
    if vectors is not None:
        embeddings = pl.DataFrame({
            "memory_id": memories["memory_id"], "embedder": embedder_name,
            "vector": pl.Series(vectors).cast(pl.List(pl.Float32)),
        }, schema=EMBEDDINGS)
    return Dataset(source=SOURCE, version=VERSION, digest=digest.hexdigest(),
                   memories=memories, embeddings=embeddings,
                   edges=_edge_frame(_synthesize_edges(turns, vectors, edges)),
                   events=events, queries=queries, qrels=qrels)


def _frame(schema: pl.Schema, columns: dict[str, Any], file: str,
           rows: list[str]) -> pl.DataFrame:
    """A frame of `schema` (absent columns null) with `_file` and `_row` (a JSON path)."""
    frame = pl.DataFrame({c: columns.get(c) for c in schema}, schema=schema,
                         height=len(rows))
    return frame.with_columns(_file=pl.lit(file, pl.String), _row=pl.Series(rows, dtype=pl.String))


def _embed(embed: Embed, texts: list[str]) -> np.ndarray:
    vectors = np.asarray(embed(texts), dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] == 0:
        raise ValueError(f"embed must return an array of shape ({len(texts)}, dim >= 1) for "
                         f"{len(texts)} texts, got shape {vectors.shape}")
    if not np.isfinite(vectors).all():
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise ValueError(f"embed returned a non-finite value in row {bad} "
                         f"(text {texts[bad]!r}); every value must be finite")
    return vectors


def _synthesize_edges(turns: list[_Turn], vectors: np.ndarray | None,
                      cfg: EdgesConfig) -> list[MemoryEdge]:
    """Every turn through `EdgeBuilder.on_memory_created` in time order, one graph per owner."""
    stores: dict[str, tuple[ContextGraph, EdgeBuilder]] = {}
    for i in sorted(range(len(turns)), key=lambda i: (turns[i].at, i)):
        turn = turns[i]
        graph, builder = stores.setdefault(turn.sample_id, (ContextGraph(), EdgeBuilder()))
        builder.on_memory_created(
            graph, cfg, memory_id=turn.memory_id, text=turn.text, user_id=turn.sample_id,
            agent_id=None, run_id=turn.run_id, metadata=turn.metadata,
            embedding=None if vectors is None else vectors[i], now=turn.at)
    return [edge for graph, _ in stores.values() for edge in graph.edges()]


def _edge_frame(found: list[MemoryEdge]) -> pl.DataFrame:
    """Stored edges (final weights), by creation time, then each graph's storage order."""
    frame = pl.DataFrame({
        "src": [e.src for e in found], "dst": [e.dst for e in found],
        "type": [e.type.value for e in found], "weight": [e.weight for e in found],
        "created_at": [e.created_at for e in found],
        "updated_at": [e.updated_at for e in found],
        "evidence": [e.evidence for e in found],
    }, schema=EDGES)
    return frame.sort("created_at", maintain_order=True)


def _log(anomalies: list[dict[str, Any]], file: str) -> None:
    if not anomalies:
        return
    counts = Counter(a["kind"] for a in anomalies)
    logger.warning("%s: %d anomalies (%s); see locomo_anomalies()", file, len(anomalies),
                   ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())))
    for a in anomalies:
        logger.info("%s: %s %s: %s %r -> %r (%s)", file, a["sample_id"], a["where"],
                    a["kind"], a["value"], a["resolved"], a["reason"])
