"""The event store's tables: one schema module owns every column name and type.

Every source (LoCoMo, click-model logs, ContextKit artifacts, TREC, generic files) produces a
`Dataset` of Polars frames with exactly these schemas; the store writes them to DuckDB.
Timestamps are naive UTC microseconds. Events live on one global timeline ordered by
(`ts`, `seq`): `seq` is the documented tie-break for events that share a timestamp
(an ingest assigns it in source order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

TS = pl.Datetime("us")

MEMORIES = pl.Schema({
    "memory_id": pl.String, "text": pl.String,
    "user_id": pl.String, "agent_id": pl.String, "run_id": pl.String,
    "tenant_id": pl.String, "sub_tenant_id": pl.String,
    "role": pl.String, "allowed_roles": pl.List(pl.String),
    "metadata": pl.String,  # JSON object text: extra payload keys
    "created_at": TS, "updated_at": TS, "deleted_at": TS,
})

# The vector-store payload a memory gets at replay (`timeline._payload`, as `Memory.add`
# stores it): these fields come from the memory's columns, `metadata` adds the rest flat. A
# metadata key among them would overwrite a column's value, so ingest refuses it.
# `data` (the text), its `hash` and the two times; then the columns copied under their own
# names when set.
PAYLOAD_COLUMNS = ("user_id", "agent_id", "run_id", "tenant_id", "sub_tenant_id", "role",
                   "allowed_roles")
PAYLOAD_FIELDS = ("data", "hash", "created_at", "updated_at", *PAYLOAD_COLUMNS)

EMBEDDINGS = pl.Schema({"memory_id": pl.String, "embedder": pl.String,
                        "vector": pl.List(pl.Float32)})

# The query vectors a log's dense seeds were computed from, so a replay finds the same seeds.
QUERY_EMBEDDINGS = pl.Schema({"query_id": pl.String, "embedder": pl.String,
                              "vector": pl.List(pl.Float32)})

EDGES = pl.Schema({"src": pl.String, "dst": pl.String, "type": pl.String,
                   "weight": pl.Float64, "created_at": TS, "updated_at": TS,
                   "evidence": pl.String})

# The order is the tie-break for events that share a timestamp (`order_events`): memory
# events, then the search, then what follows it. `access` is the library's access counter
# (`record_access`: one per result a search returned, when frequency counting is on);
# `click` is a user opening a shown memory, which changes no engine state.
EVENT_KINDS = ("memory_added", "memory_updated", "memory_deleted", "search", "feedback",
               "access", "click")

EVENTS = pl.Schema({
    "event_id": pl.Int64,   # dense 0..n-1 in timeline order
    "ts": TS, "seq": pl.Int64,
    "kind": pl.Enum(EVENT_KINDS),
    "memory_id": pl.String,  # memory_* / feedback / access / click
    "query_id": pl.String,   # search / feedback / access / click: the search it followed
    "user_id": pl.String, "agent_id": pl.String, "run_id": pl.String,
    "query": pl.String,      # search / feedback text
    "filters": pl.String,    # search: JSON object
    "limit": pl.Int64,       # search
    "shown": pl.List(pl.String),  # search: the ranking that was shown, in order
    "helpful": pl.Boolean,   # feedback
})

QUERIES = pl.Schema({
    "query_id": pl.String, "text": pl.String,
    "user_id": pl.String, "agent_id": pl.String, "run_id": pl.String,
    "question_type": pl.String,  # the dataset's own label (LoCoMo category), if any
})

QRELS = pl.Schema({"query_id": pl.String, "memory_id": pl.String, "relevance": pl.Int64})

# What production wrote with each verdict besides the feedback event, where the source is a
# production log (ContextKit's `feedback_events` rows): the relevance delta it applied and
# the metadata the application passed (`{"rank": R}`, the 1-based rank the memory was shown
# at, where the application recorded it). A replay must reproduce them
# (`experiments/fidelity`). Keyed as the feedback event: memory, time, user and verdict.
# `success_row`: whether production's success store holds the verdict's row (null when
# the source gave no success store).
FEEDBACK_RECORDS = pl.Schema({"memory_id": pl.String, "ts": TS, "user_id": pl.String,
                              "helpful": pl.Boolean, "delta_applied": pl.Float64,
                              "metadata": pl.String, "success_row": pl.Boolean})

MANIFEST = pl.Schema({"source": pl.String, "version": pl.String, "digest": pl.String,
                      "counts": pl.String, "ingested_at": TS, "embedders": pl.String})

TABLES: dict[str, pl.Schema] = {
    "memories": MEMORIES, "embeddings": EMBEDDINGS, "edges": EDGES, "events": EVENTS,
    "queries": QUERIES, "qrels": QRELS, "query_embeddings": QUERY_EMBEDDINGS,
    "feedback_records": FEEDBACK_RECORDS,
}


def empty(schema: pl.Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


@dataclass(frozen=True)
class Dataset:
    """What a source produces: one frame per table, plus where it came from.

    `digest` identifies the source content (sha256 of the input files and the generator
    parameters), so re-ingesting the same source is a no-op.
    """

    source: str
    version: str
    digest: str
    memories: pl.DataFrame = field(default_factory=lambda: empty(MEMORIES))
    embeddings: pl.DataFrame = field(default_factory=lambda: empty(EMBEDDINGS))
    edges: pl.DataFrame = field(default_factory=lambda: empty(EDGES))
    events: pl.DataFrame = field(default_factory=lambda: empty(EVENTS))
    queries: pl.DataFrame = field(default_factory=lambda: empty(QUERIES))
    qrels: pl.DataFrame = field(default_factory=lambda: empty(QRELS))
    query_embeddings: pl.DataFrame = field(default_factory=lambda: empty(QUERY_EMBEDDINGS))
    feedback_records: pl.DataFrame = field(default_factory=lambda: empty(FEEDBACK_RECORDS))
    # What msprlab embedded the texts with (recipe and package version), when it did.
    embedded_with: str | None = None

    def tables(self) -> dict[str, pl.DataFrame]:
        return {name: getattr(self, name) for name in TABLES}

    def counts(self) -> dict[str, int]:
        return {name: frame.height for name, frame in self.tables().items()}

    def embedders(self) -> list[dict[str, object]]:
        """Per vector table and embedder: its name, the vectors' dimension, the rows, and
        what made them when msprlab did (the manifest's `embedders`)."""
        out: list[dict[str, object]] = []
        for table in ("embeddings", "query_embeddings"):
            frame = getattr(self, table)
            if not frame.height:
                continue
            sizes = frame.select("embedder", dim=pl.col("vector").list.len())
            for (name,), part in sizes.group_by(["embedder"], maintain_order=True):
                dims = sorted(set(part["dim"].to_list()))
                out.append({"table": table, "embedder": name, "dim": dims[0] if len(dims) == 1
                            else dims, "rows": part.height, "made_by": self.embedded_with})
        return out


# Provenance columns a source may add for error messages; the store never writes them.
PROVENANCE = ("_file", "_row")


def require(frame: pl.DataFrame, schema: pl.Schema, *, what: str) -> None:
    """Raise unless `frame` has exactly the columns and types of `schema` (plus provenance)."""
    problems = [f"missing column {c!r}" for c in schema if c not in frame.columns]
    problems += [f"column {c!r} is {frame.schema[c]}, expected {t}"
                 for c, t in schema.items() if c in frame.columns and frame.schema[c] != t]
    problems += [f"unexpected column {c!r}" for c in frame.columns
                 if c not in schema and c not in PROVENANCE]
    if problems:
        raise ValueError(f"{what}: " + "; ".join(problems) + f" (found columns {frame.columns})")
