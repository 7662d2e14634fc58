"""One study past one machine (README, "Scaling out"): `msprlab tune` processes started
independently on one PostgreSQL study, one of them killed with -9 mid-trial; a process of
another definition refused; the MLflow server shared by two experiments at once.

Every test here starts its own servers (`conftest.postgres`, an `mlflow server` of its
own) on free loopback ports and stops them; all are marked `postgres` and skipped, saying
why, without PostgreSQL's programs or the postgres extra.

What holds with several workers, and is tested: exactly N COMPLETE trials, every trial
number once, none left RUNNING, every FAIL (a dead worker's trial) queued again with its
parameters and run, one baseline, trial 0, scoring as in a single-process study of the
same seed. What does not: which points TPE proposes after the baseline, and so the best
value, depend on which worker asks first and what it sees RUNNING, so several workers are
not deterministic; one process on a database is, trial for trial (tested against the
journal).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import Postgres, free_port
from optuna.trial import FrozenTrial, TrialState
from test_experiments import SMALL
from test_tune import NEW, base, scorer

from msprlab.experiments.cli import main
from msprlab.experiments.experiment_config import load_experiment
from msprlab.experiments.tune import (
    DROPPED_ATTR,
    WORKER_ATTR,
    Objective,
    SearchSpace,
    tune,
)

pytestmark = pytest.mark.postgres
_names = itertools.count()


def database(postgres: Postgres, stem: str) -> str:
    """A new database on the test server, created with `createdb`; its URL."""
    return postgres.createdb(f"{stem}_{os.getpid()}_{next(_names)}")


def study_trials(url: str, name: str) -> list[FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url.replace(
        "postgresql://", "postgresql+psycopg://")).get_trials(deepcopy=False)


def counts(trials: list[FrozenTrial]) -> dict[str, int]:
    return {s.name: sum(t.state == s for t in trials) for s in TrialState
            if any(t.state == s for t in trials)}


def in_process(storage: str, name: str = "study", n_trials: int = 10, **options):
    return tune(scorer(), base(), SearchSpace.unit(NEW), [Objective("ndcg@10")],
                n_trials=n_trials, study_name=name, storage=storage, **options)


# -- in this process ------------------------------------------------------------------------

def test_one_process_on_postgres_runs_the_journals_trials(postgres, tmp_path: Path) -> None:
    url = database(postgres, "same")
    on_db = in_process(url, n_trials=14, seed=5)
    on_journal = in_process(str(tmp_path / "s.journal"), n_trials=14, seed=5)
    columns = ["number", "state", "baseline", "ndcg@10", *NEW]
    assert on_db.trials.select(columns).equals(on_journal.trials.select(columns))
    assert on_db.storage == url and on_db.best_values == on_journal.best_values


def test_a_process_of_another_dataset_or_definition_is_refused(postgres) -> None:
    url = database(postgres, "identity")
    mine = {"dataset_digest": "d" * 64, "config_hash": "c" * 64}
    first = in_process(url, n_trials=3, identity=mine)
    assert {k: first.study.user_attrs[f"msprlab_{k}"] for k in mine} == mine
    explicit = url.replace("postgresql://", "postgresql+psycopg://")  # the driver spelled out
    in_process(explicit, n_trials=4, identity=mine)  # the same: joins
    other = {"dataset_digest": "d" * 64, "config_hash": "e" * 64}
    password = url.replace("msprlab@", "msprlab:hunter2@")
    with pytest.raises(ValueError) as refused:
        in_process(password, n_trials=8, identity=other)
    message = str(refused.value)
    assert f"dataset digest {'d' * 64} and config hash {'c' * 64}; this process has " \
           f"dataset digest {'d' * 64} and config hash {'e' * 64}" in message
    assert "hunter2" not in message and "msprlab:***@" in message
    assert counts(study_trials(url, "study")) == {"COMPLETE": 4}  # nothing run, nothing set


def test_a_trial_that_never_beat_is_failed_and_run_again(postgres) -> None:
    url = database(postgres, "nobeat")
    in_process(url, n_trials=3, heartbeat=(1, 2))
    study = optuna.load_study(study_name="study", storage=url.replace(
        "postgresql://", "postgresql+psycopg://"))
    orphan = study.ask()  # RUNNING, and no heartbeat: as a worker killed right after asking
    orphan.suggest_float("delta_personal", 0, 1)
    time.sleep(2.5)
    messages: list[str] = []
    result = in_process(url, n_trials=5, heartbeat=(1, 2), on_recovered=messages.append)
    assert messages == [f"1 trials whose worker sent no heartbeat for 2 s ([{orphan.number}]) "
                        "marked FAIL and queued again with their parameters; they do not count "
                        "toward the target"]
    trials = study_trials(url, "study")
    assert counts(trials) == {"COMPLETE": 5, "FAIL": 1}
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == orphan.number]
    assert retry.state == TrialState.COMPLETE
    assert retry.params["delta_personal"] == trials[orphan.number].params["delta_personal"]
    assert (result.held, result.added) == (3, 2)


# -- msprlab tune processes, started independently ------------------------------------------

# The small definition of test_experiments, with a heartbeat fast enough for a test: a
# killed worker's trial is failed and run again 3 s after its last beat.
DEFINITION = SMALL + "heartbeat = 1\nheartbeat_grace = 3\n"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A working folder whose runs/ holds the small experiment's store and replay cache
    (each process gets a copy, as each host has its own), and the single-process study of
    the same seed: one trial (the baseline), in single.journal."""
    root = tmp_path_factory.mktemp("prepared")
    (root / "small.toml").write_text(DEFINITION)
    assert main(["tune", str(root / "small.toml"), "--root", str(root), "--no-track",
                 "--trials", "1", "--storage", str(root / "single.journal")]) == 0
    return root


def tune_command(root: Path, storage: str, *flags: str, tracking: str | None = None
                 ) -> list[str]:
    """`msprlab tune` as README's "Scaling out" runs it on each host (not tracked, unless
    given a tracking URI)."""
    track = ["--tracking-uri", tracking] if tracking else ["--no-track"]
    return [sys.executable, "-m", "msprlab.experiments.cli", "tune", str(root / "small.toml"),
            "--root", str(root), *track, "--storage", storage, *flags]


def host(prepared: Path, folder: Path) -> Path:
    """A host's working folder: the definition and a copy of the prepared store."""
    folder.mkdir()
    shutil.copy(prepared / "small.toml", folder / "small.toml")
    shutil.copytree(prepared / "runs", folder / "runs",
                    ignore=shutil.ignore_patterns("*.journal*"))
    return folder


def workers_of(url: str) -> dict[str, int]:
    """"HOST:PID" -> how many trials it started, read from the database."""
    import psycopg
    with psycopg.connect(url) as connection:
        try:
            rows = connection.execute(
                "SELECT value_json, count(*) FROM trial_user_attributes WHERE key = %s "
                "GROUP BY value_json", (WORKER_ATTR,)).fetchall()
        except psycopg.errors.UndefinedTable:  # no process has created Optuna's tables yet
            return {}
    return {json.loads(value): n for value, n in rows}


def running_trials_of(url: str, worker: str, study: str | None = None,
                      states: tuple[str, ...] = ("RUNNING",)) -> list[int]:
    """The numbers of `worker`'s trials in these states (of `study`, or of any)."""
    import psycopg
    with psycopg.connect(url) as connection:
        try:
            rows = connection.execute(
                "SELECT t.number FROM trials t JOIN trial_user_attributes a USING (trial_id) "
                "JOIN studies s USING (study_id) WHERE t.state::text = ANY(%s) AND a.key = %s "
                "AND a.value_json = %s AND (%s::text IS NULL OR s.study_name = %s::text)",
                (list(states), WORKER_ATTR, json.dumps(worker), study, study)).fetchall()
        except psycopg.errors.UndefinedTable:  # no process has created Optuna's tables yet
            return []
    return [number for (number,) in rows]


def kill_mid_trial(process: subprocess.Popen, url: str, timeout: float = 60,
                   study: str | None = None) -> int:
    """`kill -9` `process` while it runs a trial (of `study`): stopped (SIGSTOP) until the
    database shows a RUNNING trial of its own, let go again when it shows none; returns the
    trial number."""
    worker = f"{socket.gethostname()}:{process.pid}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        os.kill(process.pid, signal.SIGSTOP)
        if running := running_trials_of(url, worker, study):
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            return running[0]
        os.kill(process.pid, signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError(f"{worker} was never caught running a trial")


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize(("processes", "workers", "target"), [(2, 2, 80), (4, 1, 120)])
def test_tune_processes_share_one_study_through_a_kill(postgres, prepared: Path,
                                                       tmp_path: Path, processes: int,
                                                       workers: int, target: int) -> None:
    """`processes` tune processes, the first with `workers` spawned workers, the others
    running trials themselves; the last one is killed mid-trial."""
    url = database(postgres, f"kill{processes}")
    roots = [host(prepared, tmp_path / f"host{k}") for k in range(processes)]
    started = time.monotonic()
    running = [subprocess.Popen(tune_command(root, url, "--trials", str(target),
                                             "--workers", str(workers if k == 0 else 1)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for k, root in enumerate(roots)]
    victim, survivors = running[-1], running[:-1]
    mine = f"{socket.gethostname()}:{victim.pid}"
    runners = processes - 1 + workers  # processes running trials: workers, or themselves
    try:
        # mid-study: every runner has started trials, the victim at least two
        wait_for(lambda: (len(seen := workers_of(url)) >= runners and seen.get(mine, 0) >= 2)
                 or any(p.poll() is not None for p in running),
                 timeout=120, what="every process running trials")
        assert all(p.poll() is None for p in running), "a process ended before the kill"
        killed = kill_mid_trial(victim, url)
        outputs = [p.communicate(timeout=240)[0] for p in survivors]
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()
    seconds = time.monotonic() - started
    for p, out in zip(survivors, outputs, strict=True):
        assert p.returncode == 0, out
        assert f"the study holds {target}: small in {url}" in " ".join(out.split()), out
    assert victim.returncode == -signal.SIGKILL

    trials = study_trials(url, "small")
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials)))          # no duplicate, no gap
    by_state = counts(trials)
    assert by_state["COMPLETE"] == target                        # exactly N: no overshoot
    assert set(by_state) <= {"COMPLETE", "FAIL"}                 # none RUNNING or WAITING
    failed = {t.number for t in trials if t.state == TrialState.FAIL}
    assert killed in failed
    retried = {t.system_attrs["failed_trial"]: t for t in trials if "failed_trial" in
               t.system_attrs and t.state == TrialState.COMPLETE}
    # The killed trial's FAIL and its retry's queueing are one step, so no fresh trial
    # takes the retry's slot (it did when the killed trial was the last one the others
    # waited for) and no retry is dropped.
    assert not [t.number for t in trials if DROPPED_ATTR in t.system_attrs]
    assert failed <= retried.keys()                                # each one run again
    for number in failed:  # with the parameters it had been given (if any, before the kill)
        assert retried[number].params.items() >= trials[number].params.items()
    assert len({t.user_attrs[WORKER_ATTR] for t in trials}) == runners  # every one took part
    baseline = [t for t in trials if t.user_attrs.get("msprlab_baseline")
                and t.state == TrialState.COMPLETE]
    single = optuna.load_study(study_name=next(iter(optuna.get_all_study_names(
        optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
            str(prepared / "single.journal")))))), storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(prepared / "single.journal"))))
    assert len(baseline) == 1 and baseline[0].value == single.trials[0].value
    assert baseline[0].params == single.trials[0].params
    print(f"{processes} processes ({runners} running trials), --trials {target}: "
          f"{by_state}, killed trial {killed}, "
          f"failed {sorted(failed)} retried as "
          f"{sorted(retried[n].number for n in failed)}, {seconds:.1f} s")


def test_a_tune_process_of_another_definition_is_refused(postgres, prepared: Path,
                                                         tmp_path: Path, capsys) -> None:
    url = database(postgres, "refused")
    first, other = host(prepared, tmp_path / "first"), host(prepared, tmp_path / "other")
    (other / "small.toml").write_text(DEFINITION.replace("bootstrap = 200", "bootstrap = 150"))
    assert main(tune_command(first, url, "--trials", "3")[3:]) == 0
    before = study_trials(url, "small")
    stored = optuna.load_study(study_name="small", storage=url.replace(
        "postgresql://", "postgresql+psycopg://")).user_attrs
    capsys.readouterr()
    code = main(tune_command(other, url, "--trials", "6")[3:])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 2, text
    theirs = load_experiment(other / "small.toml").digest()
    data, ours = stored["msprlab_dataset_digest"], stored["msprlab_config_hash"]
    assert ours == load_experiment(first / "small.toml").digest() != theirs
    assert (f"study 'small' in {url} was created from dataset digest {data} and config hash "
            f"{ours}; this process has dataset digest {data} and config hash {theirs}") in text
    assert "Traceback" not in text
    assert [(t.number, t.state) for t in study_trials(url, "small")] == \
        [(t.number, t.state) for t in before]  # refused before it ran a trial


# -- a configuration search shared by hosts --------------------------------------------------

# The small definition searching two settings beside the weights (issue 38): the weights-only
# study "small", then the configuration study "small-config", both on the database.
CONFIG_DEFINITION = DEFINITION + """config_trials = 24
points_per_state = 2
trials_per_point = 2

[tune.settings]
"context_graph.retrieval.expansion_depth" = [1, 3]
"mspr.feedback.boost_delta" = { low = 0.05, high = 0.25, step = 0.1 }
"""


@pytest.fixture(scope="module")
def prepared_config(tmp_path_factory) -> Path:
    """A working folder with the configuration definition's store and the replay cache of
    its shipped tables (no configuration table: each host builds those it needs)."""
    root = tmp_path_factory.mktemp("prepared-config")
    (root / "small.toml").write_text(CONFIG_DEFINITION)
    assert main(["ablate", str(root / "small.toml"), "--root", str(root), "--no-track"]) == 0
    return root


def test_tune_processes_share_a_configuration_search_through_a_kill(
        postgres, prepared_config: Path, tmp_path: Path) -> None:
    """Two hosts' `msprlab tune` on one database: the weights-only study, then the
    configuration study, each host building the tables its trials need; one killed -9
    while its configuration trials run (a round: several trials RUNNING at once)."""
    url, target = database(postgres, "config"), 24
    roots = [host(prepared_config, tmp_path / f"host{k}") for k in range(2)]
    cached = {p.name for p in (prepared_config / "runs").glob("*.cache/*") if p.is_dir()}
    running = [subprocess.Popen(tune_command(root, url, "--trials", "4", "--config-trials",
                                             str(target)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for root in roots]
    survivor, victim = running
    mine = f"{socket.gethostname()}:{victim.pid}"
    try:
        wait_for(lambda: len(running_trials_of(url, mine, "small-config",
                                               ("RUNNING", "COMPLETE"))) >= 2
                 or any(p.poll() is not None for p in running),
                 timeout=180, what="the victim running configuration trials")
        assert all(p.poll() is None for p in running), "a process ended before the kill"
        killed = kill_mid_trial(victim, url, timeout=120, study="small-config")
        out = survivor.communicate(timeout=400)[0]
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert survivor.returncode == 0, out
    text = " ".join(out.split())
    assert f"the study holds {target} trials: small-config in {url}" in text, out
    assert victim.returncode == -signal.SIGKILL
    trials = study_trials(url, "small-config")
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    by_state = counts(trials)
    assert by_state["COMPLETE"] == target                      # exactly N
    assert set(by_state) <= {"COMPLETE", "FAIL"}               # none RUNNING or WAITING
    failed = {t.number for t in trials if t.state == TrialState.FAIL}
    assert killed in failed
    retried = {t.system_attrs["failed_trial"]: t for t in trials if "failed_trial" in
               t.system_attrs and t.state == TrialState.COMPLETE}
    assert failed <= retried.keys()                              # each run again
    assert not [t.number for t in trials if DROPPED_ATTR in t.system_attrs]
    for number in failed:
        assert retried[number].params.items() >= trials[number].params.items()
    assert len({t.user_attrs[WORKER_ATTR] for t in trials}) == 2  # both took part
    # each host builds the configuration tables its trials need, in its own replay cache
    built = [len({p.name for p in (root / "runs").glob("*.cache/*") if p.is_dir()} - cached)
             for root in roots]
    assert built[0] > 0  # the survivor; the victim may have been killed mid-walk
    print(f"configuration search on two hosts, --config-trials {target}: {by_state}, "
          f"killed trial {killed}, failed {sorted(failed)}, tables built per host {built}")


# -- one MLflow tracking server --------------------------------------------------------------

@pytest.fixture
def mlflow_server(postgres, tmp_path: Path):
    """`mlflow server` on a PostgreSQL backend store and a local artifacts folder, as README's
    "Scaling out" starts it, on a free loopback port; yields (its URL, the artifacts folder).
    Skipped, with its log, if it does not answer within two minutes."""
    backend = database(postgres, "mlflow").replace("postgresql://", "postgresql+psycopg://")
    artifacts, log = tmp_path / "mlartifacts", tmp_path / "mlflow-server.log"
    port = free_port()
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
             "--artifacts-destination", str(artifacts), "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(url + "/health"):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"mlflow server did not start ({server.poll()}): "
                            f"{log.read_text()[-1500:]}")
            time.sleep(0.25)
        yield url, artifacts
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def _answers(url: str) -> bool:
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_two_tune_processes_log_to_one_mlflow_server(postgres, mlflow_server, prepared: Path,
                                                     tmp_path: Path) -> None:
    import mlflow
    uri, artifacts = mlflow_server
    study = database(postgres, "tracked")
    roots = [host(prepared, tmp_path / f"host{k}") for k in range(2)]
    started = time.monotonic()
    running = [subprocess.Popen(tune_command(root, study, "--trials", "20", tracking=uri),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for root in roots]
    try:
        outputs = [p.communicate(timeout=300)[0] for p in running]
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(running, outputs, strict=True):
        assert p.returncode == 0, out
        assert f"MLflow: experiment 'msprlab' on the server {uri}" in " ".join(out.split())
    seconds = time.monotonic() - started

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["msprlab"], output_format="list")
    assert mlflow.search_runs(experiment_ids=["0"], output_format="list") == []  # none astray
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.info.run_name for r in parents) == ["tune:small", "tune:small"]
    names = {"study", "test:tuned", "test:off", "test:on-zero"}
    provenance = ("msprlab.dataset_digest", "msprlab.config_hash", "msprlab.git_commit",
                  "msprlab.experiment", "msprlab.command")
    for parent in parents:
        tags = parent.data.tags
        assert tags["msprlab.command"] == "tune" and tags["msprlab.experiment"] == "small"
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert names <= {r.info.run_name for r in children}
        for child in children:  # every child run carries the parent's provenance
            assert {k: child.data.tags[k] for k in provenance} == {k: tags[k] for k in provenance}
        (study_run,) = [r for r in children if r.info.run_name == "study"]
        assert study_run.data.tags["msprlab.study"] == "small"
        assert study_run.data.params["storage"] == study
        assert "best/ndcg_at_10" in study_run.data.metrics
        assert "headline/tuned/ndcg_at_10" in parent.data.metrics
        # the bundle went to the server's artifacts folder, through the server
        listed = {a.path for a in mlflow.artifacts.list_artifacts(run_id=parent.info.run_id)}
        assert "provenance.json" in listed
    assert len({p.data.tags["msprlab.dataset_digest"] for p in parents}) == 1
    assert any(artifacts.rglob("provenance.json"))
    print(f"two tracked tune processes: {len(runs)} runs, {seconds:.1f} s")
