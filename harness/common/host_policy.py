"""What of an agent's host a task container may get: the protected host paths and devices, and the
rules both ends apply to them. The master applies them to paths as written, an early and friendly
refusal (``det.master.container_policy``); the agent applies them again to what each path is on
its own host, links resolved and device nodes stat'ed (``det.agent.mount_guard``), and that is
the check that holds.

Pure and standard-library only; written for Python 3.8 like the rest of the harness tree, though
no task container imports it.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from typing import NamedTuple

#: Host paths no non-admin task mounts: the system's configuration, binaries and kernel
#: interfaces, root's home, the runtime sockets (the Docker engine's among them), cron's spool,
#: the engine's, containerd's, kubelet's, PostgreSQL's, the agent's and a deployed master's
#: state. A mount of any of these, of anything under them or of anything above them (``/``,
#: ``/var``) is refused. The master adds its ``data_dir`` (its database and agent token), its own
#: Python installation and the policy's ``protected_host_paths``; the agent adds its own state,
#: installation and the engine's sockets.
PROTECTED_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/det",
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
    "/var/lib/kubelet",
    "/var/lib/postgresql",
    "/var/spool",
)

#: Host devices that read or write the host's memory, kernel log or disks, by name (fnmatch
#: patterns): the master's early refusal. The agent judges devices by kind and number instead
#: (:func:`device_key`), whatever their name.
PROTECTED_DEVICES = (
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/dev/kmsg",
    "/dev/root",
    "/dev/block/*",
    "/dev/char/*",
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


def normalize(path: str) -> str:
    """``path`` cleaned lexically (``..``, ``.``, repeated and trailing slashes)."""
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("/") else out


def within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or under it (both normalised)."""
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def strictly_within(path: str, root: str) -> bool:
    """Whether ``path`` is under ``root`` and not ``root`` itself."""
    return path != root and within(path, root)


def crosses(path: str, protected: str) -> bool:
    """Whether mounting ``path`` exposes ``protected``: it is, is under, or is above it."""
    return within(path, protected) or within(protected, path)


class DeviceKey(NamedTuple):
    """A device as the kernel knows it: ``c`` (character) or ``b`` (block), major and minor.
    ``minor`` None: every minor of the major (an allow-list entry only)."""

    kind: str
    major: int
    minor: int | None

    def __str__(self) -> str:
        return f"{self.kind} {self.major}:{'*' if self.minor is None else self.minor}"

    def admits(self, other: DeviceKey) -> bool:
        return (
            self.kind == other.kind
            and self.major == other.major
            and (self.minor is None or self.minor == other.minor)
        )


_DEVICE_RULE = re.compile(r"([cb])\s+([0-9]{1,7}):([0-9]{1,10}|\*)")


def parse_device_rule(text: str) -> DeviceKey | None:
    """``"c 10:229"`` or ``"b 7:*"`` as a :class:`DeviceKey`; None when ``text`` is not one
    (then it is a host path, which the agent stat's)."""
    m = _DEVICE_RULE.fullmatch(str(text).strip())
    if m is None:
        return None
    return DeviceKey(m.group(1), int(m.group(2)), None if m.group(3) == "*" else int(m.group(3)))


def device_key(mode: int, rdev: int) -> DeviceKey | None:
    """The key of an ``os.stat`` result's ``st_mode``/``st_rdev``; None for what is not a device
    node (a regular file, a directory, a FIFO, a socket)."""
    if stat.S_ISCHR(mode):
        kind = "c"
    elif stat.S_ISBLK(mode):
        kind = "b"
    else:
        return None
    return DeviceKey(kind, os.major(rdev), os.minor(rdev))
