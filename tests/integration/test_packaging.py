"""The release check. The sdist and the wheel carry the same, complete metadata; each extra of
the wheel in a fresh venv gives commands that start: ``pip install 'det_platform-….whl[EXTRA]'``
(by uv's pip interface where the dev install has uv),
then ``det --version``, the entry points' ``--help`` (and, for ``deploy``, an offline dry run of
both clouds' programs).

Every install gets all three console scripts, so ``det`` must start in each of them. To stay
fast the dependencies are wheels in a cache kept between runs (``$DET_WHEELHOUSE``, default
``.cache/wheelhouse``; refilled when pyproject.toml changes), det's own wheel is built once per
session, and each venv installs from those two folders only (``--no-index``: no package named
``det`` can come from a public index).
"""

from __future__ import annotations

import email
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cache_lock import cache_lock

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXTRAS_UNDER_TEST = "master,agent,aws,gcp,deploy"

# extra -> commands that must exit 0 (and print their usage where they are --help).
CASES: dict[str, list[list[str]]] = {
    "": [["det", "--version"], ["det", "--help"], ["det", "experiment", "create", "--help"]],
    "cli": [["det", "--help"], ["det", "user", "--help"]],
    "master": [["det-master", "--help"], ["det", "--help"]],
    "agent": [["det-agent", "--help"], ["det", "--help"]],
    "aws": [["det", "--help"]],
    "gcp": [["det", "--help"]],
    "deploy": [
        ["det", "--help"],
        ["det", "deploy", "aws", "up", "--help"],
        ["det", "deploy", "gcp", "up", "--help"],
        ["det", "deploy", "aws", "up", "--cluster-id", "pkg", "--keypair", "k", "--dry-run"],
        ["det", "deploy", "gcp", "up", "--cluster-id", "pkg", "--project-id", "p", "--dry-run"],
    ],
}


def _pip(python: str | Path, *args: str, cwd: Path | None = None) -> None:
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{tail}")


def _install(python: Path, *args: str) -> None:
    """``pip install ARGS`` into the venv of ``python``: by uv's pip interface where uv is beside
    this interpreter (the dev install has it, scripts/lib.sh), which keeps each wheel unpacked
    in its cache and links it into the venv: the file took 44 CPU-s with pip's installs (each
    unzips every wheel again), 31 with uv's (0.1-0.9 s a venv); else pip."""
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        _pip(sys.executable, "--python", str(python), "install", "--quiet", "--no-compile", *args)
        return
    cmd = [str(uv), "pip", "install", "--quiet", "--python", str(python), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{tail}")


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    return fill_wheelhouse()


def fill_wheelhouse() -> Path:
    """The dependencies of every extra as wheels (no det wheel in it). `.ci/run` fills it before
    the tests, beside `make check`."""
    path = Path(os.environ.get("DET_WHEELHOUSE") or REPO / ".cache" / "wheelhouse")
    with cache_lock(path):
        _fill(path)
    return path


def _fill(path: Path) -> None:
    stamp = (
        path
        / f".complete-{hashlib.sha256((REPO / 'pyproject.toml').read_bytes()).hexdigest()[:12]}"
    )
    if not stamp.exists():
        start = time.monotonic()
        _pip(
            sys.executable, "wheel", "--quiet", "--wheel-dir", str(path), "--find-links",
            str(path), f".[{EXTRAS_UNDER_TEST}]", cwd=REPO,
        )  # fmt: skip
        for old in path.glob(".complete-*"):
            old.unlink()
        stamp.touch()
        print(f"wheelhouse filled in {time.monotonic() - start:.1f} s")
    for det_wheel in path.glob("det_platform-*.whl"):
        det_wheel.unlink()  # det itself comes fresh from this checkout (det_wheel)


@pytest.fixture(scope="session")
def det_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("det-wheel")
    # A copy, so the build writes nothing into the checkout (build/, *.egg-info).
    src = out / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info", "node_modules", "__pycache__"),
    )  # fmt: skip
    _pip(
        sys.executable, "wheel", "--quiet", "--no-deps", "--no-build-isolation",
        "--wheel-dir", str(out), str(src),
    )  # fmt: skip
    (wheel,) = out.glob("det_platform-*.whl")
    return wheel


@pytest.fixture
def clean_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("DET_")
    }
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    yield env


@pytest.mark.parametrize("extra", list(CASES), ids=lambda e: e or "base")
def test_every_extra_gives_commands_that_start(
    extra: str, wheelhouse: Path, det_wheel: Path, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    venv = tmp_path / "venv"
    start = time.monotonic()
    # No pip inside (ensurepip takes seconds): this pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    requirement = f"det-platform[{extra}]" if extra else "det-platform"
    _install(
        venv / "bin" / "python",
        "--no-index", "--find-links", str(det_wheel.parent), "--find-links", str(wheelhouse),
        requirement,
    )  # fmt: skip
    installed = time.monotonic() - start
    for cmd in CASES[extra]:
        done = subprocess.run(
            [str(venv / "bin" / cmd[0]), *cmd[1:]],
            capture_output=True,
            text=True,
            env=clean_env,
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0, f"{requirement}: {' '.join(cmd)}: {done.stderr[-2000:]}"
        if "--version" in cmd:
            assert done.stdout.strip() == f"det {_project()['version']}", done.stdout
        elif "--help" in cmd:
            assert done.stdout.startswith("usage:"), done.stdout[:200]
        else:
            assert "Nothing was created" in done.stdout, done.stdout[-500:]
    print(
        f"{requirement}: venv + install {installed:.1f} s, total {time.monotonic() - start:.1f} s"
    )


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def _source_copy(dest: Path) -> Path:
    shutil.copytree(
        REPO,
        dest,
        ignore=shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info", "node_modules", "__pycache__"),
    )  # fmt: skip
    return dest


def test_the_sdist_and_the_wheel_carry_the_same_complete_metadata(
    det_wheel: Path, tmp_path: Path
) -> None:
    src = _source_copy(tmp_path / "src")
    # setuptools' own PEP 517 hook (the build backend pyproject names), in a copy of the tree.
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         "print(b.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=src, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    sdist = tmp_path / "dist" / done.stdout.strip().splitlines()[-1]
    project = _project()
    assert sdist.name == f"det_platform-{project['version']}.tar.gz"
    with tarfile.open(sdist) as tar:
        root = sdist.name.removesuffix(".tar.gz")
        members = set(tar.getnames())
        pkg_info = tar.extractfile(f"{root}/PKG-INFO")
        assert pkg_info is not None
        sdist_meta = email.message_from_bytes(pkg_info.read())
    assert {f"{root}/pyproject.toml", f"{root}/README.md"} <= members
    with zipfile.ZipFile(det_wheel) as whl:
        dist_info = f"det_platform-{project['version']}.dist-info"
        wheel_meta = email.message_from_bytes(whl.read(f"{dist_info}/METADATA"))
        entry_points = whl.read(f"{dist_info}/entry_points.txt").decode()
        names = whl.namelist()
    for meta in (sdist_meta, wheel_meta):
        assert meta["Name"] == project["name"] == "det-platform"
        assert meta["Version"] == project["version"]
        assert meta["Requires-Python"] == project["requires-python"]
        assert set(meta.get_all("Provides-Extra") or []) >= set(project["optional-dependencies"])
        assert meta["Summary"] and (meta["License"] or meta["License-Expression"])
    assert sorted(wheel_meta.get_all("Requires-Dist") or []) == sorted(
        sdist_meta.get_all("Requires-Dist") or []
    )
    for script in ("det =", "det-master =", "det-agent ="):
        assert script in entry_points, entry_points
    assert "det/deploy/common/names.py" in names and "det/master/webui/app.js" in names
    assert not [n for n in names if n.startswith("tests/")]
