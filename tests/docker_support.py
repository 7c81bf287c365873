"""The Docker engine for tests that run real containers."""

from __future__ import annotations

from typing import Any

import pytest

TASK_IMAGE = "det-task:py3.11-cpu-torch"


def docker_client(image: str = TASK_IMAGE, timeout: int = 30) -> Any:
    """A client of a running engine that has ``image``.

    No engine: the test is skipped (``DET_NO_SKIPS=1`` on CI turns that into a failure). An
    engine without the image fails the test: that is a missing build step, not a missing part.
    """
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:
        pytest.skip(f"no Docker engine: {e}")
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {image} missing: run infra/build-images.sh")
    return client
