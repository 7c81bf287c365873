"""The embedded PostgreSQL (the ``pgserver`` package) a master runs when no ``db:`` is configured.

What holds once :func:`start` returns:

* every connection needs the password (scram-sha-256), the Unix socket's included: pg_hba.conf
  holds one ``local`` line and no ``host`` line, so a TCP connection is refused even if someone
  makes the server listen on TCP (pgserver starts it with ``-h ""``: no TCP listener);
* the password is generated at the first start and kept in ``<data_dir>/db_password`` (0600,
  beside ``agent_token``); only its SCRAM verifier reaches the server;
* the data directory and the socket's directory are 0700, owned by the user the server runs as
  (pgserver's ``pgserver`` user when the master runs as root), so another uid cannot even reach
  the socket;
* a data directory made by an earlier det (pgserver's initdb writes ``trust`` for every
  connection) is converted in place: password set, pg_hba.conf replaced, configuration reloaded;
  no row is touched.

pg_hba.conf of the embedded server is the master's: any other content is replaced at start.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.errors import DuplicateDatabase, UniqueViolation
from psycopg.rows import class_row

from det.master.db.connection import connect
from det.master.errors import MasterError

logger = logging.getLogger(__name__)

PASSWORD_FILE = "db_password"
SUPERUSER = "postgres"  # the role pgserver's initdb makes
DATABASE = "determined"
SERVER_USER_WHEN_ROOT = "pgserver"  # PostgreSQL refuses to run as root; pgserver uses this user

HBA = """\
# Written by det's master at each start (det.master.db.embedded): every connection needs the
# password in the master's data_dir/db_password. No "host" line: TCP is refused even if enabled.
# TYPE  DATABASE  USER  METHOD
local   all       all   scram-sha-256
"""

# How long the reloaded pg_hba.conf may take to apply (the postmaster reloads on SIGHUP).
RELOAD_DEADLINE = 10.0


class EmbeddedDatabaseError(MasterError):
    """The embedded PostgreSQL cannot be started closed; the message names the file."""


#: The lock every process of the machine takes to make the server's user (root only). Not
#: pgserver's own lock: that one lives in the user's runtime directory, which falls back to
#: ``$TMPDIR/runtime-<uid>`` without ``XDG_RUNTIME_DIR``, so processes with different temporary
#: directories (the test workers, each with its own) hold different locks.
USER_LOCK = Path("/run/lock/det-server-user.lock")


def _user_lock_file() -> IO[str]:
    """:data:`USER_LOCK` opened; where it cannot be (no /run/lock, a read-only /run), the same
    name in /run, then in the temporary directory (a read-only container's tmpfs)."""
    tried: list[str] = []
    for path in (
        USER_LOCK,
        Path("/run") / USER_LOCK.name,
        Path(tempfile.gettempdir()) / USER_LOCK.name,
    ):
        try:
            return path.open("a")
        except OSError as e:
            tried.append(f"{path}: {e.strerror}")
    raise EmbeddedDatabaseError(f"no lock file for the server's user: {'; '.join(tried)}")


def ensure_server_user(name: str = SERVER_USER_WHEN_ROOT) -> None:
    """As root, makes sure the server's system user ``name`` exists, under a lock of the whole
    machine (:data:`USER_LOCK`). ``useradd`` is not safe to race for one name: on this kind of
    machine each of several concurrent calls succeeds and replaces the entry with a new uid, so
    a process that looked the user up a moment before runs ``initdb`` under a uid that no longer
    exists ("could not look up effective user ID") or on a directory chowned to it (a fresh
    machine's CI: two of three test workers' servers failed so). pgserver calls ``useradd``
    itself when the user is missing, so this runs before any pgserver server starts."""
    if os.geteuid() != 0:
        return
    with _user_lock_file() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-s", "/bin/bash", name], check=True, capture_output=True)


def start(data_dir: Path) -> str:
    """Starts (or reuses) the private PostgreSQL under ``data_dir/postgres``, closed to anyone
    without the password; returns the conninfo of its ``determined`` database (password
    included)."""
    import pgserver  # type: ignore[attr-defined,unused-ignore]

    pgdata = data_dir / "postgres"
    hba = pgdata / "pg_hba.conf"
    password_file = data_dir / PASSWORD_FILE
    if hba.is_file() and _closed(hba) and not password_file.exists():
        raise EmbeddedDatabaseError(
            f"{password_file} is missing and the embedded PostgreSQL in {pgdata} requires its"
            f" password: restore the file (or put `local all all trust` in {hba} once; the"
            " next start sets a new password and closes it again)"
        )
    password = _password(password_file)
    pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not (pgdata / "PG_VERSION").exists():
        with pgserver.postgres_server.PostgresServer._lock:  # the lock pgserver inits under
            if not (pgdata / "PG_VERSION").exists():  # another master may have been first
                _init(pgdata, password)
    ensure_server_user()
    server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined,unused-ignore]
    info = server.get_postmaster_info()
    if info.socket_dir is None:
        raise EmbeddedDatabaseError(f"the embedded PostgreSQL in {pgdata} has no Unix socket")
    socket_dir = Path(info.socket_dir)
    _close_directories(pgdata, socket_dir)
    # Where every connection goes: the socket's directory and the server's port (its name).
    at = make_conninfo(host=str(socket_dir), port=info.port or 5432)
    admin = make_conninfo(at, user=SUPERUSER, password=password, dbname=SUPERUSER)
    if not _closed(hba):
        _close(admin, hba, password)
        _wait_closed(make_conninfo(at, user=SUPERUSER, dbname=SUPERUSER), pgdata)
    try:
        with connect(admin) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if not exists.fetchone():
                # Two masters starting at once: the second's CREATE meets the first's database.
                with contextlib.suppress(DuplicateDatabase, UniqueViolation):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    except psycopg.OperationalError as e:
        if "password authentication failed" in str(e):
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL in {pgdata} refuses the password in {password_file}:"
                f" restore the file it was set from (or put `local all all trust` in {hba} once;"
                " the next start sets this password and closes it again)"
            ) from e
        raise
    return make_conninfo(at, user=SUPERUSER, password=password, dbname=DATABASE)


def _password(path: Path) -> str:
    """The stored password, made now (0600 from creation on) if there is none. Two masters
    starting at once agree: the file appears whole or not at all (a hard link of a full file)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
                logger.info("generated the embedded PostgreSQL's password in %s", path)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    mode = path.stat().st_mode
    if mode & 0o077:
        logger.warning("%s was readable by others (%o): made it 0600", path, mode & 0o777)
        os.chmod(path, 0o600)
    password = path.read_text().strip()
    if not password:
        raise EmbeddedDatabaseError(f"{path} is empty: restore the embedded PostgreSQL's password")
    return password


def _init(pgdata: Path, password: str) -> None:
    """A new cluster, closed from its first start: pgserver's own initdb would trust every local
    connection until :func:`_close` ran. Done as pgserver does it (when we are root: as its
    ``pgserver`` user, which PostgreSQL needs), so that pgserver then only starts it."""
    from pgserver import _commands, utils  # type: ignore[attr-defined,unused-ignore]

    user: str | None = None
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0:
        user = SERVER_USER_WHEN_ROOT
        utils.ensure_user_exists(user)
        entry = pwd.getpwnam(user)
        uid, gid = entry.pw_uid, entry.pw_gid
        # What pgserver does before its own initdb: its user must reach pgdata and the binaries.
        utils.ensure_prefix_permissions(pgdata)
        binaries = Path(_commands.POSTGRES_BIN_PATH)
        readable = stat.S_IRGRP | stat.S_IROTH
        utils.ensure_prefix_permissions(binaries)
        utils.ensure_folder_permissions(binaries, readable | stat.S_IXGRP | stat.S_IXOTH)
        utils.ensure_folder_permissions(binaries.parent / "lib", readable)
        os.chown(pgdata, uid, gid)
    # initdb wants an empty directory and reads the password from a file its user can read.
    secret_dir = Path(tempfile.mkdtemp(prefix=".pginit-", dir=pgdata.parent))
    try:
        pwfile = secret_dir / "password"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
        if user is not None:
            os.chown(secret_dir, uid, gid)
            os.chown(pwfile, uid, gid)
        initdb = getattr(_commands, "initdb")  # noqa: B009 (made at import, one per binary)
        initdb(
            ["--auth=scram-sha-256", "--encoding=utf8", "-U", SUPERUSER, f"--pwfile={pwfile}"],
            pgdata=pgdata,
            user=user,
        )
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
    _replace(pgdata / "pg_hba.conf", HBA)
    logger.info("initialised the embedded PostgreSQL in %s, closed by a password", pgdata)


def _rules(text: str) -> list[list[str]]:
    """pg_hba.conf's rules: comments and blank lines dropped, fields split on whitespace."""
    rules = (line.split("#", 1)[0].split() for line in text.splitlines())
    return [rule for rule in rules if rule]


def _closed(hba: Path) -> bool:
    return _rules(hba.read_text()) == _rules(HBA)


@dataclass(frozen=True)
class _HbaError:
    """A rule of pg_hba.conf the server could not read (``pg_hba_file_rules``)."""

    line_number: int
    error: str


def _close(admin: str, hba: Path, password: str) -> None:
    """Sets the superuser's password (only its SCRAM verifier leaves this process), replaces
    pg_hba.conf and reloads. Works on a server that still trusts every local connection (a
    password offered there is simply not asked for)."""
    with connect(admin) as conn:
        verifier = conn.pgconn.encrypt_password(
            password.encode(), SUPERUSER.encode(), b"scram-sha-256"
        )
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(SUPERUSER), sql.Literal(verifier.decode())
            )
        )
        _replace(hba, HBA)
        errors = (
            conn.cursor(row_factory=class_row(_HbaError))
            .execute("SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL")
            .fetchall()
        )
        if errors:
            raise EmbeddedDatabaseError(f"{hba}: line {errors[0].line_number}: {errors[0].error}")
        conn.execute("SELECT pg_reload_conf()")
    logger.info("the embedded PostgreSQL now requires a password: %s replaced", hba)


def _replace(path: Path, text: str) -> None:
    """Writes ``text`` over ``path`` in one step, keeping its owner (the server's user)."""
    old = path.stat()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
            os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _wait_closed(no_password: str, pgdata: Path) -> None:
    """Returns once a connection without a password is refused (the reload has applied)."""
    # No PGPASSWORD, no ~/.pgpass: an empty password and a password file that does not exist.
    probe = make_conninfo(
        no_password, password="", passfile=str(pgdata / "no-passfile"), connect_timeout=5
    )
    deadline = time.monotonic() + RELOAD_DEADLINE
    while True:
        try:
            connect(probe).close()
        except psycopg.OperationalError as e:
            if "password" in str(e):
                return
            raise
        if time.monotonic() > deadline:
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL in {pgdata} still accepts connections without a"
                f" password {RELOAD_DEADLINE:.0f} s after its pg_hba.conf was replaced"
            )
        time.sleep(0.05)


def _close_directories(pgdata: Path, socket_dir: Path) -> None:
    """pgdata and the socket's directory: 0700, owned by the user the server runs as (pgdata's
    owner: pgserver chowns it to its own user when we are root)."""
    owner = pgdata.stat()
    for path in dict.fromkeys([pgdata, socket_dir]):
        st = path.stat()
        if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid):
            os.chown(path, owner.st_uid, owner.st_gid)
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
