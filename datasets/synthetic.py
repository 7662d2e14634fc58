"""A fully synthetic corpus with planted ground truth, for checking tuning against it.

The world: `n_tenants` tenants; `n_users` users, each in one tenant with one role and a
Dirichlet preference over `n_topics` topics; memories written in sessions (one `run_id` per
session), each about one topic drawn from its author's preference, with a topic embedding
(the topic centroid plus Gaussian spread, unit norm) and a text of three words from the
topic's pseudo-word vocabulary between filler; queries per user, each aimed at an anchor
memory of that user and phrased with a template of one intent rule of MSPR.md section 11.1
(the label is kept as `question_type`; near misses such as "summarise" or "documents" are
UNKNOWN, as the regex router sees them).

Edges follow the engine's edge synthesis (MSPR.md section 4) as memories arrive in time
order, vectorised: TEMPORAL_NEXT (0.6) and REPLY_TO (1.0, within the reply window) from the
previous memory of the same session; TOPIC_SIMILAR from each memory to its `topic_top_k`
most similar earlier memories of the same user with cosine >= `topic_min_similarity`,
weighted by the cosine.

Planted truth. For every (query, memory of the query's user) pair six signals in [0, 1],
named as the ranker's signals they stand for:

- dense: max(0, cosine(query vector, memory embedding)); the query vector is the topic
  centroid plus spread. The engine's dense, exactly.
- lexical: |Q ∩ D| / |Q| over lower-cased `\\w+` tokens, as the engine computes it.
- graph: the engine's BFS reach from the query's dense seeds: 1 for the `seed_top_k`
  memories of highest cosine, else the best product of edge weights over undirected walks
  of at most `expansion_depth` edges of weight >= `edge_weight_floor` (`_reach`).
- personal: the user's preference for the memory's topic over their top preference.
- frequency: the memory's latent popularity, Beta(0.5, 2) scaled to a maximum of 1.
- success: "this memory answered this query before": for memories of the query's topic,
  with probability 0.3, a value uniform in [0.5, 1]; otherwise 0.

The first three are what the replayed ranker computes (dense and lexical exactly, graph up
to BFS truncation and edge decay), so their weights can be recovered by tuning. The last
three are latent: the ranker's personal, success and frequency come from the log's
verdicts and accesses only (a store cannot carry a planted pre-log history: the simulator
takes a corpus without feedback or access events), so the default planted weights of
those three are 0. They stay in `pairs` for worlds that plant them on purpose.

utility = sum of planted weight x signal + Normal(0, relevance_noise). Per query the
memories are ranked by utility: the first `grade_counts[2]` get grade 3, the next
`grade_counts[1]` grade 2, the next `grade_counts[0]` grade 1; the qrels hold these pairs.
Everything is drawn from one generator seeded by `seed`, in bulk.

>>> ds, truth = generate_synthetic(SyntheticSpec(n_users=2, memories_per_user=12,
...                                              queries_per_user=2), seed=1)
>>> ds.counts()["memories"], ds.counts()["queries"], truth.weights.dense
(24, 4, 0.5)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

from msprlab.engine.config import EdgesConfig, RetrievalConfig

from .schema import (
    EDGES,
    EMBEDDINGS,
    MEMORIES,
    QUERIES,
    TS,
    Dataset,
)
from .simulate import memory_events, order_events, token_incidence

__all__ = ["SIGNALS", "TEMPLATES", "PlantedWeights", "SyntheticSpec", "SyntheticTruth",
           "generate_synthetic"]

SIGNALS = ("dense", "lexical", "graph", "personal", "frequency", "success")
EMBEDDER = "synthetic-topics"
_SUCCESS_RATE = 0.3
_SESSION_STEP_SECONDS = 300.0  # mean gap between memories of one session

# Two-slot templates (prefix, middle, suffix) per intent rule (MSPR.md 11.1). Topic words
# contain no trigger word, so the label comes from the template alone.
TEMPLATES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "FACTUAL": (
        ("What is the ", " ", " setting?"), ("When was the ", " ", " changed?"),
        ("Where is the ", " for ", "?"), ("How many ", " ", " entries are there?"),
        ("Who is handling ", " ", "?"), ("What was the ", " ", " decision?")),
    "CONVERSATIONAL": (
        ("What was discussed about ", " ", "?"), ("Remember the ", " ", " thing?"),
        ("You told me about ", " and ", ""), ("We talked about ", " ", " last time"),
        ("Recall our conversation on ", " ", "")),
    "DOCUMENTARY": (
        ("Find the document on ", " ", ""), ("Where is the pdf about ", " ", "?"),
        ("Open the ", " ", " spreadsheet"), ("Send the link for ", " ", "")),
    "EXPLORATORY": (
        ("Tell me about ", " and ", ""), ("Summarize ", " ", " for me"),
        ("Give me an overview of ", " ", ""), ("What are your thoughts on ", " ", "?")),
    "UNKNOWN": (
        ("", " ", ""), ("Any news on ", " ", "?"), ("Summarise the ", " ", " notes"),
        ("Show the uploaded ", " ", " documents"), ("Which ", " goes with ", "?")),
}
# The trigger phrases of MSPR.md 11.1; none of their words is ever a topic word.
_TRIGGERS = (
    "doc", "document", "resume", "pdf", "file", "attachment", "upload", "link", "contract",
    "spreadsheet", "remember", "recall", "chatted", "said", "told", "last time", "yesterday",
    "conversation", "discussed", "talked", "what is", "what's", "whats", "when", "where",
    "how many", "what was", "who is", "who's", "whos", "pin", "password", "code", "api key",
    "think about", "thoughts on", "summarize", "overview", "tell me about", "what do i know")
_TRIGGER_WORDS = frozenset(w for phrase in _TRIGGERS for w in phrase.replace("'", " ").split())
_OPENERS = ("Note:", "Reminder:", "Update on", "Decided that", "Heads up,", "Noted")
_CLOSERS = ("for the team.", "before Friday.", "per the plan.", "as agreed.", "again.",
            "this week.")
_CONSONANTS = tuple("bdfgklmnprstvz")
_VOWELS = tuple("aeiou")


def _bad(owner: str, rule: str, value: object) -> ValueError:
    return ValueError(f"{owner}: `{rule}` must hold, but got {value!r}")


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class PlantedWeights:
    """The true weight of each signal in the utility (any finite values >= 0, not all 0).

    The default plants the three signals the replayed ranker observes (module docstring),
    each with a share of the utility it can be measured by.
    """

    dense: float = 0.5
    lexical: float = 0.3
    graph: float = 0.2
    personal: float = 0.0
    frequency: float = 0.0
    success: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (_is_number(value) and value >= 0):
                raise _bad("PlantedWeights", f"0 <= {f.name} < inf", value)
        if not any(getattr(self, s) > 0 for s in SIGNALS):
            raise _bad("PlantedWeights", "at least one weight > 0", asdict(self))

    def as_array(self) -> npt.NDArray[np.float64]:
        """Shape (6,), in `SIGNALS` order."""
        return np.array([getattr(self, s) for s in SIGNALS], dtype=np.float64)


_DEFAULT_PHRASING = (("FACTUAL", 0.3), ("CONVERSATIONAL", 0.2), ("DOCUMENTARY", 0.15),
                     ("EXPLORATORY", 0.15), ("UNKNOWN", 0.2))


@dataclass(frozen=True, kw_only=True)
class SyntheticSpec:
    """The size and shape of the synthetic world; every field is validated.

    Users are spread over `n_tenants` tenants and `roles`; each writes `memories_per_user`
    memories in sessions of `session_length` over `span_days` from `start`, and asks
    `queries_per_user` queries. Topics: `n_topics` centroids in `dim` dimensions, memory
    and query vectors spread around them by `topic_spread`, `words_per_topic` pseudo-words
    each; a user's topic preference is Dirichlet(`user_topic_concentration`). `phrasing`
    gives the share of each intent template; `weights`, `relevance_noise` and
    `grade_counts` (memories per query at grades 1, 2, 3) define the planted truth;
    `edges` the edge-synthesis thresholds.
    """

    n_tenants: int = 2
    n_users: int = 12
    roles: tuple[str, ...] = ("engineer", "manager", "support")
    n_topics: int = 8
    words_per_topic: int = 12
    dim: int = 32
    memories_per_user: int = 60
    session_length: int = 6
    queries_per_user: int = 8
    start: datetime = datetime(2026, 1, 5)
    span_days: float = 30.0
    topic_spread: float = 0.5
    user_topic_concentration: float = 0.3
    phrasing: tuple[tuple[str, float], ...] = _DEFAULT_PHRASING
    weights: PlantedWeights = field(default_factory=PlantedWeights)
    relevance_noise: float = 0.01
    grade_counts: tuple[int, int, int] = (4, 2, 1)
    edges: EdgesConfig = field(default_factory=EdgesConfig)

    def __post_init__(self) -> None:
        owner = "SyntheticSpec"
        for name in ("n_tenants", "n_users", "n_topics", "dim", "memories_per_user",
                     "session_length", "queries_per_user"):
            value = getattr(self, name)
            if not (_is_int(value) and value >= 1):
                raise _bad(owner, f"{name} >= 1 (an integer)", value)
        if not (_is_int(self.words_per_topic) and self.words_per_topic >= 3):
            raise _bad(owner, "words_per_topic >= 3 (an integer)", self.words_per_topic)
        if not (self.roles and all(isinstance(r, str) and r for r in self.roles)):
            raise _bad(owner, "roles is a non-empty tuple of names", self.roles)
        for name in ("span_days", "topic_spread", "user_topic_concentration"):
            value = getattr(self, name)
            if not (_is_number(value) and value > 0):
                raise _bad(owner, f"0 < {name} < inf", value)
        if not (_is_number(self.relevance_noise) and self.relevance_noise >= 0):
            raise _bad(owner, "0 <= relevance_noise < inf", self.relevance_noise)
        labels = [label for label, _ in self.phrasing]
        shares = [p for _, p in self.phrasing]
        if not labels or set(labels) - TEMPLATES.keys() or len(set(labels)) != len(labels):
            raise _bad(owner, f"phrasing labels are distinct, from {sorted(TEMPLATES)}",
                       labels)
        if not (all(_is_number(p) and p >= 0 for p in shares)
                and abs(sum(shares) - 1.0) <= 1e-9):
            raise _bad(owner, "phrasing shares are >= 0 and sum to 1", shares)
        if not (len(self.grade_counts) == 3 and all(_is_int(c) and c >= 0
                                                    for c in self.grade_counts)
                and sum(self.grade_counts) >= 1):
            raise _bad(owner, "grade_counts is 3 integers >= 0 with a positive sum",
                       self.grade_counts)


@dataclass(frozen=True)
class SyntheticTruth:
    """What the generator planted.

    weights : the planted weights.
    pairs : one row per (query, memory of its user): query_id, memory_id, the six signals
        (`SIGNALS`), utility and relevance (0 when not in the qrels).
    query_vectors : ndarray, shape (n_queries, dim), aligned with the queries table rows.
    queries : query_id, topic, anchor memory_id, intent label.
    memories : memory_id, topic, popularity.
    """

    weights: PlantedWeights
    pairs: pl.DataFrame
    query_vectors: npt.NDArray[np.float64]
    queries: pl.DataFrame
    memories: pl.DataFrame


def _unit_rows(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def _vocabulary(rng: np.random.Generator, n: int) -> list[str]:
    """`n` distinct pseudo-words of three consonant-vowel syllables, none a trigger word."""
    syllables = np.array([c + v for c in _CONSONANTS for v in _VOWELS])
    words: list[str] = []
    while len(words) < n:
        draw = rng.integers(0, syllables.size, size=(2 * n, 3))
        fresh = np.char.add(np.char.add(syllables[draw[:, 0]], syllables[draw[:, 1]]),
                            syllables[draw[:, 2]]).tolist()
        words = list(dict.fromkeys(w for w in words + fresh if w not in _TRIGGER_WORDS))
    return words[:n]


def generate_synthetic(spec: SyntheticSpec, *, seed: int) -> tuple[Dataset, SyntheticTruth]:
    """The synthetic Dataset (memories, embeddings, edges, memory_added events, queries,
    qrels) and the truth it was planted with. Same spec and seed, same frames."""
    rng = np.random.default_rng(seed)
    world = _world(spec, rng)
    memories, topics, vectors = _memories(spec, rng, world)
    # What the embeddings table stores; edges and dense read these, as the engine would.
    vectors = vectors.astype(np.float32).astype(np.float64)
    edges = _edges(spec, memories, vectors)
    queries, query_vectors, anchors = _queries(spec, rng, world, memories, topics)
    pairs = _pairs(spec, rng, world, memories, topics, vectors, queries, query_vectors,
                   edges)
    qrels = (pairs.filter(pl.col("relevance") > 0)
             .select("query_id", "memory_id", "relevance")
             .sort("query_id", "relevance", "memory_id", descending=[False, True, False]))
    embeddings = pl.DataFrame({
        "memory_id": memories["memory_id"], "embedder": [EMBEDDER] * memories.height,
        "vector": vectors.astype(np.float32)}, schema=EMBEDDINGS)
    spec_text = json.dumps(asdict(spec), sort_keys=True, default=str)
    digest = hashlib.sha256(f"synthetic/1|{seed}|{spec_text}".encode()).hexdigest()
    dataset = Dataset(source="synthetic", version="1", digest=digest, memories=memories,
                      embeddings=embeddings, edges=edges,
                      events=order_events(memory_events(memories)),
                      queries=queries, qrels=qrels)
    truth = SyntheticTruth(
        weights=spec.weights, pairs=pairs, query_vectors=query_vectors,
        queries=pl.DataFrame({"query_id": queries["query_id"],
                              "topic": topics["query"],
                              "anchor_memory_id": memories["memory_id"].gather(anchors),
                              "intent": queries["question_type"]}),
        memories=pl.DataFrame({"memory_id": memories["memory_id"],
                               "topic": topics["memory"], "popularity": world["popularity"]}))
    return dataset, truth


def _world(spec: SyntheticSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Users (tenant, role, topic preference), topic centroids and vocabulary."""
    popularity = rng.beta(0.5, 2.0, size=spec.n_users * spec.memories_per_user)
    return {
        "tenant": rng.integers(0, spec.n_tenants, size=spec.n_users),
        "role": rng.integers(0, len(spec.roles), size=spec.n_users),
        "preference": rng.dirichlet(np.full(spec.n_topics, spec.user_topic_concentration),
                                    size=spec.n_users),
        "centroid": _unit_rows(rng.normal(size=(spec.n_topics, spec.dim))),
        "vocabulary": np.array(_vocabulary(rng, spec.n_topics * spec.words_per_topic)),
        "popularity": popularity / popularity.max(),
    }


def _memories(spec: SyntheticSpec, rng: np.random.Generator,
              world: dict[str, np.ndarray]) -> tuple[pl.DataFrame, dict[str, np.ndarray],
                                                     npt.NDArray[np.float64]]:
    """Memories in created order (ids m00000...), their topics and unit embeddings."""
    n_users, per_user = spec.n_users, spec.memories_per_user
    user = np.repeat(np.arange(n_users), per_user)
    cumulative = np.cumsum(world["preference"][user], axis=1)
    topic = np.minimum((cumulative < rng.random(user.size)[:, None]).sum(axis=1),
                       spec.n_topics - 1)
    noise = rng.normal(size=(user.size, spec.dim)) / math.sqrt(spec.dim)
    vectors = _unit_rows(world["centroid"][topic] + spec.topic_spread * noise)
    # Three distinct words of the topic per memory, plus filler.
    slots = np.argsort(rng.random((user.size, spec.words_per_topic)), axis=1)[:, :3]
    words = world["vocabulary"][topic[:, None] * spec.words_per_topic + slots]
    opener = np.array(_OPENERS)[rng.integers(0, len(_OPENERS), size=user.size)]
    closer = np.array(_CLOSERS)[rng.integers(0, len(_CLOSERS), size=user.size)]
    # Sessions: sorted starts over the span, memories ~5 minutes apart within one.
    session = np.tile(np.arange(per_user) // spec.session_length, n_users)
    n_sessions = -(-per_user // spec.session_length)
    starts = np.sort(rng.random((n_users, n_sessions)), axis=1) * spec.span_days * 86_400e6
    steps = rng.exponential(_SESSION_STEP_SECONDS * 1e6, size=user.size)
    first = np.r_[True, (user[1:] != user[:-1]) | (session[1:] != session[:-1])]
    run_start = np.flatnonzero(first)
    offsets = np.cumsum(steps) - np.repeat(np.cumsum(steps)[run_start] - steps[run_start],
                                           np.diff(np.r_[run_start, user.size]))
    created_us = (starts[user, session] + offsets).astype(np.int64)
    order = np.lexsort((np.arange(user.size), created_us))
    user, topic, vectors, words = user[order], topic[order], vectors[order], words[order]
    opener, closer = opener[order], closer[order]
    created = np.datetime64(spec.start, "us") + created_us[order].astype("timedelta64[us]")
    users = np.array([f"u{u:03d}" for u in range(n_users)])[user]
    frame = pl.DataFrame({
        "memory_id": [f"m{i:06d}" for i in range(user.size)],
        "w1": words[:, 0], "w2": words[:, 1], "w3": words[:, 2],
        "opener": opener, "closer": closer,
        "user_id": users,
        "run_id": np.char.add(np.char.add(users, "-r"),
                              np.char.zfill(session[order].astype(str), 3)),
        "tenant_id": np.array([f"t{t}" for t in range(spec.n_tenants)])[
            world["tenant"][user]],
        "role": np.array(spec.roles)[world["role"][user]],
        "topic": topic, "created_at": created,
    })
    memories = frame.select(
        "memory_id",
        text=pl.concat_str(["opener", "w1", "w2", "w3", "closer"], separator=" "),
        user_id="user_id", agent_id=pl.lit(None, pl.String), run_id="run_id",
        tenant_id="tenant_id", sub_tenant_id=pl.lit(None, pl.String), role="role",
        allowed_roles=pl.concat_list("role"),
        metadata=pl.concat_str([pl.lit('{"topic": "t'), pl.col("topic").cast(pl.String),
                                pl.lit('"}')]),
        created_at=pl.col("created_at").cast(TS), updated_at=pl.col("created_at").cast(TS),
        deleted_at=pl.lit(None, TS),
    ).cast(MEMORIES)
    return memories, {"memory": topic, "user": user, "words": words}, vectors


def _edges(spec: SyntheticSpec, memories: pl.DataFrame,
           vectors: npt.NDArray[np.float64]) -> pl.DataFrame:
    """Edge synthesis as memories arrive in created order (module docstring)."""
    cfg = spec.edges
    frames = []
    ordered = memories.select("memory_id", "run_id", "user_id", "created_at").with_row_index()
    previous = ordered.sort("run_id", "index").with_columns(
        prev=pl.col("memory_id").shift().over("run_id"),
        gap=(pl.col("created_at") - pl.col("created_at").shift().over("run_id")),
    ).filter(pl.col("prev").is_not_null())
    if cfg.enable_reply_to:
        frames.append(previous.filter(
            pl.col("gap") <= pl.duration(seconds=cfg.reply_to_window_seconds)).select(
            src="prev", dst="memory_id", type=pl.lit("REPLY_TO"), weight=pl.lit(1.0),
            created_at="created_at"))
    if cfg.enable_temporal_next:
        frames.append(previous.select(
            src="prev", dst="memory_id", type=pl.lit("TEMPORAL_NEXT"), weight=pl.lit(0.6),
            created_at="created_at"))
    if cfg.enable_topic_similar:
        frames.append(_topic_similar(cfg, memories, vectors))
    edges = pl.concat([f.with_columns(pl.col("weight").cast(pl.Float64)) for f in frames]
                      ) if frames else pl.DataFrame(schema=EDGES)
    return edges.with_columns(updated_at=pl.col("created_at"),
                              evidence=pl.lit(None, pl.String)).select(list(EDGES)).cast(
        EDGES).sort("created_at", "src", "dst", "type")


def _topic_similar(cfg: EdgesConfig, memories: pl.DataFrame,
                   vectors: npt.NDArray[np.float64]) -> pl.DataFrame:
    """Per user: each memory to its top-k most similar earlier memories above the floor."""
    users = memories["user_id"].to_numpy()
    ids = memories["memory_id"].to_numpy()
    created = memories["created_at"]
    src, dst, weight, at = [], [], [], []
    for user in np.unique(users):  # one block per user: static data, not per event
        rows = np.flatnonzero(users == user)
        block = vectors[rows]
        norms = np.linalg.norm(block, axis=1)
        similarity = (block @ block.T) / np.outer(norms, norms)
        # Only memories already stored when each one arrives (rows are in created order).
        similarity[np.triu_indices(rows.size)] = -np.inf
        ranked = np.argsort(-similarity, axis=1, kind="stable")[:, :cfg.topic_top_k]
        best = np.take_along_axis(similarity, ranked, axis=1)
        new, slot = np.nonzero(best >= cfg.topic_min_similarity)
        src.append(ids[rows[new]])
        dst.append(ids[rows[ranked[new, slot]]])
        weight.append(best[new, slot])
        at.append(rows[new])
    at_rows = np.concatenate(at) if at else np.zeros(0, dtype=np.int64)
    return pl.DataFrame({
        "src": np.concatenate(src) if src else [], "dst": np.concatenate(dst) if dst else [],
        "type": ["TOPIC_SIMILAR"] * at_rows.size,
        "weight": np.concatenate(weight) if weight else [],
        "created_at": created.gather(at_rows)},
        schema={"src": pl.String, "dst": pl.String, "type": pl.String, "weight": pl.Float64,
                "created_at": TS})


def _queries(spec: SyntheticSpec, rng: np.random.Generator, world: dict[str, np.ndarray],
             memories: pl.DataFrame, topics: dict[str, np.ndarray],
             ) -> tuple[pl.DataFrame, npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Queries (ids q00000... by user), their vectors and anchor memory rows; adds the
    query topics to `topics`."""
    n = spec.n_users * spec.queries_per_user
    user = np.repeat(np.arange(spec.n_users), spec.queries_per_user)
    # An anchor per query: a uniform memory of the same user.
    by_user = np.argsort(topics["user"], kind="stable")
    pick = rng.integers(0, spec.memories_per_user, size=n)
    anchor = by_user[user * spec.memories_per_user + pick]
    topic = topics["memory"][anchor]
    noise = rng.normal(size=(n, spec.dim)) / math.sqrt(spec.dim)
    query_vectors = _unit_rows(world["centroid"][topic] + spec.topic_spread * noise)
    # Two of the anchor's three words, in a template of the drawn intent.
    labels = [label for label, _ in spec.phrasing]
    intent = rng.choice(len(labels), size=n, p=[p for _, p in spec.phrasing])
    counts = np.array([len(TEMPLATES[label]) for label in labels])
    offsets = np.r_[0, np.cumsum(counts)[:-1]]
    flat = [t for label in labels for t in TEMPLATES[label]]
    template = offsets[intent] + np.floor(rng.random(n) * counts[intent]).astype(np.int64)
    word_slots = np.argsort(rng.random((n, 3)), axis=1)[:, :2]
    a = topics["words"][anchor, word_slots[:, 0]]
    b = topics["words"][anchor, word_slots[:, 1]]
    parts = np.array(flat)[template]
    text = np.char.add(np.char.add(np.char.add(np.char.add(parts[:, 0], a), parts[:, 1]), b),
                       parts[:, 2])
    queries = pl.DataFrame({
        "query_id": [f"q{i:05d}" for i in range(n)], "text": text,
        "user_id": [f"u{u:03d}" for u in user], "agent_id": [None] * n, "run_id": [None] * n,
        "question_type": np.array(labels)[intent]}, schema=QUERIES)
    topics["query"] = topic
    return queries, query_vectors, anchor


def _pairs(spec: SyntheticSpec, rng: np.random.Generator, world: dict[str, np.ndarray],
           memories: pl.DataFrame, topics: dict[str, np.ndarray],
           vectors: npt.NDArray[np.float64], queries: pl.DataFrame,
           query_vectors: npt.NDArray[np.float64], edges: pl.DataFrame) -> pl.DataFrame:
    """Every (query, memory of its user) with the six planted signals, utility and grade."""
    per_user = spec.memories_per_user
    n_queries = queries.height
    query_user = np.repeat(np.arange(spec.n_users), spec.queries_per_user)
    by_user = np.argsort(topics["user"], kind="stable").reshape(spec.n_users, per_user)
    q = np.repeat(np.arange(n_queries), per_user)
    m = by_user[query_user].ravel()
    unit = _unit_rows(vectors)
    cosine = np.einsum("ij,ij->i", query_vectors[q], unit[m])
    dense = np.clip(cosine, 0.0, 1.0)
    tokens = token_incidence(pl.concat([memories["text"], queries["text"]]))
    memory_tokens, query_tokens = tokens[:memories.height], tokens[memories.height:]
    shared = np.asarray(query_tokens[q].multiply(memory_tokens[m]).sum(axis=1)).ravel()
    sizes = np.asarray(query_tokens.sum(axis=1)).ravel()[q]
    lexical = np.divide(shared, sizes, out=np.zeros(q.size), where=sizes > 0)
    graph = _reach(spec, memories, edges, cosine.reshape(n_queries, per_user),
                   by_user[query_user]).ravel()
    preference = world["preference"][query_user[q]]
    personal = preference[np.arange(q.size), topics["memory"][m]] / preference.max(axis=1)
    frequency = world["popularity"][m]
    same_topic = topics["memory"][m] == topics["query"][q]
    worked = same_topic & (rng.random(q.size) < _SUCCESS_RATE)
    success = np.where(worked, rng.uniform(0.5, 1.0, size=q.size), 0.0)
    signals = np.column_stack([dense, lexical, graph, personal, frequency, success])
    utility = signals @ spec.weights.as_array() + rng.normal(0.0, spec.relevance_noise,
                                                             size=q.size)
    # Grades by the rank of the utility within each query (pairs are grouped by query).
    order = np.argsort(-utility.reshape(n_queries, per_user), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(per_user)[None, :], axis=1)
    g1, g2, g3 = spec.grade_counts
    grade = np.select([rank < g3, rank < g3 + g2, rank < g3 + g2 + g1], [3, 2, 1], 0).ravel()
    return pl.DataFrame({
        "query_id": queries["query_id"].gather(q), "memory_id": memories["memory_id"].gather(m),
        **{name: signals[:, i] for i, name in enumerate(SIGNALS)},
        "utility": utility, "relevance": grade.astype(np.int64)})


def _reach(spec: SyntheticSpec, memories: pl.DataFrame, edges: pl.DataFrame,
           cosine: npt.NDArray[np.float64], rows: npt.NDArray[np.int64],
           ) -> npt.NDArray[np.float64]:
    """(n_queries, memories_per_user): the BFS reach of each of the query owner's memories
    from the query's dense seeds (MSPR.md section 8), `cosine` and `rows` laid out alike.

    Seeds: the `seed_top_k` memories of highest cosine (ties in memory order), reach 1.
    Others: the best product of edge weights over undirected walks of at most
    `expansion_depth` edges from a seed, each edge of weight >= `edge_weight_floor`, 0 when
    unreached. Edges count at their synthesised weight: the ranker they are planted for
    decays them slowly over the log (experiments/configs/synthetic.toml). The engine's
    own BFS stops at `max_candidates`; this reach does not.
    """
    retrieval = RetrievalConfig()
    live = edges
    index = {m: i for i, m in enumerate(memories["memory_id"].to_list())}
    a = np.array([index[x] for x in live["src"].to_list()], dtype=np.int64)
    b = np.array([index[x] for x in live["dst"].to_list()], dtype=np.int64)
    w = np.clip(live["weight"].to_numpy(), 0.0, 1.0)
    keep = (w >= retrieval.edge_weight_floor) & (a != b)
    n = memories.height
    # Sparse, not an n x n array (500 GB at 250k memories): each query only reads its
    # owner's block. Traversal is undirected: both directions, the heavier parallel edge.
    both = pl.DataFrame({"a": np.concatenate([a[keep], b[keep]]),
                         "b": np.concatenate([b[keep], a[keep]]),
                         "w": np.concatenate([w[keep], w[keep]])}).group_by("a", "b").agg(
        pl.col("w").max())
    weights = sparse.csr_matrix((both["w"].to_numpy(), (both["a"].to_numpy(),
                                                        both["b"].to_numpy())), shape=(n, n))
    reach = np.zeros(cosine.shape)
    seeds = np.argsort(-cosine, axis=1, kind="stable")[:, :retrieval.seed_top_k]
    np.put_along_axis(reach, seeds, 1.0, axis=1)
    blocks: dict[bytes, npt.NDArray[np.float64]] = {}  # one per owner: queries share it
    for query in range(cosine.shape[0]):
        key = rows[query].tobytes()
        if key not in blocks:
            blocks = {key: weights[rows[query]][:, rows[query]].toarray()}
        local = blocks[key]
        level = reach[query].copy()
        for _ in range(retrieval.expansion_depth):
            level = np.maximum(level, (level[:, None] * local).max(axis=0))
        reach[query] = level
    return reach
