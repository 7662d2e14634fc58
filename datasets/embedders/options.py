"""What every embedder of this package shares: its error and the endpoint's settings."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EmbedderError", "EmbedderOptions"]


class EmbedderError(ValueError):
    """An embedder that cannot be built or that failed: the message says why and what to do."""


@dataclass(frozen=True)
class EmbedderOptions:
    """The settings of an HTTP endpoint (ignored by the other kinds)."""

    model: str | None = None
    key_env: str | None = None  # the environment variable holding the API key
    batch_size: int = 64
    timeout: float = 30.0  # seconds per request
    retries: int = 2       # after a timeout, HTTP 429 or 5xx
    backoff: float = 1.0   # seconds before the first retry, doubled for each next one
