"""tests/tmp_check.py: a test that leaves an entry in the temporary directory fails; one that
removes it, or writes under tmp_path, does not. Each case is a pytest run of its own on a small
file, with a temporary directory of the case's own as the machine's."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from tests.leak_ledger import run_checked

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import os
import subprocess
import tempfile

import pytest

import tests.tmp_check

tests.tmp_check.GRACE_SECONDS = 0.3  # each leftover below waits that long before it is reported


def test_runs_in_a_directory_of_its_own():
    here = tempfile.gettempdir()
    assert os.environ["TMPDIR"] == here
    assert os.path.basename(here).startswith("det-tests-")
    assert os.path.dirname(here) == os.environ["OUTER_TMP"]


def test_leaves_a_file():
    fd, _ = tempfile.mkstemp(prefix="left-file-")
    os.close(fd)


def test_leaves_a_directory_from_a_subprocess():
    subprocess.run(["sh", "-c", 'mkdir "$TMPDIR/left-by-a-subprocess"'], check=True)


def test_a_leftover_is_reported_once():
    # Still there (code of the process may use it) but not reported again: this test passes.
    assert "left-by-a-subprocess" in os.listdir(tempfile.gettempdir())


def test_removes_what_it_made():
    with tempfile.TemporaryDirectory(prefix="removed-"):
        pass
    with tempfile.NamedTemporaryFile(prefix="removed-"):
        pass


def test_tmp_path_is_not_checked(tmp_path):
    (tmp_path / "kept").write_text("pytest's own")


@pytest.fixture(scope="module")
def tidy():
    with tempfile.TemporaryDirectory(prefix="module-tidy-") as d:
        yield d


def test_uses_a_module_fixtures_directory(tidy):
    assert os.path.isdir(tidy)


def test_uses_it_again(tidy):
    assert os.path.isdir(tidy)


@pytest.fixture(scope="module")
def careless():
    # Never removed: it is still there when the module's last test ends.
    yield tempfile.mkdtemp(prefix="module-careless-")


def test_with_a_careless_fixture(careless):
    pass


def test_last(careless):
    pass
"""


def _run(tmp_path: Path) -> tuple[str, list[str], Path]:
    (tmp_path / "test_tmp.py").write_text(textwrap.dedent(TESTS))
    outer = tmp_path / "outer-tmp"
    outer.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(outer), "OUTER_TMP": str(outer)}
    env["PYTEST_DEBUG_TEMPROOT"] = str(tmp_path / "pytest-root")
    (tmp_path / "pytest-root").mkdir()
    return (*run_checked("tests.tmp_check", tmp_path / "test_tmp.py", env), outer)


def test_a_test_that_leaves_a_temporary_file_fails_and_one_that_removes_it_passes(
    tmp_path: Path,
) -> None:
    out, failed, outer = _run(tmp_path)
    assert failed == [
        "test_last",  # the careless fixture ends in its teardown
        "test_leaves_a_directory_from_a_subprocess",
        "test_leaves_a_file",
    ], out
    assert "'left-by-a-subprocess' (left by the test)" in out, out
    assert "'left-file-" in out, out
    assert "'module-careless-" in out and "(left by fixture 'careless' (module scope))" in out, out
    for name in ("test_runs_in_a_directory_of_its_own", "test_a_leftover_is_reported_once",
                 "test_removes_what_it_made", "test_tmp_path_is_not_checked",
                 "test_uses_a_module_fixtures_directory", "test_uses_it_again",
                 "test_with_a_careless_fixture"):  # fmt: skip
        assert f"PASSED test_tmp.py::{name}" in out, out
    assert "10 passed, 3 errors" in out, out
    # The run's own directory is gone with it: nothing is left in the machine's.
    assert os.listdir(outer) == [], out
