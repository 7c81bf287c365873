"""``det checkpoint rm``'s storage side: which paths a glob names, and removing them from a
directory checkpoint (without following a link anywhere) or a bucket."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from det.storage import DirectoryStorageManager, UnsafeCheckpointError, globs
from det.storage.tree import Tree
from tests.unit.harness.test_harness_storage_links import MemoryBucket


@pytest.mark.parametrize(
    ("pattern", "rel", "expected"),
    [
        ("*.pt", "model.pt", True),
        ("*.pt", "sub/model.pt", False),
        ("**/*.pt", "sub/deep/model.pt", True),
        ("**/*.pt", "model.pt", True),
        ("optimizer", "optimizer/", True),
        ("optimizer/**", "optimizer", True),
        ("optimizer/**", "optimizer/a/b", True),
        ("opt?mizer/*.bin", "optimizer/x.bin", True),
        ("[ab].txt", "c.txt", False),
        ("**", "anything/at/all", True),
    ],
)
def test_a_glob_names_paths_component_by_component(pattern: str, rel: str, expected: bool) -> None:
    assert globs.matches(pattern, rel) is expected


@pytest.mark.parametrize("bad", ["", "/abs/*", "../x", "a/../b", "a//b", "./a", "x\x00y", 7])
def test_bad_globs_are_refused_with_the_rule(bad: object) -> None:
    with pytest.raises(ValueError, match="glob"):
        globs.validate(bad)


def test_topmost_takes_a_directory_once_not_its_content() -> None:
    names = ["a/", "a/x.pt", "a/y.txt", "b.pt", "c/", "c/d.pt"]
    assert globs.topmost(["a", "**/*.pt"], names) == ["a/", "b.pt", "c/d.pt"]


def make(root: Path, outside: Path) -> None:
    (root / "optimizer").mkdir(parents=True)
    (root / "optimizer" / "state.pt").write_bytes(b"s" * 10)
    (root / "model.pt").write_bytes(b"m" * 7)
    (root / "notes.txt").write_bytes(b"n")
    outside.mkdir()
    (outside / "precious.pt").write_bytes(b"keep me")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "linkfile.pt").symlink_to(outside / "precious.pt")


def test_removing_files_keeps_the_rest_and_never_follows_a_link(tmp_path: Path) -> None:
    store, outside = DirectoryStorageManager(tmp_path / "store"), tmp_path / "outside"
    make(tmp_path / "store" / "ck", outside)
    left = store.remove_files("ck", ["**/*.pt"])
    # The link to a file outside is removed itself; the linked directory is not entered.
    assert left == {"notes.txt": 1, "optimizer/": 0}
    assert (outside / "precious.pt").read_bytes() == b"keep me"
    assert not (tmp_path / "store" / "ck" / "linkfile.pt").is_symlink()
    assert (tmp_path / "store" / "ck" / "linkdir").is_symlink()
    assert store.list_files("ck") == {"notes.txt": 1, "optimizer/": 0}

    # A glob that names the linked directory removes the link, not the directory it names.
    assert store.remove_files("ck", ["linkdir"]) == {"notes.txt": 1, "optimizer/": 0}
    assert not os.path.lexists(tmp_path / "store" / "ck" / "linkdir")
    assert (outside / "precious.pt").exists()

    # No file left: the checkpoint goes entirely.
    assert store.remove_files("ck", ["*.txt"]) == {}
    assert not (tmp_path / "store" / "ck").exists()
    assert (outside / "precious.pt").exists()


def test_no_glob_removes_nothing_and_lists_the_checkpoint_again(tmp_path: Path) -> None:
    store = DirectoryStorageManager(tmp_path / "store")
    make(tmp_path / "store" / "ck", tmp_path / "outside")
    before = store.list_files("ck")
    assert store.remove_files("ck", []) == before
    assert store.remove_files("absent", ["*"]) == {}


def test_a_checkpoint_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    store = DirectoryStorageManager(tmp_path / "store")
    (tmp_path / "store").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.pt").write_bytes(b"x")
    (tmp_path / "store" / "ck").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeCheckpointError):
        store.remove_files("ck", ["*.pt"])
    assert (tmp_path / "elsewhere" / "a.pt").exists()


def test_a_directory_swapped_for_a_link_after_the_listing_is_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "ck", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.pt").write_bytes(b"x")
    outside.mkdir()
    (outside / "a.pt").write_bytes(b"precious")
    with Tree(root, checkpoint=True) as tree:
        assert "sub/a.pt" in tree.resources
        (root / "sub" / "a.pt").unlink()
        (root / "sub").rmdir()
        (root / "sub").symlink_to(outside, target_is_directory=True)  # the race
        with pytest.raises(UnsafeCheckpointError):
            tree.remove("sub/a.pt")
    assert (outside / "a.pt").read_bytes() == b"precious"


def test_a_bucket_removes_matching_keys_and_what_is_under_a_matching_directory() -> None:
    bucket = MemoryBucket()
    bucket.objects = {
        "p/ck/model.pt": b"m",
        "p/ck/optimizer/": b"",
        "p/ck/optimizer/state.pt": b"ss",
        "p/ck/logs/a.txt": b"aaa",
        "p/other/model.pt": b"o",
    }
    assert bucket.remove_files("ck", ["optimizer", "*.pt"]) == {"logs/a.txt": 3}
    assert sorted(bucket.objects) == ["p/ck/logs/a.txt", "p/other/model.pt"]
    assert bucket.remove_files("ck", ["**/*.txt"]) == {}
    assert sorted(bucket.objects) == ["p/other/model.pt"]
