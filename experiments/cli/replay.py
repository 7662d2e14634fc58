"""`msprlab replay STORE`: replay an event store through the engine into a candidate table.

Prints what was replayed and how (frequency mode, feedback policy, seeds), where the table
is cached, and, with `--check`, the proof that the batch scorer ranks every search exactly
as the sequential engine does, plus how many replayed rankings match the logged ones.
"""

from __future__ import annotations

import argparse
import json
import time
import tomllib
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from msprlab.datasets.sidecars import replay_cache_path
from msprlab.engine import EngineConfig, config_from_dict
from msprlab.engine.batch import WEIGHTS, row_ranks, scores
from msprlab.engine.config import ConfigError
from msprlab.engine.roles import POLICY_NAMES, RolePolicy, policy_from_name
from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_FINDING,
    EXIT_OK,
    print_error,
    stdout_console,
)

from ..measures.scoring import ranked_lists
from ..replay import FREQUENCY_MODES, CandidateTable, cached_replay, replay

__all__ = ["add_replay_command", "all_signals_config", "load_engine_config"]


ALL_SIGNALS = {"context_graph": {"enabled": True},
               "mspr": {"enabled": True, "feedback": {"enabled": True},
                        "success": {"enabled": True}, "frequency": {"enabled": True},
                        "intent": {"enabled": True}}}


def all_signals_config() -> EngineConfig:
    """Library defaults with MSPR and every signal switched on (new weights still 0)."""
    return config_from_dict(ALL_SIGNALS)


def load_engine_config(path: Path | None) -> EngineConfig:
    """A ContextKit configuration dict from JSON or TOML; None gives `all_signals_config`."""
    if path is None:
        return all_signals_config()
    text = Path(path).read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text) if Path(path).suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {Path(path).suffix.lstrip('.') or 'JSON'}: "
                          f"{exc}") from None
    try:
        return config_from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _policy(name: str, config: EngineConfig) -> RolePolicy | None:
    policy = policy_from_name(name)
    if policy is not None and not config.mspr.role.enabled:
        raise ConfigError(f"--policy {name} needs mspr.role.enabled in the config")
    return policy


def _seed_index(args: argparse.Namespace, ds: Any) -> Any:
    """None for exact seeds; else the store's Qdrant local index (built beside the store
    when missing or stale), or a Qdrant server at --qdrant-url."""
    if args.seeds == "exact":
        return None
    from msprlab.datasets.dense_index import QdrantIndex
    from msprlab.datasets.sidecars import index_path, write_local_index
    dim = len(ds.embeddings["vector"][0])
    if args.qdrant_url:
        return QdrantIndex(dim=dim, url=args.qdrant_url)
    write_local_index(ds, args.store)  # a no-op when it already indexes this digest
    return QdrantIndex(dim=dim, path=index_path(args.store))


def cmd_replay(args: argparse.Namespace) -> int:
    console = stdout_console(80)
    try:
        config = load_engine_config(args.config)
        policy = _policy(args.policy, config)
    except (ConfigError, OSError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    from msprlab.datasets.store import load_dataset
    try:
        ds = load_dataset(args.store)
    except (FileNotFoundError, ValueError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    searches = int((ds.events["kind"] == "search").sum())
    started = time.perf_counter()
    with Progress(TextColumn("replaying events"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("replay", total=ds.events.height)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            index = _seed_index(args, ds)
            if args.check:
                table, cached = replay(ds, config, frequency=args.frequency, limit=args.limit,
                                       policy=policy, progress=report, engine_rankings=True,
                                       seed_index=index), False
            else:
                cache = args.cache or replay_cache_path(args.store)
                table, cached = cached_replay(ds, config, cache, frequency=args.frequency,
                                              limit=args.limit, policy=policy,
                                              progress=report, seed_index=index)
        except ValueError as exc:
            print_error(exc, console)
            return EXIT_BAD_INPUT
    seconds = time.perf_counter() - started
    _summary(console, table, cached=cached, seconds=seconds, logged_searches=searches)
    if args.out is not None:
        table.save(args.out)
        console.print(f"wrote the candidate table to {args.out}")
    weights = [getattr(config.retrieval, name) for name in WEIGHTS]
    block = table.block()
    intent, roles = config.mspr.enabled and config.mspr.intent.enabled, \
        config.mspr.enabled and config.mspr.role.enabled
    lists = ranked_lists(table, block, row_ranks(block, scores(block, weights, intent=intent),
                                                 roles=roles))
    logged = table.searches["logged"].to_list()
    comparable = [(a, b) for a, b in zip(lists, logged, strict=True) if b is not None]
    same = sum(a == b for a, b in comparable)
    console.print(f"match rate with the logged rankings (this config's weights): "
                  f"{same:,}/{len(comparable):,} searches")
    if args.check:
        engine = [list(x or []) for x in table.searches["engine"].to_list()]
        agree = sum(a == b for a, b in zip(lists, engine, strict=True))
        console.print(f"batch scorer vs sequential engine: {agree:,}/{len(engine):,} "
                      "searches ranked identically")
        if agree != len(engine):
            return EXIT_FINDING
    return EXIT_OK


def _summary(console: Console, table: CandidateTable, *, cached: bool, seconds: float,
             logged_searches: int) -> None:
    meta: dict[str, Any] = table.meta
    s = table.searches
    errors = int(s["error"].is_not_null().sum())
    source = "read from the cache" if cached else f"replayed ({logged_searches:,} logged " \
        f"searches, {logged_searches / max(seconds, 1e-9):,.0f} searches/s)"
    console.print(f"{meta['dataset']['source']} {meta['dataset']['digest'][:12]}: "
                  f"{s.height:,} evaluated searches, {table.candidates.height:,} candidates; "
                  f"{source} in {seconds:.1f} s", highlight=False)
    console.print(f"frequency: {meta['frequency']}; feedback: {meta['feedback_policy']}; "
                  f"seeds: {meta['seeds']}", highlight=False)
    if errors:
        console.print(f"[yellow]{errors:,} searches raised as the library would "
                      "(no results; kept as empty rankings)[/yellow]")
    judged = table.candidates["grade"].is_not_null().sum()
    console.print(f"judged candidates: {judged:,}; intents: " + ", ".join(
        f"{k} {v:,}" for k, v in s["intent_label"].value_counts(sort=True).iter_rows()),
        highlight=False)


def add_replay_command(commands: Any) -> None:
    parser = commands.add_parser(
        "replay", help="replay an event store through the engine into a candidate table",
        description="Walk the store's events in (ts, seq) order through the engine: memory "
                    "events first at equal timestamps, then searches, then feedback, access "
                    "and click, so every search sees the state strictly before it. Each "
                    "search with a query_id yields one row per candidate with every "
                    "weight-independent input of the final score. The table is cached "
                    "beside the store, keyed by the dataset digest, the engine config's "
                    "table key and the code, and reused.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("store", type=Path, help="the event store (DuckDB file)")
    parser.add_argument("--config", type=Path, default=None,
                        help="ContextKit config dict (.json or .toml); default: library "
                             "defaults with MSPR and every signal on, new weights 0")
    parser.add_argument("--frequency", choices=FREQUENCY_MODES, default="logged",
                        help="logged: access counts from the log's access events (any "
                             "weights can be scored from the table); closed_loop: the "
                             "config's own results feed the counts (table bound to its "
                             "weights)")
    parser.add_argument("--limit", type=int, default=None,
                        help="evaluated search limit (default: each logged search's)")
    parser.add_argument("--policy", choices=POLICY_NAMES, default="none",
                        help="role policy installed in the engine (needs mspr.role.enabled)")
    parser.add_argument("--seeds", choices=("exact", "qdrant"), default="exact",
                        help="exact: owner-scoped cosine in NumPy (what the simulated logs "
                             "used); qdrant: the store's Qdrant local index (STORE.qdrant, "
                             "built when missing) or --qdrant-url, with owner filters "
                             "(float32 scores)")
    parser.add_argument("--qdrant-url", default=None,
                        help="a Qdrant server holding the store's vectors (with --seeds qdrant)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="cache folder (default: STORE.cache beside the store)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="also write the table here (searches.parquet, "
                             "candidates.parquet, meta.json)")
    parser.add_argument("--check", action="store_true",
                        help="also run the sequential engine with the config's weights and "
                             "check the batch scorer ranks every search identically (exit 1 "
                             "if not); not cached")
    parser.set_defaults(func=cmd_replay)
