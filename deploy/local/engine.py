"""The Docker engine a local cluster needs: is it there, is the task image built, our containers.

Every message for a missing piece is one line naming what to install or start.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det.deploy.common.errors import DeployError

if TYPE_CHECKING:
    from docker import DockerClient

logger = logging.getLogger(__name__)

TASK_IMAGE = "det-task:py3.11-cpu-torch"
# The agents' container label (det.agent.containers.LABEL_AGENT); kept literal so this module
# does not import the agent package.
LABEL_AGENT = "ai.det.agent-id"


class NoDockerEngine(DeployError):  # type: ignore[misc]
    """No Docker engine answers; nothing was created."""


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def no_engine_message(error: str = "") -> str:
    """The one line for an unreachable engine, tailored to what is installed."""
    where = _engine_address()
    if "permission denied" in error.lower():
        return (
            f"cannot use the Docker engine at {where}: permission denied; run as root or join the"
            " docker group (sudo usermod -aG docker $USER, then log in again), then run again"
        )
    if shutil.which("dockerd") is None and shutil.which("docker") is None:
        return (
            "no Docker engine: install docker.io (Debian/Ubuntu: sudo apt-get install -y"
            " docker.io) and start dockerd, then run again"
        )
    return (
        f"no Docker engine answers at {where}: start dockerd (sudo systemctl start docker,"
        " or sudo dockerd &), then run again"
    )


def client() -> DockerClient:
    """A pinged Docker client, or :class:`NoDockerEngine` with the one-line message."""
    try:
        import docker  # the agent extra: missing, it gets the install line, not a traceback
    except ImportError:
        raise NoDockerEngine(
            "the Docker SDK for Python is missing: in det's clone, "
            "pip install -e '.[master,agent,cli]', then run again"
        ) from None
    try:
        # A busy engine (an image build committing a layer) can take a while to answer.
        c = docker.from_env(timeout=120)
        c.ping()
    except Exception as e:
        raise NoDockerEngine(no_engine_message(str(e))) from None
    return c


def source_checkout() -> Path | None:
    """The repository root when det runs from a source checkout (editable install)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "infra" / "build-images.sh").is_file() else None


def has_image(docker_client: Any, name: str) -> bool:
    import docker.errors  # the agent extra, present once client() has answered

    try:
        docker_client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    except Exception as e:
        raise DeployError(f"the Docker engine did not answer about image {name}: {e}") from None
    return True


def ensure_image(
    docker_client: Any, progress: Callable[[str], None], name: str = TASK_IMAGE
) -> None:
    """Builds the task images with ``infra/build-images.sh`` when ``name`` is missing."""
    if has_image(docker_client, name):
        return
    root = source_checkout()
    if root is None:
        raise DeployError(
            f"the task image {name} is missing: build it from a det source checkout with"
            " 'bash infra/build-images.sh' (needs root and mmdebstrap or debootstrap), then run again"
        )
    script = root / "infra" / "build-images.sh"
    progress(f"building the task image {name} with {script.relative_to(root)} (takes minutes)...")
    env = dict(os.environ)
    # The script downloads wheels with pip: use this interpreter's (the venv's) pip.
    env.setdefault("PYTHON", sys.executable)
    result = subprocess.run(["bash", str(script), "torch"], cwd=root, env=env, check=False)
    if result.returncode != 0 or not has_image(docker_client, name):
        raise DeployError(
            f"building the task image {name} failed (exit {result.returncode}); run"
            " 'bash infra/build-images.sh' as root to see why"
        )
    progress(f"task image {name} built")


def _env_of(container: Any) -> dict[str, str]:
    env = (container.attrs.get("Config") or {}).get("Env") or []
    return dict(item.partition("=")[::2] for item in env)


def remove_task_containers(docker_client: Any, agent_ids: Iterable[str], master_url: str) -> int:
    """Stops and removes the task containers our agents left behind; returns how many.

    Agents keep containers running when they stop (a restart re-attaches), so ``down`` cleans
    up. Only containers of these agent ids *and* this master's URL are touched: another local
    cluster on the same machine uses the same agent ids.
    """
    ids = set(agent_ids)
    removed = 0
    for c in docker_client.containers.list(
        all=True, ignore_removed=True, filters={"label": LABEL_AGENT}
    ):
        if (c.labels or {}).get(LABEL_AGENT) not in ids:
            continue
        if _env_of(c).get("DET_MASTER", "").rstrip("/") != master_url.rstrip("/"):
            continue
        try:
            c.stop(timeout=10)
            c.remove(force=True)
            removed += 1
        except Exception as e:  # already gone, or removal in progress
            logger.debug("container %s: %s", c.id, e)
    return removed
