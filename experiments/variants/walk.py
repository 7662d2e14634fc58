"""One walk over an event store's timeline, scoring one or several variants at each search.

`experiments.replay` says what a replay is (the timeline, the feedback policy, the
frequency modes, what a candidate row holds); this module walks it. A walk holds one
engine state, so it replays one recorded state: the configurations it scores (`Variant`)
may differ only in settings that touch the search, not the state it records
(`variants.settings`: the retrieval settings, the success sample size, the search limit).
At each search the state is what every variant would have at that moment alone, so each
variant's candidates are those of a replay of that configuration alone, bit for bit
(tests/test_variants.py checks it, with hypothesis). What a search does to the state
whatever its retrieval settings (the decay tick on read, indexing what was written since
the last search) happens once, in `engine.search.prepare_search`, before the variants'
searches: the variants' own searches only read the state.

Each variant's search is timed (`perf_counter` around the engine call), and so are the
shared parts: the decay tick, and the caches a search fills for its algorithm (the
positional index of BFS, the edge table PPR rebuilds after every change of the graph). A
variant's engine cost is its own time plus the tick and its algorithm's part, per
evaluated search: what a replay of it alone spends in the engine, but for one-time costs
(a BFS search falling back to the object path is charged the index all the same) and the
CPU's caches: the first search after the state changed finds them cold, the variants
after it warm (on LoCoMo a BFS search took about half the time as the third of three
alike). So the variants take turns to lead, and costs measured in one walk compare with
each other; a walk of several reads lower than a replay alone (`cost.walk_variants`
says how many shared it).
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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
from msprlab.engine.batch import FEATURES
from msprlab.engine.config import IntentConfig
from msprlab.engine.graph import Embedding, row_norms_sq
from msprlab.engine.intent import Classifier, Intent, IntentRouter
from msprlab.engine.positional import index_written
from msprlab.engine.ppr import prepare_edges
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
    prepare_search,
    search,
    seed_payload,
    vector_hits,
)

from ..errors import ExperimentError

__all__ = ["AUDIT_POLICY", "Variant", "Walked", "index_seeds", "query_vectors", "walk"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Variant:
    """One configuration a walk scores: the configuration the engine runs (a `logged`
    replay's `featurize_config`) and the evaluated search limit (None: each logged
    search's own)."""

    run: EngineConfig
    limit: int | None = None


@dataclass
class Walked:
    """What a walk made for one variant: its searches and candidates frames, the seconds
    its own searches took on the evaluated searches, and the seconds of what they shared
    with other variants that a replay of it alone would have spent in them (the decay
    tick; the positional index for BFS, the edge table for PPR)."""

    searches: pl.DataFrame
    candidates: pl.DataFrame
    seconds: float
    shared_seconds: float

    def ms_per_search(self, evaluated: int) -> float:
        """The engine's time per evaluated search: its own and its share."""
        return 1000.0 * (self.seconds + self.shared_seconds) / max(1, evaluated)


@dataclass(frozen=True)
class WalkResult:
    """Every variant's frames, in the order given; the seconds of the shared preparation
    on the evaluated searches, how many searches were evaluated, where the seeds' query
    vectors came from, and how many events the walk took."""

    variants: list[Walked]
    shared_seconds: dict[str, float]  # the decay tick, the BFS index, the PPR edge table
    evaluated: int
    seeds_from: str
    events: int = 0


def walk(ds: Dataset, variants: Sequence[Variant], *, counts_logged_access: bool,
         policy: RolePolicy | None = None, classifier: Classifier | None = None,
         progress: Progress | None = None, check: EngineConfig | None = None,
         seed_index: DenseIndex | None = None,
         end_state: Callable[[Any], None] | None = None) -> WalkResult:
    """Walk `ds.events` once, scoring every variant at each evaluated search.

    Every variant's `run` must record the same state (the caller checks it: they may
    differ in search settings only). `counts_logged_access`: the log's access events are
    applied (a `logged` replay of a configuration that counts accesses). `check`: also run
    the sequential engine with this configuration on a state of its own and keep its
    ranking per search (`searches.engine`); one variant only. `end_state`: called with the
    engine state once every event is walked (its configuration the first variant's).
    """
    if not variants:
        raise ExperimentError("replay: no configuration to replay")
    if check is not None and len(variants) != 1:
        raise ExperimentError("replay: the engine's own rankings are kept for one "
                              "configuration at a time")
    with collector_paused():
        return _walk(ds, list(variants), counts_logged_access=counts_logged_access,
                     policy=policy, classifier=classifier, progress=progress, check=check,
                     seed_index=seed_index, end_state=end_state)


def _walk(ds: Dataset, variants: list[Variant], *, counts_logged_access: bool,
          policy: RolePolicy | None, classifier: Classifier | None,
          progress: Progress | None, check: EngineConfig | None,
          seed_index: DenseIndex | None,
          end_state: Callable[[Any], None] | None) -> WalkResult:
    corpus = corpus_of(ds)
    if corpus.vectors is None:
        raise ExperimentError("replay: the dataset has no memory embeddings, so the dense seeds "
                              "cannot be found; ingest it with an embedder (msprlab ingest "
                              "generic DIR --embedder tfidf-svd --store PATH)")
    vectors, seeds_from = query_vectors(ds, corpus)
    first = variants[0].run
    state = new_state(first, classifier=classifier, policy=policy)
    timeline = Timeline(ds, corpus, state)
    check_state = None
    if check is not None:
        check_state = new_state(check, classifier=classifier, policy=policy)
        check_timeline = Timeline(ds, corpus, check_state)
    labeller = _labeller(first, classifier)
    query_row = {q: i for i, q in enumerate(corpus.query_ids)}
    question_type = dict(zip(ds.queries["query_id"].to_list(),
                             ds.queries["question_type"].to_list(), strict=True))
    role_soft = (first.mspr.enabled and first.mspr.role.enabled
                 and not first.mspr.role.hard_filter and policy is not None)
    # Features are all the table needs; only when the replay counts accesses does a search
    # need its ranking (the results it counts).
    run_search = search if counts_access(first) else featurize_search
    audit = _Audit(state.payloads)
    # The searcher's context, by the event fields it is made from (a frozen value, shared)
    contexts: dict[tuple[Any, ...], RoleContext] = {}
    outs = [_Collector() for _ in variants]
    own = [0.0] * len(variants)
    # What the searches share, timed apart (`prepare_search`): the decay tick, and the
    # caches each algorithm's searches fill (the positional path's index, PPR's edge table)
    shared = {"tick": 0.0, "bfs": 0.0, "ppr": 0.0}
    algorithms = {name: any(v.run.retrieval.algorithm == name for v in variants)
                  for name in ("bfs", "ppr")}
    # Memory events enter through the timeline; clicks, and in closed_loop the logged
    # accesses, change nothing; in logged mode the accesses count only for a configuration
    # that counts accesses (without, the library has none).
    acting = ["feedback", "search"] + (["access"] if counts_logged_access else [])
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
    # Each variant's seed count at each evaluated search (`vector_hits` reads the
    # configuration's seed_top_k and hard role filter).
    configs = [v.run for v in variants]

    def counts(logged: int) -> list[int]:
        found = []
        for variant in variants:
            state.config = variant.run
            found.append(vector_hits(state, logged if variant.limit is None else variant.limit))
        state.config = first
        return found

    evaluated = [(ts, query_row[q], counts(logged))
                 for kind, ts, q, logged in zip(values["kind"], values["ts"],
                                                values["query_id"], values["limit"],
                                                strict=True)
                 if kind == "search" and q in query_row]
    plan = None  # the exact seeds of every evaluated search, computed up front
    if seed_index is None:
        # The largest count of the variants; each takes the head of it (the top k of a
        # row are the head of its top k' for k < k', ties alike: `SeedPlan`).
        plan = SeedPlan(corpus, timeline, [(ts, q) for ts, q, _ in evaluated], vectors,
                        [max(found) for _, _, found in evaluated])
    planned = 0
    # each query's vector with its norm, summed once rather than at each of its searches
    embeddings = list(map(Embedding, vectors, row_norms_sq(vectors)))
    rows = zip(*values.values(), strict=True)
    total = events.height
    runs = [(state, timeline)] + ([] if check_state is None else [(check_state, check_timeline)])
    moment_us, now = None, None
    reported = -2048
    perf = time.perf_counter
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
            continue
        if kind == "access":
            for st, _ in runs:
                st.graph.record_accesses(memory_ids, now)
            continue
        q = query_row.get(query_id) if query_id is not None else None
        parsed = json.loads(filters) if filters and filters != "{}" else None
        found_seeds: list[Seed] | None = None
        seed_counts = [0] * len(variants)
        if q is not None:
            seed_counts = evaluated[planned][2]
            if plan is not None:
                found_seeds = plan.seeds(planned)
            planned += 1
        # Unevaluated searches change the state only by what every search does (the decay
        # tick): the first variant's search does it, as a replay of any of them would.
        scored = variants if q is not None else variants[:1]
        started = perf()
        if prepare_search(state, _request(text, [], user, agent, run_id, parsed, 1, None),
                          now=now):
            ticked = perf()
            if algorithms["bfs"]:
                index_written(state)
            indexed = perf()
            if algorithms["ppr"]:
                prepare_edges(state.graph)
            if q is not None:
                shared["tick"] += ticked - started
                shared["bfs"] += indexed - ticked
                shared["ppr"] += perf() - indexed
        # Each variant leads an equal share of the searches: the first search after the
        # state changed finds the CPU's caches cold, the ones after it warm.
        lead = planned % len(scored)
        for i in [*range(lead, len(scored)), *range(lead)]:
            variant = scored[i]
            state.config = configs[i]
            limit = logged_limit if variant.limit is None else variant.limit
            seeds: list[Seed] = []
            if q is not None:
                seeds = (found_seeds[:seed_counts[i]] if found_seeds is not None else
                         index_seeds(seed_index, corpus, timeline, q, vectors[q],
                                     seed_counts[i]))  # type: ignore[arg-type]
            request = _request(text, seeds, user, agent, run_id, parsed, limit,
                               None if q is None else embeddings[q])
            started = perf()
            outcome, error = _search(run_search, state, request, now)
            if q is not None:
                own[i] += perf() - started
            reference = None
            if check_state is not None:
                checked, check_error = _search(search, check_state, request, now)
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
            outs[i].search(event=done, limit=request.limit,
                           intent=(label or Intent.UNKNOWN).value,
                           label=(label or labeller(text)).value,
                           question_type=question_type.get(query_id), error=error,
                           logged=shown, engine=reference, ids=ids, values=candidate_values,
                           multipliers=multipliers, visible=visible, grades=corpus.grades[q])
        state.config = first
    if progress is not None:
        progress(total, total)
    if end_state is not None:
        end_state(state)
    walked = []
    for variant, out, seconds in zip(variants, outs, own, strict=True):
        searches, candidates = out.frames(events, check_state is not None)
        mine = shared["tick"] + shared[variant.run.retrieval.algorithm]
        walked.append(Walked(searches, candidates, seconds, mine))
    return WalkResult(walked, shared, len(evaluated), seeds_from, total)


def _request(text: str, seeds: list[Seed], user: Any, agent: Any, run_id: Any,
             filters: Any, limit: int, embedding: Embedding | None) -> SearchRequest:
    return SearchRequest(query=text, seeds=seeds, user_id=user, agent_id=agent,
                         run_id=run_id, filters=filters, limit=limit,
                         query_embedding=embedding)


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


def query_vectors(ds: Dataset, corpus: Any) -> tuple[np.ndarray, str]:
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
