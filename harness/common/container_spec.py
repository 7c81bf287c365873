"""The container spec: what the master sends an agent to start one allocation's container (the
``spec`` of a ``RUN`` in the agent's heartbeat answer; docs/internals.md, "Agent protocol").

One definition for both ends: the master's builders (``det.master.services.containers``,
``allocations``, ``ntsc``, ``checkpoint_gc``) return it and the agent (``det.agent.containers``)
reads it, so mypy checks both against the same keys and types. Keys are camelCase, as on the
wire. Task containers never import it.
"""

from __future__ import annotations

from typing_extensions import TypedDict


class Device(TypedDict):
    """A host device passed into the container (``resources.devices``)."""

    hostPath: str
    containerPath: str
    mode: str


class BindMount(TypedDict):
    """A bind mount (``bind_mounts``, and shared_fs checkpoint storage)."""

    hostPath: str
    containerPath: str
    readOnly: bool
    propagation: str


class HostRoot(TypedDict):
    """A host directory tasks' mounts may come from (``hostPath`` as the master's config names
    it; the agent resolves it on its own host)."""

    hostPath: str
    readOnly: bool


class HostPolicy(TypedDict):
    """What of the agent's host the container may get (``det.common.host_policy``): the master's
    policy for the task's owner, which the agent applies to what each mount and device source
    really is on its own host (``det.agent.mount_guard``)."""

    # The task's owner is an admin: only the protected paths the agent keeps itself apply.
    admin: bool
    # Host paths no mount of a non-admin's task may be, be under or contain.
    protectedPaths: list[str]
    # The cluster's own mounts (task_container_defaults, checkpoint_storage): a non-admin's task
    # may mount each as given (read-only ones also what is under them).
    clusterMounts: list[HostRoot]
    # task_container_policy.bind_mounts: the roots a non-admin's mounts may come from.
    allowedRoots: list[HostRoot]
    # Devices a non-admin's task may pass in besides its slots' GPUs: "c 10:229", "b 7:*", or
    # host paths the agent stat's for their kind and numbers.
    allowedDevices: list[str]


class DockerOptions(TypedDict):
    """The Docker settings from the task's resolved config and its pool."""

    forcePull: bool
    # Docker's auth config for the pull (registry_auth), for the agent that pulls only.
    registryAuth: dict[str, str] | None
    capAdd: list[str]
    capDrop: list[str]
    shmSize: int
    devices: list[Device]
    networkMode: str
    bindMounts: list[BindMount]
    # None from a master that sends none: the agent's own protected paths only.
    hostPolicy: HostPolicy | None


class ContainerSpec(DockerOptions):
    taskId: str
    # TRIAL, CHECKPOINT_GC, COMMAND, NOTEBOOK, SHELL or TENSORBOARD.
    taskType: str
    image: str
    command: list[str]
    env: dict[str, str]
    # The agent's slot ids the allocation holds (strings, as the agent reports its slots).
    slotIds: list[str]
    deviceType: str
    # "uid:gid" (numbers) the container runs as: its owner's agent user (det user
    # link-with-agent-user); None: the image's user.
    user: str | None
    # The master's path of the task's context archive, None without one.
    contextPath: str | None
    workdir: str
    killGraceSeconds: float
    # An interactive task's service port inside the container (notebooks, TensorBoards,
    # shells); None for the rest.
    proxyPort: int | None
