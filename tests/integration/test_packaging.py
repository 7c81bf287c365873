"""Each extra in a fresh venv gives commands that start: ``pip install '.[EXTRA]'``, then the
entry points' ``--help`` (and, for ``deploy``, an offline dry run of both clouds' programs).

Every install gets all three console scripts, so ``det`` must start in each of them. To stay
fast the dependencies are wheels in a cache kept between runs (``$DET_WHEELHOUSE``, default
``.cache/wheelhouse``; refilled when pyproject.toml changes), det's own wheel is built once per
session, and each venv installs from those two folders only (``--no-index``: no package named
``det`` can come from a public index).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cache_lock import cache_lock

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXTRAS_UNDER_TEST = "master,agent,aws,gcp,deploy"

# extra -> commands that must exit 0 (and print their usage where they are --help).
CASES: dict[str, list[list[str]]] = {
    "": [["det", "--help"], ["det", "experiment", "create", "--help"]],
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
    _pip(
        sys.executable, "--python", str(venv / "bin" / "python"), "install", "--quiet",
        "--no-compile", "--no-index",
        "--find-links", str(det_wheel.parent), "--find-links", str(wheelhouse), requirement,
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
        if "--help" in cmd:
            assert done.stdout.startswith("usage:"), done.stdout[:200]
        else:
            assert "Nothing was created" in done.stdout, done.stdout[-500:]
    print(
        f"{requirement}: venv + install {installed:.1f} s, total {time.monotonic() - start:.1f} s"
    )
