"""The name det's distribution is published and installed under.

The ``det`` command and the ``det`` import keep their names; the distribution does not: the bare
name ``det`` on the public package index belongs to an unrelated project, so nothing ever
installs the bare name; and ``det-platform`` is not published there yet, so every instruction
installs from a clone of det (``pip install -e '.[deploy]'``) or a wheel built from one, never
by name from an index (tests/unit/test_install_names.py).
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "det-platform"
WHEEL_PREFIX = DISTRIBUTION.replace("-", "_")
"""How a wheel's file name starts (``det_platform-0.1.0-py3-none-any.whl``)."""


def installed_version() -> str:
    """The installed distribution's version; ``0.0.0`` when det runs without being installed
    (the harness bundle a task container mounts)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0"
