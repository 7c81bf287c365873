"""Agent users (``det user link-with-agent-user``): the uid and gid a user's task containers
run as, so that what they write on shared storage is owned by that user's own identity.

Only admins link (PatchUser's ``agentUserGroup``); the link is read once per container spec
(:func:`container_user`) and sent to the agent as numbers (``"uid:gid"``): a name would be
resolved in the image's ``/etc/passwd``, which the image's author controls. uid 0 and gid 0 are
refused: root is what an unlinked user's task already gets from most images, and a link exists
to give a task a non-root identity (det also starts such containers with no-new-privileges, so
a setuid program in the image cannot take it back to root; docs/security.md).
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from det.common.jsontypes import JSONObject
from det.master import db
from det.master.db import Conn
from det.master.errors import InvalidArgument
from det.master.rows.users import AgentUserLink

#: The largest uid/gid accepted (Linux's are 32-bit; 2**32-1 is "no id").
MAX_ID = 2**31 - 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
FIELDS = ("agentUid", "agentGid", "agentUser", "agentGroup")


def _id(field: str, value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # the generated client sends int64 as a JSON string
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"agentUserGroup.{field}: required integer (got {value!r})")
    if value == 0:
        raise InvalidArgument(
            f"agentUserGroup.{field}: 0 (root) is refused: a link gives tasks a non-root identity"
            " (an unlinked user's tasks run as the image's user)"
        )
    if not 0 < value <= MAX_ID:
        raise InvalidArgument(f"agentUserGroup.{field}: must be between 1 and {MAX_ID}")
    return value


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidArgument(
            f"agentUserGroup.{field}: required name of at most 32 letters, digits, '_', '.'"
            f" or '-', not starting with a digit, '.' or '-' (got {value!r})"
        )
    return value


def parse(value: Any) -> AgentUserLink | None:
    """The stored link for PatchUser's ``agentUserGroup``: all four fields, or none of them (an
    empty object unlinks). Raises InvalidArgument naming the field and the rule."""
    if not isinstance(value, dict):
        raise InvalidArgument("agentUserGroup: must be an object")
    given = {k: v for k, v in value.items() if v is not None}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise InvalidArgument(f"agentUserGroup.{unknown[0]}: unknown field")
    if not given:
        return None
    return {
        "agentUid": _id("agentUid", given.get("agentUid")),
        "agentGid": _id("agentGid", given.get("agentGid")),
        "agentUser": _name("agentUser", given.get("agentUser")),
        "agentGroup": _name("agentGroup", given.get("agentGroup")),
    }


def link(conn: Conn, user_id: int, value: AgentUserLink | None) -> None:
    conn.execute(
        "UPDATE users SET agent_user_group = %s, modified_at = now() WHERE id = %s",
        (Jsonb(value) if value is not None else None, user_id),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Link:
    agent_user_group: AgentUserLink | None  # users.agent_user_group: NULL for an unlinked user


def container_user(conn: Conn, allocation_id: str) -> AgentUserLink | None:
    """The link of the user whose job the allocation is (None: unlinked)."""
    row = db.fetch_row(
        conn,
        _Link,
        "SELECT u.agent_user_group FROM allocations a JOIN jobs j ON j.id = a.job_id"
        " JOIN users u ON u.id = j.owner_id WHERE a.id = %s",
        (allocation_id,),
    )
    return row.agent_user_group if row is not None else None


def _can(st: os.stat_result, uid: int, gid: int, bits: int) -> bool:
    """Whether uid/gid (no other groups, no ACLs) have ``bits`` (``os.W_OK | os.X_OK``…)."""
    mode = stat.S_IMODE(st.st_mode)
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (mode >> shift) & bits == bits


def storage_warning(storage: JSONObject, cluster_id: str, link: AgentUserLink) -> str | None:
    """One line when the cluster's shared_fs checkpoint storage, as this process sees it, is a
    directory the agent user could not write: the storage root, and the TensorBoard levels
    ``<cluster id>/tensorboard/experiment`` other users' tasks made (what each of the user's
    trials checks at its start, det.storage.shared). None when it could, or when the storage
    is not shared_fs or not visible here (the trial's own check still holds)."""
    if storage.get("type") != "shared_fs":
        return None
    host = storage.get("host_path")
    if not isinstance(host, str) or not os.path.isabs(host) or not os.path.isdir(host):
        return None
    sub = storage.get("storage_path") or storage.get("checkpoint_path")
    base = Path(os.path.normpath(os.path.join(host, str(sub)))) if sub else Path(host)
    chain = [*reversed(base.parents), base]
    chain = [p for p in chain if p == Path(host) or Path(host) in p.parents]
    chain += [base / cluster_id, base / cluster_id / "tensorboard"]
    chain.append(chain[-1] / "experiment")
    uid, gid = int(link["agentUid"]), int(link["agentGid"])
    for i, level in enumerate(chain):
        try:
            st = level.stat()
        except OSError:
            break
        deeper = chain[i + 1] if i + 1 < len(chain) else None
        # The root and the deepest level there is must take new entries; the others, entry.
        writes = level == base or deeper is None or not deeper.exists()
        if not _can(st, uid, gid, os.W_OK | os.X_OK if writes else os.X_OK):
            mode = stat.S_IMODE(st.st_mode)
            return (
                f"agent user {uid}:{gid} cannot {'write' if writes else 'enter'} {level}"
                f" (owned by {st.st_uid}:{st.st_gid}, mode {mode:04o}) of the checkpoint"
                " storage: the user's trials would fail at start; make the shared storage"
                " writable by every task user (chmod 1777, as /tmp)"
            )
    return None
