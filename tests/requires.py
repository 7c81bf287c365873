"""Marks for tests that need an optional package, decided without importing it."""

from __future__ import annotations

import importlib.util

import pytest

#: For tests that run torch code in processes of their own (the examples): torch is looked for,
#: not imported, since an import costs about 1 CPU-s in every process that collects the file.
NEEDS_TORCH = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)
