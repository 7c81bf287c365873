"""Docker image references, as Docker's reference grammar reads them:
``[host[:port]/]path[:tag][@algorithm:hex]`` with lower-case path components. The master checks
``task_container_defaults.checkpoint_gc_image`` with it, ``det deploy`` its
``--checkpoint-gc-image``."""

from __future__ import annotations

import re

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?/)?"
    + _COMPONENT
    + r"(?:/"
    + _COMPONENT
    + r")*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    + r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)


def check_image_reference(value: str) -> str:
    """``value`` when it is a Docker image reference, else ValueError naming the rule."""
    if len(value) > 255 or IMAGE_REFERENCE.fullmatch(value) is None:
        raise ValueError(
            "must be a Docker image reference ([registry/]repository[:tag][@digest]: lower-case"
            f" path, no spaces), not {value!r}"
        )
    return value
