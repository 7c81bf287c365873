from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
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


# --- agent users on shared storage (issue 41 item 5) -----------------------------------------

UID, GID = 1234, 2345


def as_user(fn: Callable[[], object]) -> str:
    """Runs ``fn`` in a child process as uid 1234 / gid 2345 (an agent user's task); returns
    "ok" or the child's error as ``Type: message``."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(GID)
            os.setuid(UID)
            fn()
            out = "ok"
        except BaseException as e:
            out = f"{type(e).__name__}: {e}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read().decode()
    os.waitpid(pid, 0)
    return got


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A tmp dir another user may enter (pytest's are 0700 under a 0700 folder)."""
    path = Path(tempfile.mkdtemp(prefix="det-agent-users-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def shared_mount(tmp_path: Path) -> Path:
    """The host path an admin mounted: root's, 0755 (what mkdir gives)."""
    mount = tmp_path / "mount"
    mount.mkdir(mode=0o755)
    os.chmod(mount, 0o755)
    return mount


def files(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.txt").write_text("x")
    os.chmod(root, 0o755)
    os.chmod(root / "a.txt", 0o644)
    return root


def tensorboard(mgr: storage.StorageManager, experiment: int) -> storage.StorageManager:
    return mgr.under(f"cluster-1/tensorboard/experiment/{experiment}/trial")


def test_an_agent_user_writes_checkpoints_and_tensorboard_files_after_a_root_task(
    open_tmp: Path,
) -> None:
    tmp_path = open_tmp
    mount = shared_mount(tmp_path)
    cfg = {"type": "shared_fs", "host_path": str(mount), "storage_path": "det-checkpoints"}
    src = files(tmp_path / "src")
    # A root task writes first: its checkpoint and its TensorBoard files.
    root_task = storage.from_config(cfg)
    root_task.check_writable()
    root_task.upload(src, "ck-root")
    tensorboard(root_task, 1).upload(src, "11")
    base = mount / "det-checkpoints"
    shared = [base, *(base / "cluster-1/tensorboard/experiment/1/trial").parents][:6]
    assert {p.relative_to(mount).as_posix(): oct(p.stat().st_mode & 0o7777) for p in shared} == {
        p.relative_to(mount).as_posix(): "0o1777" for p in shared
    }
    assert oct((base / "ck-root").stat().st_mode & 0o7777) == "0o755"  # the writer's own

    # Then an agent user's task: its checks pass, its checkpoint and files are its own.
    def alice() -> None:
        task = storage.from_config(cfg)
        task.check_writable()
        tensorboard(task, 2).check_writable()
        task.upload(src, "ck-alice")
        with task.store_path("ck-alice-2") as p:
            (p / "b.txt").write_text("y")
        tensorboard(task, 2).upload(src, "21")

    assert as_user(alice) == "ok"
    for p in (base / "ck-alice", base / "ck-alice-2", base / "cluster-1/tensorboard/experiment/2"):
        assert (p.stat().st_uid, p.stat().st_gid) == (UID, GID), p
    assert (base / "cluster-1/tensorboard/experiment/2/trial/21/a.txt").read_text() == "x"
    # Sticky: alice cannot remove root's checkpoint, and reading it is open to her.
    assert as_user(lambda: storage.from_config(cfg).delete("ck-root")).startswith("PermissionError")
    assert (base / "ck-root" / "a.txt").exists()


def test_a_level_an_older_harness_made_is_widened_by_its_owner(open_tmp: Path) -> None:
    tmp_path = open_tmp
    mount = shared_mount(tmp_path)
    cfg = {"type": "shared_fs", "host_path": str(mount), "storage_path": "det-checkpoints"}
    old = mount / "det-checkpoints/cluster-1/tensorboard/experiment"
    old.mkdir(parents=True)
    for p in (old, *list(old.parents)[:3]):
        os.chmod(p, 0o755)  # as the harness left them before
    tensorboard(storage.from_config(cfg), 1).upload(files(tmp_path / "src"), "11")
    assert oct(old.stat().st_mode & 0o7777) == "0o1777"
    assert as_user(lambda: tensorboard(storage.from_config(cfg), 2).check_writable()) == "ok"


def test_storage_an_agent_user_cannot_write_fails_its_check_in_one_line(open_tmp: Path) -> None:
    tmp_path = open_tmp
    mount = shared_mount(tmp_path)
    cfg = {"type": "shared_fs", "host_path": str(mount)}  # the admin's root itself, 0755
    got = as_user(lambda: storage.from_config(cfg).check_writable())
    assert got.startswith("StorageNotWritableError: checkpoint storage ") and "\n" not in got
    assert f"uid {UID}, gid {GID}" in got and "owned by 0:0, mode 0755" in got, got
    assert "chmod 1777" in got
    # A TensorBoard level another user made narrow: named too.
    narrow = mount / "det-checkpoints/cluster-1/tensorboard"
    narrow.mkdir(parents=True)
    os.chmod(mount / "det-checkpoints", 0o1777)
    os.chmod(mount / "det-checkpoints/cluster-1", 0o1777)
    os.chmod(narrow, 0o755)
    wide = {**cfg, "storage_path": "det-checkpoints"}
    got = as_user(lambda: tensorboard(storage.from_config(wide), 3).check_writable())
    assert f"{narrow} is not writable" in got and "owned by 0:0, mode 0755" in got, got
