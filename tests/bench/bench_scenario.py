"""`make bench`: `msprlab scenario run` end to end against the ContextKit library, per search.

One seeded scenario file (SCENARIOS.md): the engine bench's world (tests/bench/bench_engine.py)
of `--memories` memories (10,000) with about five edges each, all MSPR signals on, BFS,
its 200 feedback verdicts and then `--searches` searches (3,000), written to a temporary
folder as `msprlab` writes JSON. Both sides take that file in and write an output file:

* the runner: `msprlab scenario run FILE --out DIR`, called in this process (`cli.main`):
  read, parse and validate the file, build the state, replay the events, write the output;
* the library: the file read and parsed, `run_scenario_with_contextkit` (the parity
  adapter's public entry point: the library's Memory built from the file, every event
  replayed through it), its output written the same way.

Printed: each side's time per search event (its whole time over the number of searches)
and the ratio, library / runner; its ceilings, were parts of the runner free (validating
and writing: the file handling beyond parsing; then all but parsing and the searches;
then all but the searches), and where the issue's aim (>= 50x) stands against the first;
the runner's breakdown (load and validate, with what parsing the JSON alone costs beside
it; building the state; the searches; the rest of the replay, which is the feedback events
and assembling the output; writing the file, with what the stdlib's `json.dumps(indent=1)`
of the same document costs beside it: the two references from outside msprlab that file
handling is held to); and whether the two outputs agree (`scenario_diff`, SCENARIOS.md's
tolerances).
The searches include the first one's indexing of every memory (engine/positional.py), as
a run of the command pays it, and the collector runs as the command runs it
(`scenario_run.spaced_gc`).

The runner runs `--rounds` times (3): once before the library and the others after it, so
the library sits between runner rounds; the runner figure is the median round, and the
ratio's range uses the fastest and slowest. Each run starts after a full collection (the
library leaves objects behind). Before anything is timed, a small scenario
goes through both sides, so that neither pays one-time costs (imports, numba loading its
compiled loops) inside the timing. Without the library (msprlab[parity]) the library
figure is the engine issue's search rate at 10,000 memories: a reference, NOT measured in
this run, and covering its searches only.

The machine is often shared: read the ratio of one run, measured side by side, rather
than absolute times.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, redirect_stdout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from bench import bench_engine

from msprlab.datasets import strict_json
from msprlab.datasets.atomic import write_json_atomic

ALGORITHM = "bfs"
AIM = 50.0  # issue 25's aim for the ratio
FEEDBACK_QUERY = "what is w1 w2"


def scenario_document(memories: int, searches: int, seed: int = 0) -> dict[str, Any]:
    """The engine bench's world as one scenario: its feedback verdicts, then `searches`
    searches drawn as the engine bench draws its requests."""
    rng = np.random.default_rng(seed)
    world = bench_engine.generate(memories, rng)
    requests = bench_engine.requests(world, rng, searches)
    feedback = [{"type": "feedback", "memory_id": memory_id, "helpful": helpful,
                 "user_id": user, "query": FEEDBACK_QUERY}
                for memory_id, helpful, user in world.feedback]
    events = feedback + [bench_engine._search_event(req) for req in requests]
    document = bench_engine._scenario(world, ALGORITHM, events)
    document["name"] = f"bench-scenario-{memories}-{searches}"
    return document


def write_scenario(folder: Path, memories: int, searches: int) -> tuple[Path, int]:
    """The scenario file in `folder`, and how many search events it holds."""
    document = scenario_document(memories, searches)
    path = folder / f"{document['name']}.json"
    write_json_atomic(path, document)
    return path, sum(1 for e in document["events"] if e["type"] == "search")


# ---- the runner ----------------------------------------------------------------------------


@dataclass
class RunnerRound:
    """One `msprlab scenario run FILE --out DIR`, in seconds, and its parts."""

    total: float = 0.0
    parse: float = 0.0       # strict JSON parsing of the file alone, timed apart (reference)
    dumps: float = 0.0       # json.dumps(output, indent=1), the text written, apart (reference)
    load: float = 0.0        # load_scenario: read, parse and validate
    build: float = 0.0       # build_state
    searches: float = 0.0    # the engine's search calls
    replay: float = 0.0      # run_parsed, all of it (build and searches included)
    write: float = 0.0       # writing the output file
    output: Path = field(default_factory=Path)

    @property
    def rest_of_replay(self) -> float:
        """Feedback events, the output document and the final nodes."""
        return self.replay - self.build - self.searches

    @property
    def other(self) -> float:
        """The command line around it: arguments, checks, the console."""
        return self.total - self.load - self.replay - self.write


@contextmanager
def _timing(target: Any, name: str, add: Callable[[float], None]) -> Iterator[None]:
    """`target.name` replaced by a wrapper that passes each call's seconds to `add`."""
    inner = getattr(target, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            add(time.perf_counter() - start)

    with mock.patch.object(target, name, timed):
        yield


def run_runner(path: Path, out: Path) -> RunnerRound:
    """`msprlab scenario run path --out out` in this process, timed in parts."""
    import msprlab.experiments.cli.parser as cli
    from msprlab.experiments.parity import scenario_run

    times = RunnerRound()
    times.parse = _apart(lambda: strict_json.loads(path.read_text(encoding="utf-8")))

    def adder(name: str) -> Callable[[float], None]:
        def add(seconds: float) -> None:
            setattr(times, name, getattr(times, name) + seconds)
        return add

    with ExitStack() as stack:
        stack.enter_context(_timing(cli, "load_scenario", adder("load")))
        stack.enter_context(_timing(cli, "write_json_atomic", adder("write")))
        stack.enter_context(_timing(scenario_run, "run_parsed", adder("replay")))
        stack.enter_context(_timing(scenario_run, "build_state", adder("build")))
        stack.enter_context(_timing(scenario_run, "search", adder("searches")))
        stack.enter_context(redirect_stdout(io.StringIO()))
        gc.collect()  # no debt of the collector's from what ran before (the library's)
        start = time.perf_counter()
        status = cli.main(["scenario", "run", str(path), "--out", str(out)])
        times.total = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"msprlab scenario run exited {status} on {path}")
    times.output = out / f"{path.stem}.out.json"
    document = json.loads(times.output.read_text(encoding="utf-8"))
    # the stdlib's own way to the text the runner writes
    times.dumps = _apart(lambda: json.dumps(document, indent=1))
    return times


def _apart(work: Callable[[], Any]) -> float:
    """Seconds of one `work()`, timed outside the run, with the collector as the runner
    has it (`scenario_run.spaced_gc`): a stdlib reference beside a part of the run."""
    from msprlab.experiments.parity import scenario_run

    with scenario_run.spaced_gc():
        start = time.perf_counter()
        work()
        return time.perf_counter() - start


# ---- the library ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryRun:
    total: float         # read and parse the file, run_scenario_with_contextkit, write
    searches: float      # of which the library's Memory.search calls
    output: Path


def run_library(path: Path, out: Path) -> LibraryRun:
    """The file through `run_scenario_with_contextkit`, output written as the runner does."""
    from msprlab.experiments.parity.adapter import run_scenario_with_contextkit

    # An empty scenario first: the adapter imports the library (its environment set) once.
    run_scenario_with_contextkit({"format": "ck-mspr-scenario/1"})
    memory_class = importlib.import_module("outhad_contextkit.memory.main").Memory
    spent: list[float] = []
    with _timing(memory_class, "search", spent.append):
        gc.collect()
        start = time.perf_counter()
        raw = json.loads(path.read_text(encoding="utf-8"))
        output = run_scenario_with_contextkit(raw)
        target = out / f"{path.stem}.out.json"
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(target, output)
        total = time.perf_counter() - start
    return LibraryRun(total, sum(spent), target)


def agreement(library: Path, runner: Path) -> str:
    from msprlab.experiments.parity.scenario_diff import BFS_TOLERANCE, diff_outputs

    expected, got = (json.loads(p.read_text(encoding="utf-8")) for p in (library, runner))
    divergences = diff_outputs(expected, got, tolerance=BFS_TOLERANCE)
    return "same" if not divergences else f"DIFFER ({len(divergences)} divergences)"


# ---- report --------------------------------------------------------------------------------


def _ms(seconds: float, events: int) -> str:
    return f"{seconds / events * 1e3:.3f} ms"


def print_breakdown(runner: RunnerRound, events: int) -> None:
    total = runner.total
    parts = [
        ("load + validate", runner.load),
        ("  of which parsing the JSON alone (apart, median)", runner.parse),
        ("build the state", runner.build),
        ("searches (engine.search)", runner.searches),
        ("feedback, output document, final nodes", runner.rest_of_replay),
        ("write the output file", runner.write),
        ("command line, console", runner.other),
    ]
    print(f"the runner's median round, {total:.3f} s in all:")
    for label, seconds in parts:
        print(f"  {label:<48} {seconds:>7.3f} s {100 * seconds / total:>5.1f}%  "
              f"{_ms(seconds, events):>10} per search event")
    if runner.parse > 0:
        print(f"  load + validate is {runner.load / runner.parse:.2f}x parsing the JSON alone")
    if runner.dumps > 0:
        print(f"  writing is {runner.write / runner.dumps:.2f}x json.dumps(indent=1) of the same "
              f"document ({runner.dumps:.3f} s apart, median), the text it writes")


def print_ceilings(library: float, runner: RunnerRound, ratio: float) -> None:
    """What the ratio would be were parts of the runner free, and where the aim stands.

    Building the state is the engine's own work (the library builds its Memory too), so the
    ceiling that file handling sets is the one with validating and writing free."""
    free_files = library / (runner.parse + runner.build + runner.searches)
    print("ceilings, what the ratio would be if the rest of the runner cost nothing:")
    print(f"  validating and writing free (parse, build, searches left): {free_files:.1f}x; "
          f"the runner is at {100 * ratio / free_files:.0f}% of it")
    print(f"  all but parsing the JSON and the searches free: "
          f"{library / (runner.parse + runner.searches):.1f}x")
    print(f"  all but the searches free: {library / runner.searches:.1f}x")
    verdict = "met" if ratio >= AIM else "not met"
    where = ("above what free file handling would give on this run, so only a faster state "
             "build or search could reach it" if free_files < AIM else
             "within what free file handling would give on this run")
    print(f"aim >= {AIM:g}x (issue 25): {verdict}; it is {where}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runner rounds (the library runs once, after the first)")
    parser.add_argument("--no-library", action="store_true",
                        help="do not run the library even when it is installed")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.memories < 100 or args.searches < 1:
        parser.error("need --rounds >= 1, --searches >= 1 and --memories >= 100 (each user "
                     "draws ten seeds from its own memories)")
    installed = bench_engine.library_available()
    measure = installed and not args.no_library
    with tempfile.TemporaryDirectory(prefix="msprlab-bench-scenario-") as tmp:
        folder = Path(tmp)
        path, events = write_scenario(folder, args.memories, args.searches)
        size = path.stat().st_size / 1e6
        print(f"msprlab scenario run FILE --out DIR (end to end, in this process) against the "
              f"library (run_scenario_with_contextkit) on one file: {args.memories} memories, "
              f"{events} search events, all signals on, {ALGORITHM.upper()}, {size:.1f} MB; "
              "time per search event = whole run / search events", flush=True)
        (folder / "warm").mkdir()
        warm, _ = write_scenario(folder / "warm", 200, 20)
        run_runner(warm, folder / "warm-out")
        if measure:
            run_library(warm, folder / "warm-lib")
        rounds = [run_runner(path, folder / "runner-0")]
        library = run_library(path, folder / "library") if measure else None
        rounds += [run_runner(path, folder / f"runner-{i}") for i in range(1, args.rounds)]
        ordered = sorted(rounds, key=lambda r: r.total)
        # The stdlib references are timed apart, once a round, and one can catch the
        # collector or a page-fault storm: the breakdown and ceilings use their medians.
        runner = replace(ordered[len(ordered) // 2],
                         parse=statistics.median(r.parse for r in rounds),
                         dumps=statistics.median(r.dumps for r in rounds))
        spread = ", ".join(f"{r.total:.2f}" for r in rounds)
        print(f"runner:  {_ms(runner.total, events):>10} per search event (median of "
              f"{len(rounds)} rounds; seconds per round: {spread})")
        if library is not None:
            ratio = library.total / runner.total
            low, high = library.total / ordered[-1].total, library.total / ordered[0].total
            print(f"library: {_ms(library.total, events):>10} per search event "
                  f"({library.total:.1f} s; its Memory.search calls "
                  f"{100 * library.searches / library.total:.0f}% of it)")
            print(f"ratio library / runner: {ratio:.1f}x [{low:.1f}-{high:.1f}]; outputs "
                  f"{agreement(library.output, runner.output)}")
            print_ceilings(library.total, runner, ratio)
        else:
            rate = bench_engine.LIBRARY_REFERENCE[ALGORITHM][10_000]
            why = "--no-library" if installed else "the ContextKit library is not installed"
            print(f"library: {1e3 / rate:.3f} ms per search: the engine issue's {rate} "
                  "searches/s at 10,000 memories, searches only: reference, NOT measured in "
                  f"this run ({why})")
            print(f"ratio library / runner: {(1 / rate) / (runner.total / events):.1f}x "
                  f"(against the reference); aim >= {AIM:g}x")
        print_breakdown(runner, events)
        parses = ", ".join(f"{r.parse:.3f}" for r in rounds)
        print(f"  (parsing the JSON alone, seconds per round: {parses}; median of the "
              f"per-round load/parse ratio: "
              f"{statistics.median(r.load / r.parse for r in rounds):.2f}x)", flush=True)


if __name__ == "__main__":
    main()
