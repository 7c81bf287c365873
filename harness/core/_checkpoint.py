"""Saving and loading checkpoints, and telling the master about them.

After a checkpoint is stored, the chief reports it with ``POST /api/v1/checkpoints`` (the
ReportCheckpoint body of Determined: uuid, taskId, allocationId, resources as file → size
string, metadata, ``STATE_COMPLETED``). The metadata must contain ``steps_completed``; it is also
written to ``metadata.json`` inside the checkpoint.

Sharded mode (``shard=True``, all workers call in step): every rank writes/uploads its own
files under the same storage id; the chief merges everyone's resources and metadata and
reports once. Two ranks uploading the same file is an error.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import json
import logging
import os
import pathlib
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypedDict

from ..common.api import Session
from ..storage import Selector, StorageManager, list_directory
from ._distributed import DistributedContext

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from ..common.jsontypes import JSONObject

logger = logging.getLogger(__name__)


def merge_resources(
    all_resources: list[dict[str, int]],
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Merge per-rank resources. Returns (merged, conflicts: file → ranks that wrote it).
    Directories (trailing ``/``) may be shared by several ranks; files may not."""
    merged: dict[str, int] = {}
    writers: dict[str, list[int]] = {}
    for rank, resources in enumerate(all_resources):
        for name, size in resources.items():
            merged[name] = size
            if not name.endswith("/"):
                writers.setdefault(name, []).append(rank)
    conflicts = {n: r for n, r in writers.items() if len(r) > 1}
    return merged, conflicts


def merge_metadata(all_metadata: list[JSONObject]) -> tuple[JSONObject, list[str]]:
    """Deep-merge per-rank metadata dicts. Returns (merged, conflicting key paths): a key is in
    conflict when two ranks give it different non-dict values."""
    merged: JSONObject = {}
    conflicts: list[str] = []

    def merge(dst: JSONObject, src: JSONObject, path: str) -> None:
        for k, v in src.items():
            key = f"{path}/{k}"
            if k not in dst:
                dst[k] = json.loads(json.dumps(v)) if isinstance(v, dict) else v
                continue
            have = dst[k]
            if isinstance(have, dict) and isinstance(v, dict):
                merge(have, v, key)
            elif have != v and key not in conflicts:
                conflicts.append(key)

    for md in all_metadata:
        merge(merged, md, "")
    return merged, conflicts


class ReportCheckpointBody(TypedDict, total=False):
    """``POST /api/v1/checkpoints`` as the harness sends it (Determined's ``v1Checkpoint``; the
    master validates it as ``det.master.schemas.checkpoints.ReportCheckpointRequest``)."""

    uuid: str
    taskId: str
    allocationId: str
    reportTime: str
    #: File sizes by path, int64s as strings.
    resources: dict[str, str]
    metadata: JSONObject
    state: str
    training: JSONObject
    storageId: int


def checkpoint_body(
    storage_id: str,
    task_id: str,
    allocation_id: str,
    resources: dict[str, int],
    metadata: JSONObject,
    storage_backend_id: int | None,
    now: datetime.datetime,
) -> ReportCheckpointBody:
    """The ReportCheckpoint request body (pure)."""
    body: ReportCheckpointBody = {
        "uuid": storage_id,
        "taskId": task_id,
        "allocationId": allocation_id,
        "reportTime": now.isoformat(),
        "resources": {k: str(v) for k, v in resources.items()},
        "metadata": metadata,
        "state": "STATE_COMPLETED",
        "training": {},
    }
    if storage_backend_id is not None:
        body["storageId"] = storage_backend_id
    return body


def _metadata_text(metadata: JSONObject) -> str:
    return json.dumps(metadata, indent=2)


def _write_metadata(ckpt_dir: str | os.PathLike[str], metadata: JSONObject) -> None:
    pathlib.Path(ckpt_dir, "metadata.json").write_text(_metadata_text(metadata), encoding="utf-8")


class DownloadMode(enum.Enum):
    """How workers of one machine fetch a checkpoint in ``restore_path``."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    def __init__(
        self,
        dist: DistributedContext,
        storage: StorageManager,
        session: Session | None = None,
        task_id: str = "",
        allocation_id: str = "",
        storage_backend_id: int | None = None,
    ) -> None:
        self._dist = dist
        self._storage = storage
        self._session = session
        self._task_id = task_id
        self._allocation_id = allocation_id
        self._storage_backend_id = storage_backend_id
        #: Called before a checkpoint is registered (the train context's flush of its reports).
        self.before_report: Callable[[], None] | None = None

    # --- storing -------------------------------------------------------------------------

    def upload(
        self,
        ckpt_dir: str | os.PathLike[str] | None,
        metadata: JSONObject | None = None,
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Upload a local directory as a new checkpoint; returns its storage id."""
        if not shard:
            self._require_chief("upload(shard=False)")
            if ckpt_dir is None:
                raise ValueError("upload(shard=False) needs a ckpt_dir")
            storage_id = str(uuid.uuid4())
            md = dict(metadata or {})
            self._check_metadata(md)
            _write_metadata(ckpt_dir, md)
            resources = _select(list_directory(ckpt_dir), selector)
            self._storage.upload(ckpt_dir, storage_id, paths=set(resources))
            self._report(storage_id, resources, md)
            return storage_id
        storage_id = self._dist.broadcast(str(uuid.uuid4()) if self._dist.rank == 0 else None)
        self._sharded_store(storage_id, ckpt_dir, metadata, selector)
        return str(storage_id)

    @contextlib.contextmanager
    def store_path(
        self, metadata: JSONObject | None = None, *, shard: bool = False
    ) -> Iterator[tuple[pathlib.Path, str]]:
        """Yields ``(path, storage_id)``; save into ``path``. On exit the checkpoint is uploaded
        (cloud storage) and reported to the master."""
        if not shard:
            self._require_chief("store_path(shard=False)")
            storage_id = str(uuid.uuid4())
            md = dict(metadata or {})
            self._check_metadata(md)
            with self._storage.store_path(storage_id) as path:
                yield path, storage_id
                _write_metadata(path, md)
                resources = list_directory(path)
            self._report(storage_id, resources, md)
            return
        storage_id = self._dist.broadcast(str(uuid.uuid4()) if self._dist.rank == 0 else None)
        direct = self._storage.direct_path(storage_id)
        if direct is not None:
            # Every rank on a machine gets the same directory; the lowest rank owns it.
            direct.mkdir(parents=True, exist_ok=True)
            yield direct, storage_id
            self._sharded_store(storage_id, direct, metadata, None)
            return
        with tempfile.TemporaryDirectory(prefix="det-ckpt-") as tmp:
            yield pathlib.Path(tmp), storage_id
            self._sharded_store(storage_id, tmp, metadata, None)

    def _sharded_store(
        self,
        storage_id: str,
        ckpt_dir: str | os.PathLike[str] | None,
        metadata: JSONObject | None,
        selector: Selector | None,
    ) -> None:
        # Ranks on one machine may pass the same directory (or, with direct-access storage,
        # all get the same one): the lowest such rank owns it. This allgather is also the
        # barrier that makes sure every rank finished writing before anyone lists.
        real = os.path.realpath(ckpt_dir) if ckpt_dir is not None else None
        all_dirs = self._dist.allgather(real)
        if not any(d is not None for d in all_dirs):
            raise ValueError("at least one rank must pass a ckpt_dir in sharded mode")
        owner = real is not None and (
            selector is not None or all_dirs.index(real) == self._dist.rank
        )
        own = _select(list_directory(ckpt_dir), selector) if owner and ckpt_dir is not None else {}
        own.pop("metadata.json", None)
        merged_resources, conflicts = merge_resources(self._dist.allgather(own))
        if conflicts:
            raise RuntimeError(f"several ranks wrote the same checkpoint files: {conflicts}")
        md, md_conflicts = merge_metadata(self._dist.allgather(dict(metadata or {})))
        if md_conflicts:
            raise RuntimeError(f"ranks gave conflicting checkpoint metadata at {md_conflicts}")
        self._check_metadata(md)
        first_owner = self._dist.allgather(owner).index(True)
        if self._dist.rank == first_owner and ckpt_dir is not None:
            _write_metadata(ckpt_dir, md)
            own["metadata.json"] = os.path.getsize(os.path.join(ckpt_dir, "metadata.json"))
        merged_resources["metadata.json"] = len(_metadata_text(md).encode())
        if own and ckpt_dir is not None:
            self._storage.upload(ckpt_dir, storage_id, paths=set(own))
        # Nobody reports before everybody has uploaded.
        self._dist.allgather(None)
        if self._dist.rank == 0:
            self._report(storage_id, merged_resources, md)

    # --- loading -------------------------------------------------------------------------

    def download(
        self,
        storage_id: str,
        ckpt_dir: str | os.PathLike[str],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy a checkpoint into ``ckpt_dir``. Each caller downloads its own copy (the mode is
        accepted for compatibility; sharing applies to ``restore_path``)."""
        self._storage.download(storage_id, ckpt_dir, selector)

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[pathlib.Path]:
        """A local directory with the checkpoint's files for the duration of the block.

        ``LocalWorkersShareDownload`` (default): the workers of one machine call this in step;
        the local chief fetches once and every local worker reads the same directory.
        ``NoSharedDownload``: no coordination, every caller fetches its own copy."""
        mode = DownloadMode(download_mode)
        if mode == DownloadMode.NoSharedDownload or self._dist.local_size == 1:
            with self._storage.restore_path(storage_id, selector) as path:
                yield path
            return
        if self._dist.local_rank == 0:
            with contextlib.ExitStack() as stack:
                try:
                    path = stack.enter_context(self._storage.restore_path(storage_id, selector))
                except BaseException:
                    self._dist.broadcast_local(None)  # release the workers, then fail
                    raise
                self._dist.broadcast_local(str(path))
                try:
                    yield path
                finally:
                    # Keep the directory until every local worker is done with it.
                    self._dist.gather_local(None)
            return
        shared = self._dist.broadcast_local(None)
        if shared is None:
            raise RuntimeError(f"the local chief could not fetch checkpoint {storage_id}")
        try:
            yield pathlib.Path(shared)
        finally:
            self._dist.gather_local(None)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        if self._session is None:
            return self._metadata_from_storage(storage_id)
        r = self._session.get(f"/api/v1/checkpoints/{storage_id}")
        md = (r.json().get("checkpoint") or {}).get("metadata") or {}
        return dict(md)

    def _metadata_from_storage(self, storage_id: str) -> JSONObject:
        with self._storage.restore_path(storage_id, lambda p: p == "metadata.json") as path:
            f = path / "metadata.json"
            return dict(json.loads(f.read_text())) if f.exists() else {}

    def delete(self, storage_id: str) -> None:
        resources = self._storage.delete(storage_id)
        if self._session is not None:
            self._session.patch(
                "/api/v1/checkpoints",
                json={"checkpoints": [{"uuid": storage_id, "resources": {"resources": {}}}]},
            )
        logger.info("deleted checkpoint %s (%d entries)", storage_id, len(resources))

    # --- helpers -------------------------------------------------------------------------

    def _require_chief(self, what: str) -> None:
        if self._dist.rank != 0:
            raise RuntimeError(f"{what} may only be called by the chief (rank {self._dist.rank})")

    def _check_metadata(self, metadata: JSONObject) -> None:
        # The master orders checkpoints by it; checked before anything is written.
        if self._session is not None and "steps_completed" not in metadata:
            raise ValueError("checkpoint metadata must contain 'steps_completed'")

    def _report(self, storage_id: str, resources: dict[str, int], metadata: JSONObject) -> None:
        self._check_metadata(metadata)
        if self._session is None:
            logger.info("saved checkpoint %s", storage_id)
            return
        body = checkpoint_body(
            storage_id,
            self._task_id,
            self._allocation_id,
            resources,
            metadata,
            self._storage_backend_id,
            datetime.datetime.now(datetime.timezone.utc),
        )
        if self.before_report is not None:
            self.before_report()
        self._session.post("/api/v1/checkpoints", json=body)
        logger.info("reported checkpoint %s to the master", storage_id)


def _select(resources: dict[str, int], selector: Selector | None) -> dict[str, int]:
    return resources if selector is None else {k: v for k, v in resources.items() if selector(k)}


class DummyCheckpointContext(CheckpointContext):
    """Off-cluster: checkpoints go to local storage; nothing is reported."""

    def __init__(self, dist: DistributedContext, storage: StorageManager) -> None:
        super().__init__(dist, storage, session=None)
