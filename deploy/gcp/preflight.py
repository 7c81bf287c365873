"""GCP checks before ``up``: credentials, project access, required APIs, GPU quota.

Each REST call goes through ``get_json(url) -> (status, body)`` so the checks can be exercised
without Google; :func:`authorized_get_json` is the real one (Application Default Credentials).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import google.auth
from google.auth import exceptions
from google.auth.transport.requests import AuthorizedSession

from det.common.jsontypes import JSONObject, JSONValue
from det.deploy.common.errors import PreflightError
from det.deploy.common.quotas import Need, gce_vcpus, total

# A Google REST GET: (HTTP status, the JSON body as sent; {} when it is not JSON).
GetJson = Callable[[str], tuple[int, JSONObject]]


def _object(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a JSON list (none when it is not one)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclasses.dataclass(frozen=True)
class Quota:
    """One of Compute Engine's ``Quota`` entries (a region's or the project's)."""

    limit: float
    usage: float

    @property
    def available(self) -> int:
        return int(self.limit - self.usage)


def reported_quotas(body: JSONObject) -> dict[str, Quota]:
    """A region's or the project's quotas by metric (an entry without a numeric limit is left
    out, as if not reported)."""
    found: dict[str, Quota] = {}
    for q in _objects(body.get("quotas")):
        metric, limit, usage = q.get("metric"), q.get("limit"), q.get("usage", 0)
        if isinstance(metric, str) and isinstance(limit, (int, float)):
            found[metric] = Quota(limit, usage if isinstance(usage, (int, float)) else 0)
    return found


# The APIs behind each pulumi_gcp module the program creates resources in (the module is the
# part of the type token between ':' and '/'). A test renders the program and fails when a
# resource's module is missing here, so a new kind of resource cannot forget its API.
MODULE_APIS: dict[str, tuple[str, ...]] = {
    "compute": ("compute.googleapis.com",),
    "sql": ("sqladmin.googleapis.com",),
    "servicenetworking": ("servicenetworking.googleapis.com",),
    "secretmanager": ("secretmanager.googleapis.com",),
    "serviceaccount": ("iam.googleapis.com",),
    # Custom roles live in IAM; project IAM bindings go through Resource Manager.
    "projects": ("iam.googleapis.com", "cloudresourcemanager.googleapis.com"),
    "storage": ("storage.googleapis.com",),
    "filestore": ("file.googleapis.com",),
}
# APIs the VMs call once they run: boot and service logs, the cluster secret, the bucket.
RUNTIME_APIS = (
    "logging.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
    "compute.googleapis.com",
)
FILESTORE_API = "file.googleapis.com"
REQUIRED_APIS = tuple(
    sorted(
        {api for apis in MODULE_APIS.values() for api in apis} - {FILESTORE_API} | set(RUNTIME_APIS)
    )
)


def apis_for(resource_types: Iterable[str]) -> set[str]:
    """The APIs the given Pulumi resource types need; an unknown gcp module is an error."""
    needed: set[str] = set()
    for type_ in resource_types:
        package, _, rest = type_.partition(":")
        if package != "gcp":
            continue
        module = rest.split("/", 1)[0]
        if module not in MODULE_APIS:
            raise KeyError(f"no API known for pulumi_gcp module {module!r} ({type_})")
        needed |= set(MODULE_APIS[module])
    return needed


GPU_QUOTA_METRICS = {
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
    "nvidia-tesla-p4": "NVIDIA_P4_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-b200": "NVIDIA_B200_GPUS",
}


def local_credentials() -> str | None:
    """The problem with this machine's Google Cloud credentials as found locally (None: found;
    ``check_credentials`` then uses them)."""

    try:
        google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except exceptions.DefaultCredentialsError:
        return (
            "no Google Cloud credentials found: run `gcloud auth application-default login` or "
            "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
        )
    return None


def check_credentials(project_id: str) -> tuple[Any, GetJson]:
    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    except exceptions.DefaultCredentialsError:
        raise PreflightError(
            "no Google Cloud credentials found: run `gcloud auth application-default login` or set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
        ) from None
    return credentials, authorized_get_json(credentials, project_id)


def authorized_get_json(credentials: Any, project_id: str) -> GetJson:

    session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]

    def get_json(url: str) -> tuple[int, JSONObject]:
        response = session.get(url, timeout=30)
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, _object(body)

    return get_json


def _error_reasons(body: JSONObject) -> list[str]:
    """The ``google.rpc.ErrorInfo`` reasons of a Google API error body."""
    details = _objects(_object(body.get("error")).get("details"))
    return [str(d.get("reason")) for d in details if d.get("reason")]


def service_usage_refusal(project_id: str, status: int, body: JSONObject) -> str:
    """What a 403 or 404 of the Service Usage API means: a 403 is not "no such project" (it
    is the API disabled in the project, or a missing permission), and saying so sent users to
    check a correct --project-id."""
    message = str(_object(body.get("error")).get("message") or "").splitlines()[0:1]
    said = f": {message[0]}" if message else ""
    reasons = _error_reasons(body)
    if status == 403 and ("SERVICE_DISABLED" in reasons or "has not been used" in str(said)):
        return (
            f"the Service Usage API is disabled in project {project_id!r} (HTTP 403); enable "
            f"it with `gcloud services enable serviceusage.googleapis.com --project {project_id}`"
        )
    if status == 403:
        return (
            f"these credentials may not list the services of project {project_id!r} (HTTP 403"
            f"{said}); they need serviceusage.services.list (roles/serviceusage.serviceUsageViewer"
            "), or check --project-id"
        )
    return f"project {project_id!r} does not exist (HTTP 404); check --project-id"


def check_apis(get_json: GetJson, project_id: str, required: Iterable[str]) -> None:
    enabled: set[str] = set()
    token = ""
    while True:
        url = (
            f"https://serviceusage.googleapis.com/v1/projects/{project_id}/services"
            f"?filter=state:ENABLED&pageSize=200{'&pageToken=' + token if token else ''}"
        )
        status, body = get_json(url)
        if status in (403, 404):
            raise PreflightError(service_usage_refusal(project_id, status, body))
        if status != 200:
            raise PreflightError(f"cannot list the enabled APIs of {project_id!r} (HTTP {status})")
        enabled |= {
            str(_object(s.get("config")).get("name")) for s in _objects(body.get("services"))
        }
        token = str(body.get("nextPageToken") or "")
        if not token:
            break
    missing = sorted(set(required) - enabled)
    if missing:
        raise PreflightError(
            f"APIs not enabled in {project_id!r}: {', '.join(missing)}; run "
            f"`gcloud services enable {' '.join(missing)} --project {project_id}`"
        )


def check_zone_offers(
    get_json: GetJson,
    project_id: str,
    zone: str,
    machine_types: Iterable[str],
    gpu_type: str | None,
) -> None:
    """The zone offers every machine type and the GPU type (``acceleratorTypes.get``,
    ``machineTypes.get``): zones of one region are not alike, and a GPU the zone lacks fails
    every agent launch. A refusal names the zones of the region that offer the GPU."""
    base = f"https://compute.googleapis.com/compute/v1/projects/{project_id}"
    if gpu_type:
        status, _ = get_json(f"{base}/zones/{zone}/acceleratorTypes/{gpu_type}")
        if status == 404:
            region = zone.rsplit("-", 1)[0]
            status, body = get_json(f"{base}/aggregated/acceleratorTypes?filter=name%3D{gpu_type}")
            zones = sorted(
                scope.rsplit("/", 1)[-1]
                for scope, found in _object(body.get("items")).items()
                if _object(found).get("acceleratorTypes")
                and scope.rsplit("/", 1)[-1].startswith(region + "-")
            )
            raise PreflightError(
                f"zone {zone} offers no {gpu_type} GPUs; zones of {region} that do: "
                f"{', '.join(zones) or 'none'} (pass --zone, or another --region or --gpu-type)"
            )
    for machine_type in dict.fromkeys(machine_types):
        status, _ = get_json(f"{base}/zones/{zone}/machineTypes/{machine_type}")
        if status == 404:
            raise PreflightError(
                f"zone {zone} offers no {machine_type} machines; pass another --zone or machine type"
            )


def gpu_quota_metric(gpu_type: str, preemptible: bool) -> str | None:
    metric = GPU_QUOTA_METRICS.get(gpu_type)
    return f"PREEMPTIBLE_{metric}" if metric and preemptible else metric


ALL_REGIONS_METRIC = "GPUS_ALL_REGIONS"


def check_gpu_quota(
    get_json: GetJson,
    project_id: str,
    region: str,
    gpu_type: str,
    gpu_num: int,
    max_agents: int,
    preemptible: bool,
) -> str | None:
    """Fails when the project-wide (``GPUS_ALL_REGIONS``) or the regional GPU quota is too small;
    returns a warning when one cannot be checked."""
    needed = gpu_num * max_agents
    if needed == 0:
        return None
    warning = _check_all_regions(get_json, project_id, needed, gpu_num, max_agents, preemptible)
    regional = _check_regional(
        get_json, project_id, region, gpu_type, gpu_num, max_agents, preemptible
    )
    return "; ".join(w for w in (warning, regional) if w) or None


def _check_all_regions(
    get_json: GetJson,
    project_id: str,
    needed: int,
    gpu_num: int,
    max_agents: int,
    preemptible: bool,
) -> str | None:
    status, body = get_json(f"https://compute.googleapis.com/compute/v1/projects/{project_id}")
    if status != 200:
        return f"could not read the project-wide quotas of {project_id} (HTTP {status})"
    quota = reported_quotas(body).get(ALL_REGIONS_METRIC)
    if quota is None:
        return f"quota {ALL_REGIONS_METRIC} not reported for {project_id}; not checked"
    available = quota.available
    if needed <= available:
        return None
    text = (
        f"{max_agents} agents x {gpu_num} GPUs need {needed} GPUs but the project-wide quota "
        f"{ALL_REGIONS_METRIC} of {project_id} has {available} available (new projects have 0); "
        "request more at https://console.cloud.google.com/iam-admin/quotas "
        "or lower --max-dynamic-agents"
    )
    if preemptible:
        # Preemptible GPUs have their own regional quota; the project-wide one may not apply.
        return text
    raise PreflightError(text)


def _check_regional(
    get_json: GetJson,
    project_id: str,
    region: str,
    gpu_type: str,
    gpu_num: int,
    max_agents: int,
    preemptible: bool,
) -> str | None:
    needed = gpu_num * max_agents
    metric = gpu_quota_metric(gpu_type, preemptible)
    if metric is None:
        return f"no known quota metric for GPU type {gpu_type!r}; quota not checked"
    status, body = get_json(
        f"https://compute.googleapis.com/compute/v1/projects/{project_id}/regions/{region}"
    )
    if status == 404:
        raise PreflightError(f"region {region!r} does not exist")
    if status != 200:
        return f"could not read the quotas of {region} (HTTP {status})"
    quota = reported_quotas(body).get(metric)
    if quota is None:
        return f"quota {metric} not reported for {region}; quota not checked"
    available = quota.available
    if needed > available:
        raise PreflightError(
            f"{max_agents} agents x {gpu_num} {gpu_type} need {needed} GPUs but {metric} in {region} "
            f"has {available} available; request more at "
            "https://cloud.google.com/compute/resource-usage#gpu_quota or lower --max-dynamic-agents"
        )
    return None


# Regional vCPU quota metrics by machine family (Compute Engine's Quota.Metric: CPUS counts N1,
# the newer families have their own); CPUS_ALL_REGIONS counts every family.
CPU_QUOTA_METRICS = {
    "n1": "CPUS",
    "e2": "E2_CPUS",
    "n2": "N2_CPUS",
    "n2d": "N2D_CPUS",
    "c2": "C2_CPUS",
    "c2d": "C2D_CPUS",
    "c3": "C3_CPUS",
    "a2": "A2_CPUS",
}
CPUS_ALL_REGIONS = "CPUS_ALL_REGIONS"
QUOTA_PAGE = "https://console.cloud.google.com/iam-admin/quotas"


def cpu_metric(machine_type: str) -> str | None:
    return CPU_QUOTA_METRICS.get(machine_type.split("-", 1)[0])


def machines(cfg: Any) -> list[tuple[str, str, int]]:
    """(role, machine type, count) with both pools at ``max_dynamic_agents``; the master's VM
    unless the master is serverless (Cloud Run counts against no Compute Engine quota)."""
    n = cfg.max_dynamic_agents
    master = [] if cfg.serverless else [("master", cfg.master_instance_type, 1)]
    return [
        *master,
        ("aux", cfg.aux_agent_instance_type, n),
        ("compute", cfg.compute_agent_instance_type, n),
    ]


def quota_needs(cfg: Any, vcpus: Callable[[str], int | None] = gce_vcpus) -> list[Need]:
    """What the cluster needs at its largest; ``vcpus`` gives a machine type's vCPUs (by name
    offline, from the API at ``up``)."""
    n = cfg.max_dynamic_agents
    needs: list[Need] = []
    if cfg.gpu_num:
        gpus = n * cfg.gpu_num
        why = f"{n} x {cfg.gpu_num} {cfg.gpu_type}"
        needs.append(Need(ALL_REGIONS_METRIC, "project", gpus, why))
        metric = gpu_quota_metric(cfg.gpu_type, cfg.preemptible) or f"{cfg.gpu_type} GPUs"
        needs.append(Need(metric, cfg.region, gpus, why))
    parts: dict[str, list[tuple[int | None, int]]] = {}
    why_cpu: dict[str, list[str]] = {}
    for role, machine_type, count in machines(cfg):
        metric = cpu_metric(machine_type) or f"{machine_type.split('-', 1)[0].upper()}_CPUS"
        parts.setdefault(metric, []).append((vcpus(machine_type), count))
        why_cpu.setdefault(metric, []).append(f"{count} x {machine_type} ({role})")
    for metric, counted in parts.items():
        needs.append(Need(metric, cfg.region, total(counted), " + ".join(why_cpu[metric])))
    everything = [p for counted in parts.values() for p in counted]
    all_why = " + ".join(w for whys in why_cpu.values() for w in whys)
    needs.append(Need(CPUS_ALL_REGIONS, "project", total(everything), all_why))
    if cfg.serverless:
        needs.append(Need("IN_USE_ADDRESSES", cfg.region, 2 * n, "each agent's address"))
    else:
        needs.append(
            Need("IN_USE_ADDRESSES", cfg.region, 1 + 2 * n, "the master and each agent's address")
        )
    return needs


def check_cpu_quota(get_json: GetJson, project_id: str, zone: str, cfg: Any) -> str | None:
    """Fails when a regional vCPU quota (``CPUS`` for N1…) or ``CPUS_ALL_REGIONS`` is smaller
    than the cluster at ``max_dynamic_agents`` needs (the first trial would otherwise wait on
    quota); returns a warning when one cannot be checked."""
    base = f"https://compute.googleapis.com/compute/v1/projects/{project_id}"
    found: dict[str, int] = {}
    for _, machine_type, _ in machines(cfg):
        if machine_type in found:
            continue
        status, body = get_json(f"{base}/zones/{zone}/machineTypes/{machine_type}")
        cpus = body.get("guestCpus")
        if status != 200 or not isinstance(cpus, (int, float, str)):
            return (
                f"could not read the vCPUs of {machine_type} (HTTP {status}); CPU quota not checked"
            )
        found[machine_type] = int(cpus)
    needs = [
        need
        for need in quota_needs(cfg, found.get)
        if need.quota in (*CPU_QUOTA_METRICS.values(), CPUS_ALL_REGIONS)
    ]
    warnings: list[str] = []
    for scope_url, scope in ((f"{base}/regions/{cfg.region}", cfg.region), (base, "project")):
        status, body = get_json(scope_url)
        if status != 200:
            warnings.append(f"could not read the quotas of {scope} (HTTP {status})")
            continue
        reported = reported_quotas(body)
        for need in (x for x in needs if x.scope == scope):
            quota = reported.get(need.quota)
            if quota is None or need.amount is None:
                warnings.append(f"quota {need.quota} not reported for {scope}; not checked")
                continue
            available = quota.available
            if need.amount > available:
                where = f"in {scope}" if scope != "project" else f"of project {project_id}"
                raise PreflightError(
                    f"{need.why} need {need.amount} vCPUs but quota {need.quota} {where} has "
                    f"{available} available (limit {int(quota.limit)}); request more at "
                    f"{QUOTA_PAGE}?project={project_id} or lower --max-dynamic-agents"
                )
    return "; ".join(warnings) or None
