"""Bad-input table for `config_from_dict`: each error names the key, the value and the range."""

from __future__ import annotations

import re
from typing import Any

import pytest

from msprlab.engine import Corrections, config_from_dict
from msprlab.engine.config import ConfigError, EngineConfig


def retrieval(**values: Any) -> dict[str, Any]:
    return {"context_graph": {"retrieval": values}}


def exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


RETRIEVAL_KEYS = ("algorithm, alpha_dense, beta_bm25, delta_personal, edge_weight_floor, "
                  "enabled, epsilon_frequency, expansion_depth, gamma_graph, max_candidates, "
                  "ppr_damping, ppr_max_iter, ppr_tolerance, seed_top_k, zeta_success")
TOP_KEYS = ("chunking, context_graph, custom_fact_extraction_prompt, "
            "custom_update_memory_prompt, decay_v2, embedder, graph_store, history_db_path, "
            "llm, mspr, msprlab, ppmf, state_store, tcmgm, tenant, vector_store, version")
R = "context_graph.retrieval."

BAD = [
    # unknown keys, each listing the keys allowed where it was found
    ({"vectorstore": {}}, f"unknown key vectorstore; allowed top-level keys: {TOP_KEYS}"),
    ({"context_graph": {"retrival": {}}}, "unknown key context_graph.retrival; allowed keys at "
     "context_graph: backend, decay, edges, enabled, log_changes, persist_path, retrieval"),
    (retrieval(alpha=0.5),
     f"unknown key context_graph.retrieval.alpha; allowed keys at context_graph.retrieval: "
     f"{RETRIEVAL_KEYS}"),
    ({"mspr": {"feedbak": {}}}, "unknown key mspr.feedbak; allowed keys at mspr: enabled, "
     "feedback, frequency, intent, role, success"),
    ({"mspr": {"feedback": {"boost": 1}}}, "unknown key mspr.feedback.boost; allowed keys at "
     "mspr.feedback: boost_delta, enabled, max_boost_per_memory, penalty_delta, "
     "pin_floor_on_boost, sqlite_path"),
    ({"msprlab": {"corrections": {"strict": True}}}, "unknown key msprlab.corrections.strict; "
     "allowed keys at msprlab.corrections: apply_edge_type_priors, idempotent_backfill, "
     "personal_boost_user_scoped, ppr_undirected, strict_role_isolation"),
    ({"msprlab": {"fixes": {}}}, "unknown key msprlab.fixes; allowed keys at msprlab: "
     "corrections"),
    # out of range, one row per bounded field
    (retrieval(alpha_dense=1.5), f"{R}alpha_dense must be in [0, 1], got 1.5"),
    (retrieval(beta_bm25=-0.5), f"{R}beta_bm25 must be in [0, 1], got -0.5"),
    (retrieval(edge_weight_floor=-0.01), f"{R}edge_weight_floor must be in [0, 1], got -0.01"),
    (retrieval(zeta_success=2), f"{R}zeta_success must be in [0, 1], got 2"),
    (retrieval(seed_top_k=0), f"{R}seed_top_k must be in [1, 100], got 0"),
    (retrieval(expansion_depth=5), f"{R}expansion_depth must be in [0, 4], got 5"),
    (retrieval(max_candidates=501), f"{R}max_candidates must be in [1, 500], got 501"),
    (retrieval(ppr_damping=1.0), f"{R}ppr_damping must be in (0, 1), got 1.0"),
    (retrieval(ppr_damping=0), f"{R}ppr_damping must be in (0, 1), got 0"),
    (retrieval(ppr_max_iter=4), f"{R}ppr_max_iter must be in [5, 500], got 4"),
    (retrieval(ppr_tolerance=0), f"{R}ppr_tolerance must be in (0, inf], got 0"),
    ({"context_graph": {"decay": {"half_life_days": 0}}},
     "context_graph.decay.half_life_days must be in (0, inf], got 0"),
    ({"context_graph": {"decay": {"min_edge_weight": 1.01}}},
     "context_graph.decay.min_edge_weight must be in [0, 1], got 1.01"),
    ({"context_graph": {"edges": {"topic_top_k": 51}}},
     "context_graph.edges.topic_top_k must be in [1, 50], got 51"),
    ({"mspr": {"success": {"min_sample_size": 0}}},
     "mspr.success.min_sample_size must be in [1, inf], got 0"),
    ({"mspr": {"intent": {"cache_size": -1}}}, "mspr.intent.cache_size must be in [0, inf], "
     "got -1"),
    ({"mspr": {"intent": {"llm_timeout_seconds": 0}}},
     "mspr.intent.llm_timeout_seconds must be in (0, inf], got 0"),
    ({"mspr": {"feedback": {"boost_delta": -0.1}}},
     "mspr.feedback.boost_delta must be in [0, 1], got -0.1"),
    # wrong types
    (retrieval(gamma_graph="0.3"), f"{R}gamma_graph must be a number, got '0.3'"),
    (retrieval(alpha_dense=float("nan")), f"{R}alpha_dense must be a number, got nan"),
    (retrieval(seed_top_k=True), f"{R}seed_top_k must be an integer, got True"),
    (retrieval(seed_top_k=10.0), f"{R}seed_top_k must be an integer, got 10.0"),
    (retrieval(enabled="yes"), f"{R}enabled must be true or false, got 'yes'"),
    ({"context_graph": {"enabled": "yes"}}, "context_graph.enabled must be true or false, "
     "got 'yes'"),
    ({"mspr": {"enabled": 1}}, "mspr.enabled must be true or false, got 1"),
    ({"msprlab": {"corrections": {"ppr_undirected": "true"}}},
     "msprlab.corrections.ppr_undirected must be true or false, got 'true'"),
    # names that are not in the allowed set
    (retrieval(algorithm="dfs"), f"{R}algorithm must be one of 'bfs', 'ppr', got 'dfs'"),
    ({"mspr": {"intent": {"strategy": "bert"}}},
     "mspr.intent.strategy must be one of 'regex', 'llm', 'hybrid', got 'bert'"),
    # blocks that are not tables
    ([], "config must be a table of keys, got []"),
    ({"context_graph": 1}, "context_graph must be a table of keys, got 1"),
    ({"context_graph": {"retrieval": []}}, f"{R[:-1]} must be a table of keys, got []"),
    ({"mspr": "on"}, "mspr must be a table of keys, got 'on'"),
    ({"mspr": {"role": True}}, "mspr.role must be a table of keys, got True"),
    ({"msprlab": {"corrections": None}}, "msprlab.corrections must be a table of keys, "
     "got None"),
]


@pytest.mark.parametrize(("raw", "message"), BAD, ids=[m.split(" ")[0] + f"-{i}"
                                                       for i, (_, m) in enumerate(BAD)])
def test_bad_config_is_rejected_with_an_exact_message(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=exact(message)):
        config_from_dict(raw)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


PRODUCTION = {
    "vector_store": {"provider": "qdrant",
                     "config": {"collection_name": "memories", "embedding_model_dims": 1536}},
    "llm": {"provider": "openai", "config": {"model": "gpt-4o-mini", "temperature": 0.1}},
    "embedder": {"provider": "openai", "config": {"model": "text-embedding-3-small"}},
    "history_db_path": "/var/lib/ck/history.db",
    "version": "v1.1",
    "context_graph": {
        "enabled": True, "backend": "networkx", "persist_path": "/var/lib/ck/graph",
        "retrieval": {"algorithm": "ppr", "alpha_dense": 0.5, "beta_bm25": 0.2,
                      "gamma_graph": 0.3, "delta_personal": 0.3, "epsilon_frequency": 0.1,
                      "zeta_success": 0.2, "seed_top_k": 20},
        "decay": {"half_life_days": 14, "tick_on_read": True},
        "edges": {"use_llm_inference": False, "topic_top_k": 3},
    },
    "mspr": {
        "enabled": True,
        "feedback": {"enabled": True, "sqlite_path": "/var/lib/ck/feedback.db"},
        "success": {"enabled": True, "min_sample_size": 5, "zeta_weight": 0.2},
        "frequency": {"enabled": True, "normalise": "log"},
        "intent": {"enabled": True, "strategy": "hybrid", "llm_timeout_seconds": 1.5},
        "role": {"enabled": True, "hard_filter": False, "tenant_field": "tenant_id"},
    },
    "msprlab": {"corrections": {"strict_role_isolation": True}},
}


def test_a_production_config_is_accepted_and_lists_what_it_ignores() -> None:
    ignored: list[str] = []
    config = config_from_dict(PRODUCTION, ignored=ignored)
    assert ignored == [
        "embedder", "history_db_path", "llm", "vector_store", "version",
        "mspr.feedback.sqlite_path", "mspr.frequency.normalise", "mspr.role.tenant_field",
        "mspr.success.zeta_weight", "context_graph.backend", "context_graph.persist_path",
        "context_graph.edges.use_llm_inference"]
    r = config.retrieval
    assert (r.algorithm, r.alpha_dense, r.seed_top_k, r.zeta_success) == ("ppr", 0.5, 20, 0.2)
    assert config.decay.half_life_days == 14 and config.edges.topic_top_k == 3
    m = config.mspr
    assert (m.enabled, m.intent.strategy, m.role.hard_filter, m.success.min_sample_size) == (
        True, "hybrid", False, 5)
    assert config.corrections == Corrections(strict_role_isolation=True)


def test_an_empty_config_is_the_default_with_the_graph_off() -> None:
    assert config_from_dict({}) == EngineConfig(context_graph_enabled=False)
