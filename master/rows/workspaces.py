"""The rows of workspaces and projects."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject
from det.master.schemas import _determined as d


class Project(TypedDict):
    """A project as it is shown (``schemas.workspaces.project``): its row, its workspace's name
    and state, its owner's id and name (the admin's for none) and its counts."""

    id: int
    workspace_id: int
    name: str
    key: str
    description: str
    notes: list[d.v1Note]
    archived: bool
    immutable: bool
    owner_id: int | None
    created_at: dt.datetime
    workspace_name: str
    workspace_archived: bool
    user_id: int
    username: str
    num_experiments: int
    num_active_experiments: int
    num_runs: int
    last_experiment_at: dt.datetime | None


class Workspace(TypedDict):
    """A workspace as it is shown (``schemas.workspaces.workspace``): its row, its owner's id
    and name (the admin's for none) and its counts."""

    id: int
    name: str
    archived: bool
    immutable: bool
    owner_id: int | None
    default_compute_pool: str
    default_aux_pool: str
    checkpoint_storage: JSONObject | None
    #: As the request gave it (:func:`_agent_user_group`).
    agent_user_group: d.v1AgentUserGroup | None
    created_at: dt.datetime
    user_id: int
    username: str
    num_projects: int
    num_experiments: int


@dataclass(frozen=True)
class WorkspaceAccess:
    """Who a workspace is open to (``authz.roles_in``): its owner, and whether a role was ever
    assigned on it (private: members only)."""

    owner_id: int | None
    private: bool
