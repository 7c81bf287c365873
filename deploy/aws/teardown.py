"""What ``det deploy aws down`` does outside Pulumi: stop the master, remove agents, empty the bucket.

Agents are created by the master, not by the stack, so Pulumi does not know them. Every agent
carries the ``det-cluster=<cluster id>`` tag (the master.yaml ``tag_key``/``tag_value`` the
provisioner applies at launch), which is how they are found here.

TODO(provisioner): ``det.master.provisioner.aws.AwsProvider`` lists and terminates one pool by
the master's own cluster id (kept in its database, unknown here); once it can list by the
deploy tag, call its ``terminate`` here instead of these direct EC2 calls.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore import exceptions

from det.deploy.aws.config import CLUSTER_TAG, CONFIG_HASH_TAG

logger = logging.getLogger(__name__)

_LIVE = ["pending", "running", "stopping", "stopped"]


def stop_master(ec2: Any, instance_id: str, wait: bool = True) -> None:
    """Stop the master first so it cannot launch agents while they are being removed, and wait
    until it has stopped: a stopping master still runs its loops, and an agent it launched after
    the agents were listed would hold the agent group and the subnet (the VPC's deletion fails)."""

    try:
        ec2.stop_instances(InstanceIds=[instance_id])
    except exceptions.ClientError as e:
        if "NotFound" not in e.response.get("Error", {}).get("Code", ""):
            raise
        return
    if wait:
        ec2.get_waiter("instance_stopped").wait(InstanceIds=[instance_id])
    logger.info("stopped master %s", instance_id)


def stop_serverless_master(
    autoscaling: Any, ecs: Any, cluster: str, service: str, wait: bool = True
) -> None:
    """A serverless master's ``stop_master``: suspend its scaling (a request would start a task
    again), set its service to no task and wait until none runs, so no loop launches an agent
    while they are being removed. A service already gone is fine."""

    try:
        autoscaling.register_scalable_target(
            ServiceNamespace="ecs",
            ResourceId=f"service/{cluster}/{service}",
            ScalableDimension="ecs:service:DesiredCount",
            SuspendedState={
                "DynamicScalingInSuspended": True,
                "DynamicScalingOutSuspended": True,
                "ScheduledScalingSuspended": True,
            },
        )
        ecs.update_service(cluster=cluster, service=service, desiredCount=0)
    except exceptions.ClientError as e:
        error = e.response.get("Error", {})
        gone = error.get("Code") in ("ServiceNotFoundException", "ClusterNotFoundException") or (
            # Application Auto Scaling names a missing service in a ValidationException.
            error.get("Code") == "ValidationException" and "exist" in error.get("Message", "")
        )
        if not gone:
            raise
        return
    if wait:
        ecs.get_waiter("services_stable").wait(cluster=cluster, services=[service])
    logger.info("stopped the master service %s/%s", cluster, service)


def terminate_agents(
    ec2: Any, cluster_id: str, exclude: frozenset[str] = frozenset(), wait: bool = True
) -> list[str]:
    """Cancel the cluster's spot requests and terminate its agents; returns the instance ids."""
    tag_filter = {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_id]}
    requests = ec2.describe_spot_instance_requests(
        Filters=[tag_filter, {"Name": "state", "Values": ["open", "active"]}]
    )["SpotInstanceRequests"]
    if requests:
        ec2.cancel_spot_instance_requests(
            SpotInstanceRequestIds=[r["SpotInstanceRequestId"] for r in requests]
        )
    ids: list[str] = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[tag_filter, {"Name": "instance-state-name", "Values": _LIVE}]
    ):
        for reservation in page["Reservations"]:
            ids += [
                i["InstanceId"] for i in reservation["Instances"] if i["InstanceId"] not in exclude
            ]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
        if wait:
            # Security groups cannot be deleted while agents' network interfaces use them.
            ec2.get_waiter("instance_terminated").wait(InstanceIds=ids)
    logger.info("terminated %d agents of %s", len(ids), cluster_id)
    return ids


def delete_bucket(s3: Any, bucket: str) -> int:
    """Delete every object version and the bucket; returns the number of objects removed."""

    removed = 0
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            keys = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            for start in range(0, len(keys), 1000):
                s3.delete_objects(
                    Bucket=bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True}
                )
            removed += len(keys)
        s3.delete_bucket(Bucket=bucket)
    except exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") != "NoSuchBucket":
            raise
    return removed


def stale_agents(ec2: Any, cluster_id: str, config_hash: str, exclude: frozenset[str]) -> list[str]:
    """Live instances of the cluster whose config-hash tag differs from ``config_hash``."""
    ids = []
    tag_filter = {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_id]}
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[tag_filter, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    ):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                if instance["InstanceId"] in exclude or tags.get("det-role") == "master":
                    continue
                if tags.get(CONFIG_HASH_TAG) != config_hash:
                    ids.append(instance["InstanceId"])
    return ids


def replace_stale_agents(
    ec2: Any, cluster_id: str, config_hash: str, exclude: frozenset[str]
) -> list[str]:
    """Terminate the agents launched for an older master config; the master launches new ones
    for the work still queued (trials resume from their latest checkpoints)."""
    ids = stale_agents(ec2, cluster_id, config_hash, exclude)
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    logger.info("replaced %d agents of %s launched for an older config", len(ids), cluster_id)
    return ids


def delete_final_snapshot(rds: Any, snapshot_id: str, wait: bool = True) -> bool:
    """Delete the database's final snapshot (``down --delete-data``); False when there is none."""

    try:
        rds.describe_db_snapshots(DBSnapshotIdentifier=snapshot_id)
        if wait:
            # A snapshot being created cannot be deleted yet.
            rds.get_waiter("db_snapshot_available").wait(DBSnapshotIdentifier=snapshot_id)
        rds.delete_db_snapshot(DBSnapshotIdentifier=snapshot_id)
    except exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") == "DBSnapshotNotFound":
            return False
        raise
    return True
