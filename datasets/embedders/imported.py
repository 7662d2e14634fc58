"""An embedder that is an importable callable, `module:function`: the application's own.

The function takes a list of texts and returns one vector per text (a list of lists of
numbers or an array of shape (n, dim)). Its module is imported from `sys.path`: put the
folder holding it on `PYTHONPATH`. The module's file is hashed into the recipe, so a
changed function makes a new dataset digest.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .options import EmbedderError

__all__ = ["CallableEmbedder", "vectors_of"]

_PROBE = ["dimension probe"]


def vectors_of(found: Any, count: int, *, what: str) -> np.ndarray:
    """`found` as a float64 (count, dim) matrix of finite numbers, or EmbedderError."""
    try:
        matrix = np.asarray(found, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbedderError(f"{what} returned something that is not a list of equally long "
                            f"number vectors ({exc})") from None
    if matrix.ndim != 2 or matrix.shape[0] != count or matrix.shape[1] == 0:
        raise EmbedderError(f"{what} returned shape {matrix.shape} for {count} texts; "
                            f"expected ({count}, dim): one vector per text")
    if not np.isfinite(matrix).all():
        raise EmbedderError(f"{what} returned NaN or infinite values")
    return matrix


class CallableEmbedder:
    """`module:function` behind the `Embedder` interface (rows of unit norm, float32)."""

    name = "callable"

    def __init__(self, target: str, *, flag: str = "--query-embedder") -> None:
        module_name, _, attribute = target.partition(":")
        if not module_name or not attribute:
            raise EmbedderError(f"{flag} {target!r}: expected module:function, such as "
                                "my_app.embeddings:embed")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EmbedderError(f"{flag} {target}: cannot import {module_name!r} ({exc}); put "
                                "the folder that holds it on PYTHONPATH") from None
        except Exception as exc:  # the user's module failed while importing
            raise EmbedderError(f"{flag} {target}: importing {module_name!r} raised "
                                f"{type(exc).__name__}: {exc}") from None
        function = getattr(module, attribute, None)
        if not callable(function):
            raise EmbedderError(f"{flag} {target}: {module_name!r} has no callable "
                                f"{attribute!r}")
        self._function: Callable[[list[str]], Any] = function
        self._flag = flag
        self.target = target
        source = Path(getattr(module, "__file__", "") or "")
        self.source_sha256 = (hashlib.sha256(source.read_bytes()).hexdigest()[:16]
                              if source.is_file() else None)
        self.dim = int(self._call(_PROBE).shape[1])

    def _call(self, texts: list[str]) -> np.ndarray:
        what = f"{self._flag} {self.target}"
        try:
            found = self._function(texts)
        except Exception as exc:  # the application's code: its failure is the user's to fix
            raise EmbedderError(f"{what} raised {type(exc).__name__}: {exc}") from None
        return vectors_of(found, len(texts), what=what)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> float32 (n, dim), rows of unit norm (zero rows stay zero)."""
        from msprlab.datasets.embed import normalize_rows
        items = list(texts)
        if isinstance(texts, str):
            raise TypeError("CallableEmbedder.embed takes a sequence of texts, got one str")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        matrix = self._call(items)
        if matrix.shape[1] != self.dim:
            raise EmbedderError(f"{self._flag} {self.target} returned {matrix.shape[1]}-dim "
                                f"vectors, {self.dim}-dim before")
        out: np.ndarray = normalize_rows(matrix)
        return out
