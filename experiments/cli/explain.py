"""`msprlab explain RESULTS --query QID`: one question of the test window opened for two
arms, in the terminal (or as JSON): both arms' top 10 for a search with each score's parts,
and where the relevant memories neither list shows were lost. It reads the bundle's
explorer files (`experiments.explore`), the same the report's page reads."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from msprlab.engine.batch import FEATURES

from ..explore.overlap import P
from ..explore.questions import DEFAULT_ARMS, ExploreError, load_explore, open_question
from .exits import EXIT_BAD_INPUT, EXIT_OK, print_error, stdout_console

__all__ = ["add_explain_command"]

DESCRIPTION = """\
Open one question of a results bundle's test window: for two arms (default: tuned
against off), the question's change in the primary metric, and for one of its searches
(the first by default; --search EVENT or --search all) both arms' top 10, A then B.
Each row: rank, memory id, label (the grade, or the verdict; unjudged marked), the score
and its parts (the six weighted terms, added left to right, times the relevance
multiplier, times the role multiplier where a soft role policy is on), and whether the
memory was a dense seed or reached through the graph. Under the lists, the relevant
memories only one list shows, then those neither shows, with where each arm lost them:
not in the pool (never a seed, not reached through the graph), not in the store yet, or
ranked below 10 of the pool (with the rank). The lists are the bundle's TREC runs
(test/runs/ARM.trec), the same the report's "Question by question" shows.

RESULTS is a bundle folder of `msprlab run` or `tune` (results/NAME-run-STAMP). Exit
status: 0 shown; 2 when RESULTS holds no explorer data, or the question, an arm or the
search is not in it (the message names the closest question ids, or the arms and
searches it holds).
"""

_SHORT = {"dense": "dense", "lexical": "lex", "graph": "graph", "frequency": "freq",
          "personal": "pers", "success": "succ"}


def _number(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4f}"


def _cut(text: str | None, width: int) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def _arm_table(arm: str, part: dict[str, Any], roles: bool) -> Table:
    weights = part["weights"]
    table = Table(title=f"{arm}: top {len(part['ranked'])} (value {_number(part['value'])}; "
                        "weights " + ", ".join(f"{k} {v:g}" for k, v in weights.items()) + ")",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify in (("#", "right"), ("memory", "left"), ("label", "left"),
                          ("score", "right"), *((_SHORT[f], "right") for f in FEATURES),
                          ("×rel", "right"), *((("×role", "right"),) if roles else ()),
                          ("from", "left"), ("text", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in part["ranked"]:
        table.add_row(str(r["rank"]), r["memory_id"], r["label"], f"{r['score']:.6f}",
                      *(f"{r['terms'][f]:.4f}" for f in FEATURES), f"{r['relevance']:.4f}",
                      *((f"{r['role']:g}",) if roles else ()), r["origin"],
                      _cut(r["text"], 48))
    return table


def _fate_text(fate: dict[str, Any]) -> str:
    if fate["fate"] == "ranked":
        return f"ranked {fate['rank']} of {fate['pool']} ({fate['origin']})"
    return {"not_in_pool": "not in the pool", "not_added_yet": "not in the store yet",
            "deleted": "deleted"}[fate["fate"]]


def print_question(console: Console, out: dict[str, Any]) -> None:
    a, b = out["arms"]
    console.print(f"[bold]{out['query_id']}[/bold]: {out['query']}", highlight=False)
    console.print(f"{out['metric']} (mean over its {len(out['searches'])} test search(es); "
                  f"labels: {out['labels']}): {a} {_number(out['value'][a])}, {b} "
                  f"{_number(out['value'][b])}, change {_signed(out['change'])}; "
                  f"Jaccard@10 {_number(out['jaccard'], 3)}, RBO (p = {P}) "
                  f"{_number(out['rbo'], 3)}", highlight=False)
    for search in out["opened"]:
        others = [e for e in out["searches"] if e != search["event_id"]]
        console.print(f"\n[bold]search e{search['event_id']}[/bold] at {search['ts']} "
                      f"(intent {search['intent']}, type {search['question_type']}): "
                      f"Jaccard@10 {_number(search['jaccard'], 3)}, RBO "
                      f"{_number(search['rbo'], 3)}"
                      + (f"; other searches: {', '.join(map(str, others[:12]))}"
                         + (" …" if len(others) > 12 else "") if others and
                         len(out["opened"]) == 1 else ""), highlight=False)
        roles = any(r["role"] != 1.0 for part in search["arms"].values()
                    for r in part["ranked"])
        for arm in (a, b):
            console.print(_arm_table(arm, search["arms"][arm], roles))
        for arm, other in ((a, b), (b, a)):
            only = [m for m in search["arms"][other]["lost"]
                    if m["memory_id"] not in {u["memory_id"] for u in search["unshown"]}]
            if only:
                console.print(f"relevant memories only {arm} shows: " + "; ".join(
                    f"{m['memory_id']} ({other}: {_fate_text(m)})" for m in only),
                    highlight=False)
        if not search["unshown"]:
            console.print("relevant memories neither list shows: none", highlight=False)
            continue
        console.print("relevant memories neither list shows:", highlight=False)
        for memory in search["unshown"]:
            fates = "; ".join(f"{arm}: {_fate_text(memory['fates'][arm])}"
                              for arm in (a, b) if arm in memory["fates"])
            console.print(f"  {memory['memory_id']} ({memory['label']}) {fates} — "
                          f"{_cut(memory['text'], 60)}", highlight=False)
    console.print("\nscore = (α·dense + β·lex + γ·graph + ε·freq + δ·pers + ζ·succ) × "
                  "relevance (× role with a soft role policy); the columns are the weighted "
                  "terms", highlight=False)


def cmd_explain(args: argparse.Namespace) -> int:
    console = stdout_console(176)
    search: int | str | None = args.search
    if isinstance(search, str) and search != "all":
        try:
            search = int(search.removeprefix("e"))
        except ValueError:
            print_error(f"--search {args.search}: give a search's event id (as the TREC "
                        "runs name it, e12345 or 12345) or all", console)
            return EXIT_BAD_INPUT
    try:
        out = open_question(load_explore(args.results), args.query, args.arms, search)
    except ExploreError as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(out, indent=1, ensure_ascii=False))
    else:
        print_question(console, out)
    return EXIT_OK


def add_explain_command(commands: Any) -> None:
    parser = commands.add_parser(
        "explain", help="open one question of a results bundle: two arms' lists and why",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", metavar="RESULTS", help="a results bundle folder")
    parser.add_argument("--query", required=True, metavar="QID",
                        help="the question's id (as the per-search frames and the report "
                             "name it)")
    parser.add_argument("--arms", nargs=2, metavar=("A", "B"), default=list(DEFAULT_ARMS),
                        help="the two arms, B against A, of off, on-zero and tuned "
                             f"(default: {' '.join(DEFAULT_ARMS)}: tuned against off)")
    parser.add_argument("--search", default=None, metavar="EVENT",
                        help="the search to open: its event id, or all (default: the "
                             "question's first test search)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON: per arm and search the ranked memories with "
                             "their score, weighted terms, features, relevance and role "
                             "multipliers, label and origin, and the lost relevant memories")
    parser.set_defaults(func=cmd_explain)
