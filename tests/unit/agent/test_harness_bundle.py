from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from det.agent import harness_bundle
from det.agent.harness_bundle import (
    CONTAINER_PATH,
    BundleError,
    HarnessBundle,
    build,
    image_env,
    python_path,
)


def test_the_bundle_comes_first_on_pythonpath_and_the_rest_is_kept() -> None:
    assert python_path(None) == CONTAINER_PATH
    assert python_path("") == CONTAINER_PATH
    assert python_path("/a:/b") == f"{CONTAINER_PATH}:/a:/b"
    assert python_path(f"/a:{CONTAINER_PATH}::/b") == f"{CONTAINER_PATH}:/a:/b"


def test_image_env_reads_docker_config_env() -> None:
    env = ["PATH=/usr/bin", "PYTHONPATH=/opt/x:/opt/y", "EMPTY=", "BROKEN"]
    assert image_env(env, "PYTHONPATH") == "/opt/x:/opt/y"
    assert image_env(env, "EMPTY") == ""
    assert image_env(env, "BROKEN") is None
    assert image_env(None, "PYTHONPATH") is None


def test_without_an_index_the_agent_vendors_its_own_pure_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip finds nothing (no index, an empty find-links): the copies come from the agent's
    environment, compiled modules left out, and the task side still imports with no
    site-packages at all."""
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    bundle = build(tmp_path / "harness")
    vendor = bundle / "det" / "_vendor"
    assert {p.name for p in vendor.iterdir()} >= set(harness_bundle.VENDORED)
    assert [p for p in bundle.rglob("*") if p.suffix in (".so", ".pyd")] == []
    tag = sys.implementation.cache_tag
    assert {p.name.split(".")[-2] for p in bundle.rglob("*.pyc")} == {tag}
    r = subprocess.run(
        [sys.executable, "-S", "-c", "import det.exec.run, requests; print(requests.__file__)"],
        capture_output=True, text=True, check=False, cwd="/",
        env={"PYTHONPATH": str(bundle)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(vendor / "requests")), r.stdout


def test_a_failed_build_says_why_and_the_next_start_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    bundle = HarnessBundle(blocker / "harness")
    with pytest.raises(BundleError, match=r"cannot build the harness bundle in .*file/harness"):
        bundle.path()
    blocker.unlink()
    blocker.mkdir()
    assert (bundle.path() / "det" / "core" / "__init__.py").is_file()
    with pytest.raises(BundleError, match=r"is not the det package"):
        HarnessBundle(tmp_path / "elsewhere", source=tmp_path).path()
    (tmp_path / "__init__.py").write_text("")
    with pytest.raises(BundleError, match=r"det\.common is missing"):
        HarnessBundle(tmp_path / "elsewhere", source=tmp_path).path()


def test_a_task_of_the_agents_python_loads_det_compiled_from_a_read_only_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mount is read-only, so a task cannot write ``.pyc`` files: the agent's build holds
    them, and a training process loads every det module from them (``python -v`` names the
    code object's origin: the ``.pyc``, or the ``.py`` it compiled in memory)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    bundle = build(tmp_path / "harness")
    r = subprocess.run(
        [sys.executable, "-S", "-v", "-c", "import det.exec.run, det.core, requests"],
        capture_output=True, text=True, check=False, cwd="/",
        env={"PYTHONPATH": str(bundle), "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    origins = [
        line.removeprefix("# code object from ").strip("'")
        for line in r.stderr.splitlines()
        if line.startswith("# code object from ") and str(bundle) in line
    ]
    assert any("/det/core/" in o for o in origins), r.stderr[-2000:]
    assert any("/det/_vendor/requests/" in o for o in origins), r.stderr[-2000:]
    assert [o for o in origins if not o.endswith(".pyc")] == []
