"""The pre-dispatch layer (det.master.api._predispatch) answers exactly as Flask does.

Each request is sent twice to the same in-process master: once with the layer off (Flask's
dispatch answers, as before the layer existed) and once with it on; status, every header the
app sends (in order) and body must be the same, and the layer's count says which requests it
answered itself (so an equal answer is not merely Flask's twice). Refusals and first reads
go through to Flask; a write that changes the list is seen by the very next read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from det.master import listcache
from det.master.api import _wirelog
from det.master.authz import WIRE_IDS, Role
from tests.integration.conftest import wait_for
from tests.integration.inproc import InProcessMaster, active_trial

pytestmark = pytest.mark.integration

CONFIG = """
name: listed-{i}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 10}}
hyperparameters: {{lr: 0.1}}
"""
PAGE = "/api/v1/experiments?limit=20"

Answer = tuple[int, list[tuple[str, str]], bytes]


@pytest.fixture
def m(api_master: InProcessMaster) -> Iterator[InProcessMaster]:
    for i in range(3):
        api_master.post("/api/v1/experiments", {"config": CONFIG.format(i=i)})
    yield api_master


def _layer(m: InProcessMaster) -> Any:
    return m.app.extensions["det_predispatch"]


def _ask(m: InProcessMaster, on: bool, path: str, headers: dict[str, str]) -> Answer:
    layer = _layer(m)
    layer.enabled = on
    try:
        r = m.new_session().get(m.url + path, headers=headers, timeout=30)
    finally:
        layer.enabled = True
    return r.status_code, list(r.headers.items()), r.content


def _both(m: InProcessMaster, path: str, headers: dict[str, str]) -> tuple[Answer, int]:
    """Flask's answer (asked first: it keeps the page a first read renders), the layer's, and
    how many of the two the layer answered itself; asserts they are the same."""
    before = _layer(m).answered
    flask = _ask(m, False, path, headers)
    fast = _ask(m, True, path, headers)
    assert fast == flask, (path, headers)
    return flask, _layer(m).answered - before


def _user(m: InProcessMaster, name: str) -> tuple[int, str]:
    pw = f"{name}-Pw-12345"
    m.post("/api/v1/users", {"user": {"username": name, "active": True}, "password": pw})
    uid = int(m.get(f"/api/v1/users/{name}/by-username")["user"]["id"])
    return uid, m.login(name, pw)


def test_a_kept_page_is_answered_before_dispatch_as_flask_answers_it(
    m: InProcessMaster,
) -> None:
    auth = {"Authorization": f"Bearer {m.token}"}
    (status, headers, body), fast = _both(m, PAGE, auth)
    assert status == 200 and fast == 1
    names = dict(headers)
    assert names["Content-Type"] == "application/json"
    assert names["Content-Length"] == str(len(body))
    assert names["Cache-Control"] == "private, no-cache"
    tag = names["ETag"]
    # Conditional reads: the kept page's ETag (strong or weak, in a list, or any) gives 304.
    for inm in (tag, tag.removeprefix("W/"), f'"other", {tag}', "*"):
        (status, headers, body), fast = _both(m, PAGE, {**auth, "If-None-Match": inm})
        assert (status, body, fast) == (304, b"", 1), inm
        assert dict(headers) == {"ETag": tag, "Cache-Control": "private, no-cache"}
    (status, _, _), fast = _both(m, PAGE, {**auth, "If-None-Match": 'W/"other"'})
    assert (status, fast) == (200, 1)
    # Another query string is another page: its first read is Flask's, then kept.
    other = "/api/v1/experiments?limit=2&orderBy=ORDER_BY_DESC"
    (status, _, body), fast = _both(m, other, auth)
    assert status == 200 and fast == 1
    assert len(requests.models.complexjson.loads(body)["experiments"]) == 2
    # A page nobody read yet: the layer renders and keeps it, as the view would have.
    third = "/api/v1/experiments?limit=1&offset=1"
    before = _layer(m).answered
    rendered = _ask(m, True, third, auth)
    assert _layer(m).answered == before + 1
    assert _ask(m, False, third, auth) == rendered


def test_refusals_are_flasks_and_uncached_reads_alike(m: InProcessMaster) -> None:
    auth = {"Authorization": f"Bearer {m.token}"}
    assert _both(m, PAGE, auth)[1] == 1  # the page is kept: what follows is not for that reason
    cases: list[tuple[str, dict[str, str], int]] = [
        (PAGE, {}, 401),
        (PAGE, {"Authorization": "Bearer not-a-token"}, 401),
        (PAGE, {"Authorization": m.token}, 401),  # no scheme
        (PAGE, {"Authorization": f"Bearer {m.agent_token}"}, 401),  # agents may not list
        (PAGE, {**auth, "Sec-Fetch-Site": "cross-site"}, 403),
        (PAGE, {**auth, "Sec-Fetch-Site": "same-site"}, 403),
        (PAGE, {**auth, "Sec-Fetch-Site": "same-origin"}, 200),
        ("/api/v1/experiments?limit=abc", auth, 400),
        ("/api/v1/experiments?orderBy=SIDEWAYS", auth, 400),
        ("/api/v1/experiments?limit=20&sortBy=SORT_BY_SEARCHER_METRIC_VAL", auth, 200),
    ]
    for path, headers, want in cases:
        (status, _, body), fast = _both(m, path, headers)
        assert status == want, (path, headers, status, body)
        # The layer answers only a user's read that is let through.
        assert fast == (1 if want == 200 else 0), (path, headers)
        if want >= 400:
            assert b'"message"' in body, body


def test_the_admission_limit_refuses_alike(m: InProcessMaster) -> None:
    """A user with as many requests in flight as the limit allows is answered 429 by either
    path, and the refused request holds no count afterwards."""
    uid, token = _user(m, "poller")
    auth = {"Authorization": f"Bearer {token}"}
    assert _both(m, PAGE, auth)[1] == 1
    admission = m.app.extensions["det_admission"]
    held = [admission.admit(uid, waiting=False) for _ in range(admission.limits.per_user)]
    try:
        (status, headers, _), fast = _both(m, PAGE, auth)
        assert (status, fast) == (429, 0)
        assert dict(headers)["Retry-After"] == "1"
    finally:
        for t in held:
            admission.release(t)
    assert admission.in_flight() == (0, 0)
    assert _both(m, PAGE, auth)[0][0] == 200


def test_a_write_is_seen_by_the_very_next_read(m: InProcessMaster) -> None:
    auth = {"Authorization": f"Bearer {m.token}"}
    s = m.session()
    first = s.get(m.url + PAGE, timeout=30).json()["experiments"][0]
    assert _both(m, PAGE, auth)[1] == 1
    r = s.patch(f"{m.url}/api/v1/experiments/{first['id']}", json={"name": "renamed"}, timeout=30)
    assert r.status_code == 200, r.text
    kept = len(listcache.EXPERIMENTS)
    before = _layer(m).answered
    after = s.get(m.url + PAGE, timeout=30)
    assert after.json()["experiments"][0]["name"] == "renamed"
    assert _layer(m).answered == before + 1  # the version moved: the layer rendered the page
    assert len(listcache.EXPERIMENTS) == kept  # and keeps it in place of the old one
    (status, _, body), fast = _both(m, PAGE, auth)
    assert (status, fast) == (200, 1) and b'"renamed"' in body


def test_private_workspaces_key_pages_by_who_may_read_them(m: InProcessMaster) -> None:
    """Once a workspace is private, a user without a role there reads a page without its
    experiments, an admin the whole list; each is kept and answered for its reader only."""
    _, token = _user(m, "outsider")
    member, _ = _user(m, "member")
    ra = {"role": {"roleId": WIRE_IDS[Role.VIEWER]}, "scopeWorkspaceId": 1}
    body = {"userRoleAssignments": [{"userId": member, "roleAssignment": ra}]}
    r = m.session().post(f"{m.url}/api/v1/roles/add-assignments", json=body, timeout=30)
    assert r.status_code == 200, r.text
    admin = {"Authorization": f"Bearer {m.token}"}
    outsider = {"Authorization": f"Bearer {token}"}
    (_, _, everything), fast = _both(m, PAGE, admin)
    assert fast == 1
    (_, _, theirs), fast = _both(m, PAGE, outsider)
    assert fast == 1
    seen = requests.models.complexjson.loads
    assert len(seen(everything)["experiments"]) == 3
    assert seen(theirs)["experiments"] == []


def test_the_wire_log_records_the_layers_answer_as_flasks(
    m: InProcessMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _wirelog.enabled():
        pytest.skip("the wire log is off in this run (DET_WIRE_LOG unset)")
    written: list[Any] = []
    monkeypatch.setattr(_wirelog, "_counts", {})
    monkeypatch.setattr(_wirelog, "_written", [0])
    monkeypatch.setattr(_wirelog, "_write", written.append)
    auth = {"Authorization": f"Bearer {m.token}"}
    assert _both(m, PAGE, auth)[1] == 1
    assert len(written) == 2
    assert written[0] == written[1]
    assert written[0]["op"] == "GetExperiments" and written[0]["status"] == 200


# --- metric reports (POST /api/v1/trials/<id>/metrics/batch) --------------------------------


def _batch(first: int, n: int = 2, group: str = "training") -> bytes:
    reports = [
        {
            "group": group,
            "trialRunId": 1,
            "stepsCompleted": first + i,
            "metrics": {"avgMetrics": {"loss": 1.0 / (first + i + 1), "acc": 0.5}},
        }
        for i in range(n)
    ]
    return requests.models.complexjson.dumps({"reports": reports}).encode()


def _post(m: InProcessMaster, on: bool, path: str, body: bytes, headers: dict[str, str]) -> Answer:
    layer = _layer(m)
    layer.enabled = on
    try:
        r = m.new_session().post(m.url + path, data=body, headers=headers, timeout=30)
    finally:
        layer.enabled = True
    return r.status_code, list(r.headers.items()), r.content


def _both_posts(
    m: InProcessMaster, path: str, bodies: tuple[bytes, bytes], headers: dict[str, str]
) -> tuple[Answer, int]:
    """Flask's answer to the first body, the layer's to the second (a write changes what the
    same request would find), and how many the layer answered; asserts they are the same."""
    before = _layer(m).answered
    flask = _post(m, False, path, bodies[0], headers)
    fast = _post(m, True, path, bodies[1], headers)
    assert fast == flask, (path, bodies, headers)
    return flask, _layer(m).answered - before


def _stored(m: InProcessMaster, trial_id: int) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(m.db_url) as c:
        return c.execute(
            "SELECT metric_group, total_batches, trial_run_id, metrics FROM metrics"
            " WHERE trial_id = %s ORDER BY total_batches",
            (trial_id,),
        ).fetchall()


def _reporters(m: InProcessMaster) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Headers of a report: JSON alone, the trial's owner's, a stranger's (a user who may not
    change the trial)."""
    json_type = {"Content-Type": "application/json"}
    _, token = _user(m, "stranger")
    return (
        json_type,
        {"Authorization": f"Bearer {m.token}", **json_type},
        {"Authorization": f"Bearer {token}", **json_type},
    )


def test_a_metric_report_is_answered_and_stored_as_through_flask(m: InProcessMaster) -> None:
    tid = active_trial(m)
    path = f"/api/v1/trials/{tid}/metrics/batch"
    auth = {"Authorization": f"Bearer {m.token}", "Content-Type": "application/json"}
    (status, headers, body), fast = _both_posts(m, path, (_batch(0), _batch(2)), auth)
    assert (status, body, fast) == (200, b'{"rows":2}\n', 1)
    assert dict(headers)["Content-Type"] == "application/json"
    rows = _stored(m, tid)
    assert [r[1] for r in rows] == [0, 1, 2, 3]
    assert [(r[0], r[2]) for r in rows] == [("training", 1)] * 4
    assert rows[2][3] == {"avg_metrics": {"loss": 1.0 / 3, "acc": 0.5}}
    # Non-finite numbers (Python's json writes NaN): stored as Determined's strings either way.
    nan = (
        b'{"reports": [{"group": "validation", "trialRunId": 1, "stepsCompleted": %d,'
        b' "metrics": {"avgMetrics": {"loss": NaN}}}]}'
    )
    (status, _, body), fast = _both_posts(m, path, (nan % 10, nan % 11), auth)
    assert (status, body, fast) == (200, b'{"rows":1}\n', 1)
    stored = {r[1]: r[3] for r in _stored(m, tid)}
    assert stored[10] == stored[11] == {"avg_metrics": {"loss": "NaN"}}
    trial = m.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 4


def test_refused_and_bad_metric_reports_are_answered_alike(m: InProcessMaster) -> None:
    tid = active_trial(m)
    path = f"/api/v1/trials/{tid}/metrics/batch"
    json_type, auth, stranger = _reporters(m)
    ok = (_batch(100), _batch(102))
    # (path, bodies, headers, status, answered by the layer: the view ran there)
    cases: list[tuple[str, tuple[bytes, bytes], dict[str, str], int, int]] = [
        (path, ok, json_type, 401, 0),
        (path, ok, {"Authorization": "Bearer nope", **json_type}, 401, 0),
        (path, ok, {"Authorization": f"Bearer {m.agent_token}", **json_type}, 401, 0),
        (path, ok, {**auth, "Sec-Fetch-Site": "cross-site"}, 403, 0),
        (path, ok, stranger, 403, 1),  # not the trial's owner: the view's access check
        (path, (b"{not json", b"{not json"), auth, 400, 0),
        (path, (b"[1, 2]", b"[1, 2]"), auth, 400, 0),
        (path, (b'{"reports": "x"}', b'{"reports": "x"}'), auth, 400, 1),
        (path, (b"{}", b"{}"), auth, 400, 1),
        (path, (b'{"reports": [{"metrics": {}}]}',) * 2, auth, 400, 1),
        (path, (b'{"reports": [{"trialRunId": true}]}',) * 2, auth, 400, 1),
        (path, (b"", b""), auth, 400, -1),  # -1: either (the client may send no length)
        ("/api/v1/trials/999999/metrics/batch", ok, auth, 404, 1),
        (f"/api/v1/trials/0{tid}/metrics/batch", (_batch(110), _batch(112)), auth, 200, 0),
        (path + "?x=1", (_batch(120), _batch(122)), auth, 200, 0),
    ]
    for where, bodies, headers, want, answered in cases:
        (status, _, body), fast = _both_posts(m, where, bodies, headers)
        assert status == want and answered in (fast, -1), (where, bodies, headers, body, fast)
    # Nothing of the refused reports was stored; the accepted ones were, once each.
    assert [r[1] for r in _stored(m, tid)] == [110, 111, 112, 113, 120, 121, 122, 123]
    assert m.app.extensions["det_admission"].in_flight() == (0, 0)


def test_a_metric_report_over_the_admission_limit_is_refused_alike(m: InProcessMaster) -> None:
    tid = active_trial(m)
    admission = m.app.extensions["det_admission"]
    me = m.get("/api/v1/me")["user"]["id"]
    auth = {"Authorization": f"Bearer {m.token}", "Content-Type": "application/json"}
    held = [admission.admit(me, waiting=False) for _ in range(admission.limits.per_user)]
    try:
        path = f"/api/v1/trials/{tid}/metrics/batch"
        (status, headers, _), fast = _both_posts(m, path, (_batch(0), _batch(2)), auth)
        assert (status, fast) == (429, 0) and dict(headers)["Retry-After"] == "1"
    finally:
        for t in held:
            admission.release(t)
    assert _stored(m, tid) == []


def test_over_the_fronts_waitress_the_answers_and_the_connection_are_flasks(
    threaded_master: Any,
) -> None:
    """On a real socket through the front's waitress (its channels, keep-alive task and event
    loop), the kept page and its 304 come back with the same head as Flask's (but for the
    date) on the same kept-alive connection, whichever path answered."""
    import http.client
    from urllib.parse import urlsplit

    m = threaded_master
    for i in range(2):
        m.post("/api/v1/experiments", {"config": CONFIG.format(i=i)})
    # The control loop runs beside: once it made each experiment's trial, the list holds still.
    wait_for(
        lambda: all(e["numTrials"] == 1 for e in m.get(PAGE)["experiments"]),
        timeout=60,
        what="each experiment's trial",
    )
    layer = m.app.extensions["det_predispatch"]
    url = urlsplit(m.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    auth = {"Authorization": f"Bearer {m.token}"}

    def ask(on: bool, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        layer.enabled = on
        try:
            conn.request("GET", PAGE, headers=headers)
            r = conn.getresponse()
            body = r.read()
        finally:
            layer.enabled = True
        return r.status, [(k, v) for k, v in r.getheaders() if k.lower() != "date"], body

    try:
        ask(False, auth)  # the first read renders and keeps the page
        sock = conn.sock
        before = layer.answered
        flask = ask(False, auth)
        fast = ask(True, auth)
        assert fast == flask and flask[0] == 200
        tag = {k.lower(): v for k, v in flask[1]}["etag"]
        flask_304 = ask(False, {**auth, "If-None-Match": tag})
        fast_304 = ask(True, {**auth, "If-None-Match": tag})
        assert fast_304 == flask_304 and flask_304[0] == 304 and flask_304[2] == b""
        assert ask(True, auth) == flask  # the connection still serves after a 304
        assert layer.answered - before == 3
        assert conn.sock is sock, "the connection was closed and opened again"
    finally:
        conn.close()


# --- Determined's metric reports (POST /api/v1/trials/<id>/metrics, one a request) ---------


def _determined(trial_id: int, steps: int, group: str = "training") -> bytes:
    """ReportTrialMetrics's body, as Determined's harness sends it."""
    body = {
        "group": group,
        "metrics": {
            "trialId": trial_id,
            "trialRunId": 1,
            "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"loss": 1.0 / (steps + 1), "acc": 0.5}},
        },
    }
    return requests.models.complexjson.dumps(body).encode()


def test_a_determined_metric_report_is_answered_and_stored_as_through_flask(
    m: InProcessMaster,
) -> None:
    tid = active_trial(m)
    path = f"/api/v1/trials/{tid}/metrics"
    auth = {"Authorization": f"Bearer {m.token}", "Content-Type": "application/json"}
    bodies = (_determined(tid, 5), _determined(tid, 6))
    (status, headers, body), fast = _both_posts(m, path, bodies, auth)
    assert (status, body, fast) == (200, b"{}\n", 1)
    assert dict(headers)["Content-Type"] == "application/json"
    bodies = (_determined(tid, 7, "validation"), _determined(tid, 8, "validation"))
    (status, _, body), fast = _both_posts(m, path, bodies, auth)
    assert (status, body, fast) == (200, b"{}\n", 1)
    rows = _stored(m, tid)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("training", 5, 1),
        ("training", 6, 1),
        ("validation", 7, 1),
        ("validation", 8, 1),
    ]
    assert rows[1][3] == {"avg_metrics": {"loss": 1.0 / 7, "acc": 0.5}}
    trial = m.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 2
    assert trial["summaryMetrics"]["validation_metrics"]["loss"]["last"] == 1.0 / 9


def test_refused_and_bad_determined_metric_reports_are_answered_alike(
    m: InProcessMaster,
) -> None:
    tid = active_trial(m)
    path = f"/api/v1/trials/{tid}/metrics"
    json_type, auth, stranger = _reporters(m)
    ok = (_determined(tid, 100), _determined(tid, 101))
    cases: list[tuple[str, tuple[bytes, bytes], dict[str, str], int, int]] = [
        (path, ok, json_type, 401, 0),
        (path, ok, {"Authorization": f"Bearer {m.agent_token}", **json_type}, 401, 0),
        (path, ok, {**auth, "Sec-Fetch-Site": "cross-site"}, 403, 0),
        (path, ok, stranger, 403, 1),  # not the trial's owner: the view's access check
        (path, (b"{not json", b"{not json"), auth, 400, 0),
        (path, (b"{}", b"{}"), auth, 400, 1),  # no metrics: the view's refusal
        (path, (b'{"metrics": 3}', b'{"metrics": 3}'), auth, 400, 1),  # the contract's
        ("/api/v1/trials/999999/metrics", ok, auth, 404, 1),
        (path + "?x=1", (_determined(tid, 110), _determined(tid, 111)), auth, 200, 0),
    ]
    for where, bodies, headers, want, answered in cases:
        (status, _, body), fast = _both_posts(m, where, bodies, headers)
        assert status == want and answered == fast, (where, bodies, headers, body, fast)
    assert [r[1] for r in _stored(m, tid)] == [110, 111]
    assert m.app.extensions["det_admission"].in_flight() == (0, 0)


# --- agents' heartbeats (POST /api/v1/agents/<id>/heartbeat) -----------------------------------


def _heartbeat(slots: int = 2) -> bytes:
    body = {
        "resourcePool": "default",
        "version": "t",
        "slots": [{"id": str(i), "type": "cpu", "brand": "x"} for i in range(slots)],
        "containers": [],
    }
    return requests.models.complexjson.dumps(body).encode()


def test_a_heartbeat_is_answered_and_stored_as_through_flask(m: InProcessMaster) -> None:
    path = "/api/v1/agents/beating/heartbeat"
    agent = {"Authorization": f"Bearer {m.agent_token}", "Content-Type": "application/json"}
    _post(m, False, path, _heartbeat(), agent)  # registers the agent
    (status, _, body), fast = _both_posts(m, path, (_heartbeat(), _heartbeat()), agent)
    assert (status, fast) == (200, 1), body
    assert b'"agentTimeoutSeconds"' in body
    listed = m.get("/api/v1/agents")["agents"]
    assert [(a["id"], len(a["slots"])) for a in listed] == [("beating", 2)]
    # A changed heartbeat (a slot fewer) is written either way.
    (status, _, _), fast = _both_posts(m, path, (_heartbeat(1), _heartbeat(1)), agent)
    assert (status, fast) == (200, 1)
    assert [len(a["slots"]) for a in m.get("/api/v1/agents")["agents"]] == [1]


def test_refused_and_bad_heartbeats_are_answered_alike(m: InProcessMaster) -> None:
    path = "/api/v1/agents/beating/heartbeat"
    json_type = {"Content-Type": "application/json"}
    agent = {"Authorization": f"Bearer {m.agent_token}", **json_type}
    ok = (_heartbeat(), _heartbeat())
    cases: list[tuple[str, tuple[bytes, bytes], dict[str, str], int, int]] = [
        (path, ok, json_type, 401, 0),
        (path, ok, {"Authorization": "Bearer nope", **json_type}, 401, 0),
        (path, ok, {"Authorization": f"Bearer {m.token}", **json_type}, 403, 0),  # a user
        (path, ok, {**agent, "Sec-Fetch-Site": "cross-site"}, 403, 0),
        (path, (b"[]", b"[]"), agent, 400, 0),
        (path, (b'{"slots": 3}', b'{"slots": 3}'), agent, 400, 1),  # the contract's refusal
        ("/api/v1/agents/a%2Fb/heartbeat", ok, agent, 404, 0),
        (path + "?x=1", ok, agent, 200, 0),
    ]
    for where, bodies, headers, want, answered in cases:
        (status, _, body), fast = _both_posts(m, where, bodies, headers)
        assert status == want and answered == fast, (where, bodies, headers, body, fast)


def test_det_predispatch_0_sends_every_request_to_flask(
    tmp_path: Path, migrated_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benches' switch (bench/scale.py --predispatch off): a master started with
    DET_PREDISPATCH=0 answers the kept page through Flask alone."""
    from tests.integration.inproc import in_process_master

    monkeypatch.setenv("DET_PREDISPATCH", "0")
    with in_process_master(tmp_path, migrated_db) as off:
        off.post("/api/v1/experiments", {"config": CONFIG.format(i=0)})
        for _ in range(2):  # a first read keeps the page, a second would be the layer's
            auth = {"Authorization": f"Bearer {off.token}"}
            r = off.new_session().get(off.url + PAGE, headers=auth, timeout=30)
            assert r.status_code == 200 and r.json()["experiments"], r.text
        assert not _layer(off).enabled and _layer(off).answered == 0
