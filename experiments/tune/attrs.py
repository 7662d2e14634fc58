"""What msprlab records in an Optuna study besides Optuna's own records (the names of its
user attributes), and which trial states count toward a study's target of trials."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

BASELINE_ATTR = "msprlab_baseline"
SETTINGS_ATTR = "msprlab_tune"
# On the study: {"name", "seed"} of the sampler it runs with; on each trial: the name.
SAMPLER_ATTR = "msprlab_sampler"
SWITCHES_ATTR = "msprlab_sampler_switches"  # on the study: each switch, in order
FIXED_ATTR = "msprlab_fixed"                # on the study: `SearchSpace.note()`
STALE_ATTR = "msprlab_stale"  # on a trial a dead process left RUNNING, failed on resume
WORKER_ATTR = "msprlab_worker"  # on each trial: "HOST:PID" of the process that ran it
JOINS_ATTR = "msprlab_joins"    # on a database study: how many tune processes joined it
IDENTITY_PREFIX = "msprlab_"    # + each `identity` key: "msprlab_dataset_digest", ...
DROPPED_ATTR = "msprlab_dropped_retry"  # on a queued retry the study no longer needed
# A configuration search's trials (`configuration`, `rounds`): the table each scored (its
# cache key's first 16 characters) and that table's engine time per search in ms; and
# on a queued trial, the trial whose state (GROUP_ATTR) or point (POINT_ATTR) it shares.
TABLE_ATTR = "msprlab_table"
COST_ATTR = "msprlab_cost_ms"
GROUP_ATTR = "msprlab_state_of"
POINT_ATTR = "msprlab_point_of"
# On a queued trial whose weights are the best known: "weights-only" (trial 1, the
# weights-only study's best), or the number of the trial whose weights it takes.
WARM_ATTR = "msprlab_weights_of"
# On a state group's lead: how its settings were chosen, "sampler" or "random" (a startup
# group's).
LEAD_ATTR = "msprlab_group_lead"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)  # toward the target; a FAIL never is


def counted_trials(study: optuna.Study) -> int:
    """The trials that count toward the target: COMPLETE and PRUNED, never a FAIL (a trial
    a dead process left RUNNING, failed on resume or by the heartbeat, is run again)."""
    return len(study.get_trials(deepcopy=False, states=COUNTED))
