"""`msprlab ingest SOURCE ... --store PATH`: read a source, validate it, write the store.

`add_ingest_commands(commands)` adds the `ingest` command to the CLI's sub-parsers and
returns its own sub-parsers, so each source adds a verb there; every verb runs through
`ingest_run.run_ingest`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msprlab.datasets.schema import Dataset
from msprlab.datasets.store import Progress as ProgressCallback
from msprlab.experiments.cli.exits import EXIT_BAD_INPUT, BadInput, print_error
from msprlab.experiments.cli.ingest_run import add_store_arguments, run_ingest
from msprlab.experiments.cli.ingest_sources import add_source_verbs

__all__ = ["add_ingest_commands"]


def cmd_ingest_generic(args: argparse.Namespace) -> int:
    from msprlab.datasets.generic import read_generic
    folder: Path = args.directory
    read = _reader(lambda progress: read_generic(folder, progress=progress),
                   None if args.embedder is None else _embedder(args.embedder),
                   queries_only=False)
    return run_ingest(read, args.store, replace=args.replace, what=str(folder))


def _reader(load: Callable[[ProgressCallback], Dataset], embedder: Any, *,
            queries_only: bool) -> Callable[[ProgressCallback], Dataset]:
    """`run_ingest`'s read: `load` the source, then, when an embedder is given, embed its
    queries (`queries_only`) or its memories and queries."""
    def read(progress: ProgressCallback) -> Dataset:
        dataset = load(progress)
        if embedder is None:
            return dataset
        from msprlab.datasets.build import embed_queries, embed_texts
        what = "" if queries_only else f"{dataset.memories.height:,} memories and "
        progress(f"embedding {what}{dataset.queries.height:,} queries ({embedder.name})", 0, 1)
        return (embed_queries if queries_only else embed_texts)(dataset, embedder)
    return read


def _embedder(name: str, flag: str = "--embedder") -> Any:
    """The embedder `--embedder NAME` names, or BadInput saying what to install or pick."""
    from msprlab.datasets.embedders import EmbedderError, shipped_embedder
    try:
        return shipped_embedder(name, flag=flag)
    except EmbedderError as exc:
        raise BadInput(str(exc)) from None


def _query_embedder(args: argparse.Namespace) -> Any:
    """The embedder `--query-embedder` names (a shipped name, module:function or an HTTP
    endpoint with its options), built and probed; None without the flag."""
    if args.query_embedder is None:
        return None
    from msprlab.datasets.embedders import EmbedderError, EmbedderOptions, query_embedder
    options = EmbedderOptions(model=args.query_embedder_model,
                              key_env=args.query_embedder_key_env,
                              batch_size=args.query_embedder_batch,
                              timeout=args.query_embedder_timeout)
    try:
        return query_embedder(args.query_embedder, options)
    except EmbedderError as exc:
        raise BadInput(str(exc)) from None


def cmd_ingest_contextkit(args: argparse.Namespace) -> int:
    from msprlab.datasets.sources.contextkit import load_contextkit
    try:
        embedder = _query_embedder(args)
    except BadInput as exc:
        print_error(exc)
        return EXIT_BAD_INPUT
    read = _reader(lambda progress: load_contextkit(
        feedback_db=args.feedback_db, success_db=args.success_db,
        graph_jsonl=args.graph_jsonl, qdrant_path=args.qdrant_path,
        collection=args.collection, progress=progress), embedder, queries_only=True)
    return run_ingest(read, args.store, replace=args.replace, what="ContextKit artifacts")


def _add_contextkit_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    contextkit = verbs.add_parser(
        "contextkit", help="ContextKit's feedback/success SQLite files, graph export and Qdrant",
        description="Read ContextKit's artifacts: memories and vectors from the Qdrant local "
                    "collection, graph state and edges from the context graph's JSONL export, "
                    "verdicts from feedback_events.db, checked against query_success.db "
                    "(datasets/sources/contextkit.py). Give --qdrant-path or --graph-jsonl.")
    contextkit.add_argument("--feedback-db", type=Path, metavar="FILE",
                            help="feedback_events.db (verdicts become feedback events)")
    contextkit.add_argument("--success-db", type=Path, metavar="FILE",
                            help="query_success.db (checked: success history is re-derived "
                                 "from the verdicts; needs --feedback-db)")
    contextkit.add_argument("--graph-jsonl", type=Path, metavar="FILE",
                            help="the file ContextGraph.export_jsonl wrote")
    contextkit.add_argument("--qdrant-path", type=Path, metavar="DIR",
                            help="the Qdrant local folder of Memory's vector store")
    contextkit.add_argument("--collection", default="outhad_contextkit", metavar="NAME",
                            help="the collection in that folder (default: %(default)s)")
    contextkit.add_argument("--query-embedder", default=None, metavar="SPEC",
                            help="embed the verdicts' query texts as production did (the "
                                 "artifacts keep no query vectors): a shipped embedder "
                                 "(wordllama), an importable callable module:function "
                                 "(texts -> one vector each; its folder on PYTHONPATH), or "
                                 "an OpenAI-compatible endpoint http(s)://HOST/v1 (with "
                                 "--query-embedder-model). Without it replay projects "
                                 "queries from their text into the memories' space (an "
                                 "approximation; its fidelity is printed with every figure)")
    contextkit.add_argument("--query-embedder-model", default=None, metavar="NAME",
                            help="the model name sent to an HTTP endpoint")
    contextkit.add_argument("--query-embedder-key-env", default=None, metavar="VAR",
                            help="the environment variable holding the endpoint's API key "
                                 "(sent as a bearer token; never taken on the command line)")
    contextkit.add_argument("--query-embedder-batch", type=int, default=64, metavar="N",
                            help="texts per request to an HTTP endpoint (default: %(default)s)")
    contextkit.add_argument("--query-embedder-timeout", type=float, default=30.0,
                            metavar="SECONDS",
                            help="seconds per request to an HTTP endpoint; a timeout, 429 or "
                                 "5xx is retried twice (default: %(default)s)")
    add_store_arguments(contextkit)
    contextkit.set_defaults(func=cmd_ingest_contextkit)


def add_ingest_commands(
        commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add `ingest` (with the `generic` verb) to the CLI; return ingest's sub-parsers."""
    ingest_parser = commands.add_parser(
        "ingest", help="validate a source and write it to an event store",
        description="Read a source, validate every row and write it to an event store "
                    "(a DuckDB file), all or nothing. Re-ingesting the same data is a no-op; "
                    "a store holding another dataset is replaced only with --replace. "
                    "Exit 2 on a bad row (named by file, line and field) or a refused store.")
    verbs: argparse._SubParsersAction[argparse.ArgumentParser] = ingest_parser.add_subparsers(
        dest="source", required=True, metavar="SOURCE")
    generic = verbs.add_parser(
        "generic", help="a folder in the generic format (datasets/FORMAT.md)",
        description="Read memories, queries, qrels, events, edges and embeddings from JSONL "
                    "or Parquet files in DIR (datasets/FORMAT.md).")
    generic.add_argument("directory", type=Path, metavar="DIR")
    generic.add_argument("--embedder", default=None, metavar="NAME",
                         help="embed the memories and queries (a folder without vectors): "
                              "tfidf-svd (fitted on the memory texts) or wordllama "
                              "(shipped weights); the manifest records it and its "
                              "dimension")
    add_store_arguments(generic)
    generic.set_defaults(func=cmd_ingest_generic)
    _add_contextkit_verb(verbs)
    add_source_verbs(verbs)
    return verbs
