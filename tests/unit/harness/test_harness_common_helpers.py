"""The shared backoff rule and master-URL helpers (det.common.backoff, det.common.master_url)
that the master, the agent and the harness all use."""

from __future__ import annotations

import random

import pytest

from det.common import master_url
from det.common.backoff import backoff


def test_backoff_doubles_from_base_up_to_the_cap() -> None:
    assert [backoff(n, base=0.5, cap=10.0) for n in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]


def test_backoff_of_a_very_long_outage_stays_at_the_cap() -> None:
    assert backoff(10_000, base=0.1, cap=5.0) == 5.0
    assert backoff(-3, base=0.1, cap=5.0) == 0.1  # "before the first retry" is the base


def test_full_jitter_spreads_delays_within_the_step() -> None:
    rng = random.Random(3)
    delays = [backoff(n, base=0.5, cap=4.0, jitter=rng.random()) for n in range(12)]
    assert all(0 < d <= min(4.0, 0.5 * 2**n) for n, d in enumerate(delays))
    assert max(delays[6:]) > 1.0  # grows past the first steps
    assert len(set(delays)) == len(delays)


def test_partial_jitter_keeps_three_quarters_of_the_delay() -> None:
    rng = random.Random(7)
    delays = [backoff(n, base=1.0, cap=30.0, jitter=0.25 * rng.random()) for n in range(12)]
    assert delays[-1] >= 30.0 * 0.75
    assert all(0.75 * min(30.0, 2**n) <= d <= min(30.0, 2**n) for n, d in enumerate(delays))


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"base": 0.0, "cap": 1.0}, "base"), ({"base": 1.0, "cap": 1.0, "jitter": 1.5}, "jitter")],
)
def test_backoff_refuses_nonsense(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        backoff(1, **kwargs)


@pytest.mark.parametrize(
    ("given", "default_port", "expected"),
    [
        ("localhost", 8080, "http://localhost:8080"),
        ("localhost", None, "http://localhost"),
        ("10.1.2.3:9000", 8080, "http://10.1.2.3:9000"),
        ("https://det.example.com:443/", 8080, "https://det.example.com:443"),
        ("https://det.example.com", 8080, "https://det.example.com:8080"),
        ("http://m:8080//", None, "http://m:8080"),
        ("  host:8080/ ", None, "http://host:8080"),
        ("http://[::1]", 8080, "http://[::1]:8080"),
        ("http://h/prefix/", 8080, "http://h:8080/prefix"),
    ],
)
def test_canonicalize(given: str, default_port: int | None, expected: str) -> None:
    assert master_url.canonicalize(given, default_port=default_port) == expected


@pytest.mark.parametrize(("given", "named"), [("", "empty"), ("http://h:80x", "port")])
def test_canonicalize_names_what_is_wrong(given: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        master_url.canonicalize(given)


PLACEHOLDERS = {"": "addr/internal", "internal-ip": "addr/internal", "public": "addr/public"}
ANSWERS = {"addr/internal": "10.0.0.5", "addr/public": "203.0.113.9"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://internal-ip:8080", "http://10.0.0.5:8080"),
        ("https://public", "https://203.0.113.9:8080"),
        ("internal-ip:9000", "http://10.0.0.5:9000"),
        ("http://:9000", "http://10.0.0.5:9000"),
        ("http://master.example.com:8443", "http://master.example.com:8443"),
    ],
)
def test_resolve_reads_placeholders_from_the_table(url: str, expected: str) -> None:
    assert master_url.resolve(url, PLACEHOLDERS, ANSWERS.__getitem__) == expected


def test_resolve_asks_the_metadata_only_for_a_placeholder() -> None:
    asked: list[str] = []

    def lookup(key: str) -> str:
        asked.append(key)
        return "x"

    master_url.resolve("http://master.example.com", PLACEHOLDERS, lookup)
    assert asked == []
