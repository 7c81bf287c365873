"""Helpers for the local-deploy end-to-end tests: a Docker engine and the task image, or a skip that says why."""

from __future__ import annotations

import socket
from typing import Any

import pytest

TASK_IMAGE = "det-task:py3.11-cpu-torch"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def local_docker() -> Any:
    """A Docker client with the task image present (skip otherwise: .ci/run provides both)."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:
        pytest.skip(f"no Docker engine: {e}")
    try:
        client.images.get(TASK_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{TASK_IMAGE} missing: run infra/build-images.sh")
    return client
