"""``det-agent enroll`` before any network call: what it needs, and a machine already enrolled
asks nothing (the boot simulations run the exchange against a real master)."""

from __future__ import annotations

from pathlib import Path

import pytest

from det.agent import enroll


def _config(tmp_path: Path, **extra: str) -> Path:
    lines = ["master_url: http://127.0.0.1:9", "agent_id: i-0abc"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    path = tmp_path / "agent.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_no_token_file_in_the_config_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert enroll.main(["--config-file", str(_config(tmp_path))]) == 2
    assert "agent_token_file: required to enroll" in capsys.readouterr().err


def test_an_enrolled_machine_asks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "agent_token"
    token.write_text("dat1.i-0abc.00\n")
    monkeypatch.delenv(enroll.TICKET_ENV, raising=False)
    # The master's address is a closed port: any request would fail.
    assert enroll.main(["--config-file", str(_config(tmp_path, agent_token_file=str(token)))]) == 0
    assert token.read_text() == "dat1.i-0abc.00\n"


def test_without_a_ticket_it_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(enroll.TICKET_ENV, raising=False)
    config = _config(tmp_path, agent_token_file=str(tmp_path / "agent_token"))
    assert enroll.main(["--config-file", str(config)]) == 2
    assert "DET_ENROLL_TICKET is not set" in capsys.readouterr().err


def test_the_token_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "agent_token"
    enroll.write_private(path, "dat1.x.y\n")
    assert path.read_text() == "dat1.x.y\n" and path.stat().st_mode & 0o777 == 0o600
