"""The built-source verbs of `msprlab ingest`: locomo, locomo-log, synthetic and scifact.

Each verb parses its options into the typed settings of `msprlab.datasets.build`, builds
the dataset with the function there, and writes it through `run_ingest` (progress bar,
counts, exit 2 on a bad row or a refused store). Bad options exit 2 before any work.
What a verb adds beside the store (a Qdrant local index, the synthetic truth) is written
only after the store holds the dataset, and names the dataset digest it belongs to.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import polars as pl
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from msprlab.datasets.build import (
    CLICK_MODELS,
    LocomoBuild,
    LogSpec,
    build_locomo,
    build_locomo_log,
    build_scifact,
    build_synthetic,
    default_logging_config,
    default_p_helpful,
    make_click_model,
)
from msprlab.datasets.clicks import VerdictModel
from msprlab.datasets.schema import Dataset
from msprlab.datasets.sidecars import (
    index_digest,
    index_path,
    memory_index,
    truth_path,
    truth_record,
    write_local_index,
    write_truth,
)
from msprlab.datasets.sources.locomo import LOCOMO_PATH
from msprlab.datasets.sources.scifact import SPLITS
from msprlab.datasets.store import Progress as ProgressCallback
from msprlab.datasets.synthetic import SIGNALS, PlantedWeights, SyntheticSpec
from msprlab.engine import EngineConfig, config_from_dict
from msprlab.experiments.cli.exits import EXIT_BAD_INPUT, EXIT_OK, print_error
from msprlab.experiments.cli.ingest_run import add_store_arguments, run_ingest

if TYPE_CHECKING:
    from msprlab.datasets.embed import Embedder

__all__ = ["add_source_verbs"]

Verbs: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

# CLI names of the embedders -> their names in msprlab.datasets.embed.EMBEDDERS.
EMBEDDER_NAMES = {"tfidf": "tfidf-svd", "wordllama": "wordllama"}
ANOMALY_ACTIONS = {
    "split": "several ids in one string: split on [;\\s]+",
    "normalised": "id rewritten ('D:11:26' -> 'D11:26', 'D30:05' -> 'D30:5')",
    "duplicate": "repeated id: one qrel",
    "unusable": "left out of the qrels ('D', a turn past its session's end)",
    "no_evidence": "empty evidence: query kept without qrels (abstention)",
    "no_usable_evidence": "no id resolves: query kept without qrels (abstention)",
    "date_without_session": "a session date with no turns: ignored",
}
LOCOMO_LOGGER = "msprlab.datasets.sources.locomo"

QDRANT_HELP = (
    "where the vectors go besides the store's embeddings table. none (default): nowhere "
    "else; the embeddings table stays the one copy and a replay rebuilds an in-memory "
    "Qdrant index from it in about 3 s for LoCoMo (0.5 ms per point). local: also write a "
    "Qdrant local index to STORE.qdrant/ (the vectors with owner payloads, tagged with the "
    "dataset digest, rebuilt only when the digest changes); Qdrant's local mode commits "
    "every point to SQLite, about 0.8 ms per point when built in /dev/shm (5 s for "
    "LoCoMo) and 3-17 ms per point straight to disk, and its filtered searches are no "
    "faster than in memory (about 150 ms each), so it pays only for tools that need the "
    "folder. memory: build the in-memory index once after the ingest, to check that the "
    "vectors load and to show what a replay pays; nothing is kept.")


# ---- option parsing ---------------------------------------------------------------------
def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 0.1,0.95, got {text!r}") from None


def _planted(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or name.strip() not in SIGNALS:
            raise argparse.ArgumentTypeError(
                f"expected SIGNAL=WEIGHT pairs with SIGNAL one of {', '.join(SIGNALS)}, "
                f"got {part!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"weight of {name.strip()!r} must be a number, got {value!r}") from None
    return out


def _embedder(kind: str, dim: int) -> Embedder:
    """The embedder the CLI name stands for (TF-IDF unfitted; the build fits it)."""
    from msprlab.datasets.embed import make_embedder  # scikit-learn: only when embedding
    return make_embedder(EMBEDDER_NAMES[kind], dim=dim)


def _logging_config(path: Path | None) -> EngineConfig:
    if path is None:
        return default_logging_config()
    text = path.read_text(encoding="utf-8")
    raw = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a ContextKit configuration object, got "
                         f"{type(raw).__name__}")
    return config_from_dict(raw)


def _log_spec(args: argparse.Namespace, *, max_grade: int) -> LogSpec:
    """LogSpec from the options; `max_grade` is the verb's default when --max-grade is unset."""
    grade = max_grade if args.max_grade is None else args.max_grade
    click_model = make_click_model(args.click_model, noise=args.noise, max_grade=grade,
                                   eta=args.eta, continuation=args.continuation)
    p_helpful = args.p_helpful if args.p_helpful is not None else default_p_helpful(grade)
    verdicts = VerdictModel(p_helpful=p_helpful, judge_rate=args.judge_rate)
    return LogSpec(n_searches=args.searches, click_model=click_model, verdict_model=verdicts,
                   logging_config=_logging_config(args.logging_config), zipf_s=args.zipf_s,
                   mean_gap_seconds=args.mean_gap_seconds, limit=args.limit)


def _bad_options(console: Console, exc: Exception) -> int:
    print_error(exc, console)
    console.print("nothing was written", highlight=False)
    return EXIT_BAD_INPUT


# ---- shared option groups -----------------------------------------------------------------
def _add_embedder_arguments(parser: argparse.ArgumentParser, *, allow_none: bool) -> None:
    choices = ["none", *EMBEDDER_NAMES] if allow_none else list(EMBEDDER_NAMES)
    default = "none" if allow_none else "tfidf"
    parser.add_argument(
        "--embedder", choices=choices, default=default,
        help="tfidf: scikit-learn TF-IDF + TruncatedSVD fitted on the memory texts "
             "(deterministic, nothing downloaded); wordllama: WordLlama's shipped weights "
             "(dims 64, 128 or 256)"
             + ("; none: no embeddings" if allow_none else "") + " (default: %(default)s)")
    parser.add_argument("--dim", type=int, default=256, metavar="N",
                        help="embedding width (default: %(default)s)")


def _add_log_arguments(parser: argparse.ArgumentParser, *, searches: int, max_grade: int,
                       zero_searches: bool) -> None:
    log = parser.add_argument_group(
        "simulated log",
        "A Zipf query stream replayed through a logging ranker (datasets/simulate.py); "
        "the click model reads each shown memory's grade (0 when unjudged), the verdict "
        "model judges clicks. The logging ranker defaults to the library's configuration "
        "with MSPR on and feedback, success and frequency recorded, every MSPR weight 0 "
        "(delta_personal, epsilon_frequency, zeta_success): the log of a deployment "
        "before tuning, whose verdicts move rankings only through the library's relevance "
        "bump.")
    log.add_argument("--searches", type=int, default=searches, metavar="N",
                     help="searches to simulate (default: %(default)s"
                          + ("; 0: no log" if zero_searches else "") + ")")
    log.add_argument("--click-model", choices=list(CLICK_MODELS), default="pbm",
                     help="position-based, cascade or dependent-click (default: %(default)s)")
    log.add_argument("--eta", type=float, metavar="X",
                     help="pbm: examination r**-eta at rank r (default: 1.0)")
    log.add_argument("--continuation", type=_floats, metavar="L1,L2,...",
                     help="dcm: probability of going on after a click at ranks 1, 2, ...; "
                          "later ranks reuse the last (default: 0.7,0.6,0.5,0.45,0.4)")
    log.add_argument("--noise", type=float, metavar="X",
                     help="share of clicks decided by a fair coin, not the grade "
                          "(default: 0.1)")
    log.add_argument("--max-grade", type=int, metavar="G",
                     help=f"the grade a click model treats as perfect (default: {max_grade}, "
                          "the top grade of this source's qrels)")
    log.add_argument("--p-helpful", type=_floats, metavar="P0,...,PG",
                     help="probability a judged click on grade g is helpful, one per grade "
                          "0..max-grade (default: 0.1,0.95 for max grade 1; "
                          "0.1,0.6,0.85,0.95 for max grade 3)")
    log.add_argument("--judge-rate", type=float, default=1.0, metavar="P",
                     help="probability a click gets a verdict (default: %(default)s)")
    log.add_argument("--zipf-s", type=float, default=1.1, metavar="S",
                     help="query popularity ~ rank**-s, so queries repeat (default: "
                          "%(default)s)")
    log.add_argument("--mean-gap-seconds", type=float, default=3600.0, metavar="S",
                     help="mean time between searches once every query is answerable "
                          "(default: %(default)s)")
    log.add_argument("--limit", type=int, default=10, metavar="K",
                     help="results shown per search (default: %(default)s)")
    log.add_argument("--logging-config", type=Path, metavar="FILE",
                     help="a ContextKit configuration (.json or .toml) for the logging "
                          "ranker, replacing the default described above")


def _add_qdrant_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--qdrant", choices=("none", "local", "memory"), default="none",
                        help=QDRANT_HELP)


# ---- after the ingest ---------------------------------------------------------------------
@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Mute a logger whose message the verb prints itself (the LoCoMo anomaly summary)."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _print_anomalies(console: Console, anomalies: pl.DataFrame, file: Path, *,
                     show_all: bool) -> None:
    console.print(f"evidence anomalies in {file.name}: {anomalies.height}, repaired or left "
                  "out as the dataset card says", highlight=False)
    by_kind = anomalies.group_by(pl.col("kind").cast(pl.String)).len().sort("kind")
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("kind", "rows", "what the loader did"):
        table.add_column(column, justify="right" if column == "rows" else "left")
    for kind, count in by_kind.iter_rows():
        table.add_row(kind, f"{count:,}", ANOMALY_ACTIONS.get(kind, ""))
    console.print(table)
    if not show_all:
        console.print("list every one with --show-anomalies", highlight=False)
        return
    rows = Table(box=box.SIMPLE_HEAD)
    for column in ("sample_id", "where", "kind", "value", "resolved"):
        rows.add_column(column)
    for row in anomalies.select("sample_id", "where", pl.col("kind").cast(pl.String),
                                "value", "resolved").iter_rows():
        rows.add_row(*("" if v is None else str(v) for v in row))
    console.print(rows)


def _index(console: Console, mode: str, ds: Dataset, store: Path) -> None:
    held = index_digest(store)
    if mode != "local" and held not in (None, ds.digest):
        console.print(f"[yellow]warning:[/yellow] {index_path(store)} indexes digest "
                      f"{held[:12]}, not the store's {ds.digest[:12]}; rebuild it with "
                      "--qdrant local or delete it", highlight=False, soft_wrap=True)
    if mode == "none":
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"Qdrant {mode} index", total=ds.embeddings.height)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        if mode == "local":
            report = write_local_index(ds, store, progress=update)
            message = report.summary()
        else:
            started = time.perf_counter()
            with memory_index(ds, progress=update) as index:
                points = index.count()
            message = (f"Qdrant in-memory index: {points:,} points loaded in "
                       f"{time.perf_counter() - started:.2f} s (not kept)")
    console.print(message, highlight=False, soft_wrap=True)


def _timed(read: Callable[[ProgressCallback], Any], sink: list[Any],
           ) -> Callable[[ProgressCallback], Any]:
    """`read` that appends (result, seconds) to `sink`, so the verb can use the result."""
    def wrapped(progress: ProgressCallback) -> Any:
        started = time.perf_counter()
        result = read(progress)
        sink.append((result, time.perf_counter() - started))
        return result
    return wrapped


def _print_built(console: Console, what: str, seconds: float) -> None:
    console.print(f"built {what} in {seconds:.2f} s", highlight=False)


# ---- the verbs ----------------------------------------------------------------------------
def _locomo_verb(args: argparse.Namespace, *, with_log: bool) -> int:
    console = Console()
    try:
        if not args.file.is_file():
            raise FileNotFoundError(f"{args.file}: no LoCoMo file here")
        embedder = _embedder(args.embedder, args.dim)
        log = _log_spec(args, max_grade=1) if with_log else None
    except (OSError, ValueError, ImportError) as exc:
        return _bad_options(console, exc)
    built: list[tuple[LocomoBuild, float]] = []

    def read(progress: ProgressCallback) -> LocomoBuild:
        with _quiet(LOCOMO_LOGGER):
            if log is None:
                return build_locomo(embedder, path=args.file, progress=progress)
            return build_locomo_log(embedder, log, seed=args.seed, path=args.file,
                                    progress=progress)

    what = "LoCoMo + simulated log" if with_log else "LoCoMo"
    code = run_ingest(lambda p: _timed(read, built)(p).dataset, args.store,
                      replace=args.replace, what=what, console=console)
    if not built:
        return code
    result, seconds = built[0]
    _print_built(console, what, seconds)
    _print_anomalies(console, result.anomalies, args.file, show_all=args.show_anomalies)
    if code == EXIT_OK:
        _index(console, args.qdrant, result.dataset, args.store)
    return code


def cmd_ingest_locomo(args: argparse.Namespace) -> int:
    return _locomo_verb(args, with_log=False)


def cmd_ingest_locomo_log(args: argparse.Namespace) -> int:
    return _locomo_verb(args, with_log=True)


def _synthetic_spec(args: argparse.Namespace) -> SyntheticSpec:
    given = {"n_tenants": args.tenants, "n_users": args.users,
             "memories_per_user": args.memories, "queries_per_user": args.queries,
             "n_topics": args.topics, "dim": args.dim, "span_days": args.span_days,
             "relevance_noise": args.relevance_noise}
    settings: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if args.weights is not None:
        settings["weights"] = PlantedWeights(**args.weights)
    return SyntheticSpec(**settings)


def _print_truth(console: Console, record: dict[str, Any], path: Path) -> None:
    console.print(f"planted weights (written to {path}):", highlight=False, soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("signal")
    table.add_column("weight", justify="right")
    for signal, weight in record["planted_weights"].items():
        table.add_row(signal, f"{weight:g}")
    console.print(table)
    console.print(f"relevance noise {record['relevance_noise']:g}, seed {record['seed']}",
                  highlight=False)


def cmd_ingest_synthetic(args: argparse.Namespace) -> int:
    console = Console()
    try:
        spec = _synthetic_spec(args)
        if args.searches < 0:
            raise ValueError(f"`--searches >= 0` must hold, but got {args.searches}")
        log = _log_spec(args, max_grade=3) if args.searches else None
    except (OSError, ValueError) as exc:
        return _bad_options(console, exc)
    built: list[tuple[Any, float]] = []

    def read(progress: ProgressCallback) -> Any:
        return build_synthetic(spec, log, seed=args.seed, progress=progress)

    what = "synthetic world" + (" + simulated log" if log else "")
    code = run_ingest(lambda p: _timed(read, built)(p)[0], args.store, replace=args.replace,
                      what=what, console=console)
    if not built:
        return code
    (dataset, truth), seconds = built[0]
    _print_built(console, what, seconds)
    record = truth_record(truth, spec, seed=args.seed, digest=dataset.digest)
    path = truth_path(args.store)
    if code == EXIT_OK:
        if not (path.is_file() and json.loads(path.read_text(encoding="utf-8")) == record):
            write_truth(path, record)
        _print_truth(console, record, path)
    return code


def cmd_ingest_scifact(args: argparse.Namespace) -> int:
    console = Console()
    try:
        embedder = None if args.embedder == "none" else _embedder(args.embedder, args.dim)
    except (ValueError, ImportError) as exc:
        return _bad_options(console, exc)
    built: list[tuple[Dataset, float]] = []

    def read(progress: ProgressCallback) -> Dataset:
        return build_scifact(args.split, embedder, progress=progress)

    what = f"SciFact {args.split}"
    code = run_ingest(_timed(read, built), args.store, replace=args.replace, what=what,
                      console=console)
    if built:
        _print_built(console, what, built[0][1])
    return code


# ---- parsers ------------------------------------------------------------------------------
def _add_locomo_verbs(verbs: Verbs) -> None:
    common = ("each dialog turn is a memory owned by its conversation, sessions are runs "
              "starting at their dates, every turn is embedded (the embeddings table) and "
              "run through the engine's edge synthesis in time order, so REPLY_TO, "
              "TEMPORAL_NEXT and, from the embeddings, TOPIC_SIMILAR edges form; each QA "
              "item is a query (its category kept as question_type) with qrels from its "
              "evidence turns. The evidence anomalies the dataset card lists are repaired "
              "or left out and printed by kind.")
    locomo = verbs.add_parser(
        "locomo", help="LoCoMo turns, edges, embeddings, queries and qrels",
        description=f"Build LoCoMo (datasets/data/locomo, CC BY-NC 4.0): {common} No "
                    "searches: `ingest locomo-log` adds a simulated log.")
    log = verbs.add_parser(
        "locomo-log", help="LoCoMo plus a click-model feedback log (semi-synthetic)",
        description="Build LoCoMo exactly as `ingest locomo` does (see its --help) and "
                    "simulate a feedback log on it: seeds are the cosine between each question "
                    "(embedded by the same embedder) and the stored embeddings of its "
                    "conversation's memories. Deterministic for a seed.")
    for parser in (locomo, log):
        parser.add_argument("--file", type=Path, default=LOCOMO_PATH, metavar="PATH",
                            help="a file in locomo10.json's format (default: the shipped "
                                 "copy)")
        _add_embedder_arguments(parser, allow_none=False)
        _add_qdrant_argument(parser)
        parser.add_argument("--show-anomalies", action="store_true",
                            help="list every evidence anomaly, not only the counts by kind")
    log.add_argument("--seed", type=int, required=True,
                     help="seeds the query stream, clicks and verdicts")
    _add_log_arguments(log, searches=2000, max_grade=1, zero_searches=False)
    for parser, func in ((locomo, cmd_ingest_locomo), (log, cmd_ingest_locomo_log)):
        add_store_arguments(parser)
        parser.set_defaults(func=func)


def _add_synthetic_verb(verbs: Verbs) -> None:
    defaults = {f.name: f.default for f in fields(SyntheticSpec)}
    planted = PlantedWeights()
    synthetic = verbs.add_parser(
        "synthetic", help="a fully synthetic world with planted weights, and its log",
        description="Generate users in tenants with roles and topic preferences, their "
                    "memories (embedded, edges synthesised), queries phrased after the "
                    "intent rules, and qrels graded by a utility with planted weights "
                    "(datasets/synthetic.py); then simulate a feedback log on it. The "
                    "planted weights are printed and written to STORE.truth.json with the "
                    "seed, the spec and the dataset digest, so tuning can be checked "
                    "against them.")
    synthetic.add_argument("--seed", type=int, required=True,
                           help="seeds the generator and the simulated log")
    world = synthetic.add_argument_group("world")
    for option, name, kind, meta in (
            ("--tenants", "n_tenants", int, "N"), ("--users", "n_users", int, "N"),
            ("--memories", "memories_per_user", int, "N"),
            ("--queries", "queries_per_user", int, "N"), ("--topics", "n_topics", int, "N"),
            ("--dim", "dim", int, "N"), ("--span-days", "span_days", float, "DAYS"),
            ("--relevance-noise", "relevance_noise", float, "SD")):
        world.add_argument(option, type=kind, metavar=meta,
                           help=f"{name} (default: {defaults[name]})")
    world.add_argument("--weights", type=_planted, metavar="SIGNAL=W,...",
                       help="planted weights; unnamed signals keep their default (default: "
                            + ",".join(f"{s}={getattr(planted, s):g}" for s in SIGNALS) + ")")
    _add_log_arguments(synthetic, searches=1000, max_grade=3, zero_searches=True)
    add_store_arguments(synthetic)
    synthetic.set_defaults(func=cmd_ingest_synthetic)


def _add_scifact_verb(verbs: Verbs) -> None:
    scifact = verbs.add_parser(
        "scifact", help="SciFact (BEIR split): abstracts, claims and qrels",
        description="Build SciFact (datasets/data/scifact): each abstract is a memory of "
                    "the one user 'scifact', the split's claims are queries, its judgments "
                    "qrels. A sanity check of the dense and lexical parts (plain BM25: "
                    "nDCG@10 about 0.66). No times, edges or events.")
    scifact.add_argument("--split", choices=sorted(SPLITS), default="test",
                         help="test: 300 claims; train: 809 claims (default: %(default)s)")
    _add_embedder_arguments(scifact, allow_none=True)
    add_store_arguments(scifact)
    scifact.set_defaults(func=cmd_ingest_scifact)


def add_source_verbs(verbs: Verbs) -> None:
    """Add the locomo, locomo-log, synthetic and scifact verbs to `ingest`'s sub-parsers."""
    _add_locomo_verbs(verbs)
    _add_synthetic_verb(verbs)
    _add_scifact_verb(verbs)
