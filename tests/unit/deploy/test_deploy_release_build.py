"""How ``up`` builds det's wheel (deploy/common/release.py, boot.with_release) and when: after
every cheap check, so a missing Pulumi CLI or bad credentials are named before a slow build."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import zipfile

import pytest

from det.deploy.common import boot, release


@pytest.mark.parametrize(
    ("setuptools", "has_wheel", "builds"),
    [
        (None, False, False),
        ("65.5.0", False, False),  # python3 -m venv on 3.11: the "invalid command"
        ("65.5.0", True, False),  # under det's build requirement (69)
        ("69.5.1", False, False),
        ("69.5.1", True, True),
        ("70.0.0", False, False),
        ("70.1.0", False, True),  # bdist_wheel is part of setuptools from 70.1
        ("80.9.0", False, True),
    ],
)
def test_offline_build_only_with_a_setuptools_that_makes_wheels(setuptools, has_wheel, builds):
    why = release.setuptools_cannot_build(setuptools, has_wheel)
    assert (why is None) == builds
    if why:
        assert "\n" not in why and (setuptools or "no setuptools") in why


def test_pip_error_is_the_backends_line_not_the_hint():
    stderr = (
        "  error: subprocess-exited-with-error\n"
        "  \u00d7 python setup.py bdist_wheel did not run successfully.\n"
        "  │ exit code: 1\n"
        "  ╰─> [5 lines of output]\n"
        "      usage: setup.py [global_opts] cmd1 [cmd1_opts] [cmd2 [cmd2_opts] ...]\n"
        "      error: invalid command 'bdist_wheel'\n"
        "      [end of output]\n"
        "  note: This error originates from a subprocess, and is likely not a problem with pip.\n"
        "ERROR: Failed building wheel for det-platform\n"
        "hint: See above for details.\n"
    )
    assert release.pip_error(stderr) == "error: invalid command 'bdist_wheel'"
    assert release.pip_error(
        "ERROR: Could not find a version that satisfies setuptools>=69\nhint: See above.\n"
    ) == ("ERROR: Could not find a version that satisfies setuptools>=69")
    assert release.pip_error("") == "no wheel written"


def test_with_release_builds_only_when_up_ships_the_wheel(monkeypatch):
    built, resolved = [], []
    monkeypatch.setattr(release, "build", lambda: built.append(1) or "the wheel")
    # The constraints are resolved for the VMs against the index they use.
    monkeypatch.setattr(
        release, "for_vms", lambda rel, index_url: resolved.append(index_url) or f"{rel} for VMs"
    )
    assert boot.with_release(boot.BootOptions()) == boot.BootOptions()
    assert boot.with_release(boot.BootOptions(wheel_url="https://x/w.whl")).release is None
    opts = boot.BootOptions(build_release=True, package_index="https://pypi.example/simple")
    assert boot.with_release(opts).release == "the wheel for VMs"
    assert built == [1] and resolved == ["https://pypi.example/simple"]


def _wheel(directory, name, version, tag, requires=(), extras=()):
    """A wheel with only metadata: enough for pip to resolve it."""
    path = directory / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
    meta += "".join(f"Provides-Extra: {e}\n" for e in extras)
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", meta)
        z.writestr(
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: false\nTag: {tag}\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def vm_index(tmp_path):
    """det's stand-in and its dependencies as a deployer on 3.13 would see them: ``native`` 2.0
    has a wheel for CPython 3.13 only, 1.95 one for a glibc newer than Ubuntu 24.04's, 1.9 one for
    3.12 (manylinux 2.17); ``agentdep`` is pure."""
    extras = ("master", "agent", "aws", "gcp")
    det = _wheel(
        tmp_path, "det_platform", "0.1.0", "py3-none-any",
        ["native", "agentdep; extra == 'agent'"], extras,
    )  # fmt: skip
    wheels = tmp_path / "index"
    wheels.mkdir()
    linux = "manylinux_2_17_x86_64.manylinux2014_x86_64"
    _wheel(wheels, "native", "2.0", f"cp313-cp313-{linux}")
    _wheel(wheels, "native", "1.9", f"cp312-cp312-{linux}")
    _wheel(wheels, "native", "1.95", "cp312-cp312-manylinux_2_40_x86_64")  # glibc newer than 2.39
    _wheel(wheels, "agentdep", "3.1", "py3-none-any")
    return det, wheels


def test_constraints_pin_what_installs_on_the_vms_python_not_the_deployers(vm_index):
    det, wheels = vm_index
    # A deployer on 3.13: its native 2.0 has no wheel for the VMs' 3.12.
    here = "native==2.0\nagentdep==3.1\naudioop-lts==0.2.1\n"
    constraints, warning = release.resolve_for_vms(det, here, find_links=wheels)
    assert release._pins(constraints) == {"native": "1.9", "agentdep": "3.1"}
    assert constraints.startswith("# Dependencies of det ") and "Python 3.12" in constraints
    assert warning is not None and "native 2.0 -> 1.9" in warning and "agentdep" not in warning


def test_a_deployer_on_the_vms_python_ships_its_own_versions(vm_index):
    det, wheels = vm_index
    here = "native==1.9\nagentdep==3.1\n"
    constraints, warning = release.resolve_for_vms(det, here, find_links=wheels)
    assert warning is None
    assert release._pins(constraints) == {"native": "1.9", "agentdep": "3.1"}


def test_without_an_index_the_local_pins_stay_and_up_says_so(vm_index, tmp_path):
    det, _ = vm_index
    empty = tmp_path / "empty"
    empty.mkdir()
    here = "native==2.0\n"
    constraints, warning = release.resolve_for_vms(det, here, find_links=empty)
    assert constraints == here
    assert warning is not None and "cannot resolve det's dependencies" in warning
    assert "native" in warning  # pip's own line names what it could not find


@pytest.mark.parametrize(
    ("cloud", "flags"),
    [("gcp", ["--project-id", "p-123456"]), ("aws", ["--keypair", "k"])],
)
def test_up_without_pulumi_stops_naming_it_before_any_wheel_is_built(tmp_path, cloud, flags):
    """The issue's first user: no Pulumi CLI. GCP built det's wheel first (a minute, and its own
    failure in a plain venv) and named Pulumi only after it."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        "PATH": str(bindir),  # no pulumi (nor anything else) on PATH
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "det.cli", "deploy", cloud, "up", "--cluster-id", "c1",
         "--yes", "--initial-user-password", "Sup3r-secret-pw", *flags],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    # One error listing all this machine lacks (common.preflight.require_local), Pulumi first.
    head, *items = done.stderr.strip().splitlines()
    assert "nothing was created" in head and items, done.stderr
    assert all(line.startswith("  - ") for line in items), done.stderr
    assert "Pulumi CLI is not on PATH" in items[0], done.stderr
    assert not [p.name for p in tmp.rglob("*") if "det-release" in p.name or p.suffix == ".whl"]
    assert not (tmp_path / "home" / ".local" / "share" / "det" / "pulumi").exists()


def _tiny_tree(root):
    """A project of det's distribution name, small enough to build in a second, in its own
    folder: a test must not stage files in the checkout's build/, which other tests' builds
    of det's wheel use at the same time."""
    (root / "tinydet").mkdir(parents=True)
    (root / "tinydet" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=69"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "det-platform"\nversion = "0.0.1"\n'
        '[tool.setuptools]\npackages = ["tinydet"]\n'
    )
    return root


def _names(wheel):
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_a_file_gone_from_the_source_is_not_shipped_from_a_stale_build_dir(tmp_path):
    # setuptools' build/lib keeps what an earlier build staged; a renamed migration once shipped
    # twice (the det-master image applied both and failed on the second).
    tree = _tiny_tree(tmp_path / "src")
    stale = tree / "build" / "lib" / "tinydet" / "stale.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("gone = True\n")
    names = _names(release.build_from_source(tree, tmp_path / "out"))
    assert "tinydet/__init__.py" in names
    assert "tinydet/stale.py" not in names


def test_two_builds_in_one_tree_take_turns(tmp_path):
    """A build empties the tree's build/lib first; while another build holds the tree (its
    lock), it waits rather than delete the files that build is packing. (If this machine is too
    slow to reach the rmtree within the second, the test passes without proving anything; it
    cannot fail for that reason.)"""
    fcntl = pytest.importorskip("fcntl")
    tree = _tiny_tree(tmp_path / "src")
    staged = tree / "build" / "lib" / "tinydet" / "staged.py"
    staged.parent.mkdir(parents=True)
    staged.write_text("")
    built: list[object] = []
    with open(tree / "build" / ".det-wheel.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(
            target=lambda: built.append(release.build_from_source(tree, tmp_path / "out"))
        )
        worker.start()
        time.sleep(1.0)
        assert staged.exists(), "a second build emptied build/lib while another held the tree"
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(timeout=300)
    assert built, "the waiting build never finished"
    assert "tinydet/staged.py" not in _names(built[0])


def test_the_wheel_built_without_a_cache_dir_is_removed_when_the_process_exits(tmp_path):
    # `det deploy aws|gcp up` built it in a det-release-* temporary directory nothing removed.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = (
        "from pathlib import Path\n"
        "from det.deploy.common import release\n"
        "def fake(tree, out):\n"
        "    wheel = out / 'det_platform-0-py3-none-any.whl'\n"
        "    wheel.write_bytes(b'a wheel')\n"
        "    return wheel\n"
        "release.build_from_source = fake\n"
        "release.source_tree = lambda: Path('.')\n"
        "built = release.build()\n"
        "assert built.path.read_bytes() == b'a wheel'\n"
        "print(built.path)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    wheel = r.stdout.strip().splitlines()[-1]
    assert wheel.startswith(str(tmp)), wheel  # it was there while the process ran
    assert os.listdir(tmp) == []
