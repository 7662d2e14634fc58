"""The decision stage: every candidate's verdict from the test window's per-search frames
(`decision.confirmatory`), the same per intent group (exploratory), and the recommended
configuration that follows the verdicts (`Decision`).

The recommended configuration is the tuned one with every recording block whose verdict is
don't ship switched off. The weights were searched with that block on, so the snippet is
not the configuration the tuned row measured: where the tuned weights share on-zero's
replayed state and the table without that block exists (one block dropped), the stage
scores the recommended configuration on it (exploratory: it was chosen after the
test-window verdicts, so its figure is optimistic); otherwise it says it was not scored.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from ..decision import DecisionSettings, Judged, by_group, confirmatory
from ..decision.family import BLOCK_PREFIX
from ..decision.inference import interval
from ..decision.pairs import estimate_of, means, paired_queries
from ..experiment_config import ExperimentConfig, judged_metric
from ..measures.metrics import parse_metric
from ..measures.scoring import Arm, Scorer
from .replay_tables import VERDICT_LABELS, Prepared, window_table

__all__ = ["Decision", "decision_stage"]


@dataclass(frozen=True)
class Decision:
    """The verdicts and what follows from them.

    settings: the `[decision]` table (metric resolved); confirmatory: one row per candidate
    (`decision.COLUMNS`); by_intent: the exploratory per-intent verdicts; snippet: the
    recommended configuration (None without a weight search); notes: why it differs from the
    tuned one; recommended: the recommended configuration scored on the test window, one
    exploratory row (empty when it equals the tuned one or could not be scored)."""

    settings: DecisionSettings
    confirmatory: pl.DataFrame
    by_intent: pl.DataFrame
    snippet: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    recommended: pl.DataFrame = field(default_factory=pl.DataFrame)


def _blocks_off(confirmatory_rows: pl.DataFrame) -> list[tuple[str, str]]:
    """(block, reason) of every recording block whose verdict is don't ship."""
    return [(str(r["candidate"]).removeprefix(BLOCK_PREFIX), str(r["reason"]))
            for r in confirmatory_rows.iter_rows(named=True)
            if str(r["candidate"]).startswith(BLOCK_PREFIX) and r["verdict"] == "don't ship"]


def _recommended(snippet: dict[str, Any], blocks: list[tuple[str, str]]) -> dict[str, Any]:
    out = copy.deepcopy(snippet)
    for block, _ in blocks:
        out.setdefault("mspr", {}).setdefault(block, {})["enabled"] = False
    return out


def _score_recommended(cfg: ExperimentConfig, prepared: Prepared, frames: Mapping[str,
                       pl.DataFrame], best: Arm, block: str, settings: DecisionSettings
                       ) -> pl.DataFrame:
    """The tuned weights on the state replayed without `block`, against the reference
    and against tuned: one exploratory row each, 95% t-interval, unadjusted."""
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    scorer = Scorer.of(window_table(prepared, f"no-{block}", "test"), metrics)
    frame = scorer.frame(replace(best, name="recommended"))
    rows = []
    for reference in (settings.reference, "tuned"):
        paired = paired_queries(frame, frames[reference], settings.metric)
        estimate = estimate_of(paired, settings.unit)
        low, high = interval(estimate, 0.95) if estimate.n_queries >= 2 else (None, None)
        candidate_mean, reference_mean = means(paired, settings.unit)
        rows.append({"candidate": "recommended", "reference": reference,
                     "metric": settings.metric, "unit": settings.unit, "n": estimate.n,
                     "mean_reference": reference_mean, "mean_candidate": candidate_mean,
                     "delta": estimate.delta, "ci_low": low, "ci_high": high,
                     "note": f"tuned weights with {block} not recorded; chosen after the "
                             "test-window verdicts (exploratory, optimistic: confirm on new "
                             "data); 95% t-interval, unadjusted"})
    return pl.DataFrame(rows)


def decision_stage(cfg: ExperimentConfig, prepared: Prepared,
                   frames: Mapping[str, pl.DataFrame], *, snippet: dict[str, Any] | None = None,
                   best: Arm | None = None, counterfactual: Any = None) -> Decision:
    """The verdicts of the candidates `frames` (arm -> per-search frame on the test window)
    hold, and the recommended configuration (from the tuned `snippet`, when there is one).
    With verdict labels and a `counterfactual` result the confirmatory rows read its
    estimate (`counterfactual.decision`)."""
    settings = cfg.decision
    judged = None
    if prepared.labels.source == VERDICT_LABELS and (name := judged_metric(cfg.metrics.names)):
        judged = Judged(name, cfg.metrics.min_judged_ratio)
    kwargs = {"metric": settings.metric, "min_support": cfg.metrics.min_support}
    adjust, label = None, None
    if counterfactual is not None and prepared.labels.source == VERDICT_LABELS:
        from ..counterfactual.decision import with_counterfactual
        estimator = cfg.counterfactual.estimator

        def adjust(pairs: Any, candidates: Any) -> Any:
            return with_counterfactual(pairs, candidates, counterfactual,
                                       estimator=estimator, fidelity=prepared.fidelity)
        label = f"{estimator} {settings.metric}"
    table = confirmatory(frames, settings, judged=judged, adjust=adjust, label=label, **kwargs)
    intents = by_group(frames, settings, group_by="intent", **kwargs)
    if snippet is None:
        return Decision(settings, table, intents, None)
    blocks = _blocks_off(table)
    notes = [f"mspr.{b}.enabled = false: the verdict on recording {b} is don't ship ({why})"
             for b, why in blocks]
    scored = pl.DataFrame()
    if blocks:
        same_state = prepared.key_of.get("tuned") == prepared.key_of.get("on-zero")
        table_there = len(blocks) == 1 and f"no-{blocks[0][0]}" in prepared.key_of
        if best is not None and same_state and table_there:
            scored = _score_recommended(cfg, prepared, frames, best, blocks[0][0], settings)
            notes.append(
                "the weights were searched with every block on; the snippet (the tuned "
                f"weights with {blocks[0][0]} not recorded) was scored on the test window: "
                "see the recommended row, exploratory (chosen after these verdicts)")
        else:
            notes.append("the weights were searched with every block on, and the snippet "
                         "(the tuned weights with " + ", ".join(b for b, _ in blocks) +
                         " not recorded) was not itself scored: no replay holds that state; "
                         "score it before shipping")
    return Decision(settings, table, intents, _recommended(snippet, blocks), notes, scored)
