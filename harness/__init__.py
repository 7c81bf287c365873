"""det: a cluster platform for deep-learning training.

Training code uses the Core API as ``import det; det.core.init()`` (or ``from det import core``).
"""

__version__ = "0.1.0"

from det import core  # noqa: E402  (the Core API is the package's public face)

__all__ = ["__version__", "core"]
