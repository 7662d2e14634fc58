"""The ContextKit configuration that ranks as a tuned arm: `tuned_config` (msprlab's
engine configuration) and `best_config_snippet` (the library's nested keys, the bundle's
snippet), with `snippet_notes` saying what the snippet cannot carry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from msprlab.engine import EngineConfig
from msprlab.engine.batch import WEIGHTS, Weights

from ..bundle import SNIPPET
from ..measures.scoring import Arm


def tuned_config(config: EngineConfig, arm: Arm) -> EngineConfig:
    """`config` (the configuration the table was replayed with) ranking as `arm`: its six
    weights, intent routing and the role policy as the arm scores them, and the MSPR master
    switch on when either is."""
    mspr = config.mspr
    return replace(
        config, retrieval=replace(config.retrieval, **Weights(*map(float, arm.weights))._asdict()),
        mspr=replace(mspr, enabled=mspr.enabled or arm.intent or arm.roles,
                     intent=replace(mspr.intent, enabled=arm.intent),
                     role=replace(mspr.role, enabled=arm.roles)))


def best_config_snippet(config: EngineConfig, arm: Arm) -> dict[str, Any]:
    """The ContextKit config fragment (for `Memory.from_config`) that ranks as `arm` on the
    experiment of `config`: `tuned_config(config, arm)` in the library's nested keys.

    It always holds the six weights, `context_graph.enabled` (off by default in the library)
    and every `enabled` switch of `mspr`, and besides them every ranking setting that
    differs from the library's default (seeds, expansion, algorithm, decay, edge synthesis,
    feedback, intent, role and success settings), so `config_from_dict(snippet)` gives
    `tuned_config(config, arm)` back but for `corrections`. Those are msprlab's own switches,
    which the library does not have: they are left out, and `snippet_notes` says which ones
    the snippet therefore cannot reproduce."""
    tuned = tuned_config(config, arm)
    default = EngineConfig()
    graph = {"enabled": tuned.context_graph_enabled,
             **{block: _differing(getattr(tuned, block), getattr(default, block),
                                  keep=WEIGHTS if block == "retrieval" else ())
                for block in ("retrieval", "decay", "edges")}}
    return {"context_graph": {k: v for k, v in graph.items() if v != {}},
            "mspr": _differing(tuned.mspr, default.mspr, keep=("enabled",))}


def _differing(value: Any, default: Any, *, keep: Sequence[str] = ()) -> dict[str, Any]:
    """A config dataclass as a nested dict of the fields that differ from `default`, and
    those in `keep` (here and in every nested block) whatever their value."""
    out: dict[str, Any] = {}
    for f in fields(value):
        mine, theirs = getattr(value, f.name), getattr(default, f.name)
        if hasattr(mine, "__dataclass_fields__"):
            out[f.name] = _differing(mine, theirs, keep=keep)
        elif f.name in keep or mine != theirs:
            out[f.name] = float(mine) if f.name in WEIGHTS else mine
    return out


# What each msprlab correction changes, as MSPR.md section 18 numbers the library's quirks.
_CORRECTED_QUIRK = {"personal_boost_user_scoped": "quirk 1", "strict_role_isolation":
                    "quirks 12 and 13", "apply_edge_type_priors": "quirk 9",
                    "idempotent_backfill": "quirk 7", "ppr_undirected": "quirk 27"}


def snippet_notes(config: EngineConfig) -> tuple[str, ...]:
    """What `best_config_snippet` cannot carry: each msprlab correction on in `config`."""
    return tuple(
        f"msprlab.corrections.{f.name} is on in this experiment, and the library has no such "
        f"setting (MSPR.md 18, {_CORRECTED_QUIRK[f.name]}): {SNIPPET} "
        "leaves it out, so the library ranks with that quirk, not as the tuned engine did"
        for f in fields(config.corrections) if getattr(config.corrections, f.name))
