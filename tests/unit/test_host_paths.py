"""tests/host_paths.py: a test that writes one of the host's watched paths fails (and the path
is removed); the tests after it pass. A pytest run of its own on a small file, watching a path
under its temporary directory instead of the host's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TESTS = """
from pathlib import Path

import tests.host_paths

WATCHED = Path(__file__).parent / "run-determined"
tests.host_paths.WATCHED = (WATCHED,)


def test_writes_the_watched_path():
    (WATCHED / "info").mkdir(parents=True)
    (WATCHED / "info" / "cluster.json").write_text("{}")


def test_after_it():
    assert not WATCHED.exists()
"""


def test_a_test_that_writes_a_host_path_fails_and_the_path_is_removed(tmp_path: Path) -> None:
    (tmp_path / "test_paths.py").write_text(textwrap.dedent(TESTS))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.host_paths", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-rA", "test_paths.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = r.stdout + r.stderr
    assert "ERROR test_paths.py::test_writes_the_watched_path" in out, out
    assert "run-determined: a test writes only its own temporary directories" in out, out
    assert "PASSED test_paths.py::test_after_it" in out, out
    assert not (tmp_path / "run-determined").exists()
