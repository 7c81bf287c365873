"""The read paths of issue 14: the sampled metric series (Determined's CompareTrials), the metric
rows passed through as PostgreSQL builds them, what the experiment list carries, and
conditional reads (ETag / If-None-Match). On the master's app in this process (``api_master``;
the searcher's trial made by the loop's passes in the test's thread) but for the official
client's parse, a process of its own, which calls the app served on a port by a thread of this
process (``threaded_master``), and a 304's kept connection, which needs a master process: its
user API processes' channels, to which the front hands the connection."""

from __future__ import annotations

import http.client
import itertools
import json
import subprocess
from typing import Any

import psycopg
import pytest
import requests

from det.master.loop import run_passes_until
from tests.compat.official import ensure_official_venv
from tests.integration.conftest import Master, MasterClient
from tests.integration.inproc import InProcessMaster
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: reads
entrypoint: python3 train.py
searcher: {name: single, metric: loss, smaller_is_better: true}
hyperparameters: {lr: 0.1}
"""


def _trials(pg_url: str, experiment_id: int, n: int) -> list[int]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        return [
            r[0]
            for r in c.execute(
                "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
                " SELECT %s, 'r' || g, 'reads-' || %s || '-' || g, '{\"lr\": 0.1}', g, 'PAUSED'"
                " FROM generate_series(1, %s) g RETURNING id",
                (experiment_id, experiment_id, n),
            )
        ]


def _experiment(m: MasterClient) -> int:
    out = m.post("/api/v1/experiments", {"config": CONFIG, "activate": False})
    return int(out["experiment"]["id"])


def _report(m: MasterClient, trial: int, group: str, steps: range, **extra: float) -> None:
    reports = [
        {
            "group": group,
            "trialRunId": 1,
            "stepsCompleted": s,
            "metrics": {"avgMetrics": {"loss": 1.0 / s, "acc": s / 100, **extra}},
        }
        for s in steps
    ]
    m.post(f"/api/v1/trials/{trial}/metrics/batch", {"reports": reports})


def _compare(m: MasterClient, **params: Any) -> Any:
    r = m.session().get(f"{m.url}/api/v1/trials/time-series", params=params, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_compare_trials_samples_each_series_keeping_first_and_last(
    api_master: MasterClient, pg_url: str
) -> None:
    m = api_master
    eid = _experiment(m)
    t1, t2, t3 = _trials(pg_url, eid, 3)
    _report(m, t1, "training", range(1, 101))
    _report(m, t2, "training", range(1, 6))
    _report(m, t1, "validation", range(10, 101, 10))

    out = _compare(
        m, trialIds=[t2, t1, t3], metricNames=["loss"], maxDatapoints=10, group="training"
    )
    assert [c["trial"]["id"] for c in out["trials"]] == [t2, t1, t3]  # the order asked
    by_id = {c["trial"]["id"]: c for c in out["trials"]}
    (series,) = by_id[t1]["metrics"]
    assert series["group"] == "training" and series["type"] == "METRIC_TYPE_TRAINING"
    batches = [p["batches"] for p in series["data"]]
    assert len(batches) == 10 and batches[0] == 1 and batches[-1] == 100
    assert batches == sorted(batches) and len(set(batches)) == 10
    gaps = [b - a for a, b in itertools.pairwise(batches)]
    assert max(gaps) - min(gaps) <= 1  # evenly spaced
    assert series["data"][0]["values"] == {"loss": 1.0}  # only the metrics asked
    assert series["data"][0]["time"].endswith("Z")
    # Fewer rows than asked for: every one of them.
    assert [p["batches"] for p in by_id[t2]["metrics"][0]["data"]] == [1, 2, 3, 4, 5]
    assert by_id[t3]["metrics"] == []  # no reports: no series

    # No group: training and validation (as Determined keeps it for old clients).
    both = _compare(m, trialIds=[t1], metricNames=["loss"], maxDatapoints=3)
    groups = {s["group"]: [p["batches"] for p in s["data"]] for s in both["trials"][0]["metrics"]}
    assert groups == {"training": [1, 51, 100], "validation": [10, 60, 100]}

    # metricIds, a batch range and a filter on batches.
    ids = _compare(
        m,
        trialIds=[t1],
        metricIds=["training.acc"],
        startBatches=20,
        endBatches=40,
        maxDatapoints=100,
        **{"timeSeriesFilter.integerRange.notIn": [30]},
    )
    data = ids["trials"][0]["metrics"][0]["data"]
    assert [p["batches"] for p in data] == [b for b in range(20, 41) if b != 30]
    assert data[0]["values"] == {"acc": 0.2}

    # A filter on a metric's value (the double range, as the official client sends it).
    low = _compare(
        m,
        trialIds=[t1],
        metricNames=["loss"],
        group="training",
        **{"timeSeriesFilter.name": "loss", "timeSeriesFilter.doubleRange.lt": 0.02},
    )
    assert [p["batches"] for p in low["trials"][0]["metrics"][0]["data"]] == list(range(51, 101))


def test_compare_trials_answers_a_new_report_at_once(api_master: MasterClient, pg_url: str) -> None:
    """Each API process keeps sampled series while their trial is unchanged
    (det.master.seriescache); a report, or a first report, shows in the very next read, in
    whichever process answers it."""
    m = api_master
    t1, t2, t3 = _trials(pg_url, _experiment(m), 3)
    _report(m, t1, "training", range(1, 101))
    _report(m, t2, "training", range(1, 11))

    def last_batches() -> dict[int, int | None]:
        out = _compare(
            m, trialIds=[t1, t2, t3], metricNames=["loss"], maxDatapoints=10, group="training"
        )
        return {
            c["trial"]["id"]: c["metrics"][0]["data"][-1]["batches"] if c["metrics"] else None
            for c in out["trials"]
        }

    for _ in range(6):  # new connections: both user processes answer and keep the series
        assert last_batches() == {t1: 100, t2: 10, t3: None}
    _report(m, t1, "training", range(101, 121))
    _report(m, t3, "training", range(1, 3))
    for _ in range(6):
        assert last_batches() == {t1: 120, t2: 10, t3: 2}


def test_compare_trials_spreads_points_over_the_batches_not_the_rows(
    api_master: MasterClient, pg_url: str
) -> None:
    """Sampled by batches: a dense stretch does not take the points a chart's x axis needs."""
    m = api_master
    (t,) = _trials(pg_url, _experiment(m), 1)
    _report(m, t, "training", range(1, 51))
    _report(m, t, "training", range(1000, 1050))
    out = _compare(m, trialIds=[t], metricNames=["loss"], maxDatapoints=10, group="training")
    # Buckets of ~117 batches from 1 to 1049: the first's first row, the one bucket reaching
    # 1000's first, and the last row (the empty buckets give nothing).
    batches = [p["batches"] for p in out["trials"][0]["metrics"][0]["data"]]
    assert batches == [1, 1000, 1049]
    # A metric only some rows carry: the rows that carry it, spread the same way.
    _report(m, t, "training", range(2000, 2101, 20), rare=1.0)
    rare = _compare(m, trialIds=[t], metricNames=["rare"], maxDatapoints=3, group="training")
    assert [p["batches"] for p in rare["trials"][0]["metrics"][0]["data"]] == [2000, 2060, 2100]
    one = _compare(m, trialIds=[t], metricNames=["loss"], maxDatapoints=1, group="training")
    assert [p["batches"] for p in one["trials"][0]["metrics"][0]["data"]] == [1]


def test_compare_trials_refuses_bad_requests(api_master: MasterClient, pg_url: str) -> None:
    m = api_master
    (t,) = _trials(pg_url, _experiment(m), 1)
    s = m.session()

    def status(**params: Any) -> int:
        return s.get(f"{m.url}/api/v1/trials/time-series", params=params, timeout=30).status_code

    assert status(metricNames=["loss"]) == 400  # no trials
    assert status(trialIds=[t], metricNames=["loss"], metricIds=["training.loss"]) == 400
    assert status(trialIds=[t], metricIds=["loss"]) == 400  # not group.name
    assert status(trialIds=[t + 1000], metricNames=["loss"]) == 404


def test_official_client_parses_compare_trials(
    threaded_master: ThreadedMaster, pg_url: str
) -> None:
    m = threaded_master
    eid = _experiment(m)
    (t,) = _trials(pg_url, eid, 1)
    _report(m, t, "training", range(1, 21), epoch=0.5)
    bin_dir = ensure_official_venv()
    script = f"""
import json, warnings
warnings.simplefilter("ignore")
from determined.common import api
from determined.common.api import authentication, bindings
from determined.experimental import client
client.login(master={m.url!r}, user="admin", password={json.dumps(_password())})
session = client._determined._session
r = bindings.get_CompareTrials(session, trialIds=[{t}], metricNames=["loss"],
    metricType=bindings.v1MetricType.TRAINING, maxDatapoints=5)
(c,) = r.trials
(s,) = c.metrics
print(json.dumps({{"trial": c.trial.id, "batches": [p.batches for p in s.data],
    "epoch": s.data[0].epoch, "values": s.data[-1].values}}))
"""
    out = subprocess.run(
        [str(bin_dir / "python"), "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {
        "trial": t,
        "batches": [1, 6, 11, 16, 20],
        "epoch": 0.5,
        "values": {"loss": 0.05},
    }


def _password() -> str:
    from tests.integration.conftest import ADMIN_PASSWORD

    return ADMIN_PASSWORD


def test_metric_rows_of_a_trial_are_the_stored_reports(
    api_master: MasterClient, pg_url: str
) -> None:
    m = api_master
    (t,) = _trials(pg_url, _experiment(m), 1)
    _report(m, t, "training", range(1, 4))
    _report(m, t, "validation", range(3, 4))
    rows = m.get(f"/api/v1/trials/{t}/metrics?group=training")["metrics"]
    assert [r["totalBatches"] for r in rows] == [1, 2, 3]
    first = rows[0]
    assert first["metrics"] == {"avg_metrics": {"loss": 1.0, "acc": 0.01}}
    assert first["trialId"] == t and first["group"] == "training" and first["archived"] is False
    assert first["trialRunId"] == 1 and first["endTime"].endswith("Z")
    assert len(m.get(f"/api/v1/trials/{t}/metrics")["metrics"]) == 4
    assert m.get(f"/api/v1/trials/{t}/metrics?group=nothing")["metrics"] == []
    r = m.session().get(f"{m.url}/api/v1/trials/{t + 1000}/metrics", timeout=30)
    assert r.status_code == 404


def test_metric_rows_are_kept_until_the_trial_changes(
    api_master: MasterClient, pg_url: str
) -> None:
    """A trial's rows are kept by the process (det.master.seriescache) under its row's version:
    a report, of either group, shows in the very next read; a row written by SQL alone (which
    moves no version: only the ingest writes rows, in the statement that updates its trial) is
    not seen until then, which shows the answer came from what the process kept."""
    m = api_master
    (t,) = _trials(pg_url, _experiment(m), 1)
    _report(m, t, "training", range(1, 4))

    def batches(group: str | None = "training") -> list[int]:
        query = f"?group={group}" if group else ""
        return [r["totalBatches"] for r in m.get(f"/api/v1/trials/{t}/metrics{query}")["metrics"]]

    assert batches() == [1, 2, 3] and batches(None) == [1, 2, 3]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
            " VALUES (%s, 'training', 50, '{\"avg_metrics\": {\"loss\": 0.5}}')",
            (t,),
        )
    assert batches() == [1, 2, 3] and batches(None) == [1, 2, 3]
    _report(m, t, "training", range(4, 6))
    assert batches() == [1, 2, 3, 4, 5, 50]
    _report(m, t, "validation", range(5, 6))
    assert batches(None) == [1, 2, 3, 4, 5, 5, 50] and batches() == [1, 2, 3, 4, 5, 50]
    assert batches("validation") == [5]
    # Another trial's report leaves this one's answers as they were; a trial's other changes
    # (its state) merely cost a read.
    (other,) = _trials(pg_url, _experiment(m), 1)
    _report(m, other, "training", range(1, 2))
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("UPDATE trials SET state = 'COMPLETED' WHERE id = %s", (t,))
        c.execute("DELETE FROM metrics WHERE trial_id = %s AND total_batches = 50", (t,))
    assert batches() == [1, 2, 3, 4, 5]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DELETE FROM trials WHERE id = %s", (t,))
    r = m.session().get(f"{m.url}/api/v1/trials/{t}/metrics", timeout=30)
    assert r.status_code == 404


def test_experiment_list_carries_the_config_and_get_the_rest(api_master: InProcessMaster) -> None:
    m = api_master
    eid = _experiment(m)
    # The searcher creates the trial in the control loop's next pass: compare once it exists.
    run_passes_until(
        m.state, lambda: m.get(f"/api/v1/experiments/{eid}")["experiment"]["numTrials"] == 1, 60
    )
    listed = next(
        e for e in m.get("/api/v1/experiments?limit=100")["experiments"] if e["id"] == eid
    )
    got = m.get(f"/api/v1/experiments/{eid}")
    assert listed["config"] == got["experiment"]["config"] == got["config"]
    assert listed["config"]["searcher"]["metric"] == "loss"
    assert listed["searcherType"] == "single" and listed["searcherMetric"] == "loss"
    assert listed["labels"] == [] and listed["numTrials"] == got["experiment"]["numTrials"]
    # As in Determined's list: no original config (required, so empty) and no hyperparameters.
    assert listed["originalConfig"] == "" and "hyperparameters" not in listed
    assert "searcher:" in got["experiment"]["originalConfig"]
    assert got["experiment"]["hyperparameters"] == {"lr": {"type": "const", "val": 0.1}}
    # The get names its trials (as Determined's does; the WebUI asks for their series at once).
    trials = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    assert trials and got["experiment"]["trialIds"] == sorted(t["id"] for t in trials)


def test_a_registry_password_never_leaves_in_a_list_or_a_get(api_master: MasterClient) -> None:
    m = api_master
    secret = CONFIG + "environment:\n  registry_auth: {username: bot, password: Reg-s3cret}\n"
    out = m.post("/api/v1/experiments", {"config": secret, "activate": False})
    eid = int(out["experiment"]["id"])
    plain = _experiment(m)
    r = m.session().get(f"{m.url}/api/v1/experiments?limit=100", timeout=30)
    assert r.status_code == 200 and "Reg-s3cret" not in r.text
    by_id = {e["id"]: e for e in r.json()["experiments"]}
    auth = by_id[eid]["config"]["environment"]["registry_auth"]
    assert auth["username"] == "bot" and auth["password"] != "Reg-s3cret"
    assert by_id[plain]["config"]["environment"]["registry_auth"] is None
    got = m.session().get(f"{m.url}/api/v1/experiments/{eid}", timeout=30)
    assert got.status_code == 200 and "Reg-s3cret" not in got.text


def test_storage_credentials_never_leave_in_a_list_or_a_get(api_master: MasterClient) -> None:
    m = api_master
    secret = CONFIG + (
        "checkpoint_storage: {type: s3, bucket: b, access_key: AKIA-KEY-1, secret_key: S3-s3cret}\n"
    )
    eid = int(
        m.post("/api/v1/experiments", {"config": secret, "activate": False})["experiment"]["id"]
    )
    for path in ("/api/v1/experiments?limit=100", f"/api/v1/experiments/{eid}"):
        r = m.session().get(m.url + path, timeout=30)
        assert r.status_code == 200, r.text[:300]
        assert "S3-s3cret" not in r.text and "AKIA-KEY-1" not in r.text, path
    storage = m.get(f"/api/v1/experiments/{eid}")["experiment"]["config"]["checkpoint_storage"]
    assert storage["bucket"] == "b" and storage["secret_key"] == "********"


def _conditional(m: MasterClient, path: str, tag: str | None) -> requests.Response:
    headers = {"If-None-Match": tag} if tag else {}
    return m.session().get(m.url + path, headers=headers, timeout=30)


@pytest.mark.parametrize("what", ["list", "experiment", "trials"])
def test_an_unchanged_read_is_304_and_a_change_changes_the_etag(
    api_master: InProcessMaster, pg_url: str, what: str
) -> None:
    m = api_master
    eid = _experiment(m)
    # The searcher's own trial first (its creation changes every answer below).
    run_passes_until(
        m.state, lambda: m.get(f"/api/v1/experiments/{eid}")["experiment"]["numTrials"] >= 1, 30
    )
    _trials(pg_url, eid, 2)
    path = {
        "list": "/api/v1/experiments?limit=100",
        "experiment": f"/api/v1/experiments/{eid}",
        "trials": f"/api/v1/experiments/{eid}/trials",
    }[what]
    first = _conditional(m, path, None)
    assert first.status_code == 200
    tag = first.headers["ETag"]
    assert tag.startswith('W/"')
    again = _conditional(m, path, tag)
    assert again.status_code == 304 and again.content == b""
    assert again.headers["ETag"] == tag
    assert _conditional(m, path, f'"other", {tag}').status_code == 304  # one of a list
    assert _conditional(m, path, '"other"').status_code == 200

    # A change: a label (list, experiment) or a trial's state (trials).
    if what == "trials":
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("UPDATE trials SET restarts = restarts + 1 WHERE experiment_id = %s", (eid,))
    else:
        r = m.session().put(f"{m.url}/api/v1/experiments/{eid}/labels/changed", timeout=30)
        assert r.status_code == 200, r.text
    changed = _conditional(m, path, tag)
    assert changed.status_code == 200
    assert changed.headers["ETag"] != tag
    assert _conditional(m, path, changed.headers["ETag"]).status_code == 304


def test_a_304_keeps_the_connection_open(live_master: Master) -> None:
    """A poller's unchanged read costs no new connection (waitress closed it after each 304)."""
    m = live_master
    host, port = m.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    auth = {"Authorization": f"Bearer {m.token}"}
    conn.request("GET", "/api/v1/experiments?limit=5", headers=auth)
    first = conn.getresponse()
    first.read()
    tag = first.headers["ETag"]
    sock = conn.sock
    for _ in range(3):
        conn.request("GET", "/api/v1/experiments?limit=5", headers={**auth, "If-None-Match": tag})
        r = conn.getresponse()
        assert r.status == 304 and r.read() == b""
        assert not r.will_close and r.headers.get("Connection") != "close"
        assert conn.sock is sock  # the same connection all along
    conn.request("GET", "/api/v1/experiments?limit=5", headers=auth)
    again = conn.getresponse()
    assert again.status == 200 and again.headers["ETag"] == tag and conn.sock is sock
    conn.close()
