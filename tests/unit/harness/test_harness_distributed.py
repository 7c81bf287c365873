"""Collectives and sharded checkpoints with several ranks (threads in one process, real TCP)."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from det.core import CheckpointContext, DistributedContext, merge_metadata, merge_resources
from det.storage import DirectoryStorageManager, StorageManager
from tests.ports import free_port_pair
from tests.unit.harness.fake_master import TOKEN, FakeMaster


def chief_port() -> int:
    """A port for the chief's star, below the kernel's ephemeral range: the other ranks connect
    to it over and over until the chief listens, and each try takes an ephemeral local port,
    which can be the chief's own port when it is in that range (the chief's bind then failed
    with EADDRINUSE, seen in a CI rehearsal)."""
    return free_port_pair()


def run_ranks(size: int, fn: Callable[[DistributedContext], Any]) -> list[Any]:
    port = chief_port()

    def one(rank: int) -> Any:
        dist = DistributedContext(
            rank=rank,
            size=size,
            local_rank=rank,
            local_size=size,
            cross_rank=0,
            cross_size=1,
            port=port,
            timeout=20,
        )
        try:
            return fn(dist)
        finally:
            dist.close()

    with concurrent.futures.ThreadPoolExecutor(size) as pool:
        return [f.result(timeout=60) for f in [pool.submit(one, r) for r in range(size)]]


def test_gather_broadcast_allgather() -> None:
    def work(d: DistributedContext) -> Any:
        gathered = d.gather(d.rank * 10)
        b = d.broadcast("from-chief" if d.rank == 0 else None)
        ag = d.allgather({"r": d.rank})
        local = d.allgather_local(d.local_rank)
        return gathered, b, ag, local

    out = run_ranks(3, work)
    assert out[0][0] == [0, 10, 20]
    assert out[1][0] is None and out[2][0] is None
    assert all(o[1] == "from-chief" for o in out)
    assert all(o[2] == [{"r": 0}, {"r": 1}, {"r": 2}] for o in out)
    assert all(o[3] == [0, 1, 2] for o in out)


def test_from_torch_distributed_reads_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }.items():
        monkeypatch.setenv(k, v)
    d = DistributedContext.from_torch_distributed()
    assert (d.rank, d.size, d.local_rank, d.local_size, d.cross_size) == (0, 1, 0, 1, 1)
    assert d.allgather("x") == ["x"]


def test_multi_machine_requires_chief_ip() -> None:
    with pytest.raises(ValueError, match="chief_ip"):
        DistributedContext(rank=0, size=4, local_rank=0, local_size=2, cross_rank=0, cross_size=2)


def test_merge_resources_reports_file_conflicts_but_not_shared_dirs() -> None:
    merged, conflicts = merge_resources([{"a": 1, "d/": 0}, {"b": 2, "d/": 0}, {"a": 1}])
    assert merged == {"a": 1, "d/": 0, "b": 2}
    assert conflicts == {"a": [0, 2]}


def test_merge_metadata_deep_merges_and_flags_conflicts() -> None:
    merged, conflicts = merge_metadata(
        [
            {"steps_completed": 5, "x": {"a": 1}},
            {"steps_completed": 5, "x": {"b": 2}, "y": 1},
            {"y": 2},
        ]
    )
    assert merged == {"steps_completed": 5, "x": {"a": 1, "b": 2}, "y": 1}
    assert conflicts == ["/y"]


class _UploadingDirectoryStorage(DirectoryStorageManager):
    """Our own storage interface, without direct access: behaves like a cloud store."""

    def direct_path(self, storage_id: str) -> Path | None:
        return None

    # Staged through a temporary directory, like a cloud store.
    store_path = StorageManager.store_path
    restore_path = StorageManager.restore_path


@pytest.mark.parametrize("direct", [True, False])
def test_sharded_store_path_merges_ranks_files_and_chief_reports(
    master: FakeMaster, tmp_path: Path, direct: bool
) -> None:
    from det.common.api import Session

    storage_cls = DirectoryStorageManager if direct else _UploadingDirectoryStorage
    storage = storage_cls(tmp_path / "store")

    def work(d: DistributedContext) -> str:
        session = Session(master.url, allocation_token=TOKEN)
        ctx = CheckpointContext(d, storage, session, "3.1", "3.1.1")
        metadata = {"steps_completed": 4, f"rank{d.rank}": True}
        with ctx.store_path(metadata, shard=True) as (path, sid):
            (path / f"shard-{d.rank}.bin").write_bytes(b"x" * (d.rank + 1))
            (path / "common").mkdir(exist_ok=True)
        return sid

    sids = run_ranks(2, work)
    assert sids[0] == sids[1]
    stored = tmp_path / "store" / sids[0]
    assert sorted(p.name for p in stored.iterdir()) == [
        "common",
        "metadata.json",
        "shard-0.bin",
        "shard-1.bin",
    ]
    (rec,) = master.requests_to("/api/v1/checkpoints", method="POST")
    assert rec.body["resources"] == {
        "common/": "0",
        "shard-0.bin": "1",
        "shard-1.bin": "2",
        "metadata.json": str((stored / "metadata.json").stat().st_size),
    }
    assert rec.body["metadata"] == {"steps_completed": 4, "rank0": True, "rank1": True}
    assert json.loads((stored / "metadata.json").read_text()) == rec.body["metadata"]


def test_sharded_upload_rejects_two_ranks_writing_the_same_file(
    master: FakeMaster, tmp_path: Path
) -> None:
    storage = _UploadingDirectoryStorage(tmp_path / "store")

    def work(d: DistributedContext) -> str:
        ctx = CheckpointContext(d, storage)
        src = tmp_path / f"src{d.rank}"
        src.mkdir()
        (src / "same.bin").write_text("x")
        try:
            ctx.upload(src, {"steps_completed": 1}, shard=True)
        except RuntimeError as e:
            return str(e)
        return "no error"

    out = run_ranks(2, work)
    assert all("same checkpoint files" in o for o in out)


class _CountingStorage(_UploadingDirectoryStorage):
    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.downloads = 0

    def download(self, storage_id: str, dst_dir: Any, selector: Any = None) -> None:
        self.downloads += 1
        super().download(storage_id, dst_dir, selector)


def test_local_workers_share_one_download_in_restore_path(tmp_path: Path) -> None:
    storage = _CountingStorage(tmp_path / "store")
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"weights")
    storage.upload(src, "ck")

    def work(d: DistributedContext) -> tuple[str, bytes]:
        ctx = CheckpointContext(d, storage)
        with ctx.restore_path("ck") as path:
            return str(path), (path / "w.bin").read_bytes()

    out = run_ranks(3, work)
    assert storage.downloads == 1
    assert len({p for p, _ in out}) == 1
    assert all(data == b"weights" for _, data in out)
    assert not Path(out[0][0]).exists()  # cleaned up once everyone was done


def test_a_failed_shared_download_fails_every_worker(tmp_path: Path) -> None:
    storage = _CountingStorage(tmp_path / "store")

    def work(d: DistributedContext) -> str:
        try:
            with CheckpointContext(d, storage).restore_path("missing"):
                return "no error"
        except Exception as e:
            return type(e).__name__

    assert run_ranks(2, work) == ["CheckpointNotFoundError", "RuntimeError"]


def test_two_containers_of_one_host_each_get_their_own_local_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trial on two agents of one host (host networking, as det deploy local runs them):
    both containers' local chiefs listened at the same port (port + 1000): while the first
    still waited for its member, the second could not bind (EADDRINUSE) or took the other
    container's member. Each local group now listens where the kernel puts it, and its members
    learn the port through the global group."""
    import threading
    import time

    from det.core import _distributed

    port = chief_port()
    who = threading.local()
    connect = _distributed._Star._connect

    def late_local_member(star: Any, host: str, to: int, timeout: float) -> None:
        # Rank 1 joins its container's local group late: its local chief is still listening
        # when the other container's group forms.
        if getattr(who, "rank", None) == 1 and star.size == 2 and to != port:
            time.sleep(1.0)
        connect(star, host, to, timeout)

    monkeypatch.setattr(_distributed._Star, "_connect", late_local_member)

    def one(rank: int) -> Any:
        who.rank = rank
        dist = DistributedContext(
            rank=rank,
            size=4,
            local_rank=rank % 2,
            local_size=2,
            cross_rank=rank // 2,
            cross_size=2,
            chief_ip="127.0.0.1",
            port=port,
            timeout=20,
        )
        try:
            return dist.allgather_local(rank), dist.allgather(rank)
        finally:
            dist.close()

    # Daemon threads: a rank stuck in a mixed-up group must fail the test, not hang it.
    out: dict[int, Any] = {}
    threads = [
        threading.Thread(target=lambda r=r: out.__setitem__(r, one(r)), daemon=True)
        for r in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(out) == [0, 1, 2, 3], f"ranks that finished: {sorted(out)}"
    assert [out[r][0] for r in range(4)] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert all(out[r][1] == [0, 1, 2, 3] for r in range(4))
