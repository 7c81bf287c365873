"""The official ``det`` run from its fork server (tests/compat/official_cli.py) answers as the
fresh process does: the same exit code, stdout and stderr for a success, an argparse refusal,
a traceback-free error on stdin-fed input, and a command past its timeout is killed."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.official import ensure_official_venv
from tests.compat.official_cli import OfficialDet

pytestmark = pytest.mark.integration


@pytest.fixture
def silent_master() -> Iterator[str]:
    """A port that takes connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def _env(home: Path, master: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(home), "DET_MASTER": master, "NO_COLOR": "1"}


CASES = [
    (["--version"], None),
    (["experiment", "list", "--no-such-flag"], None),
    (["user", "login", "admin"], "not-the-password\n"),
    (["experiment", "describe", "not-a-number"], None),
]


def test_forked_and_fresh_det_answer_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = ensure_official_venv()
    env = _env(tmp_path, "http://127.0.0.1:1")  # nothing listens: a connection error
    seen = []
    with OfficialDet(bin_dir, env, tmp_path) as det:
        for args, stdin in CASES:
            monkeypatch.setenv("DET_TEST_OFFICIAL_FORK", "1")
            forked = det.run(args, stdin, timeout=60)
            monkeypatch.setenv("DET_TEST_OFFICIAL_FORK", "0")
            fresh = det.run(args, stdin, timeout=60)
            assert (forked.returncode, forked.stdout, forked.stderr) == (
                fresh.returncode,
                fresh.stdout,
                fresh.stderr,
            ), args
            seen.append(forked)
    version, bad_flag, login, describe = seen
    assert version.returncode == 0 and "0.38.1" in version.stdout + version.stderr
    assert bad_flag.returncode == 2 and "usage" in bad_flag.stderr  # argparse's refusal
    assert login.returncode != 0 and describe.returncode != 0


def test_a_command_past_its_timeout_is_killed(tmp_path: Path, silent_master: str) -> None:
    with OfficialDet(ensure_official_venv(), _env(tmp_path, silent_master), tmp_path) as det:
        with pytest.raises(subprocess.TimeoutExpired):
            det.run(["master", "info"], timeout=2)
        assert det.run(["--version"], timeout=60).returncode == 0  # the server still serves
