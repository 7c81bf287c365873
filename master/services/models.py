"""The model registry: named models and their versions, each pointing at a checkpoint."""

from __future__ import annotations

from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.master import db, limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.rows.models import Model, Version
from det.master.schemas import d
from det.master.services import checkpoints as ckpt_svc
from det.master.services import listing, workspaces
from det.master.wire import Paging

_SELECT = (
    "SELECT m.id, m.name, m.description, m.metadata, m.labels, m.notes, m.archived, m.owner_id,"
    " m.created_at, m.modified_at, m.workspace_id, u.username,"
    " (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id) AS num_versions"
    " FROM models m JOIN users u ON u.id = m.owner_id"
)


def create(conn: Conn, owner_id: int, data: d.v1PostModelRequest) -> Model:
    """Determined's PostModel (field types and sizes are checked with the request)."""
    name = limits.text("name", data.get("name"), limits.NAME, required=True)
    workspace_id = (
        workspaces.named(conn, data.get("workspaceId"), data.get("workspaceName"))
        or workspaces.DEFAULT_ID
    )
    labels = data.get("labels") or []
    description = data.get("description") or ""
    metadata = data.get("metadata") or {}
    notes = data.get("notes") or ""
    row = conn.execute(
        "INSERT INTO models (name, description, metadata, labels, notes, owner_id, workspace_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING RETURNING id",
        (
            name,
            description,
            Jsonb(metadata),
            Jsonb(labels),
            notes,
            owner_id,
            workspace_id,
        ),
    ).fetchone()
    if row is None:
        raise Conflict(f"model '{name}' already exists")
    return get(conn, name)


def get(conn: Conn, name: str) -> Model:
    cur = conn.cursor(row_factory=class_row(Model))
    row = cur.execute(_SELECT + " WHERE m.name = %s OR m.id::text = %s", (name, name)).fetchone()
    if row is None:
        raise NotFound(f"model '{name}' not found")
    return row


_SORTS = {
    "SORT_BY_NAME": "m.name",
    "SORT_BY_DESCRIPTION": "m.description",
    "SORT_BY_CREATION_TIME": "m.created_at",
    "SORT_BY_LAST_UPDATED_TIME": "m.modified_at",
    "SORT_BY_NUM_VERSIONS": "num_versions",
    "SORT_BY_WORKSPACE": "w.name",
}


def labels(conn: Conn, workspace_id: int | None) -> list[str]:
    """Determined's GetModelLabels: every label on a model (of one workspace, if given), the
    most used first, then by name."""
    return db.column(
        conn,
        str,
        "SELECT label, count(*) AS uses FROM models m, jsonb_array_elements_text(m.labels) label"
        " WHERE %(ws)s::bigint IS NULL OR m.workspace_id = %(ws)s"
        " GROUP BY label ORDER BY uses DESC, label",
        {"ws": workspace_id},
    )


def list_(conn: Conn, params: d.GetModelsParams) -> tuple[list[Model], int]:
    """Determined's GetModels: ``name`` and ``description`` match any part (case-insensitive),
    a model has every one of ``labels``, the lists of users and workspaces are alternatives;
    sorted by ``sortBy`` (id by default) in ``orderBy``, then paged."""
    where: list[str] = ["true"]
    args: list[Any] = []
    if params.get("id"):
        where.append("m.id = %s")
        args.append(params.get("id"))
    for column, text in (
        ("m.name", params.get("name")),
        ("m.description", params.get("description")),
    ):
        if text:
            condition, arg = listing.contains(column, text)
            where.append(condition)
            args.append(arg)
    if params.get("labels"):
        where.append("m.labels @> %s")
        args.append(Jsonb(params.get("labels")))
    if params.get("archived") is not None:
        where.append("m.archived = %s")
        args.append(params.get("archived"))
    if params.get("users"):
        where.append("u.username = ANY(%s)")
        args.append(params.get("users"))
    if params.get("userIds"):
        where.append("m.owner_id = ANY(%s)")
        args.append(params.get("userIds"))
    if params.get("workspaceIds"):
        where.append("m.workspace_id = ANY(%s)")
        args.append(params.get("workspaceIds"))
    if params.get("workspaceNames"):
        where.append("w.name = ANY(%s)")
        args.append(params.get("workspaceNames"))
    order = _SORTS.get(params.get("sortBy") or "", "m.id")
    direction = "DESC" if params.get("orderBy") == "ORDER_BY_DESC" else "ASC"
    rows = (
        conn.cursor(row_factory=class_row(Model))
        .execute(
            _SELECT
            + " LEFT JOIN workspaces w ON w.id = m.workspace_id WHERE "
            + " AND ".join(where)
            + f" ORDER BY {order} {direction}, m.id",
            args,
        )
        .fetchall()
    )
    return listing.page(rows, *Paging.of(params))


def register_version(
    conn: Conn, owner_id: int, model_name: str, data: d.v1PostModelVersionRequest
) -> Version:
    """Determined's PostModelVersion; the new version's row (see :func:`version_by_id`)."""
    model = get(conn, model_name)
    if model["archived"]:
        raise Conflict(f"model '{model['name']}' is archived: unarchive it to register versions")
    uid = data.get("checkpointUuid") or ""
    ckpt_svc.get(conn, uid)  # 404 / 400 if it does not exist
    conn.execute("SELECT id FROM models WHERE id = %s FOR NO KEY UPDATE", (model["id"],))
    version = db.one_int(
        conn,
        "SELECT coalesce(max(version), 0) + 1 AS v FROM model_versions WHERE model_id = %s",
        (model["id"],),
    )
    version_id = db.one_int(
        conn,
        "INSERT INTO model_versions (model_id, version, checkpoint_uuid, name, comment, metadata,"
        " labels, notes, owner_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (
            model["id"],
            version,
            uid,
            data.get("name") or "",
            data.get("comment") or "",
            Jsonb(data.get("metadata") or {}),
            Jsonb(data.get("labels") or []),
            data.get("notes") or "",
            owner_id,
        ),
    )
    conn.execute("UPDATE models SET modified_at = now() WHERE id = %s", (model["id"],))
    return version_by_id(conn, version_id)


_VERSION = (
    "SELECT v.id, v.model_id, v.version, v.checkpoint_uuid, v.name, v.comment, v.metadata,"
    " v.labels, v.notes, v.owner_id, v.created_at, u.username"
    " FROM model_versions v JOIN users u ON u.id = v.owner_id"
)


def version_by_id(conn: Conn, version_id: int) -> Version:
    cur = conn.cursor(row_factory=class_row(Version))
    row = cur.execute(_VERSION + " WHERE v.id = %s", (version_id,)).fetchone()
    if row is None:
        raise NotFound(f"model version {version_id} not found")
    return row


_VERSION_SORTS = {"SORT_BY_VERSION": "v.version", "SORT_BY_CREATION_TIME": "v.created_at"}


def versions(
    conn: Conn, model_id: int, params: d.GetModelVersionsParams
) -> tuple[list[Version], int]:
    """Determined's GetModelVersions: a model's versions sorted by ``sortBy`` (the version
    number by default) in ``orderBy``, then paged."""
    order = _VERSION_SORTS.get(params.get("sortBy") or "", "v.version")
    direction = "DESC" if params.get("orderBy") == "ORDER_BY_DESC" else "ASC"
    cur = conn.cursor(row_factory=class_row(Version))
    rows = cur.execute(
        _VERSION + f" WHERE v.model_id = %s ORDER BY {order} {direction}, v.version",
        (model_id,),
    ).fetchall()
    return listing.page(rows, *Paging.of(params))


def by_id(conn: Conn, model_id: int) -> Model:
    cur = conn.cursor(row_factory=class_row(Model))
    row = cur.execute(_SELECT + " WHERE m.id = %s", (model_id,)).fetchone()
    if row is None:
        raise NotFound(f"model {model_id} not found")
    return row


def patch(conn: Conn, model_name: str, data: d.v1PatchModel) -> Model:
    """Determined's PatchModel: each field that is present (not null) replaces the model's."""
    model = get(conn, model_name)
    mid = model["id"]
    sets: list[tuple[str, Any]] = []
    if data.get("name") is not None:
        name = limits.text("name", data.get("name"), limits.NAME, required=True)
        if name != model["name"]:
            if conn.execute("SELECT 1 FROM models WHERE name = %s", (name,)).fetchone():
                raise Conflict(f"model '{name}' already exists")
            sets.append(("name", name))
    for column, value in (
        ("description", data.get("description")),
        ("notes", data.get("notes")),
        ("labels", _jsonb(data.get("labels"))),
        ("metadata", _jsonb(data.get("metadata"))),
        (
            "workspace_id",
            workspaces.named(conn, data.get("workspaceId"), data.get("workspaceName")),
        ),
    ):
        if value is not None:
            sets.append((column, value))
    for column, value in sets:
        conn.execute(f"UPDATE models SET {column} = %s WHERE id = %s", (value, mid))
    conn.execute("UPDATE models SET modified_at = now() WHERE id = %s", (mid,))
    return by_id(conn, mid)


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def set_archived(conn: Conn, model_name: str, archived: bool) -> None:
    model = get(conn, model_name)
    conn.execute(
        "UPDATE models SET archived = %s, modified_at = now() WHERE id = %s",
        (archived, model["id"]),
    )


def move(conn: Conn, model_name: str, data: d.v1MoveModelRequest) -> None:
    dest = data.get("destinationWorkspaceId")
    if dest is None:
        raise InvalidArgument("destinationWorkspaceId: required")
    patch(conn, model_name, {"workspaceId": dest})


def delete(conn: Conn, model_name: str) -> None:
    """The model and its versions (their checkpoints are no longer kept for the registry)."""
    model = get(conn, model_name)
    conn.execute("DELETE FROM models WHERE id = %s", (model["id"],))


def version(conn: Conn, model_name: str, number: int) -> Version:
    model = get(conn, model_name)
    row = (
        conn.cursor(row_factory=class_row(Version))
        .execute(_VERSION + " WHERE v.model_id = %s AND v.version = %s", (model["id"], number))
        .fetchone()
    )
    if row is None:
        raise NotFound(f"model '{model['name']}' has no version {number}")
    return row


def patch_version(conn: Conn, model_name: str, number: int, data: d.v1PatchModelVersion) -> Version:
    """Determined's PatchModelVersion: name, comment, notes, labels, metadata."""
    v = version(conn, model_name, number)
    if data.get("checkpoint") is not None:
        raise InvalidArgument("checkpoint: a version's checkpoint cannot be changed")
    for column, value in (
        ("name", data.get("name")),
        ("comment", data.get("comment")),
        ("notes", data.get("notes")),
        ("labels", _jsonb(data.get("labels"))),
        ("metadata", _jsonb(data.get("metadata"))),
    ):
        if value is not None:
            conn.execute(f"UPDATE model_versions SET {column} = %s WHERE id = %s", (value, v["id"]))
    return version_by_id(conn, v["id"])


def delete_version(conn: Conn, model_name: str, number: int) -> None:
    v = version(conn, model_name, number)
    conn.execute("DELETE FROM model_versions WHERE id = %s", (v["id"],))
    conn.execute("UPDATE models SET modified_at = now() WHERE id = %s", (v["model_id"],))
