from __future__ import annotations

import threading
import time

import pytest
import requests

from det.common.api import (
    MasterStatusError,
    MasterUnreachable,
    NotFoundError,
    Session,
    canonicalize_master_url,
)
from tests.unit.harness.fake_master import TOKEN, FakeMaster


def test_sends_allocation_token_and_user_token_headers(master: FakeMaster) -> None:
    s = Session(master.url, allocation_token=TOKEN, user_token="user-tok")
    s.post("/api/v1/trials/1/progress", json={"progress": 0.5, "is_raw": True})
    (rec,) = master.requests_to("/progress")
    assert rec.headers["Grpc-Metadata-x-allocation-token"] == f"Bearer {TOKEN}"
    assert rec.headers["Authorization"] == "Bearer user-tok"
    assert rec.body == {"progress": 0.5, "is_raw": True}


def test_client_errors_are_not_retried(master: FakeMaster) -> None:
    master.state.fail_status[r"/progress$"] = 400
    s = Session(master.url, allocation_token=TOKEN)
    with pytest.raises(MasterStatusError) as e:
        s.post("/api/v1/trials/1/progress", json={})
    assert e.value.status == 400 and e.value.rejected
    assert len(master.requests_to("/progress")) == 1


def test_404_raises_not_found(master: FakeMaster) -> None:
    s = Session(master.url, allocation_token=TOKEN)
    with pytest.raises(NotFoundError):
        s.get("/api/v1/experiments/1/searcher/best_searcher_validation_metric")


def test_survives_a_master_restart(master: FakeMaster) -> None:
    s = Session(master.url, allocation_token=TOKEN, retry_seconds=30)
    master.stop()
    restarter = threading.Timer(1.0, master.start)
    restarter.start()
    try:
        s.post("/api/v1/trials/1/progress", json={"progress": 0.1, "is_raw": True})
    finally:
        restarter.join()
    assert len(master.requests_to("/progress")) == 1


def test_unavailable_answers_are_retried(master: FakeMaster) -> None:
    master.state.fail_status[r"/progress$"] = 503

    def heal() -> None:
        deadline = time.monotonic() + 10
        while not master.requests_to("/progress") and time.monotonic() < deadline:
            time.sleep(0.01)
        master.state.fail_status.clear()

    t = threading.Thread(target=heal)
    t.start()
    Session(master.url, allocation_token=TOKEN).post("/api/v1/trials/1/progress", json={})
    t.join()
    assert len(master.requests_to("/progress")) >= 2


def test_gives_up_when_the_master_stays_down() -> None:
    from tests.unit.harness.fake_master import free_port

    s = Session(f"127.0.0.1:{free_port()}", retry_seconds=0.3)
    with pytest.raises(MasterUnreachable) as e:
        s.get("/info")
    assert isinstance(e.value.__cause__, requests.ConnectionError)
    assert str(e.value).startswith(f"cannot reach the master at {s.master_url}: GET /info")


def test_canonicalizes_master_url() -> None:
    assert canonicalize_master_url("host:8080/") == "http://host:8080"
    assert canonicalize_master_url("https://h") == "https://h"


def test_an_outage_that_outlasts_the_retries_is_not_a_rejection(master: FakeMaster) -> None:
    master.state.fail_status[r"/progress$"] = 503
    s = Session(master.url, allocation_token=TOKEN, retry_seconds=0.3)
    with pytest.raises(MasterStatusError) as e:
        s.post("/api/v1/trials/1/progress", json={})
    assert e.value.status == 503 and not e.value.rejected
    assert len(master.requests_to("/progress")) >= 2


def test_one_attempt_when_retries_are_off(master: FakeMaster) -> None:
    master.state.fail_status[r"/progress$"] = 503
    s = Session(master.url, allocation_token=TOKEN, retry_seconds=0)
    with pytest.raises(MasterStatusError):
        s.post("/api/v1/trials/1/progress", json={})
    assert len(master.requests_to("/progress")) == 1


def test_each_thread_gets_its_own_connection_pool(master: FakeMaster) -> None:
    s = Session(master.url, allocation_token=TOKEN)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(s._http())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(h) for h in seen}) == 2
    for h in seen:  # each carries the tokens
        assert h.headers["Grpc-Metadata-x-allocation-token"] == f"Bearer {TOKEN}"  # type: ignore[attr-defined]
    s.close()
