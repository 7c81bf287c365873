"""The threaded master (tests/integration/threaded.py): the master's own HTTP front on a real
port in a thread of the test's process, gone with its threads and listener at the end."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
import requests

from tests.integration.threaded import threaded_master

pytestmark = pytest.mark.integration


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_it_serves_the_api_on_a_port_and_leaves_nothing_running(
    tmp_path: Path, migrated_db: str
) -> None:
    before = set(threading.enumerate())
    with threaded_master(tmp_path, migrated_db, loop=True) as m:
        port = int(m.url.rpartition(":")[2])
        info = requests.get(m.url + "/info", timeout=30)
        assert info.status_code == 200
        assert info.headers["Server"] == "det-master"  # the master's front, not a test server
        # a keep-alive connection the client leaves open when the master stops
        kept = requests.Session()
        assert kept.get(m.url + "/info", timeout=30).status_code == 200
        assert m.get("/api/v1/me")["user"]["username"] == "admin"
        names = {t.name for t in threading.enumerate()}
        assert {"det-http-front", "det-control-loop"} <= names
    kept.close()
    assert _refused(port)
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not left, left
