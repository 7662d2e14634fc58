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

import hashlib
import json
import operator
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from msprlab.datasets.dense_index import DenseIndex
from msprlab.datasets.schema import Dataset
from msprlab.datasets.timeline import (
    SeedPlan,
    Timeline,
    collector_paused,
    corpus_of,
    project_queries,
    to_datetime,
    unit_rows,
    vector_matrix,
)
from msprlab.engine import (
    EngineConfig,
    SearchError,
    SearchOutcome,
    SearchRequest,
    Seed,
    new_state,
    record_feedback,
)
from msprlab.engine.batch import FEATURES, INTENTS, WEIGHTS, CandidateBlock
from msprlab.engine.config import IntentConfig, as_dict
from msprlab.engine.graph import Embedding, row_norms_sq
from msprlab.engine.intent import Classifier, Intent, IntentRouter
from msprlab.engine.roles import (
    CompositePolicy,
    RoleContext,
    RolePolicy,
    RoleScopePolicy,
    TenantIsolationPolicy,
    allows,
    role_context_from_filters,
    role_multipliers,
)
from msprlab.engine.search import (
    counts_access,
    effective_filters,
    featurize_search,
    search,
    seed_payload,
    vector_hits,
)
from msprlab.engine.state import EngineState

from .errors import ExperimentError

__all__ = ["FEEDBACK_POLICY", "FREQUENCY_MODES", "CandidateTable", "FrequencyMode",
           "derive_table", "featurize_config", "question_of", "replay", "success_twin",
           "table_key"]

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
              has_policy: bool = True) -> dict[str, Any]:
    """What a candidate table depends on. Two configurations with the same key can be scored
    from one table: in `logged` mode they may differ in the six weights, intent routing
    (scored with or without the label's deltas) and a soft role policy (scored with or
    without the multipliers). Without a policy installed the role switch does nothing."""
    if frequency == "closed_loop":
        return {"frequency": frequency, "config": as_dict(config)}
    key = featurize_config(config, frequency)  # counts nothing: whether the log's do is kept
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
            "table_key": table_key(config, frequency, has_policy=has_policy),
            "derived": "the success twin's table (success on) with every success value 0.0"}
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


def code_digest() -> str:
    """sha256 of the engine, timeline and replay sources: a cached table is reused only by
    the code that wrote it."""
    from msprlab import datasets, engine
    digest = hashlib.sha256()
    roots = [Path(engine.__path__[0]), Path(datasets.__path__[0])]
    files = [*sorted(roots[0].glob("*.py")), roots[1] / "timeline.py", Path(__file__)]
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(ds: Dataset, config: EngineConfig, frequency: FrequencyMode, *,
              limit: int | None, policy: RolePolicy | None, seeds: str = "exact") -> str:
    spec = {"dataset": ds.digest, "limit": limit,
            "table": table_key(config, frequency, has_policy=policy is not None),
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
    if frequency not in FREQUENCY_MODES:
        raise ExperimentError(f"frequency must be one of {FREQUENCY_MODES}, got {frequency!r}")
    if not (config.context_graph_enabled and config.retrieval.enabled):
        raise ExperimentError("replay: context_graph.enabled and context_graph.retrieval.enabled "
                              "must be on: without the graph path the library returns the vector "
                              "hits as they are and there is no ranking to tune")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise ExperimentError(f"replay: limit must be an integer or None, got {limit!r}")
    if ds.source == "contextkit" and config.decay.enabled:
        # a ContextKit snapshot holds decayed weights: enter the edges at creation weight
        from msprlab.datasets.sources.contextkit import edges_at_creation
        ds = edges_at_creation(ds, config.decay.half_life_days)
    with collector_paused():
        return _replay(ds, config, frequency=frequency, limit=limit, policy=policy,
                       classifier=classifier, progress=progress,
                       engine_rankings=engine_rankings, seed_index=seed_index,
                       end_state=end_state)


def _replay(ds: Dataset, config: EngineConfig, *, frequency: FrequencyMode,
            limit: int | None, policy: RolePolicy | None, classifier: Classifier | None,
            progress: Progress | None, engine_rankings: bool,
            seed_index: DenseIndex | None,
            end_state: Callable[[EngineState], None] | None) -> CandidateTable:
    """`replay` past its argument checks."""
    corpus = corpus_of(ds)
    if corpus.vectors is None:
        raise ExperimentError("replay: the dataset has no memory embeddings, so the dense seeds "
                              "cannot be found; ingest it with an embedder (msprlab ingest "
                              "generic DIR --embedder tfidf-svd --store PATH)")
    vectors, seeds_from = _query_vectors(ds, corpus)
    run = featurize_config(config, frequency)
    state = new_state(run, classifier=classifier, policy=policy)
    timeline = Timeline(ds, corpus, state)
    check = None
    if engine_rankings:
        check_config = config if frequency == "closed_loop" else replace(
            config, mspr=replace(config.mspr, frequency=replace(config.mspr.frequency,
                                                                enabled=False)))
        check = new_state(check_config, classifier=classifier, policy=policy)
        check_timeline = Timeline(ds, corpus, check)
    labeller = _labeller(run, classifier)
    query_row = {q: i for i, q in enumerate(corpus.query_ids)}
    question_type = dict(zip(ds.queries["query_id"].to_list(),
                             ds.queries["question_type"].to_list(), strict=True))
    role_soft = (run.mspr.enabled and run.mspr.role.enabled and not run.mspr.role.hard_filter
                 and policy is not None)
    # Features are all the table needs; only when the replay counts accesses does a search
    # need its ranking (the results it counts).
    run_search = search if counts_access(run) else featurize_search
    audit = _Audit(state.payloads)
    # The searcher's context, by the event fields it is made from (a frozen value, shared)
    contexts: dict[tuple[Any, ...], RoleContext] = {}
    out = _Collector()
    # Memory events enter through the timeline; clicks, and in closed_loop the logged
    # accesses, change nothing; in logged mode the accesses count only for a configuration
    # that counts accesses (without, the library has none).
    acting = ["feedback", "search"] + (
        ["access"] if frequency == "logged" and counts_access(config) else [])
    events = ds.events.filter(pl.col("kind").is_in(acting)).sort("ts", "seq").with_columns(
        pl.col("ts").cast(pl.Int64))
    # A run of accesses at one time is one step, its memory ids in order: a log has many
    # accesses (ten per search in the simulated logs) and the loop's cost per step adds up.
    access = pl.col("kind") == "access"
    joined = (access & access.shift(fill_value=False)
              & (pl.col("ts") == pl.col("ts").shift())).fill_null(False)
    steps = (events.with_row_index("event").with_columns(step=(~joined).cum_sum())
             .group_by("step", maintain_order=True)
             .agg(pl.exclude("memory_id", "step").first(), pl.col("memory_id")))
    columns = ("event", "event_id", "ts", "kind", "memory_id", "query_id", "user_id",
               "agent_id", "run_id", "query", "filters", "limit", "shown", "helpful")
    values = {c: steps[c].to_list() for c in columns}
    plan = None  # the exact seeds of every evaluated search, computed up front
    if seed_index is None:
        evaluated = [(ts, query_row[q], vector_hits(state, logged if limit is None else limit))
                     for kind, ts, q, logged in zip(values["kind"], values["ts"],
                                                    values["query_id"], values["limit"],
                                                    strict=True)
                     if kind == "search" and q in query_row]
        plan = SeedPlan(corpus, timeline, [(ts, q) for ts, q, _ in evaluated], vectors,
                        [count for _, _, count in evaluated])
    planned = 0
    # each query's vector with its norm, summed once rather than at each of its searches
    embeddings = list(map(Embedding, vectors, row_norms_sq(vectors)))
    rows = zip(*values.values(), strict=True)
    total = events.height
    runs = [(state, timeline)] + ([] if check is None else [(check, check_timeline)])
    moment_us, now = None, None
    reported = -2048
    for (done, event_id, ts, kind, memory_ids, query_id, user, agent, run_id, text, filters,
         logged_limit, shown, helpful) in rows:
        if progress is not None and done >= reported + 2048:
            progress(done, total)
            reported = done
        if ts != moment_us:  # events come in bursts at one time: one datetime and one
            moment_us, now = ts, to_datetime(ts)  # advance per burst (the rest find nothing)
            for _, tl in runs:
                tl.advance(ts)
        if kind == "feedback":
            for st, _ in runs:
                record_feedback(st, memory_ids[0], helpful=bool(helpful), now=now,
                                user_id=user, agent_id=agent, run_id=run_id, query=text)
        elif kind == "access":
            for st, _ in runs:
                st.graph.record_accesses(memory_ids, now)
        else:
            q = query_row.get(query_id) if query_id is not None else None
            seeds = []
            if q is not None and plan is not None:
                seeds, planned = plan.seeds(planned), planned + 1
            elif q is not None and seed_index is not None:
                seeds = index_seeds(seed_index, corpus, timeline, q, vectors[q], vector_hits(
                    state, logged_limit if limit is None else limit))
            request = SearchRequest(
                query=text, seeds=seeds, user_id=user, agent_id=agent, run_id=run_id,
                filters=json.loads(filters) if filters and filters != "{}" else None,
                limit=logged_limit if limit is None else limit,
                query_embedding=None if q is None else embeddings[q])
            outcome, error = _search(run_search, state, request, now)
            reference = None
            if check is not None:
                checked, check_error = _search(search, check, request, now)
                reference = ([c.id for c in checked.results[:max(1, request.limit)]]
                             if checked is not None else None)
                if (check_error is None) != (error is None):
                    raise AssertionError(f"replay: search event {event_id} raised in one run "
                                         f"only ({error} / {check_error})")
            if q is None:
                continue  # nothing to evaluate it against; its decay tick has happened
            label = outcome.intent.label if outcome is not None and outcome.intent else None
            ids, candidate_values = _columns(outcome)
            multipliers = visible = None
            if ids:
                searcher = (user, agent, run_id, filters)
                ctx = contexts.get(searcher)
                if ctx is None:
                    ctx = contexts[searcher] = role_context_from_filters(
                        user_id=user, agent_id=agent, run_id=run_id,
                        filters=effective_filters(request))
                if role_soft and policy is not None:
                    assert outcome is not None
                    multipliers = role_multipliers([c.entry() for c in outcome.candidates],
                                                   policy, ctx)
                visible = audit.visible(ids, ctx)
            out.search(event=done, limit=request.limit,
                       intent=(label or Intent.UNKNOWN).value,
                       label=(label or labeller(text)).value,
                       question_type=question_type.get(query_id), error=error,
                       logged=shown, engine=reference, ids=ids, values=candidate_values,
                       multipliers=multipliers, visible=visible, grades=corpus.grades[q])
    if progress is not None:
        progress(total, total)
    if end_state is not None:
        end_state(state)
    meta = {"dataset": {"source": ds.source, "version": ds.version, "digest": ds.digest},
            "frequency": frequency, "feedback_policy": FEEDBACK_POLICY,
            "seeds": seeds_from + ("" if seed_index is None else
                                   f"; searched in {type(seed_index).__name__} (float32)"),
            "limit": limit, "policy": repr(policy),
            "table_key": table_key(config, frequency, has_policy=policy is not None),
            "weights_bound": frequency == "closed_loop",
            "config": as_dict(config), "code": code_digest()}
    searches, candidates = out.frames(events, engine_rankings)
    qrels = ds.qrels.select("query_id", "memory_id", "relevance").filter(
        pl.col("query_id").is_in(searches["query_id"].unique().implode()))
    return CandidateTable(searches, candidates, qrels, meta=meta)


# The isolation audit's yardstick: tenant isolation and role scope with the library's
# defaults, judged on each memory's full stored payload.
AUDIT_POLICY = CompositePolicy([TenantIsolationPolicy(), RoleScopePolicy()])


class _Audit:
    """May the searcher see each candidate: `AUDIT_POLICY` on its stored payload, as a hit
    (`seed_payload`), remembered per the searcher's (tenant, role), the only parts of the
    context the policy reads, and per memory.

    A verdict holds while the memory's stored payload is the same object: the replay's
    payloads are only ever replaced (the timeline adds and deletes memories), not edited.
    """

    def __init__(self, payloads: Mapping[str, Any]) -> None:
        self.payloads = payloads
        # searcher -> memory id -> (its stored payload or None, the verdict)
        self.known: dict[tuple[Any, ...], dict[str, tuple[Any, bool]]] = {}

    def visible(self, ids: list[str], ctx: RoleContext) -> list[bool]:
        """A verdict per memory id."""
        # Types in the key: 1, 1.0 and True are one dict key, but str() tells them apart.
        searcher = (type(ctx.tenant_id), ctx.tenant_id, type(ctx.role), ctx.role)
        try:
            known = self.known.setdefault(searcher, {})
        except TypeError:  # a list or dict from the filters: judged afresh
            return [_allowed(m, self.payloads.get(m), ctx) for m in ids]
        out = []
        for memory_id, stored, seen in zip(ids, map(self.payloads.get, ids),
                                           map(known.get, ids), strict=True):
            if seen is None or seen[0] is not stored:
                seen = known[memory_id] = (stored, _allowed(memory_id, stored, ctx))
            out.append(seen[1])
        return out


def _allowed(memory_id: str, stored: Mapping[str, Any] | None, ctx: RoleContext) -> bool:
    """`apply_role_policy`'s verdict on one hit."""
    return allows(AUDIT_POLICY, seed_payload(memory_id, stored or {}, None), ctx)


def index_seeds(index: DenseIndex, corpus: Any, timeline: Timeline, q: int,
                vector: np.ndarray, count: int) -> list[Seed]:
    """The top `count` of the owner's memories that exist now, from the index.

    The index holds every memory; it is asked for as many more as the scope has memories
    not (or no longer) in the vector store at this time, and those are dropped."""
    rows = corpus.scope_rows[q]
    pending = int((~timeline.seedable[rows]).sum())
    if rows.size == pending:
        return []
    owner = {k: v for k, v in zip(("user_id", "agent_id", "run_id"), corpus.owners[q],
                                  strict=True) if v is not None}
    live = {corpus.memory_ids[r] for r in rows[timeline.seedable[rows]]}
    hits = index.search(vector, count + pending, filters=owner)
    return [Seed(m, s) for m, s in hits if m in live][:count]


def _search(run: Callable[..., Any], state: Any, request: SearchRequest,
            now: Any) -> tuple[Any, str | None]:
    try:
        return run(state, request, now=now), None
    except SearchError as exc:
        return None, str(exc)


def _query_vectors(ds: Dataset, corpus: Any) -> tuple[np.ndarray, str]:
    """Unit query vectors aligned with corpus.query_ids, and where they came from."""
    stored = ds.query_embeddings
    if stored.height:
        embedder = ds.embeddings["embedder"][0] if ds.embeddings.height else None
        mine = stored.filter(pl.col("embedder") == embedder) if embedder else stored
        if mine.height == 0:
            raise ExperimentError(f"replay: query_embeddings hold no vectors of the memories' "
                                  f"embedder {embedder!r} (found {stored['embedder'].unique()})")
        row_of = {q: i for i, q in enumerate(mine["query_id"].to_list())}
        missing = [q for q in corpus.query_ids if q not in row_of]
        if missing:
            raise ExperimentError(f"replay: {len(missing)} queries have no stored query vector "
                                  f"(first: {missing[0]!r})")
        matrix = vector_matrix(mine["vector"]).astype(np.float32)
        take = [row_of[q] for q in corpus.query_ids]
        return unit_rows(matrix[take].astype(np.float64)), f"stored query vectors ({embedder})"
    projected = project_queries(ds, corpus).astype(np.float32).astype(np.float64)
    return unit_rows(projected), "query vectors projected from the query text (none stored)"


def _labeller(config: EngineConfig, classifier: Classifier | None) -> Callable[[str], Intent]:
    """The intent label of a query for reporting, when the engine did not route it."""
    router = IntentRouter(replace(config.mspr.intent, enabled=True) if config.mspr.enabled
                          else IntentConfig(enabled=True), classifier)

    def label(text: str) -> Intent:
        return router.classify(text).label
    return label


# A candidate's values besides its id: read with one C-level call per candidate, or
# column by column from the positional path's `Scored` (the same names).
_CANDIDATE_VALUES = ("was_seed", *FEATURES, "relevance")
_VALUES_OF = operator.attrgetter(*_CANDIDATE_VALUES)
_ID = operator.attrgetter("id")
_NO_VALUES: tuple[Sequence[Any], ...] = ((),) * len(_CANDIDATE_VALUES)


def _columns(outcome: SearchOutcome | None) -> tuple[list[str], tuple[Sequence[Any], ...]]:
    """A search's candidates as their ids and `_CANDIDATE_VALUES` column by column: from
    the columns the positional path scored, else from the Candidates (no need to make one
    per candidate for the table)."""
    if outcome is None:
        return [], _NO_VALUES
    scored = outcome.columns
    if scored is not None:
        return scored.ids, _VALUES_OF(scored)
    candidates = outcome.candidates
    if not candidates:
        return [], _NO_VALUES
    return list(map(_ID, candidates)), tuple(zip(*map(_VALUES_OF, candidates), strict=True))


# What a search row takes from its event as it is (`logged` is the event's `shown`).
_FROM_EVENT = ("event_id", "ts", "query_id", "query", "user_id", "agent_id", "run_id")
_SEARCH_COLUMNS = ("search", *_FROM_EVENT, "limit", "intent", "intent_label", "question_type",
                   "n_candidates", "error", "logged", "engine")


class _Collector:
    """Per-search and per-candidate columns, appended as the replay goes. A search's own
    columns from the event (`_FROM_EVENT`, the logged ranking) are taken from the events
    frame at the end, by the event's position, without a round trip through Python."""

    def __init__(self) -> None:
        self.s: dict[str, list[Any]] = {c: [] for c in (
            "event", "limit", "intent", "intent_label", "question_type", "n_candidates",
            "error", "engine")}
        self.c: dict[str, list[Any]] = {c: [] for c in (
            "memory_id", "role", "visible", "logged_rank", "grade")}
        self.values: list[list[Any]] = [[] for _ in _CANDIDATE_VALUES]  # column by column

    def search(self, *, event: int, limit: int, intent: str, label: str,
               question_type: str | None, error: str | None, logged: list[str] | None,
               engine: list[str] | None, ids: list[str], values: Sequence[Sequence[Any]],
               multipliers: list[float] | None, visible: list[bool] | None,
               grades: Mapping[str, int]) -> None:
        """One search: its own columns, and its candidates' ids and `_CANDIDATE_VALUES`
        (column by column, as `_columns` gives them)."""
        s = self.s
        s["event"].append(event)
        s["limit"].append(limit)
        s["intent"].append(intent)
        s["intent_label"].append(label)
        s["question_type"].append(question_type)
        n = len(ids)
        s["n_candidates"].append(n)
        s["error"].append(error)
        s["engine"].append(engine)
        c = self.c
        c["memory_id"].extend(ids)
        for column, found in zip(self.values, values, strict=True):
            column.extend(found)
        c["role"].extend(multipliers if multipliers is not None else [1.0] * n)
        c["visible"].extend(visible if visible is not None else [True] * n)
        c["logged_rank"].extend(map({m: r for r, m in enumerate(logged or [])}.get, ids))
        c["grade"].extend(map(grades.get, ids))

    def frames(self, events: pl.DataFrame, with_engine: bool,
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The searches and candidates frames; `events` is the frame the replay walked."""
        return self._searches(events, with_engine), self._candidates()

    def _searches(self, events: pl.DataFrame, with_engine: bool) -> pl.DataFrame:
        s = self.s
        taken = events[s["event"]].select(*_FROM_EVENT, logged="shown").with_columns(
            pl.col("ts").cast(pl.Datetime("us")))
        own = pl.DataFrame({name: s[name] for name in s if name != "event"}, schema={
            "limit": pl.Int64, "intent": pl.String, "intent_label": pl.String,
            "question_type": pl.String, "n_candidates": pl.Int64, "error": pl.String,
            "engine": pl.List(pl.String)})
        return pl.concat([taken, own], how="horizontal").with_columns(
            search=pl.int_range(taken.height, dtype=pl.Int64)).select(
            _SEARCH_COLUMNS if with_engine else _SEARCH_COLUMNS[:-1])

    def _candidates(self) -> pl.DataFrame:
        counts = np.asarray(self.s["n_candidates"], dtype=np.int64)
        search = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        first = np.cumsum(counts) - counts  # each search's first candidate row
        c = self.c
        return pl.DataFrame({
            "search": search, "position": np.arange(search.size) - first[search],
            "memory_id": c["memory_id"], **self._values(), "role": c["role"],
            "visible": c["visible"], "logged_rank": c["logged_rank"], "grade": c["grade"],
        }, schema={
            "search": pl.Int64, "position": pl.Int64, "memory_id": pl.String,
            "was_seed": pl.Boolean, **dict.fromkeys(FEATURES, pl.Float64),
            "relevance": pl.Float64, "role": pl.Float64, "visible": pl.Boolean,
            "logged_rank": pl.Int64, "grade": pl.Int64})

    def _values(self) -> dict[str, Sequence[Any]]:
        """The candidates' `_CANDIDATE_VALUES`, column by column."""
        return dict(zip(_CANDIDATE_VALUES, self.values, strict=True))
