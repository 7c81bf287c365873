"""The gang of a multi-container trial as its containers are told it (pure parts)."""

from __future__ import annotations

import json

from det.master.services import rendezvous


def test_container_tokens_round_trip_and_the_chief_keeps_the_allocation_token() -> None:
    assert rendezvous.container_token("abc-_Z9", 0) == "abc-_Z9"
    assert rendezvous.split_token(rendezvous.container_token("abc-_Z9", 0)) == ("abc-_Z9", 0)
    assert rendezvous.split_token(rendezvous.container_token("abc-_Z9", 3)) == ("abc-_Z9", 3)
    # Not a rank suffix: left whole (its digest then matches nothing, or a user session).
    for token in ("a.b", ".1", "abc.", "abc.12345", "a.-1"):
        assert rendezvous.split_token(token) == (token, 0), token


def test_every_container_is_told_the_same_gang_in_agent_order() -> None:
    placement = {"b-agent": ["0"], "a-agent": ["0", "1"]}
    addresses = {"a-agent": ["10.0.0.1"], "b-agent": []}
    order = rendezvous.container_order(placement)
    assert order == ["a-agent", "b-agent"]
    a = rendezvous.rendezvous_variables(order, addresses, placement, "a-agent")
    b = rendezvous.rendezvous_variables(order, addresses, placement, "b-agent")
    assert json.loads(a["DET_CONTAINER_ADDRS"]) == ["10.0.0.1", "127.0.0.1"]
    assert a["DET_CONTAINER_ADDRS"] == b["DET_CONTAINER_ADDRS"]
    assert (a["DET_CONTAINER_RANK"], b["DET_CONTAINER_RANK"]) == ("0", "1")
    assert json.loads(b["DET_CONTAINER_SLOT_COUNTS"]) == [2, 1]
