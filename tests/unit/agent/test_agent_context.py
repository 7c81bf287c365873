from __future__ import annotations

import io
import tarfile

import pytest

from det.agent.context import BadContext, context_tar
from tests.fakes.master import make_tgz


def _members(tar_bytes: bytes) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for m in tar:
            f = tar.extractfile(m) if m.isreg() else None
            out[m.name] = f.read() if f else None
    return out


def test_context_is_rerooted_under_the_workdir_with_its_parents() -> None:
    tgz = make_tgz({"train.py": "print(1)\n", "cfg/model.yaml": "a: 1\n", ".detignore": "x\n"})
    members = _members(context_tar(tgz, "/run/determined/workdir"))
    assert members == {
        "run": None,
        "run/determined": None,
        "run/determined/workdir": None,
        "run/determined/workdir/train.py": b"print(1)\n",
        "run/determined/workdir/cfg/model.yaml": b"a: 1\n",
        "run/determined/workdir/.detignore": b"x\n",
    }


def test_empty_context_still_creates_the_workdir() -> None:
    assert _members(context_tar(b"", "/work")) == {"work": None}


def test_members_escaping_the_workdir_are_dropped() -> None:
    tgz = make_tgz({"../evil": "x", "/etc/passwd": "x", "./ok.txt": "fine", "a/../b.txt": "y"})
    members = _members(context_tar(tgz, "/w"))
    assert members == {"w": None, "w/ok.txt": b"fine", "w/b.txt": b"y"}


def test_garbage_is_a_bad_context() -> None:
    with pytest.raises(BadContext):
        context_tar(b"definitely not a tarball", "/w")


def test_an_agent_user_owns_the_workdir_and_the_context_by_number() -> None:
    tar = context_tar(make_tgz({"train.py": "print(1)\n"}), "/run/determined/workdir", (4321, 99))
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        owners = {m.name: (m.uid, m.gid, m.uname) for m in tf.getmembers()}
    assert owners["run"][:2] == (0, 0)  # the image's /run stays root's
    for name in ("run/determined", "run/determined/workdir", "run/determined/workdir/train.py"):
        assert owners[name] == (4321, 99, ""), (name, owners[name])


def test_the_ready_marker_is_the_last_member_empty_and_root_owned() -> None:
    tgz = make_tgz({"train.py": "print(1)\n", "data/x.bin": "y" * 1000})
    ready = "/run/det/context-abc.ready"
    with tarfile.open(fileobj=io.BytesIO(context_tar(tgz, "/w", (4321, 99), ready))) as tar:
        members = tar.getmembers()
    last = members[-1]
    assert last.name == "run/det/context-abc.ready" and last.isreg()
    assert (last.size, last.uid, last.gid, last.mode) == (0, 0, 0, 0o444)
    assert {"w", "w/train.py", "w/data/x.bin"} <= {m.name for m in members[:-1]}
    assert all(m.uid == 4321 for m in members[:-1])
    assert not any(n.endswith(".ready") for n in _members(context_tar(tgz, "/w")))
