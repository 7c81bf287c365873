"""det: a cluster platform for deep-learning training.

Training code uses the Core API as ``import det; det.core.init()`` (or ``from det import core``).

In a task container this package usually comes from the harness bundle the agent mounts (see
``det.agent.harness_bundle``): the task-side subpackages only, written for Python 3.8 and newer,
with pure-Python copies of their dependencies in ``_vendor``. Those copies go at the *end* of
``sys.path``, so whatever the image installed itself (``requests``, ``urllib3``…) wins.
"""

from __future__ import annotations

import importlib
import os
import sys

if sys.version_info < (3, 8):  # noqa: UP036 - task images bring their own python3
    raise ImportError(
        f"det's harness needs Python 3.8 or newer; this python3 is"
        f" {sys.version_info[0]}.{sys.version_info[1]} ({sys.executable})"
    )

from typing import TYPE_CHECKING, Any

from .common import startup as _startup

_startup.mark_process_start()

_VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vendor")
if os.path.isdir(_VENDOR) and _VENDOR not in sys.path:
    sys.path.append(_VENDOR)

__version__ = "0.1.0"

__all__ = ["ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]

if TYPE_CHECKING:
    from . import core
    from .common.info import ClusterInfo, TrialInfo, get_cluster_info
    from .core import InvalidHP


def __getattr__(name: str) -> Any:
    """The Core API and the task info on first use: ``python3 -m det.exec.run`` (every task's
    first process) and the master's and agent's processes never load ``requests`` or the
    storage backends for them."""
    if name in ("core", "InvalidHP"):
        _startup.mark("det.core: import started")
        core = importlib.import_module(".core", __name__)  # also sets det.core
        _startup.mark("det.core: imported")
        return core if name == "core" else core.InvalidHP
    if name in ("ClusterInfo", "TrialInfo", "get_cluster_info"):
        return getattr(importlib.import_module(".common.info", __name__), name)
    raise AttributeError(f"module 'det' has no attribute {name!r}")
