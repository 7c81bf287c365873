"""The harness bundle (det.agent.harness_bundle), built with real pip, run on real Docker in
images that have nothing of det: Debian bullseye's Python 3.9 (the oldest Python on Debian's
mirror) and trixie's 3.13 (``infra/build-images.sh trixie bullseye``), and in the torch image,
which has det and the official ``determined`` package installed itself."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det.agent import harness_bundle
from det.agent.harness_bundle import CONTAINER_PATH, HarnessBundle, build, det_source_dir
from tests.docker_support import TASK_IMAGE
from tests.docker_support import docker_client as engine_with_image

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
OLDEST = "det-base:bullseye"
NEWEST = "det-base:trixie"
BARE_IMAGES = {OLDEST: "3.9", NEWEST: "3.13"}
# What a task imports: every task-side module, and requests through the harness.
IMPORT_ALL = (
    "import json, det, det.exec.run, det.exec.gc_checkpoints, det.launch.torch_distributed,"
    " det.launch.horovod, det.launch.deepspeed, det.launch.wrap_rank, det.storage.shared,"
    " det.storage.s3, det.storage.gcs, requests, urllib3;"
    " print(json.dumps({'det': det.__file__, 'requests': requests.__file__,"
    " 'urllib3': urllib3.__file__}))"
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("harness"))


def run_in(image: str, bundle: Path, *cmd: str, mounts: dict[str, str] | None = None) -> str:
    """``cmd`` in a fresh container of ``image`` with the bundle mounted as the agent does."""
    engine_with_image(image)
    extra = ":".join(target for target in (mounts or {}).values())
    argv = ["docker", "run", "--rm", "-v", f"{bundle}:{CONTAINER_PATH}:ro"]
    for host, target in (mounts or {}).items():
        argv += ["-v", f"{host}:{target}:ro"]
    argv += ["-e", f"PYTHONPATH={harness_bundle.python_path(extra)}"]
    argv += ["-e", "PYTHONDONTWRITEBYTECODE=1", "-w", "/tmp", image]
    r = subprocess.run([*argv, *cmd], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, (
        f"{' '.join(cmd)} in {image} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout


def test_bundle_holds_the_task_side_only_and_no_native_code(bundle: Path) -> None:
    det_dir = bundle / "det"
    assert sorted(p.name for p in det_dir.iterdir() if p.is_dir()) == sorted(
        ["__pycache__", "_vendor", *harness_bundle.TASK_PACKAGES]
    )
    for absent in ("master", "agent", "cli", "deploy"):
        assert not (det_dir / absent).exists()
    vendored = {p.name for p in (det_dir / "_vendor").iterdir() if p.is_dir()}
    assert set(harness_bundle.VENDORED) <= vendored
    native = [p for p in bundle.rglob("*") if p.suffix in (".so", ".pyd")]
    assert native == []
    # Byte code of the agent's own interpreter only, each file beside its source.
    for pyc in bundle.rglob("*.pyc"):
        assert pyc.parent.name == "__pycache__" and pyc.name.split(".")[-2] == (
            sys.implementation.cache_tag
        )
        assert (pyc.parent.parent / (pyc.name.split(".")[0] + ".py")).is_file(), pyc
    assert oct(bundle.stat().st_mode & 0o777) == "0o755"


def test_a_second_build_reuses_the_bundle_and_a_changed_source_makes_a_new_one(
    bundle: Path, tmp_path: Path
) -> None:
    assert build(bundle.parent) == bundle
    source = tmp_path / "det"
    src = det_source_dir()
    for rel in ["__init__.py", *harness_bundle.TASK_PACKAGES]:
        if (src / rel).is_dir():
            subprocess.run(["cp", "-r", str(src / rel), str(source / rel)], check=True)
        else:
            source.mkdir(parents=True, exist_ok=True)
            (source / rel).write_bytes((src / rel).read_bytes())
    assert harness_bundle.digest(source) == harness_bundle.digest(src)
    (source / "core" / "_train.py").write_text(
        (source / "core" / "_train.py").read_text() + "\n# changed\n"
    )
    assert harness_bundle.digest(source) != harness_bundle.digest(src)


def test_the_task_side_runs_from_the_bundle_without_site_packages(bundle: Path) -> None:
    """``python -S``: no site-packages at all, so requests and co. must come from the bundle."""
    r = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_ALL],
        capture_output=True, text=True, check=False, cwd="/",
        env={"PYTHONPATH": str(bundle), "PATH": os.environ.get("PATH", "")},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert str(bundle / "det" / "_vendor" / "requests") in r.stdout


@pytest.mark.parametrize("image", sorted(BARE_IMAGES))
def test_bare_debian_pythons_import_the_whole_task_side(bundle: Path, image: str) -> None:
    import json

    out = run_in(image, bundle, "python3", "-c", "import sys; print(sys.version)")
    assert out.startswith(BARE_IMAGES[image] + "."), out
    paths = json.loads(run_in(image, bundle, "python3", "-c", IMPORT_ALL))
    assert paths["det"] == f"{CONTAINER_PATH}/det/__init__.py"
    assert paths["requests"].startswith(f"{CONTAINER_PATH}/det/_vendor/requests/")
    run_in(image, bundle, "python3", "-m", "det.exec.run", "--", "python3 -c 'import det.core'")


def test_an_image_with_det_and_determined_keeps_its_own_packages(bundle: Path) -> None:
    """The bundle's det shadows the image's det (it matches the master); the official
    ``determined`` package and the image's own requests are untouched."""
    import json

    code = (
        "import json, det, determined, requests, det.core;"
        " print(json.dumps({'det': det.__file__, 'determined': determined.__file__,"
        " 'version': determined.__version__, 'requests': requests.__file__}))"
    )
    paths = json.loads(run_in(TASK_IMAGE, bundle, "python3", "-c", code))
    assert paths["det"] == f"{CONTAINER_PATH}/det/__init__.py"
    assert paths["determined"].startswith("/opt/det/venv/"), paths
    assert paths["version"] == "0.38.1"
    assert paths["requests"].startswith("/opt/det/venv/"), paths


def test_a_training_process_in_the_torch_image_loads_det_from_the_agents_byte_code(
    bundle: Path,
) -> None:
    """The torch image's python3 is the agent's version here (3.11): its processes load det
    from the read-only bundle's ``.pyc`` files instead of compiling it each time; a bare image
    of another version still imports everything (test above)."""
    out = run_in(
        TASK_IMAGE, bundle, "python3", "-c", "import sys; print(sys.implementation.cache_tag)"
    )
    if out.strip() != sys.implementation.cache_tag:
        pytest.skip(f"the agent runs {sys.implementation.cache_tag}, the image {out.strip()}")
    err = run_in(TASK_IMAGE, bundle, "sh", "-c", "python3 -v -c 'import det.core' 2>&1 >/dev/null")
    origins = [
        line.removeprefix("# code object from ").strip("'")
        for line in err.splitlines()
        if line.startswith("# code object from ") and CONTAINER_PATH in line
    ]
    assert any("/det/core/" in o for o in origins), err[-2000:]
    assert [o for o in origins if not o.endswith(".pyc")] == []


def test_the_image_pythonpath_follows_the_bundle(bundle: Path) -> None:
    client = engine_with_image(NEWEST)
    args: dict[str, Any] = {"image": NEWEST, "environment": {}}
    HarnessBundle(bundle.parent).apply(args, client)
    assert args["environment"]["PYTHONPATH"] == CONTAINER_PATH
    (mount,) = args["mounts"]
    assert mount["Target"] == CONTAINER_PATH and mount["ReadOnly"] is True
    assert mount["Source"] == str(bundle)
    args = {"image": NEWEST, "environment": {"PYTHONPATH": "/mine"}}
    HarnessBundle(bundle.parent).apply(args, client)
    assert args["environment"]["PYTHONPATH"] == f"{CONTAINER_PATH}:/mine"


# --- the harness's unit tests on the oldest and the newest Python ---------------------------

# The harness unit tests that need neither torch nor det's other packages (numpy neither: the
# bare images have none; the numpy scalar test runs in det's own venv).
UNIT_TESTS = [
    "tests/unit/harness/test_harness_api_session.py",
    "tests/unit/harness/test_harness_core_on_cluster.py",
    "tests/unit/harness/test_harness_distributed.py",
    "tests/unit/harness/test_harness_exec_run.py",
    "tests/unit/harness/test_harness_launch.py",
    "tests/unit/harness/test_harness_proc.py",
    "tests/unit/harness/test_harness_storage_shared.py",
    "--deselect=tests/unit/harness/test_harness_launch.py::test_torch_distributed_runs_one_worker_per_slot",
    "--deselect=tests/unit/harness/test_harness_core_on_cluster.py::test_batch_metrics_are_sent_as_json_as_the_averages_are",
]


@pytest.fixture(scope="module")
def pytest_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """pytest (pure-Python wheels) installed for each image's Python, beside it, not in it."""
    out = {}
    for image, version in BARE_IMAGES.items():
        dest = tmp_path_factory.mktemp(f"pytest-{version}")
        wheels = tmp_path_factory.mktemp(f"wheels-{version}")
        # `pip download` honours Requires-Python for --python-version (`install --target` did
        # not); pip evaluates markers for this Python, not the target's: name the backports.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels),
             "--only-binary=:all:", "--python-version", version, "--implementation", "py",
             "--abi", "none", "--platform", "any",
             "pytest", "pytest-timeout", "exceptiongroup", "tomli"],
            check=True, timeout=600,
        )  # fmt: skip
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(dest)
        out[image] = dest
    yield out


@pytest.mark.slow
@pytest.mark.parametrize("image", sorted(BARE_IMAGES))
def test_harness_unit_tests_pass_on_the_oldest_and_newest_python(
    bundle: Path, pytest_dirs: dict[str, Path], image: str
) -> None:
    out = run_in(
        image, bundle,
        "sh", "-c", "cd /repo && exec python3 -m pytest -q -p no:cacheprovider"
        " --confcutdir=/repo/tests/unit/harness -c /repo/pyproject.toml --rootdir=/repo "
        + " ".join(UNIT_TESTS),
        # The tests import requests before det: the bundle's copies go on the path as well.
        mounts={
            str(pytest_dirs[image]): "/pytest",
            str(REPO): "/repo",
            str(bundle / "det" / "_vendor"): "/vendor",
        },
    )  # fmt: skip
    last = out.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last and "skipped" not in last, out[-2000:]
