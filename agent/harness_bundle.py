"""The harness bundle: det's task-side code, mounted read-only into every task container.

A task image needs nothing of det: the agent builds, once per det version, a directory that holds
det's task-side packages (``det.common``, ``det.core``, ``det.exec``, ``det.launch``,
``det.storage``; Python sources only) and pure-Python copies of their one dependency, ``requests``
(with ``urllib3``, ``idna``, ``charset_normalizer``, ``certifi``), in ``det/_vendor``::

    <state_dir>/harness/<det version>-<digest>/det/...
                                              /det/_vendor/requests/...

Every container gets it at :data:`CONTAINER_PATH` (a read-only bind mount) with that path first
on ``PYTHONPATH``, so ``python3 -m det.exec.run`` runs on whatever ``python3`` the image has,
3.8 to 3.13. Only the name ``det`` is shadowed (the bundle's det is the one that matches the
master); ``det/__init__.py`` appends ``_vendor`` at the *end* of ``sys.path``, so the image's own
``requests``/``urllib3`` (or the official ``determined`` package) always win over the copies.

The vendored copies are downloaded by pip for the oldest Python we support
(:data:`OLDEST_PYTHON`, pure wheels only), so pip's own settings apply (``PIP_INDEX_URL``,
``PIP_FIND_LINKS`` with ``PIP_NO_INDEX=1`` for an offline agent). Without pip or an index the
agent copies the sources its own environment has (compiled modules left out), and logs that
the floor is then what those versions support.

The bundle is compiled (``__pycache__/*.cpython-XY.pyc``) by the agent's own interpreter when it
is built: a read-only mount cannot take the ``.pyc`` files Python would write, so without them
every process of every task compiled det again (about 30 ms of CPU in the training process and
10 ms in ``det.exec.run``, measured in the torch image). An image whose ``python3`` is another
version than the agent's finds no ``.pyc`` of its own tag there and compiles in memory as before.
The files are written by the agent, never by a task (a task's interpreter could write anything
that other tasks would then load).

The digest covers the task-side sources and this recipe, so a changed det builds a new
directory; old ones are left alone (a container that is still running may have one mounted).
Builds are atomic (a temporary directory renamed into place) and safe between processes.
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker.types

from det.agent.errors import BundleError as BundleError

logger = logging.getLogger(__name__)

CONTAINER_PATH = "/run/det/harness"
TASK_PACKAGES = ("common", "core", "exec", "launch", "storage")
VENDORED = ("requests", "urllib3", "idna", "charset_normalizer", "certifi")
OLDEST_PYTHON = "3.8"
_RECIPE = f"2 {OLDEST_PYTHON} {' '.join(VENDORED)} {' '.join(TASK_PACKAGES)}"
_COMPLETE = ".complete"
_SKIP_SUFFIXES = (".so", ".pyd", ".pyc", ".c", ".pyi")


def python_path(existing: str | None) -> str:
    """``PYTHONPATH`` for a task container: the bundle first, then what the image or the
    experiment had (pure)."""
    parts = [CONTAINER_PATH]
    parts += [p for p in (existing or "").split(":") if p and p != CONTAINER_PATH]
    return ":".join(parts)


def image_env(env_list: Iterable[str] | None, name: str) -> str | None:
    """The value of ``name`` in an image's ``Config.Env`` list (``KEY=VALUE`` items), if any."""
    for item in env_list or []:
        key, sep, value = str(item).partition("=")
        if sep and key == name:
            return value
    return None


def det_source_dir() -> Path:
    """Where this installation's ``det`` package (the harness) lives."""
    spec = importlib.util.find_spec("det")
    if spec is None or not spec.submodule_search_locations:
        raise BundleError("the det package is not importable")
    for location in spec.submodule_search_locations:
        if (Path(location) / "core").is_dir():
            return Path(location)
    raise BundleError("the installed det package has no det.core")


def _task_files(source: Path) -> list[Path]:
    """The task-side files of det, relative to ``source``, in a stable order."""
    if not (source / "__init__.py").is_file():
        raise BundleError(f"{source} is not the det package (no __init__.py)")
    files = [Path("__init__.py")]
    for package in TASK_PACKAGES:
        root = source / package
        if not (root / "__init__.py").is_file():
            raise BundleError(f"det.{package} is missing from {source}")
        for path in sorted(root.rglob("*")):
            if (
                path.is_file()
                and path.suffix in (".py", ".typed")
                and "__pycache__" not in path.parts
            ):
                files.append(path.relative_to(source))
    return files


def digest(source: Path) -> str:
    """A short hash of the task-side sources and the bundle recipe."""
    h = hashlib.sha256(_RECIPE.encode())
    for rel in _task_files(source):
        h.update(str(rel).encode() + b"\0" + (source / rel).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def build(root: Path, source: Path | None = None, version: str | None = None) -> Path:
    """The bundle directory under ``root`` for this det, built if it is not there yet."""
    source = source or det_source_dir()
    tag = digest(source)  # first: it names a missing task-side package
    version = version or _det_version(source)
    target = root / f"{version}-{tag}"
    if (target / _COMPLETE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        det_dir = work / "det"
        for rel in _task_files(source):
            (det_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, det_dir / rel)
        vendor(det_dir / "_vendor")
        compile_sources(det_dir)
        (work / _COMPLETE).write_text(f"{version}\n")
        _make_readable(work)
        try:
            os.rename(work, target)
        except OSError:
            if not (target / _COMPLETE).is_file():  # not a concurrent build that won the race
                raise
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    logger.info("harness bundle for det %s built at %s", version, target)
    return target


def compile_sources(det_dir: Path) -> None:
    """``.pyc`` files for this interpreter beside the sources (best effort: a module this Python
    cannot compile is compiled, or refused, by the task's own interpreter as before)."""
    ok = compileall.compile_dir(str(det_dir), quiet=2, workers=1)
    if not ok:
        logger.warning(
            "some harness sources in %s did not compile for Python %s",
            det_dir,
            sys.version.split()[0],
        )


def vendor(dest: Path) -> None:
    """Pure-Python copies of the harness's dependencies in ``dest``: wheels for the oldest
    supported Python from pip, else the agent's own sources."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="det-harness-wheels-") as wheels:
        problem = _pip_download(Path(wheels))
        if problem is None:
            for wheel in sorted(Path(wheels).glob("*.whl")):
                with zipfile.ZipFile(wheel) as z:
                    z.extractall(dest)
            return
    logger.warning(
        "cannot download the harness's dependencies for Python %s (%s); copying this"
        " environment's instead (the oldest Python they run on is theirs to say)",
        OLDEST_PYTHON,
        problem,
    )
    for name in VENDORED:
        _copy_installed(name, dest)


def _pip_download(dest: Path) -> str | None:
    """None on success, else one line saying what went wrong."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", OLDEST_PYTHON, "--implementation", "py",
        "--abi", "none", "--platform", "any", "--dest", str(dest), *VENDORED,
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip: {e}"
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return f"pip exited {proc.returncode}: {lines[-1] if lines else ''}"
    found = {w.name.split("-")[0].lower() for w in dest.glob("*.whl")}
    missing = [n for n in VENDORED if n.lower() not in found]
    return f"pip did not download {', '.join(missing)}" if missing else None


def _copy_installed(name: str, dest: Path) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BundleError(f"cannot vendor {name}: not installed in the agent's environment")
    src = Path(next(iter(spec.submodule_search_locations)))
    shutil.copytree(
        src,
        dest / name,
        ignore=lambda _d, names: [
            n for n in names if n == "__pycache__" or n.endswith(_SKIP_SUFFIXES)
        ],
    )


def _make_readable(top: Path) -> None:
    """Containers may run as any user: directories 0755, files 0644."""
    os.chmod(top, 0o755)
    for dirpath, dirnames, filenames in os.walk(top):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)


def _det_version(source: Path) -> str:
    for line in (source / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "0.0.0"


class HarnessBundle:
    """The agent's bundle, built on first use (on a container-start thread, never the loop).

    Thread-safe: concurrent first starts wait for one build. A failed build is retried by the
    next start (a transient index outage must not poison the agent).
    """

    def __init__(self, root: Path, source: Path | None = None) -> None:
        self.root = root
        self._source = source
        self._path: Path | None = None
        self._lock = threading.Lock()

    def path(self) -> Path:
        with self._lock:
            if self._path is None:
                try:
                    self._path = build(self.root, self._source)
                except (OSError, BundleError) as e:
                    raise BundleError(f"cannot build the harness bundle in {self.root}: {e}") from e
            return self._path

    def apply(self, create_args: dict[str, Any], docker_client: Any) -> None:
        """Add the bundle to docker-py ``containers.create`` arguments: the read-only mount and
        ``PYTHONPATH`` (the bundle, then the experiment's own ``PYTHONPATH``, else the image's)."""
        create_args.setdefault("mounts", []).append(
            docker.types.Mount(
                target=CONTAINER_PATH, source=str(self.path()), type="bind", read_only=True
            )
        )
        env = create_args.setdefault("environment", {})
        existing = env.get("PYTHONPATH")
        if existing is None:
            attrs = docker_client.images.get(create_args["image"]).attrs or {}
            existing = image_env((attrs.get("Config") or {}).get("Env"), "PYTHONPATH")
        env["PYTHONPATH"] = python_path(existing)
