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
