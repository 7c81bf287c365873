"""``--mirror-images`` on AWS: an ECR repository per task image, which the cluster's agents may
pull from and nothing else (``common.mirror`` says what is mirrored and copies it).

Each repository (``det-<cluster>/<source path>``, e.g. ``det-c1/determinedai/pytorch-ngc``) has
immutable tags, scan on push, and a repository policy that lets the agents' role pull
(``ecr:BatchGetImage``, ``ecr:GetDownloadUrlForLayer``, ``ecr:BatchCheckLayerAvailability``)
and grants nothing else; ``up`` pushes with the deployer's own credentials. ``force_delete``:
``down`` removes the mirrored images with the repository. ECR repository names: 2-256
characters of lowercase letters, digits and ``._-/`` (Amazon ECR API reference,
``CreateRepository``).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from det.deploy.aws import iam
from det.deploy.aws.config import AwsConfig
from det.deploy.common import mirror as common_mirror

PULL_ACTIONS = (
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchCheckLayerAvailability",
)


def repository_name(cfg: AwsConfig, image: str) -> str:
    return f"det-{cfg.cluster_id}/{common_mirror.repository_path(image)}"


def pull_policy(agent_role_arn: str) -> iam.PolicyDocument:
    """The repository policy: the agents' role pulls; nobody else gets anything from it."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AgentsPull",
                "Effect": "Allow",
                "Principal": {"AWS": agent_role_arn},
                "Action": list(PULL_ACTIONS),
            }
        ],
    }


def repositories(
    name: str, cfg: AwsConfig, agent_role_arn: pulumi.Input[str]
) -> dict[str, pulumi.Output[Any]]:
    """The mirror's repositories when ``cfg.mirror_registry`` is set; the stack outputs
    ``mirror_images`` (source -> mirror) for ``up``'s copy step."""
    if not cfg.mirror_registry:
        return {}
    pairs = common_mirror.plan(cfg.mirror_sources, cfg.mirror_registry)
    for index, (source, _) in enumerate(pairs):
        repo = aws.ecr.Repository(
            f"{name}-mirror-{index}",
            name=repository_name(cfg, source),
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(
                scan_on_push=True
            ),
            force_delete=True,
            tags=cfg.tags,
        )
        aws.ecr.RepositoryPolicy(
            f"{name}-mirror-{index}",
            repository=repo.name,
            policy=pulumi.Output.from_input(agent_role_arn).apply(
                lambda arn: json.dumps(pull_policy(arn))
            ),
        )
    return {"mirror_images": pulumi.Output.from_input(dict(pairs))}
