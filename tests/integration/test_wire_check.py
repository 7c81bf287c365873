"""The wire check (tests/compat/check_wire.py, run at the end of every test session over what
the masters answered) does fail on a body the official bindings cannot parse."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.compat.official import ensure_official_venv

pytestmark = pytest.mark.integration
CHECKER = Path(__file__).parents[1] / "compat" / "check_wire.py"

USER = {"id": 1, "username": "admin", "admin": True, "active": True}


def _check(folder: Path, *entries: dict[str, object]) -> subprocess.CompletedProcess[str]:
    folder.mkdir(exist_ok=True)
    (folder / "wire-1.ndjson").write_text("".join(json.dumps(e) + "\n" for e in entries))
    python = ensure_official_venv() / "python"
    return subprocess.run(
        [str(python), str(CHECKER), str(folder)], capture_output=True, text=True, timeout=120
    )


def test_good_answers_pass(tmp_path: Path) -> None:
    r = _check(
        tmp_path / "w",
        {"op": "GetMe", "message": "v1GetMeResponse", "status": 200, "body": {"user": USER}},
        {
            "op": "MasterLogs",
            "message": "v1MasterLogsResponse",
            "status": 200,
            "stream": True,
            "body": {"result": {"logEntry": {"id": 1, "level": "LOG_LEVEL_INFO", "message": "m",
                                             "timestamp": "2026-11-25T00:00:00Z"}}},
        },
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 answers of 2 operations, 0 failed" in r.stdout


def test_a_missing_required_field_or_an_unknown_enum_value_fails(tmp_path: Path) -> None:
    r = _check(
        tmp_path / "w",
        {"op": "GetMe", "message": "v1GetMeResponse", "status": 200, "body": {"user": USER}},
        {"op": "GetMe", "message": "v1GetMeResponse", "status": 200,
         "body": {"user": {"id": 1, "admin": True, "active": True}}},
        {"op": "GetSlot", "message": "v1GetSlotResponse", "status": 200,
         "body": {"slot": {"id": "0", "device": {"type": "TYPE_TPU"}}}},
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "GetMe" in r.stdout and "1 FAILED" in r.stdout and "username" in r.stdout
    assert "GetSlot" in r.stdout and "TYPE_TPU" in r.stdout
    assert "3 answers of 2 operations, 2 failed" in r.stdout


def test_nothing_recorded_is_its_own_answer(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    python = ensure_official_venv() / "python"
    r = subprocess.run(
        [str(python), str(CHECKER), str(tmp_path / "empty")], capture_output=True, text=True
    )
    assert r.returncode == 2 and "nothing recorded" in r.stdout
