"""An enrolled agent's own token (det.master.services.enrollment hands them out).

``dat1.<agent id>.<mac>``, the mac an HMAC-SHA256 of the agent id keyed with the cluster's agent
token: the master (and its dispatcher, which has no database connection) checks one without a
lookup, it is good only for that agent id's routes (det.master.api._common), and replacing the
cluster's agent token (``security.agent_token``) revokes every one of them. Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import re

TOKEN_PREFIX = "dat1."
# Agent ids are cloud instance ids or names (i-0abc..., det-agent-x1y2): no dots, no blanks.
AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_:-]{0,127}$")


def agent_token_for(agent_token: str, agent_id: str) -> str:
    """The token of agent ``agent_id`` in the cluster whose agent token is ``agent_token``."""
    mac = hmac.new(
        agent_token.encode(), b"det-agent-token:" + agent_id.encode(), hashlib.sha256
    ).hexdigest()
    return f"{TOKEN_PREFIX}{agent_id}.{mac}"


def agent_of_token(agent_token: str, presented: str) -> str | None:
    """The agent id ``presented`` is the token of, or None when it is not a valid agent token
    of this cluster."""
    if not presented.startswith(TOKEN_PREFIX):
        return None
    agent_id, _, _mac = presented[len(TOKEN_PREFIX) :].rpartition(".")
    if not agent_id or not AGENT_ID.match(agent_id):
        return None
    if hmac.compare_digest(presented, agent_token_for(agent_token, agent_id)):
        return agent_id
    return None
