"""Secrets in stored configs are masked in every answer, to every user (issue 23, item 4).

One rule (``det.master.expconf.redact``): registry credentials and checkpoint storage keys read
``********`` in templates, experiments, checkpoints, commands, notebooks, TensorBoards and
shells, for their owner, another user and an admin alike. The master's app over PostgreSQL,
in this process (``api_master``); the TensorBoard of the task kinds' test needs the trial the
loop makes, whose passes that test runs in its thread (det.master.loop.run_passes_until). The
interactive tasks stay queued (no agent), which is enough: their configs are stored at launch.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import psycopg
import pytest
import requests

from det.master.loop import run_passes_until
from tests.integration.conftest import MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

PASSWORD, ACCESS, SECRET = "reg-pw-s3cret", "AKIA-ak-s3cret", "sk-s3cret-key"
SECRETS = (PASSWORD, ACCESS, SECRET)
HIDDEN = "********"
CONFIG: dict[str, Any] = {
    "environment": {"registry_auth": {"username": "robot", "password": PASSWORD}},
    "checkpoint_storage": {
        "type": "s3",
        "bucket": "team-bucket",
        "access_key": ACCESS,
        "secret_key": SECRET,
    },
}
EXPERIMENT = f"""
name: masked
entrypoint: python3 train.py
searcher: {{name: single, metric: loss}}
hyperparameters: {{lr: 0.1}}
environment: {{registry_auth: {{username: robot, password: {PASSWORD}}}}}
checkpoint_storage: {{type: s3, bucket: team-bucket, access_key: {ACCESS}, secret_key: {SECRET}}}
"""
# Interactive tasks take no checkpoint_storage (Determined's task configs have none).
TASK_CONFIG: dict[str, Any] = {"environment": CONFIG["environment"]}


def _user(m: MasterClient, name: str) -> requests.Session:
    password = f"{name.title()}-pw-1"
    m.post("/api/v1/users", {"user": {"username": name, "admin": False}, "password": password})
    s = m.session(m.login(name, password))
    s.headers["X-Test-User"] = name
    return s


def _readers(m: MasterClient) -> dict[str, requests.Session]:
    return {"owner": _user(m, "alice"), "other": _user(m, "bob"), "admin": m.session()}


def _ok(r: requests.Response) -> Any:
    assert r.status_code == 200, (r.request.method, r.url, r.status_code, r.text[:500])
    return r.json()


def _masked(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{where}: {s} shown in clear"


def _check_config(config: dict[str, Any], where: str, *, storage: bool = True) -> None:
    auth = config["environment"]["registry_auth"]
    assert (auth["username"], auth["password"]) == ("robot", HIDDEN), where
    if storage:
        cs = config["checkpoint_storage"]
        assert (cs["access_key"], cs["secret_key"], cs["bucket"]) == (HIDDEN, HIDDEN, "team-bucket")


def test_templates_show_secrets_masked_to_their_owner_other_users_and_admins(
    api_master: MasterClient,
) -> None:
    readers = _readers(api_master)
    owner, url = readers["owner"], api_master.url
    created = _ok(owner.post(f"{url}/api/v1/templates/team", json={"config": CONFIG}))
    _check_config(created["template"]["config"], "create")
    for who, s in readers.items():
        r = s.get(f"{url}/api/v1/templates/team", timeout=30)
        _masked(r.text, f"get as {who}")
        _check_config(_ok(r)["template"]["config"], f"get as {who}")
        r = s.get(f"{url}/api/v1/templates", timeout=30)
        _masked(r.text, f"list as {who}")
        (listed,) = [t for t in _ok(r)["templates"] if t["name"] == "team"]
        _check_config(listed["config"], f"list as {who}")


def _stored(pg_url: str, name: str) -> dict[str, Any]:
    with psycopg.connect(pg_url) as c:
        row = c.execute("SELECT config FROM templates WHERE name = %s", (name,)).fetchone()
    assert row is not None
    config: dict[str, Any] = row[0]
    return config


def test_a_template_put_back_as_it_was_read_keeps_its_secrets(
    api_master: MasterClient, pg_url: str
) -> None:
    owner = _user(api_master, "alice")
    url = api_master.url + "/api/v1/templates/team"
    _ok(owner.post(url, json={"config": CONFIG}))
    read = _ok(owner.get(url, timeout=30))["template"]["config"]
    read["checkpoint_storage"]["bucket"] = "other-bucket"
    _ok(owner.patch(url, json=read, timeout=30))  # Determined's client: the config is the body
    stored = _stored(pg_url, "team")
    assert stored["checkpoint_storage"] == {
        **CONFIG["checkpoint_storage"],
        "bucket": "other-bucket",
    }
    assert stored["environment"] == CONFIG["environment"]

    changed = copy.deepcopy(read)
    changed["environment"]["registry_auth"]["password"] = "new-pw"
    _ok(owner.put(url, json={"name": "team", "config": changed}, timeout=30))
    stored = _stored(pg_url, "team")
    assert stored["environment"]["registry_auth"]["password"] == "new-pw"
    assert stored["checkpoint_storage"]["secret_key"] == SECRET


def _experiment(m: MasterClient, owner: requests.Session) -> int:
    body = {"config": EXPERIMENT, "activate": False}
    return int(_ok(owner.post(m.url + "/api/v1/experiments", json=body))["experiment"]["id"])


def test_every_task_kinds_config_is_masked_for_everyone(api_master: InProcessMaster) -> None:
    readers = _readers(api_master)
    owner, url = readers["owner"], api_master.url
    _ok(owner.post(f"{url}/api/v1/templates/team", json={"config": TASK_CONFIG}))
    eid = _experiment(api_master, owner)
    # the TensorBoard needs the experiment's trial, which the control loop makes
    trials = f"/api/v1/experiments/{eid}/trials"
    run_passes_until(api_master.state, lambda: bool(api_master.get(trials)["trials"]), 30)
    launches = {
        "commands": {"config": {**TASK_CONFIG, "entrypoint": ["sleep", "1"]}},
        "notebooks": {"config": TASK_CONFIG},
        "shells": {"templateName": "team"},
        "tensorboards": {"experimentIds": [eid], "templateName": "team"},
    }
    preview = owner.post(f"{url}/api/v1/notebooks", json={**launches["notebooks"], "preview": True})
    _masked(preview.text, "notebook preview")
    _check_config(_ok(preview)["config"], "notebook preview", storage=False)
    for kind, body in launches.items():
        noun = kind.rstrip("s")
        r = owner.post(f"{url}/api/v1/{kind}", json=body, timeout=30)
        _masked(r.text, f"launch of a {noun}")
        launched = _ok(r)
        _check_config(launched["config"], f"launch of a {noun}", storage=False)
        task_id = launched[noun]["id"]
        for who, s in readers.items():
            r = s.get(f"{url}/api/v1/{kind}/{task_id}", timeout=30)
            _masked(r.text, f"{noun} as {who}")
            _check_config(_ok(r)["config"], f"{noun} as {who}", storage=False)
            r = s.get(f"{url}/api/v1/{kind}", timeout=30)
            _masked(r.text, f"{kind} list as {who}")
            _ok(r)


def test_experiments_and_their_checkpoints_are_masked_for_everyone(
    api_master: MasterClient, pg_url: str
) -> None:
    readers = _readers(api_master)
    eid = _experiment(api_master, readers["owner"])
    uid = str(uuid.uuid4())
    with psycopg.connect(pg_url, autocommit=True) as c:
        trial = c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, 'r1', %s, '{\"lr\": 0.1}', 1, 'COMPLETED') RETURNING id",
            (eid, f"masked-{eid}"),
        ).fetchone()
        assert trial is not None
        c.execute(
            "INSERT INTO checkpoints (uuid, trial_id, task_id, steps_completed, resources)"
            " VALUES (%s, %s, %s, 1, '{}')",
            (uid, trial[0], f"masked-{eid}"),
        )
    url = api_master.url
    for who, s in readers.items():
        for path in (
            f"/api/v1/experiments/{eid}",
            "/api/v1/experiments",
            f"/api/v1/checkpoints/{uid}",
            f"/api/v1/experiments/{eid}/checkpoints",
        ):
            r = s.get(url + path, timeout=30)
            _masked(r.text, f"{path} as {who}")
            _ok(r)
        got = _ok(s.get(f"{url}/api/v1/experiments/{eid}", timeout=30))
        _check_config(got["config"], f"experiment as {who}")
        ckpt = _ok(s.get(f"{url}/api/v1/checkpoints/{uid}", timeout=30))["checkpoint"]
        _check_config(ckpt["training"]["experimentConfig"], f"checkpoint as {who}")
