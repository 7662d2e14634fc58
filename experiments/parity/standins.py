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
* `frozen_library` is the wider freeze for a run that drives `Memory` through its public
  calls and keeps what it writes (`tests/fixtures/make_contextkit_fixture.py`,
  `contextkit_world`): besides the graph clock and PostHog it freezes the clocks of
  `memory.main` (payload times), the graph builder and the backends, and gives
  `memory.main` a counting `uuid` (`CountingIds`), so memory ids follow the order of the
  adds. `record_feedback` imports `datetime` inside the call, so its verdicts are stamped
  only under `frozen_datetime_module`. `checkpointed_copy` copies an SQLite store with its
  write-ahead log folded in.
"""

from __future__ import annotations

import copy
import datetime as dt_module
import gc
import importlib
import logging
import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
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

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _frozen_datetime(clock: Clock) -> type[datetime]:
    """A `datetime` class whose `now` and `utcnow` read `clock` (naive UTC)."""

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            aware = clock.now.replace(tzinfo=UTC)
            return aware if tz is None or tz is UTC else aware.astimezone(tz)

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


@dataclass
class CountingIds:
    """Deterministic stand-in for the `uuid` module in the library's `memory.main`: the
    n-th `uuid4()` is UUID(int=(0x5EED << 64) | n), version 4."""

    count: int = 0

    def uuid4(self) -> uuid.UUID:
        self.count += 1
        return uuid.UUID(int=(0x5EED << 64) | self.count, version=4)


def load_library_module(name: str) -> ModuleType:
    """`outhad_contextkit.<name>`."""
    return importlib.import_module(f"outhad_contextkit.{name}")


@contextmanager
def frozen_library(clock: Clock) -> Iterator[None]:
    """Freeze every clock and id source `Memory` reads outside `record_feedback`; stub
    its PostHog client. Process-global, like `library_session`."""
    frozen = _frozen_datetime(clock)
    main = load_library_module("memory.main")
    with ExitStack() as stack:
        stack.enter_context(_swapped(main, "datetime", frozen))
        stack.enter_context(_swapped(main, "uuid", CountingIds()))
        stack.enter_context(_swapped(load_library_module("memory.context_graph.facade"),
                                     "_utcnow", lambda: clock.now))
        stack.enter_context(_swapped(load_library_module("memory.context_graph.backends"),
                                     "datetime", frozen))
        stack.enter_context(_swapped(load_library_module("memory.context_graph.builder"),
                                     "datetime", frozen))
        stack.enter_context(_swapped(load_library_module("memory.telemetry"), "Posthog",
                                     InertPosthog))
        yield


@contextmanager
def frozen_datetime_module(clock: Clock) -> Iterator[None]:
    """`record_feedback` imports `datetime` inside the call, so swap the module's class."""
    with _swapped(dt_module, "datetime", _frozen_datetime(clock)):
        yield


def checkpointed_copy(source: Path, target: Path) -> None:
    """Copy an SQLite file after folding its WAL in, so the copy is the whole database."""
    with sqlite3.connect(source) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.copyfile(source, target)


# What a run that keeps the library's files copies out of its work folder.
ARTIFACT_FILES = ("feedback_events.db", "query_success.db", "context_graph.jsonl", "qdrant")
COLLECTION = "outhad_contextkit"  # QdrantConfig's default collection_name


def memory_config(work: Path, *, dims: int) -> dict[str, Any]:
    """A `Memory.from_config` dict with every store in `work`: the library's own Qdrant
    local store (`work/qdrant`, persistent), the networkx context graph without decay, and
    MSPR on with feedback, success and frequency recorded (its weights stay the library's
    defaults). The embedder and LLM are built by the library but never called: the caller
    replaces the embedder, and `add(..., infer=False)` asks no LLM."""
    return {
        "vector_store": {"provider": "qdrant", "config": {
            "path": str(work / "qdrant"), "embedding_model_dims": dims, "on_disk": True}},
        "embedder": {"provider": "openai", "config": {"api_key": "unused"}},
        "llm": {"provider": "openai", "config": {"api_key": "unused"}},
        "history_db_path": str(work / "history.db"),
        "context_graph": {
            "enabled": True, "backend": "networkx",
            "persist_path": str(work / "context_graph.pkl"),
            "decay": {"enabled": False},
        },
        "mspr": {
            "enabled": True,
            "feedback": {"enabled": True, "sqlite_path": str(work / "feedback_events.db")},
            "success": {"enabled": True, "sqlite_path": str(work / "query_success.db")},
            "frequency": {"enabled": True},
        },
    }


@contextmanager
def library_home(home: Path) -> Iterator[None]:
    """Telemetry off, and the library's home folder (where `Memory` puts its telemetry
    store, a Qdrant local folder it locks) in `home` for the run. The library reads
    `OUTHAD_CONTEXTKIT_DIR` once, at its first import, and `memory.main` keeps it as a
    module name, so that name is swapped too: two runs in one process, or two processes
    at once, each get their own folder."""
    os.environ["OUTHAD_CONTEXTKIT_TELEMETRY"] = "false"
    saved = os.environ.get("OUTHAD_CONTEXTKIT_DIR")
    os.environ["OUTHAD_CONTEXTKIT_DIR"] = str(home)
    try:
        home.mkdir(parents=True, exist_ok=True)
        with _swapped(load_library_module("memory.main"), "outhad_contextkit_dir", str(home)):
            yield
    finally:
        if saved is None:
            os.environ.pop("OUTHAD_CONTEXTKIT_DIR", None)
        else:
            os.environ["OUTHAD_CONTEXTKIT_DIR"] = saved


def close_memory(memory: Any) -> None:
    """Release what `Memory` holds open: both Qdrant local clients (the collection and the
    library's telemetry store, which lock their folders) and the stores' connections."""
    memory.close()
    for store in (memory.vector_store, getattr(memory, "_telemetry_vector_store", None)):
        client = getattr(store, "client", None)
        if client is not None:
            client.close()
    memory.db.close()
    gc.collect()  # the SQLite stores open a connection per call and never close it


def remove_entries(out: Path, names: tuple[str, ...]) -> None:
    """Delete these files or folders of `out` where they exist; the rest stays."""
    for name in names:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def copy_artifacts(work: Path, graph_file: Path, out: Path) -> None:
    """Copy the run's artifacts from `work` into `out`, replacing earlier ones (other
    files in `out` stay): the SQLite stores with their WAL folded in, the graph export,
    the Qdrant folder without its `.lock`."""
    out.mkdir(parents=True, exist_ok=True)
    remove_entries(out, (*ARTIFACT_FILES, *(f"{db}-{x}" for db in ARTIFACT_FILES[:2]
                                            for x in ("wal", "shm"))))
    for name in ("feedback_events.db", "query_success.db"):
        checkpointed_copy(work / name, out / name)
    shutil.copyfile(graph_file, out / "context_graph.jsonl")
    shutil.copytree(work / "qdrant", out / "qdrant", ignore=shutil.ignore_patterns(".lock"))


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
