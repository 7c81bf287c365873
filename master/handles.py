"""What a master process holds: its configuration and handles (the database pool, the cluster
identity and tokens), never state a restart would lose; the state machines are ``states.py``."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from det.master.authcache import Epoch
from det.master.config import MasterConfig
from det.master.db import Conn


@dataclass
class MasterState:
    config: MasterConfig
    pool: ConnectionPool[Conn]
    cluster_id: str
    agent_token: str
    token_secret: str
    master_id: str
    # Shared by the master's processes (made before they fork); None: no session cache.
    auth_epoch: Epoch | None = None
    # The experiment list's (det.master.listcache), shared the same way; None: the list's
    # version is read at every request.
    list_epoch: Epoch | None = None
    # The port of the task listener (det.master.task_origin) once it is bound: the configured
    # ``task_port``, or the one the system picked for 0.
    task_port: int | None = None
