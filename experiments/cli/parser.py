"""The `msprlab` command line. Exit statuses are defined once, in `exits.py`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from msprlab.datasets.atomic import write_json_atomic
from msprlab.datasets.scenario import ScenarioError, load_scenario
from msprlab.experiments.cli.evaluate import add_evaluate_command
from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_FINDING,
    EXIT_HELP,
    EXIT_OK,
    BadInput,
    print_error,
    run_guarded,
    stdout_console,
    writable_folder,
)
from msprlab.experiments.cli.experiment import add_experiment_commands
from msprlab.experiments.cli.explain import add_explain_command
from msprlab.experiments.cli.ingest import add_ingest_commands
from msprlab.experiments.cli.replay import add_replay_command
from msprlab.experiments.cli.report import add_report_command
from msprlab.experiments.cli.score import add_score_command
from msprlab.experiments.regress import add_regress_command

DEMO_SCENARIOS = Path(__file__).parents[1] / "scenarios"  # experiments/scenarios/


def _scenario_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(target.glob("*.json"))
    return [target]


def _run_one(path: Path, engine: str, with_subgraph: bool) -> dict[str, Any]:
    if engine == "contextkit":
        try:
            from msprlab.experiments.parity.adapter import run_scenario_with_contextkit
        except ImportError as exc:
            raise BadInput(f"--engine contextkit needs the parity extra: "
                           f"pip install 'msprlab[parity]' ({exc})") from None
        load_scenario(path)  # same validation and error messages on both engines
        raw = json.loads(path.read_text(encoding="utf-8"))
        return run_scenario_with_contextkit(raw, with_subgraph=with_subgraph)
    from msprlab.experiments.parity.scenario_run import run_parsed, spaced_gc
    with spaced_gc():
        return run_parsed(load_scenario(path), with_subgraph=with_subgraph)


def print_output(console: Console, output: dict[str, Any]) -> None:
    """Ranked results of every event, as tables."""
    console.print(f"[bold]{output['scenario']}[/bold]")
    for event in output["events"]:
        if event["type"] == "feedback":
            result = event["result"]
            text = "None (not recorded)" if result is None else (
                f"{result['memory_id']}: delta {result['delta_applied']!r}, "
                f"relevance {result['new_relevance']!r}")
            console.print(f"  event {event['index']}: feedback -> {text}")
            continue
        if "error" in event:
            console.print(f"  event {event['index']}: search raised {event['error']}")
            continue
        title = f"event {event['index']}: search"
        if "intent" in event:
            title += f" (intent {event['intent']})"
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for column in ("#", "id", "score", "dense", "lexical", "graph", "freq", "personal",
                       "success", "seed"):
            table.add_column(column, justify="left" if column == "id" else "right",
                             no_wrap=True)
        for rank, r in enumerate(event["results"], start=1):
            table.add_row(str(rank), r["id"], f"{r['score']:.6f}", *(
                f"{r[k]:.6f}" for k in ("dense", "lexical", "graph", "frequency", "personal",
                                         "success")), "yes" if r["was_seed"] else "")
        console.print(table)
        for note in event.get("swallowed", []):
            console.print(f"  [yellow]fallback:[/yellow] {note}")


def _console() -> Console:
    # Wide enough for the ten result columns even when piped or in a narrow terminal.
    return stdout_console(112)


def cmd_scenario_run(args: argparse.Namespace) -> int:
    console = _console()
    files = _scenario_files(args.target)
    if not files:
        print_error(f"{args.target}: no scenario files (*.json) found", console)
        return EXIT_BAD_INPUT
    if args.out is not None:
        writable_folder(args.out, "--out")
    try:
        outputs = [(path, _run_one(path, args.engine, args.with_subgraph)) for path in files]
    except ScenarioError as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    for path, output in outputs:
        if args.out is None:
            print_output(console, output)
            continue
        target = args.out / f"{path.stem}.out.json"
        try:  # every scenario ran before anything is written
            args.out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(target, output)
        except OSError as exc:
            raise BadInput(f"--out {args.out}: cannot write {target.name} "
                           f"({exc.strerror or exc}); give a writable folder") from None
    if args.out is not None:
        console.print(f"wrote {len(outputs)} output file(s) to {args.out}")
    return EXIT_OK


def cmd_scenario_diff(args: argparse.Namespace) -> int:
    from msprlab.experiments.parity.scenario_diff import diff_outputs, format_divergences
    console = stdout_console(80)
    try:
        a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (args.a, args.b))
    except (OSError, json.JSONDecodeError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    divergences = diff_outputs(a, b, tolerance=args.tolerance)
    if not divergences:
        console.print(f"no divergence: {args.a} and {args.b} agree")
        return EXIT_OK
    print(format_divergences(divergences))
    return EXIT_FINDING


def cmd_demo(args: argparse.Namespace) -> int:
    """The engine over the spec's worked examples and a shipped scenario file."""
    console = _console()
    console.print("[bold]msprlab demo[/bold]: the reference engine on MSPR.md's worked examples "
                  f"A (BFS), C (full MSPR) and D (PPR), shipped in {DEMO_SCENARIOS}. Scores "
                  "are rounded to 6 decimals here; `msprlab scenario run DIR --out OUT` writes "
                  "them at full precision.")
    from msprlab.experiments.parity.scenario_run import run_parsed
    for path in _scenario_files(DEMO_SCENARIOS):
        print_output(console, run_parsed(load_scenario(path)))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msprlab", description="Offline evaluation harness for ContextKit's MSPR ranker.",
        epilog=EXIT_HELP)
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the traceback (exit status 3)")
    commands = parser.add_subparsers(dest="command", required=True)
    add_ingest_commands(commands)
    add_evaluate_command(commands)
    add_replay_command(commands)
    add_experiment_commands(commands)
    add_report_command(commands)
    add_explain_command(commands)
    add_score_command(commands)
    add_regress_command(commands)
    demo = commands.add_parser("demo", help="run the engine on the spec's worked examples")
    demo.set_defaults(func=cmd_demo)
    scenario = commands.add_parser("scenario", help="replay or compare scenario files")
    verbs = scenario.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser(
        "run", help="replay scenario files (ck-mspr-scenario/1) and print or write the output",
        description="Replay each scenario file through an engine. Without --out, print the "
                    "ranked results; with --out, write NAME.out.json per scenario "
                    "(ck-mspr-oracle-output/1). Exit 2 on a malformed scenario.")
    run.add_argument("target", type=Path, metavar="FILE_OR_DIR")
    run.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="write outputs here instead of printing them")
    run.add_argument("--engine", choices=("msprlab", "contextkit"), default="msprlab",
                     help="msprlab's engine (default) or the ContextKit library itself "
                          "(needs msprlab[parity])")
    run.add_argument("--with-subgraph", action="store_true",
                     help="include each search's subgraph in the output")
    run.set_defaults(func=cmd_scenario_run)
    diff = verbs.add_parser(
        "diff", help="compare two output files; exit 1 on any divergence",
        description="Tie-aware comparison of two ck-mspr-oracle-output/1 files (SCENARIOS.md).")
    diff.add_argument("a", type=Path)
    diff.add_argument("b", type=Path)
    diff.add_argument("--tolerance", type=float, default=1e-9,
                      help="absolute score tolerance (SCENARIOS.md: 1e-9 BFS, 1e-6 PPR)")
    diff.set_defaults(func=cmd_scenario_diff)
    for sub in commands.choices.values():
        sub.epilog = f"{sub.epilog}\n\n{EXIT_HELP}" if sub.epilog else EXIT_HELP
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help exits 0, a usage error 2 (argparse)
    return run_guarded(lambda: int(args.func(args)), debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
