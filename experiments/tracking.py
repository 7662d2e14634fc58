"""MLflow logging for experiments: one parent run per command, child runs under it.

Conventions (EVALUATION.md, "MLflow 3"):

- metric keys are MLflow-safe (`ndcg_at_10/intent/FACTUAL`: no `@` or `=`), via `metric_key`;
- params are the flattened engine configuration and the weights; tags are the dataset
  digest, the experiment config hash and the git commit; the dataset is a `log_input`
  (a metadata-only dataset named by its source, with its digest);
- per-trial values are step metrics of the study's run, logged asynchronously;
- artifacts: per-query tables (Parquet), TREC runs, the best-weights config snippet, the
  study summary.

The default tracking store is `sqlite:///mlflow.db` in the working folder; any URI works:
a team shares one `mlflow server` (`http://HOST:PORT`, README "Scaling out"), and a
`postgresql://` store is opened through psycopg 3 (`databases.sqlalchemy_url`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.engine import EngineConfig
from msprlab.engine.config import as_dict

from .databases import driver_hint, sqlalchemy_url
from .errors import ExperimentError, redact_url

__all__ = ["Tracker", "engine_params", "flatten", "git_commit", "metric_key"]

_BAD = str.maketrans({"@": "_at_", "=": "_eq_", " ": "_"})


def metric_key(*parts: str) -> str:
    """`ndcg@10`, `intent`, `FACTUAL` -> `ndcg_at_10/intent/FACTUAL`."""
    return "/".join(str(p).translate(_BAD) for p in parts if p not in (None, ""))


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def engine_params(config: EngineConfig) -> dict[str, Any]:
    """An engine configuration as MLflow params: `engine.` and its dotted field names."""
    return flatten(as_dict(config), "engine.")


def git_commit() -> str:
    """The commit of the code that runs, with "+dirty" when the tree has changes; "unknown"
    outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


# The tracking stores MLflow 3 accepts by URI scheme ("" is a plain path: the file store).
_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
_PROBE_SECONDS = 5.0


def check_tracking_uri(uri: str) -> None:
    """Fail in seconds, with one message, on a tracking URI MLflow would reject or retry
    for minutes: an unknown scheme, the retired file store, an unwritable SQLite folder,
    a server that does not answer."""
    from urllib.parse import urlparse
    scheme = urlparse(uri).scheme.split("+", 1)[0]
    where = f"tracking.uri {redact_url(uri)}"
    if scheme in ("", "file") and not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
        raise ExperimentError(f"{where}: MLflow 3 retired the file store; use a database "
                              "such as sqlite:///mlflow.db, or an http:// server")
    if scheme not in (*_SCHEMES, "", "file"):
        raise ExperimentError(f"{where}: unknown scheme {scheme!r}; use sqlite:///mlflow.db, "
                              "postgresql://..., or http://HOST:PORT of an MLflow server")
    if scheme == "sqlite":
        _check_sqlite_folder(uri, where)
    if scheme in ("http", "https"):
        _probe_server(uri, where)


def _check_sqlite_folder(uri: str, where: str) -> None:
    path = uri.split(":///", 1)[1] if ":///" in uri else ""
    if not path or path == ":memory:":
        return
    folder = Path(path).parent
    if folder.exists() and (not folder.is_dir() or not os.access(folder, os.W_OK)):
        raise ExperimentError(f"{where}: the folder {folder} cannot be written; give a "
                              "writable path")
    if Path(path).is_dir():
        raise ExperimentError(f"{where}: {path} is a folder, not a database file")


def _probe_server(uri: str, where: str) -> None:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=_PROBE_SECONDS):
            return
    except urllib.error.HTTPError:
        return  # something answers; MLflow itself says what it thinks of it
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ExperimentError(f"{where}: no MLflow server answers ({reason}); start one "
                              "(mlflow server --host 127.0.0.1 --port 5000), point "
                              "tracking.uri at it, or run with --no-track") from None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no reason given"


class Tracker:
    """One MLflow parent run for a command; `child` opens runs under it."""

    def __init__(self, uri: str, experiment: str) -> None:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        for name in ("mlflow", "alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent"):
            logging.getLogger(name).setLevel(logging.WARNING)
        import mlflow
        from mlflow.exceptions import MlflowException
        self.mlflow = mlflow
        check_tracking_uri(uri)
        self.uri = uri = sqlalchemy_url(uri)
        try:
            mlflow.set_tracking_uri(uri)
            self.experiment_id = mlflow.set_experiment(experiment).experiment_id
            # A process that loses the race to create the experiment gets it back from
            # MLflow 3's `set_experiment` without it being made active, and its runs would
            # go to the Default experiment: activate it by id.
            mlflow.set_experiment(experiment_id=self.experiment_id)
        except MlflowException as exc:
            raise ExperimentError(f"tracking.uri {redact_url(uri)}: MLflow cannot use it: "
                                  f"{_first_line(exc.message)}") from None
        except ImportError:
            raise ExperimentError(f"tracking.uri {redact_url(uri)}: its database driver is not "
                                  f"installed; {driver_hint(uri)} into msprlab's environment, "
                                  "or use an MLflow server (http://HOST:PORT)") from None
        self.experiment = experiment
        self._provenance: dict[str, str] = {}  # the parent run's msprlab.* tags

    @contextmanager
    def run(self, name: str, *, tags: Mapping[str, str]) -> Iterator[str]:
        """The parent run; yields its id. Its `msprlab.*` provenance tags (dataset digest,
        config hash, commit, ...) go on every child run too, so any run can be traced."""
        self._provenance = {k: v for k, v in tags.items() if k.startswith("msprlab.")}
        with self.mlflow.start_run(run_name=name, tags=dict(tags)) as active:
            yield active.info.run_id
        self.mlflow.flush_async_logging()

    @contextmanager
    def child(self, name: str, *, tags: Mapping[str, str] | None = None) -> Iterator[str]:
        merged = {**self._provenance, **(tags or {})}
        with self.mlflow.start_run(run_name=name, nested=True, tags=merged) as active:
            yield active.info.run_id

    def params(self, values: Mapping[str, Any]) -> None:
        flat = {k: (json.dumps(v) if isinstance(v, list | tuple | dict) else v)
                for k, v in values.items()}
        items = list(flat.items())
        for i in range(0, len(items), 90):  # MLflow takes at most 100 params per batch
            self.mlflow.log_params(dict(items[i:i + 90]))

    def tags(self, values: Mapping[str, str]) -> None:
        """Tags of the active run (the parent run, outside a child)."""
        self.mlflow.set_tags(dict(values))

    def metrics(self, values: Mapping[str, float], *, step: int | None = None,
                synchronous: bool = True) -> None:
        clean = {k: float(v) for k, v in values.items() if v == v}  # NaN: not logged
        if clean:
            self.mlflow.log_metrics(clean, step=step, synchronous=synchronous)

    def dataset(self, *, name: str, digest: str, source: str, context: str) -> None:
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        with warnings.catch_warnings():  # a local path matches two equivalent source kinds
            warnings.simplefilter("ignore", UserWarning)
            located = resolve_dataset_source(source)
        data = MetaDataset(located, name=name, digest=digest[:32])
        from mlflow.exceptions import MlflowException
        try:
            self.mlflow.log_input(data, context=context)
        except MlflowException as exc:
            # Two runs logging one new dataset at the same moment: MLflow's SQL store checks
            # that the dataset is new, then inserts it, and the later insert violates the
            # key. Once the dataset exists, logging it again links it to this run.
            if not re.search(r"duplicate key|UNIQUE constraint|dataset_pk", exc.message):
                raise
            self.mlflow.log_input(data, context=context)

    def frame(self, frame: pl.DataFrame, path: str) -> None:
        """A frame as a Parquet artifact at `path` (e.g. "per_query/baseline.parquet")."""
        with tempfile.TemporaryDirectory() as folder:
            file = Path(folder) / Path(path).name
            frame.write_parquet(file)
            self.mlflow.log_artifact(str(file), artifact_path=str(Path(path).parent)
                                     if Path(path).parent != Path(".") else None)

    def json(self, obj: Any, path: str) -> None:
        self.mlflow.log_dict(obj, path)

    def text(self, text: str, path: str) -> None:
        self.mlflow.log_text(text, path)

    def where(self) -> str:
        """A line telling where the runs are and how to look at them."""
        shown = redact_url(self.uri)
        if self.uri.startswith(("http://", "https://")):
            return f"MLflow: experiment {self.experiment!r} on the server {shown} (open it)"
        return (f"MLflow: experiment {self.experiment!r} in {shown} "
                f"(mlflow ui --backend-store-uri {shown})")


def arm_metrics(frame: pl.DataFrame, arm: str, *, stem: tuple[str, ...] = (),
                 sizes: bool = True) -> dict[str, float]:
    """An arm's means (and, with `sizes`, group sizes) for MLflow, from a long frame as
    `stats.aggregate` gives it (a summary, or a funnel under `stem` ("funnel",)); one
    convention for every arm run (ladder, references and test window): `ndcg_at_10`
    (overall), `ndcg_at_10/intent/FACTUAL`, the group's n as `n/intent/FACTUAL` (per
    query), per-search figures under `per_search/` (after the stem). A mean that is missing
    or NaN is not logged (its n is)."""
    out: dict[str, float] = {}
    for r in frame.filter(pl.col("arm") == arm).iter_rows(named=True):
        group = () if r["group_by"] == "overall" else (r["group_by"], str(r["group"]))
        prefix = stem if r["unit"] == "query" else (*stem, "per_search")
        if r["mean"] is not None and not math.isnan(r["mean"]):
            out[metric_key(*prefix, r["metric"], *group)] = r["mean"]
        if sizes:
            out[metric_key(*prefix, "n", *group)] = r["n"]
    return out
