"""Exit statuses, defined once, and the one boundary where a failure becomes a message.

0 success; 1 a finding (a regression, a divergence): the only status CI may read as "the
ranking got worse"; 2 bad input or environment, with one plain message saying what was
wrong, where, and what to do; 3 an internal error (a bug), whose traceback goes to a log
file named in the message, or to the terminal with --debug.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.text import Text

from msprlab.datasets.scenario import ScenarioError
from msprlab.datasets.store import StoreConflictError, StoreError
from msprlab.datasets.validate import IngestError

from ..experiment_config import ExperimentError

EXIT_OK, EXIT_FINDING, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

EXIT_HELP = ("exit status: 0 success; 1 a finding (a regression or a divergence); 2 bad "
             "input or environment (the message names what and where); 3 internal error "
             "(a bug in msprlab: the traceback is in the log file the message names, or "
             "printed with --debug)")


class BadInput(Exception):
    """Bad input or environment found by the command line itself (exit 2)."""


# Every error class whose message is written for the user; anything else is a bug.
USER_ERRORS: tuple[type[BaseException], ...] = (
    BadInput, ExperimentError, IngestError, ScenarioError, StoreConflictError, StoreError)

# A quoted value (a repr in a message): the quote opens after a space or bracket and
# closes before punctuation, so the text between two values is never taken for one.
_LONG_VALUE = re.compile(r"""(?<![\w'"])(['"])([^'"\n]{160,})\1(?![\w'"])""")
_KEEP = 60


def cut_long_values(message: str) -> str:
    """A quoted value too long to read is cut, with its length shown."""
    def cut(match: re.Match[str]) -> str:
        quote, value = match.group(1), match.group(2)
        return f"{quote}{value[:_KEEP]}…{quote} ({len(value):,} characters)"
    message = _LONG_VALUE.sub(cut, message)
    if len(message) > 4000:  # an unquoted echo of a huge input: keep both ends
        message = f"{message[:1800]} … [{len(message) - 3600:,} characters cut] … " \
                  f"{message[-1800:]}"
    return message


def print_error(message: object, console: Console | None = None, *,
                label: str = "error") -> None:
    """One plain-text error line: never read as markup, so `[bold]` or `[/x]` in a value
    is shown as typed."""
    console = console or Console(stderr=True)
    line = Text(f"{label}: ", style="red")
    line.append(cut_long_values(str(message)))
    console.print(line, highlight=False, soft_wrap=True)


def writable_file(path: Path, flag: str) -> Path:
    """`path` as a file a command may create or replace, or BadInput naming `flag`: not a
    folder, not under a file, in a folder that can be written (created if missing)."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"{flag} {path}: is a folder; give a file path")
    writable_folder(path.parent, flag, shown=path)
    return path


def writable_folder(path: Path, flag: str, *, shown: Path | None = None) -> Path:
    """`path` as a folder a command may write into (created later if missing), or BadInput
    naming `flag`: no file where a folder must be, the nearest existing folder writable."""
    path = Path(path)
    shown = shown or path
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise BadInput(f"{flag} {shown}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"{flag} {shown}: the folder {existing} cannot be written")
    return path


# An OSError that says the machine, not msprlab, is in the way: exit 2, with the path.
_ENVIRONMENT = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG}


def stdout_console(min_width: int = 120) -> Console:
    """The console a command prints its results on. In a terminal, its width (at least
    min_width); piped or in CI, wide enough that no table cell is cut."""
    probe = Console()
    if probe.is_terminal:
        return Console(width=max(probe.width, min_width))
    return Console(width=100_000, soft_wrap=False)


def run_guarded(func: Callable[[], int], *, debug: bool, stream: TextIO | None = None) -> int:
    """Run a command: user errors become exit 2, bugs exit 3, never a bare traceback."""
    console = Console(file=stream or sys.stderr)
    try:
        code = func()
    except USER_ERRORS as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # argparse and `raise SystemExit("message")`
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print_error(exc.code, console)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print_error("interrupted", console)
        return 130
    except BrokenPipeError:  # `msprlab ... | head`: the reader left; not a failure of ours
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT:
            return _internal(exc, console, debug)
        where = f"{exc.filename}: " if exc.filename else ""
        print_error(f"{where}{exc.strerror or exc}", console)
        return EXIT_BAD_INPUT
    except Exception as exc:  # the boundary: every bug ends here, as exit 3
        return _internal(exc, console, debug)
    return code


def _internal(exc: BaseException, console: Console, debug: bool) -> int:
    if debug:
        traceback.print_exc(file=console.file)
    log = _write_traceback()
    where = "printed above" if debug else f"in {log}" if log else "not saved"
    print_error(f"{type(exc).__name__}: {exc} (a bug in msprlab, not in your input; "
                f"traceback {where}; rerun with --debug to print it)", console,
                label="internal error")
    return EXIT_INTERNAL


def _write_traceback() -> Path | None:
    folder = Path(tempfile.gettempdir())
    path = folder / f"msprlab-internal-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        path.write_text(" ".join(sys.argv) + "\n\n" + traceback.format_exc(), encoding="utf-8")
    except OSError:
        return None
    return path


def _silence_stdout() -> None:
    # Python flushes stdout at exit; a closed pipe would raise again there.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
