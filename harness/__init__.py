"""det: a cluster platform for deep-learning training.

Training code uses the Core API as ``import det; det.core.init()`` (or ``from det import core``).

In a task container this package usually comes from the harness bundle the agent mounts (see
``det.agent.harness_bundle``): the task-side subpackages only, written for Python 3.8 and newer,
with pure-Python copies of their dependencies in ``_vendor``. Those copies go at the *end* of
``sys.path``, so whatever the image installed itself (``requests``, ``urllib3``…) wins.
"""

import os
import sys

if sys.version_info < (3, 8):  # noqa: UP036 - task images bring their own python3
    raise ImportError(
        f"det's harness needs Python 3.8 or newer; this python3 is"
        f" {sys.version_info[0]}.{sys.version_info[1]} ({sys.executable})"
    )

_VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vendor")
if os.path.isdir(_VENDOR) and _VENDOR not in sys.path:
    sys.path.append(_VENDOR)

__version__ = "0.1.0"

from . import core  # noqa: E402
from .common.info import ClusterInfo, TrialInfo, get_cluster_info  # noqa: E402
from .core import InvalidHP  # noqa: E402

__all__ = ["ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]
