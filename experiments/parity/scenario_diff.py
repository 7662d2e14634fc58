"""Compare two scenario outputs (`ck-mspr-oracle-output/1`, SCENARIOS.md "Comparing two
outputs"): the library's through the ContextKit adapter, and msprlab's engine.

Rules:

* Search results are compared in order, except that results whose expected scores are
  tied (equal within `tie_tolerance`) may come in any order among themselves.
* Scores and the breakdown terms are compared with an absolute `tolerance`: 1e-9 for BFS
  scenarios, 1e-6 for PPR ones (power iteration stops at a tolerance), see
  `tolerance_for`. `was_seed` is compared exactly, `intent` exactly when both sides
  report one.
* A call that raised must raise in both, with the same exception type.
* Feedback results are compared field by field (floats with the tolerance; None against
  a value is a divergence), and so are `final_nodes`.
* What each side says it swallowed (`swallowed`) is not compared: each side words its
  fallbacks its own way.

>>> out = {"events": [{"index": 0, "type": "search", "results": []}], "final_nodes": {}}
>>> diff_outputs(out, out)
[]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BFS_TOLERANCE",
    "PPR_TOLERANCE",
    "TIE_TOLERANCE",
    "Divergence",
    "diff_outputs",
    "format_divergences",
    "tolerance_for",
]

BFS_TOLERANCE = 1e-9
PPR_TOLERANCE = 1e-6
TIE_TOLERANCE = 1e-12
SIGNALS = ("dense", "lexical", "graph", "frequency", "personal", "success")
FEEDBACK_FLOATS = ("delta_applied", "new_relevance")
NODE_FLOATS = ("relevance", "relevance_floor")


@dataclass(frozen=True)
class Divergence:
    """One difference between two outputs.

    `event_index` is None for differences that belong to no single event (the event count,
    `final_nodes`). `kind` is one of: events, error, length, order, score, breakdown,
    was_seed, intent, feedback, final_nodes.
    """

    event_index: int | None
    kind: str
    message: str


def tolerance_for(scenario: dict[str, Any]) -> float:
    """The score tolerance SCENARIOS.md sets for this scenario's retrieval algorithm."""
    algorithm = scenario.get("config", {}).get("retrieval", {}).get("algorithm", "bfs")
    return PPR_TOLERANCE if algorithm == "ppr" else BFS_TOLERANCE


def diff_outputs(
    expected: dict[str, Any],
    got: dict[str, Any],
    *,
    tolerance: float = BFS_TOLERANCE,
    tie_tolerance: float = TIE_TOLERANCE,
) -> list[Divergence]:
    """Every divergence of `got` from `expected`, in event order, then `final_nodes`.

    Parameters
    ----------
    expected, got : dict
        Two `ck-mspr-oracle-output/1` documents for the same scenario.
    tolerance : float
        Absolute tolerance for scores, breakdown terms and feedback/node floats.
    tie_tolerance : float
        Expected scores this close count as tied: those results may be permuted.
    """
    if not (tolerance >= 0 and tie_tolerance >= 0):
        raise ValueError(
            f"tolerance >= 0 and tie_tolerance >= 0 must hold, got {tolerance}, {tie_tolerance}"
        )
    divergences: list[Divergence] = []
    want, have = expected.get("events", []), got.get("events", [])
    if len(want) != len(have):
        divergences.append(Divergence(
            None, "events", f"expected {len(want)} events, got {len(have)}"))
    for index, (e, g) in enumerate(zip(want, have, strict=False)):
        divergences += _diff_event(index, e, g, tolerance, tie_tolerance)
    divergences += _diff_final_nodes(
        expected.get("final_nodes"), got.get("final_nodes"), tolerance)
    return divergences


# ---- events --------------------------------------------------------------------------


def _close(a: Any, b: Any, tolerance: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=0.0, abs_tol=tolerance)


def _error_type(error: str) -> str:
    return error.partition(":")[0]


def _diff_event(
    index: int, e: dict[str, Any], g: dict[str, Any], tolerance: float, tie_tolerance: float
) -> list[Divergence]:
    if e.get("type") != g.get("type"):
        return [Divergence(index, "events",
                           f"expected a {e.get('type')} event, got a {g.get('type')} event")]
    if ("error" in e) != ("error" in g):
        want, have = e.get("error", "no error"), g.get("error", "no error")
        return [Divergence(index, "error", f"expected {want!r}, got {have!r}")]
    if "error" in e:
        if _error_type(e["error"]) != _error_type(g["error"]):
            return [Divergence(index, "error", f"expected {e['error']!r}, got {g['error']!r}")]
        return []
    if e["type"] == "feedback":
        return _diff_feedback(index, e.get("result"), g.get("result"), tolerance)
    divergences = _diff_results(index, e["results"], g["results"], tolerance, tie_tolerance)
    if "intent" in e and "intent" in g and e["intent"] != g["intent"]:
        divergences.append(Divergence(
            index, "intent", f"expected intent {e['intent']}, got {g['intent']}"))
    return divergences


def _tie_blocks(scores: Sequence[float | None], tie_tolerance: float) -> list[range]:
    """Runs of consecutive positions whose scores are tied with their predecessor."""
    blocks: list[range] = []
    start = 0
    for position in range(1, len(scores) + 1):
        if position == len(scores) or not _close(
                scores[position - 1], scores[position], tie_tolerance):
            blocks.append(range(start, position))
            start = position
    return blocks


def _pair_rows(
    want: list[dict[str, Any]], have: list[dict[str, Any]], tie_tolerance: float
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], str | None]:
    """Match got's rows to expected's, allowing permutations inside tied blocks.

    Returns the matched pairs, and why the orders differ when they cannot be matched.
    """
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for block in _tie_blocks([row["score"] for row in want], tie_tolerance):
        want_block = [want[i] for i in block]
        have_block = [have[i] for i in block]
        if Counter(r["id"] for r in want_block) != Counter(r["id"] for r in have_block):
            ranks = f"rank {block.start + 1}" if len(block) == 1 else \
                f"ranks {block.start + 1}-{block.stop}"
            return pairs, (f"{ranks}: expected {[r['id'] for r in want_block]}, "
                           f"got {[r['id'] for r in have_block]}")
        unmatched = list(have_block)
        for row in want_block:
            match = next(r for r in unmatched if r["id"] == row["id"])
            unmatched.remove(match)
            pairs.append((row, match))
    return pairs, None


def _diff_results(
    index: int, want: list[dict[str, Any]], have: list[dict[str, Any]],
    tolerance: float, tie_tolerance: float,
) -> list[Divergence]:
    if len(want) != len(have):
        return [Divergence(index, "length", f"expected {len(want)} results, got {len(have)}: "
                           f"{[r['id'] for r in want]} vs {[r['id'] for r in have]}")]
    pairs, disorder = _pair_rows(want, have, tie_tolerance)
    if disorder is not None:  # once the order differs, row-by-row comparisons are noise
        return [Divergence(index, "order", disorder)]
    divergences = []
    for rank, (e, g) in enumerate(pairs, start=1):
        divergences += _diff_row(index, rank, e, g, tolerance)
    return divergences


def _diff_row(
    index: int, rank: int, e: dict[str, Any], g: dict[str, Any], tolerance: float
) -> list[Divergence]:
    where = f"rank {rank} ({e['id']})"
    divergences = []
    if not _close(e["score"], g["score"], tolerance):
        divergences.append(Divergence(
            index, "score", f"{where}: expected score {e['score']!r}, got {g['score']!r}"))
    for name in SIGNALS:
        if (name in e) != (name in g):
            side = "got" if name in e else "expected"
            divergences.append(Divergence(index, "breakdown", f"{where}: {name} missing in {side}"))
        elif name in e and not _close(e[name], g[name], tolerance):
            divergences.append(Divergence(
                index, "breakdown", f"{where}: expected {name} {e[name]!r}, got {g[name]!r}"))
    if e.get("was_seed") != g.get("was_seed"):
        divergences.append(Divergence(
            index, "was_seed",
            f"{where}: expected was_seed {e.get('was_seed')}, got {g.get('was_seed')}"))
    return divergences


def _diff_feedback(
    index: int, want: dict[str, Any] | None, have: dict[str, Any] | None, tolerance: float
) -> list[Divergence]:
    if want is None or have is None:
        if want is have:
            return []
        return [Divergence(index, "feedback", f"expected result {want}, got {have}")]
    divergences = []
    for key in sorted(want.keys() | have.keys()):
        a, b = want.get(key), have.get(key)
        same = _close(a, b, tolerance) if key in FEEDBACK_FLOATS else a == b
        if not same or (key in want) != (key in have):
            divergences.append(Divergence(index, "feedback", f"expected {key} {a!r}, got {b!r}"))
    return divergences


def _diff_final_nodes(
    want: dict[str, Any] | None, have: dict[str, Any] | None, tolerance: float
) -> list[Divergence]:
    if want is None or have is None:
        if want is have:
            return []
        return [Divergence(None, "final_nodes", "final_nodes missing on one side")]
    divergences = []
    if missing := [node for node in want if node not in have]:
        divergences.append(Divergence(None, "final_nodes", f"nodes missing in got: {missing}"))
    if extra := [node for node in have if node not in want]:
        divergences.append(Divergence(None, "final_nodes", f"unexpected nodes in got: {extra}"))
    for node, fields in want.items():
        if node not in have:
            continue
        for key in sorted(fields.keys() | have[node].keys()):
            a, b = fields.get(key), have[node].get(key)
            same = _close(a, b, tolerance) if key in NODE_FLOATS else a == b
            if not same:
                divergences.append(Divergence(
                    None, "final_nodes", f"{node}: expected {key} {a!r}, got {b!r}"))
    return divergences


# ---- report --------------------------------------------------------------------------


def _table(want: list[dict[str, Any]], have: list[dict[str, Any]], rows: int) -> list[str]:
    """The top `rows` results side by side; `*` marks ranks whose ids differ."""
    def cell(results: list[dict[str, Any]], rank: int) -> str:
        if rank >= len(results):
            return ""
        return f"{results[rank]['id']:<10} {results[rank]['score']!r:<22}"

    lines = [f"      {'rank':<5} {'expected':<33} got"]
    for rank in range(min(rows, max(len(want), len(have)))):
        ids = [r[rank]["id"] if rank < len(r) else None for r in (want, have)]
        mark = " " if ids[0] == ids[1] else "*"
        lines.append(f"    {mark} {rank + 1:<5} {cell(want, rank):<33} {cell(have, rank)}")
    if max(len(want), len(have)) > rows:
        lines.append(f"      ... {len(want)} expected, {len(have)} got")
    return lines


def format_divergences(
    divergences: Sequence[Divergence],
    *,
    scenario: dict[str, Any] | None = None,
    expected: dict[str, Any] | None = None,
    got: dict[str, Any] | None = None,
    rows: int = 8,
) -> str:
    """A readable report: the first divergence of each event, then the rest.

    With `scenario`, each event is labelled with its query; with `expected` and `got`
    (the two outputs), a search's first divergence comes with the top `rows` results
    side by side.
    """
    if not divergences:
        return "no divergences"
    events = {d.event_index for d in divergences if d.event_index is not None}
    lines = [f"{len(divergences)} divergences in {len(events)} events"
             + (f" of {scenario.get('name')}" if scenario else "")]
    seen: set[int] = set()
    for d in divergences:
        if d.event_index is None or d.event_index in seen:
            continue
        seen.add(d.event_index)
        lines += _event_report(d.event_index, d, scenario, expected, got, rows)
    rest = [d for d in divergences if d.event_index is None]
    for d in rest[:10]:
        lines.append(f"  [{d.kind}] {d.message}")
    if len(rest) > 10:
        lines.append(f"  ... and {len(rest) - 10} more")
    return "\n".join(lines)


def _event_report(
    index: int, d: Divergence, scenario: dict[str, Any] | None,
    expected: dict[str, Any] | None, got: dict[str, Any] | None, rows: int,
) -> list[str]:
    label = f"  event {index}"
    if scenario is not None and index < len(scenario.get("events", [])):
        event = scenario["events"][index]
        label += f" ({event.get('type')}"
        label += f" {event.get('query')!r})" if event.get("type") == "search" else \
            f" {event.get('memory_id')!r})"
    lines = [f"{label} [{d.kind}] {d.message}"]
    if expected is None or got is None:
        return lines
    want = _event_at(expected, index)
    have = _event_at(got, index)
    if want is not None and have is not None and "results" in want and "results" in have:
        lines += _table(want["results"], have["results"], rows)
    return lines


def _event_at(output: dict[str, Any], index: int) -> dict[str, Any] | None:
    events = output.get("events", [])
    return events[index] if index < len(events) else None
