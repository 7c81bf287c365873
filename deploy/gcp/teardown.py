"""What ``det deploy gcp down`` does outside Pulumi: stop the master, delete agents, empty the bucket.

Agents are created by the master, so Pulumi does not know them. Every agent carries the label
``det-cluster=<cluster id>`` (the master.yaml ``label_key``/``label_value`` the provisioner
applies), which is how they are found here.

TODO(provisioner): ``det.master.provisioner.gcp.GcpProvider`` lists one pool by the master's
own cluster id (stored in its database); once it can list by the deploy label, call it here.
"""

from __future__ import annotations

import logging
from typing import Any

from det.deploy.gcp.config import CLUSTER_LABEL

logger = logging.getLogger(__name__)


def label_filter(cluster_id: str) -> str:
    return f'labels.{CLUSTER_LABEL} = "{cluster_id}"'


def _wait(operations: Any, project: str, zone: str, name: str) -> None:
    # ZoneOperations.wait returns after about two minutes even when the operation is not done.
    for _ in range(15):
        op = operations.wait(project=project, zone=zone, operation=name)
        if getattr(op.status, "name", op.status) == "DONE":
            return


def stop_master(instances: Any, operations: Any, project: str, zone: str, name: str) -> None:
    from google.api_core import exceptions

    try:
        op = instances.stop_unary(project=project, zone=zone, instance=name)
        _wait(operations, project, zone, op.name)
    except exceptions.NotFound:
        pass
    logger.info("stopped master %s", name)


def delete_agents(
    instances: Any, operations: Any, project: str, cluster_id: str, master_name: str | None
) -> list[str]:
    """Delete every VM labelled with the cluster in any zone (not the master); returns names."""
    from google.api_core import exceptions

    found: list[tuple[str, str]] = []
    request = {"project": project, "filter": label_filter(cluster_id)}
    for scope, scoped in instances.aggregated_list(request=request):
        zone = scope.rsplit("/", 1)[-1]
        found += [(zone, i.name) for i in scoped.instances if i.name != master_name]
    pending = []
    for zone, name in found:
        try:
            pending.append(
                (zone, instances.delete_unary(project=project, zone=zone, instance=name))
            )
        except exceptions.NotFound:
            continue
    for zone, op in pending:
        _wait(operations, project, zone, op.name)
    logger.info("deleted %d agents of %s", len(found), cluster_id)
    return [name for _, name in found]


def compute_clients() -> tuple[Any, Any]:
    from google.cloud import compute_v1

    return compute_v1.InstancesClient(), compute_v1.ZoneOperationsClient()


def delete_bucket(client: Any, bucket: str) -> int:
    """Delete every object (all generations) and the bucket; returns the number removed."""
    from google.api_core import exceptions

    try:
        b = client.bucket(bucket)
        blobs = list(client.list_blobs(bucket, versions=True))
        for blob in blobs:
            b.delete_blob(blob.name, generation=blob.generation)
        b.delete()
    except exceptions.NotFound:
        return 0
    return len(blobs)
