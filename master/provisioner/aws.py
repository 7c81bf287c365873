"""The AWS EC2 provider: :class:`det.master.provisioner.provider.Provider` for one pool.

Request bodies are built by pure functions (:func:`run_instances_request`,
:func:`describe_filters`) so tests can check them without AWS. boto3 is imported on first use.

Retries: botocore's own retries are off (one attempt per call), because it retries HTTP 500s,
and EC2 answers ``InsufficientInstanceCapacity`` with a 500: retried, a capacity error may turn
into a late success on the same option while the decider already moved on. This module retries
only :data:`TRANSIENT_CODES` and connection errors, with capped exponential backoff. RunInstances
carries a ``ClientToken`` per launch, so a retried launch cannot start instances twice.

Errors in :data:`CAPACITY_CODES` become ``LaunchError(capacity=True)``: the decider moves to the
next entry of the pool's fallback list.

The endpoint comes from ``endpoint_url`` in the pool config, else boto3's own resolution
(``AWS_ENDPOINT_URL`` works unchanged, which is how tests point it at moto).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from det.common import master_url as master_url_
from det.common.backoff import backoff
from det.master.provisioner import bootstrap
from det.master.provisioner import ec2_types as ec2
from det.master.provisioner.config import AwsProviderConfig
from det.master.provisioner.provider import (
    Instance,
    InstanceState,
    LaunchError,
    LaunchOption,
    Market,
    is_quota,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

TAG_CLUSTER = "det-cluster-id"
TAG_POOL = "det-pool"
TAG_MARKET = "det-market"
TAG_MANAGED_BY = "managed-by"
MANAGED_BY = "det"

TRANSIENT_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientFreeAddressesInSubnet",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "Unsupported",
    }
)
# Terminate treats these as "already gone". moto answers a second TerminateInstances of an
# instance launched with a network interface with InvalidNetworkInterfaceID.NotFound.
NOT_FOUND_CODES = frozenset(
    {
        "InvalidInstanceID.NotFound",
        "InvalidInstanceID.Malformed",
        "InvalidNetworkInterfaceID.NotFound",
    }
)

_STATES = {
    "pending": InstanceState.STARTING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "shutting-down": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
}
LISTED_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


def instance_tags(
    config: AwsProviderConfig, cluster_id: str, pool: str, market: Market
) -> list[ec2.Tag]:
    """Tags of every resource of this pool: ours first, then Determined's tag and custom tags."""
    tags = {
        "Name": config.instance_name,
        TAG_CLUSTER: cluster_id,
        TAG_POOL: pool,
        TAG_MANAGED_BY: MANAGED_BY,
        TAG_MARKET: market.value,
    }
    tags.setdefault(config.tag_key, config.tag_value or cluster_id)
    for tag in config.custom_tags:
        tags.setdefault(tag.key, tag.value)
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def run_instances_request(
    config: AwsProviderConfig,
    option: LaunchOption,
    count: int,
    *,
    cluster_id: str,
    pool: str,
    user_data: str,
    client_token: str,
    root_device_name: str = "/dev/sda1",
    image_root_size: int = 0,
) -> ec2.RunInstancesRequest:
    """The ``RunInstances`` keyword arguments for ``count`` instances of ``option``.

    The root volume is ``root_volume_size`` GiB, but never smaller than the image's root
    snapshot (``image_root_size``): EC2 refuses such a mapping (``InvalidBlockDeviceMapping``),
    and a Deep Learning AMI's snapshot is larger than a stock Ubuntu's.

    ``option.zone`` is a subnet id (``subnet-…``) or an availability zone. With a subnet the
    request uses a network interface so ``network_interface.public_ip`` applies.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    tags = instance_tags(config, cluster_id, pool, option.market)
    resource_types = ["instance", "volume"]
    if option.market is Market.SPOT:
        resource_types.append("spot-instances-request")
    request: ec2.RunInstancesRequest = {
        "ImageId": config.image_id,
        "InstanceType": option.instance_type,
        # Partial launches are fine: the decider asks again for the rest.
        "MinCount": 1,
        "MaxCount": count,
        "UserData": user_data,
        "ClientToken": client_token,
        "TagSpecifications": [{"ResourceType": rt, "Tags": tags} for rt in resource_types],
        "BlockDeviceMappings": [
            {
                "DeviceName": root_device_name,
                "Ebs": {
                    "VolumeSize": max(config.root_volume_size, image_root_size),
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ],
        # IMDSv2 only, hop limit 2: a container on a bridge network is one hop further than the
        # host (EC2 User Guide, "Configure the instance metadata options",
        # HttpPutResponseHopLimit), and tasks write S3 checkpoints with the instance role, as
        # host-network tasks (the default) do. What the user data holds is a spent enrollment
        # ticket (det.master.services.enrollment), not the agent token; a hop limit of 1 would
        # only take bridge-network tasks' checkpoints away.
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 2,
        },
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if config.iam_instance_profile_arn:
        request["IamInstanceProfile"] = {"Arn": config.iam_instance_profile_arn}
    if config.ssh_key_name:
        request["KeyName"] = config.ssh_key_name
    zone = option.zone
    subnet = zone if zone and zone.startswith("subnet-") else None
    group = config.effective_security_group_id
    if subnet:
        interface: ec2.NetworkInterface = {
            "DeviceIndex": 0,
            "SubnetId": subnet,
            "AssociatePublicIpAddress": config.network_interface.public_ip,
            "DeleteOnTermination": True,
        }
        if group:
            interface["Groups"] = [group]
        request["NetworkInterfaces"] = [interface]
    else:
        if zone:
            request["Placement"] = {"AvailabilityZone": zone}
        if group:
            request["SecurityGroupIds"] = [group]
    if option.market is Market.SPOT:
        spot: ec2.SpotOptions = {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        }
        if config.spot_max_price:
            spot["MaxPrice"] = config.spot_max_price
        request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    return request


def describe_filters(cluster_id: str, pool: str) -> list[ec2.Filter]:
    """Filters that find exactly this cluster's and pool's live instances."""
    return [
        {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]},
        {"Name": f"tag:{TAG_POOL}", "Values": [pool]},
        {"Name": f"tag:{TAG_MANAGED_BY}", "Values": [MANAGED_BY]},
        {"Name": "instance-state-name", "Values": list(LISTED_STATES)},
    ]


SERVICE_QUOTAS_EC2 = "https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas"


def quota_hint(message: str, region: str | None) -> str:
    """EC2's quota refusal with where it applies and how to raise it (its own message names
    neither the region nor the console)."""
    where = f" in {region}" if region else ""
    return (
        f"{message.rstrip('.')}. This is the account's EC2 quota{where}, not capacity: ask for "
        f"more in the Service Quotas console ({SERVICE_QUOTAS_EC2}); approval can take hours"
    )


def instance_from_description(data: ec2.Instance) -> Instance:
    """One ``DescribeInstances`` / ``RunInstances`` instance → :class:`Instance`."""
    tags = {t["Key"]: t["Value"] for t in data.get("Tags", [])}
    spot = data.get("InstanceLifecycle") == "spot" or tags.get(TAG_MARKET) == Market.SPOT.value
    launched = data.get("LaunchTime")
    if not isinstance(launched, dt.datetime):
        launched = dt.datetime.now(dt.UTC)
    elif launched.tzinfo is None:
        launched = launched.replace(tzinfo=dt.UTC)
    else:
        launched = launched.astimezone(dt.UTC)
    return Instance(
        id=data["InstanceId"],
        state=_STATES.get(data.get("State", {}).get("Name", ""), InstanceState.STARTING),
        launched_at=launched,
        instance_type=data.get("InstanceType", ""),
        zone=data.get("SubnetId") or data.get("Placement", {}).get("AvailabilityZone"),
        market=Market.SPOT if spot else Market.ON_DEMAND,
        address=data.get("PrivateIpAddress"),
    )


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError``, else ``None``."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code else None
    return None


class AwsProvider:
    """EC2 for one resource pool. Not thread-safe: one provisioner loop uses it.

    ``user_data`` is the rendered bootstrap (:func:`bootstrap.render_user_data`); see
    :meth:`for_pool` to build both at once. ``client`` replaces the boto3 EC2 client (tests).
    """

    def __init__(
        self,
        config: AwsProviderConfig,
        *,
        cluster_id: str,
        pool: str,
        user_data: str,
        client: ec2.EC2Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 5,
        user_data_for: Callable[[int], str] | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.pool = pool
        self.user_data = user_data
        # A launch of N machines renders its own user data (a fresh enrollment ticket).
        self.user_data_for = user_data_for
        self._client = client
        self._sleep = sleep
        self._max_attempts = max(1, max_attempts)
        self._root_cache: tuple[str, int] | None = None

    @classmethod
    def for_pool(
        cls,
        config: AwsProviderConfig,
        *,
        cluster_id: str,
        pool: str,
        master_url: str,
        agent_token: str,
        extra_env: Mapping[str, str] | None = None,
        imds_url: str = bootstrap.DEFAULT_IMDS_URL,
        enroll: Callable[[int], str] | None = None,
        **kwargs: Any,
    ) -> AwsProvider:
        """Render the bootstrap and build.

        The pool's ``master_url`` wins over the master's own; a Determined placeholder host
        (``http://local-ipv4:8080``) is resolved through this machine's EC2 metadata
        (``imds_url``). With ``enroll`` (``count`` -> a one-time ticket for that many
        machines, det.master.services.enrollment) each launch's user data carries a new
        ticket and no agent token.
        """
        url = master_url
        if config.master_url:
            url = master_url_.resolve(
                config.master_url,
                bootstrap.EC2_ADDRESS_PLACEHOLDERS,
                bootstrap.ec2_metadata_lookup(imds_url),
            )

        user_data, per_launch = bootstrap.render_for_launches(
            url, agent_token, pool, cluster_id, "aws", extra_env,
            startup_script=config.startup_script, enroll=enroll,
        )  # fmt: skip
        if per_launch is not None:
            kwargs["user_data_for"] = per_launch
        return cls(config, cluster_id=cluster_id, pool=pool, user_data=user_data, **kwargs)

    @property
    def client(self) -> ec2.EC2Client:
        if self._client is None:
            # boto3 is the optional extra det[aws], needed only once an AWS pool calls EC2
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "ec2",
                region_name=self.config.region,
                endpoint_url=self.config.endpoint_url,
                config=Config(
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=10,
                    read_timeout=60,
                ),
            )
        return self._client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn``, retrying named transient errors only."""
        # boto3 is the optional extra det[aws] (see client)
        from botocore.exceptions import ConnectionError as BotoConnectionError

        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except BotoConnectionError as exc:
                reason = type(exc).__name__
                if attempt >= self._max_attempts:
                    raise
            except Exception as exc:
                code = error_code(exc)
                if code not in TRANSIENT_CODES or attempt >= self._max_attempts:
                    raise
                reason = code
            delay = backoff(attempt - 1, base=0.5, cap=10.0)
            logger.debug("%s: %s, retry %d in %.1fs", what, reason, attempt, delay)
            self._sleep(delay)

    def _root_device(self) -> tuple[str, int]:
        """The image's root device (``/dev/sda1`` on Ubuntu, ``/dev/xvda`` on Amazon Linux) and
        the size of its snapshot in GiB (0 when unknown)."""
        if self._root_cache is None:
            name, size = "/dev/sda1", 0
            try:
                images = self._call(
                    "DescribeImages",
                    lambda: self.client.describe_images(ImageIds=[self.config.image_id]),
                )["Images"]
                if images and images[0].get("RootDeviceName"):
                    name = images[0]["RootDeviceName"]
                for mapping in images[0].get("BlockDeviceMappings", []) if images else []:
                    if mapping.get("DeviceName") == name:
                        size = int(mapping.get("Ebs", {}).get("VolumeSize") or 0)
            except Exception as exc:
                logger.warning("cannot read image %s: %s", self.config.image_id, exc)
            if size > self.config.root_volume_size:
                logger.warning(
                    "root_volume_size %d GiB is smaller than image %s's snapshot: using %d GiB",
                    self.config.root_volume_size,
                    self.config.image_id,
                    size,
                )
            self._root_cache = (name, size)
        return self._root_cache

    def launch(self, option: LaunchOption, count: int) -> list[Instance]:
        root_device, image_root_size = self._root_device()
        request = run_instances_request(
            self.config,
            option,
            count,
            cluster_id=self.cluster_id,
            pool=self.pool,
            user_data=self.user_data_for(count) if self.user_data_for else self.user_data,
            client_token=uuid.uuid4().hex,
            root_device_name=root_device,
            image_root_size=image_root_size,
        )
        try:
            response = self._call("RunInstances", lambda: self.client.run_instances(**request))
        except Exception as exc:
            code = error_code(exc)
            if code is None:
                raise LaunchError(type(exc).__name__, str(exc)) from exc
            message = str(exc.response.get("Error", {}).get("Message", exc))  # type: ignore[attr-defined]
            if is_quota(code):
                region = self.config.region or getattr(
                    getattr(self.client, "meta", None), "region_name", None
                )
                message = quota_hint(message, region)
            raise LaunchError(code, message, capacity=code in CAPACITY_CODES) from exc
        instances = [instance_from_description(d) for d in response.get("Instances", [])]
        logger.info(
            "launched %d/%d %s (%s) for pool %s: %s",
            len(instances),
            count,
            option.instance_type,
            option.market.value,
            self.pool,
            ", ".join(i.id for i in instances),
        )
        return instances

    def list_instances(self) -> list[Instance]:
        filters = describe_filters(self.cluster_id, self.pool)
        out: list[Instance] = []
        token: str | None = None
        while True:
            more = {"NextToken": token} if token else {}
            page = self._call(
                "DescribeInstances",
                functools.partial(
                    self.client.describe_instances, Filters=filters, MaxResults=1000, **more
                ),
            )
            for reservation in page.get("Reservations", []):
                out.extend(instance_from_description(d) for d in reservation.get("Instances", []))
            token = page.get("NextToken")
            if not token:
                return out

    def terminate(self, instance_ids: list[str]) -> None:
        """Terminate, ignoring ids that are unknown or already gone; cancel their spot requests."""
        ids = sorted(set(instance_ids))
        if not ids:
            return
        try:
            self._terminate(ids)
        except Exception as exc:
            if error_code(exc) not in NOT_FOUND_CODES:
                raise
            # EC2 refuses the whole call if one id is unknown: go one by one.
            for instance_id in ids:
                try:
                    self._terminate([instance_id])
                except Exception as one:
                    if error_code(one) not in NOT_FOUND_CODES:
                        raise
                    logger.debug("terminate %s: already gone", instance_id)
        self._cancel_spot_requests(ids)

    def _terminate(self, ids: list[str]) -> None:
        self._call("TerminateInstances", lambda: self.client.terminate_instances(InstanceIds=ids))
        logger.info("terminating %s (pool %s)", ", ".join(ids), self.pool)

    def _cancel_spot_requests(self, ids: list[str]) -> None:
        """Cancel this pool's spot requests that belong to ``ids`` (a persistent request would
        otherwise start a replacement instance)."""
        filters: list[ec2.Filter] = [
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_id]},
            {"Name": f"tag:{TAG_POOL}", "Values": [self.pool]},
        ]
        try:
            requests = self._call(
                "DescribeSpotInstanceRequests",
                lambda: self.client.describe_spot_instance_requests(Filters=filters),
            ).get("SpotInstanceRequests", [])
        except Exception as exc:  # best effort: the instances are already terminating
            logger.warning("cannot list spot requests of pool %s: %s", self.pool, exc)
            return
        wanted = set(ids)
        to_cancel = [
            r["SpotInstanceRequestId"]
            for r in requests
            if r.get("InstanceId") in wanted and r.get("State") in ("open", "active")
        ]
        if to_cancel:
            self._call(
                "CancelSpotInstanceRequests",
                lambda: self.client.cancel_spot_instance_requests(SpotInstanceRequestIds=to_cancel),
            )
            logger.info("cancelled spot requests %s", ", ".join(to_cancel))
