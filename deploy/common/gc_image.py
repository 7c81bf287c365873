"""The checkpoint-GC image: what a checkpoint GC task needs and nothing of torch or CUDA.

A GC task runs ``python3 -m det.exec.gc_checkpoints`` (det.master.services.checkpoint_gc). det
itself comes from the agent's harness bundle, mounted into every task container (with
``requests``), so the image is a Python 3.11 with a venv holding the storage clients the harness
imports lazily: ``boto3`` (S3) and ``google-cloud-storage`` (GCS); shared_fs needs nothing. It
holds no det, so it does not change with det's version: one tag, :data:`IMAGE`.

det publishes no images, so the image is built where it is used:

- ``infra/build-images.sh gc`` (this module, ``--base det-base:bookworm``) on a test or dev
  machine;
- ``det deploy aws|gcp up --mirror-images`` on the deployer's machine, when the local Docker
  engine does not have it yet and the mirror neither (``common.mirror.copy_images``), from
  :data:`DEFAULT_BASE` (Docker Hub's official Python image).

Either way the wheels are downloaded on the host by ``pip download`` (the host's index,
find-links and CA settings apply) for CPython 3.11 on manylinux x86_64 into the build context,
and the build installs them with ``--no-index``: the build itself needs no network beyond the
base image.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from det.common.image_ref import check_image_reference
from det.deploy.common.errors import DeployError
from det.deploy.common.rollout import Run

IMAGE = "det-checkpoint-gc:py3.11"
#: The base of a deployer's build: Python 3.11 on Debian bookworm, as the wheels are downloaded.
DEFAULT_BASE = "python:3.11-slim-bookworm"
#: The storage clients the harness's checkpoint storage imports (det.storage.s3, det.storage.gcs).
PACKAGES = ("boto3", "google-cloud-storage")
PIP_TARGET = (
    "--only-binary=:all:",
    "--python-version", "3.11",
    "--implementation", "cp",
    "--abi", "cp311",
    "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux2014_x86_64",
    "--platform", "manylinux_2_17_x86_64",
    "--platform", "manylinux1_x86_64",
    "--platform", "any",
)  # fmt: skip

DOCKERFILE = """\
# det-checkpoint-gc: Python 3.11 and the storage clients of checkpoint GC (det.deploy.common.gc_image).
# det comes from the agent's harness bundle; the wheels were downloaded on the host. Two stages:
# the wheels and pip stay in the first, the image gets the venv alone.
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS venv
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/det/venv \\
    && /opt/det/venv/bin/pip install --quiet --no-index --find-links /tmp/wheels %(packages)s \\
    && /opt/det/venv/bin/pip uninstall --quiet --yes pip setuptools \\
    && /opt/det/venv/bin/python3 -c "import boto3, google.cloud.storage"

FROM ${BASE_IMAGE}
COPY --from=venv /opt/det/venv /opt/det/venv
ENV VIRTUAL_ENV=/opt/det/venv \\
    PATH=/opt/det/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PYTHONUNBUFFERED=1
LABEL ai.det.image="checkpoint-gc"
WORKDIR /run/determined/workdir
"""


def source(flag: str | None, mirroring: bool) -> str | None:
    """The checkpoint-GC image a cloud deploy names (before any mirror): ``--checkpoint-gc-image``
    (an image the deployer pushed where agents can pull it), else with ``--mirror-images``
    :data:`IMAGE` (built here, pushed into the mirror), else None: det publishes no image, so
    the GC tasks keep the experiment's image."""
    return flag or (IMAGE if mirroring else None)


def report(image: str | None, out: TextIO) -> None:
    """``up``'s line on where checkpoint GC runs."""
    if image:
        out.write(f"Checkpoint GC image: {image}\n")
    else:
        out.write(
            "Checkpoint GC runs in the task image (det publishes no GC image: --mirror-images"
            f" builds {IMAGE} and pushes it to the cluster's registry, or"
            " --checkpoint-gc-image names one of yours)\n"
        )


def check_flag(flag: str | None) -> None:
    if flag is None:
        return
    try:
        check_image_reference(flag)
    except ValueError as e:
        raise DeployError(f"--checkpoint-gc-image: {e}") from None


def dockerfile() -> str:
    return DOCKERFILE % {"packages": " ".join(PACKAGES)}


def build_argv(context: Path, base: str, tag: str = IMAGE) -> list[str]:
    return [
        "docker",
        "build",
        "--quiet",
        "-t",
        tag,
        "--build-arg",
        f"BASE_IMAGE={base}",
        str(context),
    ]


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise DeployError(f"cannot build the checkpoint-GC image {IMAGE}: {what}: {last}")


def prepare(context: Path, python: str = sys.executable, run_: Run = subprocess.run) -> None:
    """The build context: the Dockerfile and the wheels (``pip download`` on this host)."""
    (context / "wheels").mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text(dockerfile())
    argv = [python, "-m", "pip", "download", "--quiet", "--dest", str(context / "wheels")]
    done = run_([*argv, *PIP_TARGET, *PACKAGES], input=None, capture_output=True, text=True)
    _check(done, "pip download " + " ".join(PACKAGES))


def build(
    base: str = DEFAULT_BASE,
    tag: str = IMAGE,
    python: str = sys.executable,
    run_: Run = subprocess.run,
) -> None:
    """Build :data:`IMAGE` (or ``tag``) in the local Docker engine from ``base``."""
    with tempfile.TemporaryDirectory(prefix="det-gc-image-") as tmp:
        context = Path(tmp)
        prepare(context, python, run_)
        done = run_(build_argv(context, base, tag), input=None, capture_output=True, text=True)
        _check(done, "docker build")


def present(tag: str = IMAGE, run_: Run = subprocess.run) -> bool:
    done = run_(["docker", "image", "inspect", tag], input=None, capture_output=True, text=True)
    return done.returncode == 0


def ensure(out: TextIO, tag: str = IMAGE, run_: Run = subprocess.run) -> None:
    """Build the image unless the local engine has it (``up --mirror-images``)."""
    if present(tag, run_):
        return
    out.write(f"Building the checkpoint-GC image {tag} from {DEFAULT_BASE} (about 200 MB)...\n")
    build(DEFAULT_BASE, tag, run_=run_)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m det.deploy.common.gc_image", description="Build the checkpoint-GC image."
    )
    parser.add_argument("--base", default=DEFAULT_BASE, help="a Python 3.11 image")
    parser.add_argument("--tag", default=IMAGE)
    args = parser.parse_args(argv)
    try:
        build(args.base, args.tag)
    except DeployError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
