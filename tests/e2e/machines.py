"""Machines that share nothing but a network, on one host (issue 39).

Each machine is a privileged container of the det-base image family (``det-base:bookworm`` plus
Debian's ``docker.io`` and a venv with det installed from a wheel of this repository, as the
images get it) running its OWN Docker engine (storage on a Docker volume of its own) and its own
``det-agent``. The machines are joined by a user-defined bridge network only, each at its own
address; the master (and PostgreSQL) run outside, on the host, and the machines reach it at the
bridge's gateway address. Task images reach a machine's engine the way a real cluster gets
them: ``docker pull`` from a registry on the host (Debian's ``docker-registry``, basic auth),
where the task image is pushed once per session; nothing is copied from the host's engine.

What a machine shares with the host, as machines of a cluster share an NFS export: the
directories passed as ``shared`` (the master's ``shared_fs`` checkpoint storage), bind-mounted
at the same path. Nothing else of the host is visible.

:func:`machines` is a context manager (tests wrap it in a module-scoped fixture); everything it
creates (containers, their volumes, the network, the registry's files) is removed at its end.
``DET_MACHINES_CACHE=DIR`` (a warm start; ``.ci/run`` sets it under its cache) keeps the
registry's storage in DIR and each machine's engine volume (``det-machines-cache-HASH-N``, HASH
from DIR's path) for the next session instead, so the next start pushes no layer and pulls
only manifests. One session at a time: two engines may not share one volume, so a session holds
an exclusive lock on DIR (``tests/cache_lock.py``) from before the first machine starts until
the last is removed; when another session holds it, this one runs uncached (fresh volumes, a
temporary registry) and says so on stderr and in :meth:`Machines.report`. A changed task image
still reaches the machines: the push sends its new layers under the same tag, each machine
pulls by that tag and its image must have the host's image ID; the references it no longer
needs are then removed from the engines, and the registry's untagged manifests and their
blobs are garbage-collected when it stops, so the cache does not grow with each change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.cache_lock import try_cache_lock

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "det-base:bookworm"
MACHINE_IMAGE = "det-machine:bookworm"
#: The task image the machines run: torch and the official ``determined`` package on bookworm's
#: Python (Determined's tutorials import it, and its Core API needs torch for its TensorBoard
#: writer); det's own harness comes from the agent's bundle.
TASK_IMAGE = "det-official:py3.11-torch"
REGISTRY_USER = ("machines", "machines-pw")
LABEL = "ai.det.machines"
AGENT_LOG = "/var/log/det-agent.log"
AGENT_PID = "/run/det-agent.pid"
#: Wheels for CPython 3.11 on manylinux x86_64 (bookworm's python3), as infra/build-images.sh.
_PIP_TARGET = [
    "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
    "--abi", "cp311", "--platform", "manylinux_2_28_x86_64", "--platform",
    "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform", "any",
]  # fmt: skip

_MACHINE_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN apt-get update -q \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
       docker.io iproute2 procps \\
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/det/venv PYTHONUNBUFFERED=1 \\
    PATH=/opt/det/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN python3 -m venv "$VIRTUAL_ENV"
COPY deps /tmp/deps
RUN pip install -q --no-index --find-links /tmp/deps /tmp/deps/*.whl && rm -rf /tmp/deps
COPY det /tmp/det
RUN pip install -q --no-index --no-deps /tmp/det/*.whl && rm -rf /tmp/det \\
    && python3 -c "import det.agent.daemon"
"""


def run(*cmd: str, timeout: float = 600, check: bool = True) -> str:
    """Runs ``cmd``; its stdout (and stderr, when it failed and ``check`` is off). A failure
    raises with the command and its output."""
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout if p.returncode == 0 else p.stdout + p.stderr


# --- images (on the host's engine: the machines' root file system, and the one push) ---------


def _pip(*args: str) -> None:
    run(sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check")


def build_machine_image() -> str:
    """``det-machine:bookworm``: docker.io and det[agent] from a wheel of this tree. Docker's
    layer cache keeps the apt and dependency layers while only det's code changes."""
    # Here, not at the top: the release builder (deploy code) is needed by this builder only.
    from det.deploy.common import release

    with tempfile.TemporaryDirectory(prefix="det-machine-") as tmp:
        ctx = Path(tmp)
        built = release.build(ctx / "det")
        (ctx / "deps").mkdir()
        wheel = next((ctx / "det").glob("det_platform-*.whl"))
        (ctx / "constraints.txt").write_text(built.constraints)
        _pip("download", "--dest", str(ctx / "deps"), *_PIP_TARGET,
             "--constraint", str(ctx / "constraints.txt"), f"{wheel}[agent]")  # fmt: skip
        for w in (ctx / "deps").glob("det_platform-*.whl"):
            w.unlink()
        for extra in (ctx / "det").iterdir():
            if extra.suffix != ".whl":
                extra.unlink()
        (ctx / "Dockerfile").write_text(_MACHINE_DOCKERFILE)
        run("docker", "build", "-q", "-t", MACHINE_IMAGE, str(ctx), timeout=1200)
    return MACHINE_IMAGE


def task_image_present() -> str:
    """The task image on the host's engine (built by ``infra/build-images.sh torch``)."""
    if not run("docker", "image", "ls", "-q", TASK_IMAGE).strip():
        raise RuntimeError(f"image {TASK_IMAGE} missing: run infra/build-images.sh torch")
    return TASK_IMAGE


# --- machines ---------------------------------------------------------------------------------


@dataclass
class Machine:
    """One machine: a container with its own engine and agent, at ``address`` on the bridge."""

    name: str
    volume: str
    address: str = ""
    agent_id: str = ""
    agent_argv: list[str] = field(default_factory=list)
    #: The CPU slots of the agent :meth:`Machines.start_agents` last started here (0: none).
    slots: int = 0
    #: The host CPUs the machine runs on (``--cpuset-cpus``): a CPU of its own where the host
    #: has as many as machines, else shared round-robin. Its agent sizes its tasks' thread pools
    #: by them (det.agent.containers.threads_per_slot), as on a machine of its own.
    cpuset: str = ""

    def sh(self, script: str, timeout: float = 120, check: bool = True) -> str:
        return run("docker", "exec", self.name, "sh", "-c", script, timeout=timeout, check=check)

    def docker(self, *args: str, timeout: float = 600) -> str:
        """The machine's own Docker CLI (its own engine)."""
        return run("docker", "exec", self.name, "docker", *args, timeout=timeout)

    def task_containers(self, running: bool = False) -> list[str]:
        """The det task containers on this machine's engine (all, or the running ones)."""
        out = self.docker(
            "ps", "-q" if running else "-aq", "--filter", "label=ai.det.allocation-id"
        )
        return out.split()

    def start_agent(self) -> None:
        """Starts the agent (``agent_argv``); a running one is stopped first (a restart)."""
        if self.agent_alive():
            self.stop_agent()
        quoted = " ".join(f"'{a}'" for a in self.agent_argv)
        self.sh(f"{quoted} >>{AGENT_LOG} 2>&1 </dev/null & echo $! >{AGENT_PID}")

    def stop_agent(self, timeout: float = 30) -> None:
        """SIGTERM to the agent (det-agent's stop: its containers keep running) and wait until
        it is gone; SIGKILL after ``timeout``."""
        self.kill_agent(15)
        deadline = time.monotonic() + timeout
        while self.agent_alive():
            if time.monotonic() > deadline:
                self.kill_agent(9)
            time.sleep(0.2)

    def agent_alive(self) -> bool:
        out = self.sh(f"kill -0 $(cat {AGENT_PID}) 2>/dev/null && echo yes", check=False)
        return out.strip() == "yes"

    def kill_agent(self, signal: int = 9) -> None:
        self.sh(f"kill -{signal} $(cat {AGENT_PID})")

    def agent_log(self) -> str:
        return self.sh(f"cat {AGENT_LOG} 2>/dev/null", check=False)

    def cut_network(self) -> str:
        """Takes the machine's link down (``ip link set eth0 down`` in its namespace): nothing
        reaches or leaves it by network, its engine and processes run on. Returns its default
        route, which the kernel drops with the link, for :meth:`restore_network`."""
        route = self.sh("ip route show default").strip()
        self.sh("ip link set eth0 down")
        return route

    def restore_network(self, route: str) -> None:
        """The link up again, with its default route (the bridge's subnet comes back with it)."""
        self.sh("ip link set eth0 up")
        if route:
            self.sh(f"ip route replace {route}")


@dataclass
class Machines:
    network: str
    gateway: str
    registry: str  # GATEWAY:PORT, as the machines name it
    machines: list[Machine]
    timings: dict[str, float] = field(default_factory=dict)
    #: How the session started: "uncached", "cache DIR", or why the cache was not used.
    cache: str = "uncached"

    def task_image(self) -> str:
        return f"{self.registry}/{TASK_IMAGE}"

    def first(self, n: int) -> Machines:
        """The first ``n`` machines as a group of their own (the same machines, not copies):
        its :meth:`start_agents` starts agents on those only."""
        if not 1 <= n <= len(self.machines):
            raise ValueError(f"n={n}: this group has {len(self.machines)} machines")
        return dataclasses.replace(self, machines=self.machines[:n])

    def registry_auth(self) -> dict[str, str]:
        """Determined's ``environment.registry_auth`` for the registry."""
        user, password = REGISTRY_USER
        return {"username": user, "password": password, "serveraddress": self.registry}

    def start_agents(
        self, master_port: int, agent_token: str, slots: int = 1, heartbeat: float = 0.5
    ) -> None:
        """An agent with ``slots`` CPU slots on each machine (a running one restarted), for a
        master on this host at ``master_port`` (listening on the bridge's gateway: bind
        ``0.0.0.0``), reached at the gateway's address."""
        for m in self.machines:
            m.agent_id = m.name
            m.slots = slots
            m.agent_argv = [
                "det-agent", "--master-url", f"http://{self.gateway}:{master_port}",
                "--agent-id", m.agent_id, f"--agent-token={agent_token}",
                "--slot-type", "cpu", "--artificial-slots", str(slots),
                "--heartbeat-seconds", str(heartbeat),
                "--state-dir", "/var/lib/det-agent", "--log-level", "INFO",
            ]  # fmt: skip
            m.start_agent()

    def report(self) -> str:
        return f"{self.cache}; " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())


def _network(name: str) -> tuple[str, str]:
    run("docker", "network", "create", "--driver", "bridge", "--label", LABEL, name)
    info = json.loads(run("docker", "network", "inspect", name))[0]
    config = info["IPAM"]["Config"][0]
    return name, str(config["Gateway"])


def _caps() -> list[str]:
    """Every capability the host's engine may give (see scripts/fresh-machine.sh: some sandboxed
    hosts lack CAP_SYS_RESOURCE in their bounding set, and --privileged then fails)."""
    caps = ["--cap-add", "ALL"]
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:") and not (int(line.split()[1], 16) >> 24) & 1:
            caps += ["--cap-drop", "SYS_RESOURCE"]
    return caps


def _start_container(m: Machine, network: str, shared: Sequence[Path], keep_cache: bool) -> None:
    if not keep_cache:
        run("docker", "volume", "create", "--label", LABEL, m.volume)
    mounts: list[str] = []
    for d in shared:
        mounts += ["-v", f"{d}:{d}"]
    run("docker", "run", "-d", "--init", "--name", m.name, "--hostname", m.name,
        "--label", LABEL, "--network", network, *_caps(),
        *(["--cpuset-cpus", m.cpuset] if m.cpuset else []),
        "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        "--security-opt", "systempaths=unconfined", "--cgroupns", "private",
        "-v", f"{m.volume}:/var/lib/docker", *mounts,
        MACHINE_IMAGE, "sleep", "infinity")  # fmt: skip
    # The engine inside needs /sys and the cgroup hierarchies writable.
    m.sh("mount -o remount,rw /sys && for d in /sys/fs/cgroup/*/; do"
         " mount -o remount,bind,rw \"$d\"; done")  # fmt: skip
    info = json.loads(run("docker", "inspect", m.name))[0]
    m.address = str(info["NetworkSettings"]["Networks"][network]["IPAddress"])


def _start_engine(m: Machine, registry: str) -> None:
    m.sh(f"dockerd --insecure-registry {registry} >/var/log/dockerd.log 2>&1 </dev/null &")
    deadline = time.monotonic() + 120
    while m.sh("docker info >/dev/null 2>&1 && echo up", check=False).strip() != "up":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{m.name}'s engine did not start:\n" + m.sh(
                "tail -n 30 /var/log/dockerd.log", check=False))  # fmt: skip
        time.sleep(0.5)


def _pull(m: Machine, image: str, registry: str, image_id: str, cached: bool) -> None:
    """``image`` into the machine's engine, by tag; it must be the host's image ``image_id``
    (a stale cached copy would not be). Cached: every other reference in the engine (the tags of
    earlier sessions' registry ports, an older task image) is removed, and what it held."""
    user, password = REGISTRY_USER
    if cached:  # a dead session's task containers, kept by the volume
        m.sh("docker ps -aq | xargs -r docker rm -f >/dev/null", check=False)
    m.sh(f"echo '{password}' | docker login -u {user} --password-stdin {registry} >/dev/null")
    m.docker("pull", "-q", image, timeout=900)
    m.sh(f"docker logout {registry} >/dev/null")
    pulled = m.docker("image", "inspect", "--format", "{{.Id}}", image).strip()
    if pulled != image_id:
        raise RuntimeError(f"{m.name} pulled {image} as {pulled}, the host has {image_id}")
    if cached:
        refs = m.docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}").split()
        stale = [r for r in refs if r != image and "<none>" not in r]
        if stale:  # untags, or removes an image no tag is left on
            run("docker", "exec", m.name, "docker", "rmi", *stale, check=False)
        m.sh("docker image prune -f >/dev/null", check=False)


def host_image_id(image: str) -> str:
    return run("docker", "image", "inspect", "--format", "{{.Id}}", image).strip()


def cache_volume(directory: Path, i: int) -> str:
    """Machine ``i``'s engine volume for the cache ``directory`` (one set per directory)."""
    key = hashlib.sha256(str(directory).encode()).hexdigest()[:10]
    return f"{CACHE_VOLUME_PREFIX}{key}-{i}"


CACHE_VOLUME_PREFIX = "det-machines-cache-"


@contextlib.contextmanager
def session_cache(setting: str | None) -> Iterator[tuple[Path | None, str]]:
    """The machines' cache (``DET_MACHINES_CACHE``) held for the session: yields (its
    directory, "cache DIR") while this process holds its lock, or (None, why not) to run
    uncached: no setting, or another session holds it (said on stderr too)."""
    if not setting:
        yield None, "uncached"
        return
    directory = Path(setting).resolve()
    with try_cache_lock(directory) as held:
        if held:
            yield directory, f"cache {directory}"
            return
        note = (
            f"uncached: DET_MACHINES_CACHE={directory} is held by another session (fresh "
            "engine volumes, a temporary registry)"
        )
        print(f"machines: {note}", file=sys.stderr, flush=True)
        yield None, note


def _free_cache_volumes(made: Sequence[Machine]) -> None:
    """With the cache's lock held: a container still using one of its volumes is a leftover of a
    session that died (its engine may still run on the volume): removed before a new engine
    starts there."""
    for m in made:
        for c in run("docker", "ps", "-aq", "--filter", f"volume={m.volume}").split():
            run("docker", "exec", c, "sh", "-c", "kill $(pidof dockerd)", check=False)
            run("docker", "rm", "-f", c, check=False)


def _collect_registry(directory: Path) -> None:
    """The stopped registry's untagged manifests (an older task image) and their blobs removed."""
    config = directory / "config.yml"
    if config.exists():
        run("docker-registry", "garbage-collect", "--delete-untagged", str(config),
            timeout=600, check=False)  # fmt: skip


def _push(tmp: Path, registry: str) -> None:
    """The task image into the registry, from the host's engine (its login kept in ``tmp``)."""
    env = {**os.environ, "DOCKER_CONFIG": str(tmp / "docker-config")}
    user, password = REGISTRY_USER
    subprocess.run(["docker", "login", "-u", user, "--password-stdin", registry], env=env,
                   input=password, text=True, capture_output=True, check=True)  # fmt: skip
    pushed = f"{registry}/{TASK_IMAGE}"
    run("docker", "tag", TASK_IMAGE, pushed)
    try:
        subprocess.run(["docker", "push", "-q", pushed], env=env, capture_output=True,
                       text=True, check=True, timeout=900)  # fmt: skip
    finally:
        run("docker", "rmi", pushed, check=False)


@contextlib.contextmanager
def machines(
    tmp: Path,
    n: int,
    *,
    shared: Sequence[Path] = (),
) -> Iterator[Machines]:
    """Starts ``n`` machines and waits until each engine holds the task image; their agents
    start with :meth:`Machines.start_agents`, once a master listens. Removes everything at the
    end (or keeps each engine's volume, see the module's docstring)."""
    with (
        session_cache(os.environ.get("DET_MACHINES_CACHE")) as (cache, how),
        _machines(tmp, n, shared, cache, how) as group,
    ):
        yield group


@contextlib.contextmanager
def _machines(
    tmp: Path, n: int, shared: Sequence[Path], cache: Path | None, how: str
) -> Iterator[Machines]:
    # Here, not at the top: the registry helper skips the test when its tools are missing,
    # which only a caller of this function should pay for.
    from tests.docker_registry import private_registry

    run_id = os.urandom(3).hex()
    keep = cache is not None
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    image_id = host_image_id(task_image_present())
    build_machine_image()
    timings["images built (host)"] = time.monotonic() - t0
    host_cpus = sorted(os.sched_getaffinity(0))
    made = [
        Machine(
            name=f"det-machine-{run_id}-{i}",
            volume=cache_volume(cache, i) if cache else f"det-machine-{run_id}-{i}-docker",
            cpuset=str(host_cpus[i % len(host_cpus)]),
        )
        for i in range(n)
    ]
    if keep:
        _free_cache_volumes(made)
    network = f"det-machines-{run_id}"
    started = time.monotonic()
    net_made = False
    try:
        with private_registry(
            (cache or tmp) / "registry", dict([REGISTRY_USER]), bind="0.0.0.0"
        ) as local:
            network, gateway = _network(network)
            net_made = True
            registry = f"{gateway}:{local.rsplit(':', 1)[1]}"
            group = Machines(network, gateway, registry, made, timings, how)
            t = time.monotonic()
            _push(tmp, local)
            timings["task image pushed (host)"] = time.monotonic() - t

            t = time.monotonic()
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda m: _start_container(m, network, shared, keep), made))
                timings["machines started"] = time.monotonic() - t
                t = time.monotonic()
                list(pool.map(lambda m: _start_engine(m, registry), made))
                timings["engines up"] = time.monotonic() - t
                t = time.monotonic()
                image = group.task_image()
                list(pool.map(lambda m: _pull(m, image, registry, image_id, keep), made))
                timings["task image pulled (each machine)"] = time.monotonic() - t
            timings[f"{n} machines ready (after the image build)"] = time.monotonic() - started
            yield group
    finally:
        _remove(made, network if net_made else None, keep)
        if cache is not None:
            _collect_registry(cache / "registry")


def _remove(made: Sequence[Machine], network: str | None, keep_cache: bool) -> None:
    for m in made:
        # The machine's engine first: its containers die with it, and the volume holds no
        # running state for the next session.
        run("docker", "exec", m.name, "sh", "-c",
            "docker ps -aq | xargs -r docker rm -f >/dev/null; kill $(pidof dockerd)", check=False)  # fmt: skip
        run("docker", "rm", "-f", "-v", m.name, check=False)
        if not keep_cache:
            run("docker", "volume", "rm", "-f", m.volume, check=False)
    if network is not None:
        run("docker", "network", "rm", network, check=False)


def leftovers() -> list[str]:
    """What any session of this module left on the host's engine (containers, volumes,
    networks labelled ``ai.det.machines``), cache volumes aside."""
    found = []
    for kind in ("container", "volume", "network"):
        ls = ["docker", kind, "ls", "-q", "--filter", f"label={LABEL}"]
        if kind == "container":
            ls.insert(3, "-a")
        out = run(*ls, check=False).split()
        found += [f"{kind} {x}" for x in out if not x.startswith(CACHE_VOLUME_PREFIX)]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/machines.sh [-n N] [--hold]``: starts N machines, prints what each phase took
    (and with ``--hold`` waits for Enter with them up, printing how to reach them), removes
    them."""
    import argparse  # why: only the command line needs it

    parser = argparse.ArgumentParser(prog="scripts/machines.sh", description=main.__doc__)
    parser.add_argument("-n", "--machines", type=int, default=2)
    parser.add_argument("--hold", action="store_true", help="keep them up until Enter")
    args = parser.parse_args(argv)
    if args.machines < 1:
        parser.error("-n/--machines: at least 1")
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="det-machines-") as tmp:
        with machines(Path(tmp), args.machines) as group:
            for m in group.machines:
                print(f"{m.name}: {m.address} (engine volume {m.volume})")
            print(f"bridge {group.network}, gateway {group.gateway}, registry {group.registry}")
            print(f"task image in each engine: {group.task_image()}")
            if args.hold:
                print(f"docker exec -it {group.machines[0].name} bash  # a machine's shell")
                input("Enter removes them... ")
            removing = time.monotonic()
        group.timings["removed"] = time.monotonic() - removing
    group.timings["total"] = time.monotonic() - t
    for name, seconds in group.timings.items():
        print(f"  {name:<44} {seconds:7.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
