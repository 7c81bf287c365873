"""The model registry: named models and their versions, each pointing at a checkpoint."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from det.master import limits
from det.master.db import Conn
from det.master.errors import Conflict, NotFound
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
        "workspaceId": 1,
    }


_SELECT = (
    "SELECT m.*, u.username, (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id) AS num_versions"
    " FROM models m JOIN users u ON u.id = m.owner_id"
)


def create(conn: Conn, owner_id: int, data: dict[str, Any]) -> dict[str, Any]:
    name = limits.text("name", data.get("name"), limits.NAME, required=True)
    labels = limits.labels("labels", data.get("labels"))
    description = limits.text("description", data.get("description"), limits.DESCRIPTION)
    metadata = limits.json_object("metadata", data.get("metadata"))
    notes = limits.text("notes", data.get("notes"), limits.NOTES)
    row = conn.execute(
        "INSERT INTO models (name, description, metadata, labels, notes, owner_id) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (name) DO NOTHING RETURNING id",
        (
            name,
            description,
            Jsonb(metadata),
            Jsonb(labels),
            notes,
            owner_id,
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
