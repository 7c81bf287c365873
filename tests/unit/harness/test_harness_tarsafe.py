"""det.common.tarsafe: an archive's members land under the destination, on a Python with
extraction filters and on one without (Debian 12's 3.11.2), whose check is exercised directly."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from det.common import tarsafe

Extract = Callable[[tarfile.TarFile, Path], None]
# Python's filter refuses with its FilterError (3.11.4 on); det's check with UnsafeArchiveError.
REFUSED = (tarsafe.UnsafeArchiveError, getattr(tarfile, "FilterError", tarsafe.UnsafeArchiveError))
BOTH = [pytest.param(tarsafe.extract_all, id="extract_all"),
        pytest.param(tarsafe.extract_checked, id="without-filters")]  # fmt: skip


def _archive(*members: tuple[str, bytes | None, bytes]) -> bytes:
    """(name, data or None for a directory, type) members as a gzip tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            if data is not None:
                info.size = len(data)
            info.mode = 0o4777 if kind == tarfile.REGTYPE else 0o755
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


@pytest.mark.parametrize("extract", BOTH)
def test_files_and_directories_land_under_the_destination(extract: Extract, tmp_path: Path) -> None:
    data = _archive(("model", None, tarfile.DIRTYPE), ("model/w.bin", b"weights", tarfile.REGTYPE))
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|gz") as tf:
        extract(tf, tmp_path)
    assert (tmp_path / "model" / "w.bin").read_bytes() == b"weights"
    assert (tmp_path / "model" / "w.bin").stat().st_mode & 0o7022 == 0  # no set-id, no o/g write


@pytest.mark.parametrize("extract", BOTH)
@pytest.mark.parametrize("kind", ["dotdot", "absolute", "link-out"])
def test_nothing_lands_outside_the_destination(extract: Extract, kind: str, tmp_path: Path) -> None:
    """Refused, or (Python's filter, for an absolute name) put under the destination."""
    dst = tmp_path / "dst"
    dst.mkdir()
    outside = tmp_path / "evil"
    member = {
        "dotdot": ("../evil", b"x", tarfile.REGTYPE),
        "absolute": (str(outside), b"x", tarfile.REGTYPE),
        "link-out": ("link", None, tarfile.SYMTYPE),
    }[kind]
    with tarfile.open(fileobj=io.BytesIO(_archive(member)), mode="r|gz") as tf:
        try:
            extract(tf, dst)
            refused = False
        except REFUSED:
            refused = True
    assert not outside.exists()
    assert not (dst / "link").is_symlink()
    # det's own check refuses each; Python's filter refuses all but the absolute name.
    assert refused or (kind == "absolute" and extract is tarsafe.extract_all)
