"""`bench_scenario`: the runner's timed parts add up, and the bench runs without the library."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.bench_scenario import main, run_runner, scenario_document, write_scenario


def test_the_scenario_is_seeded_and_holds_the_searches_asked_for() -> None:
    document = scenario_document(200, 7)
    assert document == scenario_document(200, 7)
    assert len(document["memories"]) == 200
    assert sum(e["type"] == "search" for e in document["events"]) == 7


def test_the_runner_round_times_its_parts(tmp_path: Path) -> None:
    path, searches = write_scenario(tmp_path, 200, 5)
    times = run_runner(path, tmp_path / "out")
    assert searches == 5 and times.output.is_file()
    assert 0 < times.build <= times.replay
    assert 0 < times.searches <= times.replay
    assert times.load + times.replay + times.write <= times.total
    assert times.parse > 0 and times.dumps > 0   # the stdlib references beside load and write


def test_without_the_library_the_figure_is_a_reference(
        capsys: pytest.CaptureFixture[str]) -> None:
    main(["--memories", "200", "--searches", "3", "--rounds", "1", "--no-library"])
    out = capsys.readouterr().out
    assert "reference, NOT measured" in out and "load + validate" in out
    assert "x json.dumps(indent=1) of the same document" in out
