"""Edge synthesis (MSPR.md section 4, Example H), and parity with the library's builder."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from msprlab.engine.config import EdgesConfig
from msprlab.engine.edges import (
    EdgeBuilder,
    archive,
    extract_doc_refs,
    same_owner,
    text_hash,
)
from msprlab.engine.graph import ContextGraph, EdgeType, Embedding, MemoryEdge, MemoryNode
from msprlab.engine.text import cosine

T = datetime(2026, 1, 1, 12, 0)
URL = "https://ex.com/itinerary"


def summary(edges: Sequence[MemoryEdge]) -> list[tuple[str, str, str, float]]:
    return [(e.src, e.dst, e.type.value, e.weight) for e in edges]


@dataclass
class Session:
    """One engine graph and builder, with a terse `add` for the tests."""

    cfg: EdgesConfig = field(default_factory=EdgesConfig)
    graph: ContextGraph = field(default_factory=ContextGraph)
    builder: EdgeBuilder = field(default_factory=EdgeBuilder)

    def add(self, memory_id: str, *, at: timedelta, user: str | None = "u1",
            agent: str | None = None, run: str | None = "r1", text: str | None = None,
            embedding: Sequence[float] | None = None, **extra: Any) -> list[MemoryEdge]:
        text = f"note {memory_id}" if text is None else text
        payload = {"data": text, "user_id": user, "agent_id": agent, "run_id": run, **extra}
        return self.builder.on_memory_created(
            self.graph, self.cfg, memory_id=memory_id, text=text, user_id=user,
            agent_id=agent, run_id=run, metadata=payload, embedding=embedding, now=T + at)

    def stored(self) -> list[tuple[str, str, str, float]]:
        return summary(list(self.graph.edges()))


# --- Example H ----------------------------------------------------------------------
# Example H does not list its embeddings. 0.993884 is 9/sqrt(82), the cosine of
# [1, 0, 0] and [0.9, 0.1, 0]; those are used here. b1 and a4 point the same way as a1,
# so only the owner rule keeps them unlinked.
H_VECTORS = {"a1": [1.0, 0.0, 0.0], "a2": [0.9, 0.1, 0.0], "a3": [0.0, 1.0, 0.0],
             "b1": [1.0, 0.0, 0.0], "a4": [0.95, 0.05, 0.0]}
H_TOPIC = cosine(Embedding.of(H_VECTORS["a2"]), Embedding.of(H_VECTORS["a1"]))


def build_example_h() -> tuple[Session, dict[str, list[MemoryEdge]]]:
    s = Session()
    v = H_VECTORS
    made = {
        "a1": s.add("a1", at=timedelta(0), text=f"plan at {URL}", embedding=v["a1"]),
        "a2": s.add("a2", at=timedelta(minutes=10), text=f"see ({URL})", embedding=v["a2"]),
        "a3": s.add("a3", at=timedelta(minutes=50), text="no ref", embedding=v["a3"]),
        "b1": s.add("b1", at=timedelta(minutes=51), user="u2", text=f"also {URL}",
                    embedding=v["b1"]),
        "a4": s.add("a4", at=timedelta(minutes=52), run=None, agent="ag", text="doc",
                    embedding=v["a4"], doc_id=URL),
    }
    return s, made


def test_example_h_edges() -> None:
    s, made = build_example_h()
    assert round(H_TOPIC, 6) == 0.993884
    assert math.isclose(H_TOPIC, 9 / math.sqrt(82), rel_tol=1e-15)
    expected = [
        ("a1", "a2", "REPLY_TO", 1.0),
        ("a1", "a2", "TEMPORAL_NEXT", 0.6),
        ("a2", "a1", "DOCUMENT_LINK", 0.8),
        ("a2", "a1", "TOPIC_SIMILAR", H_TOPIC),
        ("a2", "a3", "TEMPORAL_NEXT", 0.6),
    ]
    assert s.stored() == expected
    assert summary(made["a1"]) == []
    assert summary(made["a2"]) == expected[:4]
    assert summary(made["a3"]) == expected[4:]      # 40 min > 30: no REPLY_TO
    assert made["b1"] == [] and made["a4"] == []    # other user; other agent
    link = s.graph.edges().__next__()
    assert link.created_at == link.updated_at == T + timedelta(minutes=10)
    doc = [e for e in s.graph.edges() if e.type is EdgeType.DOCUMENT_LINK]
    assert [(e.evidence, e.metadata) for e in doc] == [(URL, {"ref": URL})]
    # Every memory registered as a holder, linked or not.
    assert s.builder.holders == {URL: ["a1", "a2", "b1", "a4"]}


def test_example_h_update_bumps_version_without_updated_from() -> None:
    s, _ = build_example_h()
    before = s.stored()
    at = T + timedelta(minutes=60)
    edges = s.builder.on_memory_updated(
        s.graph, s.cfg, memory_id="a3", text="no ref, revised", user_id="u1", agent_id=None,
        run_id="r1", metadata={"data": "no ref, revised"}, embedding=H_VECTORS["a3"], now=at)
    node = s.graph.get("a3")
    assert node is not None
    assert (node.version, node.prev_version_id, node.hash) == (2, "a3",
                                                              text_hash("no ref, revised"))
    assert (node.created_at, node.updated_at) == (T + timedelta(minutes=50), at)
    assert node.metadata["data"] == "no ref, revised"
    assert edges == [] and s.stored() == before
    assert all(e.type is not EdgeType.UPDATED_FROM for e in s.graph.edges())
    # The update path leaves the session cache alone.
    assert s.builder.sessions[("r1", "u1")] == ("a3", T + timedelta(minutes=50))


def test_update_with_same_text_keeps_version_and_merges_metadata() -> None:
    s = Session()
    s.add("m1", at=timedelta(0), tag="old", tenant_id="t1")
    node = s.graph.get("m1")
    assert node is not None and node.tenant_id == "t1"
    s.builder.on_memory_updated(s.graph, s.cfg, memory_id="m1", text="note m1", user_id="zz",
                                agent_id="zz", run_id=None, metadata={"extra": 1},
                                embedding=None, now=T + timedelta(hours=1))
    assert (node.version, node.prev_version_id) == (1, None)
    assert node.metadata["tag"] == "old" and node.metadata["extra"] == 1
    # Owner ids are fixed at creation, and a missing tenant never clears one.
    assert (node.user_id, node.agent_id, node.tenant_id) == ("u1", None, "t1")
    s.builder.on_memory_updated(s.graph, s.cfg, memory_id="m1", text="note m1", user_id="u1",
                                agent_id=None, run_id=None, metadata={}, embedding=None,
                                now=T + timedelta(hours=2), tenant_id="t9")
    assert node.tenant_id == "t9"


def test_explicit_tenant_wins_over_metadata() -> None:
    s = Session()
    s.builder.on_memory_created(s.graph, s.cfg, memory_id="m1", text="x", user_id="u1",
                                agent_id=None, run_id=None,
                                metadata={"tenant_id": "meta", "sub_tenant_id": "sub"},
                                embedding=None, now=T, tenant_id="arg")
    node = s.graph.get("m1")
    assert node is not None
    assert (node.tenant_id, node.sub_tenant_id, node.hash) == ("arg", "sub", text_hash("x"))


def test_archive_is_soft_and_archived_memories_still_attract_topic_links() -> None:
    s = Session()
    s.add("m1", at=timedelta(0), embedding=[1.0, 0.0])
    archive(s.graph, "m1")
    archive(s.graph, "never-added")
    node = s.graph.get("m1")
    assert node is not None and node.archived and "m1" in s.graph.embeddings
    made = s.add("m2", at=timedelta(hours=2), run="r2", embedding=[1.0, 0.0])
    assert summary(made) == [("m2", "m1", "TOPIC_SIMILAR", 1.0)]


# --- owner match --------------------------------------------------------------------
def node(user: str | None = "u1", agent: str | None = None, tenant: str | None = None,
         sub: str | None = None) -> MemoryNode:
    return MemoryNode(id="n", hash="", created_at=T, updated_at=T, user_id=user,
                      agent_id=agent, tenant_id=tenant, sub_tenant_id=sub)


@pytest.mark.parametrize(("a", "b", "match"), [
    (node(), node(), True),
    (node(user=None), node(user=None), True),
    (node(user=None), node(), False),
    (node(user=""), node(user=None), False),        # only None equals None
    (node(agent="ag"), node(), False),
    (node(agent="ag"), node(agent="ag"), True),
    (node(tenant="t1"), node(), True),              # tenant checked only when both carry one
    (node(), node(tenant="t1"), True),
    (node(tenant="t1"), node(tenant="t1"), True),
    (node(tenant="t1"), node(tenant="t2"), False),
    (node(sub="s1"), node(sub="s2"), False),
    (node(tenant="t1", sub="s1"), node(sub="s1"), True),
    (None, node(), False),                          # a memory without a node never matches
    (node(), None, False),
    (None, None, False),
])
def test_same_owner(a: MemoryNode | None, b: MemoryNode | None, match: bool) -> None:
    assert same_owner(a, b) is match


def test_memory_without_node_is_never_linked() -> None:
    s = Session()
    s.graph.set_embedding("ghost", [1.0, 0.0])      # a vector with no node behind it
    s.add("m1", at=timedelta(0), embedding=[1.0, 0.0])
    assert s.stored() == []


# --- TOPIC_SIMILAR walk ----------------------------------------------------------------
def test_topic_walk_skips_other_owners_and_stops_at_top_k() -> None:
    s = Session(cfg=EdgesConfig(topic_top_k=2, enable_temporal_next=False,
                                enable_reply_to=False))
    s.add("other", at=timedelta(0), user="u2", embedding=[1.0, 0.0])     # best, other owner
    s.add("tie1", at=timedelta(0), embedding=[0.8, 0.6])
    s.add("best", at=timedelta(0), embedding=[0.99, 0.1])
    s.add("tie2", at=timedelta(0), embedding=[0.8, 0.6])
    s.add("low", at=timedelta(0), embedding=[0.0, 1.0])                  # below 0.75
    made = s.add("new", at=timedelta(0), embedding=[1.0, 0.0])
    tie = cosine(Embedding.of([1.0, 0.0]), Embedding.of([0.8, 0.6]))
    best = cosine(Embedding.of([1.0, 0.0]), Embedding.of([0.99, 0.1]))
    # Equal similarities keep insertion order: tie1 before tie2, and tie2 is cut by k=2.
    assert summary(made) == [("new", "best", "TOPIC_SIMILAR", best),
                             ("new", "tie1", "TOPIC_SIMILAR", tie)]


def test_topic_weight_is_clamped_to_one() -> None:
    # The cosine of this vector with itself rounds above 1.
    v = [0.3, 0.9]
    assert cosine(Embedding.of(v), Embedding.of(v)) > 1.0
    s = Session()
    s.add("m1", at=timedelta(0), run="r1", embedding=v)
    made = s.add("m2", at=timedelta(0), run="r2", embedding=v)
    assert summary(made) == [("m2", "m1", "TOPIC_SIMILAR", 1.0)]
    assert made[0].metadata["similarity"] > 1.0


def test_empty_embedding_is_stored_but_not_compared() -> None:
    s = Session(cfg=EdgesConfig(topic_min_similarity=0.0))
    s.add("m1", at=timedelta(0), run="r1", embedding=[])
    assert "m1" in s.graph.embeddings
    made = s.add("m2", at=timedelta(0), run="r2", embedding=[1.0, 0.0])
    # With a floor of 0 even a zero cosine links: the weight is 0.
    assert summary(made) == [("m2", "m1", "TOPIC_SIMILAR", 0.0)]


# --- REPLY_TO / TEMPORAL_NEXT -----------------------------------------------------------
@pytest.mark.parametrize(("gap", "replies"), [(1800, True), (1801, False), (-600, True)])
def test_reply_to_window(gap: int, replies: bool) -> None:
    s = Session()
    s.add("m1", at=timedelta(0))
    made = s.add("m2", at=timedelta(seconds=gap))
    kinds = [e.type.value for e in made]
    assert kinds == (["REPLY_TO", "TEMPORAL_NEXT"] if replies else ["TEMPORAL_NEXT"])


def test_session_key_prefers_run_and_ignores_agent_then() -> None:
    s = Session()
    s.add("m1", at=timedelta(0), run="r1", agent="x")
    made = s.add("m2", at=timedelta(minutes=1), run="r1", agent="y")
    assert [e.type.value for e in made] == ["REPLY_TO", "TEMPORAL_NEXT"]
    made = s.add("m3", at=timedelta(minutes=2), run=None, agent="r1")   # same key ("r1", "u1")
    assert [(e.src, e.type.value) for e in made] == [("m2", "REPLY_TO"),
                                                     ("m2", "TEMPORAL_NEXT")]


def test_session_cache_needs_an_owner_id() -> None:
    s = Session()
    s.add("m1", at=timedelta(0), user=None, run=None)
    s.add("m2", at=timedelta(0), user=None, run=None)
    assert s.builder.sessions == {} and s.stored() == []


def test_same_id_again_does_not_link_to_itself() -> None:
    s = Session()
    s.add("m1", at=timedelta(0))
    assert s.add("m1", at=timedelta(minutes=1)) == []
    assert s.builder.sessions[("r1", "u1")] == ("m1", T + timedelta(minutes=1))


# --- switches -----------------------------------------------------------------------
ALL_ON = {"REPLY_TO", "TEMPORAL_NEXT", "DOCUMENT_LINK", "TOPIC_SIMILAR"}


def two_linked(cfg: EdgesConfig) -> set[str]:
    s = Session(cfg=cfg)
    s.add("m1", at=timedelta(0), text=URL, embedding=[1.0, 0.0])
    return {e.type.value for e in s.add("m2", at=timedelta(minutes=1), text=URL,
                                        embedding=[1.0, 0.0])}


@pytest.mark.parametrize(("switch", "edge_type"), [
    ("enable_reply_to", "REPLY_TO"), ("enable_temporal_next", "TEMPORAL_NEXT"),
    ("enable_document_link", "DOCUMENT_LINK"), ("enable_topic_similar", "TOPIC_SIMILAR"),
])
def test_each_switch_turns_off_one_edge_type(switch: str, edge_type: str) -> None:
    assert two_linked(EdgesConfig()) == ALL_ON
    assert two_linked(EdgesConfig(**{switch: False})) == ALL_ON - {edge_type}


def test_refs_are_not_registered_while_document_link_is_off() -> None:
    s = Session(cfg=EdgesConfig(enable_document_link=False))
    s.add("m1", at=timedelta(0), text=URL)
    s.cfg = EdgesConfig()
    assert [e.type.value for e in s.add("m2", at=timedelta(hours=2), text=URL)] == [
        "TEMPORAL_NEXT"]
    assert s.builder.holders == {URL: ["m2"]}


def test_session_cache_is_updated_while_reply_and_temporal_are_off() -> None:
    s = Session(cfg=EdgesConfig(enable_reply_to=False, enable_temporal_next=False))
    s.add("m1", at=timedelta(0))
    s.add("m2", at=timedelta(minutes=1))
    s.cfg = EdgesConfig()
    made = s.add("m3", at=timedelta(minutes=2))
    assert [(e.src, e.type.value) for e in made] == [("m2", "REPLY_TO"), ("m2", "TEMPORAL_NEXT")]


# --- document refs ------------------------------------------------------------------
@pytest.mark.parametrize(("text", "refs"), [
    ("see (https://ex.com/a) now", ["https://ex.com/a"]),
    ("[doc](http://ex.com/b]tail)", ["http://ex.com/b"]),
    ("[https://ex.com/c]", ["https://ex.com/c"]),
    ("HTTPS://Ex.com/D, and https://ex.com/e.", ["HTTPS://Ex.com/D,", "https://ex.com/e."]),
    ("x https://ex.com/f\ty http://g", ["https://ex.com/f", "http://g"]),
    ("ftp://ex.com/h and https:// alone", []),
])
def test_url_regex(text: str, refs: list[str]) -> None:
    assert extract_doc_refs(text, None) == refs


def test_refs_are_deduplicated_keeping_first() -> None:
    metadata = {"url": "https://ex.com/a", "doc_id": "d1", "document_id": 7, "source_id": "",
                "source_url": "https://ex.com/a", "other": "ignored"}
    text = "https://ex.com/b then https://ex.com/a then d1 https://ex.com/b"
    assert extract_doc_refs(text, metadata) == ["d1", "https://ex.com/a", "https://ex.com/b"]


def test_shared_refs_rewrite_one_document_link() -> None:
    s = Session()
    s.add("m1", at=timedelta(0), text="https://ex.com/a https://ex.com/b")
    made = s.add("m2", at=timedelta(hours=2), text="https://ex.com/a https://ex.com/b")
    doc = [e for e in made if e.type is EdgeType.DOCUMENT_LINK]
    assert [e.evidence for e in doc] == ["https://ex.com/a", "https://ex.com/b"]
    stored = [e for e in s.graph.edges() if e.type is EdgeType.DOCUMENT_LINK]
    assert [(e.evidence, e.metadata) for e in stored] == [
        ("https://ex.com/b", {"ref": "https://ex.com/b"})]


def test_update_links_to_later_holders() -> None:
    s = Session()
    s.add("m1", at=timedelta(0), run="r1", text=URL)
    s.add("m2", at=timedelta(0), run="r2", text=URL)
    made = s.builder.on_memory_updated(s.graph, s.cfg, memory_id="m1", text=URL,
                                       user_id="u1", agent_id=None, run_id="r1",
                                       metadata=None, embedding=None, now=T)
    assert summary(made) == [("m1", "m2", "DOCUMENT_LINK", 0.8)]


# --- parity with the library ------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One hook call: create, update or delete, at `now`."""

    kind: str
    memory_id: str
    now: datetime
    args: Mapping[str, Any] = field(default_factory=dict)


EdgeRow = tuple[Any, ...]


def edge_row(e: Any) -> EdgeRow:
    return (e.src, e.dst, e.type.value, e.weight, e.evidence, dict(e.metadata), e.created_at,
            e.updated_at)


def node_row(n: Any) -> EdgeRow:
    return (n.id, n.hash, n.created_at, n.updated_at, n.version, n.prev_version_id,
            n.relevance, n.archived, n.user_id, n.agent_id, n.run_id, n.tenant_id,
            n.sub_tenant_id, dict(n.metadata))


@dataclass
class Outcome:
    calls: list[list[EdgeRow]]      # edges written by each op, in order
    edges: list[EdgeRow]            # storage order
    nodes: list[EdgeRow]
    embeddings: list[tuple[str, list[float]]]


def run_engine(ops: Sequence[Op], cfg_kwargs: Mapping[str, Any]) -> Outcome:
    cfg = EdgesConfig(**cfg_kwargs)
    graph, builder = ContextGraph(), EdgeBuilder()
    calls: list[list[EdgeRow]] = []
    for op in ops:
        if op.kind == "delete":
            archive(graph, op.memory_id)
            calls.append([])
            continue
        hook = builder.on_memory_created if op.kind == "create" else builder.on_memory_updated
        made = hook(graph, cfg, memory_id=op.memory_id, now=op.now, **op.args)
        calls.append([edge_row(e) for e in made])
    return Outcome(calls, [edge_row(e) for e in graph.edges()],
                   [node_row(n) for n in graph.nodes.values() if n is not None],
                   [(k, e.vector.tolist()) for k, e in graph.embeddings.items()])


def run_library(ops: Sequence[Op], cfg_kwargs: Mapping[str, Any],
                monkeypatch: pytest.MonkeyPatch) -> Outcome:
    facade = pytest.importorskip("outhad_contextkit.memory.context_graph.facade")
    pytest.importorskip("networkx")
    from outhad_contextkit.memory.context_graph.backends.networkx_backend import (
        NetworkXBackend,
    )
    from outhad_contextkit.memory.context_graph.builder import IncrementalGraphBuilder
    from outhad_contextkit.memory.context_graph.config import (
        ContextGraphConfig,
        EdgeSynthesisConfig,
    )

    clock = [T]
    monkeypatch.setattr(facade, "_utcnow", lambda: clock[0])
    cg = facade.ContextGraph(ContextGraphConfig(enabled=True), NetworkXBackend())
    builder = IncrementalGraphBuilder(cg, EdgeSynthesisConfig(**cfg_kwargs))
    log: list[EdgeRow] = []
    write = cg.upsert_edge

    def recording(*args: Any, **kwargs: Any) -> Any:
        edge = write(*args, **kwargs)
        log.append(edge_row(edge))
        return edge

    cg.upsert_edge = recording
    calls: list[list[EdgeRow]] = []
    for op in ops:
        clock[0] = op.now
        log.clear()
        args = dict(op.args)
        if op.kind == "create":
            builder.on_memory_created(op.memory_id, args.pop("text"), created_at=op.now, **args)
        elif op.kind == "update":
            # Memory.update passes the memory's own id when the text changed.
            builder.on_memory_updated(op.memory_id, args.pop("text"),
                                      prev_version_id=op.memory_id, **args)
        else:
            builder.on_memory_deleted(op.memory_id, hard=False)
        calls.append(list(log))
    backend = cg.backend
    return Outcome(calls, [edge_row(e) for e in backend.all_edges()],
                   [node_row(n) for n in backend.iter_nodes()],
                   [(k, list(v)) for k, v in backend.iter_embeddings()])


# Exact duplicates make tied similarities; (0.3, 0.9, 0) has a cosine with itself above 1.
BASE_VECTORS = [(1.0, 0.0, 0.0), (0.9, 0.1, 0.0), (0.8, 0.6, 0.0), (0.6, 0.8, 0.0),
                (0.0, 1.0, 0.0), (0.5, 0.5, 0.7), (0.1, 0.2, 0.9), (0.3, 0.9, 0.0)]
URLS = ["https://ex.com/a", "http://ex.com/b", "HTTPS://Ex.com/c", "https://ex.com/a?x=1"]
URL_FORMS: list[Callable[[str], str]] = [
    lambda u: f"see {u}", lambda u: f"[link]({u}) more", lambda u: f"({u})",
    lambda u: f"[{u}]", lambda u: f"{u}, then {u}.",
]
GAPS = [0, 1, 60, 600, 1799, 1800, 1801, 2400, 7200, -300]


def random_embedding(rng: random.Random) -> list[float] | None:
    r = rng.random()
    if r < 0.05:
        return None
    if r < 0.08:
        return []
    if r < 0.10:
        return [0.0, 0.0, 0.0]
    if r < 0.12:
        return [1.0, 0.0]                               # another length: cosine 0
    base = rng.choice(BASE_VECTORS)
    if r < 0.45:
        return list(base)
    return [x + rng.uniform(-0.1, 0.1) for x in base]


def random_payload(rng: random.Random, text: str, user: str | None, agent: str | None,
                   run: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"data": text, "user_id": user, "agent_id": agent, "run_id": run}
    if rng.random() < 0.3:
        payload["tenant_id"] = rng.choice(["t1", "t2"])
    if rng.random() < 0.1:
        payload["sub_tenant_id"] = rng.choice(["s1", "s2"])
    for key in ("doc_id", "document_id", "source_id", "source_url", "url"):
        if rng.random() < 0.12:
            payload[key] = rng.choice([*URLS, "doc-1", "doc-2", "", 7])
    return payload


def random_text(rng: random.Random, i: int) -> str:
    parts = [f"memory {i}"]
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        parts.append(rng.choice(URL_FORMS)(rng.choice(URLS)))
    return " ".join(parts)


def random_ops(seed: int, n_created: int = 60) -> list[Op]:
    rng = random.Random(seed)
    ops: list[Op] = []
    now = T
    created: list[str] = []
    owners: dict[str, tuple[str | None, str | None, str | None]] = {}
    i = 0
    while i < n_created:
        now += timedelta(seconds=rng.choice(GAPS))
        r = rng.random()
        if created and r < 0.15:
            memory_id = rng.choice(created)
            user, agent, run = owners[memory_id]
            if rng.random() < 0.2:                      # hook args that differ from the node
                user, agent = rng.choice(["u1", "u2"]), rng.choice([None, "ag"])
            text = random_text(rng, i) if rng.random() < 0.7 else f"memory {memory_id}"
            payload = {} if rng.random() < 0.3 else random_payload(rng, text, user, agent, run)
            args: dict[str, Any] = dict(text=text, user_id=user, agent_id=agent, run_id=run,
                                        metadata=payload, embedding=random_embedding(rng))
            if rng.random() < 0.1:
                args["tenant_id"] = rng.choice(["t1", "t3"])
            ops.append(Op("update", memory_id, now, args))
        elif r < 0.2:
            ops.append(Op("delete", rng.choice([*created, "never-added"]), now))
        else:
            # Now and then the same id again, as a backfill would.
            memory_id = rng.choice(created) if created and r < 0.23 else f"m{i:02d}"
            user = rng.choice(["u1", "u1", "u2", None, ""])
            agent = rng.choice([None, None, "ag"])
            run = rng.choice(["r1", "r2", None])
            text = random_text(rng, i)
            args = dict(text=text, user_id=user, agent_id=agent, run_id=run,
                        metadata=random_payload(rng, text, user, agent, run),
                        embedding=random_embedding(rng))
            if rng.random() < 0.1:
                args["tenant_id"] = rng.choice(["t1", "t3"])
                args["sub_tenant_id"] = rng.choice([None, "s1"])
            ops.append(Op("create", memory_id, now, args))
            if memory_id not in owners:
                owners[memory_id] = (user, agent, run)
                created.append(memory_id)
            i += 1
    return ops


CONFIGS: list[dict[str, Any]] = [
    {},
    {"topic_top_k": 2, "topic_min_similarity": 0.9, "reply_to_window_seconds": 600},
    {"topic_top_k": 50, "topic_min_similarity": 0.0},
    {"enable_reply_to": False, "enable_document_link": False},
    {"enable_topic_similar": False, "enable_temporal_next": False, "topic_top_k": 1},
]


@pytest.mark.parity
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cfg_kwargs", CONFIGS, ids=lambda c: ",".join(c) or "defaults")
def test_same_edges_as_library(seed: int, cfg_kwargs: dict[str, Any],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    ops = random_ops(seed)
    ours = run_engine(ops, cfg_kwargs)
    theirs = run_library(ops, cfg_kwargs, monkeypatch)
    for op, mine, lib in zip(ops, ours.calls, theirs.calls, strict=True):
        assert mine == lib, f"{op.kind} {op.memory_id} at {op.now}"
    assert ours.edges == theirs.edges
    assert ours.nodes == theirs.nodes
    assert ours.embeddings == theirs.embeddings
    # The sequence must exercise every enabled edge type, or the test proves little.
    cfg = EdgesConfig(**cfg_kwargs)
    enabled = {t for t, on in [("REPLY_TO", cfg.enable_reply_to),
                               ("TEMPORAL_NEXT", cfg.enable_temporal_next),
                               ("DOCUMENT_LINK", cfg.enable_document_link),
                               ("TOPIC_SIMILAR", cfg.enable_topic_similar)] if on}
    assert {row[2] for row in theirs.edges} == enabled


@pytest.mark.parity
def test_example_h_matches_library(monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = build_example_h()
    ops = []
    for memory_id, minutes, user, agent, run, text, extra in [
        ("a1", 0, "u1", None, "r1", f"plan at {URL}", {}),
        ("a2", 10, "u1", None, "r1", f"see ({URL})", {}),
        ("a3", 50, "u1", None, "r1", "no ref", {}),
        ("b1", 51, "u2", None, "r1", f"also {URL}", {}),
        ("a4", 52, "u1", "ag", None, "doc", {"doc_id": URL}),
    ]:
        payload = {"data": text, "user_id": user, "agent_id": agent, "run_id": run, **extra}
        ops.append(Op("create", memory_id, T + timedelta(minutes=minutes),
                      dict(text=text, user_id=user, agent_id=agent, run_id=run,
                           metadata=payload, embedding=H_VECTORS[memory_id])))
    theirs = run_library(ops, {}, monkeypatch)
    assert theirs.edges == [edge_row(e) for e in s.graph.edges()]
    assert [row[3] for row in theirs.edges if row[2] == "TOPIC_SIMILAR"] == [H_TOPIC]
