"""Replay an event store through the engine, in time order, into a candidate table.

The timeline (EVALUATION.md, "Replaying logged feedback credibly"):

- Events are taken in (`ts`, `seq`) order. At one timestamp the order is that of
  `schema.EVENT_KINDS`: memory events, then searches, then feedback, access and click. So a
  memory added at t can be found by a search at t, while feedback and accesses at t change
  state only after the searches at t: every search sees the state strictly before it.
- Memories, their edges and deletions enter the engine state as in the logging run
  (`datasets.timeline.Timeline`: by created_at / deleted_at and the edges' times).
- `feedback` events go through `record_feedback` (relevance bump, floors, personal boost,
  success history), as they did in production: the feedback-derived state is frozen at its
  logged values (the policy every result declares, `FEEDBACK_POLICY`). Once an evaluated
  ranking differs from the logged one, later logged feedback is counterfactual; the scorer
  reports how many evaluated rankings still match the logged ones (`match rate`).
- Frequency has two modes. `logged`: access counts and recency come from the log's `access`
  events (the counts the logging ranker produced) and the replayed searches count nothing;
  the table is weight-independent, so any weights can be scored from it. A configuration
  that counts no accesses (`mspr.enabled` and `mspr.frequency.enabled` not both on) gets
  none of the log's either, as the library would have none. `closed_loop`: the
  evaluated ranker's own results feed the counts, as the library does; the table holds the
  features that ranker saw and is bound to its weights.
- Every logged search runs through the engine (its decay tick changes relevance); each one
  with a `query_id` becomes one evaluated search, with one row per candidate.

Seeds are the vector store's hits, as in the logging run: the cosine between the stored
query vector (`query_embeddings`; projected from the query text when the store has none,
and the table says so) and the query owner's memories that exist at that time, best first,
as many as can reach the candidates (`engine.search.vector_hits`: the store is asked for the
search's limit, the retriever keeps the first `seed_top_k`, after the hard role filter when
it runs; so min(limit, seed_top_k) without it).

A candidate row holds every weight-independent input of the final score: dense, lexical,
graph, frequency, personal, success (computed with every gate open), relevance, the soft
role multiplier, whether it was a seed, its discovery order, the search's intent label, and
its graded judgment. `CandidateTable.block()` hands them to the batch scorer
(`msprlab.engine.batch`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from msprlab.datasets.dense_index import DenseIndex
from msprlab.datasets.schema import Dataset
from msprlab.engine import EngineConfig
from msprlab.engine.batch import FEATURES, INTENTS, WEIGHTS, CandidateBlock
from msprlab.engine.config import as_dict
from msprlab.engine.intent import Classifier
from msprlab.engine.roles import RolePolicy
from msprlab.engine.search import counts_access
from msprlab.engine.state import EngineState

from .errors import ExperimentError
from .variants.settings import reaching, state_of
from .variants.walk import Variant, walk

__all__ = ["FEEDBACK_POLICY", "FREQUENCY_MODES", "CandidateTable", "FrequencyMode",
           "derive_table", "featurize_config", "question_of", "replay", "replay_variants",
           "success_twin", "table_key"]

FrequencyMode = Literal["logged", "closed_loop"]
FREQUENCY_MODES: tuple[FrequencyMode, ...] = ("logged", "closed_loop")
FEEDBACK_POLICY = ("logged feedback replayed as-is (frozen at its logged values; counterfactual "
                   "once a ranking diverges from the logged one: see the match rate)")
Progress = Callable[[int, int], None]
_GATE_OPEN = dict.fromkeys(WEIGHTS, 1.0)


def featurize_config(config: EngineConfig, frequency: FrequencyMode) -> EngineConfig:
    """The configuration a `logged` replay runs: every weight 1 (so every feature is
    computed), no access counting (the log's accesses are applied instead), intent routing
    on so each search gets its label (unless the edge-type-prior correction makes the
    label change the candidates), and a soft role policy on so each candidate gets its
    multiplier (unless strict isolation makes the policy change the candidates): the
    scorer applies the label's deltas and the multipliers or not, as `table_key` says. A
    `closed_loop` replay runs `config` as given."""
    if frequency == "closed_loop":
        return config
    mspr = config.mspr
    intent, role = mspr.intent, mspr.role
    if mspr.enabled and not config.corrections.apply_edge_type_priors:
        intent = replace(intent, enabled=True)
    if mspr.enabled and not role.hard_filter and not config.corrections.strict_role_isolation:
        role = replace(role, enabled=True)
    return replace(config, retrieval=replace(config.retrieval, **_GATE_OPEN),
                   mspr=replace(mspr, intent=intent, role=role,
                                frequency=replace(mspr.frequency, enabled=False)))


def table_key(config: EngineConfig, frequency: FrequencyMode, *,
              has_policy: bool = True, max_limit: int | None = None) -> dict[str, Any]:
    """What a candidate table depends on. Two configurations with the same key can be scored
    from one table: in `logged` mode they may differ in the six weights, intent routing
    (scored with or without the label's deltas) and a soft role policy (scored with or
    without the multipliers). Without a policy installed the role switch does nothing.
    Settings that cannot reach the table are left out (`variants.settings.reaching`;
    `max_limit`: the replay's largest search limit, when every one is at least 1)."""
    if frequency == "closed_loop":
        return {"frequency": frequency, "config": as_dict(config)}
    # counts nothing: whether the log's do is kept
    key = reaching(featurize_config(config, frequency), max_limit=max_limit)
    logged_accesses = counts_access(config)
    mspr = key.mspr
    if not has_policy:  # the role switch and strict isolation have nothing to apply
        key = replace(key, mspr=replace(mspr, role=replace(mspr.role, enabled=False)),
                      corrections=replace(key.corrections, strict_role_isolation=False))
    elif not mspr.role.hard_filter and not config.corrections.strict_role_isolation:
        key = replace(key, mspr=replace(mspr, role=replace(mspr.role, enabled=True)))
    return {"frequency": frequency, "config": as_dict(key), "logged_accesses": logged_accesses}


def success_twin(config: EngineConfig, frequency: FrequencyMode) -> EngineConfig | None:
    """The configuration whose replay gives `config`'s table up to its success column, or
    None: `config` with success switched on, when MSPR is on and success is off, in
    `logged` mode.

    Success changes nothing but its own term (MSPR.md sections 13-14): `record_feedback`
    appends a success row, which only the success provider reads, and without success
    there is no provider, so every success value is 0.0. Relevance, floors, access counts,
    the candidates, their order and every other feature follow the same timeline either way.
    (In `closed_loop` the success term moves the ranking and so the accesses it counts.)
    `derive_table` builds the table; tests/test_replay.py checks it against a replay."""
    mspr = config.mspr
    if frequency != "logged" or not mspr.enabled or mspr.success.enabled:
        return None
    return replace(config, mspr=replace(mspr, success=replace(mspr.success, enabled=True)))


def derive_table(twin: CandidateTable, config: EngineConfig, frequency: FrequencyMode, *,
                 has_policy: bool) -> CandidateTable:
    """`config`'s table from its `success_twin`'s: every success value 0.0, and the
    provenance of `config` (its config and table key), saying which table it came from."""
    if twin.meta.get("frequency") != "logged" or success_twin(config, frequency) is None:
        raise ExperimentError("derive_table: only a logged table with success off can be "
                              "derived from its success twin")
    meta = {**twin.meta, "config": as_dict(config),
            "table_key": table_key(config, frequency, has_policy=has_policy,
                                   max_limit=twin.meta.get("max_limit")),
            "derived": "the success twin's table (success on) with every success value 0.0"}
    if "cost" in meta:  # not measured: this table was not replayed
        meta["cost"] = {**meta["cost"], "measured_on": "the success twin"}
    return CandidateTable(twin.searches, twin.candidates.with_columns(success=pl.lit(0.0)),
                          twin.qrels, meta=meta)


def question_of(searches: pl.DataFrame) -> pl.Expr:
    """The distinct question a search asks, as `query_id`: the per-query unit's cluster.
    A table labelled by verdicts has one query id per occurrence and the question (the
    query hash) in `question`; every other table's query id is the question."""
    return (pl.col("question") if "question" in searches.columns else pl.col("query_id")
            ).alias("query_id")


@dataclass(frozen=True)
class CandidateTable:
    """A replay's output: one row per evaluated search, one per candidate, and provenance.

    searches: search (0..S-1), event_id, ts, query_id, query, user_id, agent_id, run_id,
        limit (the evaluated limit), intent (the label the engine scored with; UNKNOWN when
        routing is off), question_type, n_candidates, error (the library's exception when
        the search raised; it then has no candidates), logged (the logged ranking).
    candidates: search, position (discovery order), memory_id, was_seed, the six FEATURES,
        relevance, role (soft-role multiplier: 1 no effect, 0 denied), visible (may the
        searcher see it: `AUDIT_POLICY` on its stored payload, for the isolation audit),
        logged_rank (0-based rank in the logged ranking, null when not shown), grade (null
        when unjudged).
    qrels: query_id, memory_id, relevance of the evaluated queries (the ideal rankings
        need every judged memory, candidate or not).
    meta: dataset digest and source, frequency mode, feedback policy, seeds, the table key.
    """

    searches: pl.DataFrame
    candidates: pl.DataFrame
    qrels: pl.DataFrame
    meta: dict[str, Any]

    def subset(self, keep: pl.Series | np.ndarray) -> CandidateTable:
        """The searches where `keep` is true (a bool per search), renumbered 0..n-1."""
        mask = pl.Series(np.asarray(keep, dtype=bool))
        if mask.len() != self.searches.height:
            raise ValueError(f"subset: expected {self.searches.height} flags, got {mask.len()}")
        kept = self.searches.filter(mask)
        renumber = pl.DataFrame({"search": kept["search"],
                                 "_new": pl.int_range(kept.height, dtype=pl.Int64, eager=True)})
        candidates = (self.candidates.join(renumber, on="search", how="inner",
                                           maintain_order="left")
                      .with_columns(search=pl.col("_new")).drop("_new"))
        qrels = self.qrels.filter(pl.col("query_id").is_in(kept["query_id"].implode()))
        return CandidateTable(kept.with_columns(search=renumber["_new"]), candidates, qrels,
                              self.meta)

    def block(self, *, limit: int | None = None) -> CandidateBlock:
        """The candidates as the batch scorer's arrays (rows in table order)."""
        c = self.candidates
        limits = self.searches["limit"].to_numpy() if limit is None else np.full(
            self.searches.height, limit)
        labels = self.searches["intent"].replace_strict(
            {label.value: i for i, label in enumerate(INTENTS)}, return_dtype=pl.Int64)
        return CandidateBlock.build(
            search=c["search"].to_numpy(),
            features=np.stack([c[name].to_numpy() for name in FEATURES]),
            relevance=c["relevance"].to_numpy(), role=c["role"].to_numpy(),
            search_intent=labels.to_numpy(), search_limit=limits)

    def save(self, folder: Path) -> None:
        """Write searches.parquet, candidates.parquet and meta.json, all or nothing."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            self.searches.write_parquet(staging / "searches.parquet")
            self.candidates.write_parquet(staging / "candidates.parquet")
            self.qrels.write_parquet(staging / "qrels.parquet")
            (staging / "meta.json").write_text(json.dumps(self.meta, indent=2, sort_keys=True,
                                                          default=str), encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            staging.rename(folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @staticmethod
    def load(folder: Path) -> CandidateTable:
        folder = Path(folder)
        try:
            return CandidateTable(pl.read_parquet(folder / "searches.parquet"),
                                  pl.read_parquet(folder / "candidates.parquet"),
                                  pl.read_parquet(folder / "qrels.parquet"),
                                  json.loads((folder / "meta.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, pl.exceptions.PolarsError) as exc:  # JSON: a ValueError
            raise ExperimentError(f"{folder}: a cached replay that cannot be read "
                                  f"({type(exc).__name__}: {str(exc).splitlines()[0]}); delete "
                                  "the folder and the replay is run again") from None


@functools.cache
def code_digest() -> str:
    """sha256 of the engine, timeline and replay sources (the walk and the settings split
    too): a cached table is reused only by the code that wrote it."""
    from msprlab import datasets, engine
    digest = hashlib.sha256()
    roots = [Path(engine.__path__[0]), Path(datasets.__path__[0])]
    files = [*sorted(roots[0].glob("*.py")), roots[1] / "timeline.py", Path(__file__),
             *sorted((Path(__file__).parent / "variants").glob("*.py"))]
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(ds: Dataset, config: EngineConfig, frequency: FrequencyMode, *,
              limit: int | None, policy: RolePolicy | None, seeds: str = "exact") -> str:
    spec = {"dataset": ds.digest, "limit": limit,
            "table": table_key(config, frequency, has_policy=policy is not None,
                               max_limit=limit if limit is not None else _max_limit(ds)),
            "policy": repr(policy), "code": code_digest(), "seeds": seeds}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def cached_replay(ds: Dataset, config: EngineConfig, cache_dir: Path, *,
                  frequency: FrequencyMode = "logged", limit: int | None = None,
                  policy: RolePolicy | None = None, classifier: Classifier | None = None,
                  progress: Progress | None = None,
                  seed_index: DenseIndex | None = None) -> tuple[CandidateTable, bool]:
    """`replay`, read from `cache_dir` when this dataset, table key and code were replayed
    before (keyed by `cache_key`); returns the table and whether it came from the cache.
    A run with a custom classifier is never cached (its behaviour is not part of the key)."""
    key = cache_key(ds, config, frequency, limit=limit, policy=policy,
                    seeds="exact" if seed_index is None else "index")
    folder = Path(cache_dir) / key[:24]
    if classifier is None and (folder / "meta.json").is_file():
        return CandidateTable.load(folder), True
    table = replay(ds, config, frequency=frequency, limit=limit, policy=policy,
                   classifier=classifier, progress=progress, seed_index=seed_index)
    if classifier is None:
        table.save(folder)
    return table, False


def replay(ds: Dataset, config: EngineConfig, *, frequency: FrequencyMode = "logged",
           limit: int | None = None, policy: RolePolicy | None = None,
           classifier: Classifier | None = None, progress: Progress | None = None,
           engine_rankings: bool = False,
           seed_index: DenseIndex | None = None,
           end_state: Callable[[EngineState], None] | None = None) -> CandidateTable:
    """Walk `ds.events` through the engine and return the candidate table.

    Parameters
    ----------
    config : the evaluated configuration (its six weights matter only in `closed_loop`).
    frequency : "logged" or "closed_loop" (module docstring).
    limit : the evaluated search limit; None keeps each logged search's limit.
    policy : the role policy installed in the engine (None: no policy, roles inert).
    classifier : the LLM intent classifier callable, for the "llm"/"hybrid" strategies.
    seed_index : a dense index (`datasets.dense_index.QdrantIndex`: Qdrant local or a
        server) answering the seed search with the owner-scope filters, instead of the exact
        cosine. Qdrant scores in float32, so dense values (and near-ties) can differ from
        the logging run's in the last digits.
    engine_rankings : also run the sequential engine with `config`'s own weights and keep
        its ranking per search (`searches.engine`): the reference the batch scorer must
        reproduce (tests and `msprlab replay --check`); in `logged` mode it doubles the cost.
    end_state : called with the engine state once every event is replayed: what the
        fidelity check compares with production's end state (`experiments.fidelity`).
    """
    return replay_variants(ds, [config], limits=[limit], frequency=frequency, policy=policy,
                           classifier=classifier, progress=progress,
                           engine_rankings=engine_rankings, seed_index=seed_index,
                           end_state=end_state)[0]


def replay_variants(ds: Dataset, configs: Sequence[EngineConfig], *,
                    limits: Sequence[int | None] | None = None,
                    frequency: FrequencyMode = "logged", policy: RolePolicy | None = None,
                    classifier: Classifier | None = None, progress: Progress | None = None,
                    engine_rankings: bool = False,
                    seed_index: DenseIndex | None = None,
                    end_state: Callable[[EngineState], None] | None = None,
                    ) -> list[CandidateTable]:
    """`replay` of each configuration (with its limit, `limits[i]`), in one walk over the
    timeline: they must record the same state (`variants.settings.state_of`: they may
    differ in the search settings and the limit only), and each table equals that of a
    replay of its configuration alone, bit for bit. `logged` mode only, for more than
    one. Each table's `meta["cost"]` holds its engine time per evaluated search;
    `end_state` is called with the engine state once every event is replayed."""
    configs = list(configs)
    limits = [None] * len(configs) if limits is None else list(limits)
    if frequency not in FREQUENCY_MODES:
        raise ExperimentError(f"frequency must be one of {FREQUENCY_MODES}, got {frequency!r}")
    if len(limits) != len(configs):
        raise ExperimentError(f"replay: {len(configs)} configurations but {len(limits)} limits")
    for config, limit in zip(configs, limits, strict=True):
        if not (config.context_graph_enabled and config.retrieval.enabled):
            raise ExperimentError(
                "replay: context_graph.enabled and context_graph.retrieval.enabled must be on: "
                "without the graph path the library returns the vector hits as they are and "
                "there is no ranking to tune")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ExperimentError(f"replay: limit must be an integer or None, got {limit!r}")
    runs = [featurize_config(config, frequency) for config in configs]
    if len(configs) > 1:
        if frequency != "logged":
            raise ExperimentError("replay: several configurations share a walk only in the "
                                  "logged frequency mode (in closed_loop each one's rankings "
                                  "feed the access counts it records)")
        states = {json.dumps([as_dict(state_of(run)), counts_access(config)], sort_keys=True,
                             default=str) for run, config in zip(runs, configs, strict=True)}
        if len(states) > 1:
            raise ExperimentError("replay: these configurations record different states "
                                  "(they differ in more than the search settings and the "
                                  "limit), so each needs a replay of its own")
    if ds.source == "contextkit" and configs[0].decay.enabled:
        # a ContextKit snapshot holds decayed weights: enter the edges at creation weight
        from msprlab.datasets.sources.contextkit import edges_at_creation
        ds = edges_at_creation(ds, configs[0].decay.half_life_days)
    check = None
    if engine_rankings:
        config = configs[0]
        check = config if frequency == "closed_loop" else replace(
            config, mspr=replace(config.mspr, frequency=replace(config.mspr.frequency,
                                                                enabled=False)))
    walked = walk(ds, [Variant(run, limit) for run, limit in zip(runs, limits, strict=True)],
                  counts_logged_access=frequency == "logged" and counts_access(configs[0]),
                  policy=policy, classifier=classifier, progress=progress, check=check,
                  seed_index=seed_index, end_state=end_state)
    max_limit = _max_limit(ds)
    tables = []
    for config, limit, found in zip(configs, limits, walked.variants, strict=True):
        meta = {"dataset": {"source": ds.source, "version": ds.version, "digest": ds.digest},
                "frequency": frequency, "feedback_policy": FEEDBACK_POLICY,
                "seeds": walked.seeds_from + ("" if seed_index is None else
                                              f"; searched in {type(seed_index).__name__} "
                                              "(float32)"),
                "limit": limit, "policy": repr(policy),
                "table_key": table_key(config, frequency, has_policy=policy is not None,
                                       max_limit=limit if limit is not None else max_limit),
                "max_limit": limit if limit is not None else max_limit,
                "weights_bound": frequency == "closed_loop",
                "config": as_dict(config), "code": code_digest(),
                "cost": {"ms_per_search": found.ms_per_search(walked.evaluated),
                         "searches": walked.evaluated, "own_seconds": found.seconds,
                         "shared_seconds": found.shared_seconds,
                         "walk_variants": len(configs)}}
        qrels = ds.qrels.select("query_id", "memory_id", "relevance").filter(
            pl.col("query_id").is_in(found.searches["query_id"].unique().implode()))
        tables.append(CandidateTable(found.searches, found.candidates, qrels, meta=meta))
    return tables


def _max_limit(ds: Dataset) -> int | None:
    """The largest logged search limit, when every logged search's is at least 1 (then a
    seed_top_k above it finds what it does: `variants.settings.reaching`), else None."""
    limits = ds.events.filter(pl.col("kind") == "search")["limit"]
    if limits.len() == 0 or limits.null_count() or limits.min() < 1:  # type: ignore[operator]
        return None
    return int(limits.max())  # type: ignore[arg-type]
