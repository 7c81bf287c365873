"""Packing a context directory: .detignore (gitignore syntax), always-left-out files, 95 MB."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from det.cli.context import MAX_BYTES, collect, pack
from det.cli.errors import UsageError


def tree(root: Path, files: dict[str, str | int]) -> Path:
    """Files by relative path: text content, or an int for a sparse file of that size."""
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, int):
            with open(p, "wb") as f:
                f.truncate(content)
        else:
            p.write_text(content)
    return root


def files_of(root: Path) -> set[str]:
    return {rel for rel, p in collect(root) if p.is_file()}


def test_everything_is_sent_without_a_detignore(tmp_path: Path) -> None:
    tree(tmp_path, {"train.py": "x", "pkg/model.py": "y", "data/a.csv": "1"})
    assert files_of(tmp_path) == {"train.py", "pkg/model.py", "data/a.csv"}


def test_pycache_and_pyc_are_always_left_out(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "train.py": "x",
            "__pycache__/train.cpython-311.pyc": "b",
            "pkg/__pycache__/m.cpython-311.pyc": "b",
            "pkg/old.pyc": "b",
            # A .detignore cannot bring them back.
            ".detignore": "!*.pyc\n!__pycache__/\n",
        },
    )
    assert files_of(tmp_path) == {"train.py"}
    assert not any("__pycache__" in rel for rel, _ in collect(tmp_path))


def test_detignore_uses_gitignore_syntax(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            ".detignore": "\n".join(
                [
                    "# comments and blank lines are ignored",
                    "",
                    "data/",  # a directory anywhere
                    "*.log",  # a glob anywhere
                    "!keep.log",  # negation
                    "/build",  # anchored to the root
                    "docs/**/*.png",  # ** across directories
                    "secret.txt",
                ]
            ),
            "train.py": "x",
            "data/big.csv": "1",
            "pkg/data/more.csv": "1",
            "run.log": "l",
            "pkg/run.log": "l",
            "keep.log": "k",
            "build/out.o": "o",
            "pkg/build/keep.py": "k",
            "docs/a/b/pic.png": "p",
            "docs/readme.md": "r",
            "pkg/secret.txt": "s",
        },
    )
    assert files_of(tmp_path) == {
        "train.py",
        "keep.log",
        "pkg/build/keep.py",
        "docs/readme.md",
    }


def test_pack_gives_determined_file_entries(tmp_path: Path) -> None:
    tree(tmp_path, {"train.py": "print(1)\n", "pkg/m.py": "x = 1\n"})
    os.chmod(tmp_path / "train.py", 0o755)
    entries = {e["path"]: e for e in pack(tmp_path)}
    assert set(entries) == {"train.py", "pkg", "pkg/m.py"}
    assert entries["pkg"]["type"] == 53 and entries["pkg"]["content"] == ""
    f = entries["train.py"]
    assert f["type"] == 48
    assert base64.b64decode(f["content"]) == b"print(1)\n"
    assert f["mode"] == 0o755


def test_over_95_mb_names_the_largest_files(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "train.py": "x",
            "weights/huge.bin": 60 * 1024 * 1024,
            "data/big.npz": 40 * 1024 * 1024,
            "small.txt": 1000,
        },
    )
    with pytest.raises(UsageError) as info:
        pack(tmp_path)
    msg = str(info.value)
    assert "95 MB" in msg and ".detignore" in msg
    assert msg.index("weights/huge.bin") < msg.index("data/big.npz")
    assert "train.py" in msg or "small.txt" in msg  # up to five files are named
    assert info.value.exit_code == 2


def test_ignored_files_do_not_count_toward_the_limit(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {"train.py": "x", "weights/huge.bin": MAX_BYTES + 1, ".detignore": "weights/\n"},
    )
    assert [e["path"] for e in pack(tmp_path)] == ["train.py"]


def test_exactly_the_limit_is_allowed(tmp_path: Path) -> None:
    tree(tmp_path, {"blob.bin": MAX_BYTES})
    assert [e["path"] for e in pack(tmp_path)] == ["blob.bin"]


def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        collect(tmp_path / "nope")
