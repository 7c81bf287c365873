"""Checks shared by every cloud, run before anything is created.

:func:`require_local` is the first thing a real ``up`` does: everything ``up`` needs on the
deployer's machine (the Pulumi CLI; with a serverless master or ``--mirror-images``, the docker
command and a reachable engine; for the serverless master's image, a way to build it for
linux/amd64; the cloud's credentials, as found locally), all checked before any cloud call and
reported together, one line each, so a fresh machine learns everything it lacks at once and not
one item per attempt, and nothing billed exists yet.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from det.deploy.common import release
from det.deploy.common.errors import PreflightError

PULUMI_INSTALL_HINT = (
    "the Pulumi CLI is not on PATH; install it with `curl -fsSL https://get.pulumi.com | sh` "
    "(or see https://www.pulumi.com/docs/install/), or use --dry-run to render the plan offline"
)
# How `up` builds the serverless master's image (infra/build-images.sh's MASTER_BASE):
# "official" (Docker Hub's python:3.11-slim, --platform linux/amd64: any laptop) or
# "debootstrap" (det-base:bookworm made by debootstrap: an x86_64 machine without Docker Hub,
# as root). docs/deploy.md, "The master image".
MASTER_BASE_ENV = "DET_MASTER_BASE"
MASTER_BASES = ("official", "debootstrap")
MASTER_PLATFORM = "linux/amd64"
BUILD_SCRIPT = "infra/build-images.sh"
_AMD64 = ("amd64", "x86_64")


def check_pulumi_cli(which: Callable[[str], str | None] = shutil.which) -> str:
    path = which("pulumi")
    if not path:
        raise PreflightError(PULUMI_INSTALL_HINT)
    return path


@dataclasses.dataclass(frozen=True)
class Machine:
    """This machine as the local checks see it (tests pass their own)."""

    which: Callable[[str], str | None] = shutil.which
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
    env: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))
    source_tree: Callable[[], Path | None] | None = None
    """det's source checkout (None: ``release.source_tree``)."""
    is_root: Callable[[], bool] = lambda: os.geteuid() == 0


def master_base(env: Mapping[str, str]) -> str:
    base = env.get(MASTER_BASE_ENV) or "official"
    if base not in MASTER_BASES:
        raise PreflightError(
            f"{MASTER_BASE_ENV}={base!r}: expected one of {', '.join(MASTER_BASES)}"
        )
    return base


def _docker(machine: Machine, *argv: str) -> tuple[bool, str]:
    try:
        done = machine.run(
            ["docker", *argv], capture_output=True, text=True, timeout=30, env=dict(machine.env)
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return done.returncode == 0, done.stdout.strip() if done.returncode == 0 else last


def _engine(machine: Machine, why: str) -> tuple[list[str], str | None]:
    """The problems with docker, and the engine's architecture when it answers."""
    if not machine.which("docker"):
        return [
            f"docker: the docker command is not on PATH; {why} needs Docker "
            "(https://docs.docker.com/get-docker/)"
        ], None
    ok, said = _docker(machine, "version", "--format", "{{.Server.Arch}}")
    if not ok:
        return [
            f"docker: the Docker engine is not reachable ({said or 'no answer'}); start it "
            "(Docker Desktop, or `sudo systemctl start docker`) and check `docker info` works"
        ], None
    return [], said


def _image_problems(machine: Machine, arch: str) -> list[str]:
    """Whether this machine can build the master image for linux/amd64 (``up`` builds it once
    det's wheel is built, before any billed resource: ``rollout.ensure_local_image``)."""

    problems = []
    tree = (machine.source_tree or release.source_tree)()
    if tree is None or not (tree / BUILD_SCRIPT).is_file():
        problems.append(
            f"master image: det-master is built from a det source checkout ({BUILD_SCRIPT} "
            "master), and this det is installed without one: install det from a clone "
            "(docs/deploy.md, Install)"
        )
    base = master_base(machine.env)
    if base == "official" and arch not in _AMD64:
        ok, builders = _docker(machine, "buildx", "ls")
        if not (ok and MASTER_PLATFORM in builders):
            problems.append(
                f"master image: the Docker engine runs {arch} and cannot build {MASTER_PLATFORM} "
                "images; turn on its amd64 emulation (Docker Desktop has it; on Linux, "
                "QEMU's binfmt handlers)"
            )
    if base == "debootstrap":
        if arch not in _AMD64:
            problems.append(
                f"master image: {MASTER_BASE_ENV}=debootstrap builds this machine's "
                f"architecture ({arch}), not {MASTER_PLATFORM}: unset it (Docker Hub's "
                "python:3.11-slim base, built for amd64)"
            )
        if not machine.is_root():
            problems.append(f"master image: {MASTER_BASE_ENV}=debootstrap needs root")
        if not (machine.which("debootstrap") or machine.which("mmdebstrap")):
            problems.append(
                f"master image: {MASTER_BASE_ENV}=debootstrap needs debootstrap "
                "(apt-get install debootstrap)"
            )
    return problems


def missing_locally(
    *,
    docker_for: str | None,
    master_image: bool,
    credentials: str | None,
    machine: Machine | None = None,
) -> list[str]:
    """What ``up`` needs on this machine and does not find, one line each (empty: all there).
    ``docker_for`` names what needs Docker (None: nothing); ``master_image``: the serverless
    master's image is to be built here; ``credentials``: the cloud's own local check's problem
    (None: found)."""
    machine = machine or Machine()
    lines = [] if machine.which("pulumi") else [f"pulumi: {PULUMI_INSTALL_HINT}"]
    if docker_for:
        problems, arch = _engine(machine, docker_for)
        lines += problems
        if master_image and arch is not None:
            lines += _image_problems(machine, arch)
    if credentials:
        lines.append(f"credentials: {credentials}")
    return lines


def require_local(
    *,
    docker_for: str | None,
    master_image: bool,
    credentials: Callable[[], str | None],
    machine: Machine | None = None,
) -> None:
    """Raise one PreflightError listing everything :func:`missing_locally` finds."""
    lines = missing_locally(
        docker_for=docker_for,
        master_image=master_image,
        credentials=credentials(),
        machine=machine,
    )
    if lines:
        raise PreflightError(
            "this machine lacks what `up` needs (nothing was created):\n"
            + "\n".join(f"  - {line}" for line in lines)
        )


def docker_needs(serverless: bool, mirror_images: bool) -> str | None:
    """What needs Docker in this ``up`` (None: nothing does)."""
    if serverless:
        return "--master serverless (building and pushing the master image)"
    if mirror_images:
        return "--mirror-images (copying the task images)"
    return None
