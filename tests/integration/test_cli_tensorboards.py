"""``det tensorboard``: start (over an experiment's or trials' TensorBoard files), list, open,
kill against the master's app in this process (the control loop's passes run in the test's
thread where a state must move: det.master.loop.run_passes_until); bad ids are refused with a line naming them and launch nothing.
Serving the files through the proxy is tested on real Docker (tests/e2e/test_tensorboards.py)."""

from __future__ import annotations

import pytest
import requests

from det.master.loop import run_passes_until
from tests.integration import cli_support
from tests.integration.cli_support import Det, create_via_api, sim_config, trials
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration
cli_master = cli_support.in_process_cli_master
det = cli_support.det


def test_tensorboard_refuses_bad_ids_and_launches_nothing(
    det: Det, cli_master: InProcessMaster
) -> None:
    det.login()
    r = det("tensorboard", "start")
    assert r.rc != 0 and "experiment ids or --trial-ids" in r.err, r.err
    r = det("tensorboard", "start", "987654")
    assert r.rc != 0 and "no experiment 987654" in r.err, r.err
    r = det("tensorboard", "start", "-t", "987654", "987655")
    assert r.rc != 0 and "no trial 987654, 987655" in r.err, r.err
    bad = requests.post(
        f"{cli_master.url}/api/v1/tensorboards",
        json={"filters": {"name": "x"}},
        headers={"Authorization": f"Bearer {cli_master.token}"},
        timeout=10,
    )
    assert bad.status_code == 400 and "filters" in bad.json()["message"]
    many = requests.post(
        f"{cli_master.url}/api/v1/tensorboards",
        json={"experimentIds": list(range(1, 102))},
        headers={"Authorization": f"Bearer {cli_master.token}"},
        timeout=10,
    )
    assert many.status_code == 400 and "at most 100 trials" in many.json()["message"]
    assert cli_master.get("/api/v1/tensorboards")["tensorboards"] == []


def test_tensorboard_start_list_open_kill(det: Det, cli_master: InProcessMaster) -> None:
    det.login()
    eid = create_via_api(cli_master, sim_config("tb-exp", trials=2))
    run_passes_until(cli_master.state, lambda: len(trials(cli_master, eid)) == 2, 30)
    tid = det.ok("tensorboard", "start", str(eid), "--detach").out.strip()
    tb = cli_master.get(f"/api/v1/tensorboards/{tid}")["tensorboard"]
    assert tb["experimentIds"] == [eid] and tb["trialIds"] == []
    assert tb["serviceAddress"] == f"/proxy/{tid}/"
    assert tb["description"].startswith("TensorBoard (")

    one = trials(cli_master, eid)[0]["id"]
    by_trial = det.ok("tensorboard", "start", "-t", str(one), "--detach").out.strip()
    assert cli_master.get(f"/api/v1/tensorboards/{by_trial}")["tensorboard"]["trialIds"] == [one]

    listed = det.ok("tensorboard", "list", "--json").json()
    assert sorted(t["id"] for t in listed) == sorted([tid, by_trial])
    config = det.ok("tensorboard", "config", tid).out
    assert "resources:" in config and "slots: 0" in config, config
    det.ok("tensorboard", "set", "priority", tid, "7")
    job = cli_master.get(f"/api/v1/tensorboards/{tid}")["tensorboard"]["jobId"]
    jobs = cli_master.get("/api/v1/job-queues-v2")["jobs"]
    assert [j["full"]["priority"] for j in jobs if j["full"]["jobId"] == job] == [7]
    opened = det.ok("tensorboard", "open", tid, "--no-browser").out.strip()
    assert opened.endswith(f"/proxy/{tid}/"), opened

    det.ok("tensorboard", "kill", tid, by_trial)
    run_passes_until(
        cli_master.state,
        lambda: all(
            cli_master.get(f"/api/v1/tensorboards/{t}")["tensorboard"]["state"]
            == "STATE_TERMINATED"
            for t in (tid, by_trial)
        ),
        30,
    )
    r = det("tensorboard", "open", tid, "--no-browser")
    assert r.rc != 0 and "has ended" in r.err
