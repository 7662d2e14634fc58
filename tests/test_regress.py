"""The regression gate: it passes on a change that does not touch ranking and fails on a
planted regression (a flipped sign in one signal)."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from rich.console import Console

from msprlab.engine import batch
from msprlab.experiments.regress import compare_to_baseline, load_gate, run_regress

engine_search = importlib.import_module("msprlab.engine.search")  # the module, not the verb

BENCH = """
name = "tiny"
seed = 3
[dataset]
source = "synthetic"
store = "runs/tiny.duckdb"
searches = 300
users = 4
memories_per_user = 24
queries_per_user = 5
[engine.context_graph]
enabled = true
[engine.mspr]
enabled = true
feedback = { enabled = true }
success = { enabled = true, min_sample_size = 1 }
frequency = { enabled = true }
"""

GATE = """
experiments = ["tiny.toml"]
metrics = ["ndcg@10", "recall@10"]
margin = 0.005
min_support = 10
baseline_dir = "baseline"
[ranker.context_graph.retrieval]
beta_bm25 = 0.4
delta_personal = 0.2
zeta_success = 0.3
"""


@pytest.fixture(scope="module")
def gate_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gate")
    (folder / "tiny.toml").write_text(BENCH)
    (folder / "gate.toml").write_text(GATE)
    console = Console(width=160, record=True)
    assert run_regress(folder / "gate.toml", folder, update=True, console=console) == 0
    assert (folder / "baseline" / "tiny.parquet").is_file()
    return folder


def run(folder: Path) -> tuple[int, str]:
    console = Console(width=160, record=True)
    code = run_regress(folder / "gate.toml", folder, update=False, console=console)
    return code, console.export_text()


def test_unchanged_engine_passes(gate_dir) -> None:
    code, text = run(gate_dir)
    assert code == 0, text
    assert "no regression" in text


def test_a_change_that_does_not_touch_ranking_passes(gate_dir, monkeypatch) -> None:
    # Telemetry is not ranking: replay again (no cache) with it emptied.
    monkeypatch.setattr(engine_search, "_telemetry", lambda *args, **kwargs: {})
    for cache in (gate_dir / "runs").glob("*.cache"):
        shutil.rmtree(cache)
    code, text = run(gate_dir)
    assert code == 0, text


def test_a_flipped_sign_in_one_signal_fails(gate_dir, monkeypatch) -> None:
    real = batch.intent_weights

    def flipped(weights, *, intent=True):  # the lexical term's sign flipped
        table = real(weights, intent=intent).copy()
        table[:, 1] = -table[:, 1]
        return table
    monkeypatch.setattr(batch, "intent_weights", flipped)
    code, text = run(gate_dir)
    assert code == 1, text
    assert "REGRESSION" in text and "regression:" in text


def test_changed_benchmark_data_cannot_be_paired(gate_dir, tmp_path) -> None:
    folder = tmp_path / "g"
    shutil.copytree(gate_dir / "baseline", folder / "baseline")
    (folder / "tiny.toml").write_text(BENCH.replace("searches = 300", "searches = 200"))
    (folder / "gate.toml").write_text(GATE)
    code, text = run(folder)
    assert code == 1
    assert "benchmark data changed" in text


def test_non_inferiority_rule_on_a_planted_drop(gate_dir) -> None:
    gate = load_gate(gate_dir / "gate.toml")
    old = pl.read_parquet(gate_dir / "baseline" / "tiny.parquet")
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.001, old.height)
    small = old.with_columns(pl.col("ndcg@10") + noise)
    assert compare_to_baseline(small, old, gate, "tiny").filter(
        pl.col("group_by") == "overall")["ok"].all()
    worse = old.with_columns(pl.col("ndcg@10") - 0.05)
    verdict = compare_to_baseline(worse, old, gate, "tiny")
    assert not verdict.filter(pl.col("group_by") == "overall",
                              pl.col("metric") == "ndcg@10")["ok"].item()


def _broken(gate_dir: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(gate_dir / "baseline", folder / "baseline")
    (folder / "tiny.toml").write_text(BENCH)
    (folder / "gate.toml").write_text(GATE)
    return folder


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


BAD_BASELINES = {
    "corrupt description": ("tiny.json", lambda p: p.write_text("{not json")),
    "no digest": ("tiny.json", lambda p: p.write_text('{"searches": 300}')),
    "truncated parquet": ("tiny.parquet", _truncate),
    "empty parquet": ("tiny.parquet", lambda p: p.write_bytes(b"")),
    "foreign parquet": ("tiny.parquet",
                        lambda p: pl.DataFrame({"event_id": [1, 2]}).write_parquet(p)),
    "missing": ("tiny.parquet", lambda p: p.unlink()),
}


@pytest.mark.parametrize("case", sorted(BAD_BASELINES))
def test_a_bad_baseline_is_bad_input_not_a_regression(gate_dir, tmp_path, capsys,
                                                      case) -> None:
    from msprlab.experiments.cli import main
    folder = _broken(gate_dir, tmp_path, case.replace(" ", "-"))
    name, damage = BAD_BASELINES[case]
    damage(folder / "baseline" / name)
    code = main(["regress", "--definition", str(folder / "gate.toml"), "--root", str(folder)])
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert code == 2, text
    assert "Traceback" not in text
    assert "tiny." in text and "searches scored" not in text  # refused before any replay


def test_the_ranker_block_meets_the_same_refusals_as_a_definition(gate_dir, tmp_path,
                                                                   capsys) -> None:
    from msprlab.experiments.cli import main
    folder = _broken(gate_dir, tmp_path, "refused")
    (folder / "gate.toml").write_text(GATE + '[ranker.mspr.intent]\nstrategy = "llm"\n')
    code = main(["regress", "--definition", str(folder / "gate.toml"), "--root", str(folder)])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 2, text
    assert "[ranker]" in text and "mspr.intent.strategy" in text and "gate.toml" in text


def test_json_holds_the_verdict_and_every_row(gate_dir, capsys) -> None:
    import json

    from msprlab.experiments.cli import main
    code = main(["regress", "--definition", str(gate_dir / "gate.toml"), "--root",
                 str(gate_dir), "--json"])
    out = capsys.readouterr()
    document = json.loads(out.out)
    assert code == 0 and document["verdict"] == "ok" and document["failures"] == []
    overall = [r for r in document["rows"] if r["group_by"] == "overall"]
    assert {r["metric"] for r in overall} == {"ndcg@10", "recall@10"}
    assert all(r["ok"] for r in document["rows"])
    assert "searches scored" in out.err
