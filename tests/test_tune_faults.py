"""Tuning survives its own faults: a parent killed with -9 (its workers end with it, and the
resume fails the trials it left RUNNING and runs them again), a journal whose last line was
torn mid-write, a RUNNING trial of a live process (left alone), and --trials/--workers 0.

The fast tests run studies in this process on `test_tune`'s small scorer; the kill test runs
`msprlab tune` as a subprocess on `test_tune`'s small definition.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna
import polars as pl
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState
from test_tune import TUNE_DEFINITION, run

from msprlab.experiments.cli import main
from msprlab.experiments.tune import STALE_ATTR, ProcessSafeJournal
from msprlab.experiments.tune.journal import RunLock


def trials_of(journal: Path) -> list[FrozenTrial]:
    """The one study's trials in `journal`, read with Optuna's own file backend (which
    raises on an unreadable line that has lines after it)."""
    storage = JournalStorage(JournalFileBackend(str(journal)))
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


def tear_last_line(journal: Path, keep: int = 25) -> bytes:
    """Cut the journal inside its last line (as a writer killed mid-append would leave it),
    keeping `keep` bytes of that line; returns what was cut."""
    data = journal.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    assert len(data) - start > keep + 2, "the last line is too short to tear"
    journal.write_bytes(data[:start + keep])
    return data[start + keep:]


def states(trials: list[FrozenTrial]) -> dict[int, str]:
    return {t.number: t.state.name for t in trials}


# -- a torn last journal line ----------------------------------------------------------------

def test_a_torn_last_line_is_cut_and_the_complete_trials_are_kept(tmp_path: Path) -> None:
    first = run(tmp_path, n_trials=6, sampler="random")
    journal = tmp_path / "study.journal"
    tear_last_line(journal)  # the last line is trial 5's COMPLETE: trial 5 is RUNNING now
    before = states(trials_of_torn(journal))
    assert before == {**{n: "COMPLETE" for n in range(5)}, 5: "RUNNING"}
    messages: list[str] = []
    resumed = run(tmp_path, n_trials=8, sampler="random", on_recovered=messages.append)
    torn = [m for m in messages if "cut off mid-write" in m]
    assert len(torn) == 1 and f"journal {journal}:" in torn[0]  # the journal, not a TOML
    assert any("[5]" in m and "marked FAIL" in m for m in messages)
    frame = resumed.trials
    kept = frame.filter(pl.col("number") < 5)
    assert kept.drop("seconds").equals(first.trials.filter(pl.col("number") < 5)
                                       .drop("seconds"))
    assert (frame["state"] == "COMPLETE").sum() == 8
    assert states(trials_of(journal))[5] == "FAIL"  # Optuna's own reader reads it all
    again: list[str] = []
    run(tmp_path, n_trials=8, sampler="random", on_recovered=again.append)
    assert again == []  # reported once: nothing is left to recover


def trials_of_torn(journal: Path) -> list[FrozenTrial]:
    """The trials as a resume sees them before it repairs the journal (our reader skips a
    last line without its newline, as Optuna's does)."""
    storage = JournalStorage(ProcessSafeJournal(str(journal)))
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


def test_an_append_after_a_torn_line_does_not_glue_onto_it(tmp_path: Path) -> None:
    path = tmp_path / "j.journal"
    ProcessSafeJournal(str(path)).append_logs([{"op_code": 2, "i": i} for i in range(3)])
    with open(path, "ab") as f:
        f.write(b'{"op_code": 2, "i": 3')  # its writer was killed here
    with pytest.warns(UserWarning, match=rf"journal {re.escape(str(path))}: its last line "
                                         r"was cut off mid-write \(21 bytes"):
        ProcessSafeJournal(str(path)).append_logs([{"op_code": 2, "i": 4}])
    assert [log["i"] for log in JournalFileBackend(str(path)).read_logs(0)] == [0, 1, 2, 4]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a whole last line is left alone
        ProcessSafeJournal(str(path)).append_logs([{"op_code": 2, "i": 5}])
    assert ProcessSafeJournal(str(path)).drop_torn_tail() == 0


def test_a_broken_line_inside_the_journal_is_named_not_repaired(tmp_path: Path) -> None:
    run(tmp_path, n_trials=2, sampler="random")
    journal = tmp_path / "study.journal"
    lines = journal.read_bytes().split(b"\n")
    lines[3] = lines[3][:20]  # line 4 of the file: torn, but lines follow it
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(ValueError, match=rf"^journal {re.escape(str(journal))}: line 4 is "
                                         r"unreadable \(.*\) and lines follow it"):
        run(tmp_path, n_trials=3, sampler="random")


def test_an_unwritable_journal_folder_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError,
                       match=r"--storage .*file/x/study.journal: .*file is a file, not a folder"):
        run(tmp_path / "file" / "x", n_trials=2)


# -- RUNNING trials: stale or live --------------------------------------------------------------

def test_a_running_trial_is_failed_only_when_no_other_process_holds_the_study(
        tmp_path: Path) -> None:
    first = run(tmp_path, n_trials=3, sampler="random")
    zombie = optuna.load_study(study_name="study", storage=first.study._storage).ask()
    journal = tmp_path / "study.journal"
    with RunLock(journal) as live:  # as another tune process holds it while it runs
        live.share()
        messages: list[str] = []
        during = run(tmp_path, n_trials=5, sampler="random", on_recovered=messages.append)
        assert states(trials_of(journal))[zombie.number] == "RUNNING"  # maybe its trial
        assert any("left as they are" in m and f"[{zombie.number}]" in m for m in messages)
        assert (during.trials["state"] == "COMPLETE").sum() == 5
    messages = []
    after = run(tmp_path, n_trials=6, sampler="random", on_recovered=messages.append)
    failed = [t for t in trials_of(journal) if t.number == zombie.number]
    assert failed[0].state == TrialState.FAIL and failed[0].user_attrs[STALE_ATTR] is True
    assert messages == [f"1 trials left RUNNING by a process that is no longer alive "
                        f"([{zombie.number}]) marked FAIL; they do not count toward the "
                        "target and are run again"]
    assert (after.trials["state"] == "COMPLETE").sum() == 6 and after.held == 5


def test_a_killed_baseline_is_run_again(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    run(tmp_path, n_trials=1, sampler="random")
    data = journal.read_bytes()  # drop trial 0's last log (its COMPLETE): killed mid-trial
    journal.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 1])
    resumed = run(tmp_path, n_trials=3, sampler="random")
    frame = resumed.trials
    assert frame.select("number", "state", "baseline").rows() == [
        (0, "FAIL", True), (1, "COMPLETE", True), (2, "COMPLETE", False),
        (3, "COMPLETE", False)]


# -- --trials and --workers ------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--trials", "0", r"argument --trials: `>= 1` must hold, but got 0"),
    ("--trials", "-5", r"argument --trials: `>= 1` must hold, but got -5"),
    ("--workers", "0", r"argument --workers: `>= 1` must hold, but got 0"),
    ("--workers", "-1", r"argument --workers: `>= 1` must hold, but got -1"),
    ("--workers", "two", r"argument --workers: expected an integer >= 1, got 'two'"),
])
def test_trials_and_workers_below_one_are_bad_input(tmp_path: Path, capsys, flag: str,
                                                    value: str, message: str) -> None:
    definition = tmp_path / "gated.toml"
    definition.write_text(TUNE_DEFINITION)
    with pytest.raises(SystemExit) as exit_:
        main(["tune", str(definition), "--root", str(tmp_path), "--no-track", flag, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and re.search(message, err), err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()  # refused up front


# -- kill -9 of the parent mid-study ---------------------------------------------------------

def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    """A process that exists and is no zombie (a reparented child may wait to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def tune_command(root: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "msprlab.experiments.cli", "tune", str(root / "gated.toml"),
            "--root", str(root), "--no-track", "--storage", str(root / "study.journal"),
            *flags]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
def test_killing_the_parent_ends_its_workers_and_the_resume_reaches_the_target(
        tmp_path: Path) -> None:
    (tmp_path / "gated.toml").write_text(TUNE_DEFINITION)
    journal = tmp_path / "study.journal"
    parent = subprocess.Popen(tune_command(tmp_path, "--trials", "100000", "--workers", "2"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        # mid-study: both workers running, and trials beyond the baseline written
        wait_for(lambda: parent.poll() is None and len(children(parent.pid)) >= 3
                 and journal.exists() and journal.read_bytes().count(b'"op_code":4') >= 20,
                 timeout=120, what="two workers writing trials")
        workers = children(parent.pid)  # the two workers and multiprocessing's tracker
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not any(alive(p) for p in workers), timeout=5,
                 what=f"the workers {workers} to end with their parent")
    finally:  # on failure, no orphan may outlive the test
        for pid in workers or children(parent.pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
    size = journal.stat().st_size
    time.sleep(1.5)
    assert journal.stat().st_size == size  # nobody writes trials any more
    tear_last_line(journal, keep=10)  # as if a worker had been cut mid-append
    killed = trials_of_torn(journal)
    running = sorted(t.number for t in killed if t.state == TrialState.RUNNING)
    complete = sum(t.state == TrialState.COMPLETE for t in killed)
    assert running, "a run killed mid-study leaves RUNNING trials"
    target = complete + 4

    resumed = subprocess.run(tune_command(tmp_path, "--trials", str(target), "--workers", "2"),
                             capture_output=True, text=True, timeout=300)
    out = " ".join(resumed.stdout.split())
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"recovered: journal {journal}: its last line was cut off mid-write" in out
    assert out.count("cut off mid-write") == 1 and "gated.toml:" not in out
    assert (f"recovered: {len(running)} trials left RUNNING by a process that is no longer "
            f"alive ({running}) marked FAIL") in out
    after = trials_of(journal)
    numbers = [t.number for t in after]
    assert len(numbers) == len(set(numbers)) == numbers[-1] + 1
    assert sum(t.state == TrialState.COMPLETE for t in after) == target
    assert [t.number for t in after if t.state == TrialState.RUNNING] == []
    assert sorted(t.number for t in after if t.user_attrs.get(STALE_ATTR)) == running
    assert all(t.state == TrialState.FAIL for t in after if t.number in running)


def test_a_queued_trial_another_worker_started_is_left_to_it(tmp_path: Path) -> None:
    """Two workers list the same queued retry; the first starts it and so fills the target.
    The second's start is refused (False: not its trial), and the running trial is not
    failed or marked dropped (it was, under 4 processes on PostgreSQL: the first worker's
    trial then ended in UpdateFinishedTrialError)."""
    from optuna.trial import TrialState

    from msprlab.experiments.tune import DROPPED_ATTR
    from msprlab.experiments.tune.database import SharedRDB

    url = f"sqlite:///{tmp_path / 'study.db'}"
    first, second = (SharedRDB(url, target=2, heartbeat=(1, 2)) for _ in range(2))
    study = optuna.create_study(study_name="s", storage=first)
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.0))
    study.enqueue_trial({})
    study_id = first.get_study_id_from_name("s")
    (queued,) = first.get_all_trials(study_id, states=(TrialState.WAITING,))
    assert first.set_trial_state_values(queued._trial_id, TrialState.RUNNING)
    assert not second.set_trial_state_values(queued._trial_id, TrialState.RUNNING)
    trial = first.get_trial(queued._trial_id)
    assert trial.state == TrialState.RUNNING and DROPPED_ATTR not in trial.system_attrs


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_stale_trials_retry_is_queued_with_its_fail(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another worker starting a fresh trial right after the stale trial's FAIL finds the
    retry already queued and the target held: the retry keeps the dead worker's slot. (With
    Optuna's order, FAIL first and the retry after, the fresh trial took the slot and the
    retry was dropped: 2 of 4 two-process PostgreSQL runs.)"""
    from msprlab.experiments.tune.database import SharedRDB, TargetReached

    url = f"sqlite:///{tmp_path / 'study.db'}"
    dying, other = (SharedRDB(url, target=2, heartbeat=(1, 1)) for _ in range(2))
    study = optuna.create_study(study_name="s", storage=dying)
    study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, value=0.0, distributions={
        "x": optuna.distributions.FloatDistribution(0.0, 1.0)}))
    study_id = dying.get_study_id_from_name("s")
    stale = dying.create_new_trial(study_id)          # its worker dies before any beat
    dying.set_trial_param(stale, "x", 0.25, optuna.distributions.FloatDistribution(0.0, 1.0))
    time.sleep(1.2)                                   # older than the 1 s grace
    fresh: list[object] = []
    fail = dying.set_trial_state_values

    def then_a_fresh_trial(trial_id: int, state: TrialState, values: object = None) -> bool:
        done = fail(trial_id, state, values)  # type: ignore[arg-type]
        if state == TrialState.FAIL:
            try:
                fresh.append(other.create_new_trial(study_id))
            except TargetReached as exc:
                fresh.append(exc)
        return done
    monkeypatch.setattr(dying, "set_trial_state_values", then_a_fresh_trial)
    optuna.storages.fail_stale_trials(study)
    assert len(fresh) == 1 and isinstance(fresh[0], TargetReached)
    trials = dying.get_all_trials(study_id)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    retry = trials[2]
    assert retry.params == {"x": 0.25} and retry.system_attrs["failed_trial"] == 1
    assert retry.system_attrs["retry_history"] == [1]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_stale_trials_are_failed_under_the_setup_lock(tmp_path: Path) -> None:
    """A process's setup holds the study's lock while it fails stale trials, whose retries
    are queued under the same lock: entered again by the thread that holds it, not waited
    for (a second lock from another connection waited for itself until PostgreSQL ended
    the idle transaction)."""
    import threading

    from msprlab.experiments.tune.database import SharedRDB

    storage = SharedRDB(f"sqlite:///{tmp_path / 'study.db'}", target=3, heartbeat=(1, 1))
    study = optuna.create_study(study_name="s", storage=storage)
    study_id = storage.get_study_id_from_name("s")
    storage.create_new_trial(study_id)                # a worker dies before any beat
    time.sleep(1.2)
    done = threading.Event()

    def setup() -> None:
        with storage.locked("s"):
            optuna.storages.fail_stale_trials(study)
        done.set()
    threading.Thread(target=setup, daemon=True).start()
    assert done.wait(timeout=30), "failing stale trials under the setup lock hung"
    assert [t.state for t in storage.get_all_trials(study_id)] == [TrialState.FAIL,
                                                                   TrialState.WAITING]


def test_a_trial_failed_by_another_worker_is_recognised(tmp_path: Path) -> None:
    """What Optuna raises when another worker failed this process's trial while it ran (its
    heartbeat lapsed on a loaded machine): `_optimize` goes on with the next trial for this,
    and only for this (an objective's own error still ends the worker)."""
    from msprlab.experiments.tune.workers import failed_elsewhere

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage, direction="maximize")

    def failed_meanwhile(trial: optuna.Trial) -> float:  # as another worker's check does
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        return 0.5

    with pytest.raises(BaseException) as caught:
        study.optimize(failed_meanwhile, n_trials=1)
    assert failed_elsewhere(caught.value), repr(caught.value)

    def broken(trial: optuna.Trial) -> float:
        raise AssertionError("a bug of ours")

    with pytest.raises(AssertionError) as own:
        study.optimize(broken, n_trials=1)
    assert not failed_elsewhere(own.value)
