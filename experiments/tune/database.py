"""A study on a database (`SharedRDB`), shared by `tune` processes on several hosts,
started independently (README, "Scaling out"):

- the first one records the dataset digest and the config hash (`identity`) in the
  study; a later one whose differ is refused before it touches the study;
- every running trial beats (Optuna's heartbeat, `heartbeat=(interval, grace)`); a
  trial whose worker stopped beating for `grace` seconds is failed by the next worker
  that asks for a trial and queued again with its parameters
  (`RetryHeartbeatStaleTrialCallback`), so a host killed mid-trial costs that trial's
  time, not the trial;
- trials are reserved: a worker starts a trial only while the study's COMPLETE, PRUNED
  and RUNNING trials number fewer than `n_trials`, checked and created under a lock
  (PostgreSQL: an advisory lock; SQLite: an `flock` beside the file), so concurrent
  workers never overshoot; one that finds every remaining trial running waits for them,
  and fails and reruns those whose worker died, so the study ends with exactly
  `n_trials` counted trials while one worker lives;
- the study's setup (creation, the checks, the baseline) runs under the same lock, so
  workers starting at the same moment enqueue one baseline.
"""

from __future__ import annotations

import fcntl
import threading
import warnings
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from ..databases import driver_hint, sqlalchemy_url
from ..errors import ExperimentError, redact_url
from .attrs import COUNTED, DROPPED_ATTR

# Optuna's heartbeat on a database, in seconds: a running trial beats every `interval`; one
# without a beat for `grace` is failed by the next worker asking for a trial, and retried.
HEARTBEAT = (10, 30)
MAX_RETRIES = 3        # a trial is queued again at most this many times after going stale


def open_rdb(spec: str, *, target: int | None, heartbeat: tuple[int, int]) -> SharedRDB:
    """An RDB storage, or one message saying why it cannot be opened (exit 2)."""
    import sqlalchemy.exc

    scheme = spec.split("://", 1)[0]
    try:
        return SharedRDB(sqlalchemy_url(spec), target=target, heartbeat=heartbeat)
    except sqlalchemy.exc.NoSuchModuleError:
        raise ExperimentError(
            f"--storage: unknown database scheme {scheme!r}; give a journal file path, or a "
            "URL such as sqlite:///study.db or postgresql://user@host/db") from None
    except ImportError:
        raise ExperimentError(
            f"--storage: the database driver for {scheme!r} is not installed; "
            f"{driver_hint(spec)} into msprlab's environment, or use a journal file"
        ) from None
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.OperationalError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise ExperimentError(f"--storage {redact_url(spec)}: cannot open it ({reason})") from None


class TargetReached(Exception):
    """Raised by `SharedRDB` instead of starting a trial: the study's counted and running
    trials already make the target (`_optimize` waits for the running ones, or ends)."""

    def __init__(self, counted: int, running: int) -> None:
        super().__init__(f"{counted} counted and {running} running trials")
        self.counted, self.running = counted, running


_LOCK_CLASS = 0x6D73  # "ms": the first key of msprlab's PostgreSQL advisory locks


class SharedRDB(RDBStorage):
    """Optuna's RDB storage for a study shared by hosts (module docstring): heartbeats with
    retries, trials reserved up to `target` under a per-study lock, and RUNNING trials
    that never beat (their worker died between creating them and its first beat) failed
    too once `grace` old.

    A stale trial's FAIL and the queueing of its retry are one step under the study's lock
    (`_fail_stale`). Optuna fails the stale trials first and queues their retries after
    (`fail_stale_trials`), and a fresh trial created between the two took the retry's slot:
    likely, not rare, when the dead worker's trial was the last one the others waited for.

    PostgreSQL connections give up connecting after 10 s and end a transaction left idle
    for over a minute (a host that vanished mid-transaction, without closing its socket,
    cannot hold a lock for longer)."""

    def __init__(self, url: str, *, target: int | None = None,
                 heartbeat: tuple[int, int] = HEARTBEAT) -> None:
        import sqlalchemy

        self.target = target
        self._names: dict[int, str] = {}
        self._stale: set[int] = set()  # listed as stale, to be failed with their retry
        self._held = threading.local()  # the study locks this thread holds (`locked`)
        kwargs: dict[str, Any] = {}
        if url.lower().startswith("postgresql"):
            idle = max(60, 2 * heartbeat[1])
            kwargs = {"pool_pre_ping": True, "connect_args": {
                "connect_timeout": 10,
                "options": f"-c idle_in_transaction_session_timeout={idle}s"}}
        interval, grace = heartbeat
        # Two processes creating Optuna's tables in a new database at once collide: the
        # first one creates them while the others wait.
        engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool,
                                          **{k: v for k, v in kwargs.items()
                                             if k != "pool_pre_ping"})
        try:
            with _database_lock(engine, "optuna tables"), warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                super().__init__(url, engine_kwargs=kwargs, heartbeat_interval=interval,
                                 grace_period=grace, heartbeat_stale_trial_callback=(
                                     optuna.storages.RetryHeartbeatStaleTrialCallback(
                                         max_retry=MAX_RETRIES)))
        finally:
            engine.dispose()
        # `_fail_stale` queues the retries (Optuna's callback, run by it): none is left for
        # `fail_stale_trials` to run after the FAILs.
        self._retry = self.heartbeat_stale_trial_callback
        self.heartbeat_stale_trial_callback = self.failed_trial_callback = None

    @contextmanager
    def locked(self, study_name: str) -> Iterator[None]:
        """The study's lock, held by one process at a time, and entered again freely by the
        thread holding it (a setup fails stale trials, and so queues retries, under it: a
        second database lock from another connection would wait for itself)."""
        held: set[str] = self._held.__dict__.setdefault("names", set())
        if study_name in held:
            yield
            return
        with _database_lock(self.engine, study_name):
            held.add(study_name)
            try:
                yield
            finally:
                held.discard(study_name)

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None
                          ) -> FrozenTrial:
        if template_trial is not None or self.target is None:  # queued: nothing starts
            return super()._create_new_trial(study_id, template_trial)
        # A queued retry holds its slot: a fresh trial must not take the place of the trial
        # a dead worker left (it would leave the retry queued for good).
        with self._reserving(study_id, queued_hold=True):
            return super()._create_new_trial(study_id, template_trial)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        if state == TrialState.FAIL and trial_id in self._stale:
            self._stale.discard(trial_id)
            return self._fail_stale(trial_id)
        if state != TrialState.RUNNING or self.target is None:
            return super().set_trial_state_values(trial_id, state, values)
        study_id = self._study_of(trial_id)
        try:
            with self._reserving(study_id):  # a queued trial
                return super().set_trial_state_values(trial_id, state, values)
        except TargetReached:
            # Another worker may have started this queued trial since this one listed it
            # (its start is what fills the target): then it is that worker's, to be left
            # alone. Only a trial still WAITING, checked under the study's lock (every start
            # takes it), is dropped: the study reached N without it (queued before this
            # process's target, say, by a run asking for more trials), and it is marked,
            # not left WAITING for ever.
            with self.locked(self._name(study_id)):
                if self.get_trial(trial_id).state != TrialState.WAITING:
                    return False
                self.set_trial_system_attr(trial_id, DROPPED_ATTR,
                                           "the study reached its target")
                super().set_trial_state_values(trial_id, TrialState.FAIL)
            raise

    def _fail_stale(self, trial_id: int) -> bool:
        """Fail a stale trial and queue its retry (Optuna's `RetryHeartbeatStaleTrialCallback`,
        up to its retries) under the study's lock, which every start takes: a WAITING retry
        holds its slot (`_create_new_trial`), so no fresh trial can take it in between."""
        study_id = self._study_of(trial_id)
        with self.locked(self._name(study_id)):
            if not super().set_trial_state_values(trial_id, TrialState.FAIL):
                return False
            if self._retry is not None:
                self._retry(_Queue(self, study_id), self.get_trial(trial_id))
        return True

    def _name(self, study_id: int) -> str:
        if study_id not in self._names:
            self._names[study_id] = self.get_study_name_from_id(study_id)
        return self._names[study_id]

    def _study_of(self, trial_id: int) -> int:
        import sqlalchemy
        from optuna.storages._rdb import models

        query = sqlalchemy.select(models.TrialModel.study_id).where(
            models.TrialModel.trial_id == trial_id)
        with self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())

    @contextmanager
    def _reserving(self, study_id: int, *, queued_hold: bool = False) -> Iterator[None]:
        """Under the study's lock: go on (start the trial) only while its COMPLETE, PRUNED
        and RUNNING trials (and, with `queued_hold`, the WAITING ones) number fewer than
        the target; else `TargetReached`."""
        assert self.target is not None
        with self.locked(self._name(study_id)):
            counts = self._states(study_id)
            counted = sum(counts.get(state, 0) for state in COUNTED)
            running = counts.get(TrialState.RUNNING, 0) + (
                counts.get(TrialState.WAITING, 0) if queued_hold else 0)
            if counted + running >= self.target:
                raise TargetReached(counted, running)
            yield

    def _states(self, study_id: int) -> dict[TrialState, int]:
        import sqlalchemy
        from optuna.storages._rdb import models

        query = (sqlalchemy.select(models.TrialModel.state, sqlalchemy.func.count())
                 .where(models.TrialModel.study_id == study_id)
                 .group_by(models.TrialModel.state))
        with self.engine.connect() as connection:
            return {TrialState[getattr(state, "name", str(state))]: int(n)
                    for state, n in connection.execute(query)}

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """Optuna's stale trials (RUNNING, last beat over `grace` ago) and the RUNNING
        trials that never beat and started over `grace` ago (Optuna skips those)."""
        import sqlalchemy
        from optuna.storages._rdb import models

        stale = super()._get_stale_trial_ids(study_id)
        assert self.heartbeat_interval is not None
        grace = self.grace_period or 2 * self.heartbeat_interval
        cutoff = datetime.now() - timedelta(seconds=grace)
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return stale
        query = (sqlalchemy.select(models.TrialHeartbeatModel.trial_id)
                 .where(models.TrialHeartbeatModel.trial_id.in_(
                     [t._trial_id for t in running])))
        with self.engine.connect() as connection:
            beating = set(connection.execute(query).scalars())
        found = stale + [t._trial_id for t in running
                         if t._trial_id not in beating and t._trial_id not in stale
                         and t.datetime_start is not None and t.datetime_start < cutoff]
        self._stale.update(found)
        return found


@dataclass(frozen=True)
class _Queue:
    """What Optuna's retry callback needs of a study, `add_trial`: the retry goes straight
    into the storage, inside `SharedRDB._fail_stale`'s lock."""

    storage: SharedRDB
    study_id: int

    def add_trial(self, trial: FrozenTrial) -> None:
        self.storage.create_new_trial(self.study_id, template_trial=trial)


@contextmanager
def _database_lock(engine: Any, name: str) -> Iterator[None]:
    """A lock named `name`, across processes and hosts: a PostgreSQL advisory lock held by a
    transaction (released when it ends, or when its connection dies), an `flock` beside
    a SQLite file; other databases: none (README, "Scaling out")."""
    import sqlalchemy

    dialect, database = engine.dialect.name, engine.url.database
    if dialect == "postgresql":
        key = zlib.crc32(name.encode()) - (1 << 31)  # int4
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:a, :b)"),
                               {"a": _LOCK_CLASS, "b": key})
            yield
    elif dialect == "sqlite" and database and database != ":memory:":
        try:
            f = open(f"{database}.msprlab.lock", "ab")  # noqa: SIM115 (closed below)
        except OSError:  # a folder that cannot hold the file: SQLite itself says why
            yield
            return
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield
    else:
        yield


def setup_lock(storage: BaseStorage, study_name: str) -> Any:
    return storage.locked(study_name) if isinstance(storage, SharedRDB) else nullcontext()


def recover_stale(study: optuna.Study, storage: SharedRDB) -> list[str]:
    """On a database: fail (and queue again) the trials whose worker stopped beating, as
    every worker does before it asks for a trial; say which."""
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not before:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    failed = sorted(t.number for t in study.get_trials(deepcopy=False,
                                                       states=(TrialState.FAIL,))
                    if t.number in before)
    if not failed:
        return []
    return [f"{len(failed)} trials whose worker sent no heartbeat for {storage.grace_period} s "
            f"({failed}) marked FAIL and queued again with their parameters; they do not "
            "count toward the target"]
