"""scripts/count_master_tests.py (run by ``make check``): a test file counts when a test starts a
master process, by a fixture it requests (looked up as pytest does: the module, then the
conftest files), a function it calls or a ``python -m det.master`` of its own; a file on the
in-process master does not; the tree stays at or under the ceiling."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "count_master_tests.py"
sys.path.insert(0, str(REPO / "scripts"))

import count_master_tests  # noqa: E402

CONFTEST = """
import subprocess, sys
import pytest

def start_master(tmp):
    return subprocess.Popen([sys.executable, "-m", "det.master"])

@pytest.fixture
def master_factory(tmp_path):
    yield lambda: start_master(tmp_path)

@pytest.fixture
def live_master(master_factory):
    return master_factory()

@pytest.fixture
def api_master(tmp_path):
    return object()  # the app in this process
"""

SUPPORT = """
import pytest
from tests.integration.conftest import start_master

@pytest.fixture(scope="module")
def cli_master(tmp_path_factory):
    yield start_master(tmp_path_factory.mktemp("m"))

@pytest.fixture(scope="module")
def in_process_cli_master(api_master):
    yield api_master

@pytest.fixture
def det(cli_master):
    return cli_master
"""

FILES = {
    # counted
    "test_live.py": "def test_a(live_master):\n    assert live_master\n",
    "test_factory_in_class.py": "class TestX:\n    def test_a(self, master_factory): ...\n",
    "test_own_fixture.py": """
        import pytest
        @pytest.fixture
        def busy(master_factory):
            return master_factory()
        def test_a(busy): ...
    """,
    "test_local_import.py": """
        def test_a(tmp_path):
            from tests.integration.conftest import start_master
            start_master(tmp_path)
    """,
    "test_own_popen.py": """
        import subprocess, sys
        def test_a():
            subprocess.run([sys.executable, "-m", "det.master", "migrate"])
    """,
    "test_support_det.py": """
        from tests.integration import cli_support
        cli_master = cli_support.cli_master
        det = cli_support.det
        def test_a(det): ...
    """,
    # not counted
    "test_api.py": "def test_a(api_master):\n    assert api_master\n",
    "test_support_in_process.py": """
        from tests.integration import cli_support
        cli_master = cli_support.in_process_cli_master
        det = cli_support.det
        def test_a(det): ...
    """,
    "test_only_types.py": """
        from tests.integration.conftest import start_master  # imported, never called
        def test_a(api_master):
            x: object = api_master
            assert x
    """,
}


def _tree(root: Path) -> None:
    pkg = root / "tests" / "integration"
    pkg.mkdir(parents=True)
    (root / "tests" / "e2e").mkdir()
    (root / "tests" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "conftest.py").write_text(CONFTEST)
    (pkg / "cli_support.py").write_text(SUPPORT)
    for name, text in FILES.items():
        (pkg / name).write_text(textwrap.dedent(text))


def test_counts_the_files_whose_tests_start_a_master_process(tmp_path: Path) -> None:
    _tree(tmp_path)
    found = {Path(p).name for p in count_master_tests.files(tmp_path)}
    assert found == {
        "test_live.py",
        "test_factory_in_class.py",
        "test_own_fixture.py",
        "test_local_import.py",
        "test_own_popen.py",
        "test_support_det.py",
    }


def test_fails_above_the_ceiling_naming_the_target(tmp_path: Path) -> None:
    _tree(tmp_path)
    for i in range(count_master_tests.CEILING):
        (tmp_path / "tests" / "e2e" / f"test_more_{i}.py").write_text(
            "from tests.integration.conftest import start_master\n"
            "def test_a(tmp_path):\n    start_master(tmp_path)\n"
        )
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"(ceiling {count_master_tests.CEILING}, target 30)" in r.stdout
    assert "above the ceiling" in r.stdout


def test_the_tree_is_at_or_under_the_ceiling() -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "-v"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tests/integration/test_master_restart.py" in r.stdout  # kills and restarts
    assert "tests/integration/test_cli_rbac.py" not in r.stdout  # in_process_cli_master
    assert "tests/integration/test_master_lifecycle.py" not in r.stdout  # loop_master
    assert "target 30)" in r.stdout


E2E_CONFTEST = """
import pytest
from tests.integration.conftest import start_master

class Shared:
    def get(self, tmp):
        return start_master(tmp)

@pytest.fixture(scope="session")
def _shared(tmp_path_factory):
    yield Shared()

@pytest.fixture
def shared_cluster(_shared, tmp_path):
    yield _shared.get(tmp_path)

@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory):
    yield start_master(tmp_path_factory.mktemp("m"))
"""


def test_a_conftests_session_fixture_counts_once_as_the_conftest(tmp_path: Path) -> None:
    """A session-scoped fixture of a conftest (tests/e2e's shared clusters) starts its master
    once for the run: the files that use it are not counted, the conftest is, once; a
    module-scoped fixture still counts each file."""
    _tree(tmp_path)
    e2e = tmp_path / "tests" / "e2e"
    (e2e / "conftest.py").write_text(E2E_CONFTEST)
    for name in ("test_shared_a.py", "test_shared_b.py"):
        (e2e / name).write_text("def test_a(shared_cluster): ...\n")
    (e2e / "test_module.py").write_text("def test_a(module_cluster): ...\n")
    (e2e / "test_none.py").write_text("def test_a(tmp_path): ...\n")
    found = [p for p in count_master_tests.files(tmp_path) if p.startswith("tests/e2e/")]
    assert found == ["tests/e2e/test_module.py", "tests/e2e/conftest.py"]
