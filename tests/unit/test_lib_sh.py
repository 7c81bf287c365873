"""scripts/lib.sh as scripts/test.sh and .ci/run use it: under `set -euo pipefail`."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
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


def _wheel(path: Path, module: str) -> Path:
    """A wheel of det-platform 0.1.0 with one module and the ``det`` command (pip installs it
    offline, as it installs any)."""
    files = {
        "detpkg.py": module,
        "det_platform-0.1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: det-platform\n"
        "Version: 0.1.0\n",
        "det_platform-0.1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
        "det_platform-0.1.0.dist-info/entry_points.txt": "[console_scripts]\ndet = detpkg:main\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append("det_platform-0.1.0.dist-info/RECORD,,")
    files["det_platform-0.1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = path / "det_platform-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_a_kept_venv_starts_the_next_one_as_hard_links_with_its_own_paths(tmp_path: Path) -> None:
    """det_venv_keep / det_venv_seed (.ci/run's DET_VENV_CACHE): the second venv is a copy of
    the first (det uninstalled) made of hard links, its scripts name its own path, the kept
    copy is left as it was, and another pyproject.toml finds nothing kept."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "det-platform"\n')
    (repo / "setup.py").write_text("")
    wheel = _wheel(tmp_path, "def main():\n    print('det from', __file__)\n")
    cache, v1, v2 = tmp_path / "cache", tmp_path / "v1", tmp_path / "v2"
    # det_pip_install (uv, the indexes, det's editable install) stood in for by pip installing
    # det's wheel offline: what is under test is the venv kept and copied around it.
    head = f"""set -euo pipefail
source '{LIB}'
REPO='{repo}'
DET_VENV_CACHE='{cache}'
det_pip_install() {{
  "$1/bin/python" -m pip install --quiet --no-index '{wheel}'
}}
"""
    script = (
        head
        + """fill() {
  det_venv_seed "$1" dev
  det_venv_create "$1"
  det_venv "$1" dev
  det_venv_keep "$1" dev
}
"""
        + f"fill '{v1}'\nfill '{v2}'\n"
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + out.stdout
    kept = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(kept) == 1, kept
    tmpl = kept[0]
    assert f"venv: kept as {tmpl}" in out.stdout
    assert f"venv: a copy of {tmpl}" in out.stdout
    assert (tmpl / ".det-template-of").read_text().strip() == str(v1)
    site = Path("lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
    assert not list((tmpl / site).glob("det_platform*")), "det itself is not kept"
    assert not (tmpl / "bin" / "det").exists()
    # Hard links, but the rewritten scripts are files of their own.
    pip_init = site / "pip" / "__init__.py"
    assert (v2 / pip_init).stat().st_ino == (tmpl / pip_init).stat().st_ino
    assert str(v2) in (v2 / "bin" / "pip").read_text()
    assert str(v1) in (tmpl / "bin" / "pip").read_text()
    assert str(v2) not in (tmpl / "bin" / "activate").read_text()
    # The second venv works without the first.
    subprocess.run(["rm", "-rf", str(v1)], check=True)
    det = subprocess.run([str(v2 / "bin" / "det")], capture_output=True, text=True, check=True)
    assert str(v2 / site / "detpkg.py") in det.stdout
    pip = subprocess.run(
        [str(v2 / "bin" / "pip"), "--version"], capture_output=True, text=True, check=True
    )
    assert str(v2) in pip.stdout
    # Another pyproject.toml: another key, nothing to start from.
    with (repo / "pyproject.toml").open("a") as f:
        f.write("# changed\n")
    v3 = tmp_path / "v3"
    seed = subprocess.run(
        ["bash", "-c", head + f"det_venv_seed '{v3}' dev"], capture_output=True, text=True
    )
    assert seed.returncode == 0, seed.stderr
    assert seed.stdout == "" and not v3.exists()
