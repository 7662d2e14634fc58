"""QdrantIndex against a brute-force NumPy cosine oracle, in memory and on disk."""

from __future__ import annotations

import doctest
import uuid

import numpy as np
import pytest

from msprlab.datasets import dense_index
from msprlab.datasets.dense_index import MEMORY_ID_KEY, QdrantIndex, point_id
from msprlab.engine.search import SearchRequest, effective_filters, vector_filters

DIM = 16
N = 240
USERS = ("alice", "bob", "carol")


class BruteForceIndex:
    """The oracle: exact cosine in float64, payload equality filters, best first."""

    def __init__(self, ids, vectors, payloads):
        v = np.asarray(vectors, dtype=np.float64)
        self.ids, self.payloads = list(ids), list(payloads)
        self.unit = v / np.linalg.norm(v, axis=1, keepdims=True)

    def search(self, vector, k, filters=None):
        q = np.asarray(vector, dtype=np.float64)
        scores = self.unit @ (q / np.linalg.norm(q))
        keep = [i for i, p in enumerate(self.payloads)
                if all(key in p and p[key] == value for key, value in (filters or {}).items())]
        ranked = sorted(keep, key=lambda i: -scores[i])
        if len(ranked) > k:  # the oracle is only trusted where the k-th and (k+1)-th differ
            gap = scores[ranked[k - 1]] - scores[ranked[k]]
            assert gap > 1e-5, f"near-tie at rank {k} (gap {gap:.2e}); pick another seed"
        return [(self.ids[i], float(scores[i])) for i in ranked[:k]]


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(20240601)
    ids = [f"mem-{i:04d}" for i in range(N)]
    vectors = rng.normal(size=(N, DIM))
    payloads = [{"user_id": USERS[i % 3], "agent_id": f"agent-{i % 2}", "tenant_id": "acme",
                 "pinned": bool(i % 5 == 0), "bucket": i % 4, "data": f"memory {i}"}
                for i in range(N)]
    queries = rng.normal(size=(8, DIM))
    return ids, vectors, payloads, queries


FILTERS = [None, {}, {"user_id": "alice"}, {"user_id": "bob", "agent_id": "agent-1"},
           {"pinned": True}, {"bucket": 2, "tenant_id": "acme"}]


def assert_same_results(got, expected):
    assert [m for m, _ in got] == [m for m, _ in expected]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=0, atol=1e-6)


@pytest.fixture(scope="module", params=["memory", "path"])
def index(request, tmp_path_factory, corpus):
    """Built once per mode and only read by the tests that use it."""
    ids, vectors, payloads, _ = corpus
    where = ({"location": ":memory:"} if request.param == "memory"
             else {"path": tmp_path_factory.mktemp("qdrant")})
    with QdrantIndex(dim=DIM, **where) as idx:
        idx.upsert(ids, vectors, payloads)
        yield idx


@pytest.mark.parametrize("filters", FILTERS, ids=str)
def test_top_k_matches_the_brute_force_oracle(index, corpus, filters):
    ids, vectors, payloads, queries = corpus
    oracle = BruteForceIndex(ids, vectors, payloads)
    for q in queries:
        for k in (1, 10, 37):
            assert_same_results(index.search(q, k, filters), oracle.search(q, k, filters))


def test_owner_filters_restrict_results(index, corpus):
    ids, _, payloads, queries = corpus
    owner = dict(zip(ids, payloads, strict=True))
    hits = index.search(queries[0], 50, {"user_id": "alice"})
    assert len(hits) == 50
    assert {owner[m]["user_id"] for m, _ in hits} == {"alice"}
    assert index.search(queries[0], 5, {"user_id": "mallory"}) == []
    assert index.search(queries[0], 5, {"user_id": "alice", "agent_id": "agent-9"}) == []
    everyone = index.search(queries[0], N + 10)
    assert len(everyone) == N and [s for _, s in everyone] == sorted(
        (s for _, s in everyone), reverse=True)


def test_engine_vector_filters_feed_the_index(index, corpus):
    ids, vectors, payloads, queries = corpus
    request = SearchRequest(query="q", seeds=[], user_id="carol",
                            filters={"tenant_id": "acme", "confidence": 0.9,
                                     "metadata": {"role": "analyst"}, "pinned": True})
    filters = vector_filters(effective_filters(request))
    assert filters == {"tenant_id": "acme", "pinned": True, "user_id": "carol"}
    hits = index.search(queries[1], 20, filters)
    oracle = BruteForceIndex(ids, vectors, payloads)
    assert_same_results(hits, oracle.search(queries[1], 20, filters))
    owner = dict(zip(ids, payloads, strict=True))
    assert all(owner[m]["user_id"] == "carol" and owner[m]["pinned"] for m, _ in hits)


def test_reopening_an_on_disk_index_gives_the_same_results(tmp_path, corpus):
    ids, vectors, payloads, queries = (x[:100] for x in corpus)
    path = tmp_path / "beside-the-duckdb-file" / "qdrant"
    with QdrantIndex(dim=DIM, path=path) as first:
        first.upsert(ids, vectors, payloads)
        before = [first.search(q, 10, {"user_id": "bob"}) for q in queries]
    with QdrantIndex(dim=DIM, path=path) as again:
        assert again.count() == 100
        after = [again.search(q, 10, {"user_id": "bob"}) for q in queries]
    # Same ids in the same order; scores only to float32 rounding, since loading
    # normalises the stored unit vectors once more.
    for got, expected in zip(after, before, strict=True):
        assert_same_results(got, expected)
    with pytest.raises(ValueError, match=r"holds 16-dim Cosine vectors, expected 8-dim Cosine; "
                                         r"open it with dim=16"):
        QdrantIndex(dim=8, path=path)


def test_upsert_batches_report_progress_and_replace_by_memory_id(corpus):
    ids, vectors, payloads, _ = corpus
    seen = []
    with QdrantIndex(dim=DIM, location=":memory:", batch_size=100) as idx:
        idx.upsert(ids, vectors, payloads, progress=lambda done, total: seen.append((done, total)))
        assert seen == [(100, N), (200, N), (240, N)]
        assert idx.count() == N
        target = np.zeros(DIM)
        target[0] = 1.0
        idx.upsert([ids[7]], target[None, :], [{"user_id": "zed"}])
        assert idx.count() == N
        assert idx.search(target, 1, {"user_id": "zed"}) == [(ids[7], pytest.approx(1.0, abs=1e-6))]
        assert idx.search(target, 1, {"user_id": USERS[7 % 3], MEMORY_ID_KEY: ids[7]}) == []


def test_point_ids_are_deterministic_uuids():
    assert point_id("mem-0001") == point_id("mem-0001") != point_id("mem-0002")
    assert uuid.UUID(point_id("mem-0001")).version == 5


@pytest.mark.parametrize(("call", "exception", "message"), [
    (lambda i: i.upsert(["a", "b"], np.ones((2, DIM)), [{}]), ValueError,
     r"2 ids but 1 payloads"),
    (lambda i: i.upsert(["a"], np.ones((1, DIM + 1)), [{}]), ValueError,
     r"shape \(1, 16\) for 1 ids in a 16-dim index, got \(1, 17\)"),
    (lambda i: i.upsert(["a", "b"], np.array([[1.0] * DIM, [np.nan] * DIM]), [{}, {}]),
     ValueError, r"vectors\[1\] has a NaN or infinite value"),
    (lambda i: i.upsert(["a", ""], np.ones((2, DIM)), [{}, {}]), ValueError,
     r"ids\[1\] must be a non-empty str, got ''"),
    (lambda i: i.upsert(["a", 7], np.ones((2, DIM)), [{}, {}]), ValueError,
     r"ids\[1\] must be a non-empty str, got 7"),
    (lambda i: i.upsert(["a", "b"], np.ones((2, DIM)), [{}, {MEMORY_ID_KEY: "c"}]), ValueError,
     r"payloads\[1\]\['memory_id'\] is 'c' but ids\[1\] is 'b'"),
    (lambda i: i.search(np.ones(DIM), 0), ValueError, r"k must be an int >= 1.*got 0"),
    (lambda i: i.search(np.ones(DIM + 1), 3), ValueError,
     r"vector must be finite with shape \(16,\).*got shape \(17,\)"),
    (lambda i: i.search(np.ones(DIM), 3, {"user_id": {"$in": ["a"]}}), TypeError,
     r"filter 'user_id' must be a str, int or bool, got dict; pass the filters through "
     r"msprlab.engine.search.vector_filters"),
])
def test_bad_inputs_are_reported_and_write_nothing(call, exception, message):
    with QdrantIndex(dim=DIM, location=":memory:", batch_size=1) as idx:
        with pytest.raises(exception, match=message):
            call(idx)
        assert idx.count() == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dim": DIM}, r"exactly one of path=, location=':memory:' or url=, got none"),
    ({"dim": DIM, "location": ":memory:", "url": "http://localhost:6333"},
     r"exactly one of .* got \['location', 'url'\]"),
    ({"dim": 0, "location": ":memory:"}, r"dim must be an int >= 1, got 0"),
    ({"dim": DIM, "location": ":memory:", "batch_size": 0}, r"batch_size must be an int >= 1"),
    ({"dim": DIM, "location": ":memory:", "api_key": "k"}, r"api_key= only applies to a server"),
])
def test_bad_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QdrantIndex(**kwargs)


def test_docstring_examples_run():
    result = doctest.testmod(dense_index, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
