"""Task containers through the Docker SDK: start, kill, remove, and what is actually running.

State of this agent's containers lives in Docker itself (labels below), so a restarted agent
finds them again; the in-memory `Record`s only add what Docker cannot know yet (a start in
progress: ASSIGNED, PULLING, STARTING) or cannot say (start errors).

A container is this agent's when it carries both its agent id and its cluster's id (learnt from
the master's first heartbeat answer, :meth:`DockerRuntime.adopt`): two clusters on one Docker
engine may well have agents of the same id (``det deploy local`` names them ``local-agent-<i>``
in every cluster), and neither may adopt, kill or remove the other's containers. Containers
started before the cluster label existed are recognised by their ``DET_CLUSTER_ID``.

Threading: `start` and `kill` do their slow work (pull, context download, graceful stop) on
short-lived worker threads so the heartbeat loop never blocks; `Record`s are guarded by one lock.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker.errors
import docker.types

from det.agent import images
from det.agent.context import context_tar
from det.agent.devices import Slot
from det.agent.errors import BadSpec
from det.agent.follower import LogFollower
from det.agent.harness_bundle import HarnessBundle, image_env
from det.agent.logs import LogShipper
from det.agent.master_client import MasterClient, task_container_cert
from det.agent.mount_guard import Judged, MountGuard, MountRefused, verify_created
from det.agent.reconcile import Actual
from det.common import context_ready
from det.common.container_spec import ContainerSpec
from det.common.states import AllocationState
from det.common.tls import MasterCert
from det.exec import allocation_watch

logger = logging.getLogger(__name__)

LABEL_AGENT = "ai.det.agent-id"
LABEL_CLUSTER = "ai.det.cluster-id"
LABEL_ALLOCATION = "ai.det.allocation-id"
LABEL_TASK = "ai.det.task-id"
LABEL_CONTAINER = "ai.det.container-id"
LABEL_KILL_GRACE = "ai.det.kill-grace-seconds"
LABEL_PROXY_PORT = "ai.det.proxy-port"
#: The context's ready marker, on containers whose context is copied in after the start.
LABEL_CONTEXT_READY = "ai.det.context-ready"

DEFAULT_WORKDIR = "/run/determined/workdir"
_ACTIVE_DOCKER = ("running", "restarting", "paused")
#: How long an exited container's end is reported as TERMINATING while its logs are shipped.
LOG_GRACE_SECONDS = 15.0


@dataclass
class Record:
    allocation_id: str
    task_id: str
    container_id: str  # ours (DET_CONTAINER_ID, label ai.det.container-id), known from ASSIGNED on
    state: AllocationState
    kill_grace: float = 30.0
    docker_id: str | None = None
    exit_code: int | None = None
    error: str | None = None
    killing: bool = False
    follower: LogFollower | None = None
    #: When (monotonic) the container was seen to exit.
    exited_at: float | None = None
    #: The port an interactive task's service listens on (host networking), and whether it
    #: has been seen accepting connections.
    proxy_port: int | None = None
    service_up: bool = False


def _name(allocation_id: str, container_id: str) -> str:
    return "det-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", allocation_id) + "-" + container_id[:8]


def _env_of(container: Any) -> dict[str, str]:
    """A container's environment (a sparse listing has none: inspected then)."""
    env = (container.attrs.get("Config") or {}).get("Env")
    if env is None:
        container.reload()
        env = (container.attrs.get("Config") or {}).get("Env")
    return dict(str(item).partition("=")[::2] for item in env or [])


def _has_file(container: Any, path: str) -> bool:
    """Whether ``path`` exists in the container (Docker's archive HEAD: no copy made)."""
    api = container.client.api
    url = api._url("/containers/{0}/archive", container.id)
    res = api.head(url, params={"path": path}, timeout=api.timeout)
    try:
        api._raise_for_status(res)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as e:  # unknown: the wrapper's own deadline still ends a wait
        logger.warning("cannot tell whether %s exists in %s: %s", path, container.short_id, e)
    return True


def _loopback(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def task_master_url(told: str | None, ours: str | None) -> str | None:
    """The master URL a task is told (pure): the master's (``DET_MASTER``, its ``master_url``),
    unless that is a loopback URL while this agent reaches the master elsewhere: then this
    agent's own. A master without ``master_url`` tells ``http://127.0.0.1:PORT``, which
    reaches it only from its own host; an agent on another machine knows a URL that works
    there (Determined's agent, too, gives its containers the master host it uses itself)."""
    if told and ours and _loopback(told) and not _loopback(ours):
        return ours
    return told


def container_env(
    spec: ContainerSpec,
    agent_id: str,
    container_id: str,
    allocation_id: str,
    master_url: str | None = None,
    fence_seconds: float | None = None,
) -> dict[str, str]:
    """The container's environment: the spec's, with this agent's view over it (``master_url``:
    the URL this agent reaches the master at, see :func:`task_master_url`; ``fence_seconds``:
    this agent's fence, after which a gang's container stops itself too without the master,
    ``det.exec.allocation_watch``)."""
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    url = task_master_url(env.get("DET_MASTER"), master_url)
    if url is not None:
        env["DET_MASTER"] = url
    env["DET_AGENT_ID"] = agent_id
    # Determined's harness reads DET_SLOT_IDS as a JSON list of ints (`ClusterInfo.slot_ids`).
    slot_ids = [int(s) if str(s).isdigit() else str(s) for s in spec.get("slotIds") or []]
    env["DET_SLOT_IDS"] = json.dumps(slot_ids)
    env["DET_CONTAINER_ID"] = container_id
    env.setdefault("DET_ALLOCATION_ID", allocation_id)
    if spec.get("taskId"):
        env.setdefault("DET_TASK_ID", str(spec["taskId"]))
    env.setdefault("DET_RESOURCES_TYPE", "docker-container")
    if fence_seconds:
        env[allocation_watch.FENCE_ENV] = f"{fence_seconds:g}"
    return env


def gpu_env(gpu_ids: list[str]) -> dict[str, str]:
    """``NVIDIA_VISIBLE_DEVICES`` as Docker's nvidia driver sets it for the device request
    (the slots' GPU ids), and ``void`` for a task without GPUs so that an engine whose default
    runtime is nvidia's does not hand a CPU task every GPU (CUDA images say ``all``).
    ``CUDA_VISIBLE_DEVICES`` is left alone, as Determined leaves it: the container sees only
    its GPUs, already numbered from 0."""
    if not gpu_ids:
        return {"NVIDIA_VISIBLE_DEVICES": "void"}
    return {
        "NVIDIA_VISIBLE_DEVICES": ",".join(gpu_ids),
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }


#: The intra-op thread count of OpenMP (PyTorch's CPU kernels, NumPy's BLAS read it too).
THREADS_ENV = "OMP_NUM_THREADS"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a cpuset narrows it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def threads_per_slot(cpus: int, slots: int) -> int:
    """One slot's share of the machine's CPUs, at least 1: each process of a task (a launcher
    starts one per slot) gets it as its thread count, as torchrun gives each of its ranks one.
    Without it every process of every task on a machine sizes its pool to the whole machine,
    and on a machine shared by tasks the pools' idle threads spin for each other's cores
    (measured: two small CPU trainings at once cost 5.0 CPU-s each with the default pools and
    1.6 with one thread each, for the same work)."""
    return max(1, cpus // max(1, slots))


def docker_options(spec: ContainerSpec) -> dict[str, Any]:
    """Capabilities and host devices of the spec, as docker-py's ``containers.create`` takes them."""
    out: dict[str, Any] = {}
    if spec.get("capAdd"):
        out["cap_add"] = [str(c) for c in spec["capAdd"]]
    if spec.get("capDrop"):
        out["cap_drop"] = [str(c) for c in spec["capDrop"]]
    devices = [
        f"{d['hostPath']}:{d.get('containerPath') or d['hostPath']}:{d.get('mode') or 'mrw'}"
        for d in spec.get("devices") or []
        if isinstance(d, dict) and d.get("hostPath")
    ]
    if devices:
        out["devices"] = devices
    return out


_RUN_AS = re.compile(r"([0-9]{1,10}):([0-9]{1,10})")


def run_as(spec: ContainerSpec) -> tuple[int, int] | None:
    """The (uid, gid) of the spec's ``user`` (its owner's agent user), None for the image's
    user. Numbers only (a name would be looked up in the image's own /etc/passwd) and never 0:
    a link is a non-root identity (the master refuses 0 too). BadSpec otherwise."""
    user = spec.get("user")
    if user is None:
        return None
    m = _RUN_AS.fullmatch(str(user))
    if m is None or not 0 < int(m[1]) < 2**31 or not 0 < int(m[2]) < 2**31:
        raise BadSpec(f"user: {user!r} is not 'uid:gid' with both between 1 and 2^31-1")
    return int(m[1]), int(m[2])


class DockerRuntime:
    def __init__(
        self,
        docker_client: Any,
        master: MasterClient,
        shipper: LogShipper,
        agent_id: str,
        slots: list[Slot],
        network_mode: str = "host",
        on_change: Callable[[], None] = lambda: None,
        harness: HarnessBundle | None = None,
        master_cert: MasterCert | None = None,
        mount_guard: MountGuard | None = None,
        context_after_start: bool = True,
    ) -> None:
        """`on_change` is called (from worker threads) when a start finishes or fails, so the
        loop can report the new state at once instead of a heartbeat interval later."""
        self._on_change = on_change
        self._docker = docker_client
        self._master = master
        self._shipper = shipper
        self.agent_id = agent_id
        self._slots = {s.id: s for s in slots}
        self._cpus = usable_cpus()  # shared by the slots: threads_per_slot
        self._network_mode = network_mode
        self._harness = harness  # det's task-side code, mounted into every container
        self._master_cert = master_cert  # how the harness verifies the master (TLS)
        self._mount_guard = mount_guard  # mounts refused whatever the master says
        self._context_after_start = context_after_start  # see _ready
        self._records: dict[str, Record] = {}
        self._lock = threading.Lock()
        #: The master's cluster id, None until the first heartbeat answer gave it (`adopt`).
        self.cluster_id: str | None = None
        #: The agent's fence (`Agent.fence_after`), told to the containers it starts.
        self.fence_seconds: float | None = None

    def _default_threads(self, args: dict[str, Any]) -> None:
        """``OMP_NUM_THREADS`` for a task that holds slots: one slot's share of the CPUs
        (:func:`threads_per_slot`), unless the task's environment or its image sets it."""
        env = args["environment"]
        if THREADS_ENV in env:
            return
        attrs = self._docker.images.get(args["image"]).attrs or {}
        if image_env((attrs.get("Config") or {}).get("Env"), THREADS_ENV) is not None:
            return
        env[THREADS_ENV] = str(threads_per_slot(self._cpus, len(self._slots)))

    def _master_url(self) -> str | None:
        # getattr: tests of the container arguments build a runtime without a master client.
        url = getattr(self._master, "master_url", None)
        return str(url) if url else None

    # ---- what is ----

    def _own_containers(self) -> list[Any]:
        """This agent's containers in this cluster (none while the cluster is unknown)."""
        if self.cluster_id is None:
            return []
        mine = []
        for c in self._docker.containers.list(
            all=True, sparse=True, filters={"label": f"{LABEL_AGENT}={self.agent_id}"}
        ):
            labels = c.attrs.get("Labels") or {}  # a sparse listing's (no `.labels`)
            if LABEL_CLUSTER in labels:
                if labels[LABEL_CLUSTER] == self.cluster_id:
                    mine.append(c)
            elif _env_of(c).get("DET_CLUSTER_ID") == self.cluster_id:
                mine.append(c)  # started by an agent that did not label the cluster yet
        return mine

    def adopt(self, cluster_id: str) -> bool:
        """Learn (from the master's heartbeat answer) which cluster this agent serves and adopt
        that cluster's containers of this agent; True when that changed anything. A changed
        cluster id (the master's database was replaced) forgets the old cluster's containers
        without touching them."""
        if cluster_id == self.cluster_id:
            return False
        if self.cluster_id is not None:
            logger.warning(
                "the master's cluster id changed (%s -> %s): leaving the old cluster's"
                " containers alone",
                self.cluster_id,
                cluster_id,
            )
            with self._lock:
                self._records.clear()
        self.cluster_id = cluster_id
        self.reattach()
        return True

    def reattach(self) -> None:
        """Adopt this agent's containers (of this cluster) left by a previous agent process."""
        for c in self._own_containers():
            c.reload()
            labels = c.labels or {}
            alloc = labels.get(LABEL_ALLOCATION)
            if alloc is None:
                continue
            if c.status == "created":
                # Never started: the context may be missing. The master still lists it as RUN
                # if it wants it, and the next reconcile starts a fresh one.
                logger.info("removing never-started container of %s", alloc)
                c.remove(force=True)
                continue
            rec = Record(
                allocation_id=alloc,
                task_id=labels.get(LABEL_TASK, ""),
                container_id=labels.get(LABEL_CONTAINER, c.id),
                state=AllocationState.RUNNING
                if c.status in _ACTIVE_DOCKER
                else AllocationState.TERMINATED,
                kill_grace=float(labels.get(LABEL_KILL_GRACE, "30")),
                docker_id=c.id,
                proxy_port=int(labels[LABEL_PROXY_PORT]) if LABEL_PROXY_PORT in labels else None,
            )
            if rec.state == AllocationState.TERMINATED:
                rec.exit_code = c.attrs.get("State", {}).get("ExitCode")
            elif LABEL_CONTEXT_READY in labels and not _has_file(c, labels[LABEL_CONTEXT_READY]):
                # The previous agent died while copying the context in: the wrapper is still
                # waiting for it and nothing of the user's ran. No copy resumes it: end it.
                rec.error = "start failed: context copy cut short by an agent restart"
                logger.warning("%s: %s", alloc, rec.error)
                try:
                    c.kill()
                except docker.errors.APIError as e:  # exited meanwhile: refresh reports it
                    logger.info("killing %s: %s", alloc, e)
            self._follow(rec)  # before the record is seen: see _follow
            with self._lock:
                self._records[alloc] = rec
            logger.info("reattached to %s (%s, %s)", alloc, c.short_id, rec.state.value)

    def refresh(self) -> None:
        """Fold Docker's view (exits, vanished containers) into the records."""
        # Records first, listing second: a container that a start thread moves to RUNNING
        # meanwhile must not be judged by a listing taken before it was created or started
        # (it would look vanished, or "created" with exit code 0).
        with self._lock:
            running = [r for r in self._records.values() if r.state == AllocationState.RUNNING]
        if not running:
            # Nothing to judge: no listing. An idle agent asked Docker every pass for nothing
            # (two idle agents 10.5 -> 8.0 CPU-ms/s, the engine 2.5 -> 1.5: bench/idle_master.py
            # --agents 2, medians of three).
            return
        status = {c.id: c for c in self._own_containers()}
        for rec in running:
            c = status.get(rec.docker_id or "")
            if c is not None and c.status in _ACTIVE_DOCKER:
                continue
            exit_code, error = None, None
            if c is None:
                error = "container disappeared"
            else:
                c.reload()
                if c.status in _ACTIVE_DOCKER:
                    continue
                exit_code = c.attrs.get("State", {}).get("ExitCode")
                error = c.attrs.get("State", {}).get("Error") or None
            # An error known before the exit (a failed context copy) says why it ended.
            error = error or rec.error
            with self._lock:
                rec.state, rec.exit_code, rec.error = AllocationState.TERMINATED, exit_code, error
                rec.exited_at = time.monotonic()
            logger.info("container of %s terminated (exit %s)", rec.allocation_id, exit_code)

    def _probe_services(self) -> None:
        """Marks the running tasks whose service now accepts connections (host networking:
        on this machine's loopback)."""
        with self._lock:
            waiting = [
                r
                for r in self._records.values()
                if r.proxy_port and not r.service_up and r.state == AllocationState.RUNNING
            ]
        for r in waiting:
            try:
                socket.create_connection(("127.0.0.1", int(r.proxy_port or 0)), timeout=0.2).close()
            except OSError:
                continue
            with self._lock:
                r.service_up = True
            logger.info("%s serves on port %s", r.allocation_id, r.proxy_port)

    def actual(self) -> list[Actual]:
        self._probe_services()
        now = time.monotonic()
        out = []
        with self._lock:
            for r in self._records.values():
                logs_done = r.follower is None or self._shipper.is_done(r.container_id)
                # An exited container's end waits for its last log lines, but not forever (a
                # master that refuses them must not keep the allocation alive).
                holding = (
                    r.state == AllocationState.TERMINATED
                    and not logs_done
                    and r.exited_at is not None
                    and now - r.exited_at < LOG_GRACE_SECONDS
                )
                out.append(
                    Actual(
                        allocation_id=r.allocation_id,
                        state=r.state,
                        container_id=r.container_id,
                        exit_code=r.exit_code,
                        error=r.error,
                        killing=r.killing,
                        logs_done=logs_done,
                        holding_end=holding,
                        proxy_port=r.proxy_port if r.service_up else None,
                    )
                )
        return out

    # ---- what to do ----

    def start(self, allocation_id: str, spec: ContainerSpec) -> None:
        rec = Record(
            allocation_id=allocation_id,
            task_id=str(spec.get("taskId", "")),
            container_id=str(uuid.uuid4()),
            state=AllocationState.ASSIGNED,
            kill_grace=float(spec.get("killGraceSeconds", 30)),
            proxy_port=spec.get("proxyPort") or None,
        )
        with self._lock:
            if allocation_id in self._records:
                return
            self._records[allocation_id] = rec
        logger.info("starting %s (image %s)", allocation_id, spec.get("image"))
        threading.Thread(
            target=self._start, args=(rec, spec), name=f"start-{allocation_id}", daemon=True
        ).start()

    def _set(self, rec: Record, state: AllocationState) -> bool:
        """Move a starting record on; False when a kill arrived meanwhile."""
        with self._lock:
            if rec.killing:
                return False
            rec.state = state
            return True

    def _start(self, rec: Record, spec: ContainerSpec) -> None:
        container = None
        try:
            judged = self._judge(spec)
            image = str(spec["image"])
            if spec.get("forcePull") or not self._has_image(image):
                if not self._set(rec, AllocationState.PULLING):
                    raise _Cancelled()
                logger.info("pulling %s for %s", image, rec.allocation_id)
                images.pull(self._docker, image, spec.get("registryAuth"))
            if not self._set(rec, AllocationState.STARTING):
                raise _Cancelled()
            workdir = str(spec.get("workdir") or DEFAULT_WORKDIR)
            owner = run_as(spec)
            fetch = None
            if spec.get("contextPath") or owner is not None:
                # An agent user gets a workdir of its own (its HOME), context or not. The
                # download overlaps the container's create (and its start, see below).
                fetch = _ContextFetch(self._master, spec, workdir, owner, self._ready(rec, spec))
            args = self._create_args(rec, spec, workdir, fetch.ready if fetch else None, judged)
            container = self._docker.containers.create(**args)
            with self._lock:
                rec.docker_id = container.id
            mismatch = verify_created(container.attrs, args)
            if mismatch is not None:
                raise MountRefused(
                    f"the created container differs from what was judged: {mismatch}"
                )
            if fetch is not None and fetch.ready is None:
                container.put_archive("/", fetch.result())
            if not self._set(rec, AllocationState.STARTING):
                raise _Cancelled()
            container.start()
            self._follow(rec)  # before RUNNING is seen: see _follow
            with self._lock:
                killed_meanwhile = rec.killing
                if not killed_meanwhile:
                    rec.state = AllocationState.RUNNING
            if killed_meanwhile:
                self._stop(rec)
                return
            logger.info("%s running in %s", rec.allocation_id, container.short_id)
            if fetch is not None and fetch.ready is not None:
                self._on_change()  # RUNNING reported now, not after the copy
                self._copy_into_started(rec, container, fetch)
        except _Cancelled:
            self._terminate_unstarted(rec, container, "killed before it started")
        except images.ImagePullError as e:
            logger.warning("starting %s failed: %s", rec.allocation_id, e)
            self._terminate_unstarted(rec, container, str(e))
        except Exception as e:
            logger.warning("starting %s failed: %s", rec.allocation_id, e)
            self._terminate_unstarted(rec, container, f"start failed: {e}")
        finally:
            self._on_change()

    def _judge(self, spec: ContainerSpec) -> Judged:
        """The spec's mounts and devices, their sources resolved on this host and judged
        (det.agent.mount_guard); MountRefused names the first one refused."""
        if self._mount_guard is None:
            return Judged(tuple(spec.get("bindMounts") or []), tuple(spec.get("devices") or []))
        return self._mount_guard.judge(spec)

    def _ready(self, rec: Record, spec: ContainerSpec) -> str | None:
        """The ready marker's path when the context may be copied in after the start: the
        command is det's wrapper from the harness bundle, which waits for the marker before
        it runs anything of the user's (det.common.context_ready), and the image has no
        ENTRYPOINT of its own (which would run before the wrapper); None: copy, then start."""
        command = spec.get("command")
        if not self._context_after_start or self._harness is None:
            return None
        if not isinstance(command, list) or len(command) < 3:
            return None
        if [str(a) for a in command[1:3]] != ["-m", "det.exec.run"]:
            return None
        config = self._docker.images.get(str(spec["image"])).attrs.get("Config") or {}
        if config.get("Entrypoint"):
            return None
        return context_ready.marker_path(rec.container_id)

    def _copy_into_started(self, rec: Record, container: Any, fetch: _ContextFetch) -> None:
        """Copy the context into the started container. The wrapper waits for the ready marker
        (the archive's last member): a failed copy kills the container at once (SIGKILL: only
        the wrapper runs) and the task ends with the copy's error; a kill meanwhile wins."""
        try:
            container.put_archive("/", fetch.result())
            return
        except Exception as e:
            error = f"start failed: context copy: {e}"
        with self._lock:
            if rec.killing or rec.state != AllocationState.RUNNING:
                return  # killed or gone meanwhile: that is the task's end, not the copy
            rec.error = error
        logger.warning("%s: %s", rec.allocation_id, error)
        try:
            container.kill()
        except Exception as e:  # exited meanwhile: refresh reports it with the error above
            logger.info("killing %s after its failed copy: %s", rec.allocation_id, e)

    def _terminate_unstarted(self, rec: Record, container: Any, error: str) -> None:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception as e:
                logger.warning("cannot remove unstarted container of %s: %s", rec.allocation_id, e)
        with self._lock:
            rec.state, rec.error, rec.docker_id = AllocationState.TERMINATED, error, None

    def _has_image(self, image: str) -> bool:
        try:
            self._docker.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def _create_args(
        self,
        rec: Record,
        spec: ContainerSpec,
        workdir: str,
        ready: str | None = None,
        judged: Judged | None = None,
    ) -> dict[str, Any]:
        """docker-py's ``containers.create`` arguments; mounts and devices from ``judged`` (their
        sources resolved), else as the spec has them (tests of the arguments alone)."""
        if judged is None:
            judged = Judged(tuple(spec.get("bindMounts") or []), tuple(spec.get("devices") or []))
        slot_ids = [str(s) for s in spec.get("slotIds") or []]
        args: dict[str, Any] = {
            "image": str(spec["image"]),
            "command": spec.get("command"),
            "environment": container_env(
                spec,
                self.agent_id,
                rec.container_id,
                rec.allocation_id,
                self._master_url(),
                self.fence_seconds,
            ),
            "labels": {
                LABEL_AGENT: self.agent_id,
                LABEL_ALLOCATION: rec.allocation_id,
                LABEL_TASK: rec.task_id,
                LABEL_CONTAINER: rec.container_id,
                LABEL_KILL_GRACE: str(rec.kill_grace),
                **({LABEL_PROXY_PORT: str(rec.proxy_port)} if rec.proxy_port else {}),
                # Set once the master named its cluster, before any start (`adopt`).
                **({LABEL_CLUSTER: self.cluster_id} if self.cluster_id else {}),
            },
            "name": _name(rec.allocation_id, rec.container_id),
            "working_dir": workdir,
            "network_mode": spec.get("networkMode") or self._network_mode,
            "detach": True,
            "mounts": [
                docker.types.Mount(
                    target=m["containerPath"],
                    source=m["hostPath"],
                    type="bind",
                    read_only=bool(m.get("readOnly", False)),
                    propagation=m.get("propagation") or None,
                )
                for m in judged.mounts
            ],
        }
        shm = spec.get("shmSize")
        if shm:
            # Bytes, or a size string Docker understands ("4G"), as Determined's shm_size allows.
            args["shm_size"] = int(shm) if str(shm).isdigit() else str(shm)
        args.update(docker_options({**spec, "devices": list(judged.devices)}))
        owner = run_as(spec)
        if owner is not None:
            args["user"] = f"{owner[0]}:{owner[1]}"
            # A setuid program in the image (sudo, su) cannot take the task back to root.
            args["security_opt"] = ["no-new-privileges:true"]
            args["environment"].setdefault("HOME", workdir)
        gpus = self._gpu_ids(spec, slot_ids)
        args["environment"].update(gpu_env(gpus))
        if slot_ids:
            self._default_threads(args)
        if gpus:
            # As Determined's agent asks for them; Docker's nvidia driver then exposes only these
            # GPUs (numbered from 0 inside the container).
            args["device_requests"] = [
                docker.types.DeviceRequest(
                    driver="nvidia", device_ids=gpus, capabilities=[["gpu", "compute", "utility"]]
                )
            ]
        if self._harness is not None:
            self._harness.apply(args, self._docker)
        if ready is not None:
            args["environment"][context_ready.ENV] = ready
            args["labels"][LABEL_CONTEXT_READY] = ready
        if self._master_cert is not None:
            task_container_cert(args, self._master_cert)
        return args

    def _gpu_ids(self, spec: ContainerSpec, slot_ids: list[str]) -> list[str]:
        """The NVIDIA ids (UUIDs where known, else indices) of a CUDA task's slots."""
        if spec.get("deviceType") != "cuda":
            return []
        return [self._slots[s].uuid or s if s in self._slots else s for s in slot_ids]

    def _follow(self, rec: Record) -> None:
        """Starts the log follower of ``rec``'s container. Called before ``refresh`` can see the
        record RUNNING (or at all): a record it moves to TERMINATED without a follower would
        count as every log line shipped (``actual``), its end be reported at once and its
        container removed, before a follower started after it read a line."""
        if rec.docker_id is None or rec.follower is not None:
            return
        meta = {
            "task_id": rec.task_id,
            "allocation_id": rec.allocation_id,
            "agent_id": self.agent_id,
            "container_id": rec.container_id,
        }
        follower = LogFollower(self._docker, self._shipper, rec.docker_id, rec.container_id, meta)
        with self._lock:
            rec.follower = follower
        follower.start()

    def kill(
        self, allocation_id: str, *, grace: float | None = None, error: str | None = None
    ) -> None:
        """Stops the container gracefully (once). ``grace`` shortens its grace period and
        ``error`` is reported as why it ended (the agent's fencing gives both)."""
        with self._lock:
            rec = self._records.get(allocation_id)
            if rec is None or rec.killing or rec.state == AllocationState.TERMINATED:
                return
            rec.killing = True
            if grace is not None:
                rec.kill_grace = min(rec.kill_grace, grace)
            if error is not None:
                rec.error = rec.error or error
            docker_id, state = rec.docker_id, rec.state
        logger.info("killing %s (grace %.0fs)", allocation_id, rec.kill_grace)
        if docker_id is not None and state == AllocationState.RUNNING:
            threading.Thread(
                target=self._stop, args=(rec,), name=f"kill-{allocation_id}", daemon=True
            ).start()

    def _stop(self, rec: Record) -> None:
        """SIGTERM, then SIGKILL after the grace period (Docker's stop does exactly that)."""
        try:
            self._docker.containers.get(rec.docker_id).stop(timeout=int(rec.kill_grace))
        except Exception as e:
            logger.warning("stopping %s failed (retried next pass): %s", rec.allocation_id, e)
            with self._lock:
                rec.killing = False
        self._on_change()

    def remove(self, allocation_id: str) -> None:
        with self._lock:
            rec = self._records.pop(allocation_id, None)
        if rec is None:
            return
        if rec.docker_id is not None:
            try:
                self._docker.containers.get(rec.docker_id).remove(force=True)
            except Exception as e:
                logger.warning("removing container of %s: %s", allocation_id, e)
        self._shipper.forget(rec.container_id)
        logger.info("removed %s", allocation_id)


class _Cancelled(Exception):
    pass


class _ContextFetch:
    """The context's download and re-rooting, on a thread of its own from construction on, so
    that it overlaps the container's create (and start); :meth:`result` waits for it and
    raises what it raised."""

    def __init__(
        self,
        master: MasterClient,
        spec: ContainerSpec,
        workdir: str,
        owner: tuple[int, int] | None,
        ready: str | None,
    ) -> None:
        self.ready = ready
        self._archive: bytes | None = None
        self._error: BaseException | None = None
        path = str(spec["contextPath"]) if spec.get("contextPath") else None
        self._thread = threading.Thread(
            target=self._run, args=(master, path, workdir, owner), daemon=True
        )
        self._thread.start()

    def _run(
        self, master: MasterClient, path: str | None, workdir: str, owner: tuple[int, int] | None
    ) -> None:
        try:
            tgz = master.context(path) if path else b""
            self._archive = context_tar(tgz, workdir, owner, self.ready)
        except BaseException as e:  # handed to the start thread by result()
            self._error = e

    def result(self) -> bytes:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._archive is not None
        return self._archive
