"""Boot images of a GCP cluster: image families resolved once, then pinned in the stack.

A family (``projects/P/global/images/family/F``) always means its newest image, so booting VMs
from a family would replace the master whenever Google publishes an image and give agents of
one pool different systems. The first ``up`` resolves each family to the concrete image it
means that day (Compute ``images.getFromFamily``) and records both in the stack (the ``images``
and ``image_sources`` outputs, and the ``det:*Image`` config keys). A later ``up`` reuses the
recorded image as long as the source asked for is the same; ``--refresh-images`` resolves again.
A concrete image (``projects/P/global/images/NAME``) is used as given.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions
from google.api_core.client_options import ClientOptions

from det.common.jsontypes import JSONObject
from det.deploy.common import outs
from det.deploy.common.errors import DeployError
from det.deploy.gcp.config import MASTER_DISK_GB, GcpConfig

if TYPE_CHECKING:
    from google.cloud import compute_v1

_FAMILY = re.compile(
    r"^projects/(?P<project>[a-z][-a-z0-9.:]*)/global/images/family/(?P<family>[-a-z0-9]+)$"
)

# Image role → the GcpConfig field and the stack config key holding the pinned image.
ROLES: dict[str, tuple[str, str]] = {
    "master": ("master_image", "det:masterImage"),
    "aux_agent": ("aux_agent_image", "det:auxAgentImage"),
    "compute_agent": ("agent_image", "det:computeAgentImage"),
}


def sources(cfg: GcpConfig) -> dict[str, str]:
    """What each role asked for (a family or a concrete image), by role: recorded by
    :func:`pin`, else the configured images themselves."""
    if cfg.image_sources:
        return dict(cfg.image_sources)
    return {role: getattr(cfg, field) for role, (field, _) in ROLES.items()}


def is_family(image: str) -> bool:
    return _FAMILY.match(image) is not None


def resolve(images_client: Any, image: str, disk_gb: int | None = None) -> str:
    """The concrete image a family means now; a concrete image is returned as it is.

    ``disk_gb``: the boot disk the image goes on, which GCE refuses when smaller than the image
    (its ``diskSizeGb``)."""
    m = _FAMILY.match(image)
    if m is None:
        return image

    project, family = m.group("project"), m.group("family")
    try:
        found = images_client.get_from_family(project=project, family=family)
    except exceptions.NotFound:
        raise DeployError(
            f"image family {family!r} not found in project {project!r}; "
            "pass another image with --agent-image"
        ) from None
    except exceptions.GoogleAPICallError as e:
        raise DeployError(
            f"cannot resolve image family {family!r} of {project!r}: {e.message}"
        ) from None
    if disk_gb is not None and int(found.disk_size_gb or 0) > disk_gb:
        raise DeployError(
            f"image {found.name} needs a boot disk of at least {found.disk_size_gb} GB, and the "
            f"disk is {disk_gb} GB: pass --disk-size {found.disk_size_gb} or more"
        )
    return f"projects/{project}/global/images/{found.name}"


def pin(
    cfg: GcpConfig,
    previous: JSONObject,
    refresh: bool,
    images_client: Callable[[], Any],
) -> GcpConfig:
    """``cfg`` with every image concrete. ``previous``: the stack's outputs from the last ``up``
    (empty for a new cluster); its ``images``/``image_sources`` are reused unless ``refresh``
    or the source asked for changed. ``images_client`` is called only when a family must be
    resolved."""
    pinned = outs.text_mapping(previous, "images")
    asked_before = outs.text_mapping(previous, "image_sources")
    client: Any = None
    chosen: dict[str, str] = {}
    for role, source in sources(cfg).items():
        if not refresh and asked_before.get(role) == source and pinned.get(role):
            chosen[role] = pinned[role]
            continue
        if is_family(source):
            client = client or images_client()
        disk = MASTER_DISK_GB if role == "master" else cfg.disk_size
        chosen[role] = resolve(client, source, disk)
    return dataclasses.replace(
        cfg,
        master_image=chosen["master"],
        aux_agent_image=chosen["aux_agent"],
        agent_image=chosen["compute_agent"],
        image_sources=tuple(sources(cfg).items()),
    )


def stack_config(cfg: GcpConfig) -> dict[str, tuple[str, bool]]:
    """The pinned images as Pulumi config (shown by ``pulumi config``; not secret)."""
    return {key: (getattr(cfg, field), False) for field, key in ROLES.values()}


def images_client(credentials: Any = None, endpoint: str | None = None) -> compute_v1.ImagesClient:
    """The real Compute images client (``endpoint``: a local fake in tests)."""
    # Imported on first use: compute_v1 costs about 1.2 CPU-s, which every `det deploy` and
    # every process that imports this module would otherwise pay.
    from google.cloud import compute_v1

    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    return compute_v1.ImagesClient(credentials=credentials, client_options=options)
