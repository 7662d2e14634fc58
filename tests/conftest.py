"""Shared fixtures: `postgres`, a PostgreSQL server of the test session's own.

The server is Debian's PostgreSQL (`apt-get install postgresql`; its programs live in
/usr/lib/postgresql/VERSION/bin, or give the folder in PG_BINDIR), started with `initdb` and
`pg_ctl` in a temporary folder, listening on a free loopback port only, with trust
authentication for the user `msprlab`, and stopped (and the folder removed) when the
session ends. Tests that take it are marked `postgres`; they are skipped, saying why, where
the programs or the `postgres` extra (psycopg) are missing. As root the server runs as the
`postgres` user (initdb refuses root), or as `nobody`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_BINARIES = ("initdb", "pg_ctl", "createdb")


def _bindir() -> Path | None:
    """The folder holding initdb, pg_ctl and createdb: PG_BINDIR, the PATH, or Debian's
    newest /usr/lib/postgresql/VERSION/bin."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    if found := shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    return versions[-1].parent if versions else None


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Postgres:
    """A running server: `url(db)` names a database on it, `createdb(db)` creates one."""

    host: str
    port: int
    user: str
    bindir: Path

    def url(self, database: str, scheme: str = "postgresql") -> str:
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{database}"

    def createdb(self, database: str) -> str:
        """Create `database` with PostgreSQL's `createdb`, as README's "Scaling out" does;
        returns its URL."""
        subprocess.run([str(self.bindir / "createdb"), "-h", self.host, "-p", str(self.port),
                        "-U", self.user, database], check=True, capture_output=True,
                       timeout=60)
        return self.url(database)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bindir = _bindir()
    if bindir is None or not all((bindir / b).exists() for b in _BINARIES):
        pytest.skip("PostgreSQL's initdb, pg_ctl and createdb were not found (apt-get install "
                    "postgresql: Debian puts them in /usr/lib/postgresql/VERSION/bin; or set "
                    "PG_BINDIR)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install -e '.[postgres]'")
    runas: dict[str, int] = {}
    if os.geteuid() == 0:  # initdb refuses to run as root
        for name in ("postgres", "nobody"):
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                continue
            runas = {"user": entry.pw_uid, "group": entry.pw_gid}
            break
        else:
            pytest.skip("running as root, and neither a postgres nor a nobody user exists to "
                        "run PostgreSQL as")
    folder = Path(tempfile.mkdtemp(prefix="msprlab-pg-"))
    data, log = folder / "data", folder / "server.log"
    if runas:
        os.chown(folder, runas["user"], runas["group"])
    port = free_port()

    def run(*argv: str) -> None:
        done = subprocess.run([str(bindir / argv[0]), *argv[1:]], capture_output=True,
                              text=True, timeout=120, cwd=folder, **runas)  # type: ignore[arg-type]
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            pytest.fail(f"{' '.join(argv[:1])} failed ({done.returncode}): {done.stderr}{tail}")

    try:
        run("initdb", "-D", str(data), "-U", "msprlab", "-A", "trust", "-E", "UTF8",
            "--no-locale", "--no-sync")
        run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
            f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200", "start")
        yield Postgres("127.0.0.1", port, "msprlab", bindir)
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                            "stop"], capture_output=True, timeout=60, cwd=folder, **runas)  # type: ignore[arg-type]
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def contextkit_world_store(tmp_path_factory) -> Path:
    """The committed ContextKit world (tests/fixtures/contextkit_world) ingested with its
    query embedder, at ROOT/runs/contextkit.duckdb (the shipped definition's relative
    store under ROOT): read-only for the tests that share it."""
    from msprlab.experiments.cli import main
    # a copy: opening a Qdrant folder locks it, and other workers read the fixture too
    world = tmp_path_factory.mktemp("world-copy") / "contextkit_world"
    shutil.copytree(Path(__file__).parent / "fixtures" / "contextkit_world", world)
    store = tmp_path_factory.mktemp("world") / "runs" / "contextkit.duckdb"
    assert main(["ingest", "contextkit", "--feedback-db", str(world / "feedback_events.db"),
                 "--success-db", str(world / "query_success.db"),
                 "--graph-jsonl", str(world / "context_graph.jsonl"),
                 "--qdrant-path", str(world / "qdrant"), "--query-embedder", "wordllama",
                 "--store", str(store)]) == 0
    return store
