"""Which storage a study's spec names, and opening it with the locks and the recovery
that go with it: a journal file by default (`DEFAULT_STUDY_DIR`/<study name>.journal,
written through `journal.ProcessSafeJournal`: an `flock`, no fsync), ":memory:" (nothing
kept), or an RDB URL (`sqlite:///...`, `postgresql://...`, through psycopg 3:
`databases.sqlalchemy_url`; `database.SharedRDB`).

Every step of a trial is written as it happens (about 10 journal appends a trial: its
creation, six parameters, TPE's constant-liar proposal, its sampler and worker, its
state), so a killed study resumes with every finished trial. A killed run is recovered on
resume: a torn last journal line is cut off (`recover_journal`), and when no other process
works on the study (`journal.RunLock`) the trials a dead process left RUNNING are marked
FAIL and tagged `STALE_ATTR`; on a database, those whose worker stopped beating
(`recover_trials`). They do not count toward `n_trials`, so they are run again."""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.trial import TrialState

from ..errors import ExperimentError
from .attrs import STALE_ATTR
from .database import HEARTBEAT, SharedRDB, open_rdb, recover_stale
from .journal import ProcessSafeJournal, RunLock, torn_tail_message

DEFAULT_STUDY_DIR = Path("studies")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
MEMORY = ":memory:"


def storage_spec(storage: str | Path | None, study_name: str) -> str:
    if storage is None:
        safe = re.sub(r"[^\w.-]", "_", study_name)
        return str(DEFAULT_STUDY_DIR / f"{safe}.journal")
    return str(storage)


def is_database(spec: str | Path | None) -> bool:
    """Whether a storage spec is a database URL (shared by hosts), not a journal file."""
    return spec is not None and str(spec) != MEMORY and bool(_URL.match(str(spec)))


def journal_path(spec: str) -> Path | None:
    """The journal file a storage spec names (its folder created), None for memory or RDB."""
    if spec == MEMORY or _URL.match(spec):
        return None
    path = Path(spec)
    if path.is_dir():
        raise ExperimentError(f"--storage {spec}: is a folder; give a journal file path "
                              "(e.g. runs/study.journal) or a database URL")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ExperimentError(f"--storage {spec}: {parent} is a file, not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def open_storage(spec: str, *, target: int | None = None,
                 heartbeat: tuple[int, int] = HEARTBEAT) -> BaseStorage:
    """":memory:" (nothing kept), an RDB URL (`SharedRDB`: reserving trials up to `target`
    when given), else a journal file (its folder is created)."""
    if spec == MEMORY:
        return optuna.storages.InMemoryStorage()
    if _URL.match(spec):
        return open_rdb(spec, target=target, heartbeat=heartbeat)
    journal_path(spec)
    return JournalStorage(ProcessSafeJournal(spec))


def run_lock(spec: str) -> RunLock | nullcontext[None]:
    try:
        journal = journal_path(spec)
        return nullcontext() if journal is None else RunLock(journal)
    except OSError as err:  # e.g. a folder that cannot be written: bad input, not a crash
        raise ExperimentError(f"tune: cannot write the study's journal {spec} or its lock "
                              f"file beside it ({err.strerror}); give a writable path"
                              ) from err


def recover_journal(spec: str) -> list[str]:
    """Cut the torn last line a killed writer left in the journal (`drop_torn_tail`)."""
    journal = journal_path(spec)
    if journal is None or not journal.exists():
        return []
    dropped = ProcessSafeJournal(str(journal)).drop_torn_tail()
    return [torn_tail_message(journal, dropped)] if dropped else []


def _fail_stale(study: optuna.Study, storage: BaseStorage) -> list[int]:
    """Mark FAIL, tagged `STALE_ATTR`, every RUNNING trial (called only when no other
    process works on the study: `RunLock.alone`); returns their numbers."""
    stale = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    study_id = storage.get_study_id_from_name(study.study_name)
    for number in stale:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        storage.set_trial_user_attr(trial_id, STALE_ATTR, True)  # first: a FAIL is frozen
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
    return stale


def recover_trials(study: optuna.Study, storage: BaseStorage, lock: RunLock | None,
                   alone: bool) -> list[str]:
    """Fail the RUNNING trials of dead processes when that can be told; say what was done."""
    if isinstance(storage, SharedRDB):
        return recover_stale(study, storage)
    if lock is None:
        return []  # memory: nothing to recover
    if alone:
        if stale := _fail_stale(study, storage):
            return [f"{len(stale)} trials left RUNNING by a process that is no longer alive "
                    f"({stale}) marked FAIL; they do not count toward the target and are "
                    "run again"]
        return []
    if running := [t.number for t in study.get_trials(deepcopy=False,
                                                      states=(TrialState.RUNNING,))]:
        return [f"{len(running)} RUNNING trials ({running}) left as they are: another tune "
                "process works on the study, so they may be its own; a resume when no other "
                "process holds the study fails those still RUNNING"]
    return []
