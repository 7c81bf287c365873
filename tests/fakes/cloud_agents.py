"""Fake-cloud instances become real agents: what a booted machine's bootstrap would do.

:class:`CloudAgents` polls a fake cloud (moto's EC2 through boto3, or :class:`FakeGce`) and, for
every running instance, starts a real ``det-agent`` process the way the bootstrap does
(:func:`det.master.provisioner.bootstrap.agent_launch`: its agent.yaml, argv and environment),
with the agent id = the instance id, CPU slots = the instance type's slot count, and its own
fake metadata server (:class:`FakeImds` on AWS, :class:`FakeGceMetadata` on GCP) for spot and
preemption notices. When the instance is gone from the cloud, the machine "vanishes": the
agent process is killed and its task containers removed.

``history`` records every instance id ever seen running and the peak number at once, so a test
can assert the cloud never held more than ``max_instances``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from det.master.provisioner.bootstrap import agent_launch
from tests import stall_clock
from tests.fakes.gce_metadata import FakeGceMetadata
from tests.fakes.imds import FakeImds

logger = logging.getLogger(__name__)

LABEL_AGENT = "ai.det.agent-id"

# (instance id, instance type) of the running instances.
Lister = Callable[[], list[tuple[str, str]]]


def moto_lister(endpoint: str, cluster_id: str, region: str = "us-east-1") -> Lister:
    """Running EC2 instances of one cluster, as moto reports them."""
    import boto3

    client = boto3.client("ec2", endpoint_url=endpoint, region_name=region)

    def running() -> list[tuple[str, str]]:
        out = []
        pages = client.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag:det-cluster-id", "Values": [cluster_id]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )
        for page in pages:
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    out.append((inst["InstanceId"], inst["InstanceType"]))
        return out

    return running


def gce_lister(fake: Any) -> Lister:
    """RUNNING instances of a :class:`FakeGce`."""

    def running() -> list[tuple[str, str]]:
        return [
            (i["name"], str(i.get("machineType", "")).rsplit("/", 1)[-1])
            for i in fake.running_instances()
        ]

    return running


@dataclasses.dataclass
class Machine:
    instance_id: str
    instance_type: str
    proc: subprocess.Popen[bytes]
    metadata: FakeImds | FakeGceMetadata
    log: Path
    started_at: float

    def trigger_notice(self) -> None:
        """The cloud announces it takes this machine (EC2 spot notice / GCE preemption)."""
        if isinstance(self.metadata, FakeImds):
            self.metadata.trigger_spot_interruption()
        else:
            self.metadata.trigger_preemption()


class CloudAgents:
    def __init__(
        self,
        lister: Lister,
        *,
        cloud: str,
        master_url: str,
        agent_token: str,
        cluster_id: str,
        pool: str,
        slots: dict[str, int],
        tmp: Path,
        poll_seconds: float = 0.2,
    ) -> None:
        self.lister = lister
        self.cloud = cloud
        self.master_url = master_url
        self.agent_token = agent_token
        self.cluster_id = cluster_id
        self.pool = pool
        self.slots = slots
        self.tmp = tmp
        self.poll_seconds = poll_seconds
        self.machines: dict[str, Machine] = {}
        self.seen: list[str] = []
        self.peak = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cloud-agents", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> CloudAgents:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            for iid in list(self.machines):
                self._vanish(iid)

    def __enter__(self) -> CloudAgents:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def machine(self, instance_id: str) -> Machine:
        with self._lock:
            return self.machines[instance_id]

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self.machines)

    # -- the poller --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # the cloud fake may be briefly busy; keep polling
                self.errors.append(repr(e))
                logger.warning("cloud agents: %s", e)
            self._stop.wait(self.poll_seconds)

    def sync(self) -> None:
        running = dict(self.lister())
        with self._lock:
            self.peak = max(self.peak, len(running))
            for iid, itype in running.items():
                if iid not in self.machines:
                    self.seen.append(iid)
                    self.machines[iid] = self._boot(iid, itype)
            for iid in list(self.machines):
                if iid not in running:
                    self._vanish(iid)
                elif self.machines[iid].proc.poll() is not None:
                    self.errors.append(
                        f"agent {iid} exited with {self.machines[iid].proc.returncode}"
                    )

    def _boot(self, iid: str, itype: str) -> Machine:
        home = self.tmp / iid
        home.mkdir(parents=True, exist_ok=True)
        metadata: FakeImds | FakeGceMetadata
        if self.cloud == "aws":
            metadata = FakeImds(instance_id=iid).start()
            extra = {"DET_IMDS_URL": metadata.url}
        else:
            metadata = FakeGceMetadata(instance_name=iid).start()
            extra = {"DET_GCE_METADATA_URL": metadata.url}
        launch = agent_launch(
            iid,
            master_url=self.master_url,
            agent_token=self.agent_token,
            pool=self.pool,
            cluster_id=self.cluster_id,
            cloud="aws" if self.cloud == "aws" else "gcp",
            extra_env=extra,
            config_path=str(home / "agent.yaml"),
        )
        config: dict[str, Any] = {
            **launch.config,
            # What the machine itself contributes: its slots and its own disk.
            "slot_type": "cpu",
            "artificial_slots": self.slots.get(itype, 1),
            "state_dir": str(home / "state"),
            "heartbeat_seconds": 0.5,
            "preemption_poll_seconds": 0.2,
        }
        Path(launch.config_path).write_text(yaml.safe_dump(config))
        exe = shutil.which(launch.argv[0], path=str(Path(sys.executable).parent))
        argv = [exe or launch.argv[0], *launch.argv[1:]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        env.update(launch.env)
        log = home / "agent.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        logger.info("instance %s (%s) booted its agent (pid %d)", iid, itype, proc.pid)
        return Machine(iid, itype, proc, metadata, log, time.monotonic())

    def _vanish(self, iid: str) -> None:
        """The machine is gone: no graceful shutdown for its agent or its containers."""
        m = self.machines.pop(iid)
        if m.proc.poll() is None:
            m.proc.send_signal(signal.SIGKILL)
            stall_clock.wait_process(m.proc, 10)
        m.metadata.stop()
        remove_containers(iid)
        logger.info("instance %s is gone; its agent was killed", iid)


def remove_containers(agent_id: str) -> None:
    try:
        import docker

        client = docker.from_env(timeout=30)
        for c in client.containers.list(
            all=True, ignore_removed=True, filters={"label": f"{LABEL_AGENT}={agent_id}"}
        ):
            c.remove(force=True)
    except Exception as e:  # no Docker: nothing was started either
        logger.debug("removing containers of %s: %s", agent_id, e)
