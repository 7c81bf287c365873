"""The proxy's fair shares: a user's and a task's connections are counted once the caller is
known, past a cap the connection is refused naming it (and counts nothing), and the config's
``proxy`` block keeps each share below the process's whole."""

from __future__ import annotations

import threading

import pytest

from det.master.config import MasterConfigError, parse_config
from det.master.proxy_limits import Caps, Counts


def test_a_user_past_their_share_is_refused_naming_the_cap() -> None:
    counts = Counts(Caps(total=10, per_user=3, per_task=2))
    assert counts.enter("user:1", "a") is None
    assert counts.enter("user:1", "a") is None
    assert counts.enter("user:1", "b") is None
    why = counts.enter("user:1", "c")
    assert why is not None and "proxy.max_connections_per_user: 3" in why
    # The refused connection counted nothing: task c is free, user 1 still holds 3.
    assert counts.open_for("user:1", "c") == (3, 0)
    # Another user is not held back by user 1.
    assert counts.enter("user:2", "c") is None


def test_a_task_past_its_share_is_refused_even_for_a_fresh_caller() -> None:
    counts = Counts(Caps(total=10, per_user=5, per_task=2))
    assert counts.enter("user:1", "a") is None
    assert counts.enter("user:2", "a") is None
    why = counts.enter("user:3", "a")
    assert why is not None and "task a has 2" in why and "max_connections_per_task: 2" in why
    assert counts.open_for("user:3", "a") == (0, 2)


def test_leaving_frees_the_share() -> None:
    counts = Counts(Caps(total=10, per_user=1, per_task=1))
    assert counts.enter("address:10.0.0.1", "a") is None
    assert counts.enter("address:10.0.0.1", "b") is not None
    counts.leave("address:10.0.0.1", "a")
    assert counts.open_for("address:10.0.0.1", "a") == (0, 0)
    assert counts.enter("address:10.0.0.1", "b") is None


def test_concurrent_callers_never_pass_the_cap() -> None:
    counts = Counts(Caps(total=1000, per_user=50, per_task=1000))
    admitted: list[bool] = []
    lock = threading.Lock()

    def one() -> None:
        ok = counts.enter("user:1", "a") is None
        with lock:
            admitted.append(ok)

    threads = [threading.Thread(target=one) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admitted.count(True) == 50
    assert counts.open_for("user:1", "a") == (50, 50)


def test_config_defaults_and_the_shares_stay_below_the_whole() -> None:
    proxy = parse_config({}, env={}).proxy
    assert (proxy.max_connections, proxy.max_connections_per_user) == (1024, 128)
    assert proxy.max_connections_per_task == 64
    with pytest.raises(
        MasterConfigError, match=r"max_connections_per_user \(200\) must not exceed"
    ):
        parse_config({"proxy": {"max_connections": 100, "max_connections_per_user": 200}}, env={})
    with pytest.raises(MasterConfigError, match=r"proxy\.max_connections_per_task"):
        parse_config({"proxy": {"max_connections_per_task": 0}}, env={})
