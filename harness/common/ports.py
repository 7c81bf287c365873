"""Ports shared by the master, the agents and the deploy programs.

An interactive task's service (JupyterLab, TensorBoard, a shell's SSH server) listens on its
agent, with host networking, at a port in :data:`TASK_SERVICE_PORTS` (the first plus the
allocation's ``DET_UNIQUE_PORT_OFFSET``); the master's proxy connects there. A deploy must let
the master, and only the master, reach the agents on these ports.
"""

from __future__ import annotations

FIRST_TASK_SERVICE_PORT = 2700
#: How many ports: DET_UNIQUE_PORT_OFFSET is below this.
TASK_SERVICE_PORT_COUNT = 1000
TASK_SERVICE_PORTS = range(
    FIRST_TASK_SERVICE_PORT, FIRST_TASK_SERVICE_PORT + TASK_SERVICE_PORT_COUNT
)
