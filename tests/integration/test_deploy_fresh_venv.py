"""A new user's first ``det deploy``: the install line of docs/deploy.md's "Install" section
(``python3 -m venv .venv && .venv/bin/pip install -e '.[deploy]'`` in a clone, read from the
doc, run as written) and nothing else, on Python 3.11 (Debian bookworm: setuptools 66 without ``wheel``, where building det's
wheel with ``--no-build-isolation`` failed with "invalid command 'bdist_wheel'") and on 3.13
(trixie: no setuptools at all).

Each venv is made in a container of the det-base image with no network; the wheels come from a
wheelhouse on this machine, downloaded once per pyproject.toml (``DET_FRESH_VENV_CACHE``,
default ``.cache/fresh-venv``; pip's own HTTP cache serves repeats), as the Python 3.13 stage
does. In the venv, without the Pulumi CLI, Docker or credentials, ``det deploy gcp up`` and
``det deploy aws up`` stop in preflight naming all three, before any wheel is built; and det's wheel builds from a source tree
with what that venv has plus the index pip is given (an isolated build).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from det.common.distribution import DISTRIBUTION, WHEEL_PREFIX
from tests.cache_lock import cache_lock

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IMAGES = {"3.11": "det-base:bookworm", "3.13": "det-base:trixie"}
# Bump when the way the wheelhouse is made changes.
CACHE_VERSION = "1"


def deploy_requirements(python: str) -> list[str]:
    """det-platform[deploy]'s requirements (its own extras expanded), markers evaluated for
    ``python``, plus what pip's isolated build of det needs (pyproject's build-system)."""
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = doc["project"]
    env = {**default_environment(), "python_version": python, "python_full_version": f"{python}.0"}
    out: set[str] = set(doc["build-system"]["requires"])
    todo, seen = ["", "deploy"], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        lines = project["dependencies"] if extra == "" else project["optional-dependencies"][extra]
        for line in lines:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
                continue
            if canonicalize_name(req.name) == canonicalize_name(DISTRIBUTION):
                todo.extend(req.extras)
                continue
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            out.add(f"{req.name}{extras}{req.specifier}")
    return sorted(out)


def wheelhouse(python: str) -> Path:
    base = Path(os.environ.get("DET_FRESH_VENV_CACHE") or REPO / ".cache" / "fresh-venv")
    reqs = deploy_requirements(python)
    key = hashlib.sha256("\n".join([CACHE_VERSION, python, *reqs]).encode()).hexdigest()[:12]
    out = base / f"cp{python.replace('.', '')}"
    with cache_lock(out):
        _fill(out, python, key, reqs)
    return out


def _fill(out: Path, python: str, key: str, reqs: list[str]) -> None:
    stamp = out / f".complete-{key}"
    if stamp.exists():
        return
    abi = f"cp{python.replace('.', '')}"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--dest", str(out), "--find-links", str(out), "--only-binary=:all:",
         "--python-version", python, "--implementation", "cp", "--abi", abi,
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "manylinux2014_x86_64", *reqs],
        check=True, timeout=1800,
    )  # fmt: skip
    for old in out.glob(".complete-*"):
        old.unlink()
    stamp.touch()


def source_copy(dest: Path) -> Path:
    """The files git tracks or would track (no .venv, build/ or egg-info)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, files):
        src = REPO / name.decode()
        if src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())
    return dest


def doc_install_line() -> str:
    """The line of docs/deploy.md's Install block that makes the venv and installs det."""
    text = (REPO / "docs" / "deploy.md").read_text()
    block = text.split("## Install", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    (line,) = [line for line in block.splitlines() if "pip install" in line]
    return line.strip()


SCRIPT = r"""
set -u
python3 --version
cp -r /src /tmp/src && cp -r /src /tmp/tree
cd /tmp/src
python3 -m venv .venv && ln -s /tmp/src/.venv /tmp/v
/tmp/v/bin/pip list --format=freeze 2>/dev/null | sed 's/^/before: /'
echo "install: $DOC_INSTALL"
env PIP_QUIET=1 PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 \
  bash -c "$DOC_INSTALL" || { echo "install failed"; exit 3; }
cd /
mkdir -p /tmp/t /tmp/home
for cloud in gcp aws; do
  if [ $cloud = gcp ]; then flags="--project-id p-123456"; else flags="--keypair k"; fi
  env -i PATH=/tmp/v/bin:/usr/bin:/bin HOME=/tmp/home TMPDIR=/tmp/t \
    det deploy $cloud up --cluster-id c1 --yes --initial-user-password Sup3r-secret-pw $flags \
    >/tmp/$cloud.out 2>/tmp/$cloud.err
  echo "$cloud rc=$?"
  sed "s/^/$cloud err: /" /tmp/$cloud.err
done
echo "tmp files: $(find /tmp/t -mindepth 1 | wc -l)"
echo "built: $(find / -xdev -name 'det_platform-*.whl' 2>/dev/null | wc -l)"
env PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 /tmp/v/bin/python -c '
from pathlib import Path
from det.deploy.common import release
wheel = release.build_from_source(Path("/tmp/tree"), Path("/tmp/out"))
print("wheel:", wheel.name)
'
"""


# The venv's pip install in the container is allowed the 1800 s its subprocess gets, not the
# suite's 600 s: on a loaded machine the 3.13 case passed 600 s inside a healthy install.
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("python", sorted(IMAGES))
def test_a_fresh_venv_stops_in_preflight_naming_pulumi_and_builds_the_wheel(
    python: str, tmp_path: Path
) -> None:
    image = IMAGES[python]
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
        pytest.skip(f"image {image} missing: bash infra/build-images.sh")
    wheels = wheelhouse(python)
    src = source_copy(tmp_path / "src")
    # PIP_COMPILE=false: as for every test's pip (tests/conftest.py); Python compiles what it imports.
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{src}:/src:ro",
         "-v", f"{wheels}:/wheels:ro", "-e", "PIP_COMPILE=false",
         "-e", f"DOC_INSTALL={doc_install_line()}", image, "bash", "-c", SCRIPT],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.startswith(f"Python {python}."), out  # the image's python3, which made the venv
    if python == "3.11":
        # The environment of the issue: setuptools older than 70.1, no wheel package.
        assert "before: setuptools==66" in out and "before: wheel==" not in out, out
    assert "install: python3 -m venv .venv && .venv/bin/pip install -e '.[deploy]'" in out, out
    for cloud in ("gcp", "aws"):
        assert f"{cloud} rc=1" in out, out
        errors = [line for line in out.splitlines() if line.startswith(f"{cloud} err: ")]
        # One error listing all this machine lacks (common.preflight.require_local).
        assert "this machine lacks what `up` needs" in errors[0], out
        heads = [e.split(": ")[1] for e in errors[1:]]
        assert heads == ["  - pulumi", "  - docker", "  - credentials"], out
        assert "Pulumi CLI is not on PATH" in errors[1], out
    assert "tmp files: 0" in out and "built: 0" in out, out  # no wheel before preflight
    assert f"wheel: {WHEEL_PREFIX}-" in out, out
