"""The ports a task's launchers and Core APIs listen on, one set per allocation.

Task containers use their host's network, so two allocations on one machine (two agents of one
host, or two trials of one agent) see each other's ports. Determined's launcher binds the torch
rendezvous at ``C10D_PORT`` (29400 unless set) and its Core API at
``INTER_TRAIN_PROCESS_COMM_PORT_1``/``_2`` (12360/12376 unless set), the same numbers in every
task: two distributed tasks on one host collided (``EADDRINUSE``). The master gives every
allocation a ``DET_UNIQUE_PORT_OFFSET`` (0-999) that no other live allocation on the same host
holds (``det.master.services.containers.choose_port_offsets``); each port here is a base plus
that offset, and the bases are 1,000 apart, so no two allocations of a host, and no two ports
of one allocation, are ever the same number (det's Core API's node-local groups listen on
ports the kernel chooses, so two containers of one task on one host never collide either):

==========================  ==============================  ===============================
range                       what                            who reads it
==========================  ==============================  ===============================
12360-13359                 det's Core API (global group)   ``det.core._distributed``
14360-15359                 official Core API (publish)     ``INTER_TRAIN_PROCESS_COMM_PORT_1``
15360-16359                 official Core API (pull)        ``INTER_TRAIN_PROCESS_COMM_PORT_2``
16360-17359                 launchers' SSH (horovod, ds)    ``DTRAIN_SSH_PORT``
29400-30399                 torch rendezvous (c10d store)   ``C10D_PORT`` (both launchers)
==========================  ==============================  ===============================

A value the user set (experiment ``environment_variables`` or the startup hook) wins.
"""

from __future__ import annotations

from collections.abc import Mapping

#: How many offsets there are (``DET_UNIQUE_PORT_OFFSET`` is below it).
OFFSETS = 1000
C10D_BASE = 29400
#: Base ports of Determined's own variables, by name.
BASES = {
    "INTER_TRAIN_PROCESS_COMM_PORT_1": 14360,
    "INTER_TRAIN_PROCESS_COMM_PORT_2": 15360,
    "DTRAIN_SSH_PORT": 16360,
    "C10D_PORT": C10D_BASE,
}


def offset_of(env: Mapping[str, str]) -> int:
    """The allocation's port offset (0 off-cluster or when unreadable)."""
    try:
        return int(env.get("DET_UNIQUE_PORT_OFFSET") or 0) % OFFSETS
    except ValueError:
        return 0


def port_env(offset: int) -> dict[str, str]:
    """Each port variable for an allocation with this offset (pure)."""
    return {name: str(base + offset % OFFSETS) for name, base in BASES.items()}


def with_ports(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the allocation's ports added where the user set none (pure)."""
    return {**port_env(offset_of(env)), **env}


def c10d_port(env: Mapping[str, str]) -> int:
    """The torch rendezvous port of this allocation."""
    value = env.get("C10D_PORT")
    return int(value) if value and value.isdigit() else C10D_BASE + offset_of(env)


def gang_line(env: Mapping[str, str]) -> str | None:
    """What a container of a trial spanning machines logs before its entrypoint (pure): its
    rank, its own address, the chief's, and the ports it uses; None for one container.

    ``det.exec.run``'s line, ``container rank R of N at ADDR, chief at ADDR0: PORT=…``, is how
    a trial's log shows where each container ran and where its ranks met."""
    import json  # why: only this helper reads the gang (the rest of the module is arithmetic)

    try:
        addrs = [str(a) for a in json.loads(env.get("DET_CONTAINER_ADDRS") or "[]")]
        rank = int(env.get("DET_CONTAINER_RANK") or 0)
    except (ValueError, TypeError):
        return None
    if len(addrs) < 2 or not 0 <= rank < len(addrs):
        return None
    used = ", ".join(f"{name}={env.get(name, '')}" for name in BASES)
    return f"container rank {rank} of {len(addrs)} at {addrs[rank]}, chief at {addrs[0]}: {used}"
