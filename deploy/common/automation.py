"""Real deployments through Pulumi's Automation API (needs the Pulumi CLI on PATH).

State lives in the per-user file backend (``state.py``), one stack per cluster id. The
program is inline: the same Python function the dry-run renders under mocks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import requests
from pulumi import automation as auto

from det.common.jsontypes import JSONObject
from det.deploy.common import state
from det.deploy.common.errors import DeployError

logger = logging.getLogger(__name__)

Program = Callable[[], None]


@contextlib.contextmanager
def _work_dir() -> Iterator[str]:
    """The workspace's directory (Pulumi writes the project's and the stack's settings files
    there) for one operation, removed after it: left to Pulumi, an inline program's workspace
    gets a temporary ``automation-*`` directory that nothing removes."""
    path = tempfile.mkdtemp(prefix="det-pulumi-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _workspace_options(project: str, work_dir: str) -> auto.LocalWorkspaceOptions:

    directory = state.state_dir()
    url = state.backend_url(directory)
    # A shared (remote) state needs the same passphrase on every machine.
    passphrase = os.environ.get("PULUMI_CONFIG_PASSPHRASE") or state.ensure_passphrase(directory)
    return auto.LocalWorkspaceOptions(
        work_dir=work_dir,
        project_settings=auto.ProjectSettings(
            name=project, runtime="python", backend=auto.ProjectBackend(url=url)
        ),
        env_vars={"PULUMI_CONFIG_PASSPHRASE": passphrase, "PULUMI_BACKEND_URL": url},
    )


def _last_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


@contextlib.contextmanager
def _stack(
    project: str, cluster_id: str, program: Program | None, create: bool
) -> Iterator[auto.Stack]:
    """The cluster's stack, in a workspace directory removed when the block ends."""
    with _work_dir() as work_dir:
        opts = _workspace_options(project, work_dir)
        body = program or (lambda: None)
        try:
            if create:
                stack = auto.create_or_select_stack(
                    stack_name=cluster_id, project_name=project, program=body, opts=opts
                )
            else:
                stack = auto.select_stack(
                    stack_name=cluster_id, project_name=project, program=body, opts=opts
                )
        except auto.errors.StackNotFoundError:
            raise DeployError(f"no cluster {cluster_id!r} in {state.state_dir()}") from None
        except (auto.errors.CommandError, auto.errors.InvalidVersionError) as e:
            raise DeployError(f"the Pulumi CLI failed: {_last_line(e)}") from None
        yield stack


def up(
    project: str,
    cluster_id: str,
    program: Program,
    config: Mapping[str, tuple[str, bool]],
    on_output: Callable[[str], None],
    remove: Sequence[str] = (),
) -> JSONObject:
    """Create or update the stack; ``config`` maps keys to ``(value, secret)``, the ``remove``
    keys are deleted from the stack's config first. Returns outputs."""

    with _stack(project, cluster_id, program, create=True) as stack:
        present = [key for key in remove if key in stack.get_all_config()] if remove else []
        if present:
            stack.remove_all_config(present)
        for key, (value, secret) in config.items():
            stack.set_config(key, auto.ConfigValue(value=value, secret=secret))
        try:
            result = stack.up(on_output=on_output)
        except auto.errors.CommandError as e:
            raise DeployError(f"pulumi up failed for {cluster_id!r}: {_last_line(e)}") from None
        return _values(result.outputs)


def outputs(project: str, cluster_id: str) -> JSONObject:
    """The stack's outputs (``common.outputs`` reads them)."""
    with _stack(project, cluster_id, None, create=False) as stack:
        return _values(stack.outputs())


def _values(found: Mapping[str, auto.OutputValue]) -> JSONObject:
    # Pulumi hands back each output's value as it decoded it from JSON.
    return {k: v.value for k, v in found.items()}


def stack_names(project: str) -> list[str]:
    """The project's stacks: read from disk for the local state, else through the Pulumi CLI."""
    directory = state.state_dir()
    if state.is_local(state.backend_url(directory), directory):
        return state.list_stacks(directory, project)

    try:
        with _work_dir() as work_dir:
            workspace = auto.LocalWorkspace(**vars(_workspace_options(project, work_dir)))
            return sorted(s.name for s in workspace.list_stacks())
    except auto.errors.CommandError as e:
        raise DeployError(
            f"cannot list the stacks in {state.backend_url(directory)}: {_last_line(e)}"
        ) from None


def has_stack(project: str, cluster_id: str) -> bool:
    return cluster_id in stack_names(project)


def destroy(project: str, cluster_id: str, on_output: Callable[[str], None]) -> None:

    with _stack(project, cluster_id, None, create=False) as stack:
        try:
            stack.destroy(on_output=on_output)
        except auto.errors.CommandError as e:
            raise DeployError(
                f"pulumi destroy failed for {cluster_id!r}: {_last_line(e)}"
            ) from None
        stack.workspace.remove_stack(cluster_id)


def wait_for_master(
    master_url: str,
    timeout: float,
    *,
    get: Callable[..., requests.Response] = requests.get,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    interval: float = 5.0,
    status_command: str | None = None,
) -> JSONObject:
    """Poll ``GET {master_url}/info`` until it answers 200 or ``timeout`` seconds pass;
    the timeout's message names ``status_command`` (which shows the boot log) when given."""
    deadline = clock() + timeout
    last = "no answer yet"
    while True:
        try:
            response = get(f"{master_url.rstrip('/')}/info", timeout=10)
            if response.status_code == 200:
                info: JSONObject = response.json()
                return info
            last = f"HTTP {response.status_code}"
        except requests.RequestException as e:
            last = type(e).__name__
        if clock() >= deadline:
            where = (
                f"`{status_command}` shows its boot log; on the machine, "
                if status_command
                else "see "
            )
            raise DeployError(
                f"the master at {master_url} did not answer within {timeout:.0f}s ({last}); "
                f"{where}/var/log/det-bootstrap.log and `journalctl -u det-master`"
            )
        logger.debug("master not ready (%s), retrying", last)
        sleep(interval)
