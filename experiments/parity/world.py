"""Make a world of ContextKit production artifacts with the real library, on LoCoMo.

    python -m msprlab.experiments.parity.world --out DIR [--conversations K] [--sessions S]
        [--searches N] [--seed S] [--eta ETA] [--noise P] [--rank-share F]
        [--preference-share F] [--decay on|off] [--half-life DAYS] [--boost D]
        [--penalty D] [--cap D] [--delta W] [--epsilon W] [--zeta W]
        [--embedder wordllama|module:function] [--no-query-share F] [--replace]

needs the `parity` extra (outhad-contextkitai 0.1.4). The library's own `Memory` does the
work through its public calls, so the files are what a deployment writes; LoCoMo supplies
what a deployment never has, the truth. `world_settings.py` says what each setting is;
`worlds.py` makes a set of worlds with one command.

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
  frequency recorded; decay, the feedback deltas and the three MSPR weights are
  production's (`Production`: by default decay off, the library's deltas, weights 0).
- **Embedder.** A stand-in for the library's embedder returns the vectors of the world's
  embedder: `wordllama` (msprlab's `WordLlamaEmbedder`, 256 dims, offline), or the
  application's own `module:function` (`tests/fixtures/application/app_embedding.py:embed`
  is a hashed bag of words msprlab does not ship), memory and question texts embedded once
  up front. `msprlab ingest contextkit ... --query-embedder SPEC` with the same SPEC
  reproduces the query vectors (world.json gives the flag).
- **Usage period** (`world_usage.py`): N searches through `Memory.search`, the simulated
  users' clicks (position-based, examination r^-eta) and verdicts through
  `Memory.record_feedback`, a share recording the rank shown (`metadata.rank`).
- **Clock and ids.** Every clock the library reads is frozen to the scenario's
  (`standins.frozen_library`, `frozen_datetime_module`) and memory ids come
  from a counter, so one seed gives the same files: the SQLite stores and the graph
  export byte for byte, Qdrant's storage row for row.

DIR receives `feedback_events.db`, `query_success.db`, `context_graph.jsonl` (the graph's
`export_jsonl`), `qdrant/` and:

- `world.json`: library version, msprlab commit, seed, settings, embedder, counts; the
  truth's examination curve (`truth.examination`: P(rank r examined), r = 1..limit) and
  the [engine] block that replays production (`production.engine_toml`);
- `truth/qrels.tsv`: TREC qrels (`QUERY_HASH 0 MEMORY_ID 1`) of every question some
  verdict names by its query, keyed by the library's query hash (`hash_query`, the same
  as `msprlab.engine.success.hash_query`: the query ids `ingest contextkit` gives) and the
  artifact memory ids: its evidence, and on a preference question the memories its user
  judged helpful for it over the period;
- `truth/searches.parquet`: every search in order: search, ts (naive UTC), user_id,
  query_hash, question_id (`conv-26:q12`, msprlab's LoCoMo query id), question_type,
  query, preference, shown (memory ids in rank order), scores (the library's), relevant
  (the memories relevant to it then), clicked_ranks, verdict_ranks, verdict_helpful
  (1-based ranks), clicks, verdicts;
- `truth/memories.tsv`: artifact memory id -> LoCoMo memory id.

Check it with `msprlab ingest contextkit --feedback-db DIR/feedback_events.db --success-db
DIR/query_success.db --graph-jsonl DIR/context_graph.jsonl --qdrant-path DIR/qdrant
--query-embedder SPEC --store X.duckdb`.

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
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.engine.success import hash_query

from ..cli.exits import EXIT_BAD_INPUT, EXIT_OK, BadInput, print_error
from .standins import (
    COLLECTION,
    Clock,
    EmbedderConfig,
    close_memory,
    copy_artifacts,
    frozen_library,
    library_home,
    load_library_module,
    memory_config,
    remove_entries,
)
from .world_settings import (
    MAX_GRADE,
    Production,
    WorldSettings,
    add_settings_arguments,
    settings_from_args,
)
from .world_usage import Search, Tally, use

__all__ = ["FORMAT", "Production", "WorldError", "WorldSettings", "generate_world", "main"]

FORMAT = "msprlab-contextkit-world/2"  # 2: production settings, preference, ranks
LIBRARY = "outhad-contextkitai"
EXPORT_DELAY = timedelta(minutes=1)  # the graph is exported a minute after the last event
# What a run writes besides the library's artifacts (other files in DIR are kept).
WORLD_FILES = ("world.json", "truth")
_REPO = Path(__file__).resolve().parents[2]  # the repository (experiments/parity/world.py)
_SOURCES = ("engine", "experiments", "datasets", "reports", "pyproject.toml")


class WorldError(ValueError):
    """Settings that leave nothing to make (no question to ask)."""


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


def _embedder(spec: str) -> Any:
    """The world's embedder: `wordllama` or the application's `module:function`."""
    from msprlab.datasets.embedders import EmbedderError, query_embedder
    if spec.startswith(("http://", "https://")):
        raise WorldError(f"--embedder {spec}: a world embeds with wordllama or a "
                         "module:function (an HTTP endpoint serves one to ingest)")
    try:
        return query_embedder(spec, flag="--embedder")
    except EmbedderError as exc:
        raise WorldError(str(exc)) from None


def _embedder_info(spec: str, embedder: Any) -> dict[str, Any]:
    """What world.json says of the embedder, and the ingest flag that reproduces it."""
    from msprlab.datasets.build import recipe
    info: dict[str, Any] = {"name": embedder.name, "spec": spec, "dim": embedder.dim,
                            "recipe": recipe(embedder), "harness_flag": f"--query-embedder "
                                                                        f"{spec}"}
    if embedder.name == "wordllama":
        info["config"] = embedder.config
        try:
            info["package"] = f"wordllama {importlib.metadata.version('wordllama')}"
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a dependency
            info["package"] = "wordllama (version unknown)"
        info["shipped_by_msprlab"] = True
    else:
        module = sys.modules[spec.partition(":")[0]]
        info["module_file"] = str(Path(str(module.__file__)).resolve())
        info["pythonpath"] = str(Path(str(module.__file__)).resolve().parent)
        info["source_sha256"] = embedder.source_sha256
        info["shipped_by_msprlab"] = False
    return info


# ---- the run -----------------------------------------------------------------------------
Progress = Callable[[str, int, int], None]


def _silent(stage: str, done: int, total: int) -> None:
    return None


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


def _check_rows(out: Path, tally: Tally) -> None:
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


def _write_truth(out: Path, world: _Locomo, ids: dict[str, str], log: list[Search],
                 tally: Tally) -> int:
    """truth/qrels.tsv, truth/searches.parquet, truth/memories.tsv; returns the qrel count.
    A question's qrels are its evidence and, on a preference question, the memories its
    user judged helpful for it over the period."""
    truth = out / "truth"
    truth.mkdir()
    artifact = {locomo: mid for mid, locomo in ids.items()}
    lines = {(query_hash, artifact[locomo_id]) for query_hash in tally.judged_hashes
             for locomo_id in world.evidence[query_hash]}
    lines |= {(query_hash, memory_id) for query_hash in tally.judged_hashes
              for memory_id in tally.liked.get(query_hash, ())}
    (truth / "qrels.tsv").write_text("".join(f"{h}\t0\t{m}\t1\n" for h, m in sorted(lines)))
    (truth / "memories.tsv").write_text(
        "memory_id\tlocomo_memory_id\n" + "".join(f"{m}\t{ids[m]}\n" for m in ids))
    frame = pl.DataFrame(
        [vars(s) for s in log],
        schema={"search": pl.Int64, "ts": pl.Datetime("us"), "user_id": pl.String,
                "query_hash": pl.String, "question_id": pl.String,
                "question_type": pl.String, "query": pl.String, "preference": pl.Boolean,
                "shown": pl.List(pl.String), "scores": pl.List(pl.Float64),
                "relevant": pl.List(pl.String), "clicked_ranks": pl.List(pl.Int64),
                "verdict_ranks": pl.List(pl.Int64), "verdict_helpful": pl.List(pl.Boolean),
                "clicks": pl.Int64, "verdicts": pl.Int64})
    frame.write_parquet(truth / "searches.parquet", statistics=False)
    return len(lines)


def _truth_json(settings: WorldSettings) -> dict[str, Any]:
    """What the simulated users are: the examination curve a position-bias estimate should
    recover, the attractiveness of each grade, the verdicts' helpful probabilities."""
    click, verdict = settings.click_model, settings.verdict_model
    return {"click_model": "position-based: P(click at r) = examination[r] * "
                           "attractiveness[grade]",
            "eta": click.eta, "examination": settings.examination(),
            "attractiveness": [float(a) for a in click.attractiveness(
                list(range(MAX_GRADE + 1)))],
            "p_helpful": list(verdict.p_helpful), "judge_rate": verdict.judge_rate,
            "preference_share": settings.preference_share, "rank_share": settings.rank_share}


def _with(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` with `overrides` written over it, nested dicts merged."""
    out = dict(config)
    for key, value in overrides.items():
        out[key] = _with(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


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
    shown["embedder"]["replaced_by"] = ("LookupEmbedder over the world's embedder (see "
                                        "embedder); the library's is never called")
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
    timings: dict[str, float] = {}
    started = time.perf_counter()
    world = _locomo(settings.conversations, settings.sessions)
    if world.questions.height == 0:
        raise WorldError(f"no question of the first {settings.conversations} conversation(s) "
                         f"has all its evidence in their first {settings.sessions} session(s); "
                         "raise --sessions")
    report("embedding", 0, 1)
    model = _embedder(settings.embedder)
    embedder = LookupEmbedder(model, world.turns["text"].to_list()
                              + world.questions["text"].to_list())
    timings["load_and_embed"] = time.perf_counter() - started
    with _quiet_library(), tempfile.TemporaryDirectory(prefix="ck-world-",
                                                       dir=_scratch()) as tmp:
        work = Path(tmp)
        config = _with(memory_config(work, dims=embedder.config.embedding_dims),
                       settings.production.library_config())
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
                log, tally = use(memory, clock, world, ids, settings, report)
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
        "embedder": _embedder_info(settings.embedder, model),
        "truth": _truth_json(settings),
        "production": {**settings.as_json()["production"],
                       "engine_toml": settings.production.engine_toml()},
        "counts": {
            "memories": len(ids), "questions": world.questions.height,
            "questions_searched": len({s.question_id for s in log}),
            "questions_judged": len(tally.judged_hashes), "qrels": qrels,
            "searches": len(log), "searches_without_results": sum(not s.shown for s in log),
            "clicks": tally.clicks, "verdicts": tally.verdicts,
            "verdicts_helpful": tally.helpful, "verdicts_without_query": tally.without_query,
            "success_rows": tally.verdicts - tally.without_query,
            "verdicts_with_rank": tally.ranked,
            "preference_questions_searched": len({s.query_hash for s in log if s.preference}),
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
               "--graph-jsonl DIR/context_graph.jsonl --qdrant-path DIR/qdrant "
               "--query-embedder SPEC --store X.duckdb` (world.json gives SPEC and the "
               "[engine] block that replays production). Exit status: 0 success, 2 bad "
               "input.")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the folder to write (created; must be empty unless --replace)")
    add_settings_arguments(parser)
    parser.add_argument("--replace", action="store_true",
                        help="overwrite the world in DIR (one with world.json); other "
                             "files there, such as a README, are kept")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
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
