"""A dataset digest names the recipe (inputs, embedder and its settings), not the float
bits of the vectors: BLAS may round TF-IDF + SVD differently on another machine, and a
digest of the bytes made the regress gate call that "other data"."""

from __future__ import annotations

import numpy as np
import polars as pl

from msprlab.datasets.build import recipe, with_embeddings
from msprlab.datasets.schema import MEMORIES, Dataset


class _Fixed:
    """An embedder with one setting."""

    name = "fixed"

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.full((len(texts), self.dim), 0.5, dtype=np.float32)


class _OtherMachine(_Fixed):
    """The same recipe, its vectors one ulp away, as another BLAS might round them."""

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.nextafter(super().embed(texts), np.float32(1.0))


def _dataset() -> Dataset:
    memories = pl.DataFrame({"memory_id": ["m1", "m2"], "text": ["a b", "c d"]}).with_columns(
        *(pl.lit(None, dtype=dtype).alias(name) for name, dtype in MEMORIES.items()
          if name not in ("memory_id", "text"))).select(list(MEMORIES))
    return Dataset(source="t", version="1", digest="d0", memories=memories)


def test_the_same_recipe_with_other_float_bits_has_the_same_digest() -> None:
    a = with_embeddings(_dataset(), _Fixed(4))
    c = with_embeddings(_dataset(), _OtherMachine(4))
    assert a.digest == c.digest
    assert not np.array_equal(np.stack(a.embeddings["vector"].to_numpy()),
                              np.stack(c.embeddings["vector"].to_numpy()))


def test_another_setting_or_input_is_another_digest() -> None:
    base = with_embeddings(_dataset(), _Fixed(4)).digest
    assert with_embeddings(_dataset(), _Fixed(8)).digest != base
    other = _dataset()
    assert with_embeddings(Dataset(source="t", version="1", digest="d1",
                                   memories=other.memories), _Fixed(4)).digest != base
    assert recipe(_Fixed(4)) != recipe(_Fixed(8))  # public settings count
