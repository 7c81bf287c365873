"""How ``up --master serverless`` rolls the master out (``common.serverless.Rollout``).

Pass 1 updates everything but leaves the service on the image it runs (a new cluster gets no
service yet), so the registry exists; then the ``det-master`` image is pushed, the migration
runs once (on GCP inside pass 2: the Cloud Run job, which the service waits for; on AWS here,
as its own Fargate task), and pass 2 rolls the service. When the image is already the one
running, one pass does (nothing to push or migrate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Protocol, TextIO, TypeVar

from det.common.jsontypes import JSONObject
from det.deploy.common import outs, preflight, release
from det.deploy.common.boot import BootOptions
from det.deploy.common.errors import DeployError
from det.deploy.common.release import Release
from det.deploy.common.serverless import IMAGE_NAME, Rollout

Run = Callable[..., subprocess.CompletedProcess[str]]


@dataclasses.dataclass(frozen=True)
class Login:
    """Credentials for ``docker login`` to the cluster's registry (short-lived tokens)."""

    registry: str
    username: str
    password: str


@dataclasses.dataclass(frozen=True)
class Steps:
    """What one cloud does for the serverless rollout."""

    release: Callable[[], str]
    """The image reference this ``up`` ships (registry path and tag)."""
    local_image: Callable[[], str]
    """The local image to push (``det-master:<wheel sha256[:12]>``, built by
    ``infra/build-images.sh master``)."""
    set_rollout: Callable[[Rollout], None]
    """The next Pulumi pass builds the program with this rollout."""
    login: Callable[[], Login]
    migrate: Callable[[JSONObject], None] | None = None
    """Run the migration with pass 1's outputs and wait for it to succeed (AWS); None: the
    program runs it (GCP's job)."""
    ensure_image: Callable[[str, TextIO], None] | None = None
    """Make sure the local image exists (:func:`ensure_local_image`: build it) before pass 1
    creates anything; None: it is assumed there."""


class _Rolled(Protocol):
    """What :func:`steps` needs of a cloud's config (``AwsConfig``, ``GcpConfig``): a dataclass
    (a new rollout is set with ``dataclasses.replace``) with boot options."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @property
    def boot(self) -> BootOptions: ...


C = TypeVar("C", bound=_Rolled)


def steps(
    current: dict[str, C],
    release_image: Callable[[C], str],
    login: Callable[[C], Login],
    migrate: Callable[[JSONObject], None] | None = None,
) -> Steps:
    """A cloud's :class:`Steps` around its config ``current["cfg"]``: each pass's rollout is
    set into it (the next Pulumi pass builds from it); the image pushed is the one of the wheel
    ``up`` built, built locally first when missing; ``release_image``, ``login`` and
    ``migrate`` are what the cloud does (:class:`Steps`)."""

    def set_rollout(r: Rollout) -> None:
        current["cfg"] = dataclasses.replace(current["cfg"], rollout=r)

    return Steps(
        release=lambda: release_image(current["cfg"]),
        local_image=lambda: local_image(current["cfg"].boot.release),
        ensure_image=ensure_local_image,
        set_rollout=set_rollout,
        login=lambda: login(current["cfg"]),
        migrate=migrate,
    )


def local_image_name(sha256: str) -> str:
    return f"{IMAGE_NAME}:{sha256[:12]}"


def local_image(built: Release | None) -> str:
    """The local master image of the wheel ``up`` built (``Steps.local_image``)."""
    if built is None:
        raise DeployError("det's wheel was not built: nothing to push")
    return local_image_name(built.sha256)


def run(
    steps: Steps,
    previous_image: str | None,
    apply: Callable[[], JSONObject],
    out: TextIO,
    push: Callable[[str, str, Login], None] | None = None,
) -> JSONObject:
    """Pass 1, push, migrate, pass 2; returns the last pass's outputs."""
    release = steps.release()
    if previous_image == release:
        steps.set_rollout(Rollout(release=release, service=release))
        return apply()
    if steps.ensure_image is not None:
        steps.ensure_image(steps.local_image(), out)
    steps.set_rollout(Rollout(release=release, service=previous_image))
    out.write("Pass 1 of 2: everything but the master service.\n")
    first = apply()
    out.write(f"Pushing the master image {release}...\n")
    (push or push_image)(steps.local_image(), release, steps.login())
    if steps.migrate is not None:
        out.write("Running the database migration (det-master migrate)...\n")
        steps.migrate(first)
    steps.set_rollout(Rollout(release=release, service=release))
    out.write("Pass 2 of 2: the migration, then the master service on the new image.\n")
    return apply()


@dataclasses.dataclass(frozen=True)
class Docker:
    """The docker command for one step of ``up`` (``what`` names it in its one-line errors:
    the docker verb, its first argument and docker's last line). :meth:`logged_in` gives one
    whose login lives in a throwaway config directory, never in the user's ``~/.docker``."""

    what: str
    run_: Run = subprocess.run
    env: Mapping[str, str] | None = None

    def _run(self, argv: tuple[str, ...], stdin: str | None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env) if self.env is not None else None
        try:
            return self.run_(
                ["docker", *argv], input=stdin, capture_output=True, text=True, env=env
            )
        except FileNotFoundError:
            raise DeployError(f"{self.what} needs the docker command") from None

    def __call__(self, *argv: str, stdin: str | None = None) -> None:
        done = self._run(argv, stdin)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            raise DeployError(f"{self.what}: docker {' '.join(argv[:2])}: {last}")

    def succeeds(self, *argv: str) -> bool:
        return self._run(argv, None).returncode == 0

    @contextlib.contextmanager
    def logged_in(self, login: Login) -> Iterator[Docker]:
        """``docker login`` with the password on stdin (never in argv)."""
        with tempfile.TemporaryDirectory(prefix="det-docker-") as config:
            docker = dataclasses.replace(self, env={**os.environ, "DOCKER_CONFIG": config})
            docker(
                "login", "--username", login.username, "--password-stdin", login.registry,
                stdin=login.password,
            )  # fmt: skip
            yield docker


def ensure_local_image(
    local: str,
    out: TextIO,
    run_: Run = subprocess.run,
    env: Mapping[str, str] | None = None,
) -> None:
    """Build ``local`` (``det-master:<wheel sha256[:12]>``) with ``infra/build-images.sh
    master`` when this machine does not have it, on the base ``DET_MASTER_BASE`` names
    (``common.preflight.master_base``: Docker Hub's python:3.11-slim unless ``debootstrap``),
    for linux/amd64. The script builds the same wheel ``up`` ships (a fixed
    ``SOURCE_DATE_EPOCH``), so the image it tags is the one pushed."""

    env = dict(os.environ if env is None else env)
    docker = Docker("building the master image", run_, env)
    if docker.succeeds("image", "inspect", local):
        return
    tree = release.source_tree()
    script = tree / preflight.BUILD_SCRIPT if tree else None
    if script is None or not script.is_file():
        raise DeployError(
            f"no local image {local}, and no det source checkout to build it from "
            f"({preflight.BUILD_SCRIPT} master): install det from a clone (docs/deploy.md)"
        )
    base = preflight.master_base(env)
    out.write(f"Building the master image {local} ({preflight.MASTER_PLATFORM}, {base} base)...\n")
    done = run_(
        ["bash", str(script), "master"],
        env={**env, "MASTER_BASE": base, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise DeployError(f"building the master image failed: {last}")
    if not docker.succeeds("image", "inspect", local):
        raise DeployError(
            f"{preflight.BUILD_SCRIPT} master did not make {local}: the checkout's code is not "
            "the det this up ships (install det from this clone, or run up from it)"
        )


def push_image(local: str, remote: str, login: Login, run_: Run = subprocess.run) -> None:
    """``docker tag`` and ``docker push`` with a login kept in a throwaway config directory."""
    docker = Docker("pushing the master image", run_)
    try:
        docker("image", "inspect", local)
    except DeployError:
        raise DeployError(
            f"no local image {local}: build it from a det source checkout with "
            "`infra/build-images.sh master` (the same wheel this up ships)"
        ) from None
    with docker.logged_in(login) as session:
        session("tag", local, remote)
        session("push", remote)


def run_ecs_migration(
    ecs: Any,
    outputs: JSONObject,
    *,
    timeout: float = 1800.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run the migration task definition once on Fargate and wait for it to exit 0."""
    started = ecs.run_task(
        cluster=outputs["ecs_cluster"],
        taskDefinition=outputs["migration_task_definition"],
        launchType="FARGATE",
        count=1,
        networkConfiguration={
            "awsvpcConfiguration": {
                "subnets": outs.texts(outputs, "task_subnet_ids") or [],
                "securityGroups": [outputs["task_security_group_id"]],
                "assignPublicIp": "ENABLED",
            }
        },
    )
    if started.get("failures") or not started.get("tasks"):
        reason = (started.get("failures") or [{"reason": "no task started"}])[0].get("reason")
        raise DeployError(f"the migration task did not start: {reason}")
    arn = started["tasks"][0]["taskArn"]
    deadline = clock() + timeout
    while True:
        (task,) = ecs.describe_tasks(cluster=outputs["ecs_cluster"], tasks=[arn])["tasks"]
        if task.get("lastStatus") == "STOPPED":
            codes = [c.get("exitCode") for c in task.get("containers", [])]
            if codes and all(code == 0 for code in codes):
                return
            raise DeployError(
                f"the migration failed (exit {codes or '?'}: {task.get('stoppedReason', '')}); "
                f"its log is in {outputs.get('log_group')} under migrate/; the service was not "
                "rolled"
            )
        if clock() >= deadline:
            raise DeployError(f"the migration task {arn} did not finish in {timeout:.0f}s")
        sleep(10)
