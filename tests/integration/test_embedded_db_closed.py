"""The master's embedded PostgreSQL is closed to anyone without its password (issue 36, item 4).

A task that got the database's directory mounted connected to its socket as superuser: pgserver
writes ``trust`` for every local connection. Now every connection needs the password in
``<data_dir>/db_password``, a cluster made before is converted at start with its rows kept, and
the socket's directory is 0700 (another uid cannot reach it).
"""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from det.master import db
from det.master.db.embedded import ensure_server_user
from tests.docker_support import TASK_IMAGE, docker_client

pytestmark = pytest.mark.integration

PROBE = Path(__file__).with_name("pg_wire_probe.py")


def _stop(pgdata: Path) -> None:
    import pgserver

    pgserver.get_server(pgdata).cleanup()  # type: ignore[attr-defined]


def _socket_dir(conninfo: str) -> Path:
    return Path(str(conninfo_to_dict(conninfo)["host"]))


def _connect(conninfo: str, tmp: Path, **override: str) -> psycopg.Connection[tuple[object, ...]]:
    """``conninfo`` with ``override``; never a password from the environment or ~/.pgpass."""
    params: dict[str, Any] = {**conninfo_to_dict(conninfo), **override}
    return psycopg.connect(**params, passfile=str(tmp / "no-passfile"), connect_timeout=10)


def _private_tmp() -> tempfile.TemporaryDirectory[str]:
    """Not under pytest's basetemp: run as root, pgserver runs the server as its own user, and
    every pytest session that starts meanwhile makes /tmp/pytest-of-root 0700 again."""
    return tempfile.TemporaryDirectory(prefix="det-test-embedded-")


@pytest.fixture
def data_root() -> Iterator[Path]:
    with _private_tmp() as tmp:
        yield Path(tmp)


@pytest.fixture(scope="module")
def embedded() -> Iterator[tuple[Path, str]]:
    """(the master's data_dir, the conninfo ``start_embedded`` gave). The path is long enough
    that pgserver puts the socket outside the data directory (its own runtime directory, which
    it opens to everyone when it runs the server as its ``pgserver`` user)."""
    with _private_tmp() as tmp:
        data = Path(tmp) / ("a-long-data-dir-" + "d" * 80)
        conninfo = db.start_embedded(data)
        socket_dir = _socket_dir(conninfo)
        try:
            yield data, conninfo
        finally:
            _stop(data / "postgres")
            if socket_dir != data / "postgres":
                shutil.rmtree(socket_dir, ignore_errors=True)


def test_the_socket_refuses_the_superuser_without_the_stored_password(
    embedded: tuple[Path, str], tmp_path: Path
) -> None:
    data, conninfo = embedded
    stored = data / "db_password"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    password = stored.read_text().strip()
    assert len(password) >= 32
    assert conninfo_to_dict(conninfo)["password"] == password
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        _connect(conninfo, tmp_path, user="postgres", dbname="postgres", password="")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        _connect(conninfo, tmp_path, user="postgres", dbname="postgres", password="postgres")
    with _connect(conninfo, tmp_path, user="postgres", password=password) as conn:
        row = conn.execute("SELECT current_user, current_database(), rolsuper FROM pg_roles"
                           " WHERE rolname = current_user").fetchone()  # fmt: skip
        assert row == ("postgres", "determined", True)
        # No TCP listener, and no rule that would admit a TCP connection if there were one.
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        rules = conn.execute("SELECT type, auth_method FROM pg_hba_file_rules").fetchall()
        assert rules == [("local", "scram-sha-256")]


def test_the_data_and_socket_directories_are_the_server_users_only(
    embedded: tuple[Path, str],
) -> None:
    data, conninfo = embedded
    pgdata, socket_dir = data / "postgres", _socket_dir(conninfo)
    assert socket_dir != pgdata  # the case where pgserver opens the socket's directory to all
    owner = pgdata.stat().st_uid
    for path in (pgdata, socket_dir):
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, owner), path


def test_a_data_dir_made_trusting_is_closed_at_start_with_its_rows(
    data_root: Path, tmp_path: Path
) -> None:
    import pgserver

    data = data_root / "data"
    pgdata = data / "postgres"
    pgdata.mkdir(parents=True)
    # What det's master did until now: pgserver's initdb (trust), a `determined` database.
    ensure_server_user()
    server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE determined")
    with psycopg.connect(server.get_uri(database="determined")) as conn:
        conn.execute("CREATE TABLE users (id int PRIMARY KEY, username text NOT NULL)")
        conn.execute("INSERT INTO users VALUES (1, 'admin'), (2, 'alice')")
    server.cleanup()  # stopped, as `det deploy local down` leaves it
    try:
        conninfo = db.start_embedded(data)
        with _connect(conninfo, tmp_path) as conn:
            rows = conn.execute("SELECT id, username FROM users ORDER BY id").fetchall()
        assert rows == [(1, "admin"), (2, "alice")]
        with pytest.raises(psycopg.OperationalError, match="no password supplied"):
            _connect(conninfo, tmp_path, password="")
        _stop(pgdata)
        # The next start finds it closed and logs in with the same stored password.
        assert db.start_embedded(data) == conninfo
        with _connect(conninfo, tmp_path) as conn:
            assert conn.execute("SELECT count(*) FROM users").fetchone() == (2,)
    finally:
        _stop(pgdata)


def test_a_missing_password_file_stops_the_start_with_one_line(data_root: Path) -> None:
    data = data_root / "data"
    db.start_embedded(data)
    _stop(data / "postgres")
    (data / "db_password").unlink()
    with pytest.raises(db.embedded.EmbeddedDatabaseError, match="db_password is missing"):
        db.start_embedded(data)


@pytest.mark.docker
def test_a_container_given_the_socket_cannot_log_in_without_the_password(
    embedded: tuple[Path, str],
) -> None:
    """As a task would if an admin mounted the socket's directory into it: as root (which
    passes any directory mode) it reaches the server but cannot log in without the password;
    as another uid it cannot even reach the socket."""
    data, conninfo = embedded
    client = docker_client(TASK_IMAGE)
    socket_dir = _socket_dir(conninfo)
    port = conninfo_to_dict(conninfo).get("port", "5432")
    stored = data / "db_password"
    password = stored.read_text().strip() if stored.exists() else ""  # none before issue 36

    def probe(user: str) -> dict[str, dict[str, object]]:
        out = client.containers.run(
            TASK_IMAGE,
            ["python3", "/probe.py", f"/pg/.s.PGSQL.{port}", "postgres"],
            entrypoint=[],
            user=user,
            network_mode="none",
            environment={"PROBE_PASSWORD": password},
            volumes={
                str(socket_dir): {"bind": "/pg", "mode": "rw"},
                str(PROBE): {"bind": "/probe.py", "mode": "ro"},
            },
            remove=True,
        )
        result: dict[str, dict[str, object]] = json.loads(out.decode().strip().splitlines()[-1])
        return result

    as_root = probe("0:0")
    assert as_root["none"]["connected"] is False, as_root
    assert "asks for a password" in str(as_root["none"]["detail"]), as_root
    assert as_root["wrong"]["connected"] is False, as_root
    assert "28P01" in str(as_root["wrong"]["detail"]), as_root
    assert as_root["right"]["connected"] is True, as_root  # the mount itself works
    other = probe("4242:4242")
    assert {r["stage"] for r in other.values()} == {"socket"}, other
    assert all("PermissionError" in str(r["detail"]) for r in other.values()), other
