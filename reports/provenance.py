"""The provenance record (`bundle.PROVENANCE`) as labelled lines: data, config, code, run.

The keys are those `experiments.bundle.provenance` writes; a key a bundle lacks is printed
as "not recorded", so a reader sees the gap instead of a silently shorter list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["NOT_RECORDED", "provenance_items"]

NOT_RECORDED = "not recorded"


def _get(record: Mapping[str, Any], *path: str) -> Any:
    value: Any = record
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _text(value: Any) -> str:
    if value is None or value == "" or value == {} or value == []:
        return NOT_RECORDED
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _mlflow(record: Mapping[str, Any]) -> str:
    run = record.get("mlflow")
    if not isinstance(run, Mapping):
        return "not tracked (--no-track)" if "mlflow" in record else NOT_RECORDED
    return (f"run {run.get('run_id')} in experiment {run.get('experiment')!r} at "
            f"{run.get('tracking_uri')}")


def _seconds(value: Any) -> str:
    return NOT_RECORDED if not isinstance(value, int | float) else f"{value:,.1f} s"


def provenance_items(record: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(label, value) lines in reading order; [] for a bundle without a provenance record."""
    if record is None:
        return []
    split = _get(record, "split", "spec")
    found = record.get("replay")
    replay: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    return [
        ("experiment", _text(record.get("experiment"))),
        ("command", _text(record.get("command"))),
        ("config path", _text(record.get("config_path"))),
        ("config hash", _text(record.get("config_hash"))),
        ("data source", _text(_get(record, "dataset", "source"))),
        ("data version", _text(_get(record, "dataset", "version"))),
        ("data digest", _text(_get(record, "dataset", "digest"))),
        ("event store", _text(_get(record, "dataset", "store"))),
        ("data counts", _text(_get(record, "dataset", "counts"))),
        ("git commit", _text(record.get("git_commit"))),
        ("MLflow run", _mlflow(record)),
        ("split", _text(split)),
        ("searches per window", _text(_get(record, "split", "searches"))),
        ("frequency mode", _text(replay.get("frequency"))),
        ("feedback policy", _text(replay.get("feedback_policy"))),
        ("role policy", _text(replay.get("policy"))),
        ("seeds", _text(replay.get("seeds"))),
        ("experiment seed", _text(_get(record, "config", "seed"))),
        ("replay tables", _text(replay.get("tables"))
         + (f" ({replay['from_cache']} from the cache)" if "from_cache" in replay else "")
         + (f"; {replay['derived']} derived from its success-on twin, not replayed"
            if replay.get("derived") else "")),
        ("started", _text(record.get("started_at"))),
        ("finished", _text(record.get("finished_at"))),
        ("duration", _seconds(record.get("seconds"))),
    ]


def config_text(record: Mapping[str, Any] | None) -> str | None:
    """The experiment definition as pretty JSON, when the provenance holds it."""
    config = None if record is None else record.get("config")
    return None if not config else json.dumps(config, indent=2, sort_keys=True)
