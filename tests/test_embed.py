"""Embedders: determinism, shapes, unit rows, offline loading and the error paths."""

from __future__ import annotations

import doctest
import logging
import socket
import sys
import types

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from msprlab.datasets.embed import (
    EMBEDDERS,
    Embedder,
    SentenceTransformerEmbedder,
    TfidfSvdEmbedder,
    WordLlamaEmbedder,
    make_embedder,
    normalize_rows,
)

CORPUS = [
    "Caroline went to the LGBTQ support group on Sunday.",
    "Melanie painted a sunrise over the lake last year.",
    "Caroline is researching adoption agencies.",
    "Melanie ran a charity race for mental health.",
    "The kids loved the pottery workshop at camp.",
    "Caroline moved from Sweden four years ago.",
    "Melanie and her family went camping in the mountains.",
    "Straße, café and naïve are unicode words too.",
    "I went to a concert: 3 bands, 1 night.",
] * 3 + [f"note {i} about topic {i % 7} and detail {i * 13 % 11}" for i in range(60)]


def assert_unit_or_zero_rows(x: np.ndarray) -> None:
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    ok = np.isclose(norms, 1.0, atol=1e-6) | (norms == 0.0)
    assert ok.all(), f"rows {np.flatnonzero(~ok)[:5]} have norms {norms[~ok][:5]}"


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:] if len(args) > 1 else args}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# --- helpers -------------------------------------------------------------------------------

def test_normalize_rows_gives_unit_rows_and_keeps_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-30, 0.0]])
    out = normalize_rows(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([[0.6, 0.8], [0, 0], [1, 0]], dtype=np.float32))


# --- TF-IDF + SVD -------------------------------------------------------------------------

def test_tfidf_svd_is_byte_identical_across_fits():
    queries = ["Caroline adoption", "camping with family", "nothing known zzz"]
    a = TfidfSvdEmbedder(dim=16, seed=3).fit(CORPUS).embed(queries)
    b = TfidfSvdEmbedder(dim=16, seed=3).fit(list(CORPUS)).embed(queries)
    assert a.tobytes() == b.tobytes()


def test_tfidf_svd_shape_dtype_and_unit_rows():
    e = TfidfSvdEmbedder(dim=16).fit(CORPUS)
    x = e.embed([*CORPUS, "", "qqqq zzzz"])
    assert x.shape == (len(CORPUS) + 2, 16) and x.dtype == np.float32
    assert_unit_or_zero_rows(x)
    assert np.linalg.norm(x[:-2], axis=1).min() > 0.99  # every corpus text has a direction
    np.testing.assert_array_equal(x[-2:], 0.0)  # no known token: the zero row
    assert e.embed([]).shape == (0, 16)


def test_tfidf_svd_places_related_texts_closer():
    e = TfidfSvdEmbedder(dim=16).fit(CORPUS)
    q, near, far = e.embed(["Caroline adoption agencies", CORPUS[2], CORPUS[4]])
    assert q @ near > q @ far + 0.3


def test_tfidf_svd_keeps_dim_on_a_corpus_smaller_than_dim():
    e = TfidfSvdEmbedder(dim=32).fit(["red apple", "green apple", "red car"])
    x = e.embed(["red apple", "apple"])
    assert x.shape == (2, 32)
    assert_unit_or_zero_rows(x)
    np.testing.assert_array_equal(x[:, 3:], 0.0)  # three texts: at most three components
    one_term = TfidfSvdEmbedder(dim=4).fit(["a a", "a"]).embed(["a", "b"])
    np.testing.assert_array_equal(one_term, np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32))


def test_tfidf_svd_tokens_are_unicode_words_single_characters_included():
    e = TfidfSvdEmbedder(dim=8).fit(CORPUS)
    vocabulary = e._vectorizer.vocabulary_
    assert {"straße", "café", "naïve", "i", "a", "3"} <= vocabulary.keys()


@pytest.mark.parametrize(("build", "exception", "message"), [
    (lambda: TfidfSvdEmbedder(dim=0), ValueError, r"dim must be an int >= 1, got 0"),
    (lambda: TfidfSvdEmbedder(dim=2.5), ValueError, r"dim must be an int >= 1, got 2.5"),
    (lambda: TfidfSvdEmbedder(seed="0"), ValueError, r"seed must be an int, got '0'"),
    (lambda: TfidfSvdEmbedder().fit(["", "!!"]), ValueError,
     r"needs at least one text with a word token, got 2 texts"),
    (lambda: TfidfSvdEmbedder().fit("one text"), TypeError, r"got one str; wrap it"),
    (lambda: TfidfSvdEmbedder().fit(["ok", 3]), TypeError, r"texts\[1\] must be a str, got int"),
    (lambda: TfidfSvdEmbedder().embed(["x"]), NotFittedError, r"call fit\(corpus\) first"),
])
def test_tfidf_svd_bad_inputs(build, exception, message):
    with pytest.raises(exception, match=message):
        build()


# --- registry ----------------------------------------------------------------------------

def test_make_embedder_builds_registered_embedders():
    e = make_embedder("tfidf-svd", dim=8, seed=1)
    assert isinstance(e, TfidfSvdEmbedder) and isinstance(e, Embedder)
    assert (e.name, e.dim, e.seed) == ("tfidf-svd", 8, 1)
    assert set(EMBEDDERS) == {"tfidf-svd", "wordllama", "sentence-transformers"}
    assert all(EMBEDDERS[name].name == name for name in EMBEDDERS)


def test_make_embedder_errors_name_the_registry_and_the_arguments():
    with pytest.raises(ValueError, match=r"unknown embedder 'bert'; known: sentence-transformers, "
                                         r"tfidf-svd, wordllama"):
        make_embedder("bert")
    with pytest.raises(TypeError,
                       match=r"unknown arguments \['dimm'\]; accepted: \['dim', 'seed'\]"):
        make_embedder("tfidf-svd", dimm=8)


# --- WordLlama ---------------------------------------------------------------------------

def test_wordllama_missing_package_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "wordllama", None)
    with pytest.raises(ImportError, match=r"reinstall it \(make setup"):
        WordLlamaEmbedder()


def test_no_network_fixture_bites(no_network):
    with pytest.raises(AssertionError, match="network access attempted"):
        socket.create_connection(("127.0.0.1", 9))


def test_wordllama_default_loader_would_go_online(no_network, tmp_path):
    # Why the embedder points cache_dir into the package: with any other cache_dir the
    # loader misses the shipped tokenizer and reaches for the Hub.
    wordllama = pytest.importorskip("wordllama")
    with pytest.raises(AssertionError, match="network access attempted"):
        wordllama.WordLlama.load(cache_dir=tmp_path)


def test_wordllama_loads_shipped_weights_without_network(no_network):
    pytest.importorskip("wordllama")
    e = WordLlamaEmbedder()
    texts = ["I adopted a puppy last week", "we got a new dog", "quarterly tax filing", ""]
    x = e.embed(texts)
    assert (e.name, e.dim) == ("wordllama", 256)
    assert x.shape == (4, 256) and x.dtype == np.float32
    assert_unit_or_zero_rows(x)
    np.testing.assert_array_equal(x[3], 0.0)  # no token: zero row, not NaN
    assert x[0] @ x[1] > x[0] @ x[2]
    assert e.embed(texts).tobytes() == x.tobytes()


def test_wordllama_truncates_to_a_smaller_dim_and_rejects_unshipped_dims(no_network):
    pytest.importorskip("wordllama")
    x = WordLlamaEmbedder(dim=64).embed(["hello there"])
    assert x.shape == (1, 64)
    assert_unit_or_zero_rows(x)
    with pytest.raises(ValueError, match=r"dim must be one of \[64, 128, 256\].*got 512"):
        WordLlamaEmbedder(dim=512)
    with pytest.raises(ValueError, match=r"unknown WordLlama config 'nope'; known: .*l2_supercat"):
        WordLlamaEmbedder(config="nope")


# --- sentence-transformers ---------------------------------------------------------------

def test_sentence_transformer_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no model folder at .*absent.*downloads nothing"):
        SentenceTransformerEmbedder(tmp_path / "absent")


def test_sentence_transformer_missing_package_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError, match=r"pip install sentence-transformers"):
        SentenceTransformerEmbedder(tmp_path)


def test_sentence_transformer_loads_local_files_only_and_normalises(tmp_path, monkeypatch):
    calls = {}

    class FakeModel:  # stands in for the package, which is not installed here
        def __init__(self, path, *, device, local_files_only):
            calls.update(path=path, device=device, local_files_only=local_files_only)

        def encode(self, texts, **kwargs):
            calls["encode"] = kwargs
            return np.array([[3.0, 4.0, 0.0] if t else [0.0, 0.0, 0.0] for t in texts])

    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = FakeModel
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    e = SentenceTransformerEmbedder(tmp_path, batch_size=8)
    assert calls["local_files_only"] is True and calls["path"] == str(tmp_path)
    assert calls["encode"]["normalize_embeddings"] is False and calls["encode"]["batch_size"] == 8
    x = e.embed(["a", ""])
    assert e.dim == 3 and x.dtype == np.float32
    np.testing.assert_array_equal(x, np.array([[0.6, 0.8, 0.0], [0, 0, 0]], np.float32))
    assert e.embed([]).shape == (0, 3)


def test_docstring_examples_run():
    from msprlab.datasets import embed

    result = doctest.testmod(embed)
    assert result.attempted > 0 and result.failed == 0


def test_wordllama_leaves_the_root_logger_alone():
    # wordllama's import configures the root logger at INFO; a fresh process shows whether
    # msprlab undoes it (otherwise every INFO line of every library reaches the terminal).
    import subprocess
    code = ("import logging; from msprlab.datasets.embed import make_embedder; "
            "make_embedder('wordllama'); root = logging.getLogger(); "
            "print(len(root.handlers), root.level)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["0", str(logging.WARNING)]
