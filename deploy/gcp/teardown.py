"""What ``det deploy gcp down`` does outside Pulumi: stop the master, delete agents, remove the
private-services peering, empty the bucket.

Order, before ``pulumi destroy``: stop the master (nothing writes to the database any more),
delete the agents (Pulumi does not know them), then remove the VPC peering Google's service
producer made for Cloud SQL. The private-services connection is abandoned on delete (Cloud SQL
keeps using it for days after the instance is gone: "Producer services ... are still using this
connection"), and a peering left on the network would make Pulumi's delete of the network fail.
The peering is only removed from a network the cluster created (never from ``--existing-network``,
where other services may use it).

Agents are created by the master, so Pulumi does not know them. Every agent carries the label
``det-cluster=<cluster id>`` (the master.yaml ``label_key``/``label_value`` the provisioner
applies), which is how they are found here.

TODO(provisioner): ``det.master.provisioner.gcp.GcpProvider`` lists one pool by the master's
own cluster id (stored in its database); once it can list by the deploy label, call it here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions

from det.common.jsontypes import JSONObject
from det.deploy.common import outs
from det.deploy.common.errors import DeployError
from det.deploy.gcp.config import CLUSTER_LABEL, CONFIG_HASH_LABEL

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

    try:
        op = instances.stop_unary(project=project, zone=zone, instance=name)
        _wait(operations, project, zone, op.name)
    except exceptions.NotFound:
        pass
    logger.info("stopped master %s", name)


def _delete(instances: Any, operations: Any, project: str, vms: list[tuple[str, str]]) -> None:
    """Delete the VMs ``(zone, name)`` all at once, then wait for each; one already gone is
    skipped."""

    pending = []
    for zone, name in vms:
        try:
            pending.append(
                (zone, instances.delete_unary(project=project, zone=zone, instance=name))
            )
        except exceptions.NotFound:
            continue
    for zone, op in pending:
        _wait(operations, project, zone, op.name)


def delete_agents(
    instances: Any, operations: Any, project: str, cluster_id: str, master_name: str | None
) -> list[str]:
    """Delete every VM labelled with the cluster in any zone (not the master); returns names."""
    found: list[tuple[str, str]] = []
    request = {"project": project, "filter": label_filter(cluster_id)}
    for scope, scoped in instances.aggregated_list(request=request):
        zone = scope.rsplit("/", 1)[-1]
        found += [(zone, i.name) for i in scoped.instances if i.name != master_name]
    _delete(instances, operations, project, found)
    logger.info("deleted %d agents of %s", len(found), cluster_id)
    return [name for _, name in found]


def replace_stale_agents(
    instances: Any,
    operations: Any,
    project: str,
    cluster_id: str,
    config_hash: str,
    master_name: str | None,
) -> list[str]:
    """Delete the cluster's agents (any zone; never the master) whose config-hash label is not
    ``config_hash``: they were launched for an older master config. Returns their names; the
    master launches new agents for the work that is still queued."""
    stale: list[tuple[str, str]] = []
    request = {"project": project, "filter": label_filter(cluster_id)}
    for scope, scoped in instances.aggregated_list(request=request):
        zone = scope.rsplit("/", 1)[-1]
        for inst in scoped.instances:
            if inst.name == master_name or inst.labels.get("det-role") == "master":
                continue
            if inst.labels.get(CONFIG_HASH_LABEL) != config_hash:
                stale.append((zone, inst.name))
    _delete(instances, operations, project, stale)
    logger.info("replaced %d agents of %s launched for an older config", len(stale), cluster_id)
    return [name for _, name in stale]


# The peering Google's service networking makes on the consumer network (the connection's
# ``peering`` attribute); used when the stack does not record it.
SERVICE_PEERING = "servicenetworking-googleapis-com"


def remove_service_peering(
    networks: Any, operations: Any, project: str, network: str, peering: str
) -> bool:
    """Remove ``peering`` from ``network``; False when it is not there (idempotent)."""

    try:
        op = networks.remove_peering_unary(
            project=project,
            network=network,
            networks_remove_peering_request_resource={"name": peering},
        )
    except exceptions.NotFound:
        return False
    except exceptions.BadRequest as e:
        # GCE answers 400 for a peering the network does not have.
        if peering in str(e.message) or "no peering" in str(e.message).lower():
            return False
        raise
    for _ in range(15):
        done = operations.wait(project=project, operation=op.name)
        if getattr(done.status, "name", done.status) == "DONE":
            break
    logger.info("removed peering %s from network %s", peering, network)
    return True


def remove_cluster_machines(
    clients: Any, project: str, cluster_id: str, outputs: JSONObject
) -> str:
    """Stop the master, delete the agents, remove the service peering (in this order); returns
    the line ``down`` prints. ``clients``: :func:`compute_clients`'s answer."""
    instances, zone_operations, networks, global_operations = clients
    zone = str(outputs["zone"])
    master_name = outs.text(outputs, "master_instance_name")
    if master_name:
        stop_master(instances, zone_operations, project, zone, master_name)
    removed = delete_agents(instances, zone_operations, project, cluster_id, master_name)
    line = f"Deleted {len(removed)} agent instances."
    network = outs.text(outputs, "network")
    if outputs.get("network_created") and network:
        peering = outs.text(outputs, "service_peering") or SERVICE_PEERING
        if remove_service_peering(networks, global_operations, project, network, peering):
            line += f" Removed peering {peering} from network {network}."
    return line


def compute_clients() -> tuple[Any, Any, Any, Any]:
    """Instances, zone operations, networks and global operations clients."""
    # Imported on first use: compute_v1 costs about 1.2 CPU-s (see images.images_client).
    from google.cloud import compute_v1

    return (
        compute_v1.InstancesClient(),
        compute_v1.ZoneOperationsClient(),
        compute_v1.NetworksClient(),
        compute_v1.GlobalOperationsClient(),
    )


def delete_bucket(client: Any, bucket: str) -> int:
    """Delete every object (all generations) and the bucket; returns the number removed."""

    try:
        b = client.bucket(bucket)
        blobs = list(client.list_blobs(bucket, versions=True))
        for blob in blobs:
            b.delete_blob(blob.name, generation=blob.generation)
        b.delete()
    except exceptions.NotFound:
        return 0
    return len(blobs)


RUN_API = "https://run.googleapis.com"


def delete_run_service(
    session: Any,
    project: str,
    region: str,
    name: str,
    *,
    timeout: float = 600.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """A serverless master's ``stop_master``: delete its Cloud Run service (Cloud Run has no
    stopped state: a request would start an instance whose loop launches agents) and wait for
    the operation, before the agents are removed. ``session`` is an authorized requests
    session; returns False when the service is already gone (the stack's destroy then finds
    nothing to delete)."""
    url = f"{RUN_API}/v2/projects/{project}/locations/{region}/services/{name}"
    answer = session.delete(url, timeout=30)
    if answer.status_code == 404:
        return False
    if answer.status_code >= 300:
        raise DeployError(f"Cloud Run: deleting service {name}: HTTP {answer.status_code}")
    operation = answer.json()
    deadline = clock() + timeout
    while not operation.get("done"):
        if clock() >= deadline:
            raise DeployError(f"Cloud Run: service {name} was not deleted in {timeout:.0f}s")
        sleep(2)
        operation = session.get(f"{RUN_API}/v2/{operation['name']}", timeout=30).json()
    if operation.get("error"):
        message = operation["error"].get("message", "failed")
        raise DeployError(f"Cloud Run: deleting service {name}: {message}")
    logger.info("deleted the master service %s", name)
    return True
