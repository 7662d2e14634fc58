"""Every engine setting of an experiment reaches the replay (its candidate table, or the
scoring of one), or the experiment is refused naming the key (issue 20, part 3).

A change is shown to reach the table by replaying the small generated world of
`replay_world` once with the setting at its default and once changed: the two tables
differ. A setting the table is built independently of (the six weights and the intent and
soft-role switches in `logged` mode) shares the table, and the scorer ranks differently.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from msprlab.datasets.store import ingest
from msprlab.datasets.timeline import DEFAULT_SEEDS
from msprlab.engine import EngineConfig
from msprlab.engine.config import RetrievalConfig, as_dict
from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import ExperimentError, load_experiment
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Scorer, arm_of
from msprlab.experiments.replay import CandidateTable, replay, table_key
from msprlab.experiments.stages.replay_tables import replay_tables

from replay_world import StripedPolicy, signals, world

# The logging ranker of the world: every signal on, intent on, no roles.
BASE = signals((0.55, 0.15, 0.3, 0.2, 0.3, 0.2), intent=True, roles=False)
POLICY = StripedPolicy()
Change = Callable[[EngineConfig], EngineConfig]


def retrieval(**kw: Any) -> Change:
    return lambda c: replace(c, retrieval=replace(c.retrieval, **kw))


def decay(**kw: Any) -> Change:
    return lambda c: replace(c, decay=replace(c.decay, **kw))


def mspr(block: str | None = None, **kw: Any) -> Change:
    if block is None:
        return lambda c: replace(c, mspr=replace(c.mspr, **kw))
    return lambda c: replace(c, mspr=replace(c.mspr, **{
        block: replace(getattr(c.mspr, block), **kw)}))


def corrections(**kw: Any) -> Change:
    return lambda c: replace(c, corrections=replace(c.corrections, **kw))


def then(*changes: Change) -> Change:
    def apply(config: EngineConfig) -> EngineConfig:
        for change in changes:
            config = change(config)
        return config
    return apply


PPR = retrieval(algorithm="ppr")
FAST_DECAY = decay(half_life_days=0.2)  # the world spans hours: prunes need a fast decay
ROLES_SOFT = mspr("role", enabled=True, hard_filter=False)

# setting -> (the reference config's change, the changed config's change, replay kwargs)
# Each pair differs in that setting only.
TABLE_SETTINGS: dict[str, tuple[Change, Change, dict[str, Any]]] = {
    "retrieval.seed_top_k": (then(), retrieval(seed_top_k=3), {}),
    "retrieval.expansion_depth": (then(), retrieval(expansion_depth=0), {}),
    "retrieval.max_candidates": (then(), retrieval(max_candidates=5), {}),
    "retrieval.edge_weight_floor": (then(), retrieval(edge_weight_floor=0.9), {}),
    "retrieval.algorithm": (then(), PPR, {}),
    "retrieval.ppr_damping": (PPR, then(PPR, retrieval(ppr_damping=0.5)), {}),
    "retrieval.ppr_max_iter": (PPR, then(PPR, retrieval(ppr_max_iter=5)), {}),
    "retrieval.ppr_tolerance": (PPR, then(PPR, retrieval(ppr_tolerance=0.5)), {}),
    "decay.enabled": (then(), decay(enabled=False), {}),
    "decay.half_life_days": (then(), FAST_DECAY, {}),
    "decay.min_edge_weight": (FAST_DECAY, then(FAST_DECAY, decay(min_edge_weight=0.5)), {}),
    "decay.min_node_relevance": (FAST_DECAY, then(FAST_DECAY, decay(min_node_relevance=0.5)),
                                 {}),
    "decay.tick_on_read": (then(), decay(tick_on_read=False), {}),
    "mspr.enabled": (then(), mspr(enabled=False), {}),
    "mspr.feedback.enabled": (then(), mspr("feedback", enabled=False), {}),
    "mspr.feedback.boost_delta": (then(), mspr("feedback", boost_delta=0.5), {}),
    "mspr.feedback.penalty_delta": (then(), mspr("feedback", penalty_delta=0.5), {}),
    "mspr.feedback.max_boost_per_memory": (then(), mspr("feedback", max_boost_per_memory=0.2),
                                           {}),
    "mspr.feedback.pin_floor_on_boost": (then(), mspr("feedback", pin_floor_on_boost=False),
                                         {}),
    "mspr.frequency.enabled": (then(), mspr("frequency", enabled=False), {}),
    "mspr.success.enabled": (then(), mspr("success", enabled=False), {}),
    "mspr.success.min_sample_size": (then(), mspr("success", min_sample_size=5), {}),
    "mspr.role.hard_filter": (ROLES_SOFT, mspr("role", enabled=True, hard_filter=True),
                              {"policy": POLICY}),
    "corrections.strict_role_isolation": (
        ROLES_SOFT, then(ROLES_SOFT, corrections(strict_role_isolation=True)),
        {"policy": POLICY}),
    "corrections.apply_edge_type_priors": (then(), corrections(apply_edge_type_priors=True),
                                           {}),
    "corrections.ppr_undirected": (PPR, then(PPR, corrections(ppr_undirected=True)), {}),
}
# Settings whose effect is the searches' intent labels (`searches.intent`).
LABEL_SETTINGS = {"mspr.intent.enable_regex_fastpath": mspr("intent",
                                                            enable_regex_fastpath=False)}
# Settings a `logged` table is built independently of: the scorer applies them.
SCORED_SETTINGS: dict[str, tuple[Change, Change, dict[str, Any]]] = {
    **{f"retrieval.{name}": (then(), retrieval(**{name: value}), {}) for name, value in (
        ("alpha_dense", 0.05), ("beta_bm25", 0.9), ("gamma_graph", 0.9),
        ("delta_personal", 0.9), ("epsilon_frequency", 0.9), ("zeta_success", 0.0))},
    "mspr.intent.enabled": (then(), mspr("intent", enabled=False), {}),
    "mspr.role.enabled": (mspr("role", hard_filter=False), ROLES_SOFT, {"policy": POLICY}),
}
# Settings shown by their own tests below.
OWN_TESTS = {
    "corrections.personal_boost_user_scoped",   # needs feedback from another user
    "mspr.intent.strategy", "mspr.intent.llm_timeout_seconds",  # need a classifier
    "mspr.intent.cache_size",
    "corrections.idempotent_backfill",          # refused: replay runs no backfill
    "context_graph_enabled", "retrieval.enabled",  # refused: no graph path, no ranking
}
EDGES = {f"edges.{name}" for name in as_dict(EngineConfig().edges)}  # refused


@pytest.fixture(scope="module")
def log() -> Any:
    return world(1)[0]


def leaves(tree: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in tree.items():
        out |= leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key}
    return out


def test_every_setting_is_covered_here() -> None:
    """A setting added to EngineConfig fails here until a test shows where it goes."""
    covered = (set(TABLE_SETTINGS) | set(LABEL_SETTINGS) | set(SCORED_SETTINGS) | OWN_TESTS
               | EDGES)
    assert leaves(as_dict(EngineConfig())) == covered


def differing_fields(a: EngineConfig, b: EngineConfig) -> set[str]:
    left, right = as_dict(a), as_dict(b)
    return {path for path in leaves(left) if _get(left, path) != _get(right, path)}


def _get(tree: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        tree = tree[part]
    return tree


@pytest.mark.parametrize("setting", sorted(TABLE_SETTINGS))
def test_a_changed_setting_changes_the_candidate_table(log: Any, setting: str) -> None:
    reference, changed, kwargs = TABLE_SETTINGS[setting]
    before, after = reference(BASE), changed(BASE)
    assert differing_fields(before, after) - {"mspr.role.enabled"} == {setting}
    assert table_key(before, "logged", has_policy="policy" in kwargs) != table_key(
        after, "logged", has_policy="policy" in kwargs)
    a, b = replay(log, before, **kwargs), replay(log, after, **kwargs)
    assert a.meta["config"] == as_dict(before) and b.meta["config"] == as_dict(after)
    assert not a.candidates.equals(b.candidates)


@pytest.mark.parametrize("setting", sorted(LABEL_SETTINGS))
def test_a_changed_intent_setting_changes_the_labels(log: Any, setting: str) -> None:
    changed = LABEL_SETTINGS[setting](BASE)
    assert differing_fields(BASE, changed) == {setting}
    a, b = replay(log, BASE), replay(log, changed)
    assert not a.searches["intent"].equals(b.searches["intent"])


@pytest.mark.parametrize("setting", sorted(SCORED_SETTINGS))
def test_a_changed_scoring_setting_shares_the_table_and_changes_the_ranking(
        log: Any, setting: str) -> None:
    reference, changed, kwargs = SCORED_SETTINGS[setting]
    before, after = reference(BASE), changed(BASE)
    assert setting in differing_fields(before, after)
    has_policy = "policy" in kwargs
    assert table_key(before, "logged", has_policy=has_policy) == table_key(
        after, "logged", has_policy=has_policy)
    scorer = Scorer.of(replay(log, before, **kwargs), [parse_metric("ndcg@10")])
    assert not np.array_equal(scorer.ranks(arm_of("a", before)),
                              scorer.ranks(arm_of("b", after)))


@pytest.mark.parametrize("setting", ["retrieval.alpha_dense", "mspr.intent.enabled"])
def test_in_closed_loop_a_scoring_setting_changes_the_table(log: Any, setting: str) -> None:
    reference, changed, _ = SCORED_SETTINGS[setting]
    a = replay(log, reference(BASE), frequency="closed_loop")
    b = replay(log, changed(BASE), frequency="closed_loop")
    assert not (a.candidates.equals(b.candidates) and a.searches.equals(b.searches))


def seeds_per_search(table: CandidateTable) -> pl.Series:
    return table.candidates.group_by("search").agg(pl.col("was_seed").sum())["was_seed"]


def test_seed_top_k_is_the_seed_count_up_to_the_search_limit(log: Any) -> None:
    """MSPR.md sections 1 and 6: the vector store is asked for `limit` hits and the retriever
    keeps the first seed_top_k; the world's owners hold 20 memories and its searches ask
    for 10."""
    assert RetrievalConfig().seed_top_k == DEFAULT_SEEDS == 10
    assert set(log.events.filter(pl.col("kind") == "search")["limit"]) == {10}
    assert seeds_per_search(replay(log, BASE)).max() == 10
    assert seeds_per_search(replay(log, retrieval(seed_top_k=3)(BASE))).max() == 3
    # more seeds than the search's limit: the store returned `limit` hits only
    wide = retrieval(seed_top_k=20)(BASE)
    assert replay(log, wide).candidates.equals(replay(log, BASE).candidates)
    # a wider limit: as many seeds as seed_top_k, and more than before
    assert seeds_per_search(replay(log, wide, limit=20)).max() == 20
    assert seeds_per_search(replay(log, BASE, limit=20)).max() == 10


def test_the_hard_filter_sees_every_hit_the_limit_asked_for(log: Any) -> None:
    """With the hard role filter, the seeds kept are the first seed_top_k of the `limit` hits
    the filter let through: a smaller seed_top_k than limit still fills up past denials."""
    hard = then(retrieval(seed_top_k=5), mspr("role", enabled=True, hard_filter=True))(BASE)
    table = replay(log, hard, policy=POLICY, limit=10)
    counts = seeds_per_search(table)
    assert counts.max() == 5 and (counts == 5).mean() > 0.9
    seeds = table.candidates.filter(pl.col("was_seed"))["memory_id"].to_list()
    assert all(POLICY.allow({"id": m}, None) for m in seeds)  # type: ignore[arg-type]


def test_personal_boost_user_scoped_changes_the_table(log: Any) -> None:
    """Feedback from another user on the same memories: the library's global boost counts
    it, the user-scoped correction does not."""
    intruded = replace(log, events=log.events.with_columns(user_id=pl.when(
        (pl.col("kind") == "feedback") & (pl.col("event_id") % 2 == 0))
        .then(pl.lit("intruder")).otherwise("user_id")))
    scoped = corrections(personal_boost_user_scoped=True)(BASE)
    assert not replay(intruded, BASE).candidates.equals(replay(intruded, scoped).candidates)


class Alternating:
    """An LLM intent classifier that answers a different label at each call; given a
    `gate`, only once the gate opens (a late answer whatever the machine's load: a sleep
    can finish before a descheduled caller's join times out)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.labels = itertools.cycle(["FACTUAL", "DOCUMENTARY", "EXPLORATORY"])
        self.gate = gate
        self.lock = threading.Lock()

    def __call__(self, prompt: str) -> str:
        if self.gate is not None:
            self.gate.wait()
        with self.lock:
            return json.dumps({"intent": next(self.labels), "confidence": 0.9})


LLM = mspr("intent", strategy="llm", enable_regex_fastpath=False)


def test_the_llm_intent_settings_reach_a_replay_with_a_classifier(log: Any) -> None:
    llm = LLM(BASE)
    labels = replay(log, llm, classifier=Alternating()).searches["intent"]
    assert labels.n_unique() == 3
    regex = replay(log, mspr("intent", enable_regex_fastpath=False)(BASE),
                   classifier=Alternating()).searches["intent"]
    assert set(regex) == {"UNKNOWN"}  # strategy: the classifier is asked only for llm
    uncached = replay(log, mspr("intent", cache_size=0)(llm), classifier=Alternating())
    assert not uncached.searches["intent"].equals(labels)  # repeats asked again
    timeout = mspr("intent", llm_timeout_seconds=0.001)(llm)
    gate = threading.Event()
    try:
        late = replay(log, timeout, classifier=Alternating(gate)).searches["intent"]
    finally:
        gate.set()  # the late daemon threads answer now, after the replay, and end
    assert set(late) == {"UNKNOWN"}


def test_replay_refuses_a_config_without_the_graph_path(log: Any) -> None:
    for config in (replace(BASE, context_graph_enabled=False), retrieval(enabled=False)(BASE)):
        with pytest.raises(ValueError, match=r"context_graph\.retrieval\.enabled must be on"):
            replay(log, config)


# ---- through an experiment definition -----------------------------------------------------

DEFINITION = """
name = "settings"
seed = 1

[dataset]
source = "store"
store = "{store}"

[split]
test_fraction = 0.5

[replay]
policy = "{policy}"
limit = 20

[metrics]
names = ["ndcg@10"]

[engine.context_graph]
enabled = true
{retrieval}
"""
MSPR = """
[engine.mspr]
enabled = true
feedback = { enabled = true }
success = { enabled = true, min_sample_size = 1 }
frequency = { enabled = true }
intent = { enabled = true }
"""


def definition(tmp_path: Path, name: str, *, retrieval: str = "", policy: str = "none",
               extra: str = "") -> Path:
    """An experiment on the world's store; `extra` (engine tables) replaces the MSPR block
    of the world's logging ranker."""
    path = tmp_path / f"{name}.toml"
    path.write_text(DEFINITION.format(store=tmp_path / "world.duckdb", retrieval=retrieval,
                                      policy=policy) + (extra or MSPR))
    return path


@pytest.fixture
def store(tmp_path: Path, log: Any) -> Path:
    path = tmp_path / "world.duckdb"
    ingest(log, path)
    return path


def test_seed_top_k_in_the_toml_changes_the_pipelines_candidate_table(
        tmp_path: Path, store: Path) -> None:
    """The definitions evaluate at limit 20: the vector store is asked for 20 hits, and the
    retriever keeps seed_top_k of them (the default 10, or 20)."""
    default = load_experiment(definition(tmp_path, "default"))
    assert default.engine.retrieval.seed_top_k == 10 and default.replay.limit == 20
    wide = load_experiment(definition(
        tmp_path, "wide", retrieval="retrieval = { seed_top_k = 20 }"))
    assert wide.engine.retrieval.seed_top_k == 20
    first = replay_tables(default, store, {"tuned": default.engine})
    second = replay_tables(wide, store, {"tuned": wide.engine})
    assert not second.from_cache[second.key_of["tuned"]]  # not the cached default table
    a, b = first.table("tuned"), second.table("tuned")
    assert seeds_per_search(a).max() == 10 and seeds_per_search(b).max() == 20
    assert not a.candidates.equals(b.candidates)
    again = replay_tables(wide, store, {"tuned": wide.engine})
    assert again.from_cache[again.key_of["tuned"]]
    assert again.table("tuned").candidates.equals(b.candidates)


def test_the_success_off_arm_is_derived_from_its_twin_not_replayed(
        tmp_path: Path, store: Path) -> None:
    """The ladder's `no-success` shares every column but success with `on-zero`: it is
    derived, and equals the table a replay of its own gives."""
    from msprlab.experiments.ablation import side_effects
    from msprlab.experiments.arms import experiment_arms
    cfg = load_experiment(definition(tmp_path, "ladder"))
    configs = experiment_arms(cfg, ablation=True).every()
    assert "no-success" in configs and "on-zero" in configs
    prepared = replay_tables(cfg, store, configs)
    key = prepared.key_of["no-success"]
    assert prepared.derived == {key: prepared.key_of["on-zero"]}
    assert key not in prepared.from_cache and prepared.replayed == len(prepared.tables) - 1
    alone = replay_tables(cfg, store, {"no-success": side_effects(cfg.engine)["no-success"]})
    assert not alone.derived  # no twin among them: replayed
    assert prepared.table("no-success").candidates.equals(alone.table("no-success").candidates)
    assert prepared.table("no-success").searches.equals(alone.table("no-success").searches)


REFUSED = [
    ("[engine.context_graph.edges]\ntopic_top_k = 3\n", "context_graph.edges.topic_top_k"),
    ("[engine.context_graph.edges]\nenable_reply_to = false\n",
     "context_graph.edges.enable_reply_to"),
    ("[engine.context_graph.edges]\nuse_llm_inference = true\n",
     "context_graph.edges.use_llm_inference"),
    ("backend = 'neo4j'\n", "context_graph.backend"),  # the definition ends in that table
    ("[engine.vector_store]\nprovider = 'qdrant'\n", "vector_store"),
    ("[engine.embedder]\nprovider = 'openai'\n", "embedder"),
    ("[engine.mspr.frequency]\nepsilon_weight = 0.2\n", "mspr.frequency.epsilon_weight"),
    ("[engine.mspr.intent]\nstrategy = 'hybrid'\n", "mspr.intent.strategy"),
    ("[engine.mspr.intent]\nllm_timeout_seconds = 5.0\n", "mspr.intent.llm_timeout_seconds"),
    ("[engine.msprlab.corrections]\nidempotent_backfill = true\n",
     "msprlab.corrections.idempotent_backfill"),
    ("[engine.mspr.role]\nenabled = true\n", "mspr.role.enabled"),
    ("[engine.mspr.role]\nhard_filter = false\n", "mspr.role.hard_filter"),
    ("[engine.msprlab.corrections]\nstrict_role_isolation = true\n",
     "msprlab.corrections.strict_role_isolation"),
]


@pytest.mark.parametrize(("extra", "key"), REFUSED)
def test_an_unreplayable_setting_is_refused_naming_the_key(tmp_path: Path, extra: str,
                                                           key: str) -> None:
    path = definition(tmp_path, "refused", extra=extra)
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    message = str(info.value)
    assert f"engine: {key} cannot reach the replay" in message and str(path) in message


def test_role_settings_load_with_a_policy(tmp_path: Path) -> None:
    path = definition(tmp_path, "roles", policy="composite",
                      extra="[engine.mspr.role]\nenabled = true\nhard_filter = false\n")
    assert load_experiment(path).engine.mspr.role.enabled


def test_the_cli_exits_2_naming_a_refused_key(tmp_path: Path, capsys: Any) -> None:
    path = definition(tmp_path, "cli", extra="[engine.context_graph.edges]\ntopic_top_k = 3\n")
    assert main(["ablate", str(path), "--root", str(tmp_path), "--no-track"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "context_graph.edges.topic_top_k cannot reach the replay" in out
    assert not (tmp_path / "results").exists()
