"""GCP checks before ``up``: credentials, project access, required APIs, GPU quota.

Each REST call goes through ``get_json(url) -> (status, body)`` so the checks can be exercised
without Google; :func:`authorized_get_json` is the real one (Application Default Credentials).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from det.deploy.common.errors import PreflightError

GetJson = Callable[[str], tuple[int, dict[str, Any]]]

REQUIRED_APIS = (
    "compute.googleapis.com",
    "sqladmin.googleapis.com",
    "servicenetworking.googleapis.com",
    "secretmanager.googleapis.com",
    "iam.googleapis.com",
    "storage.googleapis.com",
)
FILESTORE_API = "file.googleapis.com"

GPU_QUOTA_METRICS = {
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
    "nvidia-tesla-p4": "NVIDIA_P4_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
}


def check_credentials(project_id: str) -> tuple[Any, GetJson]:
    try:
        import google.auth
        from google.auth import exceptions

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
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]

    def get_json(url: str) -> tuple[int, dict[str, Any]]:
        response = session.get(url, timeout=30)
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body

    return get_json


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
            raise PreflightError(
                f"project {project_id!r} does not exist or these credentials cannot use it "
                f"(HTTP {status}); check --project-id"
            )
        if status != 200:
            raise PreflightError(f"cannot list the enabled APIs of {project_id!r} (HTTP {status})")
        enabled |= {s["config"]["name"] for s in body.get("services", [])}
        token = body.get("nextPageToken", "")
        if not token:
            break
    missing = sorted(set(required) - enabled)
    if missing:
        raise PreflightError(
            f"APIs not enabled in {project_id!r}: {', '.join(missing)}; run "
            f"`gcloud services enable {' '.join(missing)} --project {project_id}`"
        )


def gpu_quota_metric(gpu_type: str, preemptible: bool) -> str | None:
    metric = GPU_QUOTA_METRICS.get(gpu_type)
    return f"PREEMPTIBLE_{metric}" if metric and preemptible else metric


def check_gpu_quota(
    get_json: GetJson,
    project_id: str,
    region: str,
    gpu_type: str,
    gpu_num: int,
    max_agents: int,
    preemptible: bool,
) -> str | None:
    """Fails when the regional GPU quota is too small; returns a warning when it cannot be checked."""
    needed = gpu_num * max_agents
    if needed == 0:
        return None
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
    quota = next((q for q in body.get("quotas", []) if q.get("metric") == metric), None)
    if quota is None:
        return f"quota {metric} not reported for {region}; quota not checked"
    available = int(quota["limit"] - quota.get("usage", 0))
    if needed > available:
        raise PreflightError(
            f"{max_agents} agents x {gpu_num} {gpu_type} need {needed} GPUs but {metric} in {region} "
            f"has {available} available; request more at "
            "https://cloud.google.com/compute/resource-usage#gpu_quota or lower --max-dynamic-agents"
        )
    return None
