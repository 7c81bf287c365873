"""Pulling task images, with registry credentials, into one readable line when it fails.

A pull failure is reported to the master as the container's error, ``image pull failed: IMAGE:
ANSWER`` (:data:`PULL_FAILED`, matched by ``det.master.services.allocations``), where ANSWER is
the registry's (or the engine's) own message, on one line, with every credential value replaced
by ``********``. The credentials never reach a log line or an exception message from here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

#: The start of a container error that says the image could not be pulled (the master's
#: restart rules read it: see det.master.services.allocations.IMAGE_PULL_FAILED).
PULL_FAILED = "image pull failed: "

#: The keys of Docker's AuthConfig (what ``X-Registry-Auth`` carries); others are dropped.
AUTH_KEYS = (
    "username",
    "password",
    "auth",
    "email",
    "serveraddress",
    "identitytoken",
    "registrytoken",
)
_SECRET_KEYS = ("password", "auth", "identitytoken", "registrytoken")
HIDDEN = "********"


class ImagePullError(Exception):
    """The image could not be pulled; ``str()`` is the one line the master shows."""


def auth_config(registry_auth: Mapping[str, Any] | None) -> dict[str, str] | None:
    """Docker's AuthConfig from Determined's ``registry_auth`` (None when it is empty)."""
    if not registry_auth:
        return None
    out = {k: str(registry_auth[k]) for k in AUTH_KEYS if registry_auth.get(k)}
    return out or None


def scrub(text: str, auth: Mapping[str, Any] | None) -> str:
    """``text`` on one line with every secret value of ``auth`` replaced by ``********``."""
    line = " ".join(str(text).split())
    for key in _SECRET_KEYS:
        secret = str((auth or {}).get(key) or "")
        if secret:
            line = line.replace(secret, HIDDEN)
    return line


def _split(image: str) -> tuple[str, str | None]:
    """``repo[:tag][@digest]`` → (repo, tag or digest); a ``:`` in a registry port is no tag."""
    if "@" in image:
        repo, digest = image.split("@", 1)
        return repo, digest
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
        return repo, tag
    return image, "latest"


def _answer(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    if explanation:
        return str(explanation)
    return str(exc) or type(exc).__name__


def pull(docker_client: Any, image: str, registry_auth: Mapping[str, Any] | None) -> None:
    """Pull ``image`` (with ``registry_auth`` when given) or raise :class:`ImagePullError`.

    The engine's progress stream is read to the end: a registry refusal may arrive in it
    (``errorDetail``) after the HTTP request itself succeeded.
    """
    auth = auth_config(registry_auth)
    repo, tag = _split(image)
    try:
        stream = docker_client.api.pull(repo, tag=tag, stream=True, decode=True, auth_config=auth)
        error = None
        for event in stream:
            if isinstance(event, dict) and (event.get("error") or event.get("errorDetail")):
                detail = event.get("errorDetail") or {}
                error = str(detail.get("message") or event.get("error"))
    except Exception as e:
        error = _answer(e)
    if error is not None:
        raise ImagePullError(f"{PULL_FAILED}{image}: {scrub(error, auth)}")
