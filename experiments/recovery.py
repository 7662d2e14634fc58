"""Weight recovery on a world with planted weights: do the tuned weights point where the
planted ones do?

`recovery(test, tuned, planted)` measures, on one window (the test window):

- cosine: between the L2-normalised tuned and planted weight vectors, the six weights in
  `engine.batch.WEIGHTS` order (planted weights are named after the signals, `FEATURES`;
  weight k multiplies feature k). The score is linear in the weights and the ranking does
  not change when they are all scaled, so only the direction is comparable.
- the metric of the planted and of the tuned weights on that window;
- sensitivity, per weight: the metric's range when that one tuned weight sweeps
  `SWEEP` with the others held. A weight the metric is flat in (range near 0) is not
  identifiable from this window, whatever the tuner leaves it at.

`planted_recovery` measures it when the store has a truth sidecar
(`datasets.sidecars.truth_path`) for this dataset; `experiments.reporter` prints it beside
the test window's figures, writes `bundle.TEST_RECOVERY` into the results bundle and logs
`recovery/cosine` to MLflow when a tracker is active.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from msprlab.engine.batch import FEATURES, WEIGHTS, Weights

from .measures.scoring import Arm, Scorer

__all__ = ["SWEEP", "cosine", "planted_arm", "planted_recovery", "read_planted", "recovery"]

SWEEP = (0.0, 0.25, 0.5, 0.75, 1.0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two weight vectors (nan when either is all zero)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b) / (na * nb) if na > 0 and nb > 0 else math.nan


def planted_arm(planted: Mapping[str, float], *, roles: bool = False) -> Arm:
    """The planted weights as an arm, in `WEIGHTS` order, scaled into [0, 1] if any is above
    1 (the ranking does not change); intent routing off (the planted utility knows no
    intents)."""
    missing = sorted(set(FEATURES) - set(planted))
    if missing:
        raise ValueError(f"planted weights: no value for {', '.join(missing)}")
    vector = np.array([float(planted[f]) for f in FEATURES])
    top = float(vector.max())
    if top > 1.0:
        vector = vector / top
    return Arm("planted", tuple(vector.tolist()), intent=False, roles=roles)


def recovery(test: Scorer, tuned: Arm, planted: Mapping[str, float], *,
             metric: str) -> dict[str, Any]:
    """Cosine, both arms' `metric` on `test` and the per-weight sensitivity (module
    docstring), as JSON-ready data."""
    arm = planted_arm(planted, roles=tuned.roles)
    t, p = np.array(tuned.weights), np.array(arm.weights)
    sensitivity = {}
    for k, name in enumerate(WEIGHTS):
        values = []
        for value in SWEEP:
            weights = list(tuned.weights)
            weights[k] = value
            values.append(test.mean(replace(tuned, name=f"sweep-{name}",
                                            weights=tuple(weights)), metric))
        sensitivity[name] = {"sweep": list(SWEEP), metric: values,
                             "range": float(np.nanmax(values) - np.nanmin(values))}
    unit = {name: (v / np.linalg.norm(v)).tolist() if np.linalg.norm(v) > 0 else None
            for name, v in (("tuned", t), ("planted", p))}
    return {
        "weights_order": list(WEIGHTS),
        "tuned": Weights(*t.tolist())._asdict(),
        "planted": Weights(*p.tolist())._asdict(),
        "tuned_normalised": unit["tuned"], "planted_normalised": unit["planted"],
        "cosine": cosine(t, p),
        "metric": metric,
        "planted_value": test.mean(arm, metric), "tuned_value": test.mean(tuned, metric),
        "searches": test.n_searches,
        "sensitivity": sensitivity,
    }


def read_planted(store: Path, digest: str) -> dict[str, float] | None:
    """The planted weights of the truth sidecar beside `store`, if there is one for
    `digest`; None otherwise (no sidecar: not a synthetic store; another digest: stale)."""
    from msprlab.datasets.sidecars import truth_path
    path = truth_path(Path(store))
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("digest") != digest:
        return None
    return {k: float(v) for k, v in record["planted_weights"].items()}


def planted_recovery(store: Path, digest: str, test: Scorer, tuned: Arm,
                     metric: str) -> dict[str, Any] | None:
    """The recovery of the planted weights (`recovery`) when the store has a truth sidecar
    for `digest`; else None."""
    planted = read_planted(store, digest)
    if planted is None:
        return None
    return recovery(test, tuned, planted, metric=metric)
