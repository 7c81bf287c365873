"""The task container policy: which host paths, capabilities and devices a non-admin's task
container may use (master.yaml ``task_container_policy``, and each pool's, which overrides it
key by key). Pure: a resolved task config and the policy in, the first refusal out.

What a task asks for is refused, naming the field and the rule, when it

- mounts a **protected host path** (:data:`PROTECTED_PATHS`, the master's ``data_dir`` and the
  policy's ``protected_host_paths``): the path itself, anything under it, or anything above it
  (mounting ``/var`` exposes ``/var/run/docker.sock``);
- mounts a path outside the policy's ``bind_mounts`` allow list (when it has one), or writably
  one the list allows read-only;
- adds a capability outside the policy's ``add_capabilities`` (when set), or else a
  :data:`PROTECTED_CAPABILITIES` one;
- passes a host device outside the policy's ``devices`` (when set), or else a
  :data:`PROTECTED_DEVICES` one.

What the cluster's own ``task_container_defaults`` (and its ``checkpoint_storage``) give every
task is the admin's and always allowed, as is anything under a mount they give (with the same
or less access). Paths are compared after lexical normalisation (``/etc/../root`` is ``/root``,
``//etc/`` is ``/etc``); the master cannot see symbolic links on the agents' hosts, so the agent
refuses its own state and the Docker socket itself (``det.agent.mount_guard``).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from det.common.jsontypes import JSONObject, JSONValue

#: Host paths no non-admin task mounts: the system's configuration, binaries and kernel
#: interfaces, root's home, the runtime sockets (the Docker engine's among them) and the
#: engine's, containerd's, the agent's and a deployed master's state. A mount of any of these,
#: of anything under them or of anything above them (``/``, ``/var``) is refused.
PROTECTED_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/det",
    "/var/lib/det-agent",
)

#: Capabilities that cross the container's boundary (mount, load modules, raw I/O, open any
#: inode by handle, the host's network with host networking, the kernel log, BPF, the clock,
#: MAC policy); refused unless the policy lists them in ``add_capabilities``.
PROTECTED_CAPABILITIES = frozenset(
    {
        "ALL",
        "SYS_ADMIN",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_BOOT",
        "SYS_TIME",
        "DAC_READ_SEARCH",
        "NET_ADMIN",
        "SYSLOG",
        "BPF",
        "PERFMON",
        "MAC_ADMIN",
        "MAC_OVERRIDE",
        "LINUX_IMMUTABLE",
    }
)

#: Host devices that read or write the host's memory, kernel log or disks (fnmatch patterns);
#: refused unless the policy lists them in ``devices``.
PROTECTED_DEVICES = (
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/dev/kmsg",
    "/dev/sd*",
    "/dev/hd*",
    "/dev/vd*",
    "/dev/xvd*",
    "/dev/nvme*",
    "/dev/mmcblk*",
    "/dev/loop*",
    "/dev/dm-*",
    "/dev/md*",
    "/dev/mapper/*",
    "/dev/disk/*",
    "/dev/sg*",
    "/dev/cpu/*",
    "/dev/mtd*",
    "/dev/zram*",
)


class AllowedMount(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host_path: str
    #: True: tasks may mount it (or what is under it) read-only only.
    read_only: bool = False


class ContainerPolicy(BaseModel):
    """master.yaml's ``task_container_policy`` (and a pool's). ``None``: no allow list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Host paths (and what is under them) a non-admin's bind mount may come from; None: any
    #: path that is not protected.
    bind_mounts: list[AllowedMount] | None = None
    #: Capabilities a non-admin's task may add; None: any but the protected ones.
    add_capabilities: list[str] | None = None
    #: Host devices a non-admin's task may pass in; None: any but the protected ones.
    devices: list[str] | None = None
    #: More host paths no non-admin task may mount, besides :data:`PROTECTED_PATHS`.
    protected_host_paths: list[str] = Field(default_factory=list)

    def over(self, base: ContainerPolicy) -> ContainerPolicy:
        """This (a pool's) policy over ``base`` (the master's): the keys this one sets win."""
        values = base.model_dump()
        values.update({k: v for k, v in self.model_dump().items() if k in self.model_fields_set})
        return ContainerPolicy.model_validate(values)


@dataclass(frozen=True)
class Trusted:
    """What the cluster's own config gives every task (the admin's): mounts (normalised host
    path, read-only), capabilities, devices."""

    mounts: tuple[tuple[str, bool], ...] = ()
    capabilities: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()
    #: Host paths refused besides the policy's (the master's data_dir).
    protected: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mount:
    field: str
    host_path: Any
    read_only: bool


@dataclass(frozen=True)
class Request:
    """What a task's container would get that the policy judges (each with its field path)."""

    mounts: tuple[Mount, ...] = ()
    capabilities: tuple[tuple[str, Any], ...] = ()
    devices: tuple[tuple[str, Any], ...] = ()


def normalize(path: str) -> str:
    """``path`` cleaned lexically (``..``, ``.``, repeated and trailing slashes)."""
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("/") else out


def capability(name: str) -> str:
    """Docker's spelling of a capability: upper case, no ``CAP_`` prefix."""
    upper = str(name).strip().upper()
    return upper.removeprefix("CAP_")


def _within(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def _crosses(path: str, protected: str) -> bool:
    """Whether mounting ``path`` exposes ``protected``: it is, is under, or is above it."""
    return _within(path, protected) or _within(protected, path)


def _object(value: JSONValue) -> JSONObject:
    """``value`` when it is an object, else ``{}`` (a resolved config's section: always one)."""
    return value if isinstance(value, dict) else {}


def _array(value: JSONValue) -> list[JSONValue]:
    """``value`` when it is a list, else ``[]`` (a resolved config's list: always one)."""
    return value if isinstance(value, list) else []


def request_of(
    config: JSONObject,
    extra_mounts: Iterable[Mount] = (),
    task_container_defaults: JSONObject | None = None,
) -> Request:
    """What a resolved task or experiment config asks of the host (``extra_mounts``: mounts
    the master adds for the task's own sake, a TensorBoard's storage). Given the
    ``task_container_defaults`` merged into it (their mounts and devices come first), fields are
    numbered as in the user's own config."""
    tcd = task_container_defaults or {}
    binds = _array(config.get("bind_mounts"))
    skip = _leading(binds, tcd.get("bind_mounts"))
    mounts = [
        Mount(f"bind_mounts[{i - skip}].host_path", m.get("host_path"), bool(m.get("read_only")))
        for i, m in enumerate(binds)
        if isinstance(m, dict) and i >= skip
    ]
    storage = config.get("checkpoint_storage")
    if isinstance(storage, dict) and storage.get("type") == "shared_fs":
        mounts.append(Mount("checkpoint_storage.host_path", storage.get("host_path"), False))
    env = _object(config.get("environment"))
    res = _object(config.get("resources"))
    devices = _array(res.get("devices"))
    skip_devices = _leading(devices, tcd.get("devices"))
    return Request(
        mounts=tuple(mounts) + tuple(extra_mounts),
        capabilities=tuple(
            (f"environment.add_capabilities[{i}]", c)
            for i, c in enumerate(_array(env.get("add_capabilities")))
        ),
        devices=tuple(
            (f"resources.devices[{i - skip_devices}].host_path", _device_path(d))
            for i, d in enumerate(devices)
            if i >= skip_devices
        ),
    )


def _leading(merged: list[JSONValue], defaults: JSONValue) -> int:
    """How many of ``merged``'s first entries are the cluster defaults' (merged in first)."""

    def key(entry: JSONValue) -> object:  # validation adds defaults (propagation, mode)
        if isinstance(entry, dict):
            return (entry.get("host_path"), entry.get("container_path"))
        return entry

    given = [key(d) for d in defaults] if isinstance(defaults, list) else []
    n = 0
    while n < len(merged) and key(merged[n]) in given:
        n += 1
    return n


def _device_path(device: JSONValue) -> JSONValue:
    if isinstance(device, dict):
        return device.get("host_path")
    return str(device).split(":")[0]


def trusted_of(
    task_container_defaults: JSONObject,
    checkpoint_storage: JSONObject | None,
    protected: Iterable[str] = (),
) -> Trusted:
    """What the cluster's ``task_container_defaults`` (for the task's pool) and default
    ``checkpoint_storage`` give every task."""
    given = _array(task_container_defaults.get("bind_mounts"))
    mounts = [
        (normalize(str(m["host_path"])), bool(m.get("read_only")))
        for m in given
        if isinstance(m, dict) and isinstance(m.get("host_path"), str)
    ]
    for m in given:
        if isinstance(m, str):  # Docker's "host:container[:ro]" form
            parts = m.split(":")
            mounts.append((normalize(parts[0]), len(parts) > 2 and "ro" in parts[2].split(",")))
    storage = checkpoint_storage or {}
    host = storage.get("host_path")
    if storage.get("type") == "shared_fs" and isinstance(host, str):
        mounts.append((normalize(host), False))
    return Trusted(
        mounts=tuple(mounts),
        capabilities=frozenset(
            capability(str(c)) for c in _array(task_container_defaults.get("add_capabilities"))
        ),
        devices=frozenset(
            normalize(str(_device_path(d))) for d in _array(task_container_defaults.get("devices"))
        ),
        protected=tuple(normalize(p) for p in protected),
    )


def refusals(request: Request, policy: ContainerPolicy, trusted: Trusted) -> Iterator[str]:
    """One line per thing ``request`` may not have under ``policy``, naming the field and the
    rule (for a non-admin's task; admins' tasks are not checked)."""
    for m in request.mounts:
        why = _mount_refusal(m, policy, trusted)
        if why:
            yield f"{m.field}: {why}"
    for where, name in request.capabilities:
        cap = capability(str(name))
        if cap in trusted.capabilities:
            continue
        if policy.add_capabilities is not None:
            allowed = {capability(c) for c in policy.add_capabilities}
            if cap not in allowed:
                yield (
                    f"{where}: {cap} is not in task_container_policy.add_capabilities"
                    f" ({_listing(sorted(allowed))})"
                )
        elif cap in PROTECTED_CAPABILITIES:
            yield (
                f"{where}: {cap} is a protected capability (it reaches beyond the container):"
                " only an admin's task may add it unless task_container_policy.add_capabilities"
                " lists it"
            )
    for where, raw in request.devices:
        if not isinstance(raw, str) or not raw.startswith("/"):
            yield f"{where}: must be an absolute path (got {raw!r})"
            continue
        dev = normalize(raw)
        if dev in trusted.devices:
            continue
        if policy.devices is not None:
            allowed = {normalize(d) for d in policy.devices}
            if dev not in allowed:
                yield (
                    f"{where}: {dev} is not in task_container_policy.devices"
                    f" ({_listing(sorted(allowed))})"
                )
        elif any(fnmatch.fnmatchcase(dev, pattern) for pattern in PROTECTED_DEVICES):
            yield (
                f"{where}: {dev} is a protected device (the host's memory, kernel log or disks):"
                " only an admin's task may use it unless task_container_policy.devices lists it"
            )


def _mount_refusal(m: Mount, policy: ContainerPolicy, trusted: Trusted) -> str | None:
    if not isinstance(m.host_path, str) or not m.host_path.startswith("/"):
        return f"must be an absolute path (got {m.host_path!r})"
    path = normalize(m.host_path)
    for root, read_only in trusted.mounts:
        if _within(path, root) and (m.read_only or not read_only):
            return None  # the cluster's own mount (or part of it), with no more access
    protected = (
        PROTECTED_PATHS
        + tuple(trusted.protected)
        + tuple(normalize(p) for p in policy.protected_host_paths)
    )
    hit = next((p for p in protected if _crosses(path, p)), None)
    if hit is not None:
        what = "is" if path == hit else ("is under" if _within(path, hit) else "contains")
        return (
            f"{path} {what} the protected host path {hit}: only an admin's task may mount it"
            " (task_container_policy)"
        )
    if policy.bind_mounts is None:
        return None
    allowed = [a for a in policy.bind_mounts if _within(path, normalize(a.host_path))]
    if not allowed:
        names = _listing([normalize(a.host_path) for a in policy.bind_mounts])
        return f"{path} is not under a path task_container_policy.bind_mounts allows ({names})"
    if not m.read_only and all(a.read_only for a in allowed):
        return (
            f"{path} may be mounted read-only only (task_container_policy.bind_mounts):"
            " set read_only: true"
        )
    return None


def _listing(items: list[str]) -> str:
    return "allowed: " + ", ".join(items) if items else "none allowed"
