"""Read a results bundle (`msprlab.experiments.bundle`) for rendering, whatever parts it has.

Every part is optional: an `ablate` run has no study/ or test/, a `tune` run no ablation/,
older bundles no isolation audit. `load_bundle` reads what is there, records the expected
files that are absent in `Results.missing`, and refuses only a folder holding none of the
bundle's result files. A part that is present must have its columns: a frame written by
other code is an error naming the file and the columns it lacks, not a half-rendered table.

The stage funnel (`experiments.measures.funnel`) is read from both of its files into one wide frame,
`Results.funnel`: the ladder arms of `bundle.ABLATION_FUNNEL`, then the arms of
`bundle.TEST_FUNNEL` the ladder lacks (`tuned`, and `off` and `on-zero` in a `tune` run),
`tuned` last. Both files are on the test window, so an arm in both has the same funnel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.experiments.bundle import (
    ABLATION,
    ABLATION_ARMS,
    ABLATION_COMPARISON,
    ABLATION_FUNNEL,
    ABLATION_NOTES,
    ABLATION_SIDE_EFFECTS,
    ABLATION_SUMMARY,
    DECISION,
    DECISION_BY_INTENT,
    DECISION_NOTES,
    EXPLORE_LISTS,
    ISOLATION_AUDIT,
    PER_SEARCH,
    PER_SEARCH_BEFORE,
    PROVENANCE,
    SNIPPET,
    STUDY_SUMMARY,
    STUDY_TRIALS,
    TEST,
    TEST_ARMS,
    TEST_COMPARISON,
    TEST_FUNNEL,
    TEST_RUNS,
)
from msprlab.experiments.explore.questions import ExploreData, ExploreError, load_explore

from .configuration import load_config

__all__ = ["AUDIT_COLUMNS", "COMPARISON_COLUMNS", "DECISION_COLUMNS", "FUNNEL_METRICS",
           "FUNNEL_SUMMARY_COLUMNS", "PARTS", "SUMMARY_COLUMNS", "BundleError", "Results",
           "load_bundle"]

COMPARISON_COLUMNS = ("arm", "group_by", "group", "metric", "n", "n_no_relevant", "mean_base",
                      "mean_arm", "delta", "ci_low", "ci_high", "p_t", "p_t_adj",
                      "low_support", "ci_method", "t_test", "correction")
SUMMARY_COLUMNS = ("arm", "group_by", "group", "metric", "n", "n_no_relevant", "mean", "ci_low",
                   "ci_high", "confidence", "low_support", "ci_method")
AUDIT_COLUMNS = ("arm", "mode", "searches", "returned", "leaked", "leaked_searches")
TRIAL_COLUMNS = ("number", "state")
FUNNEL_SUMMARY_COLUMNS = ("arm", "unit", "group_by", "group", "metric", "n", "mean",
                          "low_support")
# The funnel's stages (`experiments.measures.funnel.FUNNEL_COLUMNS`) and the share of the ceiling.
FUNNEL_METRICS = ("seed_recall", "pool_recall", "ceiling", "achieved", "lost", "share")

# The verdict table's columns the report reads (`experiments.decision.COLUMNS`).
DECISION_COLUMNS = ("family", "candidate", "reference", "group_by", "group", "metric", "unit",
                    "n", "mean_reference", "mean_candidate", "delta", "ci_low", "ci_high",
                    "ci_level", "p_adj", "family_size", "mde", "verdict", "reason",
                    "failed_guardrail", "unresolved_guardrail", "alpha", "power",
                    "equivalence_margin", "noninferiority_margin", "test")

# The files a full bundle holds (per-query frames and TREC runs are globbed apart).
PARTS = (PROVENANCE, ABLATION_SUMMARY, ABLATION_COMPARISON, ABLATION_ARMS, ABLATION_NOTES,
         ABLATION_FUNNEL, STUDY_TRIALS, STUDY_SUMMARY, TEST_COMPARISON, TEST_ARMS, TEST_FUNNEL,
         SNIPPET, ISOLATION_AUDIT, DECISION)
_RESULTS = PARTS[1:]  # at least one of these makes a folder a bundle


REFERENCE = "off"  # the arm the report's deltas are against: MSPR disabled
REFERENCE_LABEL = "off (MSPR disabled: the context graph alone)"


def headline(comparison: pl.DataFrame | None) -> pl.DataFrame | None:
    """The rows the report shows: against `off`, per query (bundles also hold deltas
    against on-zero and per-search figures; an older bundle has neither column)."""
    if comparison is None:
        return None
    if "reference" in comparison.columns:
        comparison = comparison.filter(pl.col("reference") == REFERENCE)
    return per_query(comparison)


def per_query(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    """The per-query rows (the report's unit) of a summary or comparison frame."""
    if frame is not None and "unit" in frame.columns:
        return frame.filter(pl.col("unit") == "query")
    return frame


def _per_search(part: Path) -> dict[str, int]:
    """Rows per arm of a part's per-search frames (`per_query/` in bundles written before
    the frames were named for their unit)."""
    return _row_counts(part / PER_SEARCH) or _row_counts(part / PER_SEARCH_BEFORE)


class BundleError(ValueError):
    """The folder is not a results bundle, or one of its files is malformed."""


@dataclass(frozen=True)
class Results:
    """One bundle's contents; None (or empty) where the bundle lacks the part."""

    folder: Path
    provenance: dict[str, Any] | None = None
    ablation_summary: pl.DataFrame | None = None
    ablation_comparison: pl.DataFrame | None = None
    ablation_arms: pl.DataFrame | None = None
    ablation_notes: tuple[str, ...] = ()
    ablation_per_query: dict[str, int] = field(default_factory=dict)  # arm -> searches
    trials: pl.DataFrame | None = None
    study: dict[str, Any] | None = None
    test_comparison: pl.DataFrame | None = None
    test_arms: pl.DataFrame | None = None
    test_per_query: dict[str, int] = field(default_factory=dict)
    test_runs: dict[str, int] = field(default_factory=dict)  # run name -> lines
    snippet: dict[str, Any] | None = None
    decision: pl.DataFrame | None = None  # the confirmatory verdicts, one row per candidate
    decision_by_intent: pl.DataFrame | None = None  # the exploratory per-intent verdicts
    decision_notes: dict[str, Any] | None = None  # what the recommended config changes
    side_effects: pl.DataFrame | None = None
    audit: pl.DataFrame | None = None
    # Per query, one row per arm and group: arm, group_by, group, n, low_support and a
    # column per `FUNNEL_METRICS` (the mean; NaN where the file has none).
    funnel: pl.DataFrame | None = None
    missing: tuple[str, ...] = ()
    # The per-query explorer's files (`experiments.explore`), when the bundle has them.
    explore: ExploreData | None = None
    config: Any = None  # `configuration.ConfigPart`: a configuration search's part, or None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: not valid JSON ({exc})") from exc


def _frame(path: Path, required: tuple[str, ...]) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise BundleError(f"{path}: cannot be read as Parquet ({exc})") from exc
    if absent := [c for c in required if c not in frame.columns]:
        raise BundleError(f"{path}: missing column(s) {absent} (found columns "
                          f"{frame.columns}); was it written by msprlab?")
    return frame


def _row_counts(folder: Path) -> dict[str, int]:
    if not folder.is_dir():
        return {}
    return {p.stem: _rows(p) for p in sorted(folder.glob("*.parquet"))}


def _rows(path: Path) -> int:
    try:
        return int(pl.scan_parquet(path).select(pl.len()).collect().item())
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise BundleError(f"{path}: cannot be read as Parquet ({exc})") from exc


def _line_counts(folder: Path) -> dict[str, int]:
    if not folder.is_dir():
        return {}
    return {p.stem: _lines(p) for p in sorted(folder.glob("*.trec"))}


def _lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line)
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: not a text file ({exc})") from exc


def _notes(value: Any, path: Path) -> tuple[str, ...]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise BundleError(f"{path}: expected a JSON list of strings, got {value!r:.80}")
    return tuple(value)


def _funnel_wide(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """A funnel file's per-query rows, one per arm and group (see `Results.funnel`)."""
    keys = ["arm", "group_by", "group"]
    rows = frame.filter(pl.col("unit") == "query")
    try:
        means = rows.pivot(on="metric", index=keys, values="mean", maintain_order=True)
    except pl.exceptions.PolarsError as exc:  # a repeated (arm, group, metric) cell
        raise BundleError(f"{path}: not one row per arm, group and metric ({exc})") from exc
    support = rows.group_by(keys, maintain_order=True).agg(pl.col("n").max(),
                                                           pl.col("low_support").any())
    wide = support.join(means, on=keys, how="left", nulls_equal=True, maintain_order="left")
    return wide.with_columns(pl.col(m).cast(pl.Float64) if m in wide.columns
                             else pl.lit(float("nan")).alias(m) for m in FUNNEL_METRICS
                             ).select(*keys, "n", "low_support", *FUNNEL_METRICS)


def _funnel(ladder: pl.DataFrame | None, test: pl.DataFrame | None) -> pl.DataFrame | None:
    """The ladder's funnel, then the test window's arms it lacks, `tuned` last."""
    if test is not None and ladder is not None:
        test = test.filter(~pl.col("arm").is_in(ladder.get_column("arm").implode()))
    frames = [f for f in (ladder, test) if f is not None]
    if not frames:
        return None
    return pl.concat(frames, how="vertical_relaxed").sort(pl.col("arm") == "tuned",
                                                          maintain_order=True)


def load_bundle(folder: Path | str) -> Results:
    """The bundle in `folder`; raises `BundleError` (naming what is missing) when the folder
    holds none of a bundle's result files.

    >>> load_bundle("results/locomo-ablate-20260105-100000").missing    # doctest: +SKIP
    (STUDY_TRIALS, STUDY_SUMMARY, TEST_COMPARISON, ...)  # as their file names
    """
    folder = Path(folder)
    if not folder.is_dir():
        what = "a file, not a folder" if folder.exists() else "no such folder"
        raise BundleError(f"{folder}: {what}; give a results bundle folder "
                          "(ROOT/results/NAME-COMMAND-STAMP)")
    present = {part for part in PARTS if (folder / part).is_file()}
    if not present & set(_RESULTS):
        found = sorted(p.name for p in folder.iterdir())[:10]
        raise BundleError(
            f"{folder} is not a results bundle: none of {', '.join(_RESULTS)} is there "
            f"(found: {', '.join(found) or 'nothing'}). Bundles are written by `msprlab run`, "
            "`ablate` and `tune` under ROOT/results/.")

    def frame(part: str, required: tuple[str, ...]) -> pl.DataFrame | None:
        return _frame(folder / part, required) if part in present else None

    def document(part: str) -> Any:
        return _json(folder / part) if part in present else None

    provenance, study, snippet = (document(p) for p in (PROVENANCE, STUDY_SUMMARY, SNIPPET))
    notes_path = folder / DECISION_NOTES
    decision_notes = _json(notes_path) if notes_path.is_file() else None
    by_intent = (_frame(folder / DECISION_BY_INTENT, DECISION_COLUMNS)
                 if (folder / DECISION_BY_INTENT).is_file() else None)
    for part, value in ((PROVENANCE, provenance), (STUDY_SUMMARY, study), (SNIPPET, snippet)):
        if value is not None and not isinstance(value, dict):
            raise BundleError(f"{folder / part}: expected a JSON object, got "
                              f"{type(value).__name__}")
    notes = document(ABLATION_NOTES)
    funnels = {part: None if (f := frame(part, FUNNEL_SUMMARY_COLUMNS)) is None
               else _funnel_wide(f, folder / part)
               for part in (ABLATION_FUNNEL, TEST_FUNNEL)}
    return Results(
        folder=folder, provenance=provenance,
        ablation_summary=per_query(frame(ABLATION_SUMMARY, SUMMARY_COLUMNS)),
        ablation_comparison=headline(frame(ABLATION_COMPARISON, COMPARISON_COLUMNS)),
        ablation_arms=frame(ABLATION_ARMS, ("name",)),
        ablation_notes=() if notes is None else _notes(notes, folder / ABLATION_NOTES),
        ablation_per_query=_per_search(folder / ABLATION),
        trials=frame(STUDY_TRIALS, TRIAL_COLUMNS), study=study,
        test_comparison=headline(frame(TEST_COMPARISON, COMPARISON_COLUMNS)),
        side_effects=_frame(folder / ABLATION_SIDE_EFFECTS, ("block", "unit", "delta"))
        if (folder / ABLATION_SIDE_EFFECTS).is_file() else None,
        test_arms=frame(TEST_ARMS, ("name",)),
        test_per_query=_per_search(folder / TEST),
        test_runs=_line_counts(folder / TEST_RUNS),
        snippet=snippet, decision=frame(DECISION, DECISION_COLUMNS),
        decision_by_intent=by_intent, decision_notes=decision_notes,
        audit=frame(ISOLATION_AUDIT, AUDIT_COLUMNS),
        funnel=_funnel(*funnels.values()),
        missing=tuple(p for p in PARTS if p not in present),
        explore=_explore(folder),
        config=load_config(folder, _frame, _json, _funnel_wide))


def _explore(folder: Path) -> ExploreData | None:
    """The explorer's files, None when the bundle has none (`ablate`, older bundles)."""
    if not (folder / EXPLORE_LISTS).is_file():
        return None
    try:
        return load_explore(folder)
    except ExploreError as exc:
        raise BundleError(str(exc)) from exc
