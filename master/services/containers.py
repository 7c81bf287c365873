"""What every task container is made of, whatever runs in it (a trial, a notebook, a command, a
checkpoint GC): the allocation's token, the image and environment for the agent's device type,
the Docker options from the resolved config, the mounts, the service port, and the reasons an
allocation ends that the agent or the master writes. ``trial_runs`` (trials), ``ntsc``
(interactive tasks), ``checkpoint_gc`` and ``task_services`` build on it; it imports none of
them.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence

from det.common import agent_protocol
from det.common.container_spec import BindMount, Device, DockerOptions
from det.common.jsontypes import JSONObject, JSONValue
from det.master import container_policy, db
from det.master.db import Conn
from det.master.errors import PermissionDenied
from det.master.expconf import stored
from det.master.expconf.schema import DEFAULT_CPU_IMAGE
from det.master.handles import MasterState
from det.master.services import agent_users, task_container_policy, users

AGENT_LOST = agent_protocol.AGENT_LOST
#: How an agent's container error starts when the image could not be pulled (det.agent.images).
IMAGE_PULL_FAILED = "image pull failed: "
START_FAILED = "start failed: "
#: Determined's default /dev/shm for task containers (task_container_defaults.shm_size_bytes).
DEFAULT_SHM_SIZE = 4 * 1024**3
WORKDIR = "/run/determined/workdir"


def allocation_token(st: MasterState, allocation_id: str) -> str:
    mac = hmac.new(st.token_secret.encode(), allocation_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def task_env(st: MasterState, allocation_id: str, task_id: str, task_type: str) -> dict[str, str]:
    """What every task container is told of its master and itself (the rest is its kind's)."""
    return {
        "DET_MASTER": st.config.url(),
        "DET_CLUSTER_ID": st.cluster_id,
        "DET_TASK_ID": task_id,
        "DET_ALLOCATION_ID": allocation_id,
        "DET_SESSION_TOKEN": allocation_token(st, allocation_id),
        "DET_TASK_TYPE": task_type,
    }


def owner_session_env(conn: Conn, st: MasterState, allocation_id: str) -> dict[str, str]:
    """``DET_USER_TOKEN``: a session of the task's owner for the tools the user runs in it (the
    official SDK's ``client.login()`` and ``det`` read it with ``DET_USER``); the allocation's
    one, issued on its first spec, revoked when it ends (:func:`users.task_session`). Trials
    and interactive tasks get it; a checkpoint GC runs none of the user's tools and does not."""
    token = users.task_session(conn, st.token_secret, allocation_id)
    return {"DET_USER_TOKEN": token} if token is not None else {}


def _object(value: JSONValue) -> JSONObject:
    """``value`` when it is an object, else ``{}`` (a resolved config's section: always one)."""
    return value if isinstance(value, dict) else {}


def _objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a resolved config's list of them (``bind_mounts``, ``devices``)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _strings(value: JSONValue) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def docker_options(
    st: MasterState,
    config: JSONObject,
    pool: str,
    *,
    admin: bool,
    policy: container_policy.ContainerPolicy | None = None,
) -> DockerOptions:
    """The container spec's Docker settings from the experiment's resolved config (which already
    holds the cluster's task_container_defaults) and the pool's ``network_mode``, with the host
    policy the agent applies to its mounts and devices (``admin``: whether the task's owner is
    one now; ``policy``: the pool's task container policy, by default the one in force now,
    :func:`task_container_policy.policy_for`, the stored one read at most a few seconds ago).

    ``registryAuth`` goes to the agent that pulls and nowhere else (see expconf.environment).
    """
    env_cfg = _object(config.get("environment"))
    res = _object(config.get("resources"))
    network = st.config.task_container_defaults_for(pool).get("network_mode")
    auth = env_cfg.get("registry_auth")
    shm = res.get("shm_size")
    devices: list[Device] = [
        {
            "hostPath": str(d.get("host_path")),
            "containerPath": str(d.get("container_path")),
            "mode": stored.device_mode(d),
        }
        for d in _objects(res.get("devices"))
    ]
    return {
        "forcePull": stored.force_pull_image(config),
        "registryAuth": {k: str(v) for k, v in auth.items() if v}
        if isinstance(auth, dict)
        else None,
        "capAdd": _strings(env_cfg.get("add_capabilities")),
        "capDrop": _strings(env_cfg.get("drop_capabilities")),
        "shmSize": shm if isinstance(shm, int) and shm else DEFAULT_SHM_SIZE,
        "devices": devices,
        "networkMode": network if isinstance(network, str) and network else "host",
        "bindMounts": bind_mounts(config),
        "hostPolicy": container_policy.host_policy(
            admin,
            policy if policy is not None else task_container_policy.policy_for(st, pool),
            _trusted(st, pool),
        ),
    }


def _installation() -> list[str]:
    """Where the master's Python and det's code live: no task mounts them."""
    out = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    for name in ("det", "det.master"):
        spec = importlib.util.find_spec(name)
        if spec is not None:
            out.extend(spec.submodule_search_locations or [])
    return [os.path.abspath(p) for p in out if p and os.path.abspath(p) != "/"]


def _trusted(st: MasterState, pool: str) -> container_policy.Trusted:
    """What the cluster gives every task of ``pool`` and what it protects besides the policy:
    the master's data directory (its database and agent token) and installation."""
    return container_policy.trusted_of(
        st.config.task_container_defaults_for(pool),
        st.config.checkpoint_storage,
        [os.path.abspath(st.config.data_dir), *_installation()],
    )


def owner_is_admin(conn: Conn, allocation_id: str) -> bool:
    """Whether the user whose job the allocation is holds the admin flag now."""
    return bool(
        db.scalar(
            conn,
            bool,
            "SELECT u.admin FROM allocations a JOIN jobs j ON j.id = a.job_id"
            " JOIN users u ON u.id = j.owner_id WHERE a.id = %s",
            (allocation_id,),
        )
    )


def check_policy(
    st: MasterState,
    config: JSONObject,
    *,
    admin: bool,
    extra_mounts: Sequence[container_policy.Mount] = (),
) -> None:
    """PermissionDenied (one line naming the field and the rule) when a non-admin's task
    ``config`` (resolved, its pool named) breaks the pool's ``task_container_policy``
    (det.master.container_policy); admins' tasks may use anything. ``extra_mounts``: the
    mounts the master adds for the task (a TensorBoard's storage), judged as the user's."""
    if admin:
        return
    pool = str(_object(config.get("resources")).get("resource_pool") or "")
    tcd = st.config.task_container_defaults_for(pool)
    request = container_policy.request_of(config, extra_mounts, tcd)
    refusal = next(
        container_policy.refusals(
            request, task_container_policy.policy_for(st, pool), _trusted(st, pool)
        ),
        None,
    )
    if refusal is not None:
        raise PermissionDenied(f"task container policy: {refusal}")


def run_as(conn: Conn, allocation_id: str, env: dict[str, str]) -> str | None:
    """The container's ``user`` ("uid:gid") when its owner is linked to an agent user (their
    names go in ``USER``/``LOGNAME``, as a login sets them); None: the image's user."""
    link = agent_users.container_user(conn, allocation_id)
    if not link:
        return None
    env["USER"] = env["LOGNAME"] = str(link["agentUser"])
    return f"{int(link['agentUid'])}:{int(link['agentGid'])}"


def image_and_env(conn: Conn, config: JSONObject, agent_id: str) -> tuple[str, dict[str, str]]:
    """The task image and the user's environment variables for the agent's device type."""
    env_cfg = _object(config.get("environment"))
    device = "cuda" if slot_type(conn, agent_id) == "cuda" else "cpu"
    image = env_cfg.get("image")
    if isinstance(image, dict):
        image = image.get(device) or image.get("cpu")
    env: dict[str, str] = {}
    variables = env_cfg.get("environment_variables") or []
    if isinstance(variables, dict):
        variables = variables.get(device) or []
    for item in variables if isinstance(variables, list) else []:
        key, _, value = str(item).partition("=")
        env[key] = value
    return str(image or DEFAULT_CPU_IMAGE), env


def bind_mounts(config: JSONObject) -> list[BindMount]:
    """The experiment's bind mounts, plus its shared_fs checkpoint storage."""
    mounts: list[BindMount] = [
        {
            "hostPath": str(m.get("host_path")),
            "containerPath": str(m.get("container_path")),
            "readOnly": bool(m.get("read_only")),
            "propagation": stored.mount_propagation(m),
        }
        for m in _objects(config.get("bind_mounts"))
    ]
    return mounts + _storage_mounts(config.get("checkpoint_storage"))


def _storage_mounts(storage: JSONValue) -> list[BindMount]:
    """shared_fs checkpoint storage is mounted into every task container at its
    ``container_path``, as Determined does: the official harness writes there."""
    if not isinstance(storage, dict) or storage.get("type") != "shared_fs":
        return []
    return [
        {
            "hostPath": str(storage["host_path"]),
            "containerPath": stored.shared_fs_container_path(storage),
            "readOnly": False,
            "propagation": stored.shared_fs_propagation(storage),
        }
    ]


def slot_type(conn: Conn, agent_id: str) -> str:
    found = db.scalar(conn, str, "SELECT type FROM slots WHERE agent_id = %s LIMIT 1", (agent_id,))
    return found if found is not None else "cpu"


#: How many port offsets there are (DET_UNIQUE_PORT_OFFSET is below it; det.common.ports).
PORT_OFFSETS = 1000
# Serializes the choice of port offsets (a transaction-scoped advisory lock): "det_port".
_PORT_LOCK_KEY = 0x6465745F706F7274


@dataclasses.dataclass(frozen=True, slots=True)
class _Host:
    """An agent and the addresses it reported (agents of one machine share one)."""

    id: str
    addresses: JSONValue


@dataclasses.dataclass(frozen=True, slots=True)
class _Live:
    """A live allocation's offset and the agents it runs on (:func:`choose_port_offsets`)."""

    id: str
    port_offset: int | None
    agents: list[str]


def _hashed_offset(allocation_id: str) -> int:
    return int(hashlib.sha1(allocation_id.encode()).hexdigest()[:4], 16) % PORT_OFFSETS


def port_offset(allocation_id: str, stored: int | None) -> int:
    """An allocation's DET_UNIQUE_PORT_OFFSET (a served task listens at 2700 + it): the one
    chosen when it was placed (:func:`choose_port_offsets`, ``allocations.port_offset``); an
    allocation placed before offsets were stored keeps the hash of its id its containers
    started with."""
    return stored if stored is not None else _hashed_offset(allocation_id)


def choose_port_offsets(conn: Conn, placements: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
    """Give each newly placed allocation (id -> its placement's agents) the first offset, from a
    hash of its id, that no other live allocation on the same hosts holds, and store it: two
    tasks on one machine must not listen on one port.

    Called in the scheduler's transaction, which places them; the advisory lock keeps a second
    master's pass (a leader change mid-pass) from reading the same offsets as free. Only when
    all 1,000 are held on a host does an allocation fall back to its hash."""
    if not placements:
        return
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PORT_LOCK_KEY,))
    # One read of the agents and one of the live allocations for the whole pass (a query per
    # placement read every live allocation each time: minutes for 2,000 placements).
    hosts = db.fetch_rows(conn, _Host, "SELECT id, addresses FROM agents")
    by_address: dict[str, set[str]] = {}
    for h in hosts:
        for address in _strings(h.addresses):
            by_address.setdefault(address, set()).add(h.id)
    known = {h.id: _strings(h.addresses) for h in hosts}
    held_on: dict[str, dict[str, int]] = {}  # agent -> {allocation id: its offset}

    def hold(allocation_id: str, offset: int, agents: Sequence[str]) -> None:
        for agent in agents:
            held_on.setdefault(agent, {})[allocation_id] = offset

    for live in db.fetch_rows(
        conn,
        _Live,
        "SELECT id, port_offset, array(SELECT jsonb_object_keys(placement)) AS agents"
        " FROM allocations WHERE state <> 'TERMINATED' AND placement IS NOT NULL"
        " AND NOT id = ANY(%s)",
        (list(placements),),
    ):
        offset = live.port_offset if live.port_offset is not None else _hashed_offset(live.id)
        hold(live.id, offset, live.agents)
    chosen: list[tuple[int, str]] = []
    for allocation_id, agents in placements.items():
        # Its hosts: each of its agents and every agent reporting one of that agent's addresses.
        same_host = {a for a in agents if a in known}
        for a in list(same_host):
            for address in known[a]:
                same_host |= by_address.get(address, set())
        held = {o for a in same_host for o in held_on.get(a, {}).values()}
        start = _hashed_offset(allocation_id)
        offset = next(
            (o for i in range(PORT_OFFSETS) if (o := (start + i) % PORT_OFFSETS) not in held),
            start,
        )
        chosen.append((offset, allocation_id))
        hold(allocation_id, offset, list(agents))  # a neighbour of the rest of this pass's
    conn.execute(
        "UPDATE allocations a SET port_offset = c.o FROM unnest(%s::int[], %s::text[]) AS c(o, id)"
        " WHERE a.id = c.id",
        ([o for o, _ in chosen], [a for _, a in chosen]),
    )
