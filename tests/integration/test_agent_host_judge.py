"""The agent judges what a container really gets of its host (det.agent.mount_guard), on a real
Docker engine with a real det-agent process: a non-admin's first task plants links and device
nodes in the directory every task may write (the cluster's checkpoint directory); a second task
of the same user that mounts each of them is refused before any container is created, whatever
the master sent. The master's own text checks are not involved: the fake master sends the specs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from det.common.host_policy import PROTECTED_PATHS
from tests.fakes.master import FakeMaster
from tests.integration.test_agent_docker import (  # the fixtures are shared
    AgentProcess,
    agent,
    docker_client,
    master,
    own_containers,
    spec,
    wait_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

__all__ = ["agent", "docker_client", "master"]


def mount(source: Path | str, read_only: bool = False) -> dict[str, Any]:
    return {
        "hostPath": str(source),
        "containerPath": "/x",
        "readOnly": read_only,
        "propagation": "",
    }


def device(source: Path | str) -> dict[str, Any]:
    return {"hostPath": str(source), "containerPath": "/dev/x", "mode": "rwm"}


class Cluster:
    """A local cluster's layout on the agent's host, in the test's directory."""

    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "cluster"
        self.ckpt = self.state / "checkpoints"
        self.data = tmp / "datasets"  # an admin's read-only root, with a link an admin left
        self.password = self.state / "admin_password"
        self.pgdir = self.state / "master" / "postgres"
        for d in (self.ckpt, self.pgdir, self.data / "coco"):
            d.mkdir(parents=True)
        self.password.write_text("s3cret\n")
        (self.pgdir / ".s.PGSQL.5432").write_text("")  # stands for the socket
        (self.data / "etc").symlink_to("/etc")

    def policy(self, *, admin: bool = False, devices: list[str] | None = None) -> dict[str, Any]:
        """What the master sends (det.master.container_policy.host_policy) for such a cluster."""
        return {
            "admin": admin,
            "protectedPaths": [*PROTECTED_PATHS, str(self.state / "master"), str(self.state)],
            "clusterMounts": [{"hostPath": str(self.ckpt), "readOnly": False}],
            "allowedRoots": [{"hostPath": str(self.data), "readOnly": True}],
            "allowedDevices": devices or [],
        }


PLANT = """set -e
mkdir -p /ckpt/x/sub
ln -s /etc /ckpt/x/etc
ln -s /root /ckpt/x/root
ln -s {password} /ckpt/x/pw
ln -s {pgdir} /ckpt/x/pg
ln -s {pgdir}/.s.PGSQL.5432 /ckpt/x/pgsock
ln -s /var/run/docker.sock /ckpt/x/sock
ln -s {agent_state} /ckpt/x/agent
ln -s {datasets} /ckpt/x/datasets
mknod /ckpt/x/disk b 7 0
mknod /ckpt/x/kmsg c 1 11
ln -s /dev/zero /ckpt/x/vda
ln -s /dev/urandom /ckpt/x/urandomlink
echo planted
"""


def test_links_and_nodes_a_task_planted_are_refused_before_a_container_exists(
    master: FakeMaster,
    agent: Callable[..., AgentProcess],
    docker_client: Any,
    tmp_path: Path,
) -> None:
    a = agent()
    c = Cluster(tmp_path)
    plant = PLANT.format(
        password=c.password,
        pgdir=c.pgdir,
        agent_state=tmp_path / "state",
        datasets=c.data,
    )
    ckpt = {"hostPath": str(c.ckpt), "containerPath": "/ckpt", "readOnly": False, "propagation": ""}
    # The first task: the checkpoint directory as the cluster gives it (allowed).
    master.run(
        a.agent_id, "1.1.1", spec(plant, task="1.1", bindMounts=[ckpt], hostPolicy=c.policy())
    )
    report = wait_state(master, a.agent_id, "1.1.1", "TERMINATED")
    assert report["exitCode"] == 0 and report["error"] is None, report
    assert (c.ckpt / "x" / "etc").is_symlink() and (c.ckpt / "x" / "disk").is_block_device()

    x = c.ckpt / "x"
    refused: dict[str, tuple[dict[str, Any], str]] = {
        # name: (what the second task asks for, what the refusal says)
        "etc": ({"bindMounts": [mount(x / "etc", True)]}, f"under {c.ckpt}, a directory tasks"),
        # (on a host whose Python lives under /root, the agent's own rule says it first)
        "root": ({"bindMounts": [mount(x / "root")]}, "a directory tasks may write|for no task"),
        "pw": ({"bindMounts": [mount(x / "pw", True)]}, "a directory tasks may write"),
        "pg": ({"bindMounts": [mount(x / "pg")]}, "a directory tasks may write"),
        "pgsock": ({"bindMounts": [mount(x / "pgsock")]}, "a directory tasks may write"),
        "sock": ({"bindMounts": [mount(x / "sock")]}, "the agent mounts it for no task"),
        "agent": ({"bindMounts": [mount(x / "agent")]}, "the agent mounts it for no task"),
        "sub": ({"bindMounts": [mount(x / "sub")]}, "a directory tasks may write"),
        # A link out of the writable directory into an allowed root: still under the
        # writable directory as written, and refused whatever it leads to.
        "datasets": ({"bindMounts": [mount(x / "datasets", True)]}, "a directory tasks"),
        # Resolved, the paths are protected too (what an allowed root's link leads to).
        "data-etc": ({"bindMounts": [mount(c.data / "etc", True)]}, "the protected host path /etc"),
        "state": ({"bindMounts": [mount(c.state, True)]}, f"protected host path {c.state}"),
        # Devices by kind and number, whatever their name or place.
        "disk": ({"devices": [device(x / "disk")]}, "is not under /dev"),
        "kmsg": ({"devices": [device(x / "kmsg")]}, "is not under /dev"),
        "vda": ({"devices": [device(x / "vda")]}, "is device c 1:5"),
        "urandomlink": ({"devices": [device(x / "urandomlink")]}, "is device c 1:9"),
        "urandom-dev": ({"devices": [device("/dev/urandom")]}, "is device c 1:9"),
        "zero-dev": ({"devices": [device("/dev/zero")]}, "is device c 1:5"),
        "not-a-node": ({"devices": [device(c.password)]}, "is not a device node"),
    }
    for i, (what, _) in enumerate(refused.values(), start=2):
        alloc = f"{i}.1.1"
        master.run(
            a.agent_id, alloc, spec("sleep 30", task=f"{i}.1", hostPolicy=c.policy(), **what)
        )
    for i, (name, (_, why)) in enumerate(refused.items(), start=2):
        report = wait_state(master, a.agent_id, f"{i}.1.1", "TERMINATED")
        assert report["error"] is not None and report["error"].startswith("start failed: "), (
            name,
            report,
        )
        assert any(w in report["error"] for w in why.split("|")), (name, report["error"])
        assert "\n" not in report["error"]
    # Only the planting task ever had a container.
    assert [
        ct.labels["ai.det.allocation-id"] for ct in own_containers(docker_client, a.agent_id)
    ] == ["1.1.1"]


def test_what_the_policy_allows_starts_with_the_resolved_source(
    master: FakeMaster,
    agent: Callable[..., AgentProcess],
    docker_client: Any,
    tmp_path: Path,
) -> None:
    a = agent()
    c = Cluster(tmp_path)
    (c.data / "latest").symlink_to(c.data / "coco")  # an admin's link inside the allowed root
    allowed = {
        "20.1.1": {"bindMounts": [mount(c.ckpt)], "hostPolicy": c.policy()},
        "21.1.1": {"bindMounts": [mount(c.data / "latest", True)], "hostPolicy": c.policy()},
        "22.1.1": {
            "devices": [device("/dev/null")],
            "hostPolicy": c.policy(devices=["c 1:3"]),
        },
        "23.1.1": {"devices": [device("/dev/full")], "hostPolicy": c.policy(devices=["/dev/full"])},
        # An admin's task may mount what a non-admin's may not; Docker still gets the target,
        # never the link.
        "24.1.1": {"bindMounts": [mount(c.data / "etc", True)], "hostPolicy": c.policy(admin=True)},
    }
    for alloc, extra in allowed.items():
        master.run(a.agent_id, alloc, spec("true", task=alloc[:-2], **extra))
    for alloc in allowed:
        report = wait_state(master, a.agent_id, alloc, "TERMINATED")
        assert report["exitCode"] == 0 and report["error"] is None, (alloc, report)
    by_alloc = {
        ct.labels["ai.det.allocation-id"]: ct for ct in own_containers(docker_client, a.agent_id)
    }
    sources = {
        alloc: [m["Source"] for m in ct.attrs["Mounts"] if m["Destination"] == "/x"]
        for alloc, ct in by_alloc.items()
    }
    assert sources["20.1.1"] == [str(c.ckpt.resolve())]
    assert sources["21.1.1"] == [str((c.data / "coco").resolve())]
    assert sources["24.1.1"] == ["/etc"]
    devices = by_alloc["22.1.1"].attrs["HostConfig"]["Devices"]
    assert [d["PathOnHost"] for d in devices] == ["/dev/null"]
