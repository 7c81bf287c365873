"""The cluster's one row: its identity and the secrets every master process shares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterIdentity:
    """The ``cluster`` row (made once, by the first master to start)."""

    cluster_id: str
    #: What agents present (``det-agent --agent-token``); master.yaml's overrides it.
    agent_token: str
    #: Allocation tokens are HMAC(token_secret, allocation id).
    token_secret: str
