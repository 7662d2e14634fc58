"""Seeded random scenarios (SCENARIOS.md format) that reach the corners of MSPR.md.

Each scenario is a small world: a few users, agents, runs, tenants and roles; memories
with 8-dimensional embeddings clustered by topic (with near-duplicates, so cosine
matters); typed edges with weights on both sides of the floor, parallel and repeated
keys, self loops and dangling ids; and a stream of feedback and search events whose
queries hit every intent rule, repeat with case and whitespace variants (so success
history crosses `min_sample_size`), and include the inputs the library rejects.

Every config value stays inside the ranges of SCENARIOS.md. The same `(seed, index)`
always gives the same scenario.

>>> generate_scenario(7, 0) == generate_scenario(7, 0)
True
>>> generate_scenario(7, 0)["format"]
'ck-mspr-scenario/1'
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np

from ._scenario_config import chance as _chance
from ._scenario_config import pick as _pick
from ._scenario_config import random_config

__all__ = ["generate_batch", "generate_scenario"]

SCENARIO_FORMAT = "ck-mspr-scenario/1"
DIM = 8
USERS = ("u0", "u1", "u2", "u3")
AGENTS = ("a0", "a1")
RUNS = ("r0", "r1", "r2")
TENANTS = ("t0", "t1", "t2")
SUB_TENANTS = ("s0", "s1")
ROLES = ("admin", "analyst", "user", "ops")
EDGE_TYPES = (
    "REPLY_TO", "TOPIC_SIMILAR", "DOCUMENT_LINK", "TEMPORAL_NEXT", "UPDATED_FROM",
    "CAUSAL", "SUPPORTS", "CONTRADICTS", "REFINES", "ELABORATES",
)
# Topic words avoid every intent trigger word, so a query's label comes from its template.
TOPICS = {
    "travel": ("flight", "tokyo", "window", "seat", "hotel", "passport", "shinjuku", "aisle"),
    "food": ("peanuts", "nut-free", "meal", "sushi", "allergy", "coffee", "vegan", "lunch"),
    "work": ("meeting", "deadline", "roadmap", "standup", "review", "budget", "launch"),
    "health": ("doctor", "dentist", "vitamins", "running", "sleep", "knee", "yoga"),
    "home": ("garage", "wifi", "router", "plumber", "rent", "lease", "garden"),
}
FILLER = ("alice's", "my", "the", "on", "for", "next", "week", "in", "march", "2027", "bob")
# Query templates grouped by the intent rule they should trigger (MSPR.md 11.1).
QUERIES = {
    "DOCUMENTARY": (
        "where is the pdf about {w}", "find the contract for {w}", "open the spreadsheet on {w}",
        "the link you sent about {w}", "my resume mentions {w}", "which file has the {w}",
        "upload the doc on {w}", "the attachment with {w}", "Document for {w}",
    ),
    "CONVERSATIONAL": (
        "what did we discuss yesterday about {w}", "remember the {w}",
        "last time we talked about {w}", "you told me about {w}", "recall our conversation on {w}",
        "yesterday's {w}", "what you said about {w}", "we chatted about {w}",
    ),
    "FACTUAL": (
        "what is my {w}", "What's the {w}", "whats the {w}", "when is the {w}",
        "where did I put the {w}", "how many {w} do I have", "what was the {w}",
        "who is my {w} contact", "who's handling the {w}", "whos on {w}", "pin for the {w}",
        "password for {w}", "code for the {w}", "api key for {w}",
    ),
    "EXPLORATORY": (
        "tell me about {w}", "summarize my {w}", "thoughts on {w}",
        "give me an overview of {w}", "what do i know about {w}", "what do you think about {w}",
    ),
    "UNKNOWN": (
        "{w} {v}", "Tell me what is my {w}", "find the documents about {w}", "summarise my {w}",
        "how much did the {w} cost", "", "   ", "what  is my {w}",
    ),
}


def generate_batch(seed: int, n: int) -> list[dict[str, Any]]:
    """`n` scenarios: `generate_scenario(seed, i)` for i in 0..n-1."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [generate_scenario(seed, index) for index in range(n)]


def generate_scenario(seed: int, index: int) -> dict[str, Any]:
    """One random scenario, a pure function of `(seed, index)`."""
    rng = np.random.default_rng([seed, index])
    now = datetime(2024, 6, 1) + timedelta(days=int(rng.integers(0, 365)))
    config = random_config(rng)
    world = _World(rng, now)
    memories = world.memories(_memory_count(rng))
    return {
        "format": SCENARIO_FORMAT,
        "name": f"scn_{seed}_{index:04d}",
        "generator": {"seed": seed, "index": index},
        "now": _iso(now),
        "config": config,
        "memories": memories,
        "edges": world.edges(memories),
        "events": _Events(rng, world, memories, config).generate(),
    }


# ---- helpers -------------------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _vector(values: np.ndarray) -> list[float]:
    return [round(float(x), 6) for x in values]


def _memory_count(rng: np.random.Generator) -> int:
    bucket = rng.random()
    if bucket < 0.6:
        return int(rng.integers(5, 31))
    if bucket < 0.9:
        return int(rng.integers(31, 101))
    return int(rng.integers(101, 301))


# ---- memories and edges --------------------------------------------------------------


class _World:
    """Topics and the clock a scenario's memories, edges and queries are drawn from."""

    def __init__(self, rng: np.random.Generator, now: datetime) -> None:
        self.rng = rng
        self.now = now
        self.topics = list(TOPICS)[: int(rng.integers(2, len(TOPICS) + 1))]
        self.centers = rng.normal(size=(len(self.topics), DIM))

    def embedding_near(self, topic: int, spread: float = 0.5) -> list[float]:
        return _vector(self.centers[topic] + spread * self.rng.normal(size=DIM))

    def text(self, topic: int) -> str:
        rng = self.rng
        words = [_pick(rng, TOPICS[self.topics[topic]]) for _ in range(int(rng.integers(2, 6)))]
        words += [_pick(rng, FILLER) for _ in range(int(rng.integers(1, 4)))]
        order = rng.permutation(len(words))
        text = " ".join(words[i] for i in order)
        return text.capitalize() if _chance(rng, 0.5) else text

    def memories(self, n: int) -> list[dict[str, Any]]:
        made: list[dict[str, Any]] = []
        for i in range(n):
            made.append(self.memory(f"m{i:04d}", made))
        return made

    def memory(self, memory_id: str, earlier: list[dict[str, Any]]) -> dict[str, Any]:
        rng = self.rng
        topic = int(rng.integers(len(self.topics)))
        created = self.now - timedelta(seconds=int(rng.integers(0, 60 * 86400)))
        memory: dict[str, Any] = {
            "id": memory_id,
            "text": "" if _chance(rng, 0.03) else self.text(topic),
            "user_id": _pick(rng, USERS) if _chance(rng, 0.85) else None,
            "agent_id": _pick(rng, AGENTS) if _chance(rng, 0.25) else None,
            "run_id": _pick(rng, RUNS) if _chance(rng, 0.2) else None,
            "tenant_id": _pick(rng, TENANTS) if _chance(rng, 0.5) else None,
            "sub_tenant_id": _pick(rng, SUB_TENANTS) if _chance(rng, 0.15) else None,
            "metadata": {"topic": self.topics[topic]} if _chance(rng, 0.5) else {},
            "embedding": self.memory_embedding(topic, earlier),
            "created_at": _iso(created),
            "updated_at": _iso(self.between(created)) if _chance(rng, 0.3) else None,
            "last_accessed_at": _iso(self.between(created)) if _chance(rng, 0.2) else None,
            "relevance": 1.0 if _chance(rng, 0.5) else round(float(rng.uniform(0, 1)), 4),
            "relevance_floor": 0.0 if _chance(rng, 0.8) else round(float(rng.uniform(0, 0.6)), 4),
            "access_count": 0 if _chance(rng, 0.6) else int(min(200, rng.zipf(1.6))),
            "archived": _chance(rng, 0.06),
            "in_graph": not _chance(rng, 0.05),
            "in_vector_store": not _chance(rng, 0.05),
        }
        memory.update(self.role_tags())
        return memory

    def between(self, start: datetime) -> datetime:
        span = max(0, int((self.now - start).total_seconds()))
        return start + timedelta(seconds=int(self.rng.integers(0, span + 1)))

    def memory_embedding(self, topic: int, earlier: list[dict[str, Any]]) -> list[float] | None:
        rng = self.rng
        kind = rng.random()
        with_vectors = [m["embedding"] for m in earlier if m["embedding"]]
        if kind < 0.08 and with_vectors:  # near-duplicate (or, rarely, exact duplicate)
            base = np.asarray(_pick(rng, with_vectors))
            if len(base) == DIM:
                return _vector(base + (0.0 if _chance(rng, 0.3) else 1e-4) * rng.normal(size=DIM))
        if kind < 0.12:
            return None
        if kind < 0.14:
            return []
        if kind < 0.15:
            return [0.0] * DIM  # zero norm: cosine is 0
        if kind < 0.16:
            return self.embedding_near(topic)[: DIM - 1]  # length mismatch: cosine is 0
        return self.embedding_near(topic)

    def role_tags(self) -> dict[str, Any]:
        rng = self.rng
        kind = rng.random()
        if kind < 0.22:
            return {"role": _pick(rng, ROLES)}
        if kind < 0.45:
            size = int(_pick(rng, (0, 1, 1, 2, 2, 3)))
            chosen = [ROLES[i] for i in sorted(rng.choice(len(ROLES), size, replace=False))]
            return {"allowed_roles": chosen}
        if kind < 0.48:
            return {"allowed_roles": _pick(rng, ROLES)}  # a plain string: read per character
        if kind < 0.52:
            return {"role": _pick(rng, ROLES), "allowed_roles": [_pick(rng, ROLES)]}
        return {}

    def edges(self, memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rng = self.rng
        ids = [m["id"] for m in memories]
        by_user: dict[Any, list[str]] = {}
        for m in memories:
            by_user.setdefault(m["user_id"], []).append(m["id"])
        owner = {m["id"]: m["user_id"] for m in memories}
        edges: list[dict[str, Any]] = []
        for _ in range(int(len(ids) * rng.uniform(0.3, 2.5))):
            src = _pick(rng, ids)
            roll = rng.random()
            if roll < 0.02:
                dst = src  # self loop
            elif roll < 0.04:
                dst = f"ghost{int(rng.integers(3))}"  # not a graph node
            elif roll < 0.64:
                dst = _pick(rng, by_user[owner[src]])
            else:
                dst = _pick(rng, ids)
            edges.append(self.edge(src, dst, _pick(rng, EDGE_TYPES)))
            if _chance(rng, 0.15):  # a parallel edge of another type
                edges.append(self.edge(src, dst, _pick(rng, EDGE_TYPES)))
            if edges and _chance(rng, 0.08):  # the same (src, dst, type) key again
                again = _pick(rng, edges)
                edges.append(self.edge(again["src"], again["dst"], again["type"]))
        return edges

    def edge(self, src: str, dst: str, edge_type: str) -> dict[str, Any]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            weight = round(float(rng.uniform(0, 0.15)), 4)  # around and below the floor
        elif roll < 0.8:
            weight = round(float(rng.uniform(0.15, 1)), 4)
        elif roll < 0.87:
            weight = 1.0
        elif roll < 0.9:
            weight = float(_pick(rng, (0.1, 0.05, 0.2)))  # exactly a default floor or minimum
        elif roll < 0.95:
            weight = 0.0
        else:
            weight = float(_pick(rng, (1.25, -0.3)))  # upsert_edge clamps to [0, 1]
        age = timedelta(seconds=int(rng.integers(0, 30 * 86400)))
        return {
            "src": src, "dst": dst, "type": edge_type, "weight": weight,
            "updated_at": _iso(self.now - age) if _chance(rng, 0.4) else None,
        }


# ---- events --------------------------------------------------------------------------


class _Events:
    """The time-ordered feedback and search stream of one scenario."""

    def __init__(self, rng: np.random.Generator, world: _World,
                 memories: list[dict[str, Any]], config: dict[str, Any]) -> None:
        self.rng = rng
        self.world = world
        self.memories = memories
        self.seed_top_k = config["retrieval"]["seed_top_k"]
        self.clock = world.now
        self.stored = [m for m in memories if m["in_vector_store"]]
        self.recent: list[str] = []  # ids recently returned as seeds: feedback targets
        self.hot = [self.query() for _ in range(int(rng.integers(2, 5)))]

    def generate(self) -> list[dict[str, Any]]:
        rng = self.rng
        events: list[dict[str, Any]] = []
        for _ in range(int(rng.integers(3, 26))):
            if _chance(rng, 0.6):
                events.append(self.search())
            elif _chance(rng, 0.2):
                events.extend(self.feedback_burst())
            else:
                events.append(self.feedback())
        return events

    def at(self) -> str | None:
        """Move the clock (forward only) for some events: minutes, hours or days."""
        rng = self.rng
        if not _chance(rng, 0.35):
            return None
        unit = _pick(rng, (60, 3600, 86400))
        self.clock += timedelta(seconds=int(unit * rng.integers(1, 11)))
        return _iso(self.clock)

    def query(self) -> tuple[str, int]:
        """A query text from a random intent rule, and its topic."""
        rng = self.rng
        topic = int(rng.integers(len(self.world.topics)))
        words = TOPICS[self.world.topics[topic]]
        template = _pick(rng, QUERIES[_pick(rng, tuple(QUERIES))])
        return template.format(w=_pick(rng, words), v=_pick(rng, words)), topic

    def variant(self, text: str) -> str:
        """Same success history (hash_query strips and lowercases) or, rarely, not."""
        kind = int(self.rng.integers(6))
        return (text, text.upper(), f"  {text}  ", text.title(), text.lower(), f"{text}?")[kind]

    def owner_ids(self) -> dict[str, Any]:
        """At least one session id: mostly a user, sometimes only an agent or a run."""
        rng = self.rng
        ids: dict[str, Any] = {"user_id": None, "agent_id": None, "run_id": None}
        roll = rng.random()
        if roll < 0.85:
            ids["user_id"] = _pick(rng, USERS)
            ids["agent_id"] = _pick(rng, AGENTS) if _chance(rng, 0.2) else None
            ids["run_id"] = _pick(rng, RUNS) if _chance(rng, 0.15) else None
        elif roll < 0.93:
            ids["agent_id"] = _pick(rng, AGENTS)
            ids["run_id"] = _pick(rng, RUNS) if _chance(rng, 0.3) else None
        else:
            ids["run_id"] = _pick(rng, RUNS)
        return ids

    def search(self) -> dict[str, Any]:
        rng = self.rng
        text, topic = self.hot[int(rng.integers(len(self.hot)))] if _chance(rng, 0.5) else \
            self.query()
        ids, filters = self.search_scope()
        event: dict[str, Any] = {
            "type": "search", "query": self.variant(text),
            "query_embedding": self.query_embedding(topic), **ids, "filters": filters,
        }
        event["seeds"] = self.seeds(event["query_embedding"], ids["user_id"])
        if _chance(rng, 0.5):
            event["limit"] = int(_pick(rng, (0, 1, 2, 3, 5, 5, 10, 10, 20, 0, -1)))
        if _chance(rng, 0.1):
            event["threshold"] = round(float(rng.uniform(0, 0.6)), 3)
        event["include_archived"] = _chance(rng, 0.15)
        event["at"] = self.at()
        return event

    def search_scope(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Owner ids and filters, including the combinations the library rejects."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.03:  # no session id at all: ValueError
            return {"user_id": None, "agent_id": None, "run_id": None}, None
        if roll < 0.05:  # only in the filters: still ValueError (the arguments decide)
            return ({"user_id": None, "agent_id": None, "run_id": None},
                    {"user_id": _pick(rng, USERS)})
        if roll < 0.06:  # an operator filter on a session key the arguments do not override
            return ({"user_id": None, "agent_id": _pick(rng, AGENTS), "run_id": None},
                    {"user_id": {"$in": [_pick(rng, USERS)]}})
        ids, filters = self.owner_ids(), self.role_filters()
        if _chance(rng, 0.1):
            filters = {**(filters or {}), **self.owner_filters()}
        return ids, filters

    def owner_filters(self) -> dict[str, Any]:
        """Session keys in the filters: overwritten by an argument, or narrowing the scope."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.4:
            return {"user_id": _pick(rng, USERS)}
        if roll < 0.7:
            return {"agent_id": _pick(rng, AGENTS)}
        if roll < 0.9:
            return {"run_id": _pick(rng, RUNS)}
        return {"run_id": int(rng.integers(1, 4))}  # not a string: the library raises

    def role_filters(self) -> dict[str, Any] | None:
        rng = self.rng
        tenant = _pick(rng, TENANTS) if _chance(rng, 0.8) else None
        role = _pick(rng, ROLES) if _chance(rng, 0.8) else None
        flat = {k: v for k, v in (("tenant_id", tenant), ("role", role)) if v is not None}
        if _chance(rng, 0.15):
            flat["sub_tenant_id"] = _pick(rng, SUB_TENANTS)
        shape = rng.random()
        if shape < 0.5:
            return None
        if shape < 0.7:
            return flat
        if shape < 0.9:
            return {"metadata": flat}
        return {"tenant_id": tenant, "metadata": {"role": role, "tenant_id": _pick(rng, TENANTS)}}

    def query_embedding(self, topic: int) -> list[float]:
        rng = self.rng
        roll = rng.random()
        with_vectors = [m["embedding"] for m in self.memories if m["embedding"]]
        if roll < 0.08:
            return []
        if roll < 0.13 and with_vectors:
            return list(_pick(rng, with_vectors))
        return self.world.embedding_near(topic, spread=0.3)

    def seeds(self, query_vector: list[float], user_id: str | None) -> list[dict[str, Any]]:
        rng = self.rng
        if not self.stored or _chance(rng, 0.05):
            return []
        own = [m for m in self.stored if m["user_id"] == user_id]
        count = min(len(self.stored), int(rng.integers(1, 2 * self.seed_top_k + 4)))
        chosen: list[dict[str, Any]] = []
        for _ in range(count):
            pool = own if own and _chance(rng, 0.75) else self.stored
            chosen.append(_pick(rng, pool))
        unique = list({m["id"]: m for m in chosen}.values())
        seeds = [{"id": m["id"], "score": self.seed_score(query_vector, m)} for m in unique]
        seeds.sort(key=lambda s: -s["score"])
        if _chance(rng, 0.2):
            seeds = [seeds[i] for i in rng.permutation(len(seeds))]
        self.perturb(seeds)
        self.recent = [s["id"] for s in seeds][:5] or self.recent
        return seeds

    def seed_score(self, query_vector: list[float], memory: dict[str, Any]) -> float:
        vector = memory["embedding"]
        if not query_vector or not vector or len(vector) != len(query_vector):
            return round(float(self.rng.uniform(0, 1)), 2)
        q, v = np.asarray(query_vector), np.asarray(vector)
        norm = float(np.linalg.norm(q) * np.linalg.norm(v))
        return round(float(q @ v) / norm, 3) if norm else 0.0  # 3 decimals: some ties

    def perturb(self, seeds: list[dict[str, Any]]) -> None:
        """Ties, a duplicate id with a lower score, and missing scores, now and then."""
        rng = self.rng
        if len(seeds) >= 2 and _chance(rng, 0.15):
            seeds[1]["score"] = seeds[0]["score"]
        if seeds and _chance(rng, 0.1):
            twin = _pick(rng, seeds)
            seeds.append({"id": twin["id"], "score": round(float(twin["score"] or 0) - 0.1, 3)})
        if seeds and _chance(rng, 0.1):
            _pick(rng, seeds)["score"] = None
        if _chance(rng, 0.03):  # no positive score: PPR personalises uniformly
            for seed in seeds:
                seed["score"] = 0.0

    def feedback(self, memory_id: str | None = None, user_id: Any = "draw",
                 helpful: bool | None = None, query: str | None = None) -> dict[str, Any]:
        rng = self.rng
        if memory_id is None:
            roll = rng.random()
            if roll < 0.1:
                memory_id = "m_missing"
            elif roll < 0.75 and self.recent:
                memory_id = _pick(rng, self.recent)
            else:
                memory_id = _pick(rng, self.memories)["id"]
        if user_id == "draw":
            user_id = None if _chance(rng, 0.15) else _pick(rng, USERS)
        if query is None and _chance(rng, 0.85):
            query = self.variant(self.hot[0][0] if _chance(rng, 0.6) else self.query()[0])
        return {
            "type": "feedback", "memory_id": memory_id,
            "helpful": _chance(rng, 0.7) if helpful is None else helpful,
            "user_id": user_id,
            "agent_id": _pick(rng, AGENTS) if _chance(rng, 0.1) else None,
            "run_id": _pick(rng, RUNS) if _chance(rng, 0.1) else None,
            "query": query,
            "metadata": {"source": "ui", "rank": int(rng.integers(1, 6))} if _chance(rng, 0.3)
            else None,
            "at": self.at(),
        }

    def feedback_burst(self) -> list[dict[str, Any]]:
        """One user marks one memory helpful again and again: past the boost cap."""
        rng = self.rng
        target = _pick(rng, self.recent) if self.recent else _pick(rng, self.memories)["id"]
        user = None if _chance(rng, 0.2) else _pick(rng, USERS)
        query = self.hot[0][0]
        return [self.feedback(target, user, True, self.variant(query))
                for _ in range(int(rng.integers(4, 9)))]
