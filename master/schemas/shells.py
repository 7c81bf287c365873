"""Shells on the wire: ``v1Shell`` from a row of ``services.ntsc.get``/``list_tasks``; the key
pair's private half only for the shell's owner and admins."""

from __future__ import annotations

from det.master.rows.tasks import Task
from det.master.schemas import d
from det.master.schemas.commands import task_fields


def shell(r: Task, *, with_key: bool) -> d.v1Shell:
    """``with_key``: the caller owns the shell or is an admin (it may ssh into it)."""
    data = r["data"]
    out: d.v1Shell = {
        **task_fields(r),  # type: ignore[typeddict-item]
        "publicKey": data.get("publicKey"),
        "privateKey": data.get("privateKey") if with_key else None,
        "addresses": [],
        # Who the session runs as in the container (the task's user: root in det's images).
        "agentUserGroup": {"user": "root", "uid": 0, "group": "root", "gid": 0},
    }
    return out
