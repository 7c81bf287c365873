"""A plain install (no ``deploy`` extra) gets one line naming the extra, not an import error."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Runs the real `det` entry point in a fresh interpreter where these packages cannot be imported
# (a None entry in sys.modules makes `import X` raise ModuleNotFoundError, as when not installed).
_RUN = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from det.cli.__main__ import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    ("blocked", "argv"),
    [
        ("pulumi", ["deploy", "aws", "up", "--cluster-id", "c1", "--keypair", "k", "--dry-run"]),
        ("pulumi_gcp,pulumi", ["deploy", "gcp", "up", "--cluster-id", "c1", "--project-id", "p"]),
        ("pulumi", ["deploy", "aws", "down", "--cluster-id", "c1", "--yes"]),
    ],
)
def test_missing_deploy_extra_is_one_line_naming_it(blocked: str, argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, blocked, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install -e '.[deploy]'" in lines[0] and "Traceback" not in done.stderr
