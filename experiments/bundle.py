"""The results bundle: everything a command measured, as files, for reports and regressions.

A command writes `ROOT/results/NAME-COMMAND-STAMP/` and logs the folder as artifacts of
its MLflow parent run, so `msprlab report` renders from files alone (never re-running the
engine). The layout (each file's name, and what it holds) is defined once, below: the
writer (`experiments.reporter`, the only module that writes a bundle) and the reader
(`reports.load`) name the files by these constants, never by spelling them.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from msprlab.datasets.atomic import write_json_atomic

if TYPE_CHECKING:
    from .experiment_config import ExperimentConfig
    from .stages.replay_tables import Prepared

__all__ = ["Bundle", "provenance"]


# ---- the layout: every file name a bundle holds, spelled here only ------------------------
PROVENANCE = "provenance.json"  # experiment, config hash and text, dataset digest and
#   source, store, git commit, command, MLflow run, split sizes, frequency mode, feedback
#   policy, seeds, timings
DECISION = "decision/verdicts.parquet"  # one row per candidate: the confirmatory verdicts
#   (decision.COLUMNS); the same as DECISION_CSV, for a human
DECISION_CSV = "decision/verdicts.csv"
DECISION_BY_INTENT = "decision/by_intent.parquet"  # the exploratory per-intent verdicts
DECISION_BY_INTENT_CSV = "decision/by_intent.csv"
DECISION_NOTES = "decision/recommendation.json"  # what the recommended configuration
#   changes and why, and the recommended configuration scored (when it was)
FIDELITY = "fidelity.json"  # is the replay production: figures, thresholds, what was tried
ABLATION = "ablation"  # the ladder's part
ABLATION_SUMMARY = "ablation/summary.parquet"  # stats.aggregate per arm and unit
ABLATION_COMPARISON = "ablation/comparison.parquet"  # stats.compare of every arm against
#   each reference arm (`reference`: off, on-zero), per unit
ABLATION_SIDE_EFFECTS = "ablation/side_effects.parquet"  # on-zero against on-zero without
#   each recording block
ABLATION_MATCH = "ablation/match.parquet"  # per arm: rankings equal to the logged one
ABLATION_ARMS = "ablation/arms.parquet"  # each arm's switches and weights
ABLATION_NOTES = "ablation/notes.json"
ABLATION_FUNNEL = "ablation/funnel.parquet"  # the ladder arms' stage funnel
ABLATION_FUNNEL_PART = "ablation/funnel"  # its per-search frames: per_search/ARM.parquet
ISOLATION_AUDIT = "isolation/audit.parquet"  # leaks per arm, compat and strict
REFERENCES = "references"  # the reference rankers (BM25, dense-only, ideal pool order)
REFERENCES_SUMMARY = "references/summary.parquet"
REFERENCES_COMPARISON = "references/comparison.parquet"
REFERENCES_RANKERS = "references/rankers.json"
SANITY_BM25 = "sanity/bm25.json"  # SciFact: plain BM25 over the whole corpus
STUDY_TRIALS = "study/trials.parquet"  # every trial: number, state, values, weights, duration
STUDY_SUMMARY = "study/summary.json"  # best (or Pareto) weights, importance, notes
TEST = "test"  # the tuned weights once on the test window
TEST_COMPARISON = "test/comparison.parquet"  # tuned against off and on-zero, per unit,
#   groups including seen/unseen
TEST_SUMMARY = "test/summary.parquet"  # off, on-zero and tuned per group and unit
TEST_ARMS = "test/arms.parquet"
TEST_FUNNEL = "test/funnel.parquet"
TEST_RECOVERY = "test/recovery.json"  # a world with planted weights: their recovery
TEST_RUNS = "test/runs"  # ARM.trec: TREC runs (scores strictly decreasing with rank)
EXPLORE = "explore"  # the per-query explorer (`experiments.explore`), test window
EXPLORE_LISTS = "explore/lists.parquet"  # each arm's top 10 per search, each score's parts
EXPLORE_LOST = "explore/lost.parquet"  # relevant memories outside an arm's top 10: where lost
EXPLORE_SEARCHES = "explore/searches.parquet"  # the test searches: question, text, labels
EXPLORE_WEIGHTS = "explore/weights.parquet"  # the weights each arm scored each search with
EXPLORE_MEMORIES = "explore/memories.parquet"  # the texts of the memories shown or lost
COUNTERFACTUAL_CURVE = "counterfactual/position_bias.parquet"  # verdict labels: the
#   examination per rank with its CI (`experiments.counterfactual`)
COUNTERFACTUAL_PLOT = "counterfactual/position_bias.png"
COUNTERFACTUAL_ESTIMATES = "counterfactual/estimates.parquet"  # per arm: snips and ips
#   nDCG@k, CI, never-shown share, bound, scored
COUNTERFACTUAL_CHANGES = "counterfactual/changes.parquet"  # per arm against off and on-zero
COUNTERFACTUAL_PER_QUERY = "counterfactual/per_query.parquet"  # per arm and question
COUNTERFACTUAL_LOGGED = "counterfactual/logged.json"  # settings, the logged lists' coverage
SNIPPET = "best_weights.contextkit.json"  # pastes into Memory.from_config
# The configuration search (`tune.settings`): its study, and the chosen configuration once
# on the test window beside off, on-zero and the weights-only tuned weights.
CONFIG = "config"
CONFIG_TRIALS = "config/trials.parquet"  # every trial: its settings, weights and values
CONFIG_SUMMARY = "config/summary.json"  # the space, the chosen (or Pareto) settings and
#   weights, importance, the walks over the timeline (how many, how many shared)
CONFIG_DECISION = "config/decision.parquet"  # chosen against off, on-zero and tuned:
#   the confirmatory rows (`decision.decide`)
CONFIG_TEST_SUMMARY = "config/summary.parquet"  # each arm per group and unit, test window
CONFIG_FUNNEL = "config/funnel.parquet"  # the stage funnel: chosen beside the shipped arms
CONFIG_SETTINGS = "config/settings.parquet"  # each searched setting, shipped and chosen,
#   and the engine time per search of each arm's configuration
CONFIG_RUN = "config/runs/chosen.trec"  # the chosen configuration's rankings (TREC run)
CONFIG_SNIPPET = "best_config.contextkit.json"  # the chosen configuration, every setting
#   that differs from the library's defaults (pastes into Memory.from_config)
PER_SEARCH = "per_search"  # under a part: ARM.parquet, per-search metric values
PER_SEARCH_BEFORE = "per_query"  # its name in bundles written before the frames were
#   named for their unit


def per_search_file(part: str, arm: str) -> str:
    """The per-search frame of `arm` under `part` (ABLATION, TEST, REFERENCES, ...)."""
    return f"{part}/{PER_SEARCH}/{arm}.parquet"


def trec_run_file(arm: str) -> str:
    return f"{TEST_RUNS}/{arm}.trec"


class Bundle:
    """Files of one command's results under `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)  # created by the first file written into it

    def discard_if_empty(self) -> None:
        """After a failure: remove the folder when it holds no result (at most the
        provenance record), so a failed run leaves no empty bundle behind."""
        if not self.folder.is_dir():
            return
        files = [p for p in self.folder.rglob("*") if p.is_file()]
        if all(p.name == PROVENANCE for p in files):
            shutil.rmtree(self.folder)
            with contextlib.suppress(OSError):  # `results/` itself, when nothing else is in it
                self.folder.parent.rmdir()

    def _path(self, relative: str) -> Path:
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def frame(self, frame: pl.DataFrame, relative: str) -> None:
        frame.write_parquet(self._path(relative))

    def json(self, obj: Any, relative: str) -> None:
        write_json_atomic(self._path(relative), _plain(obj))

    def csv(self, frame: pl.DataFrame, relative: str) -> None:
        frame.write_csv(self._path(relative))

    def text(self, text: str, relative: str) -> None:
        self._path(relative).write_text(text, encoding="utf-8")

    def bytes(self, data: bytes, relative: str) -> None:
        self._path(relative).write_bytes(data)

    def finish(self, started: float) -> None:
        """Stamp the provenance with the finish time and the duration."""
        path = self.folder / PROVENANCE
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record["seconds"] = round(time.perf_counter() - started, 1)
        write_json_atomic(path, record)


def _plain(obj: Any) -> Any:
    """JSON-safe: NaN as null, tuples as lists, paths as text."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def provenance(cfg: ExperimentConfig, prepared: Prepared, command: str,
               mlflow: dict[str, str] | None) -> dict[str, Any]:
    """Which data, which config, which code: the record every number is traced to;
    `mlflow`: the tracking URI, experiment and run id, when the run was tracked."""
    from .tracking import git_commit
    first = next(iter(prepared.tables.values()))
    splits = dict(prepared.split.value_counts().iter_rows())
    ds = prepared.dataset
    return {
        "command": command, "experiment": cfg.name, "config_path": str(cfg.path),
        "config_hash": cfg.digest(), "config": cfg.raw,
        "dataset": {"source": ds.source, "version": ds.version, "digest": ds.digest,
                    "store": str(prepared.store), "counts": ds.counts()},
        "labels": {"source": prepared.labels.source, "note": prepared.labels.note(),
                   "fidelity": prepared.labels.fidelity,
                   **({} if prepared.labels.note() is None else {
                       "searches": prepared.labels.occurrences,
                       "verdicts": prepared.labels.verdicts,
                       "without_query": prepared.labels.without_query,
                       "without_owner": prepared.labels.without_owner,
                       "window_minutes": prepared.labels.window_minutes})},
        "git_commit": git_commit(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mlflow": mlflow,
        "split": {"spec": {"test_fraction": cfg.split.test_fraction,
                           "gap_days": cfg.split.gap_days,
                           "per_user": cfg.split.per_user},
                  "searches": {str(k): int(v) for k, v in splits.items()}},
        "replay": {"frequency": first.meta["frequency"],
                   "feedback_policy": first.meta["feedback_policy"],
                   "seeds": first.meta["seeds"], "policy": first.meta["policy"],
                   "limit": first.meta["limit"], "tables": len(prepared.tables),
                   "from_cache": sum(prepared.from_cache.values()),
                   "derived": len(prepared.derived)},
    }
