"""Pulling task images, with registry credentials, into one readable line when it fails.

A pull failure is reported to the master as the container's error, ``image pull failed: IMAGE:
ANSWER`` (:data:`PULL_FAILED`, matched by ``det.master.services.trial_runs``), where ANSWER is
the registry's (or the engine's) own message, on one line, with every credential value replaced
by ``********``. The credentials never reach a log line or an exception message from here.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import urllib.request
from collections.abc import Mapping
from typing import Any

from det.agent.errors import ImagePullError as ImagePullError

logger = logging.getLogger(__name__)

#: The start of a container error that says the image could not be pulled (the master's
#: restart rules read it: see det.master.services.containers.IMAGE_PULL_FAILED).
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


#: An ECR private registry's host (also FIPS endpoints and the China partition).
ECR_HOST = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$"
)


def registry_host(image: str) -> str | None:
    """The registry part of ``image`` as Docker reads it (a first path component with a ``.``
    or ``:``, or ``localhost``); None for Docker Hub."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def cloud_auth(image: str) -> dict[str, str] | None:
    """Credentials from this machine's cloud role for an image in that cloud's own registry:
    ECR (``ACCOUNT.dkr.ecr.REGION.amazonaws.com``) through ``ecr.get_authorization_token`` with
    the instance role, Artifact Registry (``*-docker.pkg.dev``) and Container Registry
    (``gcr.io``, ``*.gcr.io``) with the service account's access token from the metadata server
    (user ``oauth2accesstoken``). None for other registries, or when no token can be had (the
    pull then goes without, and the registry's refusal is the error the user sees)."""
    host = registry_host(image)
    if host is None:
        return None
    try:
        ecr = ECR_HOST.match(host)
        if ecr:
            return _ecr_auth(host, ecr.group("region"))
        if host.endswith("-docker.pkg.dev") or host == "gcr.io" or host.endswith(".gcr.io"):
            return _gcp_auth(host)
    except Exception as e:  # any SDK or network failure: pull without credentials
        logger.warning("no credentials from the machine's role for %s: %s", host, type(e).__name__)
    return None


def _ecr_auth(host: str, region: str) -> dict[str, str]:
    # Here, not at the top: only a pull from ECR needs boto3 (det[agent] has it), and its
    # import costs the agent's start a third of a second on every other machine.
    import boto3

    answer = boto3.client("ecr", region_name=region).get_authorization_token()
    token = answer["authorizationData"][0]["authorizationToken"]
    username, _, password = base64.b64decode(token).decode().partition(":")
    return {"username": username, "password": password, "serveraddress": f"https://{host}"}


def _metadata_base() -> str:
    """The GCE metadata server; ``GCE_METADATA_HOST`` (as google-auth reads it) names another."""
    return f"http://{os.environ.get('GCE_METADATA_HOST') or 'metadata.google.internal'}"


def _gcp_auth(host: str) -> dict[str, str]:
    request = urllib.request.Request(
        f"{_metadata_base()}/computeMetadata/v1/instance/service-accounts/default/token",
        headers={"Metadata-Flavor": "Google"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        token = json.load(answer)["access_token"]
    return {"username": "oauth2accesstoken", "password": str(token), "serveraddress": host}


def pull(docker_client: Any, image: str, registry_auth: Mapping[str, Any] | None) -> None:
    """Pull ``image`` (with ``registry_auth`` when given, else with the machine's cloud role
    for its cloud's own registry: :func:`cloud_auth`) or raise :class:`ImagePullError`.

    The engine's progress stream is read to the end: a registry refusal may arrive in it
    (``errorDetail``) after the HTTP request itself succeeded.
    """
    auth = auth_config(registry_auth) or cloud_auth(image)
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
