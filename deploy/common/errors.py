"""Errors of ``det deploy``: each carries one readable line for the user.

::

    DeployError            anything that stops a deploy command (exit code 1)
    └── PreflightError     a check before anything is created failed; nothing was changed
"""

from __future__ import annotations


class DeployError(Exception):
    """A deploy command failed; ``str(e)`` is the one line shown to the user."""


class PreflightError(DeployError):
    """A preflight check failed before any cloud resource was created."""
