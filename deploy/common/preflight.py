"""Checks shared by every cloud, run before anything is created."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from det.deploy.common.errors import PreflightError

PULUMI_INSTALL_HINT = (
    "the Pulumi CLI is not on PATH; install it with `curl -fsSL https://get.pulumi.com | sh` "
    "(or see https://www.pulumi.com/docs/install/), or use --dry-run to render the plan offline"
)


def check_pulumi_cli(which: Callable[[str], str | None] = shutil.which) -> str:
    path = which("pulumi")
    if not path:
        raise PreflightError(PULUMI_INSTALL_HINT)
    return path
