"""`det` meeting a sleeping serverless master: one line on stderr, then the answer."""

from __future__ import annotations

import pytest

from det.cli.__main__ import main
from tests.fakes.sleeping_front import OK, PLATFORM_503, sleeping_front


def test_det_says_waking_the_master_once_on_stderr_then_answers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DET_MASTER_WAKE_SECONDS", raising=False)
    with sleeping_front([PLATFORM_503, PLATFORM_503, OK]) as front:
        code = main(["-m", front.url, "master", "info", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '"clusterId": "c1"' in out
    assert err.splitlines() == [
        f"waking the master at {front.url} (it sleeps when idle; waiting up to 300 s)"
    ]
    assert "Traceback" not in err and len(front.seen) == 3


def test_a_bad_wake_setting_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_MASTER_WAKE_SECONDS", "-1")
    with sleeping_front([OK]) as front:
        code = main(["-m", front.url, "master", "info"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().endswith("DET_MASTER_WAKE_SECONDS must be 0 or more, not '-1'")
    assert len(err.strip().splitlines()) == 1
