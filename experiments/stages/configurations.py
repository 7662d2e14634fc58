"""The tables of configuration points, for the configuration search and `msprlab score`: the
experiment's store replayed with a point's settings (`variants.tables.TableStore`: cached
by exactly the settings that reach the table, one walk per recorded state), labelled as
the experiment's tables are, and restricted to a window of the experiment's split.

`ConfigTables` is what a configuration search's worker processes receive: it holds the
experiment and the split, and loads the store (and builds the tables it needs) in the
process that uses it, so each host and worker builds only what its trials ask for.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msprlab.datasets.sidecars import replay_cache_path

from ..experiment_config import ExperimentConfig
from ..measures.metrics import Metric
from ..measures.scoring import Scorer
from ..replay import CandidateTable
from ..variants.tables import Point, TableStats, TableStore
from .prepare import Stage, quiet
from .replay_tables import Prepared, labelled, policy_of, with_questions

__all__ = ["ConfigTables"]

_SCORERS = 8  # windowed scorers kept per process (each holds a table's arrays)


@dataclass(eq=False)
class ConfigTables:
    """Windowed scorers of configuration points, built or loaded where they are used.

    split: per search of every table, its window ("train", "gap", "test"), in table order
    (every table of the store has the same evaluated searches). `progress` and `on_walk`
    report the walks this process runs (not pickled: a worker reports through the study).
    """

    cfg: ExperimentConfig
    store: Path
    split: np.ndarray
    metrics: tuple[Metric, ...]
    progress: Stage = field(default=quiet, repr=False)
    on_walk: Any = field(default=None, repr=False)
    cache_dir: Path | None = None  # the replay cache (None: beside the store)
    _prepared: Prepared | None = field(default=None, repr=False)
    _tables: TableStore | None = field(default=None, repr=False)
    _scorers: OrderedDict[tuple[str, str], Scorer] = field(default_factory=OrderedDict,
                                                           repr=False)
    _questions: dict[str, str] | None = field(default=None, repr=False)

    @staticmethod
    def of(cfg: ExperimentConfig, prepared: Prepared, metrics: Sequence[Metric], *,
           progress: Stage = quiet, on_walk: Any = None,
           cache_dir: Path | None = None) -> ConfigTables:
        """The experiment's configuration tables, sharing the prepared dataset."""
        return ConfigTables(cfg, prepared.store, prepared.split.cast(str).to_numpy(),
                            tuple(metrics), progress, on_walk, cache_dir, prepared)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))
        state.update(progress=quiet, on_walk=None, _prepared=None, _tables=None,
                     _scorers=OrderedDict(), _questions=None)
        return state

    @property
    def stats(self) -> TableStats:
        return self._store().stats

    def key(self, point: Point) -> str:
        return self._store().key(point)

    def tables(self, points: Sequence[Point]) -> list[CandidateTable]:
        """Each point's whole table (every window), labelled as the experiment's."""
        questions = self._questions if self._questions is not None else {}
        return [with_questions(t, questions) for t in self._store().tables(points)]

    def scorer(self, point: Point, table: CandidateTable, window: str) -> Scorer:
        """The point's table restricted to `window`, prepared for scoring (kept for the
        most recent points)."""
        key = (self.key(point), window)
        found = self._scorers.get(key)
        if found is None:
            found = self._scorers[key] = Scorer.of(table.subset(self.split == window),
                                                   self.metrics)
            while len(self._scorers) > _SCORERS:
                self._scorers.popitem(last=False)
        self._scorers.move_to_end(key)
        return found

    def _store(self) -> TableStore:
        if self._tables is None:
            if self._prepared is not None:
                dataset = self._prepared.dataset
                self._questions = self._prepared.questions
            else:
                from msprlab.datasets.store import load_dataset
                dataset, _, self._questions = labelled(self.cfg, load_dataset(self.store))
            progress = self.progress
            self._tables = TableStore(
                dataset, self.cache_dir or replay_cache_path(self.store),
                frequency=self.cfg.replay.frequency,
                policy=policy_of(self.cfg),
                progress=lambda what, done, total: progress(what, done, total),
                on_walk=self.on_walk)
        return self._tables
