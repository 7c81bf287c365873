"""Workspaces and projects on the wire: ``v1Workspace`` and ``v1Project`` from their rows."""

from __future__ import annotations

from det.master.rows.workspaces import Project, Workspace
from det.master.schemas import d
from det.master.wire import ts

# det has no asynchronous workspace or project deletion: every one is in the unspecified state.
_STATE: d.v1WorkspaceState = "WORKSPACE_STATE_UNSPECIFIED"


def workspace(r: Workspace) -> d.v1Workspace:
    """``r`` is a row of ``services.workspaces.get``/``list_``."""
    out: d.v1Workspace = {
        "id": r["id"],
        "name": r["name"],
        "archived": r["archived"],
        "username": r["username"],
        "immutable": r["immutable"],
        "numProjects": int(r["num_projects"]),
        "pinned": False,
        "userId": r["user_id"],
        "numExperiments": int(r["num_experiments"]),
        "state": _STATE,
        "errorMessage": "",
        "checkpointStorageConfig": r["checkpoint_storage"],
        "defaultComputePool": r["default_compute_pool"],
        "defaultAuxPool": r["default_aux_pool"],
    }
    if r["agent_user_group"] is not None:
        out["agentUserGroup"] = r["agent_user_group"]
    return out


def project(r: Project) -> d.v1Project:
    """``r`` is a row of ``services.projects.get``/``list_``."""
    out: d.v1Project = {
        "id": r["id"],
        "name": r["name"],
        "workspaceId": r["workspace_id"],
        "workspaceName": r["workspace_name"],
        "description": r["description"],
        "notes": r["notes"],
        "numActiveExperiments": int(r["num_active_experiments"]),
        "numExperiments": int(r["num_experiments"]),
        "numRuns": int(r["num_runs"]),
        "state": _STATE,
        "archived": r["archived"],
        "username": r["username"],
        "immutable": r["immutable"],
        "userId": r["user_id"],
        "errorMessage": "",
        "key": r["key"],
    }
    if r["last_experiment_at"] is not None:
        out["lastExperimentStartedAt"] = ts(r["last_experiment_at"])
    return out
