"""One `Memory.search` call: filters, seeds, the graph-first rerank stages in the library's
order, access counting and telemetry (MSPR.md sections 1, 10-17)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from .bfs import EdgeKey, expand_bfs
from .config import EngineConfig, RetrievalConfig
from .decay import DecayReport, maybe_tick_decay
from .feedback import personal_boosts
from .graph import Embedding, FloatArray
from .hits import HitTemplates, seed_payload
from .intent import EDGE_TYPE_PRIORS, Intent, IntentResult, apply_weight_override
from .positional import Scored, cache_for, expand_and_score
from .ppr import expand_ppr
from .rerank import Candidate, Provider, SubgraphEdge, featurize, rank, subgraph
from .roles import RoleContext, apply_role_policy, role_context_from_filters
from .scope import SCOPE_KEYS, Scope, scope_from_filters
from .seeds import Payload, trim_seeds
from .state import EngineState
from .stores import PayloadStore
from .success import hash_query

# Filter keys the library drops before querying the vector store.
_VECTOR_SKIP_KEYS = frozenset({"confidence", "timestamp", "modality", "image_hash", "audio_hash"})


class SearchError(Exception):
    """The library raises here too: the search has no result, only this error.

    `kind` names the exception type the library raises (ValueError, TypeError, ...).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}: {self.args[0]}"


class Seed(NamedTuple):
    """One vector-store hit: a memory id (may be empty) and the store's score. (A named
    tuple: a replay makes ten per search, and a tuple is made in one C call.)"""

    id: str | None
    score: float | None


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    seeds: Sequence[Seed]
    # A 1-D array counts by size; an Embedding (its norm summed already) is taken as it is.
    query_embedding: Sequence[float] | FloatArray | Embedding | None = None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    filters: Mapping[str, Any] | None = None
    limit: int = 100
    threshold: float | None = None
    include_archived: bool = False
    use_context_graph: bool | None = None


@dataclass(slots=True)
class SearchOutcome:
    """What a search returned and how: results in order (final scores after any soft role
    pass), every candidate the rerank scored, the subgraph, and anything the library would
    have swallowed (`notes`).

    `candidates` may be built on first read (the positional path builds only the results
    while searching): their payloads are then made from the stored payloads the search
    saw, as they are at that read. `columns` holds the same candidates' values, in the
    same order, when the positional path scored them: readers of values alone (a replay's
    table) need not make a Candidate each.
    """

    results: list[Candidate]
    _candidates: list[Candidate] | Callable[[], list[Candidate]] = field(default_factory=list)
    subgraph: list[SubgraphEdge] = field(default_factory=list)
    intent: IntentResult | None = None
    weights: RetrievalConfig | None = None
    graph_path: bool = False
    decay: DecayReport | None = None
    telemetry: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    columns: Scored | None = None

    @property
    def candidates(self) -> list[Candidate]:
        found = self._candidates
        if callable(found):
            found = self._candidates = found()
        return found

    @candidates.setter
    def candidates(self, value: list[Candidate]) -> None:
        self._candidates = value


def effective_filters(req: SearchRequest) -> dict[str, Any]:
    """Caller filters, deep-copied, with truthy session arguments written over them."""
    filters = _copy_filters(req.filters) if req.filters else {}
    provided = False
    for key in SCOPE_KEYS:
        value = getattr(req, key)
        if value:
            filters[key] = value
            provided = True
    if not provided:
        # The library checks the arguments, not the filters (MSPR.md section 1 reads as if
        # filters alone would do; 0.1.4 raises here).
        raise SearchError("ValueError",
                          "At least one of 'user_id', 'agent_id', or 'run_id' must be provided.")
    for key in SCOPE_KEYS:
        # 0.1.4 md5-hashes these filter values for telemetry, telemetry on or off, so any
        # non-string value (an operator filter such as {"$in": [...]}) raises here.
        if key in filters and not isinstance(filters[key], str):
            raise SearchError("AttributeError", f"'{type(filters[key]).__name__}' object has "
                              "no attribute 'encode'")
    return filters


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _copy_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """`copy.deepcopy(dict(filters))`; a plain copy when every value is an immutable atom."""
    if all(type(key) is str and type(value) in _ATOMS for key, value in filters.items()):
        return dict(filters)
    return copy.deepcopy(dict(filters))


def vector_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The filters as the vector store sees them: bool/int/str kept, floats as strings."""
    out: dict[str, Any] = {}
    for key, value in filters.items():
        if key in _VECTOR_SKIP_KEYS:
            continue
        if isinstance(value, bool | int | str):
            out[key] = value
        elif isinstance(value, float):
            out[key] = str(value)
    return out


def vector_results(state: EngineState, req: SearchRequest) -> list[Payload]:
    """The seeds as search results, threshold applied (the only place it applies)."""
    make = _hit_maker(state)
    return [make(memory_id, stored, score) for memory_id, stored, score in _vector_hits(state, req)]


def _vector_hits(state: EngineState, req: SearchRequest,
                 ) -> list[tuple[str, Mapping[str, Any], float | None]]:
    """The seeds the vector store returns, as (memory id, stored payload, score), with its
    checks and the threshold."""
    found: list[tuple[str, Mapping[str, Any], float | None]] = []
    payloads = state.payloads
    for seed in req.seeds:
        stored = payloads.get(seed.id or "")
        if stored is None:
            raise SearchError("KeyError", f"seed {seed.id!r} is not a memory in the vector store")
        if req.threshold is not None and seed.score is None:
            raise SearchError("TypeError", "'>=' not supported between instances of 'NoneType' "
                              "and 'float'")
        if req.threshold is None or (seed.score is not None and seed.score >= req.threshold):
            found.append((seed.id or "", stored, seed.score))
    return found


def _hit_maker(state: EngineState) -> Callable[[str, Mapping[str, Any], float | None], Payload]:
    """`seed_payload`, from templates (engine/hits.py) where the payloads are a
    `PayloadStore` and the fast paths are on (`positional_search`)."""
    payloads = state.payloads
    if not (state.positional_search and isinstance(payloads, PayloadStore)):
        return seed_payload
    templates = state.hits
    if templates is None or templates.store is not payloads:
        templates = state.hits = HitTemplates(payloads)
    templates.follow()
    return templates.hit


def resolve_payloads(state: EngineState, ids: Sequence[str]) -> dict[str, Payload]:
    """`Memory`'s resolver: id, text, hash, times, score 0 and owner ids; no metadata."""
    payloads = state.payloads
    return {cid: resolved_payload(cid, stored) for cid in ids if (stored := payloads.get(cid))}


def resolved_payload(cid: str, stored: Mapping[str, Any]) -> Payload:
    """The resolver's payload for one stored memory."""
    return {"id": cid, "memory": stored.get("data", ""), "hash": stored.get("hash"),
            "created_at": stored.get("created_at"), "updated_at": stored.get("updated_at"),
            "score": 0.0, "user_id": stored.get("user_id"), "agent_id": stored.get("agent_id"),
            "run_id": stored.get("run_id")}


def search(state: EngineState, req: SearchRequest, *, now: datetime) -> SearchOutcome:
    """`Memory.search` on the engine state at time `now`; raises SearchError where it does."""
    filters = effective_filters(req)
    hits = vector_results(state, req)
    if not _graph_path(state, req):
        return SearchOutcome(results=[_raw(hit) for hit in hits])
    ctx = role_context_from_filters(user_id=req.user_id, agent_id=req.agent_id,
                                    run_id=req.run_id, filters=filters)
    outcome = graph_first_rerank(state, req, hits, filters, ctx, now=now)
    if outcome is None:  # the library swallowed an exception and keeps the vector results
        return SearchOutcome(results=[_raw(hit) for hit in hits])
    return outcome


def featurize_search(state: EngineState, req: SearchRequest, *, now: datetime) -> SearchOutcome:
    """`search` up to its scored candidates, for callers that need features, not rankings.

    The same checks and errors, and every side effect `search` has up to that point (the
    decay tick on read, the intent cache); `candidates`, `intent`, `weights`, `decay` and
    `notes` are `search`'s own. Nothing is ranked: `results` and `subgraph` stay empty
    and there is no telemetry. Refused while access counting is on, as `search` then
    counts accesses on its ranked results.
    """
    if counts_access(state.config):
        raise ValueError("featurize_search: mspr.frequency counts accesses on the ranked "
                         "results; run `search` instead")
    filters = effective_filters(req)
    found = _vector_hits(state, req)
    if not _graph_path(state, req):
        return SearchOutcome(results=[])
    ctx = role_context_from_filters(user_id=req.user_id, agent_id=req.agent_id,
                                    run_id=req.run_id, filters=filters)
    if _hard_role_filter(state):
        make = _hit_maker(state)  # the hard role filter reads every hit whole
        hits = [make(memory_id, stored, score) for memory_id, stored, score in found]
        return _featurized(state, req, hits, filters, ctx, now=now, ranks=False).outcome
    # Featurizing reads a hit's id and score; the whole hit is made from the payload the
    # search saw only if the candidates are read.
    stubs = [{"id": memory_id, "score": score} for memory_id, _, score in found]
    stored = {memory_id: payload for memory_id, payload, _ in found}
    return _featurized(state, req, stubs, filters, ctx, now=now, ranks=False,
                       stubs_of=stored).outcome


def prepare_search(state: EngineState, req: SearchRequest, *, now: datetime) -> bool:
    """The decay tick on read and the intent label that a search of `req` at `now` makes
    first, whatever its retrieval settings, done ahead of it: the search that follows at
    the same `now` finds both done (the tick runs at most once an hour; the router caches
    the label, and a cache holding it already is left as it is) and so leaves the state
    as it found it.
    A replay scoring several retrieval settings at each search runs this once first, and
    the caches the searches fill (`positional.index_written`, `ppr.prepare_edges`), so
    each setting's own search time holds none of it. Returns whether a search gets that
    far (False where `search` raises before the tick or takes the vector path, and this
    changes nothing)."""
    try:
        effective_filters(req)
        _vector_hits(state, req)
    except SearchError:
        return False
    if not _graph_path(state, req):
        return False
    maybe_tick_decay(state.graph, state.config.decay, now)
    mspr = state.config.mspr
    if (mspr.enabled and mspr.intent.enabled and state.intent is not None
            and mspr.intent.cache_size > 0):
        state.intent.classify(req.query)  # cached: the search's own call finds it
    return True


def _hard_role_filter(state: EngineState) -> bool:
    """Does a search drop the hits its role policy denies (`mspr.role.hard_filter`)? Then
    the policy reads every hit whole, so `featurize_search` cannot hand over stubs."""
    role = state.config.mspr.role
    return (state.config.mspr.enabled and role.enabled and role.hard_filter
            and state.policy is not None)


def vector_hits(state: EngineState, limit: int) -> int:
    """How many of a search's vector-store hits, best first, can reach its candidates
    (MSPR.md sections 1 and 6). The store is asked for `limit` hits; the hard role filter,
    when it runs, drops the denied ones; the retriever keeps the first `seed_top_k` (at
    least 1) of the rest. So without the hard filter the first min(limit, seed_top_k) hits
    decide, and with it all `limit` do. A `limit` below 1 is answered by each store in its
    own way (Qdrant refuses it): it is taken as asking for `seed_top_k`."""
    keep = max(1, state.config.retrieval.seed_top_k)
    if limit < 1:
        return keep
    return limit if _hard_role_filter(state) else min(limit, keep)


def counts_access(config: EngineConfig) -> bool:
    """Whether a search counts accesses on the results it returns (MSPR.md section 15)."""
    return config.mspr.enabled and config.mspr.frequency.enabled


def _graph_path(state: EngineState, req: SearchRequest) -> bool:
    return req.use_context_graph is not False and state.config.context_graph_enabled and (
        req.use_context_graph is True or state.config.retrieval.enabled)


def _raw(hit: Payload) -> Candidate:
    score = float(hit.get("score") or 0.0)
    return Candidate(id=hit["id"], payload=hit, was_seed=True, dense=score, lexical=0.0,
                     graph=0.0, frequency=0.0, personal=0.0, success=0.0, relevance=1.0,
                     score=score)


def graph_first_rerank(state: EngineState, req: SearchRequest, hits: list[Payload],
                       filters: dict[str, Any], ctx: RoleContext, *,
                       now: datetime) -> SearchOutcome:
    """The stages of `_graph_first_rerank` in order (MSPR.md section 1, step 5)."""
    mspr = state.config.mspr
    scored = _featurized(state, req, hits, filters, ctx, now=now, ranks=True)
    outcome = scored.outcome
    if not scored.seed_count:
        outcome.telemetry = _telemetry(state, outcome, 0) if mspr.enabled else None
        return outcome
    if scored.positional is not None:
        positional = scored.positional
        outcome.subgraph = positional.scored.subgraph
        results = positional.ranked(req.limit)
    else:
        outcome.subgraph = subgraph(scored.edges_used, outcome.candidates, scored.scope)
        results = rank(outcome.candidates, req.limit)
    if scored.role_on and not mspr.role.hard_filter and state.policy is not None:
        results = _soft_filter(state, results, ctx)
    outcome.results = results
    if counts_access(state.config):
        for c in results[:req.limit]:
            state.graph.record_access(c.id, now)
    if mspr.enabled:
        outcome.telemetry = _telemetry(state, outcome, scored.seed_count)
    return outcome


@dataclass(slots=True)
class _Featurized:
    """The rerank up to its scored candidates, and what the ranking stages need besides."""

    outcome: SearchOutcome
    seed_count: int = 0  # the vector hits left after the hard role filter
    edges_used: Mapping[EdgeKey, float] = field(default_factory=dict)
    scope: Scope = field(default_factory=dict)
    role_on: bool = False
    positional: _Positional | None = None  # the candidates as columns, when that path ran


@dataclass(frozen=True, slots=True)
class _Positional:
    """The positional path's candidates: columns, turned into Candidates when read."""

    scored: Scored
    seeds: Mapping[str, Payload]
    stored: list[Payload | None]  # the stored payload of each candidate, as the search saw it
    # When `seeds` are stubs ({"id", "score"}): each seed's stored payload, as the search saw it
    seeds_stored: Mapping[str, Mapping[str, Any]] | None = None

    def candidate(self, i: int) -> Candidate:
        cid = self.scored.ids[i]
        if self.scored.was_seed[i]:
            payload = self.seeds[cid]
            if self.seeds_stored is not None:
                payload = seed_payload(cid, self.seeds_stored[cid], payload["score"])
        else:
            stored = self.stored[i]
            payload = (resolved_payload(cid, stored) if stored
                       else {"id": cid, "memory": "", "score": 0.0})
        return self.scored.candidate(i, payload)

    def all(self) -> list[Candidate]:
        return [self.candidate(i) for i in range(len(self.scored.ids))]

    def ranked(self, limit: int) -> list[Candidate]:
        """`rank` of the candidates, making only the ones it returns."""
        score = self.scored.score
        order = sorted(range(len(score)), key=score.__getitem__, reverse=True)
        return [self.candidate(i) for i in order[:max(1, limit)]]


def _featurized(state: EngineState, req: SearchRequest, hits: list[Payload],
                filters: dict[str, Any], ctx: RoleContext, *, now: datetime,
                ranks: bool,
                stubs_of: Mapping[str, Mapping[str, Any]] | None = None) -> _Featurized:
    """`graph_first_rerank`'s stages up to the scored candidates (`outcome.candidates`);
    `ranks`: the search goes on to rank them (and so needs the subgraph). With `stubs_of`
    (each hit's stored payload), the hits are stubs: {"id", "score"}."""
    cfg = state.config
    mspr = cfg.mspr
    retrieval = cfg.retrieval
    outcome = SearchOutcome(results=[], graph_path=True)
    outcome.decay = maybe_tick_decay(state.graph, cfg.decay, now)
    role_on = mspr.enabled and mspr.role.enabled and state.policy is not None
    if _hard_role_filter(state):
        assert state.policy is not None
        hits = apply_role_policy(hits, state.policy, ctx, hard_filter=True)
    if mspr.enabled and mspr.intent.enabled and state.intent is not None:
        outcome.intent = state.intent.classify(req.query)
        retrieval = _weight_override(retrieval, outcome.intent.label)
    outcome.weights = retrieval
    if not hits:
        return _Featurized(outcome)
    seeds = trim_seeds(hits, retrieval.seed_top_k)
    scope = scope_from_filters(filters)
    positional = _positional(state, retrieval, seeds, scope, req, filters, ctx, role_on,
                             outcome, ranks, stubs_of)
    if positional is None and stubs_of is not None:  # the object path keeps whole hits
        make = _hit_maker(state)
        seeds = {cid: make(cid, stubs_of[cid], stub["score"]) for cid, stub in seeds.items()}
    if positional is not None:
        outcome._candidates = positional.all  # made when read
        outcome.columns = positional.scored
        return _Featurized(outcome, len(hits), positional.scored.edges_used, scope, role_on,
                           positional)
    reach, edges_used = _expand(state, retrieval, seeds, scope, req, outcome)
    query_embedding = _query_embedding(req.query_embedding)
    tenant = filters.get("tenant_id")
    sub_tenant = filters.get("sub_tenant_id")
    candidates = featurize(
        state.graph, retrieval, query=req.query, seeds=seeds, reach=reach,
        query_embedding=query_embedding,
        resolver=lambda ids: resolve_payloads(state, ids),
        personal=_personal_provider(state, retrieval, ctx),
        success=_success_provider(state, retrieval, req.query, ctx),
        tenant_id=tenant if isinstance(tenant, str) else None,
        sub_tenant_id=sub_tenant if isinstance(sub_tenant, str) else None, scope=scope)
    if cfg.corrections.strict_role_isolation and role_on and state.policy is not None:
        candidates = _strict_isolation(state, candidates, ctx)
    outcome.candidates = candidates
    return _Featurized(outcome, len(hits), edges_used, scope, role_on)


def _positional(state: EngineState, retrieval: RetrievalConfig, seeds: dict[str, Payload],
                scope: Scope, req: SearchRequest, filters: Mapping[str, Any],
                ctx: RoleContext, role_on: bool, outcome: SearchOutcome, ranks: bool,
                stubs_of: Mapping[str, Mapping[str, Any]] | None) -> _Positional | None:
    """The BFS expansion and the features over node positions (engine/positional.py),
    unless the search needs what only the object path does."""
    corrections = state.config.corrections
    if (not state.positional_search or retrieval.algorithm != "bfs"
            or (corrections.apply_edge_type_priors and outcome.intent is not None
                and EDGE_TYPE_PRIORS.get(outcome.intent.label))
            or (corrections.strict_role_isolation and role_on)):
        return None
    tenant = filters.get("tenant_id")
    sub_tenant = filters.get("sub_tenant_id")
    graph = state.graph
    scored = expand_and_score(
        graph, cache_for(state, graph), state.payloads, retrieval, query=req.query,
        seeds=seeds, scope=scope,
        query_embedding=_query_embedding(req.query_embedding),
        personal=_personal_provider(state, retrieval, ctx),
        success=_success_provider(state, retrieval, req.query, ctx),
        tenant_id=tenant if isinstance(tenant, str) else None,
        sub_tenant_id=sub_tenant if isinstance(sub_tenant, str) else None,
        include_archived=req.include_archived,
        peak=graph.peak_access_count() if retrieval.epsilon_frequency > 0 else 0,
        want_subgraph=ranks)
    if scored is None:
        return None
    return _Positional(scored, seeds, list(map(state.payloads.get, scored.ids)), stubs_of)


def _query_embedding(values: Sequence[float] | FloatArray | Embedding | None,
                     ) -> Embedding | None:
    """The query vector, None when missing or empty. An array is taken as it is (no
    conversion to floats and back) and counts as empty by its size, not its truth value;
    so does an Embedding (as `Embedding.of` makes it: its norm is not summed again)."""
    if isinstance(values, Embedding):
        return values if values.vector.size else None
    if isinstance(values, np.ndarray):  # `Embedding.of` takes arrays as they are
        return Embedding.of(values) if values.size else None
    return Embedding.of(values) if values else None


# apply_weight_override per (config object, label): it builds and validates a new config.
_OVERRIDES: dict[tuple[int, Intent], tuple[RetrievalConfig, RetrievalConfig]] = {}


def _weight_override(cfg: RetrievalConfig, label: Intent) -> RetrievalConfig:
    """`apply_weight_override(cfg, label)`, remembered for the same config object."""
    key = (id(cfg), label)
    hit = _OVERRIDES.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    result = apply_weight_override(cfg, label)
    if len(_OVERRIDES) >= 64:
        _OVERRIDES.clear()
    _OVERRIDES[key] = (cfg, result)  # holding cfg keeps its id from being reused
    return result


def _expand(state: EngineState, retrieval: RetrievalConfig, seeds: dict[str, Payload],
            scope: Scope, req: SearchRequest,
            outcome: SearchOutcome) -> tuple[dict[str, float], Mapping[EdgeKey, float]]:
    corrections = state.config.corrections
    if retrieval.algorithm == "ppr":
        reach, edges_used, notes = expand_ppr(
            state.graph, seeds, scope, max_candidates=retrieval.max_candidates,
            edge_floor=retrieval.edge_weight_floor, include_archived=req.include_archived,
            damping=retrieval.ppr_damping, max_iter=retrieval.ppr_max_iter,
            tolerance=retrieval.ppr_tolerance, undirected=corrections.ppr_undirected)
        outcome.notes.extend(notes)
        return reach, edges_used
    priors = None
    if corrections.apply_edge_type_priors and outcome.intent is not None:
        priors = EDGE_TYPE_PRIORS.get(outcome.intent.label)
    return expand_bfs(state.graph, seeds, scope, depth=retrieval.expansion_depth,
                      max_candidates=retrieval.max_candidates,
                      edge_floor=retrieval.edge_weight_floor,
                      include_archived=req.include_archived, priors=priors)


def _personal_provider(state: EngineState, retrieval: RetrievalConfig,
                       ctx: RoleContext) -> Provider | None:
    mspr = state.config.mspr
    store = state.feedback
    if not (mspr.enabled and mspr.feedback.enabled and store is not None
            and retrieval.delta_personal > 0):
        return None
    if not state.config.corrections.personal_boost_user_scoped:
        return personal_boosts(store, None)
    user = ctx.user_id
    if not isinstance(user, str) or not user:
        return lambda memory_id: 0.0  # no searching user: nothing personal to apply
    return personal_boosts(store, user)


def _success_provider(state: EngineState, retrieval: RetrievalConfig, query: str,
                      ctx: RoleContext) -> Provider | None:
    mspr = state.config.mspr
    store = state.success
    if not (mspr.enabled and mspr.success.enabled and store is not None
            and retrieval.zeta_success > 0):
        return None
    query_hash = hash_query(query)
    user = None if ctx.user_id is None else str(ctx.user_id)
    min_samples = max(1, mspr.success.min_sample_size)
    return store.hit_rates(query_hash, user_id=user, min_samples=min_samples)


def _soft_filter(state: EngineState, results: list[Candidate],
                 ctx: RoleContext) -> list[Candidate]:
    """Denied results keep their slot at score 0; then a stable re-sort by score."""
    assert state.policy is not None
    entries = apply_role_policy([c.entry() for c in results], state.policy, ctx,
                                hard_filter=False)
    rescored = [c.with_score(float(e.get("score") or 0.0))
                for c, e in zip(results, entries, strict=True)]
    return sorted(rescored, key=lambda c: c.score, reverse=True)


def _strict_isolation(state: EngineState, candidates: list[Candidate],
                      ctx: RoleContext) -> list[Candidate]:
    """Correction: judge every candidate, neighbours included, on its full stored payload."""
    assert state.policy is not None
    full = [seed_payload(c.id, state.payloads.get(c.id, {}), c.payload.get("score"))
            for c in candidates]
    allowed = {e["id"] for e in apply_role_policy(full, state.policy, ctx, hard_filter=True)}
    return [c for c in candidates if c.id in allowed]


def _telemetry(state: EngineState, outcome: SearchOutcome, seed_count: int) -> dict[str, Any]:
    mspr = state.config.mspr
    results = outcome.results
    feedback_hits = success_hits = frequency_hits = 0
    for c in results:  # one pass over the results for the three counts
        if abs(c.personal) > 0:
            feedback_hits += 1
        if c.success > 0:
            success_hits += 1
        if c.frequency > 0:
            frequency_hits += 1
    return {
        "intent_enabled": mspr.intent.enabled, "feedback_enabled": mspr.feedback.enabled,
        "frequency_enabled": mspr.frequency.enabled, "role_enabled": mspr.role.enabled,
        "success_enabled": mspr.success.enabled, "seed_count": seed_count,
        "result_count": len(results), "feedback_hits": feedback_hits,
        "success_hits": success_hits, "frequency_hits": frequency_hits, "sync_type": "sync",
    }
