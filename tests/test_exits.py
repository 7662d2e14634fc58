"""The command line's one boundary: bad input is exit 2 with a plain message, a bug is
exit 3 with its traceback saved (or printed with --debug), never a bare traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import msprlab.experiments.cli.parser as cli
from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    BadInput,
    cut_long_values,
)


def _boom(args) -> int:
    raise RuntimeError("planted bug")


def test_a_bug_is_exit_3_with_its_traceback_in_a_named_log(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "cmd_demo", _boom)
    assert cli.main(["demo"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: planted bug" in err
    assert "Traceback" not in err
    log = Path(re.search(r"traceback in (\S+\.log)", " ".join(err.split())).group(1))
    assert "RuntimeError: planted bug" in log.read_text()
    log.unlink()


def test_debug_prints_the_traceback(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "cmd_demo", _boom)
    assert cli.main(["--debug", "demo"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "planted bug" in err


def test_a_user_error_escaping_a_command_is_exit_2(monkeypatch, capsys) -> None:
    def refuse(args) -> int:
        raise BadInput("demo: the folder x is read-only")
    monkeypatch.setattr(cli, "cmd_demo", refuse)
    assert cli.main(["demo"]) == EXIT_BAD_INPUT
    assert "error: demo: the folder x is read-only" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["exp[/x].toml", "exp[bold]y[/bold].toml", "a[/].toml"])
def test_markup_in_a_value_is_shown_as_typed(tmp_path, capsys, name) -> None:
    path = tmp_path / name
    code = cli.main(["ablate", str(path), "--root", str(tmp_path), "--no-track"])
    out = capsys.readouterr()
    text = "".join((out.out + out.err).split())
    assert code == EXIT_BAD_INPUT
    assert "".join(str(path).split()) in text
    assert "Traceback" not in text


def test_a_long_value_is_cut_with_its_length() -> None:
    value = "q" * 5000
    message = cut_long_values(f"query id {value!r} in row 7 contains whitespace")
    assert len(message) < 200
    assert "(5,000 characters)" in message and "in row 7" in message
    # short values and the text between two values stay whole
    short = "unknown metric 'bpref'; accepted: " + "x" * 300 + " 'ndcg'"
    assert cut_long_values(short) == short


def test_help_names_every_exit_status(capsys) -> None:
    for argv in (["--help"], ["regress", "--help"], ["ingest", "--help"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "1 a finding" in text and "2 bad input" in text and "3 internal error" in text


def test_piped_output_is_never_cut(tmp_path) -> None:
    """In a CI log (stdout not a terminal) no table cell is cut to fit 80 columns."""
    import subprocess
    import sys

    from test_experiments import SMALL
    definition = tmp_path / "small.toml"
    definition.write_text(SMALL)
    done = subprocess.run([sys.executable, "-m", "msprlab.experiments.cli", "ablate",
                           str(definition), "--root", str(tmp_path), "--no-track"],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    assert "frequency" in done.stdout and "on-zero" in done.stdout
