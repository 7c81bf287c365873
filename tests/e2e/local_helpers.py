"""Helpers for the local-deploy end-to-end tests: a Docker engine and the task image, or a skip that says why."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
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


@contextlib.contextmanager
def local_state_dir() -> Iterator[Path]:
    """A cluster state directory outside pytest's tmp tree.

    As root, the embedded PostgreSQL runs as its own user and makes the directory's parents
    traversable; every pytest session resets its own base directory to 0700, which would lock
    the database out when sessions run side by side.
    """
    path = Path(tempfile.mkdtemp(prefix="det-local-e2e-"))
    yield path / "state"
    shutil.rmtree(path, ignore_errors=True)
