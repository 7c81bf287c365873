"""Determined's ``environment`` block and master.yaml's ``task_container_defaults`` on a real
cluster: what a trial sees inside its container, and images from a private registry with basic
auth (Debian's ``docker-registry``), including the one-line failure of a refused pull."""

from __future__ import annotations

import contextlib
import json
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.docker_registry import private_registry
from tests.e2e.cluster import TASK_IMAGE, Cluster, cluster_factory, wait_for

__all__ = ["cluster_factory"]

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

SHOW = textwrap.dedent(
    """\
    import json, os, shutil, stat
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    def read(path):
        try:
            return open(path).read().strip()
        except OSError as e:
            return f"error: {e.strerror}"
    dev = "/dev/det-null"
    print("ENVCHECK " + json.dumps({
        "env": {k: os.environ.get(k) for k in (
            "FROM_TCD", "FROM_POOL", "SHARED", "EXP_ONLY", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")},
        "cap_eff": status["CapEff"].strip(),
        "shm_bytes": shutil.disk_usage("/dev/shm").total,
        "tcd_file": read("/tcd-data/hello.txt"),
        "shared_file": read("/shared/hello.txt"),
        "exp_file": read("/exp-data/hello.txt"),
        "device_is_char": os.path.exists(dev) and stat.S_ISCHR(os.stat(dev).st_mode),
        "has_password": any("right-horse" in v for v in os.environ.values()),
    }), flush=True)
    """
)

BASE: dict[str, Any] = {
    "name": "environment",
    "entrypoint": "python3 show.py",
    "searcher": {"name": "single", "metric": "loss"},
    "max_restarts": 3,
}

CAP_CHOWN = 0
CAP_NET_ADMIN = 12
CAP_SYS_PTRACE = 19


def context(tmp: Path) -> Path:
    ctx = tmp / "ctx"
    ctx.mkdir(exist_ok=True)
    (ctx / "show.py").write_text(SHOW)
    return ctx


def host_dir(tmp: Path, name: str, text: str) -> str:
    d = tmp / name
    d.mkdir()
    (d / "hello.txt").write_text(text)
    d.chmod(0o755)
    (d / "hello.txt").chmod(0o644)
    return str(d)


def env_report(cluster: Cluster, tid: int) -> dict[str, Any]:
    for entry in cluster.trial_logs(tid):
        text = str(entry.get("log") or "")
        if text.startswith("ENVCHECK "):
            return dict(json.loads(text.removeprefix("ENVCHECK ")))
    raise AssertionError(f"trial {tid} printed no ENVCHECK line\n{cluster.dump()}")


def only_trial(cluster: Cluster, eid: int) -> dict[str, Any]:
    trials = wait_for(lambda: cluster.trials(eid), 60, "the trial to exist")
    assert len(trials) == 1, trials
    return dict(trials[0])


def test_defaults_apply_and_the_experiment_overrides_them_inside_the_container(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    tcd_dir = host_dir(tmp_path, "tcd", "from the cluster")
    shared_cluster = host_dir(tmp_path, "shared-cluster", "cluster's /shared")
    shared_exp = host_dir(tmp_path, "shared-exp", "experiment's /shared")
    exp_dir = host_dir(tmp_path, "exp", "from the experiment")
    cluster = cluster_factory(
        agents=1,
        slots=1,
        extra={
            "task_container_defaults": {
                "image": {"cpu": TASK_IMAGE, "cuda": TASK_IMAGE},
                "environment_variables": ["FROM_TCD=cluster", "SHARED=cluster"],
                "add_capabilities": ["SYS_PTRACE"],
                "shm_size_bytes": 128 * 1024**2,
                "bind_mounts": [
                    {"host_path": tcd_dir, "container_path": "/tcd-data", "read_only": True},
                    {"host_path": shared_cluster, "container_path": "/shared"},
                ],
            },
            "resource_pools": [
                {
                    "pool_name": "default",
                    "task_container_defaults": {"environment_variables": ["FROM_POOL=pool"]},
                }
            ],
        },
    )
    eid = cluster.create(
        {
            **BASE,
            "environment": {
                "environment_variables": {"cpu": ["SHARED=experiment", "EXP_ONLY=1"]},
                "drop_capabilities": ["CHOWN"],
                "proxy_ports": [{"proxy_port": 8888}],
            },
            "resources": {"shm_size": "256M", "devices": ["/dev/null:/dev/det-null:rw"]},
            "bind_mounts": [
                {"host_path": exp_dir, "container_path": "/exp-data", "read_only": True},
                {"host_path": shared_exp, "container_path": "/shared"},
            ],
        },
        context(tmp_path),
    )
    cluster.wait_state(eid, "STATE_COMPLETED", 240)
    seen = env_report(cluster, only_trial(cluster, eid)["id"])

    assert seen["env"] == {
        "FROM_TCD": "cluster",  # the cluster's default applies
        "FROM_POOL": "pool",  # and the pool's, merged over it
        "SHARED": "experiment",  # the experiment's value of the same name wins
        "EXP_ONLY": "1",
        "NVIDIA_VISIBLE_DEVICES": "void",  # a CPU task sees no GPU even in a CUDA image
        "CUDA_VISIBLE_DEVICES": None,
    }
    caps = int(seen["cap_eff"], 16)
    assert caps & (1 << CAP_SYS_PTRACE), seen["cap_eff"]  # added by the cluster
    assert not caps & (1 << CAP_CHOWN), seen["cap_eff"]  # dropped by the experiment
    assert not caps & (1 << CAP_NET_ADMIN), seen["cap_eff"]  # Docker's defaults otherwise
    assert seen["shm_bytes"] == 256 * 1024**2  # the experiment's shm_size over the cluster's
    assert seen["tcd_file"] == "from the cluster"
    assert seen["exp_file"] == "from the experiment"
    assert seen["shared_file"] == "experiment's /shared"  # same container path: experiment's
    assert seen["device_is_char"] is True

    # proxy_ports is accepted, with a warning event on the experiment instead of a refusal
    with psycopg.connect(cluster.db_url) as conn:
        events = conn.execute(
            "SELECT message FROM events WHERE entity = 'experiment' AND entity_id = %s"
            " AND kind = 'warning'",
            (str(eid),),
        ).fetchall()
    assert [m for (m,) in events] == [
        "environment.proxy_ports (8888) is ignored: the master does not proxy task ports;"
        " tasks run with the agent's network, so reach a port on the agent's address"
    ]


USER, PASSWORD = "det-user", "right-horse-battery-staple"


# A plain Debian image with only python3 (no det: the agent mounts the harness), so the push
# stays small.
PUSHED_IMAGE = "det-base:bookworm"


@pytest.fixture
def pulled_images() -> Iterator[list[str]]:
    """References the test's trials pull onto the shared engine (the agent's pull tags them
    there); untagged at the end (they name PUSHED_IMAGE's own image, which stays)."""
    refs: list[str] = []
    yield refs
    docker = pytest.importorskip("docker")
    client = docker.from_env(timeout=60)
    try:
        for ref in refs:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(ref)
    finally:
        client.close()


def push(docker: Any, registry: str, repo: str, tag: str) -> str:
    """Pushes PUSHED_IMAGE to the registry under ``repo:tag`` and drops the local name, so a
    trial has to pull it (its layers stay: the pull itself is quick)."""
    ref = f"{registry}/{repo}"
    docker.images.get(PUSHED_IMAGE).tag(ref, tag)
    auth = {"username": USER, "password": PASSWORD, "serveraddress": registry}
    for event in docker.api.push(ref, tag=tag, stream=True, decode=True, auth_config=auth):
        assert "error" not in event, event
    docker.images.remove(f"{ref}:{tag}")
    return f"{ref}:{tag}"


def allocations_of(cluster: Cluster, tid: int) -> int:
    with psycopg.connect(cluster.db_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM allocations WHERE trial_id = %s", (tid,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def pull_failure_lines(cluster: Cluster, tid: int) -> list[str]:
    return [
        str(e["log"]).strip()
        for e in cluster.trial_logs(tid)
        if str(e.get("log") or "").startswith("image pull failed")
    ]


def test_private_registry_with_registry_auth_and_a_refused_pull_that_does_not_loop(
    pulled_images: list[str], shared_one_slot: Cluster, tmp_path: Path
) -> None:
    cluster = shared_one_slot
    with private_registry(tmp_path / "registry", {USER: PASSWORD}) as registry:
        image = push(cluster.docker, registry, "team/task", "env-test")
        pulled_images.append(image)
        auth = {"username": USER, "password": PASSWORD, "serveraddress": f"http://{registry}"}
        ctx = context(tmp_path)

        good = cluster.create({**BASE, "environment": {"image": image, "registry_auth": auth}}, ctx)
        cluster.wait_state(good, "STATE_COMPLETED", 300)
        assert env_report(cluster, only_trial(cluster, good)["id"])["has_password"] is False

        # The password is stored for the pulls but never shown.
        body = cluster.master.get(f"/api/v1/experiments/{good}")
        assert body["config"]["environment"]["registry_auth"]["password"] == "********"
        assert body["experiment"]["config"]["environment"]["registry_auth"]["username"] == USER
        assert PASSWORD not in json.dumps(body)
        assert PASSWORD not in cluster.det("experiment", "describe", str(good), "--json")

        wrong = {**auth, "password": "wrong-horse"}
        bad = cluster.create(
            {
                **BASE,
                "environment": {"image": image, "registry_auth": wrong, "force_pull_image": True},
            },
            ctx,
        )
        cluster.wait_state(bad, "STATE_ERROR", 120)
        trial = only_trial(cluster, bad)
        assert trial["state"] == "STATE_ERROR"
        assert trial["restarts"] == 0
        assert allocations_of(cluster, trial["id"]) == 1  # one attempt, not max_restarts + 1
        (line,) = pull_failure_lines(cluster, trial["id"])
        assert line.startswith(f"image pull failed: {image}: ")
        assert "unauthorized" in line.lower(), line
        assert "wrong-horse" not in line
        described = cluster.det("experiment", "describe", str(bad))
        assert f"Trial {trial['id']}: {line}" in described.splitlines()

        missing = cluster.create(
            {**BASE, "environment": {"image": f"{registry}/team/task:nope", "registry_auth": auth}},
            ctx,
        )
        cluster.wait_state(missing, "STATE_ERROR", 120)
        trial = only_trial(cluster, missing)
        assert allocations_of(cluster, trial["id"]) == 1
        (line,) = pull_failure_lines(cluster, trial["id"])
        assert line.startswith(f"image pull failed: {registry}/team/task:nope: "), line
        assert "not found" in line.lower() or "manifest unknown" in line.lower(), line

    logs = cluster.master.logs() + "".join(a.output() for a in cluster.agents)
    assert PASSWORD not in logs
    assert "wrong-horse" not in logs
