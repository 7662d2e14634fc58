"""Optuna search over the weights: baseline first, seeded, resumable, parallel, clear errors.

One small generated log (3 users, 80 searches) replayed once; every study runs on its
scorer with a journal file in the test's temporary folder.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import pickle
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np
import optuna
import polars as pl
import pytest
from optuna.storages.journal import JournalFileBackend

from msprlab.datasets.clicks import PositionBasedModel
from msprlab.datasets.simulate import simulate_log
from msprlab.datasets.synthetic import SyntheticSpec, generate_synthetic
from msprlab.engine import config_from_dict
from msprlab.engine.batch import WEIGHTS
from msprlab.experiments.cli.replay import all_signals_config
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Arm, Scorer, arm_of, weights_of
from msprlab.experiments.replay import replay
from msprlab.experiments.tune import (
    FIXED_ATTR,
    MIN_IMPORTANCE_TRIALS,
    SAMPLER_ATTR,
    SETTINGS_ATTR,
    SWITCHES_ATTR,
    Objective,
    ProcessSafeJournal,
    SearchSpace,
    TrialRecord,
    best_config_snippet,
    fixed_weights,
    search_space,
    trials_message,
    tune,
)
from msprlab.experiments.tune import result as tune_result
from msprlab.experiments.tune import space as tune_space
from msprlab.experiments.tune import workers as tune_workers

NEW = ("epsilon_frequency", "delta_personal", "zeta_success")


@pytest.fixture
def journal_dir() -> Iterator[Path]:
    """A fresh folder for the journals, in memory (tmpfs) where there is one: every journal
    write is fsync'ed, which costs milliseconds on a busy disk and tests nothing here."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="test-tune-",
                                     dir=shm if shm.is_dir() else None) as folder:
        yield Path(folder)


@cache
def scorer() -> Scorer:
    spec = SyntheticSpec(n_users=3, memories_per_user=20, queries_per_user=4, span_days=3.0)
    ds, truth = generate_synthetic(spec, seed=1)
    log = simulate_log(ds, logging_config=all_signals_config(),
                       click_model=PositionBasedModel(), n_searches=80, seed=1,
                       mean_gap_seconds=900.0, query_vectors=truth.query_vectors)
    table = replay(log, all_signals_config())
    return Scorer.of(table, [parse_metric("ndcg@10"), parse_metric("recall@10")])


def base() -> Arm:
    return arm_of("base", all_signals_config())


def run(journal_dir: Path, name: str = "study", n_trials: int = 8, **options):
    options.setdefault("space", SearchSpace.unit(NEW))
    options.setdefault("objectives", [Objective("ndcg@10")])
    return tune(scorer(), base(), options.pop("space"), options.pop("objectives"),
                n_trials=n_trials, study_name=name, storage=journal_dir / f"{name}.journal",
                **options)


def test_the_baseline_is_trial_zero_and_scores_as_the_base_arm(journal_dir: Path) -> None:
    seen: list[TrialRecord] = []
    counts: list[tuple[int, int]] = []
    result = run(journal_dir, on_trial=seen.append, progress=lambda d, t: counts.append((d, t)))
    first = result.trials.row(0, named=True)
    assert first["number"] == 0 and first["baseline"] and first["state"] == "COMPLETE"
    assert tuple(first[name] for name in WEIGHTS) == base().weights
    assert first["ndcg@10"] == pytest.approx(scorer().mean(base(), "ndcg@10"), abs=1e-12)
    assert result.trials["baseline"].sum() == 1
    assert [r.number for r in seen] == list(range(8)) and seen[0].baseline
    assert counts == [(i, 8) for i in range(1, 9)]
    # unsearched weights keep the base arm's values in every trial
    assert (result.trials.select(WEIGHTS[:3]).unique().rows() == [base().weights[:3]])
    best = result.best[0]
    assert result.best_values[0][0] == pytest.approx(scorer().mean(best, "ndcg@10"), abs=1e-12)
    assert result.best_values[0][0] == result.trials["ndcg@10"].max()


def test_same_seed_same_trials_and_best_weights(journal_dir: Path) -> None:
    a = run(journal_dir, "a", n_trials=14, seed=3)
    b = run(journal_dir, "b", n_trials=14, seed=3)
    c = run(journal_dir, "c", n_trials=14, seed=4)
    columns = ["number", "state", "ndcg@10", *WEIGHTS]
    assert a.trials.select(columns).equals(b.trials.select(columns))
    assert a.best[0].weights == b.best[0].weights
    assert not a.trials.select(columns).equals(c.trials.select(columns))


def test_resume_runs_only_the_missing_trials_and_keeps_one_baseline(journal_dir: Path) -> None:
    first = run(journal_dir, n_trials=5, sampler="random")
    # a process killed mid-trial leaves a RUNNING trial in the journal (no tune process
    # holds the study now: the resume fails it and runs one more, test_tune_faults.py)
    study = optuna.load_study(study_name="study", storage=first.study._storage)
    zombie = study.ask()
    resumed = run(journal_dir, n_trials=10, sampler="random")
    frame = resumed.trials
    assert frame["number"].to_list() == list(range(11))  # 5 is the zombie
    assert frame.filter(pl.col("state") == "FAIL")["number"].to_list() == [zombie.number]
    assert (frame["state"] == "COMPLETE").sum() == 10 and resumed.added == 5
    assert frame["baseline"].sum() == 1 and frame.filter(pl.col("baseline"))["number"][0] == 0
    assert frame.head(5).equals(first.trials)
    # the resumed sampler does not replay the first call's proposals
    assert not frame.slice(6, 4).select(NEW).equals(first.trials.slice(1, 4).select(NEW))
    assert any(f"[{zombie.number}]" in note and "RUNNING" in note for note in resumed.recovered)
    again = run(journal_dir, n_trials=10, sampler="random")
    assert again.trials.equals(frame)


def test_resuming_with_other_settings_is_refused(journal_dir: Path) -> None:
    run(journal_dir, n_trials=2)
    with pytest.raises(ValueError, match=r"created for other settings \(space: .*pick another"):
        run(journal_dir, n_trials=3, space=SearchSpace.unit(("zeta_success",)))


def test_two_processes_share_one_journal(journal_dir: Path) -> None:
    seen: list[int] = []
    result = run(journal_dir, n_trials=24, workers=2, on_trial=lambda r: seen.append(r.number))
    assert result.trials.height == 24 and sorted(seen) == list(range(24))
    assert result.trials["baseline"].sum() == 1
    assert (result.trials["state"] == "COMPLETE").all()
    reloaded = optuna.load_study(study_name="study", storage=result.study._storage)
    assert len(reloaded.trials) == 24


def _append_many(path: str, tag: int, n: int) -> None:
    """In a spawned process: `n` appends of one log each."""
    journal = ProcessSafeJournal(path)
    for i in range(n):
        journal.append_logs([{"op_code": 2, "tag": tag, "i": i, "pad": "x" * 300}])


def test_journal_appends_from_two_processes_never_interleave(journal_dir: Path) -> None:
    path = str(journal_dir / "j.journal")
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_append_many, args=(path, tag, 400)) for tag in (1, 2)]
    for child in children:
        child.start()
    _append_many(path, 0, 400)
    for child in children:
        child.join(timeout=120)
        assert child.exitcode == 0
    logs = list(ProcessSafeJournal(path).read_logs(0))
    assert len(logs) == 1200
    for tag in (0, 1, 2):  # every line whole, each process's in its order
        assert [log["i"] for log in logs if log["tag"] == tag] == list(range(400))


def test_a_killed_process_releases_the_journal_lock(journal_dir: Path) -> None:
    path = journal_dir / "j.journal"
    path.touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        journal = ProcessSafeJournal(str(path))
        writer = threading.Thread(target=journal.append_logs, args=([{"op_code": 2}],))
        writer.start()
        writer.join(timeout=0.5)
        assert writer.is_alive()  # waits for the lock a writer in another process holds
        holder.kill()
        writer.join(timeout=10)
        assert not writer.is_alive()  # the kernel dropped the killed process's lock
    finally:
        holder.kill()
        holder.wait()
    assert list(ProcessSafeJournal(str(path)).read_logs(0)) == [{"op_code": 2}]


def test_journal_reads_as_optunas_backend(journal_dir: Path) -> None:
    path = journal_dir / "j.journal"
    ours = ProcessSafeJournal(str(path))
    ours.append_logs([{"op_code": 2, "i": i} for i in range(5)])
    with open(path, "ab") as f:
        f.write(b'{"op_code": 2, "i": 5')  # a line another process is still appending
    theirs = JournalFileBackend(str(path))
    for start in (0, 3, 5, 9):
        assert list(ours.read_logs(start)) == list(theirs.read_logs(start))
    assert [log["i"] for log in ours.read_logs(3)] == [3, 4]
    with open(path, "ab") as f:
        f.write(b"}\n")
    assert [log["i"] for log in ours.read_logs(3)] == [3, 4, 5]
    copy = pickle.loads(pickle.dumps(ours))  # reopens its files
    copy.append_logs([{"op_code": 2, "i": 6}])
    assert [log["i"] for log in ours.read_logs(5)] == [5, 6]
    assert list(ours.read_logs(0)) == list(JournalFileBackend(str(path)).read_logs(0))


def test_the_trial_callback_stops_once_the_study_holds_the_target() -> None:
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(2):  # as if another process had finished two trials
        study.tell(study.ask(), 0.5)
    seen: list[int] = []
    reads: list[int] = []
    get_trials = study.get_trials
    study.get_trials = lambda *a, **k: reads.append(1) or get_trials(*a, **k)  # type: ignore
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=10,
                   callbacks=[tune_workers._AfterTrial(5, lambda s, t: seen.append(t.number))])
    assert len(reads) == 1  # the trials are read only once their numbers reach the target
    assert seen == [2, 3, 4] and len(get_trials()) == 5


def test_random_sampler_and_wilcoxon_pruner(journal_dir: Path) -> None:
    random = run(journal_dir, "random", n_trials=6, sampler="random")
    assert random.trials.height == 6
    pruned = run(journal_dir, "wilcoxon", n_trials=12, pruner="wilcoxon")
    assert set(pruned.trials["state"]) == {"COMPLETE", "PRUNED"}  # seeded: both happen
    assert pruned.trials.height == 12
    assert pruned.trials.filter(pl.col("state") == "PRUNED")["ndcg@10"].is_null().all()
    # trial 0 reported every step; step k is the mean of block k of the covered searches
    steps = pruned.study.trials[0].intermediate_values
    covered = int((~np.isnan(scorer().values(base())["ndcg@10"])).sum())
    sizes = [b.size for b in np.array_split(np.arange(covered), tune_space.WILCOXON_STEPS)]
    assert sorted(steps) == list(range(tune_space.WILCOXON_STEPS))
    weighted = sum(steps[k] * size for k, size in enumerate(sizes)) / covered
    assert weighted == pytest.approx(pruned.trials["ndcg@10"][0], abs=1e-12)
    for trial in pruned.study.trials:  # pruned at a check, after every PRUNE_EVERY steps
        if trial.state == optuna.trial.TrialState.PRUNED:
            assert len(trial.intermediate_values) % tune_space.PRUNE_EVERY == 0


def test_cmaes_works_or_names_the_package_to_install(journal_dir: Path) -> None:
    if importlib.util.find_spec("cmaes") is None:
        with pytest.raises(ImportError, match="pip install cmaes"):
            run(journal_dir, sampler="cmaes")
    else:
        assert run(journal_dir, n_trials=6, sampler="cmaes").trials.height == 6


def test_two_objectives_give_a_pareto_front(journal_dir: Path) -> None:
    objectives = [Objective("ndcg@10"), Objective("recall@10", intent="FACTUAL")]
    result = run(journal_dir, n_trials=10, objectives=objectives, sampler="random")
    labels = ["ndcg@10", "recall@10/intent/FACTUAL"]
    assert set(labels) <= set(result.trials.columns)
    points = result.trials.select(labels).rows()
    front = set(result.best_values)
    assert front and front <= set(points)
    for p in front:  # nothing dominates a front point
        assert not any(all(q[i] >= p[i] for i in range(2)) and q != p for q in points)
    for arm, values in zip(result.best, result.best_values, strict=True):
        assert scorer().mean(arm, "ndcg@10") == pytest.approx(values[0], abs=1e-12)


def test_importance_needs_enough_trials(journal_dir: Path, monkeypatch) -> None:
    few = run(journal_dir, "few", n_trials=5, sampler="random")
    assert few.importance == {}
    assert f"5 completed trials, PED-ANOVA needs at least {MIN_IMPORTANCE_TRIALS}" in few.notes[0]
    monkeypatch.setattr(tune_result, "MIN_IMPORTANCE_TRIALS", 12)  # fewer trials, same path
    enough = run(journal_dir, "enough", n_trials=12, sampler="random")
    shares = enough.importance["ndcg@10"]
    assert set(shares) == set(NEW) and sum(shares.values()) == pytest.approx(1.0)
    two = run(journal_dir, "two", n_trials=12, sampler="random",
              objectives=[Objective("ndcg@10"), Objective("recall@10")])
    assert set(two.importance) == {"ndcg@10", "recall@10"}


@pytest.mark.parametrize(("make", "message"), [
    (lambda: SearchSpace({}), "name at least one weight"),
    (lambda: SearchSpace({"alpha": (0.0, 1.0)}), r"unknown weights \['alpha'\]; the weights"),
    (lambda: SearchSpace({"zeta_success": (0.5, 0.5)}), r"`0 <= low < high <= 1` must hold "
                                                        r"for zeta_success, but got \(0.5, 0.5\)"),
    (lambda: SearchSpace({"zeta_success": (0.0, 2.0)}), r"but got \(0.0, 2.0\)"),
    (lambda: SearchSpace({"zeta_success": 1.0}), r"a \(low, high\) pair of numbers, got 1.0"),
    (lambda: SearchSpace({"alpha_dense": (0, 1), "zeta_success": (0, 1)},
                         fixed={"zeta_success": "mspr.success off"}),
     "zeta_success both searched and fixed at 0"),
    (lambda: SearchSpace({"alpha_dense": (0, 1)}, fixed={"zeta": "off"}),
     r"unknown fixed weights \['zeta'\]"),
    (lambda: search_space({"zeta_success": (0, 1)}, config_from_dict({})),
     r"every weight in the search space is fixed at 0 \(zeta_success \(mspr off\)\)"),
    (lambda: Objective("ndcg@ten"), "metric"),
    (lambda: Objective("ndcg@10", intent="factual"), "intent must be one of FACTUAL"),
])
def test_bad_space_and_objective(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"objectives": [Objective("mrr")]}, ValueError, r"needs the scorer to compute mrr, but "
                                                     r"it computes ndcg@10, recall@10"),
    ({"objectives": []}, ValueError, "at least one Objective"),
    ({"objectives": [Objective("ndcg@10"), Objective("ndcg@10")]}, ValueError, "must differ"),
    ({"objectives": [Objective("ndcg@10"), Objective("recall@10")], "pruner": "wilcoxon"},
     ValueError, "pruner='wilcoxon' handles a single objective"),
    ({"space": SearchSpace({"alpha_dense": (0.6, 1.0)})}, ValueError,
     r"base arm's alpha_dense = 0.55 lies outside its searched range \(0.6, 1.0\)"),
    ({"n_trials": 0}, ValueError, r"`n_trials >= 1` must hold, but got 0"),
    ({"workers": 0}, ValueError, r"`workers >= 1` must hold"),
    ({"sampler": "grid"}, ValueError, "sampler must be one of tpe, cmaes, random"),
])
def test_bad_tune_arguments(journal_dir: Path, options, error, message) -> None:
    with pytest.raises(error, match=message):
        run(journal_dir, **options)


def test_an_objective_must_cover_some_search(journal_dir: Path) -> None:
    table = scorer().table
    factual = Scorer.of(table.subset((table.searches["intent_label"] == "FACTUAL").to_numpy()),
                        scorer().metrics)
    with pytest.raises(ValueError, match=r"'ndcg@10/intent/EXPLORATORY' covers no train search "
                                         r"with a relevant memory; .* \{'FACTUAL': \d+\}"):
        tune(factual, base(), SearchSpace.unit(NEW), [Objective("ndcg@10", intent="EXPLORATORY")],
             n_trials=2, study_name="x", storage=journal_dir / "x.journal")


def test_objective_labels_and_keys() -> None:
    assert Objective("NDCG@10").label() == "ndcg@10"
    assert Objective("ndcg@10", intent="FACTUAL").label() == "ndcg@10/intent/FACTUAL"
    assert Objective("ndcg@10", intent="FACTUAL").key() == "ndcg_at_10/intent/FACTUAL"
    assert list(SearchSpace({"zeta_success": (0, 1), "alpha_dense": (0, 0.5)}).ranges) == [
        "alpha_dense", "zeta_success"]


@pytest.mark.parametrize(("intent", "roles"), [(True, False), (False, True), (False, False)])
def test_config_snippet_round_trips(intent: bool, roles: bool) -> None:
    config = config_from_dict({**all_signals_config_dict(), "mspr": {
        **all_signals_config_dict()["mspr"], "role": {"enabled": True, "hard_filter": False}}})
    arm = Arm("tuned", (0.5, 0.125, 0.3, 0.7, 0.25, 1.0), intent=intent, roles=roles)
    snippet = best_config_snippet(config, arm)
    assert set(snippet) == {"context_graph", "mspr"}
    assert snippet["context_graph"]["retrieval"] == dict(zip(WEIGHTS, arm.weights, strict=True))
    back = config_from_dict(snippet)
    assert weights_of(back) == arm.weights
    assert arm_of("tuned", back) == arm
    assert back.mspr.success.enabled and back.mspr.feedback.enabled
    assert back.context_graph_enabled


def all_signals_config_dict() -> dict:
    from msprlab.experiments.cli.replay import ALL_SIGNALS
    return ALL_SIGNALS


# -- weights whose signal is off -----------------------------------------------------------

def _signals(**switches: bool) -> dict:
    """The all-signals config dict with some MSPR blocks (or MSPR itself) switched."""
    raw = all_signals_config_dict()
    mspr = {**raw["mspr"], "enabled": switches.pop("mspr", True)}
    for block, on in switches.items():
        mspr[block] = {**mspr[block], "enabled": on}
    return {**raw, "mspr": mspr}


@pytest.mark.parametrize(("switches", "fixed"), [
    ({}, {}),
    ({"feedback": False}, {"delta_personal": "mspr.feedback off"}),
    ({"frequency": False, "success": False},
     {"epsilon_frequency": "mspr.frequency off", "zeta_success": "mspr.success off"}),
    # the master switch: no providers and no access counting, whatever the blocks say
    ({"mspr": False}, dict.fromkeys(NEW, "mspr off")),
])
def test_fixed_weights_follow_the_switches_each_term_needs(switches, fixed) -> None:
    found = fixed_weights(config_from_dict(_signals(**switches)))
    assert found == fixed and list(found) == [w for w in WEIGHTS if w in fixed]


def test_weights_whose_signal_is_off_are_never_searched(journal_dir: Path) -> None:
    config = config_from_dict(_signals(frequency=False, success=False))
    space = search_space(dict.fromkeys(WEIGHTS, (0.0, 1.0)), config)
    assert list(space.ranges) == ["alpha_dense", "beta_bm25", "gamma_graph", "delta_personal"]
    # a base arm with a value there is zeroed too: the term does not exist in the library
    start = Arm("base", (0.55, 0.15, 0.3, 0.2, 0.0, 0.4), intent=True)
    result = tune(scorer(), start, space, [Objective("ndcg@10")], n_trials=10,
                  study_name="gated", storage=journal_dir / "gated.journal", sampler="random")
    note = "fixed at 0: epsilon_frequency (mspr.frequency off), zeta_success (mspr.success off)"
    assert result.notes[0] == note
    assert result.study.user_attrs[FIXED_ATTR] == note
    assert result.study.user_attrs[SETTINGS_ATTR]["fixed"] == {
        "epsilon_frequency": "mspr.frequency off", "zeta_success": "mspr.success off"}
    for trial in result.study.trials:
        assert set(trial.params) == set(space.ranges)
    assert (result.trials.select("epsilon_frequency", "zeta_success") == 0.0).to_numpy().all()
    assert result.trials["delta_personal"].n_unique() > 1  # the others are searched
    snippet = best_config_snippet(config, result.best[0])["context_graph"]["retrieval"]
    assert snippet["zeta_success"] == 0.0 and snippet["epsilon_frequency"] == 0.0
    # resuming the same study with the weights searched again is another study
    with pytest.raises(ValueError, match=r"created for other settings \(space: .*fixed: "):
        tune(scorer(), start, SearchSpace.unit(WEIGHTS), [Objective("ndcg@10")],
             n_trials=12, study_name="gated", storage=journal_dir / "gated.journal",
             sampler="random")


# -- --trials: a target total ---------------------------------------------------------------

def test_trials_message() -> None:
    assert trials_message(300, 300) == ("0 new trials: the study already holds 300 (of 300 "
                                        "requested); --trials 400 adds 100")
    assert trials_message(320, 300).startswith("0 new trials: the study already holds 320 "
                                               "(of 300 requested)")
    assert trials_message(180, 300) == "adding 120 trials to the study's 180 (target 300)"
    assert trials_message(0, 8) == "adding 8 trials to the study's 0 (target 8)"


def test_n_trials_is_the_studys_target_total(journal_dir: Path) -> None:
    starts: list[tuple[int, int]] = []
    first = run(journal_dir, n_trials=5, sampler="random", on_start=lambda *a: starts.append(a))
    assert (first.held, first.added) == (0, 5)
    again = run(journal_dir, n_trials=5, sampler="random", on_start=lambda *a: starts.append(a))
    assert (again.held, again.added, again.trials.height) == (5, 0, 5)
    more = run(journal_dir, n_trials=8, sampler="random", on_start=lambda *a: starts.append(a))
    assert (more.held, more.added, more.trials.height) == (5, 3, 8)
    assert starts == [(0, 5), (5, 5), (5, 8)]


# -- the sampler is part of the study ---------------------------------------------------------

def test_resuming_with_another_sampler_needs_the_switch(journal_dir: Path) -> None:
    first = run(journal_dir, n_trials=4, sampler="tpe", seed=2)
    assert first.study.user_attrs[SAMPLER_ATTR] == {"name": "tpe", "seed": 2}
    with pytest.raises(ValueError, match=r"runs with sampler tpe \(seed 2\), not random "
                                         r"\(seed 2\); .*--sampler tpe.*--switch-sampler"):
        run(journal_dir, n_trials=6, sampler="random", seed=2)
    with pytest.raises(ValueError, match=r"not tpe \(seed 3\)"):  # the seed is part of it
        run(journal_dir, n_trials=6, sampler="tpe", seed=3)
    switched = run(journal_dir, n_trials=7, sampler="random", seed=2, switch_sampler=True)
    assert switched.trials["sampler"].to_list() == ["tpe"] * 4 + ["random"] * 3
    assert [t.user_attrs[SAMPLER_ATTR] for t in switched.study.trials] == \
        ["tpe"] * 4 + ["random"] * 3
    assert switched.study.user_attrs[SWITCHES_ATTR] == [
        {"from": {"name": "tpe", "seed": 2}, "to": {"name": "random", "seed": 2},
         "after_trials": 4}]
    assert any("sampler switched from tpe (seed 2) to random (seed 2) after 4" in note
               for note in switched.notes)
    # the study now runs with random: resuming with it needs no switch, with tpe it does
    assert run(journal_dir, n_trials=8, sampler="random", seed=2).trials["sampler"][-1] == \
        "random"
    with pytest.raises(ValueError, match="runs with sampler random"):
        run(journal_dir, n_trials=9, sampler="tpe", seed=2)


def test_a_study_from_before_samplers_were_stored_resumes(journal_dir: Path) -> None:
    first = run(journal_dir, n_trials=3, sampler="random")
    storage = first.study._storage
    study = optuna.load_study(study_name="study", storage=storage)
    study.set_user_attr(SAMPLER_ATTR, None)  # as an older study: nothing recorded
    resumed = run(journal_dir, n_trials=4, sampler="tpe")
    assert resumed.study.user_attrs[SAMPLER_ATTR] == {"name": "tpe", "seed": 0}
    assert any("first 3 trials recorded no sampler" in note for note in resumed.notes)


# -- the library snippet ---------------------------------------------------------------------

def _experiment_dict() -> dict:
    """A library config with many non-default ranking settings, and two corrections on."""
    return {
        "context_graph": {
            "enabled": True,
            "retrieval": {"seed_top_k": 4, "expansion_depth": 3, "max_candidates": 30,
                          "edge_weight_floor": 0.2, "algorithm": "ppr", "ppr_damping": 0.7,
                          "ppr_max_iter": 120, "ppr_tolerance": 1e-8, "alpha_dense": 0.4},
            "decay": {"enabled": False, "half_life_days": 7.5, "min_edge_weight": 0.01,
                      "min_node_relevance": 0.05, "tick_on_read": False},
            "edges": {"enable_temporal_next": False, "topic_top_k": 3,
                      "topic_min_similarity": 0.6, "reply_to_window_seconds": 600}},
        "mspr": {"enabled": True,
                 "intent": {"enabled": True, "cache_size": 0, "enable_regex_fastpath": False},
                 "feedback": {"enabled": True, "boost_delta": 0.2, "penalty_delta": 0.05,
                              "max_boost_per_memory": 0.0, "pin_floor_on_boost": False},
                 "frequency": {"enabled": True},
                 "role": {"enabled": True, "hard_filter": False},
                 "success": {"enabled": True, "min_sample_size": 5}},
        "msprlab": {"corrections": {"ppr_undirected": True, "strict_role_isolation": True}},
    }


def test_snippet_carries_every_non_default_ranking_setting() -> None:
    from dataclasses import fields, replace

    from msprlab.engine.config import Corrections, EngineConfig
    from msprlab.experiments.tune import snippet_notes, tuned_config
    config = config_from_dict(_experiment_dict())
    arm = Arm("tuned", (0.5, 0.125, 0.3, 0.7, 0.25, 1.0), intent=False, roles=True)
    snippet = best_config_snippet(config, arm)
    assert "msprlab" not in snippet  # msprlab's corrections are not library settings
    back = config_from_dict(snippet)
    assert back == replace(tuned_config(config, arm), corrections=Corrections())
    # what the arm changes, and nothing else
    assert weights_of(back) == arm.weights and arm_of("tuned", back) == arm
    assert replace(back, retrieval=config.retrieval, mspr=replace(
        back.mspr, intent=config.mspr.intent)) == replace(config, corrections=Corrections())
    # only the switches and the weights are written at their default values
    retrieval = snippet["context_graph"]["retrieval"]
    assert retrieval["ppr_damping"] == 0.7 and "enabled" not in retrieval
    assert snippet["mspr"]["frequency"] == {"enabled": True}
    assert snippet["mspr"]["intent"] == {"enabled": False, "cache_size": 0,
                                         "enable_regex_fastpath": False}
    assert "strategy" not in snippet["mspr"]["intent"]
    # the library defaults: only the switches and the weights
    plain = best_config_snippet(EngineConfig(), Arm("a", (0.55, 0.15, 0.3, 0, 0, 0)))
    assert plain == {"context_graph": {"enabled": True, "retrieval": dict(zip(
        WEIGHTS, (0.55, 0.15, 0.3, 0.0, 0.0, 0.0), strict=True))},
        "mspr": {"enabled": False, **{block: {"enabled": False} for block in (
            "intent", "feedback", "frequency", "role", "success")}}}
    notes = snippet_notes(config)
    assert len(notes) == 2 and "corrections.strict_role_isolation is on" in notes[0]
    assert "corrections.ppr_undirected is on" in notes[1] and "quirk 27" in notes[1]
    every = replace(config, corrections=Corrections(**{
        f.name: True for f in fields(Corrections)}))
    assert len(snippet_notes(every)) == len(fields(Corrections))  # each one named
    assert snippet_notes(config_from_dict({})) == ()


# -- msprlab tune ----------------------------------------------------------------------------

TUNE_DEFINITION = """
name = "gated"
seed = 3

[dataset]
source = "synthetic"
store = "runs/gated.duckdb"
searches = 240
users = 3
memories_per_user = 20
queries_per_user = 4

[split]
test_fraction = 0.4

[engine.context_graph]
enabled = true

[engine.mspr]
enabled = true
feedback = { enabled = true }
success = { enabled = false }
frequency = { enabled = false }

[metrics]
names = ["ndcg@10", "mrr"]
min_support = 5
bootstrap = 200

[tune]
trials = 6
sampler = "random"
"""


def test_the_tune_command(tmp_path: Path, capsys) -> None:
    import json

    from msprlab.experiments.cli import main
    definition = tmp_path / "gated.toml"
    definition.write_text(TUNE_DEFINITION)

    def tune_cli(*flags: str) -> tuple[int, str]:
        code = main(["tune", str(definition), "--root", str(tmp_path), "--no-track", *flags])
        return code, " ".join(capsys.readouterr().out.split())  # unwrapped

    code, out = tune_cli()
    assert code == 0, out
    assert "adding 6 trials to the study's 0 (target 6)" in out
    assert "note: fixed at 0: epsilon_frequency (mspr.frequency off), zeta_success " \
           "(mspr.success off)" in out
    bundle = max((tmp_path / "results").iterdir())
    snippet = json.loads((bundle / "best_weights.contextkit.json").read_text())
    assert snippet["context_graph"]["retrieval"]["zeta_success"] == 0.0
    assert snippet["context_graph"]["retrieval"]["epsilon_frequency"] == 0.0
    summary = json.loads((bundle / "study" / "summary.json").read_text())
    assert summary["fixed"] == {"epsilon_frequency": "mspr.frequency off",
                                "zeta_success": "mspr.success off"}
    assert (summary["sampler"], summary["trials_added"]) == ("random", 6)
    trials = pl.read_parquet(bundle / "study" / "trials.parquet")
    assert set(trials["sampler"]) == {"random"}

    code, out = tune_cli()
    assert code == 0, out
    assert "0 new trials: the study already holds 6 (of 6 requested); --trials 106 adds " \
           "100" in out and "weight search: 0 new trials" in out

    code, out = tune_cli("--sampler", "tpe", "--trials", "8")
    assert code == 2
    assert "runs with sampler random (seed 3), not tpe (seed 3)" in out
    assert "--switch-sampler" in out

    code, out = tune_cli("--sampler", "tpe", "--trials", "8", "--switch-sampler")
    assert code == 0, out
    assert "adding 2 trials to the study's 6 (target 8)" in out
    assert "sampler switched from random (seed 3) to tpe (seed 3) after 6" in out
    trials = pl.read_parquet(max((tmp_path / "results").iterdir()) / "study" / "trials.parquet")
    assert trials["sampler"].to_list() == ["random"] * 6 + ["tpe"] * 2


def test_tune_help_says_trials_is_a_target_total(capsys) -> None:
    from msprlab.experiments.cli import main
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the study's target total of COMPLETE trials, not a number to add" in text
    assert "--switch-sampler" in text
