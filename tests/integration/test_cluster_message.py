"""Cluster messages (issue 27 item 4) and the master's log level at run time (item 6): the wire
(Determined's GetClusterMessage, SetClusterMessage, DeleteClusterMessage, GetMaster's
``clusterMessage``, PatchMasterConfig), the official ``determined==0.38.1`` CLI, det's CLI, and
every master process applying a new log level without a restart."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.compat.official import ensure_official_venv
from tests.integration import cli_support
from tests.integration.cli_support import Det
from tests.integration.conftest import ADMIN_PASSWORD, Master, wait_for
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration
cli_master = cli_support.cli_master
det = cli_support.det

MSG = "/api/v1/master/cluster_message"


def _call(m: Master, method: str, path: str, token: str | None = None, **kw: Any) -> Any:
    headers = {"Authorization": f"Bearer {token or m.token}"}
    return requests.request(method, m.url + path, headers=headers, timeout=30, **kw)


def _user_token(m: Master, name: str) -> str:
    r = _call(
        m, "POST", "/api/v1/users", json={"user": {"username": name}, "password": "Pw-1234567"}
    )
    assert r.status_code in (200, 409), r.text
    return m.login(name, "Pw-1234567")


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(autouse=True)
def _cleared(cli_master: Master) -> Any:
    yield
    _call(cli_master, "DELETE", MSG)


def test_admin_sets_every_user_reads_admin_clears(cli_master: Master) -> None:
    m = cli_master
    user = _user_token(m, "msg-reader")
    assert _call(m, "GET", MSG, user).json() == {}
    r = _call(m, "PUT", MSG, json={"message": "maintenance at 18:00", "duration": "2h"})
    assert r.status_code == 200, r.text
    got = _call(m, "GET", MSG, user).json()["clusterMessage"]
    assert got["message"] == "maintenance at 18:00"
    start = dt.datetime.fromisoformat(got["startTime"].replace("Z", "+00:00"))
    end = dt.datetime.fromisoformat(got["endTime"].replace("Z", "+00:00"))
    assert end - start == dt.timedelta(hours=2)
    # GetMaster (unauthenticated, as in Determined) carries it too.
    info = wait_for(
        lambda: requests.get(m.url + "/api/v1/master", timeout=10).json().get("clusterMessage"),
        timeout=30,
        what="the message in GetMaster",
    )
    assert info["message"] == "maintenance at 18:00"
    # A user may neither set nor clear it.
    assert _call(m, "PUT", MSG, user, json={"message": "mine"}).status_code == 403
    assert _call(m, "DELETE", MSG, user).status_code == 403
    assert _call(m, "GET", MSG, user).json()["clusterMessage"]["message"] == "maintenance at 18:00"
    assert _call(m, "DELETE", MSG).status_code == 200
    assert _call(m, "GET", MSG, user).json() == {}


def test_message_shows_only_between_start_and_end(cli_master: Master) -> None:
    m = cli_master
    now = dt.datetime.now(dt.UTC)
    later = {"message": "later", "startTime": _iso(now + dt.timedelta(hours=1))}
    assert _call(m, "PUT", MSG, json=later).status_code == 200
    assert _call(m, "GET", MSG).json() == {}
    ended = {
        "message": "soon over",
        "startTime": _iso(now - dt.timedelta(hours=1)),
        "endTime": _iso(now + dt.timedelta(seconds=3)),
    }
    assert _call(m, "PUT", MSG, json=ended).status_code == 200
    assert _call(m, "GET", MSG).json()["clusterMessage"]["message"] == "soon over"
    wait_for(lambda: _call(m, "GET", MSG).json() == {}, timeout=60, what="the end")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": "x" * 251}, "message: must be at most 250 characters"),
        ({"message": "  "}, "message: must not be empty"),
        ({}, "message: must not be empty"),
        (
            {
                "message": "a",
                "startTime": "2030-01-02T00:00:00Z",
                "endTime": "2030-01-01T00:00:00Z",
            },
            "endTime: must be after startTime",
        ),
        ({"message": "a", "startTime": "tomorrow"}, "startTime: must be an RFC 3339 timestamp"),
        ({"message": "a", "duration": "soon"}, "duration: must be a duration"),
        ({"message": "a", "duration": "1h", "endTime": "2030-01-01T00:00:00Z"}, "endTime: give"),
        ({"message": "a", "endTime": "2001-01-01T00:00:00Z"}, "endTime: must be after startTime"),
    ],
)
def test_bad_message_is_refused_naming_the_field_and_changes_nothing(
    cli_master: Master, body: dict[str, Any], field: str
) -> None:
    m = cli_master
    assert _call(m, "PUT", MSG, json={"message": "kept"}).status_code == 200
    r = _call(m, "PUT", MSG, json=body)
    assert r.status_code == 400, r.text
    assert field in r.json()["message"], r.text
    assert _call(m, "GET", MSG).json()["clusterMessage"]["message"] == "kept"


def test_official_cli_sets_gets_and_clears(cli_master: Master, tmp_path: Path) -> None:
    o = Official(ensure_official_venv(), cli_master, tmp_path)
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    o("master", "cluster-message", "set", "-m", "upgrade tonight", "-d", "1d")
    got = json.loads(o("master", "cluster-message", "get", "--json"))
    assert got["clusterMessage"]["message"] == "upgrade tonight"
    assert "upgrade tonight" in o("master", "info")  # GetMaster's clusterMessage in the bindings
    o("master", "cluster-message", "clear")
    assert json.loads(o("master", "cluster-message", "get", "--json")) == {"clusterMessage": None}
    bad = o.run("master", "cluster-message", "set", "-m", "x" * 300)
    assert bad.returncode != 0 and "at most 250 characters" in bad.stderr + bad.stdout

    o("master", "config", "set", "--log.level", "DEBUG")
    shown = o("master", "config", "show", "--json")
    assert json.loads(shown)["log"]["level"] == "debug"
    o("master", "config", "set", "--log.level", "INFO")
    assert json.loads(o("master", "config", "show", "--json"))["log"]["level"] == "info"


def test_our_cli_verbs_and_the_message_on_stderr(cli_master: Master, det: Det) -> None:
    det.login()
    det.ok("master", "cluster-message", "set", "-m", "read the wiki", "--duration", "90m")
    r = det.ok("master", "cluster-message", "get")
    assert "read the wiki" in r.out
    # Every command that checks its session prints the active message on stderr, output intact.
    r = det.ok("master", "cluster-message", "get", "--json")
    assert "cluster message: read the wiki" in r.err
    assert json.loads(r.out)["clusterMessage"]["message"] == "read the wiki"
    r = det("master", "cluster-message", "set", "-m", "b", "--end", "2001-01-01T00:00:00Z")
    assert r.rc != 0 and "endTime: must be after startTime" in r.err
    det.ok("master", "cluster-message", "clear")
    r = det.ok("master", "cluster-message", "get")
    assert "no cluster message" in r.out and "cluster message:" not in r.err

    det.ok("master", "config", "set", "--log-level", "warning")
    assert json.loads(det.ok("master", "config", "--json").out)["log"]["level"] == "warning"
    det.ok("master", "config", "set", "--log-level", "info")
    r = det("master", "config", "set", "--log-level", "loud")
    assert r.rc != 0


def test_only_admins_patch_the_config_and_bad_levels_are_refused(cli_master: Master) -> None:
    m = cli_master
    user = _user_token(m, "cfg-user")
    body = {"config": {"log": {"level": "LOG_LEVEL_DEBUG"}}, "fieldMask": {"paths": ["log.level"]}}
    assert _call(m, "PATCH", "/api/v1/master/config", user, json=body).status_code == 403
    bad = {
        "config": {"log": {"level": "LOG_LEVEL_UNSPECIFIED"}},
        "fieldMask": {"paths": ["log.level"]},
    }
    r = _call(m, "PATCH", "/api/v1/master/config", json=bad)
    assert r.status_code == 400 and "config.log.level" in r.json()["message"]
    r = _call(m, "PATCH", "/api/v1/master/config", json={**body, "fieldMask": {"paths": ["port"]}})
    assert r.status_code == 400 and "fieldMask.paths" in r.json()["message"]
    r = _call(m, "PATCH", "/api/v1/master/config", json={"config": body["config"]})
    assert r.status_code == 400 and "fieldMask.paths" in r.json()["message"]
    assert m.get("/api/v1/master/config")["config"]["log"]["level"] == "info"


_APPLIED = re.compile(r"DEBUG det\.master\.services\.master_settings: process (\d+) logs at DEBUG")


def test_every_master_process_applies_a_new_level_without_restart(master_factory: Any) -> None:
    m: Master = master_factory(extra={"api_processes": 2, "user_api_processes": 2})
    pids = {m.proc.pid} | _children(m.proc.pid)
    assert len(pids) == 4, pids
    assert not _APPLIED.search(m.logs())
    body = {"config": {"log": {"level": "LOG_LEVEL_DEBUG"}}, "fieldMask": {"paths": ["log.level"]}}
    r = _call(m, "PATCH", "/api/v1/master/config", json=body)
    assert r.status_code == 200, r.text
    # Each process writes a DEBUG line once it logs at DEBUG: all four, none restarted.
    wait_for(
        lambda: {int(p) for p in _APPLIED.findall(m.logs())} == pids,
        timeout=60,
        what="every master process at DEBUG",
    )
    assert {m.proc.pid} | _children(m.proc.pid) == pids
    assert m.get("/api/v1/master/config")["config"]["log"]["level"] == "debug"

    # A second master on the same database (its master.yaml says info) takes the stored level.
    m2: Master = master_factory(name="second", extra={"user_api_processes": 0})
    wait_for(
        lambda: [int(p) for p in _APPLIED.findall(m2.logs())] == [m2.proc.pid],
        timeout=60,
        what="the second master at DEBUG",
    )


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out
