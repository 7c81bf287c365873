"""Without pgserver (no wheel on Python 3.13+) a master with no ``db:`` stops with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A fresh interpreter where `pgserver` cannot be imported, as on Python 3.13.
_RUN = """
import sys
sys.modules["pgserver"] = None
from det.master.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_master_without_db_or_pgserver_says_to_configure_db(tmp_path: Path) -> None:
    config = tmp_path / "master.yaml"
    config.write_text(
        f"data_dir: {tmp_path / 'data'}\nsecurity:\n  initial_user_password: pw-12345678\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", _RUN, "--config-file", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no db: configured" in lines[0] and "configure db:" in lines[0]
