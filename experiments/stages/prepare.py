"""Prepare an experiment: build and ingest its event store unless that exists already.

The store's file name carries a hash of the dataset settings and of the code that builds
datasets, so a changed setting builds a new store and an unchanged one is reused: LoCoMo
with a simulated feedback log, the synthetic world, SciFact searched once per query, or an
existing (ingested) store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from msprlab.datasets.schema import Dataset
from msprlab.datasets.validate import IngestError

from ..errors import ExperimentError
from ..experiment_config import ExperimentConfig

__all__ = ["Stage", "builder_digest", "prepare_store", "quiet", "store_path"]

Stage = Callable[[str, int, int], None]  # (what, done, total)


def quiet(what: str, done: int, total: int) -> None:
    return None


def builder_digest() -> str:
    """sha256 of the code that builds datasets (sources, simulator, edge synthesis): a store
    built by other code is not reused."""
    from msprlab import datasets, engine
    digest = hashlib.sha256()
    folder = Path(datasets.__path__[0])
    for path in sorted([*folder.glob("*.py"), *(folder / "sources").glob("*.py"),
                        Path(engine.__path__[0]) / "edges.py"]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def store_path(cfg: ExperimentConfig, root: Path) -> Path:
    """ROOT/runs/NAME-HASH.duckdb: the hash covers every dataset setting and the code that
    builds the dataset, so a changed setting or builder makes a new store. An ingested
    store (`source = "store"`) is the path as given, a relative one under ROOT (`--root`,
    the working folder by default), as the built stores are."""
    if cfg.dataset.source == "store":
        return root / cfg.dataset.store  # an absolute path stays itself
    spec = json.dumps({**asdict(cfg.dataset), "code": builder_digest()}, sort_keys=True)
    stem = Path(cfg.dataset.store).stem
    digest = hashlib.sha256(spec.encode()).hexdigest()[:10]
    return root / Path(cfg.dataset.store).parent / f"{stem}-{digest}.duckdb"


def _build(cfg: ExperimentConfig, progress: Stage) -> tuple[Dataset, dict[str, Any] | None]:
    from msprlab.datasets import build
    from msprlab.datasets.embed import make_embedder
    d = cfg.dataset
    embedder = make_embedder(d.embedder)
    log = build.LogSpec(n_searches=d.searches, click_model=build.make_click_model(
        d.click_model, max_grade=3 if d.source == "synthetic" else 1),
        verdict_model=_verdicts(3 if d.source == "synthetic" else 1))
    report: Any = lambda stage, done, total: progress(stage, done, total)  # noqa: E731
    if d.source == "locomo-log":
        return build.build_locomo_log(embedder, log, seed=d.seed, progress=report).dataset, None
    if d.source == "synthetic":
        from msprlab.datasets.sidecars import truth_record
        from msprlab.datasets.synthetic import SyntheticSpec
        spec = SyntheticSpec(n_users=d.users, memories_per_user=d.memories_per_user,
                             queries_per_user=d.queries_per_user)
        dataset, truth = build.build_synthetic(spec, log, seed=d.seed, progress=report)
        return dataset, truth_record(truth, spec, seed=d.seed, digest=dataset.digest)
    if d.source == "scifact":
        progress("reading SciFact", 0, 2)
        corpus = build.build_scifact(d.split)
        progress("embedding abstracts and claims", 1, 2)
        return build.static_log(corpus, embedder), None
    raise ExperimentError(f"dataset.source {d.source!r} cannot be built")


def _verdicts(max_grade: int) -> Any:
    from msprlab.datasets.build import default_p_helpful
    from msprlab.datasets.clicks import VerdictModel
    return VerdictModel(p_helpful=default_p_helpful(max_grade))


def prepare_store(cfg: ExperimentConfig, root: Path, progress: Stage = quiet) -> Path:
    """The experiment's event store, built and ingested unless it exists already."""
    from msprlab.datasets.store import ingest
    path = store_path(cfg, root)
    if path.is_file():
        return path
    if cfg.dataset.source == "store":
        how = ("msprlab ingest contextkit ... --store " + str(path) if cfg.dataset.labels ==
               "verdicts" else "msprlab ingest SOURCE ... --store " + str(path))
        raise FileNotFoundError(f"dataset.store {path} does not exist (a relative path is "
                                f"under --root, the working folder by default); ingest it "
                                f"first: {how}")
    dataset, truth = _build(cfg, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        ingest(dataset, path, progress=lambda stage, done, total: progress(
            f"writing the store: {stage}", done, total))
    except IngestError as exc:  # the store's folder: full, read-only, ...
        raise ExperimentError(f"dataset.store {path}: {exc.reason}") from None
    if truth is not None:
        from msprlab.datasets.sidecars import truth_path, write_truth
        write_truth(truth_path(path), truth)
    return path
