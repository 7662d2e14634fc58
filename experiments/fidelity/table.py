"""The fidelity check as a console table: the definition's replay and each setting tried."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from .figures import Figures
from .stage import Fidelity

__all__ = ["fidelity_table"]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _row(name: str, f: Figures, changes: str) -> list[str]:
    helpful = "" if f.in_top_helpful is None else f" ({_pct(f.in_top_helpful)})"
    distance = "" if f.rank_distance is None else f" (±{f.rank_distance:.2f})"
    return [escape(name), _pct(f.nodes), _pct(f.edges), _pct(f.deltas), _pct(f.success),
            _pct(f.in_top) + helpful,
            _pct(f.ranks) + distance, _pct(f.access), changes]


def fidelity_table(fidelity: Fidelity, tolerance: float) -> Table:
    """One row per configuration replayed: the definition's first, then the settings tried
    (when the check failed and searched), with what each changes."""
    f, t = fidelity.figures, fidelity.thresholds
    table = Table(
        title=f"replay fidelity: the replay against production's end state (nodes: relevance "
              f"and floor within {tolerance:g}; edges: weights within {tolerance:g}; deltas: "
              f"delta_applied per verdict; in top {f.k}: verdicted memories (helpful ones) in "
              f"the replayed production arm's top {f.k}; ranks: recorded metadata.rank "
              f"reproduced (mean distance); queries: {fidelity.queries})",
        title_justify="left", box=box.SIMPLE_HEAD, caption_justify="left",
        caption=(f"thresholds: nodes {t['nodes']:.0%}, edges {t['edges']:.0%}, deltas "
                 f"{t['deltas']:.0%}, success {t['success']:.0%}, in top {f.k} "
                 f"{t['in_top']:.0%}, ranks "
                 f"{t['ranks']:.0%} (\\[fidelity] in the definition); access counts are "
                 f"shown, not held to a threshold; n: {f.nodes_n:,} nodes, {f.edges_n:,} "
                 f"edges, {f.deltas_n:,} verdict records, {f.in_top_n:,} verdicts on "
                 f"replayed searches, {f.ranks_n:,} recorded ranks"))
    for column in ("replay", "nodes", "edges", "deltas", "success", f"in top {f.k}", "ranks",
                   "access counts", "changes against the definition"):
        table.add_column(column, justify="left" if column in ("replay", "changes against "
                                                              "the definition") else "right")
    rows = fidelity.candidates or ()
    if not rows:
        table.add_row(*_row("the definition's [engine]", f, ""))
    for candidate in rows:
        changes = ", ".join(f"{key.removeprefix('context_graph.')} = {_value(new)}"
                            for key, (_, new) in candidate.changes.items())
        table.add_row(*_row(candidate.name, candidate.figures, changes))
    return table
