"""What the ContextKit adapter plugs into the library: stand-ins and a frozen clock.

* `ScenarioVectorStore` and `ScenarioEmbedder` replace the vector store and the embedder
  of `Memory`: a scenario records what they returned.
* `library_session` swaps three module-level names of the library for one scenario run,
  all outside the ranking code:

  - the graph's clock (`facade._utcnow`, and `datetime` in the backends module, which
    `record_access` reads), frozen at scenario time so decay ticks, node and edge
    timestamps and access times follow the scenario's clock;
  - `telemetry.Posthog`: the library builds a PostHog client per event and each client
    starts a consumer thread even when telemetry is off, so a batch of scenarios would
    leak thousands of threads. `InertPosthog` sends nothing, so no event leaves the
    process even if the library was imported before `OUTHAD_CONTEXTKIT_TELEMETRY=false`
    could be set.

  It also collects what the library logs from its except-handlers (`SwallowedLog`).
  The swaps are process-global: run one scenario at a time per process.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

# The library logs from its except-handlers at debug level; these words mark such a message.
_FAILURE_WORDS = re.compile(r"fail|error|raised|rejected|timed out", re.IGNORECASE)
# Only the library's own (telemetry) store sees this size; no scenario vector goes there.
STORE_DIMS = 8


def parse_time(text: str) -> datetime:
    """ISO-8601 to the graph's naive-UTC datetime (naive input is already UTC)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


@dataclass
class Clock:
    """The scenario clock the library reads while `library_session` is active."""

    now: datetime

    @contextmanager
    def at(self, moment: datetime) -> Iterator[None]:
        """Stamp what happens inside with `moment`, then return to the scenario clock."""
        saved, self.now = self.now, moment
        try:
            yield
        finally:
            self.now = saved


def _frozen_datetime(clock: Clock) -> type[datetime]:
    class FrozenDatetime(datetime):
        @classmethod
        def utcnow(cls) -> datetime:  # type: ignore[override]
            return clock.now

    return FrozenDatetime


class InertPosthog:
    """Stands in for `posthog.Posthog`: captures nothing and, unlike the real client,
    starts no thread. Accepts the real constructor's arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.disabled = True

    def capture(self, *args: Any, **kwargs: Any) -> None:
        return None

    def shutdown(self) -> None:
        return None


@contextmanager
def _swapped(module: ModuleType, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


class SwallowedLog(logging.Handler):
    """Collects the messages the library logs from its except-handlers."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if _FAILURE_WORDS.search(message):
            self._messages.append(f"{record.name}: {message}")

    def take(self) -> list[str]:
        """The messages since the last call."""
        taken, self._messages = self._messages, []
        return taken


@contextmanager
def library_session(
    *, facade: ModuleType, backends: ModuleType, telemetry: ModuleType, clock: Clock
) -> Iterator[SwallowedLog]:
    """Freeze the graph clock, stub PostHog and listen to the library's logs."""
    log = SwallowedLog()
    root = logging.getLogger("outhad_contextkit")
    saved_level = root.level
    with ExitStack() as stack:
        stack.enter_context(_swapped(facade, "_utcnow", lambda: clock.now))
        stack.enter_context(_swapped(backends, "datetime", _frozen_datetime(clock)))
        stack.enter_context(_swapped(telemetry, "Posthog", InertPosthog))
        root.addHandler(log)
        root.setLevel(logging.DEBUG)
        try:
            yield log
        finally:
            root.removeHandler(log)
            root.setLevel(saved_level)


@dataclass(frozen=True)
class Hit:
    """A vector-store row as the library reads it: `.id`, `.score`, `.payload`."""

    id: str
    score: float | None
    payload: dict[str, Any]


@dataclass
class ScenarioVectorStore:
    """`search` returns the current event's seeds verbatim; `get` resolves a payload."""

    payloads: dict[str, dict[str, Any]]
    seeds: list[dict[str, Any]] = field(default_factory=list)

    def search(self, query: str, vectors: Any, limit: int = 5, filters: Any = None) -> list[Hit]:
        # No filtering, no truncation: the scenario records what the store returned.
        return [
            Hit(seed["id"], seed.get("score"), copy.deepcopy(self.payloads[seed["id"]]))
            for seed in self.seeds
        ]

    def get(self, vector_id: str) -> Hit | None:
        payload = self.payloads.get(vector_id)
        return None if payload is None else Hit(vector_id, None, copy.deepcopy(payload))


@dataclass(frozen=True)
class EmbedderConfig:
    embedding_dims: int  # telemetry reads it on every event


@dataclass
class ScenarioEmbedder:
    """Returns the current search event's `query_embedding` for every text."""

    config: EmbedderConfig = field(default_factory=lambda: EmbedderConfig(STORE_DIMS))
    vector: list[float] = field(default_factory=list)

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return list(self.vector)
