"""Replay an experiment's store: one candidate table per table key, the labels every table
is scored against (the store's qrels or its feedback verdicts) and the time split.

`replay_tables` replays the store once per distinct table key (cached beside the store),
except a table with success off whose success-on twin is replayed too: it is derived from
the twin's (`replay.derive_table`). Everything reported is measured on the test window of
the split, tuning sees only the train window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.datasets.schema import Dataset
from msprlab.datasets.sidecars import replay_cache_path
from msprlab.datasets.timeline import shared_by_replays
from msprlab.engine import EngineConfig
from msprlab.engine.roles import RolePolicy, policy_from_name

from ..errors import ExperimentError
from ..experiment_config import ExperimentConfig
from ..measures.splits import split_searches
from ..replay import CandidateTable, cached_replay, derive_table, success_twin, table_key
from .prepare import Stage, quiet

__all__ = ["LABEL_SOURCE", "VERDICT_LABELS", "Labels", "Prepared", "labelled", "policy_of",
           "replay_tables", "split_tables", "window_table", "with_questions"]


# Where the relevance judgments every table is scored against come from: the store's qrels,
# or its feedback verdicts ([dataset] labels = "verdicts").
LABEL_SOURCE = "dataset qrels"
VERDICT_LABELS = "feedback verdicts"


@dataclass(frozen=True)
class Labels:
    """Where the relevance judgments come from, named wherever a number is printed, and,
    for verdict labels, what the derivation counted (`verdict_labels.Relabelled`)."""

    source: str
    occurrences: int = 0      # searches made from verdict occurrences
    verdicts: int = 0         # verdicts labelling them (the last per memory and search)
    without_query: int = 0    # verdicts given without a query: they label no search
    without_owner: int = 0    # verdicts with a query but no owner id: neither
    window_minutes: float | None = None
    # the replay's fidelity to production, one line (`experiments.fidelity`), where measured
    fidelity: str | None = None

    @property
    def shown(self) -> str:
        """The label source as every figure names it: with the replay's fidelity beside
        verdict labels, where it was measured."""
        return self.source if self.fidelity is None else f"{self.source} ({self.fidelity})"

    def note(self) -> str | None:
        if self.source != VERDICT_LABELS:
            return None
        return (f"labels: {self.verdicts:,} feedback verdicts (helpful = relevant, unhelpful "
                f"= judged not relevant, the rest unjudged) on {self.occurrences:,} searches "
                f"(one per owner scope (user, agent, run) and query within "
                f"{self.window_minutes:g} minutes, replayed "
                f"just before its first verdict); {self.without_query:,} verdicts without a "
                f"query text and {self.without_owner:,} without a user, agent or run id label "
                "no search. Verdicts exist only for memories the logging "
                "ranker showed, so these labels favour rankers like it: read the judged "
                "share beside every figure")


def labelled(cfg: ExperimentConfig, dataset: Dataset) -> tuple[Dataset, Labels,
                                                                 dict[str, str]]:
    """The dataset to replay, its label source, and occurrence -> question (verdicts)."""
    d = cfg.dataset
    if d.labels != "verdicts":
        return dataset, Labels(LABEL_SOURCE), {}
    from datetime import timedelta

    from msprlab.datasets.verdict_labels import relabel
    try:
        rel = relabel(dataset, window=timedelta(minutes=d.verdict_window_minutes),
                      limit=d.verdict_limit)
    except ValueError as exc:
        raise ExperimentError(f"dataset.labels = \"verdicts\": {exc}") from None
    if not rel.questions:
        raise ExperimentError("dataset.labels = \"verdicts\": the store holds no verdict "
                              f"with a query ({rel.without_query:,} without one), so no search "
                              "can be labelled; ingest ContextKit's feedback_events.db")
    return rel.dataset, Labels(VERDICT_LABELS, len(rel.questions), rel.verdicts,
                               rel.without_query, rel.without_owner,
                               d.verdict_window_minutes), rel.questions


def with_questions(table: CandidateTable, questions: dict[str, str]) -> CandidateTable:
    """Each search's question (the query hash its occurrence belongs to): the per-query
    unit counts a question once, whatever its occurrences."""
    if not questions:
        return table
    searches = table.searches.with_columns(
        question=pl.col("query_id").replace_strict(questions, return_dtype=pl.String))
    return CandidateTable(searches, table.candidates, table.qrels, table.meta)


@dataclass(frozen=True)
class Prepared:
    """The replayed tables of an experiment, keyed by table key, and the split labels."""

    dataset: Dataset
    store: Path
    tables: dict[str, CandidateTable]          # key hash -> table
    key_of: dict[str, str]                     # config name -> key hash
    split: pl.Series                           # per search: train / gap / test
    from_cache: dict[str, bool] = field(default_factory=dict)
    labels: Labels = field(default_factory=lambda: Labels(LABEL_SOURCE))
    derived: dict[str, str] = field(default_factory=dict)  # key hash -> its twin's, not replayed
    # `experiments.fidelity.stage.Fidelity` once measured (verdict labels on a store that
    # records production's end state), else None: is the replay production?
    fidelity: Any = None
    questions: dict[str, str] = field(default_factory=dict)  # verdicts: occurrence -> question

    @property
    def replayed(self) -> int:
        return len(self.tables) - len(self.derived)

    def table(self, name: str) -> CandidateTable:
        return self.tables[self.key_of[name]]


def policy_of(cfg: ExperimentConfig) -> RolePolicy | None:
    return policy_from_name(cfg.replay.policy)


def _key(config: EngineConfig, frequency: Any, has_policy: bool) -> str:
    spec = table_key(config, frequency, has_policy=has_policy)
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def replay_tables(cfg: ExperimentConfig, store: Path, configs: Mapping[str, EngineConfig],
                  progress: Stage = quiet) -> Prepared:
    """Replay the store once per distinct table key of `configs` (cached beside the store);
    a key with success off whose success-on twin is among them is derived from it."""
    from msprlab.datasets.store import load_dataset
    dataset, labels, questions = labelled(cfg, load_dataset(store))
    frequency: Any = cfg.replay.frequency
    limit = cfg.replay.limit or None
    policy = policy_of(cfg)
    has_policy = policy is not None
    keys: dict[str, str] = {}
    representative: dict[str, EngineConfig] = {}
    for name, config in configs.items():
        keys[name] = key = _key(config, frequency, has_policy)
        representative.setdefault(key, config)
    derived: dict[str, str] = {}
    for key, config in representative.items():
        twin = success_twin(config, frequency)
        if twin is not None and (twin_key := _key(twin, frequency, has_policy)) in representative:
            derived[key] = twin_key
    replayed: dict[str, CandidateTable] = {}
    cached: dict[str, bool] = {}
    to_replay = [(key, config) for key, config in representative.items() if key not in derived]
    with shared_by_replays(dataset):  # what the replays only read, made once
        for i, (key, config) in enumerate(to_replay):
            label = f"replay {i + 1}/{len(to_replay)}"
            replayed[key], cached[key] = cached_replay(
                dataset, config, replay_cache_path(store), frequency=frequency,
                limit=limit, policy=policy,
                progress=lambda done, total, label=label: progress(label, done, total))
            replayed[key] = with_questions(replayed[key], questions)
    out = {key: replayed[key] if key not in derived else derive_table(
        replayed[derived[key]], config, frequency, has_policy=has_policy)
        for key, config in representative.items()}
    first = next(iter(out.values()))
    for key, table in out.items():
        if table.searches["event_id"].to_list() != first.searches["event_id"].to_list():
            raise AssertionError(f"replay {key}: evaluated searches differ between tables")
    split = split_searches(first.searches, cfg.split.spec())
    return Prepared(dataset, store, out, keys, split, cached, labels, derived,
                    questions=questions)


def window_table(prepared: Prepared, name: str, window: str) -> CandidateTable:
    """The table configuration `name` is scored from, restricted to one window."""
    return prepared.table(name).subset((prepared.split == window).to_numpy())


def split_tables(prepared: Prepared, window: str) -> dict[str, CandidateTable]:
    """Each table restricted to one window ("train" or "test")."""
    mask = (prepared.split == window).to_numpy()
    return {key: table.subset(mask) for key, table in prepared.tables.items()}
