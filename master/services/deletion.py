"""Deleting what holds other things: a workspace its projects and templates, a project its
experiments. Here, above ``workspaces``, ``projects`` and ``experiments`` (each a layer on the one
before it), so that none of them imports the one above it."""

from __future__ import annotations

from dataclasses import dataclass

from det.master import db, states
from det.master.db import Conn
from det.master.errors import Conflict
from det.master.services import experiments, workspaces


def delete_workspace(conn: Conn, workspace_id: int) -> None:
    """A workspace, its projects (see :func:`delete_project`) and its templates; Conflict while
    it holds a model."""
    row = workspaces.lock(conn, "workspaces", workspace_id)
    workspaces.refuse_default(row, "workspace", "deleted")
    model = db.scalar(
        conn,
        str,
        "SELECT name FROM models WHERE workspace_id = %s ORDER BY id LIMIT 1",
        (workspace_id,),
    )
    if model is not None:
        raise Conflict(
            f"workspace '{row.name}' holds model '{model}': move or delete its models first"
        )
    for project_id in db.column(
        conn, int, "SELECT id FROM projects WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    ):
        delete_project(conn, project_id, removing_workspace=True)
    conn.execute("DELETE FROM templates WHERE workspace_id = %s", (workspace_id,))
    conn.execute("DELETE FROM workspaces WHERE id = %s", (workspace_id,))


@dataclass(frozen=True, slots=True)
class _Held:
    """An experiment of a project being deleted."""

    id: int
    state: str


def delete_project(conn: Conn, project_id: int, *, removing_workspace: bool = False) -> None:
    """A project and its experiments (all of them ended); Conflict while one runs."""
    row = workspaces.lock(conn, "projects", project_id)
    if not removing_workspace:
        workspaces.refuse_default(row, "project", "deleted")
    exps = db.fetch_rows(
        conn,
        _Held,
        "SELECT id, state FROM experiments WHERE project_id = %s AND NOT deleted ORDER BY id",
        (project_id,),
    )
    running = [e.id for e in exps if e.state not in states.TERMINAL]
    if running:
        raise Conflict(
            f"project '{row.name}' has experiments that have not finished"
            f" ({', '.join(map(str, running[:5]))}): kill them before deleting it"
        )
    for e in exps:
        experiments.delete(conn, e.id)
    conn.execute("DELETE FROM projects WHERE id = %s", (project_id,))
