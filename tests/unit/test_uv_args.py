"""scripts/uv_args.py (scripts/lib.sh installs the dev venv with uv): the machine's pip
configuration reaches uv, with pip's precedence, and what pip would skip is left out."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import uv_args  # noqa: E402


def test_indexes_links_and_constraints_reach_uv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    index = tmp_path / "simple"
    index.mkdir()
    constraints = tmp_path / "c.txt"
    constraints.write_text("torch<=2\n")
    lines = [
        "global.index-url='https://mirror.example/simple'",
        f"global.extra-index-url='file://{index} https://other.example/simple'",
        f"global.find-links='{wheels}'",
        f"global.constraint='{constraints}'",
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.timeout='60'",
    ]
    assert uv_args.uv_args(lines) == [
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        f"file://{index}",
        "--extra-index-url",
        "https://other.example/simple",
        "--find-links",
        str(wheels),
        "--constraint",
        str(constraints),
    ]


def test_missing_local_locations_are_skipped_as_pip_skips_them(tmp_path: Path) -> None:
    lines = [
        f"global.extra-index-url='file://{tmp_path}/absent/simple'",
        f"global.find-links='{tmp_path}/absent-wheels'",
    ]
    assert uv_args.uv_args(lines) == []


def test_environment_beats_install_section_beats_global(tmp_path: Path) -> None:
    for name in ("g", "i", "e"):
        (tmp_path / name).mkdir()
    lines = [
        f":env:.find-links='{tmp_path / 'e'}'",
        f"global.find-links='{tmp_path / 'g'}'",
        f"install.find-links='{tmp_path / 'i'}'",
        f"download.find-links='{tmp_path / 'g'}'",
        "global.no-index='true'",
    ]
    assert uv_args.uv_args(lines) == ["--find-links", str(tmp_path / "e"), "--no-index"]
    assert uv_args.uv_args(lines[1:]) == ["--find-links", str(tmp_path / "i"), "--no-index"]


def test_unreadable_lines_are_ignored() -> None:
    assert uv_args.uv_args(["", "no equals sign", "global.find-links=not-a-literal"]) == []
