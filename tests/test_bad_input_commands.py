"""Bad input to the experiment commands, the report, scenarios and the gate, one row each:
exit 2, one message naming the place, no traceback, nothing left behind.

(Ingest has its own table in `test_ingest_bad_input.py`; the tune journal's faults are in
`test_tune_faults.py`; the gate's baselines in `test_regress.py`.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from test_experiments import SMALL

from msprlab.experiments.cli import main

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"
EXAMPLE = SCENARIOS / "example_a_bfs.json"


def run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def assert_refused(code: int, text: str, *needles: str) -> None:
    assert code == 2, text
    assert "Traceback" not in text and "internal error" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


# ---- experiment commands: storage, tracking, stores, working folder ---------------------

def _small(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL.replace("trials = 10", "trials = 2") + extra)
    return path


def _store_definition(tmp_path: Path, store: Path) -> Path:
    path = tmp_path / "store.toml"
    path.write_text(f'name = "st"\n[dataset]\nsource = "store"\nstore = "{store}"\n'
                    "[engine.context_graph]\nenabled = true\n[engine.mspr]\nenabled = true\n"
                    '[ablation]\narms = ["off"]\n')
    return path


def _garbage(path: Path) -> Path:
    path.write_bytes(b"not a database\n")
    return path


def _foreign(path: Path) -> Path:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    return path


STORAGE = {
    "unknown scheme": ("foo://x", "unknown database scheme 'foo'"),
    "a folder": ("{tmp}", "is a folder"),
    "under a file": ("{tmp}/plain/x.journal", "is a file, not a folder"),
    "unopenable sqlite": ("sqlite:///{tmp}/plain/x.db", "cannot open it"),
}


@pytest.mark.parametrize("case", sorted(STORAGE))
def test_a_bad_storage_url_is_refused(tmp_path, capsys, case) -> None:
    (tmp_path / "plain").write_text("x")
    url, needle = STORAGE[case]
    code, text = run(["tune", str(_small(tmp_path)), "--root", str(tmp_path), "--no-track",
                      "--storage", url.format(tmp=tmp_path)], capsys)
    assert_refused(code, text, "--storage", needle)
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("url", ["postgresql://user:secret@127.0.0.1:1/db",
                                 "postgresql+psycopg://user:secret@127.0.0.1:1/db"])
def test_a_storage_driver_that_is_not_installed_names_the_extra(tmp_path, capsys, monkeypatch,
                                                                url) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` fails, as uninstalled
    code, text = run(["tune", str(_small(tmp_path)), "--root", str(tmp_path), "--no-track",
                      "--storage", url], capsys)
    assert_refused(code, text, "not installed", "pip install -e '.[postgres]' (psycopg 3)")
    assert "secret" not in text and "psycopg2" not in text


TRACKING = {
    "unknown scheme": ("foo://x", "unknown scheme 'foo'"),
    "retired file store": ("file:///{tmp}/mlruns", "retired the file store"),
    "a plain folder": ("{tmp}/mlruns", "retired the file store"),
    "no server answers": ("http://127.0.0.1:9", "no MLflow server answers"),
    "sqlite in a file": ("sqlite:///{tmp}/plain/mlflow.db", "is a file, not a folder"),
}


@pytest.mark.parametrize("case", sorted(TRACKING))
def test_a_bad_tracking_uri_fails_fast(tmp_path, capsys, case) -> None:
    (tmp_path / "plain").write_text("x")
    uri, needle = TRACKING[case]
    code, text = run(["ablate", str(_small(tmp_path)), "--root", str(tmp_path),
                      "--tracking-uri", uri.format(tmp=tmp_path)], capsys)
    if case == "sqlite in a file":
        assert_refused(code, text, "plain")
    else:
        assert_refused(code, text, "tracking.uri", needle)
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


STORES: dict[str, Callable[[Path], Path]] = {
    "not a DuckDB file": lambda p: _garbage(p / "bad.duckdb"),
    "an empty file": lambda p: (p / "empty.duckdb").write_bytes(b"") or p / "empty.duckdb",
    "another DuckDB database": lambda p: _foreign(p / "foreign.duckdb"),
    "missing": lambda p: p / "absent.duckdb",
}


@pytest.mark.parametrize("case", sorted(STORES))
def test_a_dataset_store_that_is_not_an_event_store(tmp_path, capsys, case) -> None:
    store = STORES[case](tmp_path)
    code, text = run(["ablate", str(_store_definition(tmp_path, store)), "--root",
                      str(tmp_path), "--no-track"], capsys)
    assert_refused(code, text, store.name)
    assert not (tmp_path / "results").exists()


def test_no_arms_is_refused(tmp_path, capsys) -> None:
    definition = _small(tmp_path, "[ablation]\narms = []\n")
    code, text = run(["ablate", str(definition), "--root", str(tmp_path), "--no-track"],
                     capsys)
    assert_refused(code, text, "small.toml", "arms")


def test_a_root_under_a_file(tmp_path, capsys) -> None:
    (tmp_path / "plain").write_text("x")
    code, text = run(["ablate", str(_small(tmp_path)), "--root", str(tmp_path / "plain" / "r"),
                      "--no-track"], capsys)
    assert_refused(code, text, "--root", "is a file, not a folder")


@pytest.mark.parametrize("flag", ["--trials", "--workers"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_count_below_one_is_refused_not_replaced(tmp_path, capsys, flag, value) -> None:
    with pytest.raises(SystemExit) as exc:  # argparse's usage error: exit 2
        main(["tune", str(_small(tmp_path)), "--root", str(tmp_path), "--no-track",
              flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


# ---- scenarios -------------------------------------------------------------------------

def _scenario(tmp_path: Path, edit: Callable[[dict], None] | None = None,
              text: str | None = None) -> Path:
    path = tmp_path / "scenario [bold]x[red].json"
    if text is not None:
        path.write_text(text)
        return path
    raw = json.loads(EXAMPLE.read_text())
    assert edit is not None
    edit(raw)
    path.write_text(json.dumps(raw))
    return path


def _scenario_bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "scenario [bold]x[red].json"
    path.write_bytes(data)
    return path


SCENARIO_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "timestamp overflowing in UTC": (lambda t: _scenario(t, lambda d: d.__setitem__(
        "now", "0001-01-01T00:00:00+05:00")), "$.now"),
    "year beyond 9999": (lambda t: _scenario(t, lambda d: d["memories"][0].__setitem__(
        "created_at", "99999-01-01T00:00:00")), "$.memories[0].created_at"),
    "duplicate key": (lambda t: _scenario(t, text=EXAMPLE.read_text().rstrip()[:-1]
                                          + ', "name": "again"}'), "duplicate key 'name'"),
    "not JSON": (lambda t: _scenario(t, text="{"), "not valid JSON"),
    "not UTF-8": (lambda t: _scenario_bytes(t, b"\xff\xfe{"), "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(SCENARIO_CASES))
def test_a_bad_scenario_names_the_file_and_field(tmp_path, capsys, case) -> None:
    make, needle = SCENARIO_CASES[case]
    path = make(tmp_path)
    code, text = run(["scenario", "run", str(path)], capsys)
    assert_refused(code, text, "scenario [bold]x[red].json", needle)


def test_scenario_out_under_a_file_writes_nothing(tmp_path, capsys) -> None:
    (tmp_path / "plain").write_text("x")
    code, text = run(["scenario", "run", str(SCENARIOS), "--out",
                      str(tmp_path / "plain" / "out")], capsys)
    assert_refused(code, text, "--out", "is a file, not a folder")


# ---- report ------------------------------------------------------------------------------

BUNDLE = (Path(__file__).parent / "fixtures" / "report_bundle"
          / "locomo-fixture-run-20260105-100000")


def test_report_out_under_a_file(tmp_path, capsys) -> None:
    (tmp_path / "plain").write_text("x")
    code, text = run(["report", str(BUNDLE), "--out", str(tmp_path / "plain" / "r")], capsys)
    assert_refused(code, text, "--out", "is a file, not a folder")


@pytest.mark.parametrize("part", ["ablation/per_search/off.parquet", "ablation/summary.parquet",
                                  "test/per_search/tuned.parquet"])
def test_report_names_a_corrupt_parquet_file(tmp_path, capsys, part) -> None:
    bundle = tmp_path / BUNDLE.name
    shutil.copytree(BUNDLE, bundle)
    (bundle / part).write_bytes(b"PAR1 not really parquet")
    code, text = run(["report", str(bundle)], capsys)
    assert_refused(code, text, str(bundle / part), "cannot be read as Parquet")
    assert not (bundle / "report.html").exists()


def test_report_names_a_json_file_that_is_not_text(tmp_path, capsys) -> None:
    bundle = tmp_path / BUNDLE.name
    shutil.copytree(BUNDLE, bundle)
    (bundle / "ablation" / "notes.json").write_bytes(b"\xff\xfe\x00[")
    code, text = run(["report", str(bundle)], capsys)
    assert_refused(code, text, str(bundle / "ablation" / "notes.json"), "not valid JSON")


def test_a_corrupt_cached_replay_names_its_folder(tmp_path, capsys) -> None:
    definition = _small(tmp_path, '[ablation]\narms = ["off", "on-zero"]\n')
    assert main(["ablate", str(definition), "--root", str(tmp_path), "--no-track"]) == 0
    capsys.readouterr()
    [cached, *_] = sorted(tmp_path.glob("runs/**/candidates.parquet"))
    cached.write_bytes(b"garbage")
    code, text = run(["ablate", str(definition), "--root", str(tmp_path), "--no-track"], capsys)
    assert_refused(code, text, str(cached.parent), "a cached replay that cannot be read",
                   "delete the folder")


def test_a_store_that_cannot_be_written_is_exit_2_naming_it(tmp_path, capsys,
                                                            monkeypatch) -> None:
    """The main job's store on a full disk, simulated at the boundary: DuckDB fails the
    commit as it does when the disk is full (a TransactionException; with a real small
    tmpfs below, where mounting is allowed)."""
    from msprlab.datasets import store

    connect = duckdb.connect

    class FullDisk:
        def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
            self._con = con

        def __getattr__(self, name: str):
            return getattr(self._con, name)

        def execute(self, query: str, *args):
            if query == "CHECKPOINT":
                raise duckdb.TransactionException(
                    "TransactionContext Error: Failed to commit: Could not write file "
                    "\"x.wal\": No space left on device")
            return self._con.execute(query, *args)

    monkeypatch.setattr(store.duckdb, "connect", lambda *a, **k: FullDisk(connect(*a, **k)))
    definition = _small(tmp_path)
    code, text = run(["run", str(definition), "--root", str(tmp_path), "--no-track"], capsys)
    assert_refused(code, text, "dataset.store", "small", "No space left on device",
                   "nothing was replaced")
    assert not list(tmp_path.glob("runs/*.duckdb")) and not (tmp_path / "results").exists()


# ---- a full disk (a real one: a 200 KB tmpfs; needs the right to mount) ---------------

@pytest.fixture
def full_disk(tmp_path) -> Path:
    folder = tmp_path / "small"
    folder.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(folder)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root or CAP_SYS_ADMIN)")
    yield folder
    subprocess.run(["umount", str(folder)], check=False)


def test_ingest_on_a_full_disk_replaces_nothing(full_disk, capsys) -> None:
    example = Path(__file__).resolve().parent.parent / "datasets" / "data" / "example_generic"
    code, text = run(["ingest", "generic", str(example), "--store",
                      str(full_disk / "x.duckdb")], capsys)
    assert_refused(code, text, "--store", "No space left on device", "nothing was written")
    assert list(full_disk.iterdir()) == []


def test_report_on_a_full_disk_leaves_no_folder(full_disk, capsys) -> None:
    code, text = run(["report", str(BUNDLE), "--out", str(full_disk / "r")], capsys)
    assert_refused(code, text, "--out", "No space left on device")
    assert list(full_disk.iterdir()) == []


def test_the_main_job_on_a_full_disk_is_exit_2(full_disk, tmp_path, capsys) -> None:
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL.replace('store = "runs/small.duckdb"',
                                        f'store = "{full_disk}/small.duckdb"'))
    code, text = run(["run", str(definition), "--root", str(tmp_path), "--no-track"], capsys)
    assert_refused(code, text, "dataset.store", str(full_disk), "No space left on device")
    assert list(full_disk.iterdir()) == []
