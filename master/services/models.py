"""The model registry: named models and their versions, each pointing at a checkpoint."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from det.master import limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.services import checkpoints
from det.master.wire import ts


def model_json(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "name": r["name"],
        "description": r["description"],
        "metadata": r["metadata"],
        "labels": r["labels"],
        "notes": r["notes"],
        "archived": r["archived"],
        "creationTime": ts(r["created_at"]),
        "lastUpdatedTime": ts(r["modified_at"]),
        "numVersions": int(r["num_versions"]),
        "userId": r["owner_id"],
        "username": r["username"],
        "workspaceId": r["workspace_id"],
    }


_SELECT = (
    "SELECT m.*, u.username, (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id) AS num_versions"
    " FROM models m JOIN users u ON u.id = m.owner_id"
)


def _workspace_id(conn: Conn, data: dict[str, Any]) -> int | None:
    """The workspace named by ``workspaceId`` or ``workspaceName`` (None when neither)."""
    from det.master.services import workspaces

    wid, wname = data.get("workspaceId"), data.get("workspaceName")
    if wid is not None and wid != 0:
        if type(wid) is not int:
            raise InvalidArgument("workspaceId: must be an integer")
        return int(workspaces.usable(conn, wid)["id"])
    if wname is not None and wname != "":
        limits.text("workspaceName", wname, limits.NAME)
        try:
            row = workspaces.by_name(conn, wname)
        except NotFound:
            raise InvalidArgument(f"workspaceName: no workspace named {wname!r}") from None
        return int(workspaces.usable(conn, row["id"])["id"])
    return None


def create(conn: Conn, owner_id: int, data: dict[str, Any]) -> dict[str, Any]:
    name = limits.text("name", data.get("name"), limits.NAME, required=True)
    workspace_id = _workspace_id(conn, data) or 1
    labels = limits.labels("labels", data.get("labels"))
    description = limits.text("description", data.get("description"), limits.DESCRIPTION)
    metadata = limits.json_object("metadata", data.get("metadata"))
    notes = limits.text("notes", data.get("notes"), limits.NOTES)
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


def get(conn: Conn, name: str) -> dict[str, Any]:
    row = conn.execute(_SELECT + " WHERE m.name = %s OR m.id::text = %s", (name, name)).fetchone()
    if row is None:
        raise NotFound(f"model '{name}' not found")
    return row


def list_(conn: Conn) -> list[dict[str, Any]]:
    return conn.execute(_SELECT + " ORDER BY m.id").fetchall()


def register_version(
    conn: Conn, owner_id: int, model_name: str, data: dict[str, Any]
) -> dict[str, Any]:
    model = get(conn, model_name)
    if model["archived"]:
        raise Conflict(f"model '{model['name']}' is archived: unarchive it to register versions")
    version_name = limits.text("name", data.get("name"), limits.NAME)
    comment = limits.text("comment", data.get("comment"), limits.DESCRIPTION)
    metadata = limits.json_object("metadata", data.get("metadata"))
    labels = limits.labels("labels", data.get("labels"))
    notes = limits.text("notes", data.get("notes"), limits.NOTES)
    uid = str(data.get("checkpointUuid") or "")
    checkpoints.get(conn, uid)  # 404 / 400 if it does not exist
    conn.execute("SELECT id FROM models WHERE id = %s FOR NO KEY UPDATE", (model["id"],))
    version_row = conn.execute(
        "SELECT coalesce(max(version), 0) + 1 AS v FROM model_versions WHERE model_id = %s",
        (model["id"],),
    ).fetchone()
    assert version_row is not None
    row = conn.execute(
        "INSERT INTO model_versions (model_id, version, checkpoint_uuid, name, comment, metadata, labels, notes, owner_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (
            model["id"],
            version_row["v"],
            uid,
            version_name,
            comment,
            Jsonb(metadata),
            Jsonb(labels),
            notes,
            owner_id,
        ),
    ).fetchone()
    assert row is not None
    conn.execute("UPDATE models SET modified_at = now() WHERE id = %s", (model["id"],))
    return version_json(conn, version_by_id(conn, row["id"]))


def version_by_id(conn: Conn, version_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT v.*, u.username FROM model_versions v JOIN users u ON u.id = v.owner_id WHERE v.id = %s",
        (version_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"model version {version_id} not found")
    return row


def versions(conn: Conn, model_name: str) -> list[dict[str, Any]]:
    model = get(conn, model_name)
    return conn.execute(
        "SELECT v.*, u.username FROM model_versions v JOIN users u ON u.id = v.owner_id WHERE v.model_id = %s ORDER BY v.version",
        (model["id"],),
    ).fetchall()


def version_json(conn: Conn, v: dict[str, Any]) -> dict[str, Any]:
    model = conn.execute(_SELECT + " WHERE m.id = %s", (v["model_id"],)).fetchone()
    assert model is not None
    return {
        "id": v["id"],
        "version": v["version"],
        "model": model_json(model),
        "checkpoint": checkpoints.checkpoint_json(checkpoints.get(conn, str(v["checkpoint_uuid"]))),
        "name": v["name"],
        "comment": v["comment"],
        "metadata": v["metadata"],
        "labels": v["labels"],
        "notes": v["notes"],
        "creationTime": ts(v["created_at"]),
        "lastUpdatedTime": ts(v["created_at"]),
        "userId": v["owner_id"],
        "username": v["username"],
    }


def patch(conn: Conn, model_name: str, data: dict[str, Any]) -> dict[str, Any]:
    """Determined's PatchModel: each field that is present (not null) replaces the model's."""
    model = get(conn, model_name)
    mid = model["id"]
    sets: list[tuple[str, Any]] = []
    if data.get("name") is not None:
        name = limits.text("name", data["name"], limits.NAME, required=True)
        if name != model["name"]:
            if conn.execute("SELECT 1 FROM models WHERE name = %s", (name,)).fetchone():
                raise Conflict(f"model '{name}' already exists")
            sets.append(("name", name))
    if data.get("description") is not None:
        sets.append(
            ("description", limits.text("description", data["description"], limits.DESCRIPTION))
        )
    if data.get("notes") is not None:
        sets.append(("notes", limits.text("notes", data["notes"], limits.NOTES)))
    if data.get("labels") is not None:
        sets.append(("labels", Jsonb(limits.labels("labels", data["labels"]))))
    if data.get("metadata") is not None:
        sets.append(("metadata", Jsonb(limits.json_object("metadata", data["metadata"]))))
    workspace_id = _workspace_id(conn, data)
    if workspace_id is not None:
        sets.append(("workspace_id", workspace_id))
    for column, value in sets:
        conn.execute(f"UPDATE models SET {column} = %s WHERE id = %s", (value, mid))
    conn.execute("UPDATE models SET modified_at = now() WHERE id = %s", (mid,))
    return get(conn, str(mid))


def set_archived(conn: Conn, model_name: str, archived: bool) -> None:
    model = get(conn, model_name)
    conn.execute(
        "UPDATE models SET archived = %s, modified_at = now() WHERE id = %s",
        (archived, model["id"]),
    )


def move(conn: Conn, model_name: str, data: dict[str, Any]) -> None:
    dest = data.get("destinationWorkspaceId")
    if type(dest) is not int:
        raise InvalidArgument("destinationWorkspaceId: required integer")
    patch(conn, model_name, {"workspaceId": dest})


def delete(conn: Conn, model_name: str) -> None:
    """The model and its versions (their checkpoints are no longer kept for the registry)."""
    model = get(conn, model_name)
    conn.execute("DELETE FROM models WHERE id = %s", (model["id"],))


def version(conn: Conn, model_name: str, number: int) -> dict[str, Any]:
    model = get(conn, model_name)
    row = conn.execute(
        "SELECT v.*, u.username FROM model_versions v JOIN users u ON u.id = v.owner_id"
        " WHERE v.model_id = %s AND v.version = %s",
        (model["id"], number),
    ).fetchone()
    if row is None:
        raise NotFound(f"model '{model['name']}' has no version {number}")
    return row


def patch_version(conn: Conn, model_name: str, number: int, data: dict[str, Any]) -> dict[str, Any]:
    """Determined's PatchModelVersion: name, comment, notes, labels, metadata."""
    v = version(conn, model_name, number)
    if data.get("checkpoint") is not None:
        raise InvalidArgument("checkpoint: a version's checkpoint cannot be changed")
    fields: list[tuple[str, Any]] = []
    for key, limit in (
        ("name", limits.NAME),
        ("comment", limits.DESCRIPTION),
        ("notes", limits.NOTES),
    ):
        if data.get(key) is not None:
            fields.append((key, limits.text(key, data[key], limit)))
    if data.get("labels") is not None:
        fields.append(("labels", Jsonb(limits.labels("labels", data["labels"]))))
    if data.get("metadata") is not None:
        fields.append(("metadata", Jsonb(limits.json_object("metadata", data["metadata"]))))
    for column, value in fields:
        conn.execute(f"UPDATE model_versions SET {column} = %s WHERE id = %s", (value, v["id"]))
    return version_by_id(conn, v["id"])


def delete_version(conn: Conn, model_name: str, number: int) -> None:
    v = version(conn, model_name, number)
    conn.execute("DELETE FROM model_versions WHERE id = %s", (v["id"],))
    conn.execute("UPDATE models SET modified_at = now() WHERE id = %s", (v["model_id"],))
