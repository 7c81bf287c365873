"""``--mirror-images`` on GCP: one Artifact Registry repository (``det-<cluster>-mirror``,
Docker format, in the cluster's region) holding the task images, which the agents' service
account may read and nothing else (``roles/artifactregistry.reader`` on that repository only;
``common.mirror`` says what is mirrored and copies it). ``up`` pushes with the deploying
identity's token. Repository ids: lowercase letters, digits and hyphens, starting with a letter,
at most 63 characters (Artifact Registry, "Create standard repositories").
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from det.deploy.common import mirror as common_mirror
from det.deploy.gcp.config import GcpConfig

READER_ROLE = "roles/artifactregistry.reader"


def repository_id(cluster_id: str) -> str:
    return f"det-{cluster_id}-mirror"


def registry(cfg: GcpConfig) -> str:
    """The image path prefix of the mirror (``<region>-docker.pkg.dev/<project>/<repo>``)."""
    return f"{cfg.region}-docker.pkg.dev/{cfg.project_id}/{repository_id(cfg.cluster_id)}"


def repositories(cfg: GcpConfig, agent_email: pulumi.Input[str]) -> dict[str, pulumi.Output[Any]]:
    """The mirror's repository and the agents' read access when ``cfg.mirror_images``; the
    stack outputs ``mirror_images`` (source -> mirror) for ``up``'s copy step."""
    if not cfg.mirror_images:
        return {}
    name = f"det-{cfg.cluster_id}-mirror"
    repo = gcp.artifactregistry.Repository(
        name,
        project=cfg.project_id,
        location=cfg.region,
        repository_id=repository_id(cfg.cluster_id),
        format="DOCKER",
        description=f"det task image mirror ({cfg.cluster_id})",
        labels=cfg.all_labels,
    )
    gcp.artifactregistry.RepositoryIamMember(
        f"{name}-agents",
        project=cfg.project_id,
        location=cfg.region,
        repository=repo.repository_id,
        role=READER_ROLE,
        member=pulumi.Output.from_input(agent_email).apply(lambda e: f"serviceAccount:{e}"),
    )
    pairs = common_mirror.plan(cfg.mirror_sources, registry(cfg))
    return {"mirror_images": pulumi.Output.from_input(dict(pairs))}
