"""Loops compiled by numba, with the arithmetic the engine's bit-exactness needs.

No fastmath: every multiplication and addition is the IEEE operation, in the order
written, never reassociated or contracted into a fused multiply-add, and `math.exp` calls
the C library's `exp` (the function behind CPython's `math.exp`). Compiled results are
cached on disk (`cache=True`); numba is imported on the first compile only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def exact_njit(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` compiled by numba without fastmath."""
    import numba  # on first use: most commands never compile anything

    compiled: Callable[..., Any] = numba.njit(cache=True, nogil=True)(function)
    return compiled
