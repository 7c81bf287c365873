"""Checkpoints: what tasks report (files and sizes), and reads for the API and CLI."""

from __future__ import annotations

import dataclasses
import logging
import os
import tarfile
import tempfile
import uuid as uuidlib
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det import storage as det_storage
from det.common.jsontypes import JSONObject, JSONValue
from det.master import db, egress, limits, states
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound, Unavailable
from det.master.rows.checkpoints import Checkpoint
from det.master.schemas.checkpoints import ReportedCheckpoint
from det.storage.s3 import S3StorageManager

if TYPE_CHECKING:
    from det.master.config import MasterConfig

logger = logging.getLogger(__name__)


def report(conn: Conn, ckpt: ReportedCheckpoint, *, task_id: str | None) -> None:
    try:
        uid = uuidlib.UUID(str(ckpt.get("uuid")))
    except ValueError:
        raise InvalidArgument("uuid: not a UUID") from None
    metadata = limits.json_object("metadata", ckpt.get("metadata"))
    if "steps_completed" not in metadata:
        raise InvalidArgument("metadata.steps_completed: required")
    resources = ckpt.get("resources") or {}
    if not isinstance(resources, dict):
        raise InvalidArgument("resources: must map file paths to sizes")
    try:
        sizes = {str(k): int(v) for k, v in resources.items()}
    except (TypeError, ValueError):
        raise InvalidArgument("resources: sizes must be integers") from None
    task_id = task_id or ckpt.get("taskId")
    trial = db.scalar(conn, int, "SELECT id FROM trials WHERE task_id = %s", (task_id,))
    steps_completed = metadata["steps_completed"]
    if not isinstance(steps_completed, int | float | str):
        raise InvalidArgument("metadata.steps_completed: must be a number")
    steps = int(steps_completed)
    conn.execute(
        "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, resources, metadata, steps_completed, size)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (uuid) DO UPDATE SET resources = EXCLUDED.resources,"
        " metadata = EXCLUDED.metadata, size = EXCLUDED.size",
        (
            uid,
            trial,
            task_id,
            ckpt.get("allocationId"),
            Jsonb(sizes),
            Jsonb(metadata),
            steps,
            sum(sizes.values()),
        ),
    )
    if trial is not None:
        # The newest checkpoint by training progress is where a restart resumes.
        conn.execute(
            "UPDATE trials SET latest_checkpoint = %s WHERE id = %s AND (latest_checkpoint IS NULL OR"
            " (SELECT steps_completed FROM checkpoints WHERE uuid = trials.latest_checkpoint) <= %s)",
            (uid, trial, steps),
        )
        states.record_event(conn, "trial", trial, "checkpoint", f"checkpoint {uid} at step {steps}")


def trial_of_task(conn: Conn, task_id: str) -> int | None:
    """The id of the trial whose task is ``task_id`` (None: not a trial's task)."""
    return db.scalar(conn, int, "SELECT id FROM trials WHERE task_id = %s", (task_id,))


@dataclasses.dataclass(frozen=True, slots=True)
class _Resources:
    resources: JSONObject | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Storage:
    storage: JSONValue


def files_deleted(conn: Conn, uid: str, left: dict[str, int]) -> None:
    """The GC task or the harness deleted files of checkpoint ``uid``; ``left`` remain. The
    same files as recorded (``det checkpoint rm`` with no glob, or one that named nothing) is
    no deletion: the checkpoint keeps its state."""
    row = db.fetch_row(
        conn, _Resources, "SELECT resources FROM checkpoints WHERE uuid = %s", (uid,)
    )
    if row is not None and left and dict(row.resources or {}) == dict(left):
        return
    states.checkpoint_files_left(conn, uid, left)


_SELECT = (
    "SELECT c.uuid, c.trial_id, c.task_id, c.allocation_id, c.state, c.report_time, c.resources,"
    " c.metadata, c.steps_completed, c.size, c.storage,"
    " t.experiment_id, t.hparams, e.config, t.searcher_metric,"
    " (SELECT m.metrics FROM metrics m WHERE m.trial_id = c.trial_id AND m.metric_group = 'validation'"
    "  AND m.total_batches = c.steps_completed ORDER BY m.id DESC LIMIT 1) AS validation,"
    " (SELECT m.metrics FROM metrics m WHERE m.trial_id = c.trial_id AND m.metric_group = 'training'"
    "  AND m.total_batches = c.steps_completed ORDER BY m.id DESC LIMIT 1) AS training"
    " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id LEFT JOIN experiments e ON e.id = t.experiment_id"
)


def get(conn: Conn, uid: str) -> Checkpoint:
    try:
        uuidlib.UUID(uid)
    except ValueError:
        raise InvalidArgument(f"checkpoint uuid {uid!r} is not a UUID") from None
    cur = conn.cursor(row_factory=class_row(Checkpoint))
    row = cur.execute(_SELECT + " WHERE c.uuid = %s", (uid,)).fetchone()
    if row is None:
        raise NotFound(f"checkpoint {uid} not found")
    return row


def set_metadata(conn: Conn, uid: str, metadata: JSONObject) -> None:
    """The checkpoint's metadata is now ``metadata``, with its own ``steps_completed`` kept
    (the step it was saved at, which resume and GC read from the row's column)."""
    conn.execute(
        "UPDATE checkpoints SET metadata = %s || jsonb_build_object('steps_completed',"
        " steps_completed) WHERE uuid = %s",
        (Jsonb(metadata), uid),
    )


def list_for(
    conn: Conn, *, experiment_id: int | None = None, trial_id: int | None = None
) -> list[Checkpoint]:
    cur = conn.cursor(row_factory=class_row(Checkpoint))
    if trial_id is not None:
        return cur.execute(
            _SELECT + " WHERE c.trial_id = %s ORDER BY c.steps_completed, c.report_time",
            (trial_id,),
        ).fetchall()
    return cur.execute(
        _SELECT + " WHERE t.experiment_id = %s ORDER BY c.trial_id, c.steps_completed",
        (experiment_id,),
    ).fetchall()


def _endpoint_policy(
    storage: JSONObject, cluster_storage: JSONObject, policy: egress.Policy
) -> egress.Policy:
    """``policy`` for an S3 ``storage``'s endpoint: the cluster's own endpoint (same scheme,
    host and port: an admin chose it, the user only the bucket) is allowed by its name."""
    url = storage.get("endpoint_url")
    theirs = cluster_storage.get("endpoint_url") if cluster_storage.get("type") == "s3" else None
    if not isinstance(url, str) or not isinstance(theirs, str) or not theirs:
        return policy
    a, b = urlsplit(url), urlsplit(theirs)
    if (a.scheme, a.hostname, a.port) != (b.scheme, b.hostname, b.port):
        return policy
    return policy.allowing(a.hostname or "")


def storage_endpoint_refusal(
    storage: JSONValue, cluster_storage: JSONObject, policy: egress.Policy
) -> str | None:
    """Why a ``checkpoint_storage`` (resolved) points the master where ``policy`` refuses
    (None: it may be read): an S3 ``endpoint_url`` that is no http(s) URL, or whose host is
    refused (the cluster's own endpoint is always allowed)."""
    if not isinstance(storage, dict) or storage.get("type") != "s3":
        return None
    url = storage.get("endpoint_url")
    if url is None or url == "":
        return None
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "checkpoint_storage.endpoint_url: must be an http:// or https:// URL with a host"
    why = egress.check_host(parts.hostname, _endpoint_policy(storage, cluster_storage, policy))
    if why is None:
        return None
    return (
        f"checkpoint_storage.endpoint_url: {why}; only an admin's experiment, the cluster's"
        " own storage or a host in egress.allowed_hosts may use it"
    )


def check_storage_endpoint(master: MasterConfig, config: JSONObject, *, admin: bool) -> None:
    """InvalidArgument when a non-admin's experiment ``config`` (resolved) names an S3
    ``endpoint_url`` the egress policy refuses (the early, friendly refusal; the master's own
    downloads are judged again on the address connected to, :func:`archive`)."""
    policy = egress.Policy.of(master.egress, restricted=not admin)
    why = storage_endpoint_refusal(
        config.get("checkpoint_storage"), master.checkpoint_storage, policy
    )
    if why is not None:
        raise InvalidArgument(why)


def download_policy(conn: Conn, uid: str, config: egress.EgressConfig) -> egress.Policy:
    """The egress policy of the master reading checkpoint ``uid``'s storage: restricted unless
    an admin made its experiment (who chose the endpoint, not who asks for the files)."""
    admin = db.scalar(
        conn,
        bool,
        "SELECT coalesce(u.admin, false) AS admin FROM checkpoints c"
        " JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id"
        " LEFT JOIN users u ON u.id = e.owner_id WHERE c.uuid = %s",
        (uid,),
    )
    return egress.Policy.of(config, restricted=not admin)


def storage_config(conn: Conn, uid: str) -> JSONObject | None:
    """The checkpoint storage its experiment wrote to (None: the master's default)."""
    row = db.fetch_row(
        conn,
        _Storage,
        "SELECT e.config->'checkpoint_storage' AS storage FROM checkpoints c"
        " JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id"
        " WHERE c.uuid = %s",
        (uid,),
    )
    storage = row.storage if row is not None else None
    return storage if isinstance(storage, dict) else None


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Only files and directories go into a download (the storage's copy makes no others)."""
    return info if info.isfile() or info.isdir() else None


def archive(
    storage: JSONObject, uid: str, policy: egress.Policy, cluster_storage: JSONObject
) -> IO[bytes]:
    """Checkpoint ``uid``'s files as a gzip tar in a temporary file (rewound; deleted when
    closed), read from ``storage`` by the master itself (no DB connection held: this is network
    and disk work). NotFound when the storage has no such checkpoint. Only the checkpoint's
    content is read (:mod:`det.storage.tree`): a link out of its directory is skipped, and a
    checkpoint directory that is itself a link is refused (Conflict). An S3 storage is read
    under the egress ``policy`` (:func:`download_policy`; the cluster's own endpoint allowed),
    checked first on its endpoint's name and then on every address connected to
    (InvalidArgument when refused)."""
    why = storage_endpoint_refusal(storage, cluster_storage, policy)
    if why is not None:
        raise InvalidArgument(f"checkpoint {uid}: {why}")
    out = tempfile.TemporaryFile()  # noqa: SIM115 (handed to the response, which closes it)
    with tempfile.TemporaryDirectory(prefix="det-download-") as tmp:
        try:
            manager = det_storage.from_config(storage)
            if isinstance(manager, S3StorageManager):
                if not storage.get("endpoint_url"):
                    # No endpoint in the config: boto3's own choice from the master's
                    # environment (AWS_ENDPOINT_URL, the region's), which an admin set.
                    chosen = urlsplit(str(manager.client.meta.endpoint_url)).hostname
                    policy = policy.allowing(chosen or "")
                policy = _endpoint_policy(storage, cluster_storage, policy)
                egress.guard_boto3_client(manager.client, policy)
            manager.download(uid, tmp)
        except det_storage.CheckpointNotFoundError:
            out.close()
            raise NotFound(f"checkpoint {uid}: no files in its storage") from None
        except det_storage.UnsafeCheckpointError as e:
            out.close()
            logger.warning("checkpoint %s: download refused: %s", uid, e)
            raise Conflict(f"checkpoint {uid}: {e}") from None
        except Exception as e:
            out.close()
            refused = egress.refusal_in(e)
            if refused is not None:
                logger.warning("checkpoint %s: download refused: %s", uid, refused)
                raise InvalidArgument(
                    f"checkpoint {uid}: checkpoint_storage.endpoint_url: {refused}"
                ) from None
            logger.warning("checkpoint %s: download from storage failed: %s", uid, e)
            raise Unavailable(f"checkpoint {uid}: its storage could not be read: {e}") from None
        with tarfile.open(fileobj=out, mode="w:gz") as tf:
            for entry in sorted(os.listdir(tmp)):
                tf.add(os.path.join(tmp, entry), arcname=entry, filter=_plain)
    out.seek(0)
    return out
