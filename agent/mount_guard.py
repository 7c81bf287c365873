"""The agent's judgement of what a task container gets of its host: every bind-mount and device
source as it really is on this host, whatever the master sent.

The master judges paths as written (``det.master.container_policy``), an early and friendly
refusal; it cannot see links or device nodes on an agent's host, and a task writes links and
makes device nodes (``mknod``) in every directory it may write. So here, before ``docker create``:

- each bind-mount source is resolved once (links, ``..``) and must exist; Docker is handed the
  resolved path, never the link;
- no task mounts what :attr:`MountGuard.protected` holds (the Docker engine's sockets, this
  agent's state, harness bundle, token file and Python installation), nor anything under or
  above them: an admin's task neither;
- a non-admin's task (``hostPolicy.admin`` false) also keeps off the policy's protected paths
  (the system's, the master's data directory, the database's, det's installations), and mounts
  only a cluster mount as given, or what lies under a cluster mount given read-only or under a
  root ``task_container_policy.bind_mounts`` allows; never what lies under a directory tasks may
  write (a writable cluster mount or allowed root: the checkpoint directory, shared scratch),
  where a task could plant a link or swap a directory for one between this check and the mount;
- a non-admin's device is judged by what it is (character or block, major:minor, after
  resolving links), not by its name; it must be a device node under ``/dev`` that the policy's
  ``allowedDevices`` admits (none by default: a slot's GPUs come with the allocation).

After ``docker create`` and before the start, :func:`verify_created` compares what Docker
recorded for the container (its bind mounts and devices) with what was judged; a mismatch
removes it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det.common.container_spec import BindMount, ContainerSpec, Device, HostPolicy, HostRoot
from det.common.host_policy import (
    DeviceKey,
    crosses,
    device_key,
    normalize,
    parse_device_rule,
    strictly_within,
    within,
)

#: Where Docker engines (and containerd under them) listen on Linux.
ENGINE_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd")


class MountRefused(Exception):
    """A bind mount or device the agent refuses; the message names it and why (one line)."""


def engine_sockets(environ: Mapping[str, str]) -> list[str]:
    """The engine's socket paths: the usual ones and ``DOCKER_HOST``'s (``unix://``)."""
    out = list(ENGINE_SOCKETS)
    host = environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        out.append(host.removeprefix("unix://"))
    return out


def own_installation() -> list[str]:
    """Where this agent's Python and det's code live (a task writing there would run code as
    the agent, or as the master on the same host): the interpreter's prefixes and the
    directories of det's packages (found, not imported)."""
    out = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    for name in ("det", "det.master", "det.agent", "det.cli", "det.deploy"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            out.extend(spec.submodule_search_locations or [])
    return [os.path.abspath(p) for p in out if p and os.path.abspath(p) != "/"]


def _real(path: str) -> str:
    return os.path.realpath(path)


@dataclass(frozen=True)
class Judged:
    """What the container may get, sources resolved: Docker gets these, never what was sent."""

    mounts: tuple[BindMount, ...]
    devices: tuple[Device, ...]


@dataclass(frozen=True)
class _Root:
    given: str  # as the master named it, normalised
    path: str  # resolved on this host
    read_only: bool


class MountGuard:
    def __init__(self, protected: Iterable[str | Path]) -> None:
        """``protected``: paths no task's mount may be, be under or contain (each also as its
        real path), an admin's included."""
        paths: dict[str, None] = {}
        for p in protected:
            absolute = os.path.abspath(str(p))
            paths[absolute] = None
            paths[_real(absolute)] = None
        self.protected = tuple(paths)

    # ---- the whole spec ----

    def judge(self, spec: ContainerSpec) -> Judged:
        """The spec's mounts and devices with their sources resolved on this host, or
        MountRefused naming the first one refused."""
        policy = spec.get("hostPolicy")
        mounts = tuple(self.mount(i, m, policy) for i, m in enumerate(spec.get("bindMounts") or []))
        devices = tuple(self.device(i, d, policy) for i, d in enumerate(spec.get("devices") or []))
        return Judged(mounts, devices)

    def check(self, mounts: Iterable[BindMount]) -> None:
        """MountRefused for the first mount whose source exposes a protected path (the agent's
        own set only: an admin's task)."""
        for i, m in enumerate(mounts):
            self.mount(i, m, None)

    # ---- one mount ----

    def mount(self, i: int, m: BindMount, policy: HostPolicy | None) -> BindMount:
        field = f"bindMounts[{i}].hostPath"
        source = str(m.get("hostPath") or "")
        if not source.startswith("/") or "\0" in source:
            raise MountRefused(f"{field}: must be an absolute path (got {source!r})")
        written = normalize(source)
        real = _real(written)
        for candidate in dict.fromkeys((written, real)):
            for p in self.protected:
                if crosses(candidate, p):
                    raise MountRefused(
                        f"{field}: {source} exposes {p}, the agent's own state or installation"
                        " or the Docker engine's socket: the agent mounts it for no task"
                    )
        if policy is not None and not policy.get("admin"):
            if not os.path.exists(real):
                raise MountRefused(f"{field}: {source} does not exist on the agent's host")
            self._non_admin_mount(field, source, written, real, bool(m.get("readOnly")), policy)
        out = dict(m)
        out["hostPath"] = real
        return out  # type: ignore[return-value]

    def _non_admin_mount(
        self,
        field: str,
        source: str,
        written: str,
        real: str,
        read_only: bool,
        policy: HostPolicy,
    ) -> None:
        shown = source if real == written else f"{source} (a link to {real})"
        cluster = _roots(policy.get("clusterMounts") or [])
        allowed = _roots(policy.get("allowedRoots") or [])
        # A cluster mount as given is the admin's: allowed with no more access, wherever it is.
        if any(r.path == real and (read_only or not r.read_only) for r in cluster):
            return
        writable = [w for r in (*cluster, *allowed) if not r.read_only for w in (r.given, r.path)]
        under = next(
            (w for w in writable if strictly_within(real, w) or strictly_within(written, w)), None
        )
        if under is not None:
            raise MountRefused(
                f"{field}: {shown} is under {under}, a directory tasks may write: what lies"
                " there is never a task's mount source (a link or a swapped directory could"
                " lead anywhere); mount the directory itself"
            )
        for p in policy.get("protectedPaths") or []:
            for candidate in dict.fromkeys((normalize(p), _real(normalize(p)))):
                if crosses(real, candidate):
                    raise MountRefused(
                        f"{field}: {shown} exposes the protected host path {candidate}: only an"
                        " admin's task may mount it"
                    )
        roots = [r for r in cluster if r.read_only] + allowed
        fits = [r for r in roots if within(real, r.path)]
        if not fits:
            names = ", ".join(r.path for r in roots) or "none"
            raise MountRefused(
                f"{field}: {shown} is not under a host path tasks may mount (allowed: {names})"
            )
        if not read_only and all(r.read_only for r in fits):
            raise MountRefused(f"{field}: {shown} may be mounted read-only only")

    # ---- one device ----

    def device(self, i: int, d: Device, policy: HostPolicy | None) -> Device:
        field = f"devices[{i}].hostPath"
        source = str(d.get("hostPath") or "")
        if not source.startswith("/") or "\0" in source:
            raise MountRefused(f"{field}: must be an absolute path (got {source!r})")
        real = _real(normalize(source))
        try:
            st = os.stat(real)
        except OSError:
            raise MountRefused(f"{field}: {source} does not exist on the agent's host") from None
        key = device_key(st.st_mode, st.st_rdev)
        if key is None:
            raise MountRefused(f"{field}: {source} is not a device node")
        if policy is not None and not policy.get("admin"):
            shown = source if real == normalize(source) else f"{source} (a link to {real})"
            if not strictly_within(real, "/dev"):
                raise MountRefused(
                    f"{field}: {shown} ({key}) is not under /dev: a task's own device nodes are"
                    " never passed in"
                )
            rules = allowed_devices(policy.get("allowedDevices") or [])
            if not any(rule.admits(key) for rule in rules):
                names = ", ".join(str(r) for r in rules) or "none"
                raise MountRefused(
                    f"{field}: {shown} is device {key}, which task_container_policy.devices does"
                    f" not allow (allowed: {names})"
                )
        out = dict(d)
        out["hostPath"] = real
        return out  # type: ignore[return-value]


def _roots(given: Sequence[HostRoot]) -> list[_Root]:
    out = []
    for r in given:
        path = str(r.get("hostPath") or "")
        if path.startswith("/"):
            out.append(_Root(normalize(path), _real(normalize(path)), bool(r.get("readOnly"))))
    return out


def allowed_devices(rules: Iterable[str]) -> list[DeviceKey]:
    """The policy's device rules as keys: ``"c 10:229"`` as written, a host path by what it is
    on this host now (one that is missing or not a device admits nothing)."""
    out = []
    for rule in rules:
        key = parse_device_rule(rule)
        if key is None and str(rule).startswith("/"):
            try:
                st = os.stat(_real(normalize(str(rule))))
            except OSError:
                continue
            key = device_key(st.st_mode, st.st_rdev)
        if key is not None:
            out.append(key)
    return out


def verify_created(attrs: Mapping[str, Any], create_args: Mapping[str, Any]) -> str | None:
    """Why the created container (``docker inspect``'s ``attrs``) differs from what was judged
    (the ``create_args`` docker-py got), or None. Checked: its bind mounts (source, target,
    read-only) are exactly the judged ones, no bind comes from ``Binds`` or a named volume with
    a host source, it is not privileged, and its devices are exactly the judged ones."""
    host = attrs.get("HostConfig") or {}
    if host.get("Privileged"):
        return "the container is privileged"
    if host.get("Binds"):
        return f"unexpected binds {host['Binds']!r}"
    want = {
        (str(m["Source"]), str(m["Target"]), bool(m.get("ReadOnly")))
        for m in create_args.get("mounts") or []
    }
    got = set()
    for m in attrs.get("Mounts") or []:
        kind = m.get("Type")
        if kind == "bind":
            got.add((str(m.get("Source")), str(m.get("Destination")), not m.get("RW", True)))
        elif kind == "volume" and m.get("Driver") not in (None, "", "local"):
            return f"unexpected volume {m.get('Name')!r} of driver {m.get('Driver')!r}"
        elif kind not in ("volume", "tmpfs"):
            return f"unexpected {kind} mount at {m.get('Destination')!r}"
    if got != want:
        extra = sorted(got - want)
        missing = sorted(want - got)
        return f"bind mounts differ from the judged ones (unexpected {extra}, missing {missing})"
    want_devices = {str(d).split(":")[0] for d in create_args.get("devices") or []}
    got_devices = {str(d.get("PathOnHost")) for d in host.get("Devices") or []}
    if got_devices != want_devices:
        return (
            f"devices differ from the judged ones ({sorted(got_devices)} vs {sorted(want_devices)})"
        )
    return None
