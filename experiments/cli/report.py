"""`msprlab report RUN`: render a results bundle as report.html and summary.md.

RUN is a bundle folder (what `msprlab run|ablate|tune` print as "results: ...") or the id
of the MLflow parent run those commands log the bundle to; a run's artifacts are
downloaded first. Rendering reads files only: the engine never runs again.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path
from typing import Any

from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    BadInput,
    print_error,
    stdout_console,
    writable_folder,
)

__all__ = ["add_report_command"]

RUN_ID = re.compile(r"[0-9a-f]{32}")
DEFAULT_DOWNLOADS = Path("out")

DESCRIPTION = """\
Render a results bundle as one self-contained HTML report (tables, plots as embedded
PNGs, no external files) and a markdown summary (headline tables and provenance).

RUN is either
  - a bundle folder, ROOT/results/NAME-COMMAND-STAMP, as printed by `msprlab run`,
    `ablate` or `tune`; the report goes into that folder unless --out is given; or
  - an MLflow run id (32 hex digits) of such a command's parent run: its artifacts
    (the bundle) are downloaded into --out (default out/mlflow-RUN_ID) and the report
    is written beside them.

Parts a bundle lacks (no study/ after `ablate`, no ablation/ after `tune`, no isolation
audit) are rendered as a note saying what is missing. Exit status: 0 written, 2 when RUN
is not a bundle (the message lists the files looked for) or the MLflow run cannot be
read.
"""


class _NotABundle(Exception):
    """RUN could not be turned into a bundle folder (the message says why)."""


def _download(run_id: str, tracking_uri: str, dst: Path) -> Path:
    try:
        import mlflow.artifacts
        from mlflow.exceptions import MlflowException
    except ImportError as exc:
        raise _NotABundle(f"reading MLflow run {run_id} requires mlflow: pip install mlflow "
                          f"({exc})") from None
    dst.mkdir(parents=True, exist_ok=True)
    try:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, tracking_uri=tracking_uri,
                                                   dst_path=str(dst))
    except MlflowException as exc:
        raise _NotABundle(f"MLflow run {run_id} at {tracking_uri}: {exc.message}; pass the "
                          "tracking URI the run was logged to with --tracking-uri") from None
    return Path(path)


def _bundle_folder(run: str, tracking_uri: str, out: Path | None) -> Path:
    path = Path(run)
    if path.exists():
        return path
    if RUN_ID.fullmatch(run):
        return _download(run, tracking_uri, out or DEFAULT_DOWNLOADS / f"mlflow-{run}")
    raise _NotABundle(f"{run}: no such folder, and not an MLflow run id (32 hex digits); "
                      "give a results bundle folder such as results/locomo-run-STAMP")


def cmd_report(args: argparse.Namespace) -> int:
    from msprlab.reports import BundleError, load_bundle, write_report

    console = stdout_console(100)
    try:
        if args.out is not None:
            writable_folder(args.out, "--out")
        folder = _bundle_folder(args.run, args.tracking_uri, args.out)
        results = load_bundle(folder)
    except (_NotABundle, BundleError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    target = args.out or folder
    created = not Path(target).exists()
    try:
        html, markdown = write_report(results, target)
    except OSError as exc:
        if created:  # leave no empty folder behind
            shutil.rmtree(target, ignore_errors=True)
        raise BadInput(f"{'--out ' if args.out else ''}{target}: cannot write the report "
                       f"there ({exc.strerror or exc}); give a writable --out") from None
    if results.missing:
        console.print("not in this bundle (noted in the report): "
                      + ", ".join(results.missing), highlight=False)
    console.print(f"report: {html}", highlight=False, soft_wrap=True)
    console.print(f"summary: {markdown}", highlight=False, soft_wrap=True)
    return EXIT_OK


def add_report_command(commands: Any) -> None:
    parser = commands.add_parser(
        "report", help="render a results bundle (or an MLflow run) as HTML and markdown",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", metavar="RUN",
                        help="a results bundle folder, or an MLflow run id")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write report.html and summary.md here (default: the bundle "
                             "folder; for an MLflow run, also where its artifacts go)")
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db",
                        help="MLflow tracking URI for a run id (default: %(default)s)")
    parser.set_defaults(func=cmd_report)
