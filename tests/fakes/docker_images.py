"""A stand-in for docker-py's engine where code reads only image configs (``images.get(name)
.attrs["Config"]``): the container arguments' unit tests, which need no engine."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class Images:
    """``images.get`` for the images named in ``configs`` (each its ``Config`` object); any
    other name is an image with an empty config."""

    def __init__(self, configs: dict[str, dict[str, Any]] | None = None) -> None:
        self.configs = configs or {}

    def get(self, name: str) -> Any:
        return SimpleNamespace(attrs={"Config": self.configs.get(name, {})})


def engine(configs: dict[str, dict[str, Any]] | None = None) -> Any:
    return SimpleNamespace(images=Images(configs))
