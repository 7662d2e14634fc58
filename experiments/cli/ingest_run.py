"""What every `msprlab ingest` verb shares: `run_ingest` (a progress bar while reading and
writing, the counts at the end, exit status 2 with the message when a row is bad or the
store holds another dataset) and the `--store` / `--replace` arguments. Its own module, so
the generic and contextkit verbs (`ingest`) and the shipped sources' verbs
(`ingest_sources`) both build on it without importing each other."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from msprlab.datasets.schema import Dataset
from msprlab.datasets.store import IngestReport, StoreConflictError, ingest
from msprlab.datasets.store import Progress as ProgressCallback
from msprlab.datasets.validate import IngestError
from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    BadInput,
    print_error,
    writable_file,
)

__all__ = ["add_store_arguments", "run_ingest"]


def _bar(progress: Progress, description: str) -> ProgressCallback:
    task = progress.add_task(description, total=None)

    def update(stage: str, done: int, total: int) -> None:
        progress.update(task, description=f"{description}: {stage}", completed=done, total=total)

    return update


def _print_report(console: Console, report: IngestReport) -> None:
    console.print(report.summary(), highlight=False, soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, count in report.counts.items():
        table.add_row(name, f"{count:,}")
    console.print(table)


def run_ingest(read: Callable[[ProgressCallback], Dataset], store: Path, *, replace: bool,
               what: str, console: Console | None = None) -> int:
    """Read a dataset with `read(progress)`, ingest it into `store`; return the exit status."""
    console = console or Console()
    try:
        writable_file(store, "--store")
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            ds = read(_bar(progress, f"reading {what}"))
            report = ingest(ds, store, replace=replace, progress=_bar(progress, f"writing {store}"))
    except (IngestError, StoreConflictError, BadInput) as exc:
        print_error(exc, console)
        console.print("nothing was written", highlight=False)
        return EXIT_BAD_INPUT
    _print_report(console, report)
    return EXIT_OK


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """`--store PATH` and `--replace`, shared by every ingest verb."""
    parser.add_argument("--store", type=Path, required=True, metavar="PATH",
                        help="the event store (a DuckDB file) to write")
    parser.add_argument("--replace", action="store_true",
                        help="replace the store if it holds another dataset (without it, "
                             "such an ingest is refused)")
