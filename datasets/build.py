"""Build the datasets the `msprlab ingest` verbs write: source -> Dataset, embedders, logs.

Plain functions over typed settings, so tests and experiments build exactly the data the
command line writes:

- `build_locomo`: LoCoMo turns, queries and qrels, every turn embedded and run through the
  engine's edge synthesis in time order (TOPIC_SIMILAR edges need the embeddings), plus
  the evidence anomalies the loader repaired or left out.
- `build_locomo_log`: the same corpus and a click-model log simulated on it
  (`simulate_log`): seeds are the cosine between the question's vector (the same embedder
  over the question text) and the stored embeddings of the query owner's memories.
- `build_synthetic`: the fully synthetic world with planted weights, and its log.
- `build_scifact`: a SciFact split, optionally embedded.

Every digest covers every parameter: the loaders and `simulate_log` hash their inputs and
settings (the vectors included, so the embedder's kind, width and seed are covered), and
`build_scifact` folds its embeddings into the loader's digest. The same parameters give
the same digest, so re-ingesting is a no-op; other parameters give another digest, which a
store refuses without `replace`.

The logging ranker (`default_logging_config`) is the library's default configuration with
MSPR on and its feedback, success and frequency state recorded, every MSPR weight 0: the
log a deployment produces before its MSPR weights are tuned.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import polars as pl

from msprlab.engine import EngineConfig
from msprlab.engine.config import (
    EdgesConfig,
    FeedbackConfig,
    FrequencyConfig,
    MsprConfig,
    SuccessConfig,
)

from .clicks import (
    CascadeModel,
    ClickModel,
    DependentClickModel,
    PositionBasedModel,
    VerdictModel,
)
from .schema import EMBEDDINGS, QUERY_EMBEDDINGS, Dataset
from .simulate import complete_events, memory_events, order_events, simulate_log
from .sources.locomo import DEFAULT_EDGES, LOCOMO_PATH, load_locomo, locomo_anomalies
from .sources.scifact import SCIFACT_DIR, load_scifact
from .store import Progress
from .synthetic import SyntheticSpec, SyntheticTruth, generate_synthetic

if TYPE_CHECKING:  # embed imports scikit-learn (seconds): only where an embedder is fitted
    from .embed import Embedder

__all__ = ["CLICK_MODELS", "LocomoBuild", "LogSpec", "build_locomo", "build_locomo_log",
           "build_scifact", "build_synthetic", "default_logging_config", "default_p_helpful",
           "embed_texts", "make_click_model", "recipe", "static_log", "with_embeddings"]

CLICK_MODELS: dict[str, type[ClickModel]] = {
    "pbm": PositionBasedModel, "cascade": CascadeModel, "dcm": DependentClickModel}


STATIC_LOG_AT = datetime(2020, 1, 1)


def _silent(stage: str, done: int, total: int) -> None:
    return None


def default_logging_config() -> EngineConfig:
    """The library defaults with MSPR on and feedback, success and frequency recorded.

    The MSPR weights stay at the library's 0 (`delta_personal`, `epsilon_frequency`,
    `zeta_success`), so the personal, frequency and success terms add nothing to the shown
    scores, while verdicts, success rows and access counts accumulate in the state for a
    later replay to use. Feedback still moves rankings the way the library does: a verdict
    bumps the memory's node relevance, which multiplies its score (MSPR.md 5.4). Intent
    routing and roles stay off, as in the library.
    """
    return replace(EngineConfig(), mspr=MsprConfig(
        enabled=True, feedback=FeedbackConfig(enabled=True),
        success=SuccessConfig(enabled=True), frequency=FrequencyConfig(enabled=True)))


def make_click_model(name: str, *, noise: float | None = None, max_grade: int | None = None,
                     eta: float | None = None,
                     continuation: tuple[float, ...] | None = None) -> ClickModel:
    """The click model registered as `name` ("pbm", "cascade", "dcm"); None keeps a default.

    `eta` applies to "pbm" only and `continuation` to "dcm" only; giving either to another
    model raises, so a setting is never silently ignored.
    """
    if name not in CLICK_MODELS:
        raise ValueError(f"unknown click model {name!r}; known: {', '.join(CLICK_MODELS)}")
    for option, value, owner in (("eta", eta, "pbm"), ("continuation", continuation, "dcm")):
        if value is not None and name != owner:
            raise ValueError(f"{option} applies to the {owner} click model only, but the "
                             f"click model is {name!r}")
    given = {"noise": noise, "max_grade": max_grade, "eta": eta, "continuation": continuation}
    return CLICK_MODELS[name](**{k: v for k, v in given.items() if v is not None})


# p_helpful by grade when the click model's top grade is 1 (LoCoMo's binary evidence) or 3
# (the synthetic grades): 0.1 for grade 0 and the library verdict model's top values.
_P_HELPFUL = {1: (0.1, 0.95), 3: VerdictModel().p_helpful}


def default_p_helpful(max_grade: int) -> tuple[float, ...]:
    """The default helpful probability per grade 0..max_grade (max grade 1 or 3)."""
    if max_grade not in _P_HELPFUL:
        raise ValueError(f"no default p_helpful for max grade {max_grade!r} (there are "
                         f"defaults for {sorted(_P_HELPFUL)}); give one probability per "
                         f"grade 0..{max_grade} (--p-helpful)")
    return _P_HELPFUL[max_grade]


@dataclass(frozen=True, kw_only=True)
class LogSpec:
    """How `simulate_log` replays the query stream: everything but the data and the seed.

    `verdict_model.p_helpful` needs one entry per grade the click model reads
    (0..`click_model.max_grade`), so both models grade on the same scale.
    """

    n_searches: int
    click_model: ClickModel = field(default_factory=PositionBasedModel)
    verdict_model: VerdictModel = field(default_factory=VerdictModel)
    logging_config: EngineConfig = field(default_factory=default_logging_config)
    zipf_s: float = 1.1
    mean_gap_seconds: float = 3600.0
    limit: int = 10

    def __post_init__(self) -> None:
        def bad(rule: str, value: object) -> ValueError:
            return ValueError(f"LogSpec: `{rule}` must hold, but got {value!r}")

        def is_int(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def is_number(value: object) -> bool:
            return (isinstance(value, int | float) and not isinstance(value, bool)
                    and math.isfinite(value))

        if not (is_int(self.n_searches) and self.n_searches >= 1):
            raise bad("n_searches >= 1", self.n_searches)
        if not (is_int(self.limit) and self.limit >= 1):
            raise bad("limit >= 1", self.limit)
        if not (is_number(self.zipf_s) and self.zipf_s >= 0):
            raise bad("zipf_s >= 0", self.zipf_s)
        if not (is_number(self.mean_gap_seconds) and self.mean_gap_seconds > 0):
            raise bad("mean_gap_seconds > 0", self.mean_gap_seconds)
        grades = self.click_model.max_grade + 1
        if len(self.verdict_model.p_helpful) != grades:
            raise ValueError(
                f"LogSpec: the click model reads grades 0..{self.click_model.max_grade}, so "
                f"p_helpful needs {grades} values (one per grade), but got "
                f"{self.verdict_model.p_helpful!r}")

    def simulate(self, dataset: Dataset, *, seed: int, query_vectors: npt.ArrayLike | None,
                 query_vectors_id: str | None = None) -> Dataset:
        """`simulate_log` over `dataset` with these settings."""
        return simulate_log(
            dataset, logging_config=self.logging_config, click_model=self.click_model,
            verdict_model=self.verdict_model, n_searches=self.n_searches, seed=seed,
            zipf_s=self.zipf_s, mean_gap_seconds=self.mean_gap_seconds, limit=self.limit,
            query_vectors=query_vectors, query_vectors_id=query_vectors_id)


def recipe(embedder: Embedder) -> str:
    """What makes an embedder's vectors, for a dataset digest: its name and public settings.

    Digests name the recipe, not the float bits: the same texts embedded on another machine
    may round differently in BLAS (TF-IDF + SVD), and that is not other data."""
    settings = sorted((k, v) for k, v in vars(embedder).items() if not k.startswith("_"))
    return f"{embedder.name}{settings}"


def _ready(embedder: Embedder, corpus: Sequence[str]) -> Embedder:
    """The embedder fitted on `corpus` if it needs fitting (a fresh TF-IDF copy), else itself."""
    from .embed import TfidfSvdEmbedder
    if isinstance(embedder, TfidfSvdEmbedder):
        return TfidfSvdEmbedder(dim=embedder.dim, seed=embedder.seed).fit(corpus)
    return embedder


@dataclass(frozen=True)
class LocomoBuild:
    """A LoCoMo dataset, the evidence anomalies its loader handled, and the ready embedder.

    anomalies : one row per repair or omission (`sources.locomo.ANOMALIES`).
    embedder : fitted on the memory texts; embeds questions into the same space.
    """

    dataset: Dataset
    anomalies: pl.DataFrame
    embedder: Embedder


def build_locomo(embedder: Embedder, *, path: str | Path = LOCOMO_PATH,
                 edges: EdgesConfig = DEFAULT_EDGES,
                 progress: Progress | None = None) -> LocomoBuild:
    """LoCoMo with every turn embedded and its edges synthesised in time order.

    A TF-IDF `embedder` is fitted on the memory texts (a copy: the argument is not
    changed); other embedders are used as given. Stages reported: "embedding turns",
    "edge synthesis", "anomalies".
    """
    report = progress or _silent
    fitted: list[Embedder] = []

    def embed(texts: list[str]) -> np.ndarray:
        # load_locomo calls this once, with every memory text, before edge synthesis.
        report(f"embedding turns ({embedder.name})", 0, 3)
        fitted.append(_ready(embedder, texts))
        vectors = fitted[-1].embed(texts)
        report("edge synthesis", 1, 3)
        return vectors

    dataset = load_locomo(path, edges=edges, embed=embed, embedder_name=embedder.name,
                          recipe=recipe(embedder))
    report("anomalies", 2, 3)
    return LocomoBuild(dataset, locomo_anomalies(path), fitted[-1])


def build_locomo_log(embedder: Embedder, log: LogSpec, *, seed: int,
                     path: str | Path = LOCOMO_PATH, edges: EdgesConfig = DEFAULT_EDGES,
                     progress: Progress | None = None) -> LocomoBuild:
    """LoCoMo (`build_locomo`) plus a log of `log.n_searches` simulated searches.

    Query vectors are the embedder (fitted on the memory texts) over the question texts,
    and seeds are their cosine with the query owner's stored embeddings. Deterministic
    for a seed.
    """
    report = progress or _silent
    base = build_locomo(embedder, path=path, edges=edges,
                        progress=lambda stage, done, total: report(stage, done, 5))
    report("embedding questions", 3, 5)
    questions = base.dataset.queries["text"].to_list()
    query_vectors = base.embedder.embed(questions)
    report(f"simulating {log.n_searches:,} searches ({type(log.click_model).__name__})", 4, 5)
    logged = log.simulate(base.dataset, seed=seed, query_vectors=query_vectors,
                          query_vectors_id=f"{recipe(base.embedder)} over the question texts")
    return LocomoBuild(logged, base.anomalies, base.embedder)


def build_synthetic(spec: SyntheticSpec, log: LogSpec | None, *, seed: int,
                    progress: Progress | None = None) -> tuple[Dataset, SyntheticTruth]:
    """The synthetic world of `spec` and its planted truth, with a simulated log unless
    `log` is None.

    One `seed` drives both the generator and the simulator. Seeds come from the planted
    query vectors (`truth.query_vectors`), the vectors the planted dense signal is
    computed from.
    """
    report = progress or _silent
    report("generating the world", 0, 2)
    dataset, truth = generate_synthetic(spec, seed=seed)
    if log is None:
        return dataset, truth
    report(f"simulating {log.n_searches:,} searches ({type(log.click_model).__name__})", 1, 2)
    return log.simulate(dataset, seed=seed, query_vectors=truth.query_vectors), truth


def with_embeddings(dataset: Dataset, embedder: Embedder) -> Dataset:
    """`dataset` with every memory embedded (a TF-IDF embedder fitted on the memory texts).

    The digest becomes sha256 of the old digest, the embedder's name and settings and the
    vectors' shape: the recipe, not the float bits. The same inputs embedded on another
    machine may round differently in BLAS (TF-IDF + SVD), and a digest of the bytes would
    call that other data, so no regress baseline or study could be shared across machines.
    """
    texts = dataset.memories["text"].fill_null("").to_list()
    vectors = np.ascontiguousarray(_ready(embedder, texts).embed(texts), dtype=np.float32)
    embeddings = pl.DataFrame({
        "memory_id": dataset.memories["memory_id"], "embedder": embedder.name,
        "vector": pl.Series(vectors).cast(pl.List(pl.Float32))}, schema=EMBEDDINGS)
    digest = hashlib.sha256(f"{dataset.digest}|{recipe(embedder)}|{vectors.shape}".encode())
    return replace(dataset, embeddings=embeddings, digest=digest.hexdigest(),
                   version=f"{dataset.version}+{embedder.name}")


def embed_texts(dataset: Dataset, embedder: Embedder) -> Dataset:
    """`dataset` with every memory and every query embedded by `embedder` (a TF-IDF
    embedder is fitted on the memory texts first), for a store whose source brought no
    vectors (`msprlab ingest generic DIR --embedder NAME`). A dataset that already holds
    vectors is refused: two sets of vectors from different processes would not share one
    space. The digest adds the embedder's recipe (not the float bits)."""
    from .validate import IngestError
    for table, file in (("embeddings", "embeddings"), ("query_embeddings", "query_embeddings")):
        if getattr(dataset, table).height:
            raise IngestError("--embedder", f"the folder already holds vectors ({file}."
                                            "jsonl or .parquet); drop --embedder to keep "
                                            "them, or remove them to embed the texts")
    texts = dataset.memories["text"].fill_null("").to_list()
    fitted = _ready(embedder, texts)
    vectors = np.ascontiguousarray(fitted.embed(texts), dtype=np.float32)
    questions = np.ascontiguousarray(
        fitted.embed(dataset.queries["text"].fill_null("").to_list()), dtype=np.float32) \
        if dataset.queries.height else np.zeros((0, vectors.shape[1]), dtype=np.float32)
    digest = hashlib.sha256(f"{dataset.digest}|{recipe(fitted)}|{vectors.shape}|"
                            f"{questions.shape}".encode())
    return replace(
        dataset, digest=digest.hexdigest(), version=f"{dataset.version}+{embedder.name}",
        embedded_with=f"{recipe(fitted)} ({_package_version(embedder)})",
        embeddings=pl.DataFrame({"memory_id": dataset.memories["memory_id"],
                                 "embedder": embedder.name,
                                 "vector": pl.Series(vectors).cast(pl.List(pl.Float32))},
                                schema=EMBEDDINGS),
        query_embeddings=pl.DataFrame({"query_id": dataset.queries["query_id"],
                                       "embedder": embedder.name,
                                       "vector": pl.Series(questions).cast(
                                           pl.List(pl.Float32))}, schema=QUERY_EMBEDDINGS))


def embed_queries(dataset: Dataset, embedder: Embedder) -> Dataset:
    """`dataset` with its queries embedded by `embedder` into the stored memory vectors'
    space (`msprlab ingest contextkit --query-embedder NAME`): the artifacts keep the
    memories' vectors but not the queries', so the embedder must be the one production
    ran. A fitted embedder (TF-IDF) cannot be: it would fit a space of its own. The
    vectors take the memories' embedder name; their dimension must match."""
    from .validate import IngestError
    if embedder.name == "tfidf-svd":
        raise IngestError("--query-embedder", "tfidf-svd fits its own space on the texts, so "
                                              "its query vectors could not match the stored "
                                              "memory vectors; name the embedder production "
                                              "used (wordllama)")
    if not dataset.embeddings.height:
        raise IngestError("--query-embedder", "the artifacts hold no memory vectors to embed "
                                              "the queries beside; give --qdrant-path")
    stored = dataset.embeddings["vector"].list.len().unique().to_list()
    from .embedders import EmbedderError
    try:
        questions = np.ascontiguousarray(
            embedder.embed(dataset.queries["text"].fill_null("").to_list()), dtype=np.float32)
    except EmbedderError as exc:
        raise IngestError("--query-embedder", str(exc)) from None
    if stored != [questions.shape[1]]:
        raise IngestError("--query-embedder", f"{embedder.name} gives {questions.shape[1]}-dim "
                                              f"vectors, the stored memory vectors have "
                                              f"{stored}: not the embedder that made them")
    name = dataset.embeddings["embedder"][0]
    digest = hashlib.sha256(f"{dataset.digest}|queries:{recipe(embedder)}".encode())
    return replace(
        dataset, digest=digest.hexdigest(), version=f"{dataset.version}+queries:{embedder.name}",
        embedded_with=f"queries: {recipe(embedder)} ({_package_version(embedder)}), stored as "
                      f"{name!r} beside the memories' vectors",
        query_embeddings=pl.DataFrame({"query_id": dataset.queries["query_id"], "embedder": name,
                                       "vector": pl.Series(questions).cast(
                                           pl.List(pl.Float32))}, schema=QUERY_EMBEDDINGS))


def _package_version(embedder: Embedder) -> str:
    """The installed package behind an embedder, with its version."""
    from importlib.metadata import PackageNotFoundError, version
    package = {"tfidf-svd": "scikit-learn", "wordllama": "wordllama",
               "sentence-transformers": "sentence-transformers"}.get(embedder.name)
    if embedder.name == "callable":
        return "the application's callable, module file sha256 prefix in the recipe"
    if embedder.name == "openai-http":
        return "an OpenAI-compatible endpoint"
    if package is None:
        return "package unknown"
    try:
        return f"{package} {version(package)}"
    except PackageNotFoundError:
        return f"{package} (version unknown)"


def build_scifact(split: str, embedder: Embedder | None = None, *,
                  directory: str | Path = SCIFACT_DIR,
                  progress: Progress | None = None) -> Dataset:
    """A SciFact split (`load_scifact`), with embeddings when an embedder is given."""
    report = progress or _silent
    report("reading corpus, claims and qrels", 0, 2)
    dataset = load_scifact(split, directory=directory)
    if embedder is None:
        return dataset
    report(f"embedding abstracts ({embedder.name})", 1, 2)
    return with_embeddings(dataset, embedder)


def static_log(dataset: Dataset, embedder: Embedder, *, at: datetime = STATIC_LOG_AT,
               limit: int = 100) -> Dataset:
    """A corpus without times, searched once per query: every memory exists from `at`, and
    query i is searched at `at` + i seconds by its owner, with no feedback and nothing shown.

    For judged corpora without a log (SciFact): the replay then measures the static
    ranker, the dense and lexical parts above all. Memories get `created_at = at` where it
    is null; memories and queries are embedded with `embedder` (fitted on the memory texts),
    and the query vectors are stored so the replay finds the same seeds. The digest is
    sha256 of the input digest, the embedder's recipe (`embed.recipe`: not the float bits),
    `at` and `limit`.
    """
    memories = dataset.memories.with_columns(pl.col("created_at").fill_null(at))
    texts = memories["text"].fill_null("").to_list()
    fitted = _ready(embedder, texts)
    vectors = np.ascontiguousarray(fitted.embed(texts), dtype=np.float32)
    questions = np.ascontiguousarray(fitted.embed(dataset.queries["text"].to_list()),
                                     dtype=np.float32)
    queries = dataset.queries
    searches = pl.DataFrame({
        "ts": [at + timedelta(seconds=i + 1) for i in range(queries.height)],
        "kind": "search", "query_id": queries["query_id"], "query": queries["text"],
        "user_id": queries["user_id"], "agent_id": queries["agent_id"],
        "run_id": queries["run_id"], "filters": "{}", "limit": limit})
    events = order_events(pl.concat([memory_events(memories), complete_events(searches)]))
    digest = hashlib.sha256(f"{dataset.digest}|{recipe(embedder)}|{vectors.shape}|"
                            f"{questions.shape}|{at}|{limit}".encode())
    return replace(dataset, memories=memories, events=events, digest=digest.hexdigest(),
                   version=f"{dataset.version}+static/{embedder.name}",
                   embeddings=pl.DataFrame({
                       "memory_id": memories["memory_id"], "embedder": embedder.name,
                       "vector": pl.Series(vectors).cast(pl.List(pl.Float32))},
                       schema=EMBEDDINGS),
                   query_embeddings=pl.DataFrame({
                       "query_id": queries["query_id"], "embedder": embedder.name,
                       "vector": pl.Series(questions).cast(pl.List(pl.Float32))},
                       schema=QUERY_EMBEDDINGS))
