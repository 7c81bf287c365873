"""det's release as objects of the cluster's bucket, the same two objects on every cloud."""

from __future__ import annotations

from typing import Any, Protocol

import pulumi

from det.deploy.common.boot import BootOptions


class PutObject(Protocol):
    """The cloud's bucket object: ``put(resource_name, key, **object_args)``."""

    def __call__(self, resource_name: str, key: str, **kwargs: Any) -> pulumi.CustomResource: ...


def release_objects(name: str, opts: BootOptions, put: PutObject) -> list[pulumi.Output[str]]:
    """det's wheel and constraints as objects of the bucket (none with ``--det-wheel-url``),
    made by ``put``; returns their ids, so the user data is rendered once they exist."""
    rel = opts.uploads
    if rel is None:
        return []
    wheel_source: pulumi.Asset = (
        pulumi.FileAsset(str(rel.path)) if rel.path else pulumi.StringAsset("(built at up)")
    )
    wheel = put(
        f"{name}-det-wheel", rel.wheel_key, source=wheel_source, content_type="application/zip"
    )
    constraints = put(
        f"{name}-det-constraints",
        rel.constraints_key,
        content=rel.constraints,
        content_type="text/plain",
    )
    return [wheel.id, constraints.id]
