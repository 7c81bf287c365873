"""The machines' cache (``DET_MACHINES_CACHE``, tests/e2e/machines.py) without machines: one
session at a time holds it, another falls back to fresh volumes and a temporary registry and
says so; each cache directory has its own engine volumes; a machine's pulled task image must be
the host's (a changed image reaches a warm machine) and the cached engine keeps no other."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.e2e import machines as mm

REPO = Path(__file__).resolve().parents[2]


def test_a_held_cache_sends_the_next_session_uncached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    with mm.session_cache(str(cache)) as (held, how):
        assert held == cache.resolve() and how == f"cache {cache.resolve()}"
        with mm.session_cache(str(cache)) as (second, why):
            assert second is None
            assert "held by another session" in why and str(cache.resolve()) in why
        assert "machines: uncached: DET_MACHINES_CACHE=" in capsys.readouterr().err
    # Released at the end: the next session gets it.
    with mm.session_cache(str(cache)) as (again, _):
        assert again == cache.resolve()
    with mm.session_cache(None) as (none, how):
        assert none is None and how == "uncached"


def test_a_cache_held_by_another_process_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from tests.cache_lock import cache_lock
            with cache_lock(Path({str(cache)!r})):
                print("held", flush=True)
                sys.stdin.read()
            """)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        with mm.session_cache(str(cache)) as (held, why):
            assert held is None and "held by another session" in why
        holder.stdin.close()
        holder.wait(timeout=30)
    with mm.session_cache(str(cache)) as (held, _):
        assert held == cache.resolve()


def test_machines_falls_back_to_fresh_volumes_and_a_temporary_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    seen: list[tuple[Path | None, str]] = []

    @contextlib.contextmanager
    def fake(
        tmp: Path, n: int, shared: Sequence[Path], c: Path | None, how: str
    ) -> Iterator[mm.Machines]:
        seen.append((c, how))
        yield mm.Machines("net", "10.0.0.1", "10.0.0.1:5000", [], {}, how)

    monkeypatch.setattr(mm, "_machines", fake)
    monkeypatch.setenv("DET_MACHINES_CACHE", str(cache))
    with mm.machines(tmp_path, 4) as first:
        with mm.machines(tmp_path, 4) as second:
            assert second.report().startswith("uncached: DET_MACHINES_CACHE=")
        assert first.cache == f"cache {cache.resolve()}"
    assert [c for c, _ in seen] == [cache.resolve(), None]
    # Each cache directory its own volumes: two directories' sessions never share an engine's.
    a, b = mm.cache_volume(cache.resolve(), 0), mm.cache_volume(tmp_path / "other", 0)
    assert a != b and a.startswith(mm.CACHE_VOLUME_PREFIX) and a.endswith("-0")


class FakeEngine:
    """A machine's engine as `docker exec NAME docker ...` sees it: references to image IDs."""

    def __init__(self, refs: dict[str, str], pulled_id: str) -> None:
        self.refs = dict(refs)
        self.pulled_id = pulled_id
        self.calls: list[tuple[str, ...]] = []

    def run(self, *cmd: str, timeout: float = 600, check: bool = True) -> str:
        self.calls.append(cmd)
        assert cmd[:3] == ("docker", "exec", "m0")
        args = cmd[3:]
        if args[:2] == ("sh", "-c"):
            return ""
        if args[:2] == ("docker", "pull"):
            self.refs[args[-1]] = self.pulled_id
            return ""
        if args[:3] == ("docker", "image", "inspect"):
            return self.refs[args[-1]] + "\n"
        if args[:3] == ("docker", "image", "ls"):
            return "\n".join(self.refs) + "\n"
        if args[:2] == ("docker", "rmi"):
            for r in args[2:]:
                del self.refs[r]
            return ""
        raise AssertionError(cmd)


def test_a_changed_task_image_replaces_the_cached_one(monkeypatch: pytest.MonkeyPatch) -> None:
    image = f"10.0.0.1:5001/{mm.TASK_IMAGE}"
    # The last session's port and the old image, both kept in the warm engine.
    engine = FakeEngine({f"10.0.0.1:4999/{mm.TASK_IMAGE}": "sha256:old"}, "sha256:new")
    monkeypatch.setattr(mm, "run", engine.run)
    mm._pull(mm.Machine("m0", "v0"), image, "10.0.0.1:5001", "sha256:new", cached=True)
    assert engine.refs == {image: "sha256:new"}
    assert any(c[3:] == ("sh", "-c", "docker image prune -f >/dev/null") for c in engine.calls)


def test_a_pull_that_is_not_the_hosts_image_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    image = f"10.0.0.1:5001/{mm.TASK_IMAGE}"
    engine = FakeEngine({}, "sha256:stale")
    monkeypatch.setattr(mm, "run", engine.run)
    with pytest.raises(RuntimeError, match=r"pulled .* as sha256:stale, the host has sha256:new"):
        mm._pull(mm.Machine("m0", "v0"), image, "10.0.0.1:5001", "sha256:new", cached=False)
