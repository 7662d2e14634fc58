"""Make a world of ContextKit production artifacts with the real library, on LoCoMo.

    python -m msprlab.experiments.parity.world --out DIR [--conversations K]
        [--sessions S] [--searches N] [--seed S] [--no-query-share F] [--replace]

needs the `parity` extra (outhad-contextkitai 0.1.4). The library's own `Memory` does the
work through its public calls, so the files are what a deployment writes; LoCoMo supplies
what a deployment never has, the truth.

- **Memories.** Every dialog turn of the first K conversations of locomo10 (file order) is
  added with `Memory.add(text, infer=False, user_id=<conversation>, run_id=<session>,
  metadata={speaker, dia_id, session})`, in time order, each at its LoCoMo time (the
  session's date + k seconds, as `msprlab ingest locomo` reads it): one user's memory per
  conversation, the text and owner ids as msprlab's LoCoMo loader maps them. `--sessions
  S` keeps the first S sessions of each conversation and the questions whose evidence all
  lies in them (and those without evidence), for a smaller world. The library
  stores each in its own Qdrant local collection (`DIR/qdrant`, collection
  `outhad_contextkit`) and in its networkx context graph (REPLY_TO, TEMPORAL_NEXT and
  TOPIC_SIMILAR edges from its own builder). MSPR is on with feedback, success and
  frequency recorded (weights: the library's defaults); graph decay is off.
- **Embedder.** A stand-in for the library's embedder returns msprlab's
  `WordLlamaEmbedder` vectors (256 dims, offline), memory and question texts embedded
  once up front; WordLlama's vectors do not depend on the batch, so `msprlab ingest ...
  --embedder wordllama` reproduces both the memory and the query vectors.
- **Usage period.** From a day after the last turn: N searches of Zipf-popular LoCoMo
  questions (`simulate.draw_stream`: popularity `rank ** -1.1`, a search per hour on
  average), each `Memory.search(question, user_id=<its conversation>, limit=10)` by the
  question's own user; the library counts an access for every result it returns. The
  shown ranking meets the harness's simulated user (`simulate.SimulatedUsers`): a
  position-based click model reads the LoCoMo grades of the shown memories (1 for an
  evidence turn of the question, 0 otherwise) and the verdict model judges each click,
  recorded with `Memory.record_feedback(memory_id, helpful=..., query=question,
  user_id=...)` 20 s x (i + 1) + 5 s after the search, as `simulate_log` times them. A
  share of the verdicts (`--no-query-share`, 3 % by default, drawn from a generator of its
  own) is recorded without `query=`, as production has them; those give no success row.
- **Clock and ids.** Every clock the library reads is frozen to the scenario's
  (`standins.frozen_library`, `frozen_datetime_module`) and memory ids come
  from a counter, so one seed gives the same files: the SQLite stores and the graph
  export byte for byte, Qdrant's storage row for row.

DIR receives `feedback_events.db`, `query_success.db`, `context_graph.jsonl` (the graph's
`export_jsonl`), `qdrant/` and:

- `world.json`: library version, msprlab commit, seed, settings, embedder, counts;
- `truth/qrels.tsv`: TREC qrels (`QUERY_HASH 0 MEMORY_ID 1`) of every question some
  verdict names by its query, keyed by the library's query hash (`hash_query`, the same
  as `msprlab.engine.success.hash_query`: the query ids `ingest contextkit` gives) and the
  artifact memory ids;
- `truth/searches.parquet`: every search in order: search, ts (naive UTC), user_id,
  query_hash, question_id (`conv-26:q12`, msprlab's LoCoMo query id), question_type,
  query, shown (memory ids in rank order), scores (the library's), clicks, verdicts;
- `truth/memories.tsv`: artifact memory id -> LoCoMo memory id (`conv-26:D1:3`).

Check it with `msprlab ingest contextkit --feedback-db DIR/feedback_events.db --success-db
DIR/query_success.db --graph-jsonl DIR/context_graph.jsonl --qdrant-path DIR/qdrant
--store X.duckdb`.

The committed fixture `tests/fixtures/contextkit_world/` is (see its README.md)::

    python -m msprlab.experiments.parity.world --out tests/fixtures/contextkit_world \\
        --conversations 2 --sessions 4 --searches 500 --seed 0

Exit status 0 on success, 2 on bad input (a plain message says which).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from msprlab.datasets.clicks import PositionBasedModel, VerdictModel
from msprlab.datasets.simulate import (
    CLICK_STEP_US,
    SESSION_GAP_US,
    VERDICT_DELAY_US,
    SimulatedUsers,
    draw_stream,
)
from msprlab.datasets.timeline import to_datetime, to_us
from msprlab.engine.success import hash_query

from ..cli.exits import EXIT_BAD_INPUT, EXIT_OK, BadInput, print_error
from .standins import (
    COLLECTION,
    Clock,
    EmbedderConfig,
    close_memory,
    copy_artifacts,
    frozen_datetime_module,
    frozen_library,
    library_home,
    load_library_module,
    memory_config,
    remove_entries,
)

__all__ = ["FORMAT", "WorldError", "WorldSettings", "generate_world", "main"]

FORMAT = "msprlab-contextkit-world/1"
LIBRARY = "outhad-contextkitai"
LOCOMO_CONVERSATIONS = 10
USAGE_DELAY = timedelta(days=1)  # the usage period starts a day after the last turn
EXPORT_DELAY = timedelta(minutes=1)  # the graph is exported a minute after the last event
# What a run writes besides the library's artifacts (other files in DIR are kept).
WORLD_FILES = ("world.json", "truth")
# The shown ranking's grades are LoCoMo's binary evidence: 0 or 1.
MAX_GRADE = 1
_REPO = Path(__file__).resolve().parents[2]  # the repository (experiments/parity/world.py)
_SOURCES = ("engine", "experiments", "datasets", "reports", "pyproject.toml")


class WorldError(ValueError):
    """Settings that leave nothing to make (no question to ask)."""


@dataclass(frozen=True, kw_only=True)
class WorldSettings:
    """What the world is made of; every field is in world.json."""

    conversations: int = 2
    sessions: int | None = None  # the first S sessions of each conversation; None: all
    searches: int = 1000
    seed: int = 0
    no_query_share: float = 0.03
    limit: int = 10
    zipf_s: float = 1.1
    mean_gap_seconds: float = 3600.0
    click_model: PositionBasedModel = field(
        default_factory=lambda: PositionBasedModel(eta=1.0, noise=0.1, max_grade=MAX_GRADE))
    verdict_model: VerdictModel = field(
        default_factory=lambda: VerdictModel(p_helpful=(0.1, 0.95), judge_rate=1.0))

    def __post_init__(self) -> None:
        def whole(name: str, low: int, high: int | None = None) -> None:
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (
                high is None or value <= high)
            span = f"{low}..{high}" if high is not None else f">= {low}"
            if not ok:
                raise ValueError(f"--{name.replace('_', '-')} must be a whole number "
                                 f"{span}, got {value!r}")

        whole("conversations", 1, LOCOMO_CONVERSATIONS)
        if self.sessions is not None:
            whole("sessions", 1)
        whole("searches", 1)
        whole("seed", 0)
        whole("limit", 1, 100)
        share = self.no_query_share
        if not (isinstance(share, int | float) and not isinstance(share, bool)
                and 0.0 <= share <= 1.0):
            raise ValueError(f"--no-query-share must be a number in [0, 1], got {share!r}")
        for name in ("zipf_s", "mean_gap_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.mean_gap_seconds <= 0:
            raise ValueError(f"mean_gap_seconds must be > 0, got {self.mean_gap_seconds!r}")
        if self.click_model.max_grade != MAX_GRADE or self.verdict_model.max_grade != MAX_GRADE:
            raise ValueError("the click and verdict models must read grades 0..1 (LoCoMo's "
                             "evidence is binary)")

    def as_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items()
               if k not in ("click_model", "verdict_model")}
        out["click_model"] = {"name": type(self.click_model).__name__,
                              **asdict(self.click_model)}
        out["verdict_model"] = {"name": type(self.verdict_model).__name__,
                                **asdict(self.verdict_model)}
        return out


# ---- LoCoMo ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Locomo:
    """The chosen conversations: turns in add order, questions, evidence."""

    conversations: list[str]
    turns: pl.DataFrame      # memory_id, text, user_id, run_id, metadata, created_at
    questions: pl.DataFrame  # query_id, text, user_id, question_type
    # hash_query of a question -> LoCoMo memory ids: the evidence of every question with
    # that text (LoCoMo repeats a few questions; the library cannot tell them apart)
    evidence: dict[str, set[str]]
    first: datetime  # the first and the last turn's time
    last: datetime


def _locomo(conversations: int, sessions: int | None) -> _Locomo:
    """The first `conversations` of locomo10 (file order), cut to their first `sessions`
    sessions: then only the questions whose evidence all lies in those sessions are kept
    (and the questions without evidence)."""
    from msprlab.datasets.sources.locomo import load_locomo

    ds = load_locomo()
    chosen = ds.memories["user_id"].unique(maintain_order=True).to_list()[:conversations]
    session = pl.col("metadata").str.json_path_match("$.session").cast(pl.Int64)
    turns = (ds.memories.filter(pl.col("user_id").is_in(chosen))
             .filter(pl.lit(True) if sessions is None else session <= sessions)
             .with_row_index("_order")
             .sort("created_at", "_order")
             .select("memory_id", "text", "user_id", "run_id", "metadata", "created_at"))
    kept = set(turns["memory_id"].to_list())
    by_id: dict[str, set[str]] = {}
    for query_id, memory_id in ds.qrels.filter(pl.col("relevance") > 0).select(
            "query_id", "memory_id").iter_rows():
        by_id.setdefault(query_id, set()).add(memory_id)
    answerable = [q for q in ds.queries["query_id"].to_list() if by_id.get(q, set()) <= kept]
    questions = ds.queries.filter(pl.col("user_id").is_in(chosen),
                                  pl.col("query_id").is_in(answerable)).select(
        "query_id", "text", "user_id", "question_type")
    evidence: dict[str, set[str]] = {}
    for query_id, text in questions.select("query_id", "text").iter_rows():
        evidence.setdefault(str(hash_query(text)), set()).update(by_id.get(query_id, ()))
    times: list[datetime] = turns["created_at"].to_list()
    return _Locomo(chosen, turns, questions, evidence, min(times), max(times))


# ---- the embedder stand-in ---------------------------------------------------------------
class LookupEmbedder:
    """The library's embedder interface (`embed(text, memory_action)`, `config.
    embedding_dims`) over vectors computed up front by an msprlab embedder; a text not
    seen before is embedded on the spot."""

    def __init__(self, embedder: Any, texts: Sequence[str]) -> None:
        self._embedder = embedder
        self.config = EmbedderConfig(int(embedder.dim))
        unique = list(dict.fromkeys(texts))
        vectors = embedder.embed(unique) if unique else []
        self._vectors = {t: [float(x) for x in v] for t, v in zip(unique, vectors, strict=True)}
        self.misses = 0

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        vector = self._vectors.get(text)
        if vector is None:
            self.misses += 1
            vector = [float(x) for x in self._embedder.embed([text])[0]]
            self._vectors[text] = vector
        return list(vector)


def _embedder_info(embedder: Any) -> dict[str, Any]:
    from msprlab.datasets.build import recipe
    try:
        package = f"wordllama {importlib.metadata.version('wordllama')}"
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a core dependency
        package = "wordllama (version unknown)"
    return {"name": embedder.name, "dim": embedder.dim, "config": embedder.config,
            "package": package, "recipe": recipe(embedder),
            "harness_flag": "--embedder wordllama"}


# ---- the run -----------------------------------------------------------------------------
Progress = Callable[[str, int, int], None]


def _silent(stage: str, done: int, total: int) -> None:
    return None


@dataclass
class _Search:
    search: int
    ts: datetime
    user_id: str
    query_hash: str
    question_id: str
    question_type: str | None
    query: str
    shown: list[str]
    scores: list[float]
    clicks: int = 0
    verdicts: int = 0


@dataclass
class _Tally:
    clicks: int = 0
    verdicts: int = 0
    helpful: int = 0
    without_query: int = 0
    judged_hashes: set[str] = field(default_factory=set)


def _add_memories(memory: Any, clock: Clock, world: _Locomo,
                  report: Progress) -> dict[str, str]:
    """Add every turn at its time; return artifact memory id -> LoCoMo memory id."""
    ids: dict[str, str] = {}
    total = world.turns.height
    for i, turn in enumerate(world.turns.iter_rows(named=True)):
        clock.now = turn["created_at"]
        metadata = json.loads(turn["metadata"])
        result = memory.add(turn["text"], user_id=turn["user_id"], run_id=turn["run_id"],
                            metadata={k: metadata[k] for k in ("speaker", "dia_id", "session")},
                            infer=False)
        (entry,) = result["results"]
        ids[str(entry["id"])] = turn["memory_id"]
        report("adding memories", i + 1, total)
    return ids


def _use(memory: Any, clock: Clock, world: _Locomo, ids: dict[str, str],
         settings: WorldSettings, report: Progress) -> tuple[list[_Search], _Tally]:
    """The usage period: searches, clicks and verdicts, in time order."""
    stream_seed, users_seed, query_seed = np.random.SeedSequence(settings.seed).spawn(3)
    start_us = to_us(world.last + USAGE_DELAY)
    questions = world.questions
    answerable = np.full(questions.height, float(start_us))
    picks, times = draw_stream(np.random.default_rng(stream_seed), answerable,
                               settings.searches, float(settings.zipf_s), start_us,
                               float(settings.mean_gap_seconds))
    users = SimulatedUsers(settings.click_model, settings.verdict_model,
                           np.random.default_rng(users_seed))
    drop_query = np.random.default_rng(query_seed)
    texts, owners = questions["text"].to_list(), questions["user_id"].to_list()
    qids, kinds = questions["query_id"].to_list(), questions["question_type"].to_list()
    log: list[_Search] = []
    tally = _Tally()
    previous_end = -(1 << 62)
    for k, (q, earliest) in enumerate(zip(picks.tolist(), times.tolist(), strict=True)):
        at = max(earliest, previous_end + SESSION_GAP_US)
        clock.now = to_datetime(at)
        text, user = texts[q], owners[q]
        found = memory.search(text, user_id=user, limit=settings.limit)["results"]
        shown = [str(r["id"]) for r in found[:settings.limit]]
        entry = _Search(k, clock.now, user, str(hash_query(text)), qids[q], kinds[q], text,
                        shown, [float(r.get("score") or 0.0) for r in found[:settings.limit]])
        log.append(entry)
        previous_end = at
        report("usage period", k + 1, settings.searches)
        if not shown:
            continue
        evidence = world.evidence[entry.query_hash]
        grades = np.array([int(ids.get(m) in evidence) for m in shown], dtype=np.int64)
        clicked, verdicts = users.react(grades)
        for i, (rank, helpful) in enumerate(zip(clicked, verdicts, strict=True)):
            previous_end = click_at = at + CLICK_STEP_US * (i + 1)
            entry.clicks += 1
            tally.clicks += 1
            if helpful is None:
                continue
            previous_end = verdict_at = click_at + VERDICT_DELAY_US
            clock.now = to_datetime(verdict_at)
            asked = None if drop_query.random() < settings.no_query_share else text
            with frozen_datetime_module(clock):
                recorded = memory.record_feedback(shown[rank], helpful=helpful, query=asked,
                                                  user_id=user)
            if recorded is None:
                raise RuntimeError(f"record_feedback({shown[rank]!r}) returned None: MSPR "
                                   "feedback is off or the memory has no graph node")
            entry.verdicts += 1
            tally.verdicts += 1
            tally.helpful += bool(helpful)
            if asked is None:
                tally.without_query += 1
            else:
                tally.judged_hashes.add(entry.query_hash)
    return log, tally


def _msprlab_commit() -> dict[str, Any]:
    """The checkout's HEAD and whether its sources differ from it (None outside git)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True,
                                  text=True, check=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", *_SOURCES) if commit else None
    return {"commit": commit, "sources_modified": None if status is None else bool(status)}


def _library_version() -> str:
    return importlib.metadata.version(LIBRARY)


def _check_hashes(world: _Locomo) -> None:
    """The library's query hash is msprlab's for every question (the truth is keyed by it)."""
    library_hash = load_library_module("memory.personalized.feedback_store").hash_query
    for text in world.questions["text"].to_list():
        if library_hash(text) != hash_query(text):
            raise RuntimeError(f"the library hashes {text!r} as {library_hash(text)!r}, "
                               f"msprlab as {hash_query(text)!r}")


def _check_rows(out: Path, tally: _Tally) -> None:
    """The library wrote one feedback row per verdict and one success row per verdict with
    a query."""
    expected = {("feedback_events.db", "feedback_events"): tally.verdicts,
                ("query_success.db", "query_success"): tally.verdicts - tally.without_query}
    for (file, table), count in expected.items():
        conn = sqlite3.connect(f"{(out / file).resolve().as_uri()}?immutable=1", uri=True)
        try:
            (found,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        finally:
            conn.close()
        if found != count:
            raise RuntimeError(f"{file}: the library wrote {found} rows, the run recorded "
                               f"{count}")


def _write_truth(out: Path, world: _Locomo, ids: dict[str, str], log: list[_Search],
                 tally: _Tally) -> int:
    """truth/qrels.tsv, truth/searches.parquet, truth/memories.tsv; returns the qrel count."""
    truth = out / "truth"
    truth.mkdir()
    artifact = {locomo: mid for mid, locomo in ids.items()}
    lines = [(query_hash, artifact[locomo_id]) for query_hash in tally.judged_hashes
             for locomo_id in world.evidence[query_hash]]
    (truth / "qrels.tsv").write_text("".join(f"{h}\t0\t{m}\t1\n" for h, m in sorted(lines)))
    (truth / "memories.tsv").write_text(
        "memory_id\tlocomo_memory_id\n" + "".join(f"{m}\t{ids[m]}\n" for m in ids))
    frame = pl.DataFrame(
        [vars(s) for s in log],
        schema={"search": pl.Int64, "ts": pl.Datetime("us"), "user_id": pl.String,
                "query_hash": pl.String, "question_id": pl.String,
                "question_type": pl.String, "query": pl.String,
                "shown": pl.List(pl.String), "scores": pl.List(pl.Float64),
                "clicks": pl.Int64, "verdicts": pl.Int64})
    frame.write_parquet(truth / "searches.parquet", statistics=False)
    return len(lines)


def _relative(config: Any, work: Path) -> Any:
    """The memory config with the run's work folder shown as `<work>`."""
    if isinstance(config, dict):
        return {k: _relative(v, work) for k, v in config.items()}
    if isinstance(config, str) and config.startswith(str(work)):
        return "<work>" + config[len(str(work)):]
    return config


def _config_json(config: dict[str, Any], work: Path) -> dict[str, Any]:
    """The `Memory.from_config` dict as world.json shows it: paths under `<work>`, and a
    note on the two parts the library builds but the run never uses as configured."""
    shown: dict[str, Any] = _relative(config, work)
    shown["embedder"]["replaced_by"] = ("LookupEmbedder over msprlab's WordLlamaEmbedder "
                                        "(see embedder); the library's is never called")
    shown["llm"]["note"] = "never called: every add is infer=False"
    return shown


def _scratch() -> str | None:
    """Where the run's work folder goes: a RAM folder when there is one. The library's
    stores commit every write (Qdrant local, the history, feedback and success SQLite
    files), and on a disk those flushes take most of the run (about 7x on this machine's);
    the files are the same either way."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


@contextmanager
def _quiet_library() -> Iterator[None]:
    """The library logs each vector insert at INFO, and importing its MongoDB store calls
    `logging.basicConfig(level=INFO)`, so its INFO lines would reach the terminal: keep
    its loggers at WARNING for the run."""
    root = logging.getLogger("outhad_contextkit")
    saved = root.level
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.setLevel(saved)


def generate_world(out: Path, settings: WorldSettings, *,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Make the world in `out`, replacing an earlier world there (other files in `out`
    stay); return world.json's content.

    Stages reported: "embedding", "adding memories", "usage period", "export".
    """
    report = progress or _silent
    from msprlab.datasets.embed import WordLlamaEmbedder

    timings: dict[str, float] = {}
    started = time.perf_counter()
    world = _locomo(settings.conversations, settings.sessions)
    if world.questions.height == 0:
        raise WorldError(f"no question of the first {settings.conversations} conversation(s) "
                         f"has all its evidence in their first {settings.sessions} session(s); "
                         "raise --sessions")
    report("embedding", 0, 1)
    wordllama = WordLlamaEmbedder()
    embedder = LookupEmbedder(wordllama, world.turns["text"].to_list()
                              + world.questions["text"].to_list())
    timings["load_and_embed"] = time.perf_counter() - started
    with _quiet_library(), tempfile.TemporaryDirectory(prefix="ck-world-",
                                                       dir=_scratch()) as tmp:
        work = Path(tmp)
        config = memory_config(work, dims=embedder.config.embedding_dims)
        clock = Clock(world.first)
        with library_home(work / "home"), frozen_library(clock):
            _check_hashes(world)
            memory = load_library_module("memory.main").Memory.from_config(config)
            try:
                memory.embedding_model = embedder
                mark = time.perf_counter()
                ids = _add_memories(memory, clock, world, report)
                timings["add"] = time.perf_counter() - mark
                mark = time.perf_counter()
                log, tally = _use(memory, clock, world, ids, settings, report)
                timings["usage"] = time.perf_counter() - mark
                report("export", 0, 1)
                clock.now = max(clock.now, log[-1].ts) + EXPORT_DELAY
                graph_file = work / "context_graph.jsonl"
                memory.context_graph.export_jsonl(str(graph_file))
                exported_at = clock.now
            finally:
                close_memory(memory)
        del memory
        remove_entries(out, WORLD_FILES)
        copy_artifacts(work, graph_file, out)
    _check_rows(out, tally)
    qrels = _write_truth(out, world, ids, log, tally)
    info = {
        "format": FORMAT,
        "library": {"name": LIBRARY, "version": _library_version()},
        "msprlab": {"version": importlib.metadata.version("msprlab"), **_msprlab_commit()},
        "seed": settings.seed,
        "settings": {
            **settings.as_json(),
            "locomo_conversations": world.conversations,
            "usage_start": min(s.ts for s in log).isoformat(),
            "exported_at": exported_at.isoformat(),
            "collection": COLLECTION,
            "memory_config": _config_json(config, work),
        },
        "embedder": _embedder_info(wordllama),
        "counts": {
            "memories": len(ids), "questions": world.questions.height,
            "questions_searched": len({s.question_id for s in log}),
            "questions_judged": len(tally.judged_hashes), "qrels": qrels,
            "searches": len(log), "searches_without_results": sum(not s.shown for s in log),
            "clicks": tally.clicks, "verdicts": tally.verdicts,
            "verdicts_helpful": tally.helpful, "verdicts_without_query": tally.without_query,
            "success_rows": tally.verdicts - tally.without_query,
            "embedder_misses": embedder.misses,
        },
        "files": {"artifacts": ["feedback_events.db", "query_success.db",
                                "context_graph.jsonl", "qdrant/"],
                  "truth": ["truth/qrels.tsv", "truth/searches.parquet",
                            "truth/memories.tsv"]},
    }
    (out / "world.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    timings["total"] = time.perf_counter() - started
    info["_timings"] = timings  # printed by main, not written
    return info


# ---- command line ------------------------------------------------------------------------
def _check_out(out: Path, replace: bool) -> None:
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: is a file; give a folder")
    if out.is_dir() and any(out.iterdir()):
        if not replace:
            raise BadInput(f"--out {out}: the folder is not empty; pass --replace to "
                           "overwrite a world this command wrote")
        if not (out / "world.json").is_file():
            raise BadInput(f"--out {out}: the folder is not empty and holds no world.json, "
                           "so it is not a world this command wrote; --replace only "
                           "overwrites those")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m msprlab.experiments.parity.world",
        description="Make ContextKit production artifacts (feedback_events.db, "
                    "query_success.db, context_graph.jsonl, qdrant/) with the real library "
                    "on LoCoMo, plus the truth (truth/qrels.tsv, truth/searches.parquet) "
                    "and world.json. Needs the parity extra (outhad-contextkitai 0.1.4).",
        epilog="Deterministic for a seed. Check the result with `msprlab ingest contextkit "
               "--feedback-db DIR/feedback_events.db --success-db DIR/query_success.db "
               "--graph-jsonl DIR/context_graph.jsonl --qdrant-path DIR/qdrant --store "
               "X.duckdb`. Exit status: 0 success, 2 bad input.")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the folder to write (created; must be empty unless --replace)")
    parser.add_argument("--conversations", type=int, default=2, metavar="K",
                        help="how many LoCoMo conversations (the first K of locomo10, one "
                             "user each; 1..10, default 2)")
    parser.add_argument("--sessions", type=int, default=None, metavar="S",
                        help="only the first S sessions of each conversation, and only the "
                             "questions whose evidence lies in them (default: all sessions)")
    parser.add_argument("--searches", type=int, default=1000, metavar="N",
                        help="searches in the usage period (default 1000: about 400 "
                             "verdicts on two whole conversations)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seeds the question stream, the clicks and verdicts and which "
                             "verdicts lack a query (default 0)")
    parser.add_argument("--no-query-share", type=float, default=0.03, metavar="F",
                        help="share of verdicts recorded without query= (default 0.03)")
    parser.add_argument("--replace", action="store_true",
                        help="overwrite the world in DIR (one with world.json); other "
                             "files there, such as a README, are kept")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = WorldSettings(conversations=args.conversations, sessions=args.sessions,
                                 searches=args.searches, seed=args.seed,
                                 no_query_share=args.no_query_share)
        _check_out(args.out, args.replace)
        try:
            importlib.metadata.version(LIBRARY)
        except importlib.metadata.PackageNotFoundError:
            raise BadInput(f"the ContextKit library ({LIBRARY}) is not installed: pip "
                           "install -e '.[parity]'") from None
    except (ValueError, BadInput) as exc:
        print_error(exc)
        return EXIT_BAD_INPUT
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    console = Console(stderr=True)
    with Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
             TimeElapsedColumn(), console=console) as bar:
        tasks: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        try:
            info = generate_world(args.out, settings, progress=report)
        except WorldError as exc:
            bar.stop()
            print_error(exc)
            return EXIT_BAD_INPUT
    counts, timings = info["counts"], info.pop("_timings")
    users = len(info["settings"]["locomo_conversations"])
    console.print(
        f"{args.out}: {counts['memories']:,} memories ({users} conversations), "
        f"{counts['searches']:,} searches, {counts['verdicts']:,} verdicts "
        f"({counts['verdicts_helpful']:,} helpful, {counts['verdicts_without_query']:,} "
        f"without a query), {counts['qrels']:,} qrels of {counts['questions_judged']:,} "
        f"judged questions", highlight=False)
    console.print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()),
                  highlight=False)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
