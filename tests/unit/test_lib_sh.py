"""scripts/lib.sh as scripts/test.sh and .ci/run use it: under `set -euo pipefail`."""

from __future__ import annotations

import subprocess
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "scripts" / "lib.sh"


def _missing(packages: str) -> list[str]:
    script = (
        f"set -euo pipefail; REPO=/nonexistent; source '{LIB}'; DET_APT_PACKAGES=({packages});"
        ' mapfile -t m < <(det_apt_missing); printf "%s\\n" "${m[@]}"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def test_an_unknown_package_is_missing_under_errexit_and_pipefail() -> None:
    # dpkg-query exits 1 when it knows none or only some of the names: that must not end the
    # listing early (it did, and a fresh machine installed nothing).
    assert _missing("det-no-such-package-1: bash:bash det-no-such-package-2:") == [
        "det-no-such-package-1",
        "det-no-such-package-2",
    ]


def test_a_package_whose_probe_is_there_is_not_missing() -> None:
    assert _missing("det-no-such-package-3:bash") == []
