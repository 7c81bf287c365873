"""``down`` of a serverless GCP cluster deletes the Cloud Run service before the agents.

Cloud Run's API cannot run here: the session is a stand-in answering as the Cloud Run v2 REST
API documents (DELETE returns a long-running operation, polled until ``done``)."""

from __future__ import annotations

from typing import Any

import pytest

from det.deploy.common.errors import DeployError
from det.deploy.gcp import teardown

SERVICE = "https://run.googleapis.com/v2/projects/p/locations/us-west1/services/det-c1"


class _Answer:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status_code = status
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body


class _Run:
    def __init__(self, status: int = 200, polls: int = 2, error: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.status = status
        self.polls = polls
        self.error = error

    def delete(self, url: str, timeout: float) -> _Answer:
        self.calls.append(("DELETE", url))
        return _Answer(self.status, {"name": "projects/p/locations/us-west1/operations/op1"})

    def get(self, url: str, timeout: float) -> _Answer:
        self.calls.append(("GET", url))
        done = sum(1 for c in self.calls if c[0] == "GET") >= self.polls
        body: dict[str, Any] = {
            "name": "projects/p/locations/us-west1/operations/op1",
            "done": done,
        }
        if done and self.error:
            body["error"] = {"code": 9, "message": self.error}
        return _Answer(200, body)


def test_deletes_the_service_and_waits_for_the_operation():
    run = _Run()
    assert teardown.delete_run_service(run, "p", "us-west1", "det-c1", sleep=lambda s: None)
    assert run.calls[0] == ("DELETE", SERVICE)
    assert (
        run.calls[1:]
        == [("GET", "https://run.googleapis.com/v2/projects/p/locations/us-west1/operations/op1")]
        * 2
    )


def test_a_service_already_gone_is_fine():
    run = _Run(status=404)
    assert not teardown.delete_run_service(run, "p", "us-west1", "det-c1", sleep=lambda s: None)
    assert run.calls == [("DELETE", SERVICE)]


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (_Run(status=403), "HTTP 403"),
        (_Run(error="precondition failed"), "precondition failed"),
    ],
)
def test_a_failed_delete_stops_down_in_one_line(run, message):
    with pytest.raises(DeployError, match=message):
        teardown.delete_run_service(run, "p", "us-west1", "det-c1", sleep=lambda s: None)


def test_an_operation_that_never_ends_times_out():
    clock = iter(range(0, 10_000, 100))
    with pytest.raises(DeployError, match="not deleted in 600s"):
        teardown.delete_run_service(
            _Run(polls=10**6), "p", "us-west1", "det-c1", sleep=lambda s: None,
            clock=lambda: next(clock),
        )  # fmt: skip
