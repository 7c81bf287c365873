"""Steps every cloud's ``up``/``list`` share (``deploy.common.commands``)."""

from __future__ import annotations

import io
import json

import pytest

from det.deploy.common import commands


class _Replace:
    """The cloud's removal of stale agents: records the digest it was given."""

    def __init__(self, removed: list[str]) -> None:
        self.removed = removed
        self.digests: list[str] = []

    def __call__(self, digest: str) -> list[str]:
        self.digests.append(digest)
        return self.removed


@pytest.mark.parametrize(
    "outputs",
    [{}, {"config_hash": ""}, {"config_hash": "aaaa"}],
    ids=["no-hash", "empty-hash", "same-hash"],
)
def test_an_unchanged_config_replaces_no_agent(outputs: dict[str, str]) -> None:
    replace, out = _Replace(["i-1"]), io.StringIO()
    commands.replace_stale_agents(outputs, {"config_hash": "aaaa"}, False, replace, "deleted", out)
    assert replace.digests == [] and out.getvalue() == ""


def test_keep_agents_leaves_the_old_agents_and_says_so() -> None:
    replace, out = _Replace(["i-1"]), io.StringIO()
    commands.replace_stale_agents(
        {"config_hash": "bbbb"}, {"config_hash": "aaaa"}, True, replace, "deleted", out
    )
    assert replace.digests == []
    assert "agents keep running (--keep-agents)" in out.getvalue()


def test_a_changed_config_removes_the_old_agents_and_counts_them() -> None:
    replace, out = _Replace(["i-1", "i-2"]), io.StringIO()
    commands.replace_stale_agents(
        {"config_hash": "bbbb"}, {"config_hash": "aaaa"}, False, replace, "terminated", out
    )
    assert replace.digests == ["bbbb"]
    assert out.getvalue().startswith(
        "The master's config changed: terminated 2 agents launched for the old one;"
    )


def test_a_changed_config_with_no_old_agents_prints_nothing() -> None:
    replace, out = _Replace([]), io.StringIO()
    commands.replace_stale_agents({"config_hash": "bbbb"}, {}, False, replace, "deleted", out)
    assert replace.digests == ["bbbb"] and out.getvalue() == ""


def test_list_writes_a_line_per_cluster_or_json() -> None:
    rows = [
        commands.cluster_summary("a", {"master_url": "https://m:8443", "bucket": "b"}),
        commands.cluster_summary("b", {"region": "r"}),
    ]
    text = io.StringIO()
    assert commands.write_list(rows, False, text, "none\n") == 0
    assert text.getvalue() == "a\thttps://m:8443\tb\nb\t-\t-\n"
    as_json = io.StringIO()
    commands.write_list(rows, True, as_json)
    assert json.loads(as_json.getvalue()) == [
        {"clusterId": "a", "masterUrl": "https://m:8443", "bucket": "b"},
        {"clusterId": "b", "masterUrl": None, "bucket": None},
    ]
    empty = io.StringIO()
    commands.write_list([], False, empty, "none\n")
    assert empty.getvalue() == "none\n"
