"""Dense seeds from Qdrant: the adapter behind the `DenseIndex` port.

One class for the three ways of running Qdrant: embedded on disk (`path=`, e.g. beside the
DuckDB file), embedded in memory (`location=":memory:"`) and a server (`url=`). Searches
filter the way ContextKit's Qdrant vector store does: one payload equality condition per
filter key, all of which must hold, on the filters `msprlab.engine.search.vector_filters`
returns. The engine never imports this module's dependency; it sees `DenseIndex` only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["MEMORY_ID_KEY", "DenseIndex", "QdrantIndex", "point_id"]

# Payload key that carries the memory id: Qdrant point ids must be ints or UUIDs.
MEMORY_ID_KEY = "memory_id"
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "msprlab/memory")

FilterValue = str | int | bool
ProgressCallback = Callable[[int, int], None]


class DenseIndex(Protocol):
    """Port: nearest memories to a vector, optionally restricted by payload equality."""

    def search(self, vector: np.ndarray, k: int,
               filters: Mapping[str, FilterValue] | None = None) -> list[tuple[str, float]]: ...


def point_id(memory_id: str) -> str:
    """The Qdrant point id of a memory: a UUID5 of its id, the same in every run."""
    return str(uuid.uuid5(_NAMESPACE, memory_id))


def _qdrant() -> Any:
    try:
        import qdrant_client
        from qdrant_client import models
    except ImportError as e:  # a core dependency, but say how to get it back
        raise ImportError("QdrantIndex requires qdrant-client: pip install msprlab") from e
    return qdrant_client, models


class QdrantIndex:
    """Memory vectors in a Qdrant collection with cosine distance.

    Give exactly one of `path` (embedded, on disk), `location` (":memory:") or `url`
    (server; `api_key` optional). The collection is created when missing; an existing one
    must have `dim`-wide cosine vectors. An on-disk index is locked while open: `close()` it
    (or use `with`) before opening the same path again.

    Examples
    --------
    >>> with QdrantIndex(dim=2, location=":memory:") as index:
    ...     index.upsert(["m1", "m2"], np.array([[1.0, 0.0], [0.0, 1.0]]),
    ...                  [{"user_id": "alice"}, {"user_id": "bob"}])
    ...     index.search(np.array([1.0, 0.2]), k=5, filters={"user_id": "bob"})
    [('m2', 0.19611613...)]
    """

    def __init__(self, *, dim: int, path: str | Path | None = None, location: str | None = None,
                 url: str | None = None, api_key: str | None = None,
                 collection: str = "memories", batch_size: int = 1024) -> None:
        given = {k: v for k, v in (("path", path), ("location", location), ("url", url))
                 if v is not None}
        if len(given) != 1:
            raise ValueError("QdrantIndex needs exactly one of path=, location=':memory:' or "
                             f"url=, got {sorted(given) or 'none'}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"QdrantIndex.dim must be an int >= 1, got {dim!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"QdrantIndex.batch_size must be an int >= 1, got {batch_size!r}")
        if api_key is not None and url is None:
            raise ValueError("QdrantIndex: api_key= only applies to a server (url=)")
        qdrant_client, self._models = _qdrant()
        self.dim, self.collection, self.batch_size = dim, collection, batch_size
        self._where = f"{next(iter(given))}={next(iter(given.values()))}"
        if path is not None:
            Path(path).mkdir(parents=True, exist_ok=True)
            self._client = qdrant_client.QdrantClient(path=str(path))
        elif location is not None:
            self._client = qdrant_client.QdrantClient(location=location)
        else:
            self._client = qdrant_client.QdrantClient(url=url, api_key=api_key)
        self._ensure_collection()

    def _ensure_collection(self) -> None:
        models = self._models
        if not self._client.collection_exists(self.collection):
            self._client.create_collection(
                self.collection,
                vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.COSINE))
            return
        params = self._client.get_collection(self.collection).config.params.vectors
        if not isinstance(params, models.VectorParams):
            raise ValueError(f"collection {self.collection!r} at {self._where} has named vectors "
                             f"{sorted(params or {})}; QdrantIndex expects one unnamed vector")
        if params.size != self.dim or params.distance != models.Distance.COSINE:
            raise ValueError(
                f"collection {self.collection!r} at {self._where} holds {params.size}-dim "
                f"{params.distance.value} vectors, expected {self.dim}-dim Cosine; open it with "
                f"dim={params.size} or use another collection= name")

    def upsert(self, ids: Sequence[str], vectors: np.ndarray,
               payloads: Sequence[Mapping[str, Any]], *,
               progress: ProgressCallback | None = None) -> None:
        """Insert or replace memories, `batch_size` points per call to Qdrant.

        vectors : ndarray, shape (len(ids), dim); each payload is stored with the memory id
        added under `MEMORY_ID_KEY`. `progress(done, total)` is called after each batch.
        """
        ids = [self._check_id(m, i) for i, m in enumerate(ids)]
        matrix = self._check_vectors(vectors, rows=len(ids))
        if len(payloads) != len(ids):
            raise ValueError(f"upsert: {len(ids)} ids but {len(payloads)} payloads")
        # Everything is checked before the first write, so a bad row writes nothing.
        stored = [self._payload(m, payloads[i], i) for i, m in enumerate(ids)]
        total = len(ids)
        for start in range(0, total, self.batch_size):
            stop = min(start + self.batch_size, total)
            points = self._models.Batch(ids=[point_id(m) for m in ids[start:stop]],
                                        vectors=matrix[start:stop].tolist(),
                                        payloads=stored[start:stop])
            self._client.upsert(self.collection, points=points, wait=True)
            if progress is not None:
                progress(stop, total)

    def search(self, vector: np.ndarray, k: int,
               filters: Mapping[str, FilterValue] | None = None) -> list[tuple[str, float]]:
        """The `k` memories nearest to `vector` by cosine, best first, as (memory_id, score).

        `filters` are payload equality conditions, all required (the output of
        `msprlab.engine.search.vector_filters`); None or {} means no filter.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"search: k must be an int >= 1 (Qdrant rejects a limit below 1), "
                             f"got {k!r}")
        query = np.asarray(vector, dtype=np.float64)
        if query.shape != (self.dim,) or not np.isfinite(query).all():
            raise ValueError(f"search: vector must be finite with shape ({self.dim},) for a "
                             f"{self.dim}-dim index, got shape {query.shape}")
        response = self._client.query_points(
            self.collection, query=query.astype(np.float32).tolist(),
            query_filter=self._filter(filters), limit=k, with_payload=[MEMORY_ID_KEY])
        return [(str(p.payload[MEMORY_ID_KEY]), float(p.score)) for p in response.points]

    def count(self) -> int:
        """Number of memories in the collection."""
        return int(self._client.count(self.collection, exact=True).count)

    def close(self) -> None:
        """Release the client (and the lock on an on-disk index)."""
        self._client.close()

    def __enter__(self) -> QdrantIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _filter(self, filters: Mapping[str, FilterValue] | None) -> Any:
        if not filters:
            return None
        models = self._models
        conditions = []
        for key, value in filters.items():
            if not isinstance(value, str | int | bool):
                raise TypeError(f"search: filter {key!r} must be a str, int or bool, got "
                                f"{type(value).__name__}; pass the filters through "
                                "msprlab.engine.search.vector_filters first")
            conditions.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
        return models.Filter(must=conditions)

    def _check_vectors(self, vectors: np.ndarray, *, rows: int) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape != (rows, self.dim):
            raise ValueError(f"vectors must have shape ({rows}, {self.dim}) for {rows} ids in a "
                             f"{self.dim}-dim index, got {matrix.shape}")
        if not np.isfinite(matrix).all():
            bad = int(np.argwhere(~np.isfinite(matrix))[0, 0])
            raise ValueError(f"vectors[{bad}] has a NaN or infinite value")
        return matrix.astype(np.float32)

    @staticmethod
    def _check_id(memory_id: object, position: int) -> str:
        if not isinstance(memory_id, str) or not memory_id:
            raise ValueError(f"upsert: ids[{position}] must be a non-empty str, got "
                             f"{memory_id!r}")
        return memory_id

    @staticmethod
    def _payload(memory_id: str, payload: Mapping[str, Any], position: int) -> dict[str, Any]:
        stored = payload.get(MEMORY_ID_KEY, memory_id)
        if stored != memory_id:
            raise ValueError(f"upsert: payloads[{position}][{MEMORY_ID_KEY!r}] is {stored!r} "
                             f"but ids[{position}] is {memory_id!r}")
        return {**payload, MEMORY_ID_KEY: memory_id}
