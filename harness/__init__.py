"""det: a cluster platform for deep-learning training.

Training code uses the Core API as ``import det; det.core.init()`` (or ``from det import core``).
"""

__version__ = "0.1.0"

from . import core
from .common.info import ClusterInfo, TrialInfo, get_cluster_info
from .core import InvalidHP

__all__ = ["ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]
