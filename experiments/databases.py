"""Database URLs as msprlab hands them to SQLAlchemy (Optuna's RDB storage, MLflow's store).

PostgreSQL goes through psycopg 3 (the `postgres` extra: `pip install -e '.[postgres]'`).
SQLAlchemy reads a bare `postgresql://` as psycopg2, a driver msprlab does not install, so
`sqlalchemy_url` spells the driver out; a URL that names one (`postgresql+psycopg2://`) is
left as it is.
"""

from __future__ import annotations

import re

from .errors import redact_url

__all__ = ["POSTGRES_EXTRA", "driver_hint", "redact_url", "sqlalchemy_url"]

POSTGRES_EXTRA = "pip install -e '.[postgres]'"
_BARE_POSTGRES = re.compile(r"^(?:postgresql|postgres)://", re.IGNORECASE)
# The package to install for each database dialect SQLAlchemy cannot load a driver for.
_DRIVERS = {"postgresql": f"{POSTGRES_EXTRA} (psycopg 3)", "postgres": f"{POSTGRES_EXTRA} "
            "(psycopg 3)", "mysql": "PyMySQL"}


def sqlalchemy_url(url: str) -> str:
    """`url` with PostgreSQL's driver named: `postgresql://` and `postgres://` (the alias
    some hosting services print, which SQLAlchemy refuses) become `postgresql+psycopg://`.

    >>> sqlalchemy_url("postgresql://tuner@db.lan:5432/studies")
    'postgresql+psycopg://tuner@db.lan:5432/studies'
    >>> sqlalchemy_url("postgresql+psycopg2://h/db"), sqlalchemy_url("sqlite:///x.db")
    ('postgresql+psycopg2://h/db', 'sqlite:///x.db')
    """
    return _BARE_POSTGRES.sub("postgresql+psycopg://", url, count=1)


def driver_hint(url: str) -> str:
    """What to install when SQLAlchemy finds no driver for `url`'s dialect."""
    dialect = url.split("://", 1)[0].split("+", 1)[0].lower()
    return _DRIVERS.get(dialect, "the SQLAlchemy driver for it")
