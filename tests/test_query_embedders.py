"""`--query-embedder`: a shipped embedder, an importable callable (`module:function`) and an
OpenAI-compatible HTTP endpoint, tested against a stub server started here on loopback
(`tests/fixtures/application/embedding_server.py`)."""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from msprlab.datasets.embed import WordLlamaEmbedder, normalize_rows
from msprlab.datasets.embedders import (
    CallableEmbedder,
    EmbedderError,
    EmbedderOptions,
    HttpEmbedder,
    query_embedder,
)
from msprlab.datasets.store import load_dataset, manifest
from msprlab.experiments.cli import main

APPLICATION = Path(__file__).parent / "fixtures" / "application"
WORLD = Path(__file__).parent / "fixtures" / "contextkit_world"
TEXTS = ["When did Caroline go to the support group?", "pottery workshop", "", "a b c d"]


@pytest.fixture
def app(monkeypatch):
    """The application's folder on sys.path (as PYTHONPATH would put it)."""
    monkeypatch.syspath_prepend(str(APPLICATION))
    import app_embedding
    import embedding_server
    return app_embedding, embedding_server


@pytest.fixture
def stub(app):
    servers = []

    def start(**kwargs):
        server = app[1].serve(**kwargs)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _fast(**kwargs) -> EmbedderOptions:
    return EmbedderOptions(**{"model": "app-embedding", "backoff": 0.01, **kwargs})


def _message(exc_info) -> str:
    return " ".join(str(exc_info.value).split())


# ---- module:function -------------------------------------------------------------------
def test_a_callable_embeds_as_the_application_does(app) -> None:
    embedder = query_embedder("app_embedding:embed")
    assert isinstance(embedder, CallableEmbedder) and embedder.dim == app[0].DIM
    expected = normalize_rows(np.array(app[0].embed(TEXTS)))
    np.testing.assert_array_equal(embedder.embed(TEXTS), expected)
    assert embedder.embed([]).shape == (0, app[0].DIM)
    # the recipe (a dataset digest's part) names the target and the module's bytes
    assert embedder.target == "app_embedding:embed" and len(embedder.source_sha256) == 16


@pytest.mark.parametrize(("spec", "needle"), [
    ("no_such_module_xyz:embed", "cannot import 'no_such_module_xyz'"),
    ("app_embedding:nothing", "'app_embedding' has no callable 'nothing'"),
    ("app_embedding:DIM", "'app_embedding' has no callable 'DIM'"),
    (":embed", "expected module:function"),
])
def test_a_callable_that_cannot_be_found_is_named(app, spec, needle) -> None:
    with pytest.raises(EmbedderError) as info:
        query_embedder(spec)
    assert needle in _message(info) and spec in _message(info)


def test_a_callable_that_fails_or_returns_no_vectors_is_named(app, monkeypatch) -> None:
    module = type(sys)("broken_embedding")
    module.raises = lambda texts: 1 / 0
    module.flat = lambda texts: [1.0] * len(texts)
    module.short = lambda texts: [[1.0, 2.0]] * (len(texts) - 1)
    module.nan = lambda texts: [[float("nan"), 1.0]] * len(texts)
    monkeypatch.setitem(sys.modules, "broken_embedding", module)
    for name, needle in (("raises", "raised ZeroDivisionError"),
                         ("flat", "returned shape (1,) for 1 texts"),
                         ("short", "returned shape (0,) for 1 texts"),
                         ("nan", "NaN or infinite")):
        with pytest.raises(EmbedderError) as info:
            query_embedder(f"broken_embedding:{name}")
        assert needle in _message(info), name


# ---- the HTTP endpoint -----------------------------------------------------------------
def test_the_endpoint_gives_the_callables_vectors_in_batches(app, stub, monkeypatch) -> None:
    monkeypatch.setenv("STUB_KEY", "sk-test")
    server = stub(key="sk-test")
    embedder = query_embedder(server.url, _fast(key_env="STUB_KEY", batch_size=3))
    assert isinstance(embedder, HttpEmbedder) and embedder.dim == app[0].DIM
    texts = TEXTS * 2  # 8 texts: batches of 3, 3, 2 after the one-text probe
    np.testing.assert_array_equal(embedder.embed(texts), query_embedder(
        "app_embedding:embed").embed(texts))
    assert server.batches == [1, 3, 3, 2]
    # the key is never part of what the manifest records
    assert "sk-test" not in repr(vars(embedder)).replace("'_key': 'sk-test'", "")
    assert {k for k in vars(embedder) if not k.startswith("_")} == {"url", "model", "dim"}


def test_the_full_route_is_taken_as_given(stub) -> None:
    server = stub()
    assert query_embedder(server.url + "/embeddings/", _fast()).url == server.url + "/embeddings"


def test_busy_answers_are_retried(stub) -> None:
    server = stub(fail="busy")
    assert query_embedder(server.url, _fast(retries=2)).dim > 0
    assert server.requests == 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("setup", "options", "needle"), [
    ({"key": "sk-right"}, {"key_env": "STUB_KEY"}, "refused the key in $STUB_KEY (HTTP 401: "
                                                   "Incorrect API key provided)"),
    ({"key": "sk-right"}, {}, "refused no key (name the variable holding one with "
                              "--query-embedder-key-env VAR) (HTTP 401"),
    ({}, {"model": "nope"}, "rejected the request (HTTP 400: model 'nope' does not exist)"),
    ({"fail": "garbage"}, {}, "the answer is not an OpenAI embeddings response"),
    ({"fail": "slow"}, {"timeout": 0.3, "retries": 1}, "no answer within 0.3 s (2 tries); "
                                                       "raise --query-embedder-timeout"),
    ({"fail": "busy"}, {"retries": 1}, "HTTP 503: overloaded after 2 tries"),
])
def test_a_failing_endpoint_is_named_with_the_fix(stub, monkeypatch, setup, options,
                                                  needle) -> None:
    monkeypatch.setenv("STUB_KEY", "sk-wrong")
    server = stub(**setup)
    with pytest.raises(EmbedderError) as info:
        query_embedder(server.url, _fast(**options))
    assert needle in _message(info) and server.url in _message(info)


def test_an_endpoint_without_the_route_or_server_is_named(stub) -> None:
    server = stub()
    with pytest.raises(EmbedderError) as info:
        query_embedder(server.url.replace("/v1", "/v2"), _fast())
    assert "no embeddings route there (HTTP 404" in _message(info)
    with pytest.raises(EmbedderError) as info:
        query_embedder(f"http://127.0.0.1:{_closed_port()}/v1", _fast(retries=0))
    assert "cannot reach the endpoint" in _message(info)


def test_an_endpoint_that_changes_dimension_is_refused(stub) -> None:
    embedder = query_embedder(stub(fail="dimension").url, _fast())
    with pytest.raises(EmbedderError) as info:
        embedder.embed(TEXTS)
    assert f"returned {embedder.dim - 1}-dim vectors, {embedder.dim}-dim before" in _message(info)


def test_endpoint_settings_are_checked(monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    for options, needle in (({"model": None}, "needs the model name: --query-embedder-model"),
                            ({"key_env": "NO_SUCH_KEY_VAR"},
                             "--query-embedder-key-env NO_SUCH_KEY_VAR: the environment "
                             "variable is not set"),
                            ({"batch_size": 0}, "batch size >= 1")):
        with pytest.raises(EmbedderError) as info:
            query_embedder("http://127.0.0.1:9/v1", _fast(**options))
        assert needle in _message(info)


# ---- through `msprlab ingest contextkit` -------------------------------------------------
def _ingest(store: Path, *extra: str) -> int:
    """Ingest a copy of the world (opening a Qdrant folder locks it)."""
    world = store.parent / f"{store.stem}-world"
    if not world.exists():
        shutil.copytree(WORLD, world)
    return main(["ingest", "contextkit", "--feedback-db", str(world / "feedback_events.db"),
                 "--qdrant-path", str(world / "qdrant"), "--graph-jsonl",
                 str(world / "context_graph.jsonl"), "--store", str(store), *extra])


def test_ingest_through_an_endpoint_stores_productions_query_vectors(stub, tmp_path,
                                                                     monkeypatch) -> None:
    """A stub serving WordLlama (what made this world's memory vectors) over HTTP gives the
    same query vectors as the shipped embedder by name, and the manifest names the
    endpoint without its key."""
    monkeypatch.setenv("STUB_KEY", "sk-secret")
    wordllama = WordLlamaEmbedder()
    server = stub(key="sk-secret", model="wordllama-l2", function=wordllama.embed)
    by_http, by_name = tmp_path / "http.duckdb", tmp_path / "name.duckdb"
    assert _ingest(by_http, "--query-embedder", server.url, "--query-embedder-model",
                   "wordllama-l2", "--query-embedder-key-env", "STUB_KEY",
                   "--query-embedder-batch", "16") == 0
    assert _ingest(by_name, "--query-embedder", "wordllama") == 0
    a, b = load_dataset(by_http), load_dataset(by_name)
    assert a.query_embeddings.height == a.queries.height > 16
    np.testing.assert_allclose(np.array(a.query_embeddings["vector"].to_list()),
                               np.array(b.query_embeddings["vector"].to_list()), atol=1e-6)
    recorded = manifest(by_http)
    assert "openai-http" in recorded["version"] and "sk-secret" not in str(recorded)
    assert server.url + "/embeddings" in str(recorded["embedders"])


@pytest.mark.parametrize(("extra", "needle"), [
    (["--query-embedder", "app_embedding:embed"],
     "callable gives 96-dim vectors, the stored memory vectors have [256]: not the embedder "
     "that made them"),
    (["--query-embedder", "http://127.0.0.1:{port}/v1", "--query-embedder-model", "m"],
     "cannot reach the endpoint"),
    (["--query-embedder", "no_such_module_xyz:embed"],
     "cannot import 'no_such_module_xyz'"),
])
def test_ingest_refuses_an_embedder_that_cannot_be_productions(app, tmp_path, capsys, extra,
                                                               needle) -> None:
    store = tmp_path / "s.duckdb"
    extra = [e.replace("{port}", str(_closed_port())) for e in extra]
    assert _ingest(store, *extra, "--query-embedder-timeout", "2") == 2
    out = capsys.readouterr()
    assert needle in " ".join((out.out + out.err).split())
    assert not store.exists()
