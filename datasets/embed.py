"""Text embedders behind one interface: TF-IDF + SVD by default, WordLlama and local
sentence-transformers models as options. None of them touches the network.

Every embedder returns float32 rows of unit L2 norm, except that a text with no known
token maps to the zero row (there is no direction to normalise); Qdrant's cosine scores
such a row 0 against everything.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from sklearn.decomposition import TruncatedSVD
from sklearn.exceptions import NotFittedError
from sklearn.feature_extraction.text import TfidfVectorizer
from threadpoolctl import threadpool_limits

__all__ = [
    "EMBEDDERS",
    "Embedder",
    "SentenceTransformerEmbedder",
    "TfidfSvdEmbedder",
    "WordLlamaEmbedder",
    "make_embedder",
    "normalize_rows",
]

# Unicode word tokens, single characters included ("I", "a", digits, CJK characters).
_WORD_TOKENS = r"(?u)\b\w+\b"


@runtime_checkable
class Embedder(Protocol):
    """Port: maps texts to float32 rows of shape (n, dim) with unit L2 norm."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm in float64, returned as float32; zero rows stay zero."""
    x64 = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x64, axis=1, keepdims=True)
    out: np.ndarray = np.divide(x64, norms, out=np.zeros_like(x64), where=norms > 0)
    return out.astype(np.float32)


def _text_list(texts: Sequence[str], *, what: str) -> list[str]:
    # A bare str is a Sequence[str] too; embedding its characters one by one is never meant.
    if isinstance(texts, str):
        raise TypeError(f"{what} takes a sequence of texts, got one str; wrap it: [text]")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{what}: texts[{i}] must be a str, got {type(t).__name__}")
    return out


def _positive_int(value: object, *, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {value!r}")
    return value


class TfidfSvdEmbedder:
    """TF-IDF (sublinear tf, unicode word tokens) then TruncatedSVD, fitted on the corpus.

    Deterministic: the same corpus and seed give the same bytes. When the corpus has fewer
    texts or terms than `dim`, the SVD keeps what it can and the rest of each row is zero,
    so `dim` is always the width of the output.

    Examples
    --------
    >>> e = TfidfSvdEmbedder(dim=4).fit(["red apple", "green apple", "red car"])
    >>> e.embed(["red apple"]).shape
    (1, 4)
    """

    name = "tfidf-svd"

    def __init__(self, dim: int = 256, seed: int = 0) -> None:
        self.dim = _positive_int(dim, what="TfidfSvdEmbedder.dim")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"TfidfSvdEmbedder.seed must be an int, got {seed!r}")
        self.seed = seed
        self._vectorizer: TfidfVectorizer | None = None
        self._svd: TruncatedSVD | None = None

    def fit(self, corpus: Sequence[str]) -> TfidfSvdEmbedder:
        """Fit the vocabulary, idf weights and SVD on `corpus`; returns self."""
        texts = _text_list(corpus, what="TfidfSvdEmbedder.fit")
        vectorizer = TfidfVectorizer(sublinear_tf=True, token_pattern=_WORD_TOKENS,
                                     dtype=np.float64)
        try:
            tfidf = vectorizer.fit_transform(texts)
        except ValueError as e:  # sklearn: "empty vocabulary; perhaps the documents ..."
            raise ValueError(f"TfidfSvdEmbedder.fit needs at least one text with a word token, "
                             f"got {len(texts)} texts without any") from e
        n_texts, n_terms = tfidf.shape
        # The SVD cannot have more components than texts or terms; the missing ones would
        # carry nothing, so they stay zero columns. sklearn needs two terms at least.
        svd = None
        if n_terms >= 2:
            k = min(self.dim, n_texts, n_terms)
            svd = TruncatedSVD(n_components=k, algorithm="randomized", random_state=self.seed)
            # One BLAS thread: the bytes then do not depend on the core count, and a busy
            # two-core machine runs the SVD about five times faster than with two threads.
            with threadpool_limits(limits=1, user_api="blas"):
                svd.fit(tfidf)
        self._vectorizer, self._svd = vectorizer, svd
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> float32 array, shape (n_texts, dim), rows of unit norm (or zero)."""
        items = _text_list(texts, what="TfidfSvdEmbedder.embed")
        if self._vectorizer is None:
            raise NotFittedError("TfidfSvdEmbedder is not fitted: call fit(corpus) first")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        tfidf = self._vectorizer.transform(items)
        out = np.zeros((len(items), self.dim), dtype=np.float64)
        if self._svd is not None:
            reduced = self._svd.transform(tfidf)
            out[:, :reduced.shape[1]] = reduced
        else:  # one-term vocabulary: the tf-idf column itself is the only direction
            out[:, :1] = tfidf.toarray()
        return normalize_rows(out)


def _import_wordllama() -> tuple[Any, Any]:
    """wordllama and its model registry. Its import calls `logging.basicConfig(level=INFO)`
    on the root logger, which would print every library's INFO lines (LoCoMo's loader
    notes) on the user's terminal: the root logger's handlers and level are put back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
        from wordllama.config import WordLlamaModels
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return wordllama, WordLlamaModels


class WordLlamaEmbedder:
    """WordLlama static token embeddings, average-pooled (PyPI `wordllama`, weights shipped).

    The loader looks in the package folder, then in `cache_dir`, then downloads. Its
    package-folder lookup finds the weights but not the tokenizer (it looks under
    `tokenizer/`, the wheel ships `tokenizers/`), so `cache_dir` is pointed at the package
    folder itself and downloads are disabled: both files resolve there, offline.

    `dim` truncates the shipped 256-dim weights (Matryoshka): 64, 128 or 256.
    """

    name = "wordllama"
    SHIPPED_DIM = 256

    def __init__(self, dim: int = 256, config: str = "l2_supercat", batch_size: int = 256) -> None:
        self.dim = _positive_int(dim, what="WordLlamaEmbedder.dim")
        self.batch_size = _positive_int(batch_size, what="WordLlamaEmbedder.batch_size")
        try:
            wordllama, WordLlamaModels = _import_wordllama()
        except ImportError as e:
            raise ImportError("WordLlamaEmbedder requires wordllama, a dependency of "
                              "msprlab: reinstall it (make setup, or pip install -e .)") from e
        known = WordLlamaModels.list_configs()
        if config not in known:
            raise ValueError(f"unknown WordLlama config {config!r}; known: {', '.join(known)}")
        uri = getattr(WordLlamaModels, config)
        offline_dims = [d for d in uri.available_dims if d <= self.SHIPPED_DIM]
        if self.dim not in offline_dims:
            raise ValueError(f"WordLlamaEmbedder.dim must be one of {offline_dims} (the wheel "
                             f"ships {self.SHIPPED_DIM}-dim weights), got {self.dim}")
        package_dir = Path(wordllama.__file__).parent
        try:
            self._model = wordllama.WordLlama.load(
                config=config, cache_dir=package_dir, dim=self.SHIPPED_DIM,
                trunc_dim=None if self.dim == self.SHIPPED_DIM else self.dim,
                disable_download=True)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"WordLlama config {config!r} has no weights or tokenizer shipped in "
                f"{package_dir}; only configs whose files the wheel ships load offline") from e
        self.config = config

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> float32 array, shape (n_texts, dim), rows of unit norm (or zero)."""
        items = _text_list(texts, what="WordLlamaEmbedder.embed")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        # norm=False: the library divides by the norm unguarded (NaN for an empty text).
        raw = self._model.embed(items, norm=False, return_np=True, batch_size=self.batch_size)
        return normalize_rows(raw)


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local folder; never looks on the Hub."""

    name = "sentence-transformers"

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int = 64) -> None:
        self.path = Path(path).expanduser()
        self.batch_size = _positive_int(batch_size, what="SentenceTransformerEmbedder.batch_size")
        if not self.path.is_dir():
            raise FileNotFoundError(
                f"SentenceTransformerEmbedder: no model folder at {self.path}; pass the path of "
                "a model saved locally (SentenceTransformer.save), msprlab downloads nothing")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ImportError("SentenceTransformerEmbedder requires sentence-transformers: "
                              "pip install sentence-transformers") from e
        self._model = SentenceTransformer(str(self.path), device=device, local_files_only=True)
        probe = self._encode(["dimension probe"])
        self.dim = int(probe.shape[1])

    def _encode(self, items: list[str]) -> np.ndarray:
        raw = self._model.encode(items, batch_size=self.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=False, show_progress_bar=False)
        return np.asarray(raw).reshape(len(items), -1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> float32 array, shape (n_texts, dim), rows of unit norm (or zero)."""
        items = _text_list(texts, what="SentenceTransformerEmbedder.embed")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize_rows(self._encode(items))


EMBEDDERS: dict[str, Callable[..., Embedder]] = {
    TfidfSvdEmbedder.name: TfidfSvdEmbedder,
    WordLlamaEmbedder.name: WordLlamaEmbedder,
    SentenceTransformerEmbedder.name: SentenceTransformerEmbedder,
}


def make_embedder(name: str, **kwargs: Any) -> Embedder:
    """The embedder registered as `name`, built with `kwargs`.

    A TF-IDF embedder still needs `fit(corpus)` before `embed`.
    """
    factory = EMBEDDERS.get(name)
    if factory is None:
        raise ValueError(f"unknown embedder {name!r}; known: {', '.join(sorted(EMBEDDERS))}")
    accepted = set(inspect.signature(factory).parameters)
    if unknown := sorted(kwargs.keys() - accepted):
        raise TypeError(f"embedder {name!r}: unknown arguments {unknown}; "
                        f"accepted: {sorted(accepted)}")
    return factory(**kwargs)
