"""The embedded PostgreSQL's password file and pg_hba.conf check (no server: files only).
The server itself: tests/integration/test_embedded_db_closed.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from det.master.db import embedded

# What pgserver's initdb (--auth=trust) leaves, comments dropped.
TRUSTING_HBA = """\
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    all             all             ::1/128                 trust
local   replication     all                                     trust
"""


def test_the_password_is_made_once_readable_by_the_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / embedded.PASSWORD_FILE
    first = embedded._password(path)
    assert len(first) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert embedded._password(path) == first
    assert [p.name for p in path.parent.iterdir()] == [embedded.PASSWORD_FILE]  # no temp left


def test_a_password_file_readable_by_others_is_closed(tmp_path: Path) -> None:
    path = tmp_path / embedded.PASSWORD_FILE
    path.write_text("kept-as-it-is\n")
    path.chmod(0o644)
    assert embedded._password(path) == "kept-as-it-is"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_password_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / embedded.PASSWORD_FILE
    path.write_text("\n")
    with pytest.raises(embedded.EmbeddedDatabaseError, match=f"{path} is empty"):
        embedded._password(path)


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        (embedded.HBA, True),
        ("# a comment\n\nlocal all all scram-sha-256  # ours\n", True),
        (TRUSTING_HBA, False),
        ("local all all md5\n", False),
        (embedded.HBA + "host all all 0.0.0.0/0 scram-sha-256\n", False),
        ("", False),
    ],
)
def test_only_the_masters_one_rule_counts_as_closed(
    tmp_path: Path, text: str, closed: bool
) -> None:
    hba = tmp_path / "pg_hba.conf"
    hba.write_text(text)
    assert embedded._closed(hba) is closed


# Each process: imports what the callers have imported by then (the tests' pg_server fixture,
# the master's start: pgserver, where it is installed), waits for the start time, makes the
# user, prints the uid it then sees.
_MAKE_USER = """
import contextlib, os, pwd, sys, time
with contextlib.suppress(ImportError):
    import pgserver
from det.master.db import embedded
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
embedded.ensure_server_user(sys.argv[1])
print(pwd.getpwnam(sys.argv[1]).pw_uid)
"""


def test_processes_with_their_own_temporary_directories_make_the_server_user_once(
    tmp_path: Path,
) -> None:
    """Four processes, each with a TMPDIR of its own as the test workers have (so pgserver's
    lock, under the runtime directory, is a different file for each), make a missing user at
    the same moment: ``useradd`` runs once (counted by a shim before it on PATH) and each
    process sees the one uid the user keeps. Unlocked, each process ran ``useradd``, each
    call succeeded and replaced the entry with a new uid (a fresh machine's CI: initdb under a
    uid that no longer existed)."""
    import pwd
    import shutil
    import subprocess
    import sys
    import time
    import uuid

    if os.geteuid() != 0:
        pytest.skip("needs root: the function makes a system user only as root")
    real = shutil.which("useradd")
    assert real is not None
    calls = tmp_path / "useradd-calls"
    shim = tmp_path / "bin" / "useradd"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    name = f"dettest{uuid.uuid4().hex[:8]}"
    start = time.time() + 2.0  # after every interpreter has imported det
    procs = []
    for i in range(4):
        tmp = tmp_path / f"tmp{i}"
        tmp.mkdir()
        env = {**os.environ, "TMPDIR": str(tmp), "PATH": f"{shim.parent}:{os.environ['PATH']}"}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _MAKE_USER, name, str(start)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, outs
        assert calls.read_text().splitlines() == [f"-s /bin/bash {name}"]
        final = pwd.getpwnam(name).pw_uid
        assert [int(out) for out, _ in outs] == [final] * 4, outs
    finally:
        for p in procs:
            p.kill()
        subprocess.run(["userdel", name], capture_output=True, check=False)
    with pytest.raises(KeyError):
        pwd.getpwnam(name)
