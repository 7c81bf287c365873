"""The e2e tests' shared clusters are stopped between tests once idle (tests/e2e/conftest.py):
the rule alone, with the cluster's stop recorded instead of run (no Docker, no master)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import conftest as shared_mod
from tests.e2e.conftest import IDLE_SECONDS, SharedCluster, _StopIdle


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(shared_mod, "stop_cluster", calls.append)
    return calls


def running(name: str = "two") -> SharedCluster:
    s = SharedCluster(name, 2, 2, None, "")  # type: ignore[arg-type]  # never started here
    s.cluster = object()  # type: ignore[assignment]
    return s


def test_an_idle_cluster_is_stopped_only_after_the_idle_period(stopped: list[Any]) -> None:
    s = running()
    cluster = s.cluster
    s.idle_since = 1000.0
    s.stop_if_idle(1000.0 + IDLE_SECONDS - 1)
    assert s.cluster is cluster and stopped == []
    s.stop_if_idle(1000.0 + IDLE_SECONDS)
    assert s.cluster is None and stopped == [cluster]
    assert s.idle_since is None  # stopped: nothing idles until a test starts it again


def test_a_leased_cluster_is_never_stopped_however_long_the_test(stopped: list[Any]) -> None:
    s = running()
    s.idle_since = None  # a test holds it
    s.stop_if_idle(10**9)
    assert s.cluster is not None and stopped == []


def test_what_an_idle_stop_raises_is_kept_for_the_sessions_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unsound(_cluster: object) -> None:
        raise AssertionError("the master's event loop died")

    monkeypatch.setattr(shared_mod, "stop_cluster", unsound)
    s = running()
    s.idle_since = 0.0
    s.stop_if_idle(IDLE_SECONDS + 1)  # does not raise into the test that happens to be running
    assert s.cluster is None
    assert [str(e) for e in s.errors] == ["the master's event loop died"]


def test_the_plugin_looks_at_every_shared_cluster(stopped: list[Any]) -> None:
    idle, busy = running("two"), running("one")
    idle.idle_since, busy.idle_since = 0.0, None
    _StopIdle({"two": idle, "one": busy}).stop_idle(IDLE_SECONDS + 5)
    assert idle.cluster is None and busy.cluster is not None and len(stopped) == 1
