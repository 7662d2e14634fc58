"""The fidelity stage: is the replay under the definition's [engine] production?

`fidelity_stage` runs after the replays and before any table, on a store that records
production's end state (`production.production_of`) scored on its verdicts. It replays the
definition's engine configuration once more, keeping the end state, and measures it
(`figures.measure`). Below a threshold of `[fidelity]` it tries the settings production may
have run (`candidates`), each replayed and measured alike, and names those of the best one
that differ from the definition. The figures of every configuration replayed are cached
beside the store (by the replay's cache key), so a second run reads them.

The result (`Fidelity`) is what the rest of the run reads: `passed`, the figures, the
thresholds, what was tried and what differs. The reporter prints it before any table,
writes it into the bundle (`fidelity.json`) and MLflow (`fidelity/...`), and names its
one-line summary beside every verdict-labelled figure (`Labels.fidelity`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from msprlab.datasets.atomic import write_json_atomic
from msprlab.datasets.sidecars import replay_cache_path
from msprlab.datasets.timeline import shared_by_replays
from msprlab.engine import EngineConfig
from msprlab.engine.config import as_dict
from msprlab.engine.decay import tick_decay
from msprlab.engine.roles import policy_from_name
from msprlab.engine.state import EngineState

from ..errors import ExperimentError
from ..experiment_config import ExperimentConfig, FidelitySection
from ..replay import CandidateTable, cache_key, replay
from ..stages.prepare import Stage, quiet
from ..stages.replay_tables import VERDICT_LABELS, Prepared
from .candidates import (
    Candidate,
    best,
    decay_options,
    feedback_options,
    setting_changes,
    success_options,
    weight_options,
)
from .figures import Figures, below, measure, ranking_figures
from .production import Production, production_of

__all__ = ["DECAY_NODES_NOTE", "REVISION", "Fidelity", "FidelityStop", "fidelity_metrics",
           "fidelity_stage", "stop_message", "with_fidelity"]

REVISION = "fidelity/4"  # part of the cached figures' key: a change in the figures re-measures
_LABELS = {"nodes": "nodes", "edges": "edges", "deltas": "deltas", "success": "success rows",
           "in_top": "in top k", "ranks": "ranks"}


class FidelityStop(ExperimentError):
    """The replay is not production and `[fidelity] on_fail = "stop"`: exit 2."""


@dataclass(frozen=True)
class Fidelity:
    """The fidelity of the replay under the definition's [engine] (`figures`), judged
    against `thresholds`; when it failed and the search ran, the candidates tried (the
    definition's first) and the settings of the best one that differ from the definition
    (ContextKit key -> (the definition's value, the best candidate's))."""

    figures: Figures
    thresholds: dict[str, float]
    failing: tuple[str, ...]
    on_fail: str
    queries: str                   # where the replay's query vectors came from
    projected: bool                # True: projected from the query text (no embedder)
    candidates: tuple[Candidate, ...] = ()
    differing: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    unheld: tuple[str, ...] = ()   # printed, not held to a threshold (`unheld_figures`)

    @property
    def passed(self) -> bool:
        return not self.failing

    def summary(self) -> str:
        """One line, printed beside every verdict-labelled figure."""
        verdict = "passed" if self.passed else "FAILED (" + ", ".join(
            _LABELS[f] for f in self.failing) + " below threshold)"
        f = self.figures
        nodes = _pct(f.nodes) + (" (not held: decay on)" if "nodes" in self.unheld else "")
        return (f"replay fidelity {verdict}: nodes {nodes}, edges {_pct(f.edges)}, "
                f"deltas {_pct(f.deltas)}, success rows {_pct(f.success)}, verdicted in top "
                f"{f.k} {_pct(f.in_top)}, recorded ranks {_pct(f.ranks)}; queries "
                f"{'projected from their text' if self.projected else 'embedded'}")

    def as_dict(self) -> dict[str, Any]:
        return {"revision": REVISION, "passed": self.passed, "failing": list(self.failing),
                "on_fail": self.on_fail, "thresholds": self.thresholds,
                "not_held": list(self.unheld),
                "figures": self.figures.as_dict(), "queries": self.queries,
                "projected_queries": self.projected,
                "candidates": [c.as_dict() for c in self.candidates],
                "differing": {k: list(v) for k, v in self.differing.items()},
                "notes": list(self.notes)}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


@dataclass
class _Replayer:
    """Replays and measures configurations of one experiment, with a cache of figures."""

    cfg: ExperimentConfig
    prepared: Prepared
    production: Production
    questions: dict[str, str]
    k: int
    progress: Stage
    projected: bool

    def key(self, config: EngineConfig) -> str:
        cfg = self.cfg
        spec = cache_key(self.prepared.dataset, config, cfg.replay.frequency,  # type: ignore[arg-type]
                         limit=cfg.replay.limit or None,
                         policy=policy_from_name(cfg.replay.policy))
        # the replay's key leaves the weights out (one table serves them all); the
        # ranking figures depend on them
        whole = hashlib.sha256(json.dumps(as_dict(config), sort_keys=True, default=str)
                               .encode()).hexdigest()
        return (f"{spec[:16]}-{whole[:12]}-{self.k}-{cfg.fidelity.tolerance:g}-"
                f"{REVISION.replace('/', '')}")

    def measure(self, config: EngineConfig, name: str, *, fresh: bool = False,
                ) -> tuple[Figures, CandidateTable | None]:
        """The figures of `config` and its table; read from the cache when it has them and
        not `fresh` (no table then)."""
        path = replay_cache_path(self.prepared.store) / f"fidelity-{self.key(config)}.json"
        if path.is_file() and not fresh:
            cached = json.loads(path.read_text(encoding="utf-8"))
            return Figures(**cached), None
        box: dict[str, EngineState] = {}
        cfg = self.cfg
        table = replay(self.prepared.dataset, config, frequency=cfg.replay.frequency,  # type: ignore[arg-type]
                       limit=cfg.replay.limit or None,
                       policy=policy_from_name(cfg.replay.policy),
                       progress=lambda done, total: self.progress(
                           f"fidelity: replaying {name}", done, total),
                       end_state=lambda state: box.setdefault("state", state))
        _align_state(box["state"], config, self.production)
        if self.questions:
            table = CandidateTable(table.searches.with_columns(
                question=table.searches["query_id"].replace_strict(self.questions)),
                table.candidates, table.qrels, table.meta)
        figures = measure(self.production, box["state"], table, self.prepared.dataset.events,
                          config, k=self.k, tolerance=cfg.fidelity.tolerance)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, figures.as_dict())
        return figures, table


def _align_state(state: EngineState, config: EngineConfig, production: Production) -> None:
    """Under decay, one more tick at production's last one: the replay's last tick came
    at its last search, production's at its own (the artifacts keep no log of the searches
    without a verdict), and relevance and weights are compared as of the same moment."""
    moment = production.last_tick
    last = state.graph.last_decay_tick
    if config.decay.enabled and moment is not None and (last is None or moment > last):
        tick_decay(state.graph, config.decay, moment)


def _state_score(f: Figures) -> tuple[float, ...]:
    shares = [v for v in (f.nodes, f.edges, f.deltas, f.success) if v is not None]
    return (min(shares), sum(shares), f.in_top or 0.0)


def _ranking_score(f: Figures) -> tuple[float, ...]:
    return (f.in_top or 0.0, f.ranks or 0.0, *_state_score(f))


def _search(run: _Replayer, definition: Candidate) -> list[Candidate]:
    """The candidates of `candidates` (module docstring there), tried in turn; the weights
    only where the queries are embedded (projected queries find other seeds, and weights
    that make up for them are not production's)."""
    cfg, production = run.cfg, run.production
    states = [definition]
    decays = [(name, replace(cfg.engine, decay=d))
              for name, d in decay_options(cfg.engine, run.prepared.dataset.edges)]
    feedbacks = [*feedback_options(cfg.engine, production.records),
                 *success_options(cfg.engine, production.records)]
    tried = [*decays, *feedbacks, *(
        (f"{d}; {f}", replace(fc, decay=dc.decay))
        for (d, dc), (f, fc) in ((a, b) for a in decays for b in feedbacks))]
    tables: dict[int, CandidateTable | None] = {0: None}
    for name, config in tried:
        figures, table = run.measure(config, name)
        tables[len(states)] = table
        states.append(Candidate(name, config, setting_changes(cfg.engine, config), figures))
    if run.projected:  # wrong seeds: no weights would say what production ran
        return states
    top = best(states, _state_score)
    table = tables[states.index(top)]
    if table is None:  # its figures came from the cache: replay it for the weights
        _, table = run.measure(top.config, top.name, fresh=True)
    assert table is not None
    weighted = _weights(run, top, table)
    return [*states, *([weighted] if weighted is not top else [])]


# How much better (share in the top k plus share of ranks) other weights must rank before
# they are named: the frequency term the replay cannot reproduce moves a few verdicts,
# and weights that happen to make up for that are not production's.
WEIGHT_MARGIN = 0.02


def _ranking_gain(f: Figures) -> float:
    return (f.in_top or 0.0) + (f.ranks or 0.0)


def _weights(run: _Replayer, top: Candidate, table: CandidateTable) -> Candidate:
    """The best weights (delta, zeta) on `top`'s table by the ranking figures; `top` itself
    unless another ranks better by more than `WEIGHT_MARGIN`."""
    events = run.prepared.dataset.events
    best_config, best_figures = top.config, top.figures
    for config in weight_options(top.config):
        if config is top.config:
            continue
        ranked = ranking_figures(run.production, table, events, config, k=run.k)
        figures = replace(top.figures, **asdict(ranked))
        if _ranking_score(figures) > _ranking_score(best_figures):
            best_config, best_figures = config, figures
    if best_config is top.config or (
            _ranking_gain(best_figures) < _ranking_gain(top.figures) + WEIGHT_MARGIN):
        return top
    retrieval = best_config.retrieval
    return Candidate(f"{top.name}; delta {retrieval.delta_personal:g}, zeta "
                     f"{retrieval.zeta_success:g}", best_config,
                     setting_changes(run.cfg.engine, best_config), best_figures)


def fidelity_stage(cfg: ExperimentConfig, prepared: Prepared,
                   progress: Stage = quiet) -> Fidelity | None:
    """The fidelity of the replay (module docstring); None where there is nothing to
    compare: `[fidelity] enabled = false`, labels other than verdicts, or a store that
    holds no production end state."""
    settings: FidelitySection = cfg.fidelity
    if not settings.enabled or prepared.labels.source != VERDICT_LABELS:
        return None
    production = production_of(prepared.dataset)
    if production is None:
        return None
    first = next(iter(prepared.tables.values()))
    questions = dict(first.searches.select("query_id", "question").iter_rows()) \
        if "question" in first.searches.columns else {}
    seeds = str(first.meta.get("seeds", ""))
    projected = "projected" in seeds
    run = _Replayer(cfg, prepared, production, questions, cfg.dataset.verdict_limit, progress,
                    projected)
    with shared_by_replays(prepared.dataset):
        figures, _ = run.measure(cfg.engine, "the definition's [engine]")
        thresholds = settings.thresholds()
        unheld = unheld_figures(cfg.engine)
        short = below(figures, thresholds)
        failing = tuple(f for f in short if f not in unheld)
        definition = Candidate("the definition's [engine]", cfg.engine, {}, figures)
        candidates: list[Candidate] = [definition]
        if failing and settings.search:
            candidates = _search(run, definition)
    chosen = best(candidates, lambda f: (*_state_score(f), *_ranking_score(f)))
    notes = _notes(figures, short, projected, production, cfg)
    return Fidelity(figures, thresholds, failing, settings.on_fail, seeds, projected,
                    tuple(candidates) if len(candidates) > 1 else (),
                    chosen.changes if chosen is not definition else {}, tuple(notes), unheld)


def unheld_figures(engine: EngineConfig) -> tuple[str, ...]:
    """The figures printed but not held to their threshold under `engine`: with decay on,
    the nodes (`DECAY_NODES_NOTE`: production's own settings reach 45% of them on a world
    that ran decay, so holding them would stop every deployment that decays). The edges,
    deltas, success rows and rankings still judge the replay; a decay-on definition on a
    production that ran without decay fails its edges (the replay decays them)."""
    return ("nodes",) if engine.decay.enabled else ()


# Measured on a generated world whose production ran decay (w5-decay, README): under its
# own settings the replay reaches 45% of the nodes.
DECAY_NODES_NOTE = (
    "with decay on, a node's relevance is recomputed at each tick from when it was last read "
    "and an archived one keeps the value it had at the tick that archived it; production "
    "read and ticked at searches without a verdict, which the artifacts do not log, so the "
    "nodes figure can stay below its threshold under production's own settings; it is "
    "printed, not held (the edges, deltas, success rows and rankings judge the replay)")


def _notes(figures: Figures, short: list[str], projected: bool,
           production: Production, cfg: ExperimentConfig) -> list[str]:
    notes = []
    if projected and "in_top" in short:
        notes.append("the queries are projected from their text (the store holds no query "
                     "vectors): no setting brings back production's seeds; ingest the "
                     "artifacts again with --query-embedder naming production's embedder")
    if production.nodes["access_count"].sum() > 0:
        notes.append(f"access counts: the replay reaches production's on {figures.access:.1%} "
                     "of the nodes; the artifacts keep no log of the searches without a "
                     "verdict, whose results the library counted, so the frequency term "
                     "(epsilon) and decay's recency cannot be replayed as production had them")
        if cfg.engine.decay.enabled and "nodes" in short:
            notes.append(DECAY_NODES_NOTE)
        epsilon = cfg.engine.retrieval.epsilon_frequency
        if epsilon > 0:
            notes.append(f"with epsilon_frequency = {epsilon:g} the replay ranks without "
                         "production's access counts: where that term decided, the replayed "
                         "ranks differ from the shown ones (the in-top and rank figures are "
                         "bounded by it)")
    if not production.ranked:
        notes.append("no verdict records the rank it was shown at (metadata.rank): the rank "
                     "agreement is not measured; pass metadata={\"rank\": R} to "
                     "record_feedback to have it")
    return notes


def stop_message(fidelity: Fidelity, definition: Path) -> str:
    """The exit-2 message: what failed, what the best candidate reached, what to copy."""
    f = fidelity.figures
    failing = ", ".join(
        f"{_LABELS[name]} {_pct(getattr(f, name))} < {fidelity.thresholds[name]:.0%}"
        for name in fidelity.failing)
    text = (f"replay fidelity: the replay under [engine] of {definition} is not production "
            f"({failing}; thresholds in [fidelity]).")
    if fidelity.differing:
        chosen = next(c for c in fidelity.candidates if c.changes == fidelity.differing)
        settings = "; ".join(f"{key} = {_toml(new)} (the definition: {_toml(old)})"
                             for key, (old, new) in fidelity.differing.items())
        text += (f" Of {len(fidelity.candidates)} settings tried, the closest to production "
                 f"is {chosen.name} ({chosen.figures.short()}): copy production's settings "
                 f"into [engine]: {settings}.")
    elif fidelity.candidates:
        text += (f" None of the {len(fidelity.candidates) - 1} other settings tried comes "
                 "closer.")
    for note in fidelity.notes:
        if note.startswith("the queries are projected") or (
                note == DECAY_NODES_NOTE and not fidelity.differing):
            text += f" Also, {note}."
    return text + (" Set [fidelity] on_fail = \"warn\" to go on regardless (every figure "
                   "is then marked).")


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else repr(value)




def with_fidelity(prepared: Prepared, fidelity: Fidelity | None) -> Prepared:
    """`prepared` carrying `fidelity` (`Prepared.fidelity`), its one-line summary named
    beside every verdict-labelled figure (`Labels.fidelity`)."""
    if fidelity is None:
        return prepared
    return replace(prepared, fidelity=fidelity,
                   labels=replace(prepared.labels, fidelity=fidelity.summary()))


def fidelity_metrics(fidelity: Fidelity) -> dict[str, float]:
    """The figures as MLflow metrics: `fidelity/nodes`, ..., `fidelity/passed` (1 or 0)."""
    f = fidelity.figures
    values = {"nodes": f.nodes, "edges": f.edges, "deltas": f.deltas, "success": f.success,
              "in_top": f.in_top,
              "in_top_helpful": f.in_top_helpful, "ranks": f.ranks,
              "rank_distance": f.rank_distance, "access": f.access,
              "passed": float(fidelity.passed), "projected_queries": float(fidelity.projected)}
    return {f"fidelity/{k}": float(v) for k, v in values.items() if v is not None}
