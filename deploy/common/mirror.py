"""``up --mirror-images``: the task images in the cluster's own registry.

The default task images live on Docker Hub, which rate-limits anonymous pulls and is one more
network path for every new agent. With ``--mirror-images`` the program creates a repository per
image in the cluster's registry (ECR on AWS, one Artifact Registry repository on GCP), agents
may pull from it and nothing else, the pools' default images point at the mirror
(:func:`mirrored`), and ``up`` copies each image there (:func:`copy_images`: ``docker pull``,
``tag``, ``push`` with a short-lived registry token in a throwaway Docker config). A mirror
keeps the source's path and tag: ``determinedai/pytorch-ngc:0.38.1`` becomes
``<registry>/determinedai/pytorch-ngc:0.38.1``. det's checkpoint-GC image
(``common.gc_image``) is mirrored too, from the local engine: ``up`` builds it there when it
is missing (no registry publishes it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from typing import TextIO

from det.deploy.common import gc_image
from det.deploy.common.errors import DeployError
from det.deploy.common.rollout import Docker, Login, Run

DOCKER_HUB = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")


def repository_path(image: str) -> str:
    """``image``'s repository path without registry and tag: ``determinedai/pytorch-ngc``
    (Docker Hub's official images get their implicit ``library/``)."""
    for prefix in DOCKER_HUB:
        image = image.removeprefix(prefix)
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        name = name.split("/", 1)[1]  # another registry's host
    return name if "/" in name else f"library/{name}"


def mirrored(image: str, registry: str) -> str:
    """Where the mirror of ``image`` lives in ``registry`` (host and path, no scheme)."""
    path = repository_path(image)
    rest = image.split("@", 1)
    if len(rest) == 2:
        return f"{registry}/{path}@{rest[1]}"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return f"{registry}/{path}:{tag}"


class PoolImages:
    """The images a cluster's pools use, for a cloud's config (a frozen dataclass) to inherit:
    it gives ``source_env_images``, ``checkpoint_gc_image`` (the flag) and ``mirror_target``
    (where ``--mirror-images`` puts the images; None without it)."""

    checkpoint_gc_image: str | None

    @property
    def source_env_images(self) -> tuple[str, str]:
        raise NotImplementedError

    @property
    def mirror_target(self) -> str | None:
        raise NotImplementedError

    @property
    def env_images(self) -> tuple[str, str]:
        """The task images ``(cpu, cuda)`` the pools use: the sources, or their mirrors."""
        cpu, cuda = self.source_env_images
        target = self.mirror_target
        if target:
            return mirrored(cpu, target), mirrored(cuda, target)
        return cpu, cuda

    @property
    def source_gc_image(self) -> str | None:
        """The checkpoint-GC image as given (``common.gc_image.source``)."""
        return gc_image.source(self.checkpoint_gc_image, bool(self.mirror_target))

    @property
    def gc_image(self) -> str | None:
        """The checkpoint-GC image the pools use: the source, or its mirror."""
        source, target = self.source_gc_image, self.mirror_target
        if source and target:
            return mirrored(source, target)
        return source

    @property
    def mirror_sources(self) -> tuple[str, ...]:
        """What ``--mirror-images`` copies: the task images and the checkpoint-GC image."""
        gc = self.source_gc_image
        return (*self.source_env_images, *([gc] if gc else []))


def plan(images: Iterable[str], registry: str) -> list[tuple[str, str]]:
    """Each distinct source image and its mirror, in the given order."""
    seen: dict[str, str] = {}
    for image in images:
        seen.setdefault(image, mirrored(image, registry))
    return list(seen.items())


def check_docker() -> None:
    """Preflight: the copy needs the docker command (and its engine)."""
    if shutil.which("docker") is None:
        raise DeployError(
            "--mirror-images needs the docker command (and a Docker engine) to copy the images"
        )


def copy_images(
    pairs: Iterable[tuple[str, str]], login: Login, out: TextIO, run_: Run = subprocess.run
) -> None:
    """Pull each source not yet in the mirror, tag it as its mirror, push it (one-line
    DeployError naming the docker step and its last line on any failure)."""
    with Docker("--mirror-images", run_).logged_in(login) as docker:
        for source, target in pairs:
            # Tags are immutable in the mirror (ECR refuses to push a tag again): an image
            # already there is kept.
            if docker.succeeds("manifest", "inspect", target):
                out.write(f"{target} is already mirrored.\n")
                continue
            out.write(f"Mirroring {source} to {target}...\n")
            if source == gc_image.IMAGE:
                # det publishes no images: its checkpoint-GC image is built here, once.
                gc_image.ensure(out, run_=run_)
            else:
                docker("pull", source)
            docker("tag", source, target)
            docker("push", target)
