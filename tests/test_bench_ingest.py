"""`bench_ingest`: too few events for the generated memories is a clear error, not a crash."""

from __future__ import annotations

import pytest
from bench.bench_ingest import generate, main


def test_too_few_events_for_the_memories_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"cannot hold the 1\d\d events of 100 memories"):
        generate(n_memories=100, n_queries=20, n_events=99, dim=4)
    enough = generate(n_memories=100, n_queries=20, n_events=1_000, dim=4)
    assert enough.events.height == 1_000


def test_the_command_line_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--events", "50", "--memories", "100", "--locomo-searches", "0"])
    assert exit_.value.code == 2
    assert "cannot hold the" in capsys.readouterr().err
