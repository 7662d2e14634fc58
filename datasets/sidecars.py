"""Files kept beside an event store, each named here: a Qdrant local index of its vectors,
the synthetic truth, the replay cache and the experiments' Optuna journals.

For the store `STORE` (a DuckDB file):

- `STORE.qdrant/` is a Qdrant local (embedded, on-disk) collection of the store's
  embeddings, one point per memory with its owner payload (`user_id`, `agent_id`,
  `run_id`, `tenant_id`, `sub_tenant_id`, `role`, `allowed_roles` where set), so seeds can
  be searched with the engine's owner-scope filters. `msprlab-index.json` inside it names
  the dataset digest it was built from: an index whose digest is not the store's is stale.
  It is built in a temp folder and swapped in, so a failure leaves the old one.
- `STORE.truth.json` holds what the synthetic generator planted (weights, spec, seed) and
  the digest of the dataset it belongs to, written atomically.
- `STORE.cache/` holds the replayed candidate tables, one folder per cache key
  (`experiments.replay.cached_replay`), and `STEM.EXPERIMENT.optuna.journal` (STEM: the
  store's name without `.duckdb`) the Optuna study an experiment's weight search keeps
  when no other storage is given.

The store's DuckDB file stays the one source of truth: both are derived from it (or from
the same build), and a consumer checks their digest against the store's manifest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .atomic import pid_alive, write_json_atomic
from .dense_index import QdrantIndex
from .schema import Dataset
from .synthetic import SIGNALS, SyntheticSpec, SyntheticTruth

__all__ = ["INDEX_MARKER", "IndexReport", "index_digest", "index_path", "index_rows",
           "journal_path", "memory_index", "replay_cache_path", "truth_path", "truth_record",
           "write_local_index", "write_truth"]

INDEX_MARKER = "msprlab-index.json"
# Qdrant's local mode commits its SQLite file once per point, and each commit waits for the
# disk (3 to 17 ms per point here, depending on other I/O). An index is therefore built in
# RAM-backed /dev/shm where there is one (about 0.8 ms per point), then copied beside the
# store and swapped in.
_STAGING_ROOT = Path("/dev/shm")
_PAYLOAD_KEYS = ("user_id", "agent_id", "run_id", "tenant_id", "sub_tenant_id", "role",
                 "allowed_roles")


def index_path(store: Path) -> Path:
    """`STORE.qdrant`, the Qdrant local folder beside the store."""
    return store.with_name(store.name + ".qdrant")


def truth_path(store: Path) -> Path:
    """`STORE.truth.json`, the planted truth of a synthetic store."""
    return store.with_name(store.name + ".truth.json")


def replay_cache_path(store: Path) -> Path:
    """`STORE.cache`, the folder of the store's replayed candidate tables."""
    return store.with_name(store.name + ".cache")


def journal_path(store: Path, experiment: str) -> Path:
    """`STEM.EXPERIMENT.optuna.journal` beside the store: the experiment's default study."""
    return store.with_name(f"{store.stem}.{experiment}.optuna.journal")


@dataclass(frozen=True)
class IndexReport:
    """What `write_local_index` did; `written` is False when the index was already current."""

    path: Path
    digest: str
    embedder: str
    points: int
    dim: int
    written: bool
    seconds: float

    def summary(self) -> str:
        if not self.written:
            return (f"{self.path}: unchanged, it already indexes digest {self.digest[:12]} "
                    f"({self.points:,} {self.embedder} vectors)")
        return (f"{self.path}: wrote {self.points:,} {self.dim}-dim {self.embedder} vectors "
                f"with owner payloads in {self.seconds:.2f} s")


def index_rows(ds: Dataset) -> tuple[list[str], np.ndarray, list[dict[str, Any]], str]:
    """Memory ids, vectors (n, dim), owner payloads and the embedder name, in memory order.

    The dataset must hold the vectors of exactly one embedder.
    """
    names = ds.embeddings["embedder"].unique().sort().to_list()
    if len(names) != 1:
        raise ValueError(f"{ds.source}: a Qdrant index needs the vectors of one embedder, "
                         f"but the dataset has {len(names)} ({names}); ingest with an "
                         "embedder")
    rows = ds.memories.select("memory_id", *_PAYLOAD_KEYS).join(
        ds.embeddings.select("memory_id", "vector"), on="memory_id", how="inner",
        maintain_order="left")
    vectors = np.asarray(rows["vector"].to_list(), dtype=np.float32)
    payloads = [{k: v for k, v in row.items() if v is not None}
                for row in rows.select(_PAYLOAD_KEYS).to_dicts()]
    return rows["memory_id"].to_list(), vectors, payloads, names[0]


def memory_index(ds: Dataset, *, progress: Callable[[int, int], None] | None = None,
                 ) -> QdrantIndex:
    """An in-memory Qdrant index of the dataset's vectors (what a replay rebuilds)."""
    ids, vectors, payloads, _ = index_rows(ds)
    index = QdrantIndex(dim=vectors.shape[1], location=":memory:")
    index.upsert(ids, vectors, payloads, progress=progress)
    return index


def index_digest(store: Path) -> str | None:
    """The dataset digest the index beside `store` was built from; None if there is none."""
    marker = index_path(store) / INDEX_MARKER
    if not marker.is_file():
        return None
    digest = json.loads(marker.read_text(encoding="utf-8")).get("digest")
    return digest if isinstance(digest, str) else None


def write_local_index(ds: Dataset, store: Path, *,
                      progress: Callable[[int, int], None] | None = None) -> IndexReport:
    """Build `STORE.qdrant/` from the dataset's vectors unless it already indexes `ds.digest`.

    Cost: Qdrant's local mode commits each point to SQLite; built in /dev/shm that is about
    0.8 ms per point (5 s for LoCoMo's 5,882 turns at 256 dims), on disk 3 to 17 ms
    (`_STAGING_ROOT`). `progress(done, total)` is called after each batch of points.
    """
    started = time.perf_counter()
    store = Path(store)
    target = index_path(store)
    ids, vectors, payloads, embedder = index_rows(ds)
    if index_digest(store) == ds.digest:
        return IndexReport(target, ds.digest, embedder, len(ids), vectors.shape[1], False,
                           time.perf_counter() - started)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    staging = _STAGING_ROOT / tmp.name if _STAGING_ROOT.is_dir() else tmp
    for folder in {target.parent, staging.parent}:
        _sweep_stale(folder, target.name)
    try:
        staging.mkdir()
        with QdrantIndex(dim=vectors.shape[1], path=staging) as index:
            index.upsert(ids, vectors, payloads, progress=progress)
        marker = {"digest": ds.digest, "source": ds.source, "version": ds.version,
                  "embedder": embedder, "dim": int(vectors.shape[1]), "points": len(ids),
                  "collection": index.collection}
        (staging / INDEX_MARKER).write_text(json.dumps(marker, indent=1) + "\n",
                                            encoding="utf-8")
        if staging != tmp:
            shutil.copytree(staging, tmp)
        _swap_in(tmp, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return IndexReport(target, ds.digest, embedder, len(ids), vectors.shape[1], True,
                       time.perf_counter() - started)


def _swap_in(new: Path, target: Path) -> None:
    """Put the folder `new` at `target`; the old folder is removed only once `new` is there."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.{os.getpid()}.old.tmp")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _sweep_stale(folder: Path, name: str) -> None:
    """Remove the temp folders of builds of `name` killed before they finished (their
    process is gone)."""
    pattern = re.compile(rf"^\.{re.escape(name)}\.(\d+)\..*\.tmp$")
    for entry in folder.iterdir():
        match = pattern.match(entry.name)
        if match and entry.is_dir() and not pid_alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


def truth_record(truth: SyntheticTruth, spec: SyntheticSpec, *, seed: int,
                 digest: str) -> dict[str, Any]:
    """The planted truth as JSON-ready data: weights by signal, seed, spec and digest."""
    return {
        "format": "msprlab-synthetic-truth/1",
        "digest": digest,
        "seed": seed,
        "planted_weights": {s: getattr(truth.weights, s) for s in SIGNALS},
        "relevance_noise": spec.relevance_noise,
        "grade_counts": list(spec.grade_counts),
        "spec": json.loads(json.dumps(asdict(spec), default=str)),
        "queries_by_intent": dict(truth.queries.group_by("intent").len()
                                  .sort("intent").iter_rows()),
        "relevant_pairs": int(truth.pairs.filter(pl.col("relevance") > 0).height),
    }


def write_truth(path: Path, record: dict[str, Any]) -> None:
    """Write `record` as JSON to `path`, all or nothing."""
    write_json_atomic(path, record)
