"""Checkpoint storage never follows a link out of the checkpoint's directory (issue 23, item 1).

A task writes its checkpoint directory, links included; the master, the GC task, the CLI and
other users' tasks read it. These build checkpoint directories with every kind of link on a
real filesystem and check what each operation reads.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from det.storage import (
    DirectoryStorageManager,
    Tree,
    UnsafeCheckpointError,
    list_directory,
)
from det.storage.base import ObjectStorageManager, safe_relative, validate_storage_id

SECRET = b"the agent token, readable only by the master"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside every checkpoint directory, and a directory holding it."""
    secret_dir = tmp_path / "master-only"
    secret_dir.mkdir()
    (secret_dir / "agent_token").write_bytes(SECRET)
    return secret_dir / "agent_token"


def linked_checkpoint(root: Path, outside: Path) -> None:
    """Content, links that stay inside, and every kind of link that leaves or leads nowhere."""
    (root / "sub").mkdir(parents=True)
    (root / "model.pt").write_bytes(b"weights")
    (root / "sub" / "opt.pt").write_bytes(b"optimizer")
    # inside: relative, through "..", absolute to the checkpoint itself, a chain
    os.symlink("model.pt", root / "latest.pt")
    os.symlink("../model.pt", root / "sub" / "model-link.pt")
    os.symlink(str(root / "sub" / "opt.pt"), root / "abs-inside.pt")
    os.symlink("latest.pt", root / "chain-inside.pt")
    # out: absolute, "..", a chain whose last hop leaves, a directory outside, dangling
    os.symlink(str(outside), root / "leak")
    os.symlink(os.path.relpath(outside, root / "sub"), root / "sub" / "dotdot")
    os.symlink("sub/hop", root / "chain-out")
    os.symlink("../dotdot", root / "sub" / "hop")
    os.symlink(str(outside.parent), root / "dir-out")
    os.symlink("sub", root / "dir-in")
    os.symlink(".", root / "self")
    os.symlink("missing", root / "dangling")
    os.mkfifo(root / "fifo")


INSIDE = {
    "model.pt": b"weights",
    "sub/opt.pt": b"optimizer",
    "latest.pt": b"weights",
    "sub/model-link.pt": b"weights",
    "abs-inside.pt": b"optimizer",
    "chain-inside.pt": b"weights",
}
SKIPPED = {"leak", "sub/dotdot", "chain-out", "sub/hop", "dir-out", "dir-in", "self"}
SKIPPED |= {"dangling", "fifo"}


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def test_listing_holds_files_and_links_to_files_inside_and_names_the_rest(
    tmp_path: Path, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ckpt"
    linked_checkpoint(root, outside)
    with caplog.at_level(logging.WARNING), Tree(root, checkpoint=True) as tree:
        assert set(tree.skipped) == SKIPPED
        assert tree.sources["latest.pt"] == "model.pt"
        assert tree.sources["abs-inside.pt"] == "sub/opt.pt"
    resources = list_directory(root)
    assert resources == {**{k: len(v) for k, v in INSIDE.items()}, "sub/": 0}
    assert "leak skipped: a link that leaves the checkpoint directory" in caplog.text
    assert "fifo skipped: not a regular file" in caplog.text


def test_download_copies_content_and_never_a_file_outside(tmp_path: Path, outside: Path) -> None:
    base = tmp_path / "shared"
    linked_checkpoint(base / "ck1", outside)
    dst = tmp_path / "dst"
    DirectoryStorageManager(base).download("ck1", dst)  # a FIFO would block a plain copy
    got = files_under(dst)
    assert got == INSIDE
    assert not any(p.is_symlink() for p in dst.rglob("*"))
    assert all(SECRET not in data for data in got.values())


def test_upload_stores_no_file_outside(tmp_path: Path, outside: Path) -> None:
    src = tmp_path / "src"
    linked_checkpoint(src, outside)
    mgr = DirectoryStorageManager(tmp_path / "shared")
    mgr.upload(src, "ck2")
    assert files_under(tmp_path / "shared" / "ck2") == INSIDE
    assert mgr.list_files("ck2") == {**{k: len(v) for k, v in INSIDE.items()}, "sub/": 0}


def test_a_checkpoint_directory_that_is_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    """``<storage>/<uuid>`` made a link to a directory only the master reads."""
    base = tmp_path / "shared"
    base.mkdir()
    os.symlink(str(outside.parent), base / "ck3")
    mgr = DirectoryStorageManager(base)
    with pytest.raises(UnsafeCheckpointError, match="ck3: the checkpoint directory is a link"):
        mgr.download("ck3", tmp_path / "dst")
    assert not (tmp_path / "dst" / "agent_token").exists()
    assert mgr.list_files("ck3") == {}
    assert mgr.delete("ck3") == {}  # the link goes, its target stays
    assert not (base / "ck3").is_symlink() and outside.read_bytes() == SECRET


def test_delete_removes_links_not_their_targets(tmp_path: Path, outside: Path) -> None:
    base = tmp_path / "shared"
    linked_checkpoint(base / "ck4", outside)
    deleted = DirectoryStorageManager(base).delete("ck4")
    assert "leak" not in deleted and deleted["latest.pt"] == len(b"weights")
    assert not (base / "ck4").exists()
    assert outside.read_bytes() == SECRET


def test_a_link_swapped_in_after_the_listing_is_not_followed(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "ckpt"
    (root / "sub").mkdir(parents=True)
    (root / "model.pt").write_bytes(b"weights")
    (root / "sub" / "opt.pt").write_bytes(b"optimizer")
    with Tree(root, checkpoint=True) as tree:
        (root / "model.pt").unlink()
        os.symlink(str(outside), root / "model.pt")
        with pytest.raises(UnsafeCheckpointError, match=r"model\.pt: a link appeared"):
            tree.open("model.pt")
        os.rename(root / "sub", root / "sub-moved")
        os.symlink(str(outside.parent), root / "sub")
        (outside.parent / "opt.pt").write_bytes(SECRET)
        with pytest.raises(UnsafeCheckpointError, match=r"sub/opt\.pt: a link appeared"):
            tree.open("sub/opt.pt")


def test_a_fifo_swapped_in_after_the_listing_is_refused_without_waiting(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "model.pt").write_bytes(b"weights")
    with Tree(root, checkpoint=True) as tree:
        (root / "model.pt").unlink()
        os.mkfifo(root / "model.pt")
        with pytest.raises(UnsafeCheckpointError, match="no longer a regular file"):
            tree.open("model.pt")


@pytest.mark.parametrize("storage_id", ["../x", "..", ".", "a/b", "", "x\x00y"])
def test_a_storage_id_that_is_not_one_path_component_is_refused(
    tmp_path: Path, storage_id: str
) -> None:
    with pytest.raises(ValueError, match="invalid storage id"):
        validate_storage_id(storage_id)
    with pytest.raises(ValueError, match="invalid storage id"):
        DirectoryStorageManager(tmp_path).download(storage_id, tmp_path / "dst")


class MemoryBucket(ObjectStorageManager):
    """An in-memory bucket (our own interface's fake); keys written directly by a test stand
    for whatever a task with the bucket's credentials put there."""

    scheme = "mem"

    def __init__(self) -> None:
        super().__init__("b", "p", max_workers=4)
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _list_keys(self, key_prefix: str) -> Iterator[tuple[str, int]]:
        for k, v in sorted(self.objects.items()):
            if k.startswith(key_prefix):
                yield k, len(v)

    def _put_dir(self, key: str) -> None:
        with self._lock:
            self.objects[key] = b""

    def _put_file(self, f: BinaryIO, key: str) -> None:
        data = f.read()
        with self._lock:
            self.objects[key] = data

    def _get_file(self, key: str, path: str) -> None:
        Path(path).write_bytes(self.objects[key])

    def _delete_keys(self, keys: list[str]) -> None:
        for k in keys:
            self.objects.pop(k, None)


def test_object_upload_stores_links_inside_as_copies_and_nothing_outside(
    tmp_path: Path, outside: Path
) -> None:
    src = tmp_path / "src"
    linked_checkpoint(src, outside)
    bucket = MemoryBucket()
    bucket.upload(src, "ck5")
    stored = {k[len("p/ck5/") :]: v for k, v in bucket.objects.items() if not k.endswith("/")}
    assert stored == INSIDE
    assert all(SECRET not in v for v in bucket.objects.values())


def test_object_download_never_writes_outside_its_directory(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    bucket.objects = {
        "p/ck6/model.pt": b"weights",
        "p/ck6/../../escaped": b"x",
        "p/ck6/a/../../../escaped2": b"x",
        "p/ck6//abs": b"x",
        "p/ck6/./dot": b"x",
    }
    dst = tmp_path / "deep" / "dst"
    bucket.download("ck6", dst)
    assert files_under(tmp_path) == {"deep/dst/model.pt": b"weights"}


@pytest.mark.parametrize(
    ("rel", "ok"),
    [
        ("a", True),
        ("a/b/", True),
        ("a/../b", False),
        ("../a", False),
        ("/a", False),
        ("a//b", False),
        ("./a", False),
        ("", False),
        ("a/\x00", False),
    ],
)
def test_safe_relative(rel: str, ok: bool) -> None:
    assert safe_relative(rel) is ok


def test_memory_bucket_round_trips(tmp_path: Path) -> None:
    """The fake itself keeps bytes (so the tests above test the storage code, not the fake)."""
    bucket = MemoryBucket()
    bucket._put_file(io.BytesIO(b"abc"), "p/ck7/f")
    bucket.download("ck7", tmp_path)
    assert (tmp_path / "f").read_bytes() == b"abc"


def test_restore_reads_a_checkpoint_with_links_through_a_copy(
    tmp_path: Path, outside: Path
) -> None:
    """A trial restoring another user's checkpoint: links in it would be followed by the
    reader's own code, in the reader's container (its token, its files). A plain checkpoint
    is still read in place."""
    base = tmp_path / "shared"
    linked_checkpoint(base / "ck8", outside)
    (base / "plain" / "sub").mkdir(parents=True)
    (base / "plain" / "sub" / "m.pt").write_bytes(b"m")
    mgr = DirectoryStorageManager(base)
    with mgr.restore_path("plain") as p:
        assert p == base / "plain"
    with mgr.restore_path("ck8") as p:
        assert p != base / "ck8"
        assert files_under(p) == INSIDE
        assert not any(q.is_symlink() for q in p.rglob("*"))
    os.symlink(str(outside.parent), base / "ck9")
    restore = mgr.restore_path("ck9")
    with pytest.raises(UnsafeCheckpointError, match="the checkpoint directory is a link"):
        restore.__enter__()
