"""An OpenAI-compatible embeddings endpoint (`POST .../v1/embeddings`), over the standard
library's HTTP client: what production may call for its vectors.

The request is `{"model": MODEL, "input": [texts...], "encoding_format": "float"}` with
`Authorization: Bearer KEY` when a key is given (read from the environment variable named
by `EmbedderOptions.key_env`, never from the command line, never written anywhere); the
answer's `data[i].embedding`, ordered by `data[i].index`. Texts go in batches of
`batch_size`, each request with `timeout` seconds; a timeout, HTTP 429 or a 5xx is retried
`retries` times (1 s, then 2 s, ... apart). Everything else fails at once with an
`EmbedderError` naming the endpoint and the fix: the server cannot be reached, it refused
the key (401/403), it has no such route (404), it rejected the request (4xx: its message
is quoted), or its answer is not an embeddings response or changes dimension.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from .imported import vectors_of
from .options import EmbedderError, EmbedderOptions

__all__ = ["HttpEmbedder", "endpoint"]

_RETRIED = {429, 500, 502, 503, 504}
_PROBE = ["dimension probe"]


def endpoint(url: str) -> str:
    """The embeddings route of `url`: itself when it ends in /embeddings, else URL/embeddings
    (`http://host:8000/v1` -> `http://host:8000/v1/embeddings`)."""
    url = url.rstrip("/")
    return url if url.endswith("/embeddings") else f"{url}/embeddings"


class HttpEmbedder:
    """An OpenAI-compatible `/v1/embeddings` endpoint behind the `Embedder` interface."""

    name = "openai-http"

    def __init__(self, url: str, options: EmbedderOptions, *,
                 flag: str = "--query-embedder") -> None:
        self._flag = flag
        if not options.model:
            raise EmbedderError(f"{flag} {url}: an HTTP endpoint needs the model name: "
                                f"{flag}-model NAME")
        if options.batch_size < 1 or options.timeout <= 0 or options.retries < 0:
            raise EmbedderError(f"{flag} {url}: batch size >= 1, timeout > 0 and retries >= 0 "
                                f"must hold, got {options.batch_size}, {options.timeout}, "
                                f"{options.retries}")
        key = None
        if options.key_env:
            key = os.environ.get(options.key_env)
            if not key:
                raise EmbedderError(f"{flag}-key-env {options.key_env}: the environment "
                                    "variable is not set or empty; export the API key in it")
        self.url = endpoint(url)
        self.model = options.model
        self._key = key
        self._key_env = options.key_env
        self._batch = options.batch_size
        self._timeout = options.timeout
        self._retries = options.retries
        self._backoff = options.backoff
        self.dim = int(self._request(_PROBE).shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> float32 (n, dim), rows of unit norm (zero rows stay zero), in batches."""
        from msprlab.datasets.embed import normalize_rows
        if isinstance(texts, str):
            raise TypeError("HttpEmbedder.embed takes a sequence of texts, got one str")
        items = list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        for start in range(0, len(items), self._batch):
            part = self._request(items[start:start + self._batch])
            if part.shape[1] != self.dim:
                raise EmbedderError(f"{self._flag} {self.url}: the endpoint returned "
                                    f"{part.shape[1]}-dim vectors, {self.dim}-dim before")
            parts.append(part)
        out: np.ndarray = normalize_rows(np.concatenate(parts))
        return out

    # ---- one request ----------------------------------------------------------------------
    def _request(self, texts: list[str]) -> np.ndarray:
        body = json.dumps({"model": self.model, "input": texts,
                           "encoding_format": "float"}).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key}"
        where = f"{self._flag} {self.url}"
        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            request = urllib.request.Request(self.url, data=body, headers=headers,
                                             method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                    raw = answer.read()
            except urllib.error.HTTPError as exc:
                if exc.code in _RETRIED and not last:
                    time.sleep(self._backoff * 2.0 ** attempt)
                    continue
                raise EmbedderError(self._refusal(exc)) from None
            except TimeoutError:
                if not last:
                    time.sleep(self._backoff * 2.0 ** attempt)
                    continue
                raise EmbedderError(f"{where}: no answer within {self._timeout:g} s "
                                    f"({self._retries + 1} tries); raise {self._flag}-timeout "
                                    "or check the server") from None
            except urllib.error.URLError as exc:
                reason = exc.reason
                if isinstance(reason, TimeoutError) and not last:
                    time.sleep(self._backoff * 2.0 ** attempt)
                    continue
                raise EmbedderError(f"{where}: cannot reach the endpoint ({reason}); is the "
                                    "server running and the URL right?") from None
            except (ConnectionError, OSError) as exc:
                raise EmbedderError(f"{where}: the connection failed ({exc}); is the server "
                                    "running and the URL right?") from None
            return self._vectors(raw, len(texts))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _refusal(self, exc: urllib.error.HTTPError) -> str:
        where = f"{self._flag} {self.url}"
        detail = _message(exc)
        if exc.code in (401, 403):
            key = (f"the key in ${self._key_env}" if self._key_env else
                   f"no key (name the variable holding one with {self._flag}-key-env VAR)")
            return f"{where}: the endpoint refused {key} (HTTP {exc.code}{detail})"
        if exc.code == 404:
            return (f"{where}: no embeddings route there (HTTP 404{detail}); give the base URL "
                    "ending in /v1 or the full .../v1/embeddings")
        if exc.code in _RETRIED:
            return (f"{where}: HTTP {exc.code}{detail} after {self._retries + 1} tries; try "
                    "again later")
        return f"{where}: the endpoint rejected the request (HTTP {exc.code}{detail})"

    def _vectors(self, raw: bytes, count: int) -> np.ndarray:
        where = f"{self._flag} {self.url}"
        try:
            answer = json.loads(raw)
            data = answer["data"]
            rows = sorted(data, key=lambda item: int(item.get("index", 0)))
            found = [row["embedding"] for row in rows]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EmbedderError(f"{where}: the answer is not an OpenAI embeddings response "
                                f"(expected {{\"data\": [{{\"index\": i, \"embedding\": "
                                f"[...]}}]}}; {type(exc).__name__}: {exc})") from None
        if len(found) != count:
            raise EmbedderError(f"{where}: asked for {count} embeddings, got {len(found)}")
        return vectors_of(found, count, what=where)


def _message(exc: urllib.error.HTTPError) -> str:
    """The error message an OpenAI-style body carries, as ': message' (or nothing)."""
    try:
        body: Any = json.loads(exc.read() or b"null")
    except (ValueError, OSError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return f": {message}" if isinstance(message, str) and message else ""
