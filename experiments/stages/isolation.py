"""The isolation audit: how many returned results the searcher may not see, per arm, in
compat and strict role isolation (`IsolationAudit`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from msprlab.engine import EngineConfig

from ..experiment_config import ExperimentConfig
from ..measures.scoring import arm_of
from .prepare import Stage, quiet
from .replay_tables import Prepared, replay_tables, split_tables

__all__ = ["IsolationAudit", "chat_role_note", "isolation_audit", "isolation_stage"]


@dataclass(frozen=True)
class IsolationAudit:
    """The audit's frame (`isolation_audit`) and, when its leaks count a clash of chat
    roles with access roles, the note saying so (`chat_role_note`)."""

    frame: pl.DataFrame
    note: str | None


def isolation_stage(cfg: ExperimentConfig, prepared: Prepared,
                    configs: Mapping[str, EngineConfig], *, progress: Stage = quiet
                    ) -> IsolationAudit:
    """The ladder's isolation audit on the test window (it replays each arm again in
    strict mode; `progress` shows those replays)."""
    audit = isolation_audit(cfg, prepared, configs, progress=progress)
    return IsolationAudit(audit, chat_role_note(prepared, audit))


def chat_role_note(prepared: Prepared, audit: pl.DataFrame) -> str | None:
    """Why an audit of memories added through `Memory.add` counts leaks: their payload
    `role` is the chat role, which the role policy reads as an access role (MSPR.md
    section 18, quirk 15)."""
    roles = set(prepared.dataset.memories["role"].drop_nulls().unique().to_list())
    if not roles or not roles <= {"user", "assistant", "system"} or not audit["leaked"].sum():
        return None
    return (f"the memories' payload role is a chat role ({', '.join(sorted(roles))}), which "
            "Memory.add(..., infer=False) stores and RoleScopePolicy reads as an access role "
            "(MSPR.md quirk 15): a searcher without that role is 'denied' them, so the leaks "
            "above count that clash, not memories of another tenant")


def isolation_audit(cfg: ExperimentConfig, prepared: Prepared,
                    configs: Mapping[str, EngineConfig], *, window: str = "test",
                    progress: Stage = quiet) -> pl.DataFrame:
    """Per arm, in compat mode (the library: role policies judge the seeds only) and strict
    mode (`corrections.strict_role_isolation`: graph neighbours too): how many returned
    results the searcher may not see (`replay.AUDIT_POLICY`: tenant isolation and role
    scope on the memory's stored payload) over the `window` searches."""
    from msprlab.engine.batch import row_ranks, scores
    strict_configs = {name: replace(config, corrections=replace(
        config.corrections, strict_role_isolation=True)) for name, config in configs.items()}
    strict = replay_tables(cfg, prepared.store, strict_configs, progress)
    rows = []
    for mode, prep, mine in (("compat", prepared, configs), ("strict", strict, strict_configs)):
        windowed = split_tables(prep, window)
        for name, config in mine.items():
            table = windowed[prep.key_of[name]]
            arm = arm_of(name, config)
            block = table.block()
            rank = row_ranks(block, scores(block, arm.weights, intent=arm.intent),
                             roles=arm.roles)
            returned = rank[block.internal_rows(np.arange(block.n_rows))] >= 0
            leaked = returned & ~table.candidates["visible"].to_numpy()
            searches = table.candidates["search"].to_numpy()
            rows.append({"arm": name, "mode": mode, "roles": arm.roles,
                         "searches": table.searches.height, "returned": int(returned.sum()),
                         "leaked": int(leaked.sum()),
                         "leaked_searches": int(np.unique(searches[leaked]).size)})
    return pl.DataFrame(rows)
