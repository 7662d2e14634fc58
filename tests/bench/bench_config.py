"""`make bench`: a configuration search on LoCoMo (issue 38), beside the time the same trials
would take with one full replay each.

The data: the `locomo-config` definition's store (LoCoMo with WordLlama and a simulated
log of 3,000 searches), built under `--root` if missing (about a minute, not timed), and
its shipped table (the baseline trial's) replayed into the store's cache.

The search: `locomo-config`'s settings (expansion depth, candidates, edge floor, BFS or
PPR, the feedback boost and penalty deltas) with the six weights, `--trials` trials (100)
of TPE (the definition's seed, `points_per_state` and `trials_per_point`; no weights-only
study runs first, so no trial starts from its weights), a journal in a fresh temporary
folder, and a fresh replay cache, so every table a trial needs is built during the search.
Printed: the trials, the distinct configuration points (tables) they visited, the walks
over the timeline that built them (how many, how many variants each, how many shared one),
and the search's wall and CPU seconds; the target is 100 trials visiting at least 20
points in at most 10 minutes on this machine.

Beside it, one full replay each: every distinct point replayed alone (`replay`, wall and
CPU seconds, measured here in the same process after the search), and the time the trials
would take if each replayed its point alone: the sum over the trials of their point's
replay, plus the search's own time outside its walks (sampling, scoring, the journal);
and the same in CPU seconds. The machine is shared: the load average is printed before
and after, and the ratios of times measured side by side in one run are what to read (the
CPU one most: the load moves wall time more).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

DEFAULT_ROOT = Path("build/bench/config")


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="working folder of the store (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--no-solo", action="store_true",
                        help="skip replaying each point alone (the comparison)")
    args = parser.parse_args(argv)

    from msprlab.experiments.experiment_config import load_experiment
    from msprlab.experiments.measures.metrics import parse_metric
    from msprlab.experiments.replay import replay
    from msprlab.experiments.stages.configurations import ConfigTables
    from msprlab.experiments.stages.prepare import prepare_store
    from msprlab.experiments.stages.replay_tables import policy_of, replay_tables
    from msprlab.experiments.stages.weight_search import objective_of, plan_search
    from msprlab.experiments.tune import Objective, tune
    from msprlab.experiments.tune.attrs import TABLE_ATTR
    from msprlab.experiments.tune.configuration import ConfigSearch
    from msprlab.experiments.tune.result import settings_of
    from msprlab.experiments.variants.space import parse_settings

    print(f"load average before: {os.getloadavg()}", flush=True)
    cfg = load_experiment("locomo-config")
    start = _clock()
    store = prepare_store(cfg, args.root)
    prepared = replay_tables(cfg, store, {"tuned": cfg.engine})
    print(f"store {store} and the shipped table ready in {_since(start)[0]:.1f} s (not "
          "timed below)", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-config-") as folder:
        plan = plan_search(cfg, prepared, trials=1, storage=str(Path(folder) / "w.journal"),
                           workers=1, sampler=None)
        tables = ConfigTables.of(cfg, prepared, [parse_metric(m) for m in cfg.metrics.names],
                                 cache_dir=Path(folder) / "cache")
        settings = parse_settings(cfg.tune.settings, cfg.engine, limit=cfg.replay.limit or None)
        search = ConfigSearch(settings, cfg.engine, cfg.replay.limit or None, tables,
                              cfg.tune.points_per_state, cfg.tune.trials_per_point)
        objectives = [Objective(*objective_of(o)) for o in cfg.tune.objectives]
        start = _clock()
        result = tune(plan.train_scorer, plan.base, plan.space, objectives,
                      n_trials=args.trials, study_name="bench-config", seed=cfg.seed,
                      storage=str(Path(folder) / "config.journal"), configuration=search)
        wall, cpu = _since(start)
        trials = result.study.get_trials(deepcopy=False)
        by_table = Counter(t.user_attrs[TABLE_ATTR] for t in trials)
        stats = tables.stats.as_dict()
        walk_wall = stats["walk_seconds"]
        print(f"\nconfiguration search, {len(trials)} trials: {len(by_table)} distinct "
              f"configuration points (tables); {wall:.1f} s wall, {cpu:.1f} s CPU "
              f"(target: >= 20 points in <= 600 s wall)")
        print(f"  walks over the timeline: {stats['walks']} built {stats['tables_built']} "
              f"tables in {walk_wall:.1f} s; variants per walk {stats['variants_per_walk']}; "
              f"{stats['variants_in_shared_walks']} tables came from {stats['shared_walks']} "
              f"shared walk(s); {stats['tables_loaded']} read from the (fresh) cache")
        print(f"  outside the walks (sampling, scoring, the journal): {wall - walk_wall:.1f} s")
        best = dict(zip([o.label() for o in objectives], result.best_values[0], strict=True))
        print(f"  best train value {best}; settings {result.best_settings[0]}")
        if args.no_solo:
            return 0
        print("\none full replay per point, alone (each of the distinct points):", flush=True)
        keys = {t.user_attrs[TABLE_ATTR]: search.point(settings_of(t, tuple(settings.keys)))
                for t in trials}
        solo: dict[str, tuple[float, float]] = {}
        policy = policy_of(cfg)
        for i, (key, point) in enumerate(keys.items()):
            start = _clock()
            replay(prepared.dataset, point.config, limit=point.limit, policy=policy)
            solo[key] = _since(start)
            algorithm = point.config.retrieval.algorithm
            print(f"  {i + 1}/{len(keys)} {key} ({algorithm}): {solo[key][0]:.1f} s wall, "
                  f"{solo[key][1]:.1f} s CPU", flush=True)
        each_wall = sum(solo[by][0] * n for by, n in by_table.items()) + (wall - walk_wall)
        each_cpu = sum(solo[by][1] * n for by, n in by_table.items())
        alone_wall = sum(w for w, _ in solo.values())
        print(f"\nthe same {len(trials)} trials with one full replay each: {each_wall:.1f} s "
              f"wall ({each_cpu:.1f} s CPU in replays): {each_wall / wall:.1f}x the search's "
              f"{wall:.1f} s")
        print(f"  in CPU seconds, which a shared machine's load moves less: {each_cpu:.1f} s "
              f"in the replays alone against the search's {cpu:.1f} s in all: "
              f"{each_cpu / max(cpu, 1e-9):.1f}x")
        print(f"each point replayed once, alone: {alone_wall:.1f} s wall, against the "
              f"search's {walk_wall:.1f} s of walks ({alone_wall / max(walk_wall, 1e-9):.2f}x: "
              "what sharing walks saved)")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
