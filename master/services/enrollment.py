"""Agent enrollment: a cloud agent's user data carries a one-time ticket, never a token.

The provisioner issues a ticket for each launch request (:func:`issue`): it admits one
enrollment per machine of that request (``uses``), each agent id once, for a short time
(:data:`TICKET_LIFESPAN`, the pool's ``max_agent_starting_period`` when longer: a machine whose
agent has not registered by then is replaced anyway). The agent's bootstrap exchanges it at
``POST /api/v1/agent_enrollments`` (:func:`exchange`) for that agent's own token, stores it
root-only on the machine, and starts the agent; a task that reads the user data or the instance
metadata later finds a spent ticket. Only the ticket's SHA-256 is stored.

The agent's token is :func:`det.master.agent_tokens.agent_token_for` of its id.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass

from det.master import db
from det.master.agent_tokens import AGENT_ID, agent_token_for
from det.master.db import Conn
from det.master.errors import InvalidArgument, Unauthenticated
from det.master.services.users import token_digest

TICKET_PREFIX = "detenroll1."
TICKET_LIFESPAN = dt.timedelta(minutes=30)


def issue(
    conn: Conn, pool: str, uses: int, now: dt.datetime, lifespan: dt.timedelta = TICKET_LIFESPAN
) -> str:
    """A new ticket for ``uses`` machines of ``pool``, good until ``now + lifespan``; expired
    tickets are deleted on the way."""
    if uses < 1:
        raise ValueError("uses must be at least 1")
    ticket = TICKET_PREFIX + secrets.token_urlsafe(32)
    conn.execute("DELETE FROM enrollment_tickets WHERE expires_at < %s", (now,))
    conn.execute(
        "INSERT INTO enrollment_tickets (digest, resource_pool, uses, created_at, expires_at)"
        " VALUES (%s, %s, %s, %s, %s)",
        (token_digest(ticket), pool, uses, now, now + lifespan),
    )
    return ticket


@dataclass(frozen=True, slots=True)
class _Ticket:
    """An enrollment ticket as :func:`exchange` checks it."""

    uses: int
    enrolled: list[str]
    expires_at: dt.datetime


def exchange(conn: Conn, ticket: str, agent_id: str, agent_token: str, now: dt.datetime) -> str:
    """Spend one use of ``ticket`` for ``agent_id`` and answer that agent's token.

    Refused (Unauthenticated, nothing changed) when the ticket is unknown, expired, spent, or
    was already used by this agent id; InvalidArgument for a malformed agent id."""
    if not isinstance(agent_id, str) or not AGENT_ID.match(agent_id):
        raise InvalidArgument(
            "agentId: must be 1-128 letters, digits, '_', ':' or '-', starting with a letter or digit"
        )
    if not isinstance(ticket, str) or not ticket.startswith(TICKET_PREFIX):
        raise Unauthenticated("ticket: not an enrollment ticket")
    row = db.fetch_row(
        conn,
        _Ticket,
        "SELECT uses, enrolled, expires_at FROM enrollment_tickets WHERE digest = %s FOR UPDATE",
        (token_digest(ticket),),
    )
    if row is None:
        raise Unauthenticated("ticket: unknown (never issued, or expired and removed)")
    if row.expires_at <= now:
        raise Unauthenticated(f"ticket: expired at {row.expires_at.isoformat()}")
    if agent_id in row.enrolled or len(row.enrolled) >= row.uses:
        raise Unauthenticated("ticket: already used")
    conn.execute(
        "UPDATE enrollment_tickets SET enrolled = array_append(enrolled, %s) WHERE digest = %s",
        (agent_id, token_digest(ticket)),
    )
    return agent_token_for(agent_token, agent_id)
