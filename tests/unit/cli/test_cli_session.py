"""The token cache and master URL handling (no network)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from det.cli.session import TokenStore, canonical_master


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("DET_MASTER", raising=False)
    return tmp_path / "cfg"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "http://127.0.0.1:8080"),
        ("localhost", "http://localhost:8080"),
        ("10.1.2.3:9000", "http://10.1.2.3:9000"),
        ("https://det.example.com:443/", "https://det.example.com:443"),
        ("http://m:8080//", "http://m:8080"),
    ],
)
def test_canonical_master(given: str | None, expected: str) -> None:
    assert canonical_master(given) == expected


def test_det_master_env_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_MASTER", "m.internal:8081")
    assert canonical_master(None) == "http://m.internal:8081"
    assert canonical_master("other") == "http://other:8080"


def test_tokens_are_kept_per_master_and_user_in_a_private_file(config_home: Path) -> None:
    a = TokenStore("http://a:8080")
    a.set("alice", "tok-a-alice")
    a.set("bob", "tok-a-bob")
    TokenStore("http://b:8080").set("alice", "tok-b-alice")
    path = config_home / "det" / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = TokenStore("http://a:8080")
    assert again.token("alice") == "tok-a-alice"
    assert again.token("bob") == "tok-a-bob"
    assert again.active_user() == "bob"  # the last login
    assert TokenStore("http://b:8080").token("alice") == "tok-b-alice"
    assert TokenStore("http://b:8080").token("bob") is None
    assert TokenStore("http://c:8080").active_user() is None


def test_drop_forgets_one_user_only(config_home: Path) -> None:
    s = TokenStore("http://a:8080")
    s.set("alice", "1")
    s.set("bob", "2")
    s.drop("bob")
    again = TokenStore("http://a:8080")
    assert again.token("bob") is None and again.active_user() is None
    assert again.token("alice") == "1"


def test_a_leftover_world_readable_file_becomes_private(config_home: Path) -> None:
    path = config_home / "det" / "auth.json"
    path.parent.mkdir(parents=True)
    for p in (path, path.with_suffix(".tmp")):
        p.write_text("{}")
        p.chmod(0o644)
    TokenStore("http://a:8080").set("alice", "1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["masters"]["http://a:8080"]["tokens"] == {"alice": "1"}


def test_a_corrupt_cache_is_treated_as_empty(config_home: Path) -> None:
    path = config_home / "det" / "auth.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    s = TokenStore("http://a:8080")
    assert s.active_user() is None
    s.set("alice", "1")
    assert TokenStore("http://a:8080").token("alice") == "1"
