"""``det`` works in an install without the deploy and cloud extras (pulumi, boto3, google)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        for banned in ("pulumi", "pulumi_aws", "pulumi_gcp", "boto3", "google.cloud"):
            if name == banned or name.startswith(banned + "."):
                raise ImportError("not installed: " + name)
sys.meta_path.insert(0, Block())
from det.cli.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_deploy_local_status_needs_no_cloud_sdk(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, "deploy", "local", "status", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "not installed" not in r.stderr, r.stderr
    assert "master: not running" in r.stdout
    assert r.returncode == 3


def test_version_and_experiment_help_need_no_cloud_sdk() -> None:
    for argv in (["--version"], ["experiment", "--help"]):
        r = subprocess.run(
            [sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
