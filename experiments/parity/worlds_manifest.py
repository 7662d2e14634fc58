"""DIR/README.md of a set of worlds (`worlds.py`): what each world is, its settings, the
commands that make and read it, and what it took; rewritten after each world."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .world_settings import Production, WorldSettings

__all__ = ["world_command", "write_manifest"]


def world_command(name: str, settings: WorldSettings, out: str = "DIR") -> str:
    """The `world` command line that makes this world alone."""
    p, d = settings.production, Production()
    parts = [f"python -m msprlab.experiments.parity.world --out {out}/{name}",
             f"--conversations {settings.conversations}"]
    if settings.sessions is not None:
        parts.append(f"--sessions {settings.sessions}")
    parts += [f"--searches {settings.searches}", f"--seed {settings.seed}",
              f"--eta {settings.click_model.eta:g}", f"--noise {settings.click_model.noise:g}",
              f"--rank-share {settings.rank_share:g}",
              "--p-helpful " + " ".join(f"{p:g}" for p in settings.verdict_model.p_helpful),
              f"--preference-share {settings.preference_share:g}"]
    if p.decay:
        parts += ["--decay on", f"--half-life {p.half_life_days:g}"]
    for flag, name_ in (("--boost", "boost_delta"), ("--penalty", "penalty_delta"),
                        ("--cap", "max_boost_per_memory"), ("--delta", "delta_personal"),
                        ("--epsilon", "epsilon_frequency"), ("--zeta", "zeta_success")):
        if getattr(p, name_) != getattr(d, name_):
            parts.append(f"{flag} {getattr(p, name_):g}")
    if settings.embedder != "wordllama":
        parts.append(f"--embedder {settings.embedder}")
    return " ".join(parts)


def _truth(folder: Path) -> str:
    """off -> on-zero -> all by the truth (nDCG@10 per query, test window), where measured
    (`python -m msprlab.experiments.fidelity.on_worlds DIR --truth`)."""
    path = folder / "truth_effect.json"
    if not path.is_file():
        return "not measured"
    effect = json.loads(path.read_text())["truth"]
    return " → ".join(f"{effect[a]:.3f}" for a in ("off", "on-zero", "all") if a in effect)


def _row(world: Any, info: dict[str, Any], timings: dict[str, Any], truth: str) -> str:
    s, c, p = world.settings, info["counts"], world.settings.production
    ingest = timings["ingest"] + timings["ingest_projected"]
    production = f"decay on, half-life {p.half_life_days:g} d" if p.decay else "decay off"
    production += (f"; boost {p.boost_delta:g}, penalty {p.penalty_delta:g}, cap "
                   f"{p.max_boost_per_memory:g}; δ {p.delta_personal:g}, ε "
                   f"{p.epsilon_frequency:g}, ζ {p.zeta_success:g}")
    embedder = ("WordLlama (msprlab ships it)" if s.embedder == "wordllama"
                else f"`{s.embedder}` (msprlab lacks it)")
    return (f"| {world.name} | {s.conversations} | {c['memories']:,} | {c['searches']:,} | "
            f"{c['verdicts']:,} ({c['verdicts_helpful']:,} helpful, "
            f"{c['verdicts_with_rank']:,} with a rank) | r^-{s.click_model.eta:g}, noise "
            f"{s.click_model.noise:g} | {s.preference_share:.0%} | {production} | {embedder} "
            f"| {world.mismatch} | {truth} | {timings['total']:.0f} s (+{ingest:.0f} s ingest) |")


def write_manifest(out: Path, worlds: Sequence[Any]) -> None:
    """DIR/README.md for the worlds of `worlds` that DIR holds."""
    made = []
    for world in worlds:
        folder = out / world.name
        if (folder / "world.json").is_file() and (folder / "timings.json").is_file():
            made.append((world, json.loads((folder / "world.json").read_text()),
                         json.loads((folder / "timings.json").read_text())))
    total = sum(t["all"] for _, _, t in made)
    lines = [
        "# Generated ContextKit worlds (issue 40)",
        "",
        "Made by `python -m msprlab.experiments.parity.worlds` (msprlab, "
        "`experiments/parity/worlds.py`): ContextKit production artifacts written by the "
        "real library (outhad-contextkitai 0.1.4) on LoCoMo, the truth beside them, each "
        "world ingested as production would be read, and two experiment definitions.",
        "",
        "Make the whole set again (from the repository root, parity extra installed; the "
        "application's embedder must be importable):",
        "",
        "```sh",
        f"PYTHONPATH=tests/fixtures/application python -m msprlab.experiments.parity.worlds "
        f"--out {out} --replace",
        "```",
        "",
        f"It took {total / 60:.1f} min for these {len(made)} worlds on this machine (2 cores "
        "shared with other work; each world's own time is in its row and in "
        "`NAME/timings.json`).",
        "",
        "| world | users | memories | searches | verdicts | examination, noise | truth "
        "follows past verdicts | production | embedder | mismatched [engine] | truth nDCG@10 "
        "off → on-zero → all | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(w, i, t, _truth(out / w.name)) for w, i, t in made),
        "",
        "The truth column: each arm's nDCG@10 by the world's truth, per query on the test "
        "window, replayed under production's [engine] (`python -m "
        "msprlab.experiments.fidelity.on_worlds DIR --truth`, which writes "
        "`NAME/truth_effect.json` with the verdict-labelled values beside them).",
        "",
        "## What each world folder holds",
        "",
        "- the artifacts: `feedback_events.db`, `query_success.db`, `context_graph.jsonl`, "
        "`qdrant/`;",
        "- `world.json`: every setting, the counts, `truth.examination` (the true P(rank r "
        "examined) = r^-eta, r = 1..10, what a position-bias estimate should recover), "
        "`truth.attractiveness` (per grade 0/1), `truth.p_helpful`, and "
        "`production.engine_toml` (the [engine] block that replays production);",
        "- `truth/qrels.tsv` (query hash -> relevant memory ids: the LoCoMo evidence, and on "
        "a preference question the memories its user judged helpful for it over the period), "
        "`truth/searches.parquet` (every search in order: ts, user, query hash, question id "
        "and type, `preference`, `shown` in rank order, the library's `scores`, `relevant` "
        "(the memories relevant to it then), `clicked_ranks`, `verdict_ranks`, "
        "`verdict_helpful`, 1-based), `truth/memories.tsv`;",
        "- `store.duckdb`: the artifacts ingested with production's query embedder; "
        "`store-projected.duckdb`: without one (queries projected from their text);",
        "- `matched.toml`: the shipped `contextkit.toml` on `store.duckdb` with production's "
        "[engine]; `mismatched.toml`: with the [engine] the table names (the shipped one "
        "unless said otherwise);",
        "- `timings.json`: seconds per stage.",
        "",
        "## Commands, per world",
        "",
    ]
    for world, info, _ in made:
        pythonpath = ("" if world.settings.embedder == "wordllama"
                      else "PYTHONPATH=tests/fixtures/application ")
        lines += [
            f"### {world.name}",
            "",
            world.purpose + ".",
            "",
            "```sh",
            f"{pythonpath}{world_command(world.name, world.settings, str(out))}",
            f"{pythonpath}msprlab ingest contextkit --feedback-db {out}/{world.name}/"
            f"feedback_events.db --success-db {out}/{world.name}/query_success.db "
            f"--graph-jsonl {out}/{world.name}/context_graph.jsonl --qdrant-path "
            f"{out}/{world.name}/qdrant {info['embedder']['harness_flag']} --store "
            f"{out}/{world.name}/store.duckdb",
            f"msprlab run {out}/{world.name}/matched.toml      # production's [engine]",
            f"msprlab run {out}/{world.name}/mismatched.toml   # {world.mismatch}",
            f"python -m msprlab.experiments.label_check {out}/{world.name}/matched.toml "
            f"--truth {out}/{world.name}/truth/qrels.tsv",
            "```",
            "",
        ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")
