from __future__ import annotations

import os
from pathlib import Path

import pytest

from det import storage
from det.storage import (
    CheckpointNotFoundError,
    DirectoryStorageManager,
    SharedFSStorageManager,
    download_checkpoint,
    list_directory,
    shared_fs_base_path,
)


def make_checkpoint(root: Path) -> dict[str, bytes]:
    files = {
        "model.pt": os.urandom(4096),
        "nested/deeper/opt.pt": os.urandom(100),
        "nested/notes.txt": b"hello",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty").mkdir()
    return files


@pytest.mark.parametrize(
    ("config", "container_path", "expected"),
    [
        ({"host_path": "/mnt/ckpt"}, None, "/mnt/ckpt"),
        ({"host_path": "/mnt/ckpt", "storage_path": "exp"}, None, "/mnt/ckpt/exp"),
        (
            {"host_path": "/mnt/ckpt", "storage_path": "exp"},
            "/determined_shared_fs",
            "/determined_shared_fs/exp",
        ),
        ({"host_path": "/mnt/ckpt", "storage_path": "/mnt/ckpt/a/b"}, "/c", "/c/a/b"),
        ({"host_path": "/mnt/ckpt"}, "/c", "/c"),
    ],
)
def test_shared_fs_base_path(config: dict, container_path: str | None, expected: str) -> None:
    assert shared_fs_base_path(config, container_path) == expected


@pytest.mark.parametrize(
    "config",
    [
        {"host_path": "/mnt/ckpt", "storage_path": "../escape"},
        {"host_path": "/mnt/ckpt", "storage_path": "/elsewhere"},
        {"host_path": "relative"},
    ],
)
def test_shared_fs_rejects_paths_outside_host_path(config: dict) -> None:
    with pytest.raises(ValueError):
        shared_fs_base_path(config, None)


def test_round_trip_with_nested_folders(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    files = make_checkpoint(src)
    mgr = storage.from_config({"type": "shared_fs", "host_path": str(tmp_path / "host")})
    assert isinstance(mgr, SharedFSStorageManager)
    mgr.upload(src, "ck1")
    assert mgr.list_files("ck1") == list_directory(src)
    assert "empty/" in mgr.list_files("ck1")
    dst = tmp_path / "dst"
    mgr.download("ck1", dst)
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data
    assert (dst / "empty").is_dir()


def test_upload_only_selected_paths_and_download_with_selector(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    make_checkpoint(src)
    mgr = DirectoryStorageManager(tmp_path / "store")
    mgr.upload(src, "ck", paths={"model.pt", "nested/", "nested/notes.txt"})
    assert set(mgr.list_files("ck")) == {"model.pt", "nested/", "nested/notes.txt"}
    dst = tmp_path / "dst"
    mgr.download("ck", dst, selector=lambda p: p.startswith("nested"))
    assert not (dst / "model.pt").exists()
    assert (dst / "nested" / "notes.txt").read_bytes() == b"hello"


def test_delete_is_idempotent_and_returns_what_was_deleted(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    make_checkpoint(src)
    mgr = DirectoryStorageManager(tmp_path / "store")
    mgr.upload(src, "ck")
    deleted = mgr.delete("ck")
    assert deleted["model.pt"] == 4096
    assert mgr.list_files("ck") == {}
    assert mgr.delete("ck") == {}


def test_missing_checkpoint_raises(tmp_path: Path) -> None:
    mgr = DirectoryStorageManager(tmp_path)
    with pytest.raises(CheckpointNotFoundError):
        mgr.download("nope", tmp_path / "dst")
    with pytest.raises(CheckpointNotFoundError), mgr.restore_path("nope"):
        pass


def test_storage_ids_cannot_escape_the_base(tmp_path: Path) -> None:
    mgr = DirectoryStorageManager(tmp_path)
    with pytest.raises(ValueError):
        mgr.list_files("../x")


def test_store_path_writes_in_place(tmp_path: Path) -> None:
    mgr = DirectoryStorageManager(tmp_path / "store")
    with mgr.store_path("ck") as p:
        (p / "w").write_text("1")
    assert (tmp_path / "store" / "ck" / "w").read_text() == "1"


def test_shortcuts_and_download_checkpoint(tmp_path: Path) -> None:
    assert storage.shortcut_to_config("s3://b/p/q") == {
        "type": "s3",
        "bucket": "b",
        "prefix": "p/q",
    }
    assert storage.shortcut_to_config("gs://b") == {"type": "gcs", "bucket": "b", "prefix": ""}
    assert storage.shortcut_to_config("/x") == {"type": "directory", "container_path": "/x"}
    with pytest.raises(ValueError):
        storage.from_config({"type": "azure"})
    src = tmp_path / "src"
    src.mkdir()
    files = make_checkpoint(src)
    cfg = {"type": "shared_fs", "host_path": str(tmp_path / "h"), "save_trial_best": 1}
    storage.from_config(cfg).upload(src, "u1")
    download_checkpoint(cfg, "u1", str(tmp_path / "out"))
    assert (tmp_path / "out" / "model.pt").read_bytes() == files["model.pt"]


def test_shared_fs_uses_the_container_mount_when_present(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    cfg = {
        "type": "shared_fs",
        "host_path": "/srv/ckpts",
        "storage_path": "exp",
        "container_path": str(mount),
    }
    assert storage.in_container_path(cfg) == str(mount)
    mgr = storage.from_config(cfg, container_path=storage.in_container_path(cfg))
    with mgr.store_path("ck") as p:
        (p / "w").write_text("1")
    assert (mount / "exp" / "ck" / "w").read_text() == "1"
    cfg["container_path"] = str(tmp_path / "not-mounted")
    assert storage.in_container_path(cfg) is None
    assert storage.in_container_path({"type": "s3", "bucket": "b"}) is None
