"""The task container policy: which host paths, capabilities and devices a non-admin's task
container may use (master.yaml ``task_container_policy`` until an admin stores one at run
time, det.master.services.task_container_policy; each pool's overrides it key by key). Pure: a
resolved task config and the policy in, the first refusal out. :class:`ContainerPolicy` is the
one model of a policy, wherever it comes from: paths absolute, devices paths or number rules,
capabilities names, each refusal naming the key.

This is the early, friendly refusal, on paths as written (after lexical normalisation:
``/etc/../root`` is ``/root``). The check that holds is the agent's (``det.agent.mount_guard``):
it applies the same policy, sent with each container spec (:func:`host_policy`), to what each
source really is on its host, links resolved and device nodes judged by their numbers.

What a non-admin's task asks for is refused, naming the field and the rule, when it

- mounts a **protected host path** (:data:`PROTECTED_PATHS`, the master's ``data_dir`` and
  installation, the policy's ``protected_host_paths``): the path itself, anything under it, or
  anything above it (mounting ``/var`` exposes ``/var/run/docker.sock``);
- mounts what lies under a directory tasks may write (a writable cluster mount, such as the
  checkpoint directory, or a writable allowed root): a task could have planted a link there;
- mounts a path that is neither a cluster mount, nor under one given read-only, nor under a root
  the policy's ``bind_mounts`` allows (none by default), or writably one allowed read-only;
- adds a capability outside the policy's ``add_capabilities`` (when set), or else a
  :data:`PROTECTED_CAPABILITIES` one;
- passes a host device the cluster's defaults do not give and the policy's ``devices`` does not
  list (none by default), or a :data:`PROTECTED_DEVICES` one.

What the cluster's own ``task_container_defaults`` (and its ``checkpoint_storage``) give every
task is the admin's and always allowed as given.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from det.common.container_spec import HostPolicy, HostRoot
from det.common.host_policy import (
    PROTECTED_DEVICES,
    PROTECTED_PATHS,
    crosses,
    normalize,
    parse_device_rule,
    strictly_within,
    within,
)
from det.common.jsontypes import JSONObject, JSONValue

__all__ = [
    "PROTECTED_CAPABILITIES",
    "PROTECTED_DEVICES",
    "PROTECTED_PATHS",
    "ContainerPolicy",
    "Mount",
    "Request",
    "Trusted",
    "host_policy",
    "normalize",
    "refusals",
    "request_of",
    "trusted_of",
]

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


def _absolute(path: str) -> str:
    if "\x00" in path:
        raise PydanticCustomError("nul", "a path holds no NUL character", {})
    if not path.startswith("/"):
        raise PydanticCustomError(
            "not_absolute", "must be an absolute host path (got {got})", {"got": repr(path)}
        )
    return path


_CAPABILITY = re.compile(r"(CAP_)?[A-Z][A-Z0-9_]*")


def _capability_name(name: str) -> str:
    if not _CAPABILITY.fullmatch(name.strip().upper()):
        raise PydanticCustomError(
            "capability",
            "{got} is not a capability's name (such as SYS_PTRACE)",
            {"got": repr(name)},
        )
    return name


def _device(device: str) -> str:
    if parse_device_rule(device) is not None:
        return device
    if not device.startswith("/"):
        raise PydanticCustomError(
            "device",
            "{got} is neither an absolute host path nor a rule such as 'c 10:229' or 'b 7:*'",
            {"got": repr(device)},
        )
    return _absolute(device)


#: A host path a policy names: absolute (it is judged as written, then on the agent's host).
HostPath = Annotated[str, AfterValidator(_absolute)]
CapabilityName = Annotated[str, AfterValidator(_capability_name)]
DeviceRule = Annotated[str, AfterValidator(_device)]


class AllowedMount(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host_path: HostPath
    #: True: tasks may mount it (or what is under it) read-only only.
    read_only: bool = False


class ContainerPolicy(BaseModel):
    """master.yaml's ``task_container_policy`` (and a pool's). ``None``: no allow list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Host paths (and what is under them) a non-admin's bind mount may come from, besides the
    #: cluster's own mounts; None or empty: none.
    bind_mounts: list[AllowedMount] | None = None
    #: Capabilities a non-admin's task may add; None: any but the protected ones.
    add_capabilities: list[CapabilityName] | None = None
    #: Host devices a non-admin's task may pass in besides its slots' GPUs and the cluster's
    #: defaults: host paths (the agent allows the device node they are, by kind and numbers) or
    #: ``"c MAJOR:MINOR"`` / ``"b MAJOR:*"`` rules; None or empty: none.
    devices: list[DeviceRule] | None = None
    #: More host paths no non-admin task may mount, besides :data:`PROTECTED_PATHS`.
    protected_host_paths: list[HostPath] = Field(default_factory=list)

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


def capability(name: str) -> str:
    """Docker's spelling of a capability: upper case, no ``CAP_`` prefix."""
    upper = str(name).strip().upper()
    return upper.removeprefix("CAP_")


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
        why = _device_refusal(raw, policy, trusted)
        if why:
            yield f"{where}: {why}"


def _device_refusal(raw: Any, policy: ContainerPolicy, trusted: Trusted) -> str | None:
    if not isinstance(raw, str) or not raw.startswith("/"):
        return f"must be an absolute path (got {raw!r})"
    dev = normalize(raw)
    if dev in trusted.devices:
        return None
    if any(fnmatch.fnmatchcase(dev, pattern) for pattern in PROTECTED_DEVICES):
        return (
            f"{dev} is a protected device (the host's memory, kernel log or disks): only an"
            " admin's task may use it"
        )
    listed = [d for d in policy.devices or [] if parse_device_rule(d) is None]
    if dev in {normalize(d) for d in listed}:
        return None
    if any(parse_device_rule(d) is not None for d in policy.devices or []):
        return None  # allowed by number, maybe: the agent stat's the node and decides
    return (
        f"{dev} is not in task_container_policy.devices ({_listing(sorted(listed))}):"
        " a task gets its slots' GPUs, and other host devices only as an admin allows"
    )


def _mount_refusal(m: Mount, policy: ContainerPolicy, trusted: Trusted) -> str | None:
    if not isinstance(m.host_path, str) or not m.host_path.startswith("/"):
        return f"must be an absolute path (got {m.host_path!r})"
    path = normalize(m.host_path)
    if any(root == path and (m.read_only or not ro) for root, ro in trusted.mounts):
        return None  # the cluster's own mount, as given, with no more access
    allowed = [(normalize(a.host_path), a.read_only) for a in policy.bind_mounts or []]
    writable = [root for root, ro in (*trusted.mounts, *allowed) if not ro]
    under = next((w for w in writable if strictly_within(path, w)), None)
    if under is not None:
        return (
            f"{path} is under {under}, a directory tasks may write: what lies there is never a"
            " task's mount source (a link planted there could lead anywhere); mount the"
            " directory itself"
        )
    hit = next((p for p in protected_paths(policy, trusted) if crosses(path, p)), None)
    if hit is not None:
        what = "is" if path == hit else ("is under" if within(path, hit) else "contains")
        return (
            f"{path} {what} the protected host path {hit}: only an admin's task may mount it"
            " (task_container_policy)"
        )
    roots = [(root, True) for root, ro in trusted.mounts if ro] + allowed
    fits = [ro for root, ro in roots if within(path, root)]
    if not fits:
        names = _listing([root for root, _ in roots])
        return (
            f"{path} is not under a host path tasks may mount ({names}): an admin names them"
            " in task_container_policy.bind_mounts"
        )
    if not m.read_only and all(fits):
        return (
            f"{path} may be mounted read-only only (task_container_policy.bind_mounts):"
            " set read_only: true"
        )
    return None


def protected_paths(policy: ContainerPolicy, trusted: Trusted) -> list[str]:
    """Every host path a non-admin's task may not mount (nor what is under or above it)."""
    out = [*PROTECTED_PATHS, *trusted.protected]
    out += [normalize(p) for p in policy.protected_host_paths]
    return list(dict.fromkeys(out))


def host_policy(admin: bool, policy: ContainerPolicy, trusted: Trusted) -> HostPolicy:
    """The policy the agent applies to the container's sources on its own host (the container
    spec's ``hostPolicy``)."""

    def roots(given: Iterable[tuple[str, bool]]) -> list[HostRoot]:
        return [{"hostPath": p, "readOnly": ro} for p, ro in given]

    return {
        "admin": admin,
        "protectedPaths": protected_paths(policy, trusted),
        "clusterMounts": roots(trusted.mounts),
        "allowedRoots": roots(
            (normalize(a.host_path), a.read_only) for a in policy.bind_mounts or []
        ),
        "allowedDevices": sorted(trusted.devices) + list(policy.devices or []),
    }


def _listing(items: list[str]) -> str:
    return "allowed: " + ", ".join(items) if items else "none allowed"
