"""Helpers for the local-deploy end-to-end tests: a Docker engine and the task image, or a skip that says why."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import docker_support
from tests.docker_support import docker_client

TASK_IMAGE = docker_support.TASK_IMAGE


@pytest.fixture
def local_docker() -> Any:
    """A Docker client with the task image present (skip otherwise: .ci/run provides both)."""
    return docker_client(TASK_IMAGE)


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
