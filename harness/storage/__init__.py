"""Checkpoint storage: ``shared_fs``, ``directory``, ``s3`` and ``gcs`` behind one interface.

``from_config`` takes the experiment config's ``checkpoint_storage`` dict (or a shortcut string:
a path, ``s3://bucket/prefix`` or ``gs://bucket/prefix``). ``download_checkpoint`` serves
``det checkpoint download`` in the CLI.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from typing import TYPE_CHECKING

from .base import (
    CheckpointNotFoundError,
    Selector,
    StorageManager,
    StorageNotWritableError,
    list_directory,
)
from .shared import (
    SHARED_FS_CONTAINER_PATH,
    DirectoryStorageManager,
    SharedFSStorageManager,
    shared_fs_base_path,
)
from .tree import Tree, UnsafeCheckpointError

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from det.common.jsontypes import JSONObject

logger = logging.getLogger(__name__)

# Keys of the checkpoint_storage block that are about retention (read by the master), not access.
_POLICY_KEYS = {"save_experiment_best", "save_trial_best", "save_trial_latest", "propagation"}
# shared_fs keys that say how the host path is mounted, not where checkpoints are.
_MOUNT_KEYS = {"container_path"}


def shortcut_to_config(shortcut: str) -> JSONObject:
    """``/path`` → directory, ``s3://b/p`` → s3, ``gs://b/p`` → gcs (pure)."""
    p = urllib.parse.urlparse(shortcut)
    scheme = p.scheme.lower()
    if scheme in ("", "file"):
        return {"type": "directory", "container_path": p.path}
    if scheme in ("s3", "gs"):
        return {
            "type": "s3" if scheme == "s3" else "gcs",
            "bucket": p.netloc,
            "prefix": p.path.lstrip("/"),
        }
    raise ValueError(f"unsupported checkpoint storage {shortcut!r}: use a path, s3:// or gs://")


def from_config(config: JSONObject | str, *, container_path: str | None = None) -> StorageManager:
    """Build a storage manager.

    ``container_path``: for ``shared_fs``, where ``host_path`` is mounted in this process's view
    (None on the host itself, e.g. in the CLI).
    """
    if isinstance(config, str):
        config = shortcut_to_config(config)
    kind = config.get("type")
    cfg = {k: v for k, v in config.items() if k not in _POLICY_KEYS}
    if kind == "shared_fs":
        if "storage_path" not in cfg and "checkpoint_path" in cfg:
            cfg["storage_path"] = cfg["checkpoint_path"]
        cfg = {k: v for k, v in cfg.items() if k not in _MOUNT_KEYS}
        return SharedFSStorageManager.from_config(cfg, container_path)
    if kind == "directory":
        return DirectoryStorageManager(str(cfg["container_path"]))
    if kind == "s3":
        # boto3 (det[aws]) is imported by s3.py only when S3 is used
        from .s3 import S3StorageManager

        return S3StorageManager.from_config(cfg)
    if kind == "gcs":
        # the Google SDK (det[gcp]) is imported by gcs.py only when GCS is used
        from .gcs import GCSStorageManager

        return GCSStorageManager.from_config(cfg)
    raise ValueError(f"unsupported checkpoint_storage.type {kind!r}")


def in_container_path(config: JSONObject | str) -> str | None:
    """Where a shared_fs ``host_path`` is mounted in this task container: the config's
    ``container_path`` (default ``/determined_shared_fs``) when that directory exists; otherwise
    None, and the host path is used as is (process-based agents, or a mount at the same path)."""
    if not isinstance(config, dict) or config.get("type") != "shared_fs":
        return None
    mount = str(config.get("container_path") or SHARED_FS_CONTAINER_PATH)
    if os.path.isdir(mount):
        return mount
    logger.warning(
        "shared_fs: %s is not mounted here; using host_path %s", mount, config.get("host_path")
    )
    return None


def download_checkpoint(storage_config: JSONObject, uuid: str, dst: str) -> None:
    """Download checkpoint ``uuid`` into directory ``dst`` (created if missing)."""
    from_config(storage_config).download(uuid, dst)


__all__ = [
    "SHARED_FS_CONTAINER_PATH",
    "CheckpointNotFoundError",
    "DirectoryStorageManager",
    "Selector",
    "SharedFSStorageManager",
    "StorageManager",
    "StorageNotWritableError",
    "Tree",
    "UnsafeCheckpointError",
    "download_checkpoint",
    "from_config",
    "in_container_path",
    "list_directory",
    "shared_fs_base_path",
    "shortcut_to_config",
]
