"""The msprlab command line: exit codes, written outputs and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprlab.experiments.cli import main

SCENARIOS = Path(__file__).parent / "scenarios"


def test_scenario_run_writes_one_output_per_file(tmp_path):
    assert main(["scenario", "run", str(SCENARIOS), "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == [f"{p.stem}.out.json" for p in sorted(SCENARIOS.glob("*.json"))]
    out = json.loads((tmp_path / "example_a_bfs.out.json").read_text())
    assert out["format"] == "ck-mspr-oracle-output/1"
    assert out["events"][0]["results"][0] == {
        "id": "m1", "score": 0.8367142857142857, "dense": 0.82, "lexical": 4 / 7,
        "graph": 1.0, "frequency": 0.0, "personal": 0.0, "success": 0.0, "was_seed": True}


def test_malformed_scenario_exits_2_and_names_file_and_path(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    doc = json.loads((SCENARIOS / "example_a_bfs.json").read_text())
    doc["memories"][1]["embedding"][2] = "x"
    bad.write_text(json.dumps(doc))
    assert main(["scenario", "run", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = " ".join(capsys.readouterr().out.split())
    assert f"{bad}: $.memories[1].embedding[2]: expected a finite number" in err
    assert not (tmp_path / "out").exists()  # nothing written, not even the folder


def test_diff_exits_0_on_agreement_and_1_on_divergence(tmp_path):
    assert main(["scenario", "run", str(SCENARIOS / "example_a_bfs.json"),
                 "--out", str(tmp_path)]) == 0
    a = tmp_path / "example_a_bfs.out.json"
    assert main(["scenario", "diff", str(a), str(a)]) == 0
    changed = json.loads(a.read_text())
    changed["events"][0]["results"][0]["score"] += 1e-6
    b = tmp_path / "changed.json"
    b.write_text(json.dumps(changed))
    assert main(["scenario", "diff", str(a), str(b)]) == 1


def test_demo_prints_the_worked_examples(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "example_c_mspr" in out and "0.836714" in out and "1.012866" in out


def test_help_answers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["scenario", "run", "--help"])
    assert exit_info.value.code == 0
    assert "FILE_OR_DIR" in capsys.readouterr().out
