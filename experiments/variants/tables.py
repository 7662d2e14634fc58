"""The candidate tables of a search over the whole ranking configuration, cached by exactly
the settings that reach them.

`TableStore.tables(points)` gives the table of each point (an engine configuration and a
search limit): from memory, from the store's replay cache (`STORE.cache/`, shared with
`cached_replay`: the same `cache_key`, which leaves out every setting that cannot reach
the table, `variants.settings.reaching`), or replayed. The missing ones are grouped by the
state they record (`settings.state_of`: they differ in search settings only) and each group
is replayed in one walk over the timeline (`replay.replay_variants`), so each distinct
state is replayed once however many search settings are asked of it. Walks of one group
are serialised across the processes of a host by a lock file beside the cache (the second
finds the tables written and loads them); each host keeps its own cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprlab.datasets.dense_index import DenseIndex
from msprlab.datasets.schema import Dataset
from msprlab.datasets.timeline import shared_by_replays
from msprlab.engine import EngineConfig
from msprlab.engine.config import as_dict
from msprlab.engine.roles import RolePolicy

from ..replay import CandidateTable, FrequencyMode, cache_key, featurize_config, replay_variants
from .settings import state_of

__all__ = ["Point", "TableStats", "TableStore"]

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass(frozen=True)
class Point:
    """A configuration to score: the engine configuration (its six weights play no part)
    and the evaluated search limit (None: each logged search's own)."""

    config: EngineConfig
    limit: int | None = None


@dataclass
class TableStats:
    """What the store did: walks run, tables built in them (variants), tables read from the
    replay cache, tables found in memory, and the seconds spent walking."""

    walks: int = 0
    built: int = 0
    loaded: int = 0
    in_memory: int = 0
    seconds: float = 0.0
    sizes: list[int] = field(default_factory=list)  # variants per walk

    def as_dict(self) -> dict[str, Any]:
        return {"walks": self.walks, "tables_built": self.built, "tables_loaded": self.loaded,
                "tables_in_memory": self.in_memory, "walk_seconds": round(self.seconds, 3),
                "variants_per_walk": list(self.sizes),
                "shared_walks": sum(1 for n in self.sizes if n > 1),
                "variants_in_shared_walks": sum(n for n in self.sizes if n > 1)}


class TableStore:
    """Candidate tables by point, kept in memory (the `memory` most recent), in the cache
    folder, or replayed (module docstring). Logged frequency mode only."""

    def __init__(self, ds: Dataset, cache_dir: Path | None, *, frequency: FrequencyMode,
                 policy: RolePolicy | None = None, seed_index: DenseIndex | None = None,
                 memory: int = 12, progress: Progress | None = None,
                 on_walk: Callable[[int, int], None] | None = None) -> None:
        self.ds = ds
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.frequency = frequency
        self.policy = policy
        self.seed_index = seed_index
        self.memory = memory
        self.progress = progress
        self.on_walk = on_walk  # (walk number, variants): a walk starts
        self.stats = TableStats()
        self._kept: OrderedDict[str, CandidateTable] = OrderedDict()
        self._keys: dict[Point, str] = {}

    def key(self, point: Point) -> str:
        """The point's table: the replay cache's key (`replay.cache_key`)."""
        key = self._keys.get(point)
        if key is None:
            key = self._keys[point] = cache_key(
                self.ds, point.config, self.frequency, limit=point.limit, policy=self.policy,
                seeds="exact" if self.seed_index is None else "index")
        return key

    def table(self, point: Point) -> CandidateTable:
        return self.tables([point])[0]

    def tables(self, points: Sequence[Point]) -> list[CandidateTable]:
        """The table of each point, in order; the missing ones replayed, one walk per
        state they record."""
        keys = [self.key(p) for p in points]
        got: dict[str, CandidateTable] = {}
        missing: dict[str, Point] = {}
        for key, point in zip(keys, points, strict=True):
            if key in got or key in missing:
                continue
            if key in self._kept:
                self._kept.move_to_end(key)
                got[key] = self._kept[key]
                self.stats.in_memory += 1
            elif (found := self._read(key)) is not None:
                got[key] = found
                self._keep(key, found)
                self.stats.loaded += 1
            else:
                missing[key] = point
        groups: dict[str, dict[str, Point]] = {}
        for key, point in missing.items():
            groups.setdefault(self._state(point), {})[key] = point
        if groups:
            with shared_by_replays(self.ds):
                for state, group in groups.items():
                    got.update(self._walk(state, group))
        return [got[key] for key in keys]

    def _state(self, point: Point) -> str:
        run = featurize_config(point.config, self.frequency)
        spec = json.dumps(as_dict(state_of(run)), sort_keys=True, default=str)
        return hashlib.sha256(spec.encode()).hexdigest()[:16]

    def _walk(self, state: str, group: dict[str, Point]) -> dict[str, CandidateTable]:
        """The group's tables: one walk for those no other process wrote meanwhile."""
        import time
        with self._lock(state):
            found = {key: table for key in group if (table := self._read(key)) is not None}
            self.stats.loaded += len(found)
            todo = {key: point for key, point in group.items() if key not in found}
            if todo:
                self.stats.walks += 1
                self.stats.sizes.append(len(todo))
                if self.on_walk is not None:
                    self.on_walk(self.stats.walks, len(todo))
                label = f"walk {self.stats.walks}: {len(todo)} configuration(s)"
                progress = self.progress
                started = time.perf_counter()
                tables = replay_variants(
                    self.ds, [p.config for p in todo.values()],
                    limits=[p.limit for p in todo.values()], frequency=self.frequency,
                    policy=self.policy, seed_index=self.seed_index,
                    progress=None if progress is None else
                    (lambda done, total: progress(label, done, total)))
                self.stats.seconds += time.perf_counter() - started
                self.stats.built += len(todo)
                for key, table in zip(todo, tables, strict=True):
                    found[key] = table
                    if self.cache_dir is not None:
                        table.save(self.cache_dir / key[:24])
        for key, table in found.items():
            self._keep(key, table)
        return found

    def _read(self, key: str) -> CandidateTable | None:
        if self.cache_dir is None:
            return None
        folder = self.cache_dir / key[:24]
        return CandidateTable.load(folder) if (folder / "meta.json").is_file() else None

    def _keep(self, key: str, table: CandidateTable) -> None:
        self._kept[key] = table
        self._kept.move_to_end(key)
        while len(self._kept) > self.memory:
            self._kept.popitem(last=False)

    def _lock(self, state: str) -> Any:
        """An exclusive `flock` on `CACHE/.walk-STATE.lock` (nothing without a cache)."""
        from contextlib import contextmanager, nullcontext
        if self.cache_dir is None:
            return nullcontext()

        @contextmanager
        def held() -> Any:
            assert self.cache_dir is not None
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            with open(self.cache_dir / f".walk-{state}.lock", "ab") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                yield
        return held()
