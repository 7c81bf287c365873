"""Tasks on a machine other than the master's are told a master URL that works there (issue 39):
a master without ``master_url`` puts ``http://127.0.0.1:PORT`` in every spec; the agent, which
reaches the master elsewhere, gives its containers its own URL instead."""

from __future__ import annotations

import pytest

from det.agent.containers import container_env, task_master_url


@pytest.mark.parametrize(
    ("told", "ours", "given"),
    [
        # the master's loopback default, an agent on another machine: the agent's URL
        ("http://127.0.0.1:8080", "http://10.0.0.1:8080", "http://10.0.0.1:8080"),
        ("http://localhost:8080", "https://master.example:8443", "https://master.example:8443"),
        ("http://[::1]:8080", "http://10.0.0.1:8080", "http://10.0.0.1:8080"),
        # the master's own master_url wins whenever it is not loopback
        ("http://master.example:8080", "http://10.0.0.1:8080", "http://master.example:8080"),
        # an agent on the master's host: nothing to change
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080", "http://localhost:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080", None, "http://127.0.0.1:8080"),
        (None, "http://10.0.0.1:8080", None),
    ],
)
def test_a_loopback_master_url_becomes_the_agents(
    told: str | None, ours: str | None, given: str | None
) -> None:
    assert task_master_url(told, ours) == given


def test_container_env_tells_tasks_the_agents_master_url() -> None:
    spec = {"env": {"DET_MASTER": "http://127.0.0.1:8080"}}
    env = container_env(spec, "a", "c", "1.1.1", "http://172.18.0.1:8080")
    assert env["DET_MASTER"] == "http://172.18.0.1:8080"
    assert "DET_MASTER" not in container_env({"env": {}}, "a", "c", "1.1.1", "http://x:1")
