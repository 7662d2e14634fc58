"""The project imports and works beside the PyPI package `datasets` (DESIGN.md, Layout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).parent / "scenarios" / "example_a_bfs.json"


def test_pypi_datasets_is_not_shadowed_in_process():
    hf = pytest.importorskip("datasets")
    import msprlab.datasets

    assert hasattr(hf, "load_dataset"), f"`datasets` resolved to {hf.__file__}"
    assert Path(msprlab.datasets.__file__).parent.name == "datasets"
    assert Path(hf.__file__).resolve() != Path(msprlab.datasets.__file__).resolve()


def test_both_packages_work_in_a_fresh_interpreter(tmp_path):
    pytest.importorskip("datasets")
    code = (
        "import datasets, json\n"
        "from msprlab.experiments.parity.scenario_run import run_scenario\n"
        "assert hasattr(datasets, 'load_dataset'), datasets.__file__\n"
        "ds = datasets.Dataset.from_dict({'id': ['m1']})\n"
        f"out = run_scenario(json.load(open({str(SCENARIO)!r})))\n"
        "print(ds.num_rows, out['events'][0]['results'][0]['id'])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "m1"]
