"""Make the set of ContextKit worlds the verdict-labelled path is validated on, with one
command:

    PYTHONPATH=tests/fixtures/application \\
        python -m msprlab.experiments.parity.worlds --out DIR [--only NAME ...] [--replace]

needs the `parity` extra, and the application's embedder (`app_embedding:embed`, which
msprlab does not ship) importable: its folder on PYTHONPATH. Each world (`WORLDS`) is made
by `world.generate_world` into `DIR/NAME/`, then ingested as production would be read
(`msprlab ingest contextkit` with production's query embedder, `DIR/NAME/store.duckdb`,
and without one, `DIR/NAME/store-projected.duckdb`), and gets two experiment definitions
beside it: `matched.toml` (the shipped `contextkit.toml` with production's [engine]) and
`mismatched.toml` (an [engine] production did not run: the shipped one, or as the world
says). `DIR/README.md` lists the worlds, their settings, the commands and what each took.

The set spans what the validation needs: worlds where recording feedback truly helps
(a share of questions whose truth follows the user's past helpful verdicts) and where it
does not, production with and without decay, with the library's feedback deltas and
others, position bias from mild to strong, and an embedder msprlab ships (WordLlama) and
one it lacks (the application's hashed bag of words).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprlab.datasets.clicks import PositionBasedModel, VerdictModel

from ..cli.exits import EXIT_BAD_INPUT, EXIT_OK, BadInput, print_error
from ..experiment_config import CONFIG_DIR
from .world import WorldError, generate_world
from .world_settings import MAX_GRADE, Production, WorldSettings

__all__ = ["WORLDS", "World", "main"]

APP_EMBEDDER = "app_embedding:embed"  # tests/fixtures/application/app_embedding.py
_SHIPPED = CONFIG_DIR / "contextkit.toml"


@dataclass(frozen=True)
class World:
    """One world of the set: its name, why it is there, its settings, and the [engine]
    a mismatched definition holds (None: the shipped definition's) and why."""

    name: str
    purpose: str
    settings: WorldSettings
    mismatched: str | None = None
    mismatch: str = "the shipped contextkit.toml's [engine] (decay on, weights 0)"


def _pbm(eta: float, noise: float = 0.1) -> PositionBasedModel:
    return PositionBasedModel(eta=eta, noise=noise, max_grade=MAX_GRADE)


_HELPS = Production(delta_personal=0.1, epsilon_frequency=0.05, zeta_success=0.1)
WORLDS: tuple[World, ...] = (
    World("w1-helps", "feedback truly helps (60% of questions follow past verdicts); "
          "production as in issue 40 (decay off, delta 0.1, epsilon 0.05, zeta 0.1)",
          WorldSettings(conversations=3, searches=2500, seed=11, click_model=_pbm(0.7),
                        rank_share=0.5, preference_share=0.6, production=_HELPS)),
    World("w2-flat", "no question's truth follows past verdicts (only the LoCoMo evidence "
          "is relevant; feedback can still help through penalties and repeated questions); "
          "production at the library's defaults with decay off",
          WorldSettings(conversations=3, searches=2500, seed=12, click_model=_pbm(1.0),
                        rank_share=0.5, preference_share=0.0)),
    World("w3-app-helps", "the embedder msprlab lacks (the application's hashed bag of "
          "words); feedback truly helps; production as in issue 40",
          WorldSettings(conversations=4, sessions=12, searches=3000, seed=13,
                        click_model=_pbm(0.7), rank_share=0.5, preference_share=0.6,
                        production=_HELPS, embedder=APP_EMBEDDER)),
    World("w4-app-flat", "the embedder msprlab lacks; no question's truth follows past "
          "verdicts; noisier clicks",
          WorldSettings(conversations=3, searches=2500, seed=14,
                        click_model=_pbm(1.0, noise=0.2), rank_share=0.5,
                        preference_share=0.0, embedder=APP_EMBEDDER)),
    World("w5-decay", "production ran decay (half-life 60 days) and delta 0.1; feedback "
          "helps on 30% of the questions",
          WorldSettings(conversations=2, searches=2000, seed=15, click_model=_pbm(1.0),
                        rank_share=0.5, preference_share=0.3,
                        production=Production(decay=True, half_life_days=60.0,
                                              delta_personal=0.1)),
          mismatched="decay off", mismatch="decay off (production ran it on)"),
    World("w6-deltas", "production's own feedback deltas (boost 0.1, penalty 0.05, cap 0.3) "
          "and weights (delta 0.2, zeta 0.2); strong position bias",
          WorldSettings(conversations=3, searches=2500, seed=16,
                        click_model=_pbm(1.3, noise=0.2), rank_share=0.5,
                        preference_share=0.6,
                        production=Production(boost_delta=0.1, penalty_delta=0.05,
                                              max_boost_per_memory=0.3, delta_personal=0.2,
                                              zeta_success=0.2)),
          mismatched="library deltas, decay off",
          mismatch="decay off but the library's deltas and weights 0 (production: boost "
                   "0.1, penalty 0.05, cap 0.3, delta 0.2, zeta 0.2)"),
    World("w8-noise", "feedback truly does not help: the verdicts say nothing of the truth "
          "(every examined memory attracts a click w.p. 0.5 and a judged one is helpful w.p. "
          "0.6 whatever its grade); production as in issue 40",
          WorldSettings(conversations=3, searches=2500, seed=18,
                        click_model=_pbm(1.0, noise=1.0),
                        verdict_model=VerdictModel(p_helpful=(0.6, 0.6), judge_rate=1.0),
                        rank_share=0.5, preference_share=0.0, production=_HELPS)),
    World("w7-small", "a small world for quick checks (two conversations, four sessions)",
          WorldSettings(conversations=2, sessions=4, searches=800, seed=17,
                        click_model=_pbm(1.0), rank_share=0.5, preference_share=0.3,
                        production=_HELPS)),
)


# ---- definitions -----------------------------------------------------------------------
def _engine_block(text: str) -> tuple[int, int]:
    """Where the shipped definition's [engine] tables start and end (the next other table)."""
    start = text.index("[engine.context_graph]")
    # the next table, with the comment lines that introduce it
    following = re.compile(r"^(?:#.*\n)*\[(?!engine)", re.MULTILINE).search(text, start)
    end = following.start() if following else len(text)
    return start, end


def definition(world: World, store: Path, *, matched: bool) -> str:
    """The shipped definition on `store` with production's [engine] (matched) or the
    world's mismatched one, and the minimum support lowered to a world's size."""
    text = _SHIPPED.read_text(encoding="utf-8").replace(
        'store = "runs/contextkit.duckdb"', f'store = "{store}"').replace(
        "min_support = 30", "min_support = 10")
    production = world.settings.production
    if matched:
        engine = production.engine_toml()
    elif world.mismatched == "decay off":
        engine = production.engine_toml().replace(
            f"{{ enabled = true, half_life_days = {production.half_life_days!r} }}",
            "{ enabled = false }")
    elif world.mismatched == "library deltas, decay off":
        engine = Production().engine_toml()
    else:
        return text
    start, end = _engine_block(text)
    return text[:start] + engine + "\n" + text[end:]


# ---- the set -----------------------------------------------------------------------------
def _ingest(folder: Path, store: Path, embedder: str | None) -> float:
    from msprlab.experiments.cli import main as msprlab
    started = time.perf_counter()
    argv = ["ingest", "contextkit", "--feedback-db", str(folder / "feedback_events.db"),
            "--success-db", str(folder / "query_success.db"), "--graph-jsonl",
            str(folder / "context_graph.jsonl"), "--qdrant-path", str(folder / "qdrant"),
            "--store", str(store), "--replace"]
    if embedder is not None:
        argv += ["--query-embedder", embedder]
    if msprlab(argv) != 0:
        raise RuntimeError(f"ingesting {folder} failed (see above)")
    return time.perf_counter() - started


def make(world: World, out: Path, *, replace: bool) -> dict[str, Any]:
    """One world, its stores and definitions; returns what the manifest says of it."""
    folder = out / world.name
    if folder.exists() and any(folder.iterdir()) and not replace:
        raise BadInput(f"--out {out}: {world.name} exists; pass --replace to make it again")
    started = time.perf_counter()
    info = generate_world(folder, world.settings)
    timings = info.pop("_timings")
    timings.update(read(world, folder))
    timings["all"] = time.perf_counter() - started
    (folder / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    return {"world": world, "info": info, "timings": timings}


def read(world: World, folder: Path) -> dict[str, float]:
    """Ingest a made world (with production's query embedder, and without one) and write
    its two definitions; the seconds each ingest took."""
    timings = {"ingest": _ingest(folder, folder / "store.duckdb", world.settings.embedder),
               "ingest_projected": _ingest(folder, folder / "store-projected.duckdb", None)}
    for name, matched in (("matched.toml", True), ("mismatched.toml", False)):
        (folder / name).write_text(definition(world, folder / "store.duckdb",
                                              matched=matched), encoding="utf-8")
    return timings


def _check_embedders(worlds: Sequence[World]) -> None:
    for world in worlds:
        spec = world.settings.embedder
        if ":" in spec:
            module = spec.partition(":")[0]
            try:
                importlib.import_module(module)
            except ImportError:
                raise BadInput(f"world {world.name} embeds with {spec}, the application's "
                               f"embedder (msprlab does not ship it): put its folder on "
                               f"PYTHONPATH, PYTHONPATH=tests/fixtures/application") from None


def main(argv: Sequence[str] | None = None) -> int:
    from .worlds_manifest import write_manifest
    parser = argparse.ArgumentParser(
        prog="python -m msprlab.experiments.parity.worlds",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Deterministic per world (its seed). Exit status: 0 success, 2 bad input.")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=[w.name for w in WORLDS],
                        help="make these worlds only (the manifest lists the ones in DIR)")
    parser.add_argument("--replace", action="store_true",
                        help="make a world again where DIR holds it")
    parser.add_argument("--refresh", action="store_true",
                        help="make no world: ingest the worlds DIR holds again and rewrite "
                             "their definitions and DIR/README.md (after a change to the "
                             "loader or the shipped definition)")
    args = parser.parse_args(argv)
    if args.refresh:
        _check_embedders(WORLDS)
        for world in WORLDS:
            folder = args.out / world.name
            if (folder / "world.json").is_file() and (folder / "timings.json").is_file():
                timings = json.loads((folder / "timings.json").read_text())
                timings.update(read(world, folder))
                (folder / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
        write_manifest(args.out, WORLDS)
        return EXIT_OK
    chosen = [w for w in WORLDS if args.only is None or w.name in args.only]
    try:
        _check_embedders(chosen)
        args.out.mkdir(parents=True, exist_ok=True)
        for world in chosen:
            print(f"{world.name}: {world.purpose}", file=sys.stderr, flush=True)
            made = make(world, args.out, replace=args.replace)
            print(f"{world.name}: done in {made['timings']['all']:.0f} s", file=sys.stderr,
                  flush=True)
            write_manifest(args.out, WORLDS)
    except (BadInput, WorldError) as exc:
        print_error(exc)
        return EXIT_BAD_INPUT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
