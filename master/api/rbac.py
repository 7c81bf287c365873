"""Roles and user groups on Determined's wire (``det rbac``, ``det user-group``).

Every user lists the roles (with what they allow: :data:`det.master.authz.TABLE`), the groups
and their own permissions. Assigning a role on a workspace needs ``workspace.assign`` there (its
WorkspaceAdmins, its owner, admins); on the cluster, and creating, changing or deleting groups,
``cluster.assign`` (ClusterAdmins).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master import authz
from det.master.api import _access
from det.master.api._common import Conn, current_user, db, pagination
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound
from det.master.schemas import d
from det.master.schemas import users as user_wire
from det.master.services import rbac as svc
from det.master.services import users
from det.master.wire import Empty

bp = Blueprint("rbac", __name__)

# Determined's permission types for det's permissions (template.secrets has none: UNSPECIFIED,
# as Determined's clients need an id; its name says which it is).
_WIRE_PERMISSION: dict[str, d.v1PermissionType] = {
    "workspace.view": "PERMISSION_TYPE_VIEW_WORKSPACE",
    "workspace.update": "PERMISSION_TYPE_UPDATE_WORKSPACE",
    "workspace.assign": "PERMISSION_TYPE_ASSIGN_ROLES",
    "project.view": "PERMISSION_TYPE_VIEW_PROJECT",
    "project.create": "PERMISSION_TYPE_CREATE_PROJECT",
    "project.update": "PERMISSION_TYPE_UPDATE_PROJECT",
    "experiment.view": "PERMISSION_TYPE_VIEW_EXPERIMENT_METADATA",
    "experiment.create": "PERMISSION_TYPE_CREATE_EXPERIMENT",
    "experiment.update": "PERMISSION_TYPE_UPDATE_EXPERIMENT",
    "experiment.delete": "PERMISSION_TYPE_DELETE_EXPERIMENT",
    "task.view": "PERMISSION_TYPE_VIEW_NSC",
    "task.create": "PERMISSION_TYPE_CREATE_NSC",
    "task.update": "PERMISSION_TYPE_UPDATE_NSC",
    "template.view": "PERMISSION_TYPE_VIEW_TEMPLATES",
    "template.create": "PERMISSION_TYPE_CREATE_TEMPLATES",
    "template.update": "PERMISSION_TYPE_UPDATE_TEMPLATES",
    "cluster.assign": "PERMISSION_TYPE_UPDATE_ROLES",
}
_BY_WIRE_ID = {v: k for k, v in authz.WIRE_IDS.items()}


def _role(role: authz.Role) -> d.v1Role:
    cluster_only = role is authz.Role.CLUSTER_ADMIN
    perms: list[d.v1Permission] = []
    for name in sorted(authz.TABLE[role]):
        perms.append({
            "id": _WIRE_PERMISSION.get(name, "PERMISSION_TYPE_UNSPECIFIED"),
            "name": name,
            "scopeTypeMask": {"cluster": True, "workspace": name != "cluster.assign"},
        })  # fmt: skip
    return {
        "roleId": authz.WIRE_IDS[role],
        "name": role.value,
        "permissions": perms,
        "scopeTypeMask": {"cluster": True, "workspace": not cluster_only},
    }


def _roles_page(roles: list[authz.Role], offset: int, limit: int) -> tuple[list[d.v1Role], Any]:
    shown = roles[offset : offset + limit if limit > 0 else None]
    return [_role(r) for r in shown], pagination(offset, limit, len(roles))


@bp.post("/api/v1/roles/search")
@contract("ListRoles")
def list_roles(body: d.v1ListRolesRequest) -> d.v1ListRolesResponse:
    roles, pag = _roles_page(list(authz.Role), body.get("offset") or 0, body.get("limit") or 0)
    return {"roles": roles, "pagination": pag}


@bp.post("/api/v1/roles/search/by-assignability")
@contract("SearchRolesAssignableToScope")
def assignable_roles(
    body: d.v1SearchRolesAssignableToScopeRequest,
) -> d.v1SearchRolesAssignableToScopeResponse:
    """On a workspace (``workspaceId`` set) every role but ClusterAdmin; on the cluster all."""
    roles = [
        r for r in authz.Role
        if body.get("workspaceId") is None or r is not authz.Role.CLUSTER_ADMIN
    ]  # fmt: skip
    shown, pag = _roles_page(roles, body.get("offset") or 0, body.get("limit") or 0)
    return {"roles": shown, "pagination": pag}


def _role_of(assignment: Any, where: str) -> authz.Role:
    ra = assignment.get("roleAssignment") if isinstance(assignment, dict) else None
    role = (ra or {}).get("role") or {}
    role_id = role.get("roleId")
    if role_id in _BY_WIRE_ID:
        return _BY_WIRE_ID[role_id]
    if role.get("name"):
        return authz.role_named(str(role["name"]))
    known = ", ".join(f"{r.value} ({i})" for r, i in authz.WIRE_IDS.items())
    raise InvalidArgument(f"{where}.roleAssignment.role: no role with id {role_id} ({known})")


def _scope_of(assignment: Any) -> int | None:
    ra = assignment.get("roleAssignment") or {}
    if ra.get("scopeCluster"):
        return None
    wid = ra.get("scopeWorkspaceId")
    return int(wid) if wid is not None else None


def _may_assign(conn: Conn, workspace_id: int | None) -> None:
    user = current_user()
    if workspace_id is None:
        authz.require(conn, user.id, user.admin, "cluster.assign", None)
        return
    if authz.workspace_of(conn, "workspace", workspace_id) is None:
        raise NotFound(f"workspace {workspace_id} not found")
    _access.workspace(conn, workspace_id, "workspace.assign")


def _each(body: Any) -> list[tuple[authz.Role, int | None, int | None, int | None]]:
    out: list[tuple[authz.Role, int | None, int | None, int | None]] = []
    for i, a in enumerate(body.get("userRoleAssignments") or []):
        where = f"userRoleAssignments[{i}]"
        out.append((_role_of(a, where), a.get("userId"), None, _scope_of(a)))
    for i, a in enumerate(body.get("groupRoleAssignments") or []):
        where = f"groupRoleAssignments[{i}]"
        out.append((_role_of(a, where), None, a.get("groupId"), _scope_of(a)))
    return out


@bp.post("/api/v1/roles/add-assignments")
@contract("AssignRoles")
def assign(body: d.v1AssignRolesRequest) -> Empty:
    with db() as conn:
        for role, user_id, group_id, workspace_id in _each(body):
            _may_assign(conn, workspace_id)
            svc.assign(conn, role, user_id=user_id, group_id=group_id, workspace_id=workspace_id)
    return {}


@bp.post("/api/v1/roles/remove-assignments")
@contract("RemoveAssignments")
def unassign(body: d.v1RemoveAssignmentsRequest) -> Empty:
    with db() as conn:
        for role, user_id, group_id, workspace_id in _each(body):
            _may_assign(conn, workspace_id)
            svc.unassign(conn, role, user_id=user_id, group_id=group_id, workspace_id=workspace_id)
    return {}


def _summaries(rows: list[svc.Assignment]) -> list[d.v1RoleAssignmentSummary]:
    by_role: dict[str, d.v1RoleAssignmentSummary] = {}
    for a in rows:
        role = authz.Role(a.role)
        s = by_role.setdefault(
            a.role,
            {"roleId": authz.WIRE_IDS[role], "scopeWorkspaceIds": [], "scopeCluster": False},
        )
        if a.workspace_id is None:
            s["scopeCluster"] = True
        else:
            s.setdefault("scopeWorkspaceIds", []).append(a.workspace_id)  # type: ignore[union-attr]
    return list(by_role.values())


@bp.get("/api/v1/permissions/summary")
@contract("GetPermissionsSummary")
def my_permissions() -> d.v1GetPermissionsSummaryResponse:
    """The caller's assigned roles (their own and their groups'), with ClusterAdmin for an
    admin. Open workspaces' implicit Editor role is not an assignment and is not listed."""
    user = current_user()
    with db() as conn:
        rows = svc.assignments(conn, with_groups_of=user.id)
    if user.admin:
        rows.append(svc.Assignment(authz.Role.CLUSTER_ADMIN.value, user.id, None, None))
    summaries = _summaries(rows)
    roles = [r for r in authz.Role if any(s["roleId"] == authz.WIRE_IDS[r] for s in summaries)]
    return {"roles": [_role(r) for r in roles], "assignments": summaries}


def _with_assignments(rows: list[svc.Assignment]) -> list[d.v1RoleWithAssignments]:
    out: list[d.v1RoleWithAssignments] = []
    for role in authz.Role:
        mine = [a for a in rows if a.role == role.value]
        if not mine:
            continue
        users_: list[d.v1UserRoleAssignment] = []
        groups: list[d.v1GroupRoleAssignment] = []
        for a in mine:
            ra: d.v1RoleAssignment = {
                "role": {"roleId": authz.WIRE_IDS[role], "name": role.value},
                "scopeCluster": a.workspace_id is None,
            }
            if a.workspace_id is not None:
                ra["scopeWorkspaceId"] = a.workspace_id
            if a.user_id is not None:
                users_.append({"userId": a.user_id, "roleAssignment": ra})
            else:
                groups.append({"groupId": a.group_id or 0, "roleAssignment": ra})
        out.append(
            {"role": _role(role), "userRoleAssignments": users_, "groupRoleAssignments": groups}
        )
    return out


@bp.get("/api/v1/roles/search/by-user/<int:user_id>")
@contract("GetRolesAssignedToUser")
def roles_of_user(user_id: int) -> d.v1GetRolesAssignedToUserResponse:
    with db() as conn:
        user = users.get_user(conn, user_id)
        rows = svc.assignments(conn, with_groups_of=user_id)
    if user.admin:
        rows.append(svc.Assignment(authz.Role.CLUSTER_ADMIN.value, user.id, None, None))
    return {"roles": _with_assignments(rows)}


@bp.get("/api/v1/roles/search/by-group/<int:group_id>")
@contract("GetRolesAssignedToGroup")
def roles_of_group(group_id: int) -> d.v1GetRolesAssignedToGroupResponse:
    with db() as conn:
        svc.get_group(conn, group_id)
        rows = svc.assignments(conn, group_id=group_id)
    summaries = _summaries(rows)
    roles = [r for r in authz.Role if any(s["roleId"] == authz.WIRE_IDS[r] for s in summaries)]
    return {"roles": [_role(r) for r in roles], "assignments": summaries}


@bp.post("/api/v1/roles/search/by-ids")
@contract("GetRolesByID")
def roles_by_id(body: d.v1GetRolesByIDRequest) -> d.v1GetRolesByIDResponse:
    """The roles asked for, with every assignment of each (``det rbac describe-role``)."""
    out: list[d.v1RoleWithAssignments] = []
    with db() as conn:
        for i, role_id in enumerate(body.get("roleIds") or []):
            if role_id not in _BY_WIRE_ID:
                raise NotFound(f"roleIds[{i}]: no role with id {role_id}")
            role = _BY_WIRE_ID[role_id]
            rows = svc.assignments(conn, role=role)
            if role is authz.Role.CLUSTER_ADMIN:
                rows += svc.admins(conn)
            shown = _with_assignments(rows)
            out.append(shown[0] if shown else {"role": _role(role)})
    return {"roles": out}


@bp.get("/api/v1/roles/workspace/<int:workspace_id>")
@contract("GetGroupsAndUsersAssignedToWorkspace")
def workspace_members(
    workspace_id: int, params: d.GetGroupsAndUsersAssignedToWorkspaceParams
) -> d.v1GetGroupsAndUsersAssignedToWorkspaceResponse:
    """The users and groups holding a role on the workspace (``det workspace list-members``);
    an open workspace has none (every user is implicitly its Editor). For its readers."""
    with db() as conn:
        if authz.workspace_of(conn, "workspace", workspace_id) is None:
            raise NotFound(f"workspace {workspace_id} not found")
        _access.in_workspace(conn, "workspace.view", workspace_id)
        rows = svc.assignments(conn, workspace_id=workspace_id)
        group_ids = sorted({a.group_id for a in rows if a.group_id is not None})
        user_ids = sorted({a.user_id for a in rows if a.user_id is not None})
        groups = [_group(conn, gid) for gid in group_ids]
        direct = [user_wire.user(users.get_user(conn, uid)) for uid in user_ids]
    return {
        "groups": groups,
        "usersAssignedDirectly": direct,
        "assignments": _with_assignments(rows),
    }


# --- user groups -------------------------------------------------------------------------------


def _group(conn: Conn, group_id: int) -> d.v1GroupDetails:
    g = svc.get_group(conn, group_id)
    return {
        "groupId": g.id,
        "name": g.name,
        "users": [user_wire.user(users.get_user(conn, uid)) for uid in svc.members(conn, g.id)],
    }


def _manage_groups(conn: Conn) -> None:
    user = current_user()
    authz.require(conn, user.id, user.admin, "cluster.assign", None)


@bp.post("/api/v1/groups")
@contract("CreateGroup")
def create_group(body: d.v1CreateGroupRequest) -> d.v1CreateGroupResponse:
    with db() as conn:
        _manage_groups(conn)
        g = svc.create_group(conn, body.get("name"), list(body.get("addUsers") or []))
        return {"group": _group(conn, g.id)}


@bp.post("/api/v1/groups/search")
@contract("GetGroups")
def search_groups(body: d.v1GetGroupsRequest) -> d.v1GetGroupsResponse:
    offset, limit = body.get("offset") or 0, body.get("limit") or 0
    with db() as conn:
        rows = svc.list_groups(conn, body.get("userId") or None, body.get("name") or None)
    shown = rows[offset : offset + limit if limit > 0 else None]
    return {
        "groups": [{"group": {"groupId": g.id, "name": g.name}, "numMembers": g.members}
                   for g in shown],
        "pagination": pagination(offset, limit, len(rows)),
    }  # fmt: skip


@bp.get("/api/v1/groups/<int:group_id>")
@contract("GetGroup")
def get_group(group_id: int) -> d.v1GetGroupResponse:
    with db() as conn:
        return {"group": _group(conn, group_id)}


@bp.put("/api/v1/groups/<int:group_id>")
@contract("UpdateGroup")
def update_group(group_id: int, body: d.v1UpdateGroupRequest) -> d.v1UpdateGroupResponse:
    if body.get("groupId") not in (None, 0, group_id):
        raise InvalidArgument(f"groupId: {body.get('groupId')} differs from the path's {group_id}")
    with db() as conn:
        _manage_groups(conn)
        svc.update_group(
            conn,
            group_id,
            body.get("name"),
            list(body.get("addUsers") or []),
            list(body.get("removeUsers") or []),
        )
        return {"group": _group(conn, group_id)}


@bp.delete("/api/v1/groups/<int:group_id>")
@contract("DeleteGroup")
def delete_group(group_id: int) -> Empty:
    with db() as conn:
        _manage_groups(conn)
        svc.delete_group(conn, group_id)
    return {}
