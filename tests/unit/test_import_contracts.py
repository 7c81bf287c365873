"""The import contracts of ``.importlinter`` (run by ``make check``) hold, and do fail on a
violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path, copy: str | None = None) -> Path:
    """The installed layout (``det/`` = harness/, ``det/master`` = master/, …) as symlinks, as
    scripts/mypy-tree.sh builds it; with ``copy``, that package of det.master a real copy."""
    det = root / "det"
    det.mkdir(parents=True)
    for entry in (REPO / "harness").iterdir():
        if entry.name != "__pycache__":
            (det / entry.name).symlink_to(entry)
    for pkg in ("agent", "cli", "deploy"):
        (det / pkg).symlink_to(REPO / pkg)
    if copy is None:
        (det / "master").symlink_to(REPO / "master")
        return root
    (det / "master").mkdir()
    for entry in (REPO / "master").iterdir():
        if entry.name == copy:
            shutil.copytree(
                entry, det / "master" / copy, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif entry.name != "__pycache__":
            (det / "master" / entry.name).symlink_to(entry)
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", str(REPO / ".importlinter")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_contracts_are_kept(tmp_path: Path) -> None:
    r = _lint(_tree(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_a_pure_module_that_reaches_the_database_breaks_a_contract(tmp_path: Path) -> None:
    root = _tree(tmp_path, copy="scheduler")
    # Indirectly: the scheduler imports a service, which imports the database.
    (root / "det" / "master" / "scheduler" / "leak.py").write_text(
        "from det.master.services import jobs  # noqa: F401\n"
    )
    r = _lint(root)
    assert r.returncode != 0
    assert "the pure modules import no database" in r.stdout and "BROKEN" in r.stdout
    assert "det.master.scheduler.leak -> det.master.services.jobs" in r.stdout


def test_the_shared_package_importing_the_masters_driver_breaks_its_contract(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    common = root / "det" / "common"
    common.unlink()
    shutil.copytree(
        REPO / "harness" / "common", common, ignore=shutil.ignore_patterns("__pycache__")
    )
    # The tempting shortcut: a shared type reading a row through the master's driver.
    (common / "leak.py").write_text("import psycopg  # noqa: F401\n")
    r = _lint(root)
    assert r.returncode != 0
    contracts = (REPO / ".importlinter").read_text().count("[importlinter:contract:")
    assert f"Contracts: {contracts - 1} kept, 1 broken." in r.stdout
    assert "det.common is not allowed to import psycopg" in r.stdout


def test_deploys_shared_steps_reaching_into_a_cloud_break_its_layers(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    deploy = root / "det" / "deploy"
    deploy.unlink()
    shutil.copytree(REPO / "deploy", deploy, ignore=shutil.ignore_patterns("__pycache__"))
    # The tempting shortcut: a shared step reading the AWS config (and boto3) directly.
    (deploy / "common" / "leak.py").write_text(
        "import boto3  # noqa: F401\n\nfrom det.deploy.aws import config  # noqa: F401\n"
    )
    # And a cloud's component calling up into its commands.
    (deploy / "gcp" / "network.py").write_text(
        (REPO / "deploy" / "gcp" / "network.py").read_text()
        + "\nfrom det.deploy.gcp import commands  # noqa: E402, F401\n"
    )
    r = _lint(root)
    assert r.returncode != 0
    contracts = (REPO / ".importlinter").read_text().count("[importlinter:contract:")
    assert f"Contracts: {contracts - 3} kept, 3 broken." in r.stdout
    assert "det.deploy.common.leak -> det.deploy.aws.config" in r.stdout
    assert "det.deploy.common is not allowed to import boto3" in r.stdout
    assert "det.deploy.gcp.network -> det.deploy.gcp.commands" in r.stdout
