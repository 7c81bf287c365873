"""The GCE provider: launches, lists and deletes agent VMs with ``google-cloud-compute``.

Request bodies are built by pure functions in the REST (camelCase JSON) shape, so they are table
tested without the SDK and Determined's ``base_config`` merges into them as written in
master.yaml. ``google.cloud.compute_v1`` takes seconds to import: it is imported on first use.

Operations are awaited with our own ``ZoneOperationsClient`` built with the same client options:
the SDK's ``operation.result()`` polls through a client of its own that ignores
``api_endpoint``. Capacity and quota refusals arrive in the finished operation's ``error``; they
become ``LaunchError(capacity=True)`` so the decider moves to its next option. Only the
transient reasons in :data:`TRANSIENT_REASONS` are retried (capped exponential backoff with
jitter). Error tree::

    LaunchError(code, message, capacity=...)   # launch refused (det.master.provisioner.provider)
    google.api_core.exceptions.GoogleAPICallError   # list/terminate failures, after retries
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import hashlib
import json
import logging
import os
import random
import re
import string
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import requests
from typing_extensions import TypedDict

from det.common import master_url as master_url_
from det.common.backoff import backoff
from det.common.jsontypes import JSONObject, JSONValue
from det.master.provisioner import bootstrap
from det.master.provisioner.gcp_config import GcpProviderConfig
from det.master.provisioner.provider import (
    Instance,
    InstanceState,
    LaunchError,
    LaunchOption,
    Market,
    is_quota,
)

if TYPE_CHECKING:
    from google.cloud import compute_v1

logger = logging.getLogger(__name__)

T = TypeVar("T")

CAPACITY_CODES = frozenset(
    {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED"}
)
# Reasons in an HTTP error's ``errors[].reason`` that say "try again later".
TRANSIENT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "backendError"})
LABEL_MANAGED_BY = "managed-by"
LABEL_CLUSTER = "det-cluster-id"
LABEL_POOL = "det-pool"

_STATES = {
    "PROVISIONING": InstanceState.STARTING,
    "STAGING": InstanceState.STARTING,
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "SUSPENDED": InstanceState.STOPPED,
    # GCE's TERMINATED is a stopped VM that still exists (and keeps its disk): it must be
    # deleted, so it is listed as STOPPED rather than dropped.
    "TERMINATED": InstanceState.STOPPED,
}
_NAME_ALPHABET = string.ascii_lowercase + string.digits


# -- pure request builders ---------------------------------------------------------------------


def sanitize_label_value(value: str) -> str:
    """A GCE label value: lowercase letters, digits, ``_`` and ``-``, at most 63 characters.

    A value that had to change gets a short hash of the original appended, so two different
    pools (``Pool_A``, ``pool_a``) never share a label value.
    """
    clean = re.sub(r"[^a-z0-9_-]", "-", value.lower())
    if clean == value and len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{clean[:54]}-{digest}"


def instance_labels(config: GcpProviderConfig, cluster_id: str, pool: str) -> dict[str, str]:
    labels = {k: sanitize_label_value(v) for k, v in config.labels.items()}
    labels[LABEL_MANAGED_BY] = "det"
    if config.label_value:
        labels[config.label_key] = sanitize_label_value(config.label_value)
    labels[LABEL_CLUSTER] = sanitize_label_value(cluster_id)
    labels[LABEL_POOL] = sanitize_label_value(pool)
    return labels


def label_filter(cluster_id: str, pool: str) -> str:
    """The list filter for this pool: parenthesised terms joined by AND, as GCE documents."""
    return (
        f"(labels.{LABEL_CLUSTER} = {sanitize_label_value(cluster_id)}) AND "
        f"(labels.{LABEL_POOL} = {sanitize_label_value(pool)})"
    )


def instance_name(prefix: str, rng: random.Random) -> str:
    """``prefix`` + 8 random characters: a valid GCE name that is also the agent id."""
    return prefix + "".join(rng.choice(_NAME_ALPHABET) for _ in range(8))


class _Scheduling(TypedDict, total=False):
    provisioningModel: str
    preemptible: bool


class _NetworkInterface(TypedDict, total=False):
    networkIP: str


class GceInstance(TypedDict, total=False):
    """A GCE Instance resource as its REST JSON (the fields det reads)."""

    name: str
    status: str
    creationTimestamp: str
    machineType: str
    zone: str
    scheduling: _Scheduling
    networkInterfaces: list[_NetworkInterface]


def _object(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _items(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def instance_properties(
    config: GcpProviderConfig,
    option: LaunchOption,
    *,
    zone: str,
    startup_script: str,
    labels: Mapping[str, str],
    zonal_urls: bool,
) -> JSONObject:
    """The Instance fields for one launch option, REST-shaped: the user's ``base_config`` (JSON
    as written in master.yaml) with det's fields merged in.

    ``zonal_urls``: ``instances.insert`` takes zonal partial URLs for the machine, disk and
    accelerator types; ``bulkInsert``'s ``instanceProperties`` takes bare names.
    """

    def zonal(kind: str, name: str) -> str:
        return f"zones/{zone}/{kind}/{name}" if zonal_urls else name

    body: JSONObject = copy.deepcopy(config.base_config or {})
    body["machineType"] = zonal("machineTypes", option.instance_type)
    boot: JSONObject = {
        "boot": True,
        "autoDelete": True,
        "initializeParams": {
            "sourceImage": config.boot_disk_source_image,
            "diskSizeGb": str(config.boot_disk_size),
            "diskType": zonal("diskTypes", config.boot_disk_type.rsplit("/", 1)[-1]),
        },
    }
    body["disks"] = [boot, *_items(body.get("disks", []))]
    body["labels"] = {**_object(body.get("labels", {})), **labels}
    items: list[JSONValue] = [
        i
        for i in _items(_object(body.get("metadata", {})).get("items", []))
        if _object(i).get("key") != "startup-script"
    ]
    body["metadata"] = {"items": [*items, {"key": "startup-script", "value": startup_script}]}

    nic: JSONObject = {"network": config.network_interface.network}
    if config.network_interface.subnetwork:
        nic["subnetwork"] = config.network_interface.subnetwork
    if config.network_interface.external_ip:
        nic["accessConfigs"] = [
            {"name": "External NAT", "type": "ONE_TO_ONE_NAT", "networkTier": "PREMIUM"}
        ]
    body["networkInterfaces"] = [nic]
    if config.network_tags:
        body["tags"] = {"items": list[JSONValue](config.network_tags)}
    if config.service_account is not None:
        body["serviceAccounts"] = [
            {
                "email": config.service_account.email,
                "scopes": list[JSONValue](config.service_account.scopes),
            }
        ]

    scheduling = dict(_object(body.get("scheduling", {})))
    if option.accelerator_type and option.accelerator_count > 0:
        body["guestAccelerators"] = [
            {
                "acceleratorType": zonal("acceleratorTypes", option.accelerator_type),
                "acceleratorCount": option.accelerator_count,
            }
        ]
        # VMs with GPUs cannot live-migrate.
        scheduling["onHostMaintenance"] = "TERMINATE"
    if option.market is Market.SPOT:
        if config.spot or not config.wants_preemptible:
            scheduling["provisioningModel"] = "SPOT"
            scheduling["instanceTerminationAction"] = "DELETE"
        else:
            scheduling["preemptible"] = True
        scheduling["automaticRestart"] = False
        scheduling["onHostMaintenance"] = "TERMINATE"
    if scheduling:
        body["scheduling"] = scheduling
    return body


def insert_body(properties: JSONObject, name: str) -> JSONObject:
    return {**properties, "name": name}


def bulk_insert_body(properties: JSONObject, names: list[str]) -> JSONObject:
    """All-or-some: GCE creates as many as it can, at least one (``minCount``)."""
    return {
        "count": str(len(names)),
        "minCount": "1",
        "perInstanceProperties": {n: {} for n in names},
        "instanceProperties": dict(properties),
    }


def instance_from_rest(data: GceInstance) -> Instance:
    """Our view of a GCE Instance resource (REST JSON)."""
    scheduling = data.get("scheduling", {})
    spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
    nics = data.get("networkInterfaces") or [{}]
    created = data.get("creationTimestamp")
    return Instance(
        id=data["name"],
        state=_STATES.get(str(data.get("status", "")), InstanceState.STARTING),
        launched_at=dt.datetime.fromisoformat(created) if created else dt.datetime.now(dt.UTC),
        instance_type=str(data.get("machineType", "")).rsplit("/", 1)[-1],
        zone=str(data.get("zone", "")).rsplit("/", 1)[-1] or None,
        market=Market.SPOT if spot else Market.ON_DEMAND,
        address=nics[0].get("networkIP"),
    )


def with_quota_hint(err: LaunchError, project: str | None) -> LaunchError:
    """A quota refusal with how to raise it (GCE's message names the quota and the region:
    "Quota 'CPUS' exceeded. Limit: 24.0 in region us-west1.")."""
    if not is_quota(err.code):
        return err
    page = "https://console.cloud.google.com/iam-admin/quotas" + (
        f"?project={project}" if project else ""
    )
    message = (
        f"{err.message.rstrip('.')}. This is the project's quota, not capacity: ask for more "
        f"at {page}; approval can take days"
    )
    return LaunchError(err.code, message, capacity=err.capacity)


def launch_error(errors: list[tuple[str, str]]) -> LaunchError:
    """Classify a finished operation's ``error.errors`` (code, message) pairs."""
    for code, message in errors:
        if code in CAPACITY_CODES:
            return LaunchError(code, message, capacity=True)
        if code == "RESOURCE_NOT_FOUND" and (
            "machineTypes" in message or "acceleratorTypes" in message
        ):
            # The machine or GPU type is not offered in this zone: another zone may have it.
            return LaunchError(code, message, capacity=True)
    code, message = errors[0] if errors else ("UNKNOWN", "operation failed without details")
    return LaunchError(code, message, capacity=False)


def http_error_reason(exc: BaseException) -> str:
    """The first ``errors[].reason`` of a ``GoogleAPICallError`` ('' if none)."""
    for item in getattr(exc, "errors", None) or []:
        if isinstance(item, Mapping) and item.get("reason"):
            return str(item["reason"])
    return str(getattr(exc, "reason", "") or "")


# Determined's master_url hosts that stand for "this master machine's address" on GCE, and the
# metadata paths that answer them. An empty host means the internal address too.
GCE_ADDRESS_PLACEHOLDERS = {
    "": "instance/network-interfaces/0/ip",
    "internal-ip": "instance/network-interfaces/0/ip",
    "external-ip": "instance/network-interfaces/0/access-configs/0/external-ip",
}


# -- the provider ------------------------------------------------------------------------------


class GcpProvider:
    """:class:`det.master.provisioner.provider.Provider` for one resource pool on GCE.

    ``startup_script`` is the agent bootstrap (put in the ``startup-script`` metadata item).
    ``credentials`` / ``api_endpoint`` are for tests (``AnonymousCredentials()`` and
    ``http://127.0.0.1:PORT``); by default the client uses Application Default Credentials.
    Not thread-safe: one provisioner loop uses it.
    """

    def __init__(
        self,
        config: GcpProviderConfig,
        *,
        cluster_id: str,
        pool: str,
        startup_script: str,
        credentials: Any = None,
        api_endpoint: str | None = None,
        project: str | None = None,
        zone: str | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 5,
        startup_script_for: Callable[[int], str] | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.pool = pool
        self.startup_script = startup_script
        # A launch of N machines renders its own script (a fresh enrollment ticket).
        self.startup_script_for = startup_script_for
        self.project = project or config.project or _metadata("project/project-id")
        self.zone = zone or config.zone or _metadata("instance/zone").rsplit("/", 1)[-1]
        self._credentials = credentials
        self._api_endpoint = api_endpoint
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._max_attempts = max_attempts
        self._clients: tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient] | None = (
            None
        )
        self._zone_of: dict[str, str] = {}

    @classmethod
    def for_pool(
        cls,
        config: GcpProviderConfig,
        *,
        cluster_id: str,
        pool: str,
        master_url: str,
        agent_token: str,
        extra_env: Mapping[str, str] | None = None,
        enroll: Callable[[int], str] | None = None,
        **kwargs: Any,
    ) -> GcpProvider:
        """Render the agent bootstrap (``cloud="gcp"``) and build the provider.

        The pool's ``master_url`` wins over the master's own; Determined's placeholder hosts
        (``http://internal-ip:8080``, ``external-ip``) are read from this machine's metadata.
        With ``enroll`` (``count`` -> a one-time ticket for that many machines) each launch's
        script carries a new ticket and no agent token.
        """
        url = master_url
        if config.master_url:
            url = master_url_.resolve(config.master_url, GCE_ADDRESS_PLACEHOLDERS, _metadata)

        script, per_launch = bootstrap.render_for_launches(
            url, agent_token, pool, cluster_id, "gcp", extra_env,
            startup_script=config.startup_script, enroll=enroll,
        )  # fmt: skip
        if per_launch is not None:
            kwargs["startup_script_for"] = per_launch
        return cls(config, cluster_id=cluster_id, pool=pool, startup_script=script, **kwargs)

    @property
    def zones(self) -> list[str]:
        """Every zone this pool may launch in: where list_instances looks."""
        zones = [self.zone]
        for option in self.config.launch_options():
            if option.zone and option.zone not in zones:
                zones.append(option.zone)
        return zones

    def _sdk(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
        if self._clients is None:
            # the Google SDK is the optional extra det[gcp], needed only once a GCP pool calls it
            from google.api_core.client_options import ClientOptions
            from google.cloud import compute_v1

            options = ClientOptions(api_endpoint=self._api_endpoint) if self._api_endpoint else None
            self._clients = (
                compute_v1.InstancesClient(credentials=self._credentials, client_options=options),
                compute_v1.ZoneOperationsClient(
                    credentials=self._credentials, client_options=options
                ),
            )
        return self._clients

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        # det[gcp], optional (see _sdk)
        from google.api_core import exceptions

        for attempt in range(self._max_attempts):
            try:
                return fn()
            except exceptions.GoogleAPICallError as exc:
                transient = http_error_reason(exc) in TRANSIENT_REASONS or exc.code == 429
                if not transient or attempt == self._max_attempts - 1:
                    raise
                delay = backoff(attempt, base=0.5, cap=8.0, jitter=self._rng.random())
                logger.debug("%s: transient %s, retrying in %.2fs", what, exc, delay)
                self._sleep(delay)
        raise AssertionError("unreachable")

    # -- Provider ------------------------------------------------------------------------------

    def launch(self, option: LaunchOption, count: int) -> list[Instance]:
        # det[gcp], optional (see _sdk)
        from google.api_core import exceptions
        from google.cloud import compute_v1

        if count <= 0:
            return []
        zone = option.zone or self.zone
        instances, _ = self._sdk()
        props = instance_properties(
            self.config,
            option,
            zone=zone,
            startup_script=(
                self.startup_script_for(count) if self.startup_script_for else self.startup_script
            ),
            labels=instance_labels(self.config, self.cluster_id, self.pool),
            zonal_urls=count == 1,
        )
        names = [instance_name(self.config.name_prefix, self._rng) for _ in range(count)]
        try:
            if count == 1:
                body: Any = compute_v1.Instance.from_json(json.dumps(insert_body(props, names[0])))
            else:
                body = compute_v1.BulkInsertInstanceResource.from_json(
                    json.dumps(bulk_insert_body(props, names))
                )
        except Exception as exc:  # json_format.ParseError: base_config names an unknown field
            raise LaunchError("INVALID_REQUEST", f"bad instance body: {exc}") from exc
        attempts = 0

        def send() -> compute_v1.Operation:
            nonlocal attempts
            attempts += 1
            if count == 1:
                return instances.insert_unary(
                    project=self.project, zone=zone, instance_resource=body
                )
            return instances.bulk_insert_unary(
                project=self.project, zone=zone, bulk_insert_instance_resource_resource=body
            )

        try:
            op = self._call("insert" if count == 1 else "bulkInsert", send)
        except exceptions.GoogleAPICallError as exc:
            if not (attempts > 1 and http_error_reason(exc) == "alreadyExists"):
                raise with_quota_hint(self._sync_launch_error(exc), self.project) from exc
            # An earlier attempt created them although its answer was lost: that is a success
            # (for a bulk launch the list below finds which).
            op = None
        done = self._wait(zone, op) if op is not None else None
        if done is not None and done.error and done.error.errors:
            err = with_quota_hint(
                launch_error([(e.code, e.message) for e in done.error.errors]), self.project
            )
            logger.info(
                "launch of %d x %s in %s refused: %s", count, option.instance_type, zone, err
            )
            raise err
        if count > 1:
            created = {i.id for i in self._list_zone(zone)}
            names = [n for n in names if n in created]
        now = dt.datetime.now(dt.UTC)
        for name in names:
            self._zone_of[name] = zone
        logger.info("launched %d x %s in %s: %s", len(names), option.instance_type, zone, names)
        return [
            Instance(
                id=name,
                state=InstanceState.STARTING,
                launched_at=now,
                instance_type=option.instance_type,
                zone=zone,
                market=option.market,
            )
            for name in names
        ]

    def _sync_launch_error(self, exc: Any) -> LaunchError:
        reason = http_error_reason(exc) or type(exc).__name__
        message = str(getattr(exc, "message", exc))
        if reason in ("quotaExceeded", "ZONE_RESOURCE_POOL_EXHAUSTED") or reason in CAPACITY_CODES:
            return LaunchError(reason, message, capacity=True)
        if exc.code == 404 and ("machineTypes" in message or "acceleratorTypes" in message):
            return LaunchError("RESOURCE_NOT_FOUND", message, capacity=True)
        return LaunchError(reason, message, capacity=False)

    def _wait(self, zone: str, op: compute_v1.Operation) -> compute_v1.Operation | None:
        """Wait for a zone operation; None if it outlives ``operation_timeout_period``."""
        _, operations = self._sdk()
        deadline = time.monotonic() + self.config.operation_timeout_period.total_seconds()
        while op.status.name != "DONE":
            if time.monotonic() > deadline:
                logger.warning("operation %s in %s still running; not waiting", op.name, zone)
                return None
            op = self._call(
                "wait",
                functools.partial(
                    operations.wait, project=self.project, zone=zone, operation=op.name
                ),
            )
        return op

    def _list_zone(self, zone: str) -> list[Instance]:
        instances, _ = self._sdk()
        request = {
            "project": self.project,
            "zone": zone,
            "filter": label_filter(self.cluster_id, self.pool),
            "max_results": 500,
        }
        pager = self._call("list", lambda: instances.list(request=request))
        found = []
        for item in pager:
            inst = instance_from_rest(json.loads(type(item).to_json(item)))
            self._zone_of[inst.id] = zone
            found.append(inst)
        return found

    def list_instances(self) -> list[Instance]:
        """This pool's instances in every zone of the project (one aggregated list), so an
        instance in a zone the config no longer names is still found and can be reconciled."""
        return self._aggregated(label_filter(self.cluster_id, self.pool))

    def list_labelled(self, key: str, value: str) -> list[Instance]:
        """Every instance of the project labelled ``key=value``, whatever its pool (``det
        deploy gcp down`` finds a whole cluster's agents by its ``label_key``/``label_value``)."""
        return self._aggregated(f"(labels.{key} = {sanitize_label_value(value)})")

    def _aggregated(self, filter_: str) -> list[Instance]:
        instances, _ = self._sdk()
        request = {"project": self.project, "filter": filter_, "max_results": 500}
        pager = self._call("aggregatedList", lambda: instances.aggregated_list(request=request))
        found = []
        for _, scoped in pager:
            for item in scoped.instances:
                inst = instance_from_rest(json.loads(type(item).to_json(item)))
                if inst.zone:
                    self._zone_of[inst.id] = inst.zone
                found.append(inst)
        return found

    def terminate(self, instance_ids: list[str]) -> None:
        # det[gcp], optional (see _sdk)
        from google.api_core import exceptions

        instances, _ = self._sdk()
        for name in instance_ids:
            known = self._zone_of.get(name)
            for zone in [known] if known else self.zones:
                try:
                    self._call(
                        "delete",
                        functools.partial(
                            instances.delete_unary, project=self.project, zone=zone, instance=name
                        ),
                    )
                    logger.info("deleting instance %s in %s", name, zone)
                    break
                except exceptions.NotFound:
                    continue  # already gone, or in another zone: both fine
            self._zone_of.pop(name, None)


def _metadata(path: str) -> str:
    """A value from the GCE metadata server (the master's own project or zone).

    ``GCE_METADATA_HOST`` points it elsewhere, as it does for google-auth.
    """
    host = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    try:
        resp = requests.get(
            f"http://{host}/computeMetadata/v1/{path}",
            headers={"Metadata-Flavor": "Google"},
            timeout=2,
        )
        resp.raise_for_status()
    except requests.RequestException as exc:
        raise ValueError(
            f"provider: project/zone not configured and not readable from the metadata server "
            f"({path}): {exc}"
        ) from exc
    return resp.text.strip()
