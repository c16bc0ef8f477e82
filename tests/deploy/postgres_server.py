"""A real PostgreSQL server for the tests: Debian's `postgresql` binaries (the Makefile
installs them), a new cluster in a temporary folder, listening on 127.0.0.1 on a free port,
stopped and removed afterwards."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def postgres_bin() -> Path | None:
    """The newest installed server's binaries (/usr/lib/postgresql/<major>/bin), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


@dataclass
class Server:
    port: int
    user: str
    password: str
    createdb: Path

    def new_database(self, name: str) -> dict[str, str]:
        """Creates an empty database; the environment deploy/postgres/dagster.yaml reads to use it."""
        subprocess.run([str(self.createdb), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name],
                       check=True, capture_output=True, env={**os.environ, "PGPASSWORD": self.password})
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USERNAME": self.user,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": name}


def _as_server_user(command: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root: as root, run them as Debian's postgres user
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def loopback_postgres() -> Iterator[Server]:
    binaries = postgres_bin()
    assert binaries is not None, "no PostgreSQL server binaries under /usr/lib/postgresql"
    # not under pytest's tmp_path: that is private to root, and the server runs as postgres
    root = Path(tempfile.mkdtemp(prefix="pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    password = secrets.token_hex(16)
    (root / "password").write_text(password)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        for path in (sockets, root / "password"):
            shutil.chown(path, "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = Server(port=port, user="dagster", password=password, createdb=binaries / "createdb")
    subprocess.run(_as_server_user([str(binaries / "initdb"), "-D", str(data), "-U", server.user, "-E", "UTF8",
                                    "--auth=scram-sha-256", f"--pwfile={root / 'password'}"]),
                   check=True, capture_output=True)
    options = f"-h 127.0.0.1 -p {port} -k {sockets} -c max_connections=200"
    subprocess.run(_as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                                    str(root / "server.log"), "-w", "-t", "60", "start"]),
                   check=True, capture_output=True)
    try:
        yield server
    finally:
        subprocess.run(_as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
