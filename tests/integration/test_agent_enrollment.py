"""Cloud agents enroll with a one-time ticket (det.master.services.enrollment): the master
issues one per launch request, trades each use for that agent's own token, and refuses a
spent, expired or unknown ticket; an agent's token is good for its own agent id only. Real
PostgreSQL (the in-process master's database) and, for the launch, moto in server mode."""

from __future__ import annotations

import base64
import datetime as dt
import re
from typing import Any

import boto3
import pytest
import requests

from det.master import agent_tokens, dispatch
from det.master.provisioner.config import parse_provider_config
from det.master.services import enrollment, provisioning

pytestmark = pytest.mark.integration

ENROLL = "/api/v1/agent_enrollments"


def _issue(m: Any, uses: int = 1, now: dt.datetime | None = None, **kw: Any) -> str:
    with m.state.pool.connection() as conn:
        return enrollment.issue(conn, "gpu", uses, now or dt.datetime.now(dt.UTC), **kw)


def _enroll(m: Any, ticket: str, agent_id: str) -> requests.Response:
    # No session: the ticket is the credential.
    return m.new_session().post(m.url + ENROLL, json={"ticket": ticket, "agentId": agent_id})


def _enrolled(m: Any) -> list[list[str]]:
    with m.state.pool.connection() as conn:
        rows = conn.execute("SELECT enrolled FROM enrollment_tickets ORDER BY created_at")
        return [r["enrolled"] for r in rows.fetchall()]


def _heartbeat(m: Any, token: str, agent_id: str) -> requests.Response:
    return m.new_session().post(
        f"{m.url}/api/v1/agents/{agent_id}/heartbeat",
        json={"slots": []},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_a_ticket_buys_one_agents_token_once(api_master: Any) -> None:
    ticket = _issue(api_master)
    r = _enroll(api_master, ticket, "i-0abc1")
    assert r.status_code == 200, r.text
    token = r.json()["agentToken"]
    assert token.startswith("dat1.i-0abc1.") and api_master.agent_token not in token
    assert agent_tokens.agent_of_token(api_master.agent_token, token) == "i-0abc1"
    # Spent: the same agent again, or another machine that read the same user data.
    for agent_id in ("i-0abc1", "i-0other"):
        again = _enroll(api_master, ticket, agent_id)
        assert again.status_code == 401 and "ticket: already used" in again.text
    assert _enrolled(api_master) == [["i-0abc1"]]


def test_a_ticket_for_two_machines_admits_two_agents_each_once(api_master: Any) -> None:
    ticket = _issue(api_master, uses=2)
    assert _enroll(api_master, ticket, "i-1").status_code == 200
    assert _enroll(api_master, ticket, "i-1").status_code == 401
    assert _enroll(api_master, ticket, "i-2").status_code == 200
    third = _enroll(api_master, ticket, "i-3")
    assert third.status_code == 401 and "already used" in third.text


def test_an_expired_or_unknown_ticket_is_refused_and_changes_nothing(api_master: Any) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    ticket = _issue(api_master, now=old)  # lived 30 minutes, half an hour ago
    r = _enroll(api_master, ticket, "i-late")
    assert r.status_code == 401 and "ticket: expired at" in r.text
    assert _enrolled(api_master) == [[]]
    forged = enrollment.TICKET_PREFIX + "A" * 43
    r = _enroll(api_master, forged, "i-late")
    assert r.status_code == 401 and "ticket: unknown" in r.text
    r = _enroll(api_master, api_master.agent_token, "i-late")  # the cluster token is no ticket
    assert r.status_code == 401 and "not an enrollment ticket" in r.text
    # A new issue removes what expired.
    _issue(api_master)
    assert _enrolled(api_master) == [[]]


def test_bad_requests_name_the_field(api_master: Any) -> None:
    ticket = _issue(api_master)
    r = _enroll(api_master, ticket, "i-1/../x")
    assert r.status_code == 400 and "agentId" in r.text
    r = api_master.new_session().post(api_master.url + ENROLL, json={"agentId": "i-1"})
    assert r.status_code == 400 and "ticket" in r.text
    assert _enrolled(api_master) == [[]]


def test_an_agents_token_serves_its_own_id_only(api_master: Any) -> None:
    token = _enroll(api_master, _issue(api_master), "i-mine").json()["agentToken"]
    assert _heartbeat(api_master, token, "i-mine").status_code == 200
    other = _heartbeat(api_master, token, "i-theirs")
    assert other.status_code == 403 and "agent i-mine's, not i-theirs's" in other.text
    # A token made with another cluster's secret, or altered, is no token.
    forged = agent_tokens.agent_token_for("another-cluster", "i-mine")
    assert _heartbeat(api_master, forged, "i-mine").status_code == 401
    altered = token[:-1] + ("1" if token.endswith("0") else "0")
    assert _heartbeat(api_master, altered, "i-mine").status_code == 401
    # User routes stay closed to it.
    r = api_master.new_session().get(
        api_master.url + "/api/v1/agents", headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 401
    # The dispatcher's priority lane knows it, and not a forgery.
    head = "POST /api/v1/task/logs HTTP/1.1\r\nAuthorization: Bearer {}\r\n"
    assert dispatch.cluster_traffic(head.format(token).encode(), api_master.agent_token)
    assert not dispatch.cluster_traffic(head.format(forged).encode(), api_master.agent_token)


def test_launched_machines_get_a_ticket_and_never_the_agent_token(
    api_master: Any, aws_endpoint: str
) -> None:
    config = parse_provider_config(
        {"type": "aws", "image_id": "ami-12c6146b", "instance_type": "g4dn.xlarge"}
    )
    provider = provisioning.build_provider(api_master.state, "gpu", config)
    option = config.launch_options()[0]
    tickets = []
    ids = []
    for count in (2, 1):
        launched = provider.launch(option, count)
        ids += [i.id for i in launched]
        user_data = base64.b64decode(
            boto3.client("ec2").describe_instance_attribute(
                InstanceId=launched[0].id, Attribute="userData"
            )["UserData"]["Value"]
        ).decode()
        assert api_master.agent_token not in user_data
        assert "export DET_AGENT_TOKEN=''" in user_data
        (ticket,) = re.findall(r"^export DET_ENROLL_TICKET=(\S+)$", user_data, re.M)
        tickets.append(ticket)
    assert tickets[0] != tickets[1]
    assert _enrolled(api_master) == [[], []]
    # Each launch's ticket admits its machines, each once (moto starts MinCount, 1, of the
    # first launch's 2: its ticket has a second use, for a machine that does not exist).
    assert len(ids) == 2
    assert _enroll(api_master, tickets[0], ids[0]).status_code == 200
    assert _enroll(api_master, tickets[0], ids[0]).status_code == 401
    assert _enroll(api_master, tickets[1], ids[1]).status_code == 200
    assert _enroll(api_master, tickets[1], ids[0]).status_code == 401
    assert _enrolled(api_master) == [[ids[0]], [ids[1]]]
