"""Random scenario configs inside the ranges of SCENARIOS.md, and the draws they use.

Part of `scenario_gen`; the knobs are weighted towards the defaults and towards the
corners MSPR.md describes (PageRank that stops early, all-zero MSPR weights, every role
policy in hard and soft mode).
"""

from __future__ import annotations

from typing import Any

import numpy as np

POLICIES = ("none", "tenant", "role_scope", "composite", "allow_all")


def pick(rng: np.random.Generator, items: tuple[Any, ...] | list[Any]) -> Any:
    """One of `items`, uniformly."""
    return items[int(rng.integers(len(items)))]


def chance(rng: np.random.Generator, p: float) -> bool:
    """True with probability `p`."""
    return bool(rng.random() < p)


def random_config(rng: np.random.Generator) -> dict[str, Any]:
    """A scenario's `config` block."""
    return {
        "retrieval": _retrieval(rng),
        "decay": {
            "enabled": chance(rng, 0.45),
            "half_life_days": float(pick(rng, (0.5, 1.0, 7.0, 30.0, 90.0))),
            "min_edge_weight": float(pick(rng, (0.05, 0.0, 0.2, 0.5))),
            "min_node_relevance": float(pick(rng, (0.02, 0.0, 0.1, 0.4))),
            "tick_on_read": chance(rng, 0.9),
        },
        "log_changes": chance(rng, 0.05),
        "mspr": _mspr(rng),
    }


def _weight(rng: np.random.Generator) -> float:
    return round(float(rng.uniform(0.0, 1.0)), 3)


def _retrieval(rng: np.random.Generator) -> dict[str, Any]:
    if chance(rng, 0.4):
        alpha, beta, gamma = 0.55, 0.15, 0.30
    else:
        alpha, beta, gamma = _weight(rng), _weight(rng), _weight(rng)
    mode = pick(rng, ("zero", "some", "some", "all"))
    extra = [0.0 if mode == "zero" or (mode == "some" and chance(rng, 0.5)) else _weight(rng)
             for _ in range(3)]
    return {
        "alpha_dense": alpha, "beta_bm25": beta, "gamma_graph": gamma,
        "delta_personal": extra[0], "epsilon_frequency": extra[1], "zeta_success": extra[2],
        "seed_top_k": int(pick(rng, (1, 2, 3, 5, 10, 10, 20, 100))),
        "expansion_depth": int(pick(rng, (0, 1, 1, 2, 2, 2, 3, 4))),
        "max_candidates": _max_candidates(rng),
        "edge_weight_floor": float(pick(rng, (0.1, 0.1, 0.0, round(rng.uniform(0, 0.6), 3)))),
        "algorithm": "ppr" if chance(rng, 0.35) else "bfs",
        "ppr_damping": 0.85 if chance(rng, 0.5) else round(float(rng.uniform(0.3, 0.95)), 3),
        # 5..15 iterations often stop PageRank before it converges (the library then
        # falls back to the seeds), which the parity test must see.
        "ppr_max_iter": int(pick(rng, (200, 200, 200, int(rng.integers(5, 16)),
                                        int(rng.integers(30, 501))))),
        "ppr_tolerance": float(pick(rng, (1e-6, 1e-6, 1e-8, 1e-4, 1e-10))),
    }


def _max_candidates(rng: np.random.Generator) -> int:
    bucket = rng.random()
    if bucket < 0.5:
        return 50
    if bucket < 0.8:
        return int(rng.integers(1, 9))
    return int(rng.integers(100, 501))


def _mspr(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "enabled": chance(rng, 0.85),
        "feedback": {
            "enabled": chance(rng, 0.75),
            "boost_delta": 0.15 if chance(rng, 0.6) else round(float(rng.uniform(0, 0.5)), 3),
            "penalty_delta": 0.10 if chance(rng, 0.6) else round(float(rng.uniform(0, 0.5)), 3),
            "max_boost_per_memory": float(pick(rng, (0.6, 0.6, 0.0, 0.3, 0.45, 1.0))),
            "pin_floor_on_boost": chance(rng, 0.8),
        },
        "frequency": {"enabled": chance(rng, 0.6)},
        "success": {"enabled": chance(rng, 0.6), "min_sample_size": int(rng.integers(1, 5))},
        "intent": {"enabled": chance(rng, 0.6), "strategy": "regex"},
        "role": {
            "enabled": chance(rng, 0.5),
            "hard_filter": chance(rng, 0.5),
            "policy": pick(rng, POLICIES),
            "treat_global_as_visible": chance(rng, 0.75),
            "treat_unrestricted_as_visible": chance(rng, 0.75),
        },
    }
