"""The rows of users, their agent-user links and their tokens."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from typing_extensions import TypedDict


class AgentUserLink(TypedDict):
    """A user's link (``users.agent_user_group``), as PatchUser's ``agentUserGroup`` names it."""

    agentUid: int
    agentGid: int
    agentUser: str
    agentGroup: str


class Token(TypedDict):
    """A ``user_sessions`` row as ``schemas.users.token_info`` shows it (no hash)."""

    id: int
    user_id: int
    description: str
    created_at: dt.datetime
    expires_at: dt.datetime
    revoked_at: dt.datetime | None
    token_type: str


@dataclass(frozen=True)
class User:
    id: int
    username: str
    admin: bool
    active: bool
    display_name: str | None = None
    remote: bool = False
    modified_at: dt.datetime | None = None
    #: ``det user link-with-agent-user`` (None: unlinked)
    agent_user_group: AgentUserLink | None = None
