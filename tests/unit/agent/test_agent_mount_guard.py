"""The agent's own judgement of sources (det.agent.mount_guard) on this host's file system, and
its check of the container Docker created against what was judged."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from det.agent.mount_guard import MountGuard, MountRefused, allowed_devices, verify_created
from det.common.host_policy import DeviceKey, parse_device_rule


def policy(tmp: Path, **over: Any) -> dict[str, Any]:
    return {
        "admin": False,
        "protectedPaths": ["/etc", str(tmp / "state")],
        "clusterMounts": [{"hostPath": str(tmp / "ckpt"), "readOnly": False}],
        "allowedRoots": [{"hostPath": str(tmp / "data"), "readOnly": True}],
        "allowedDevices": [],
        **over,
    }


def bind(source: Path | str, read_only: bool = True) -> dict[str, Any]:
    return {"hostPath": str(source), "containerPath": "/x", "readOnly": read_only}


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    for d in ("ckpt/run", "data/a", "state", "elsewhere"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "data" / "to-state").symlink_to(tmp_path / "state")
    (tmp_path / "data" / "to-a").symlink_to(tmp_path / "data" / "a")
    (tmp_path / "data" / "out").symlink_to(tmp_path / "elsewhere")
    return tmp_path


def judge(tmp: Path, mounts: list[dict[str, Any]], **over: Any) -> list[str]:
    spec: Any = {"bindMounts": mounts, "devices": [], "hostPolicy": policy(tmp, **over)}
    return [m["hostPath"] for m in MountGuard([tmp / "agent"]).judge(spec).mounts]


def test_docker_gets_the_resolved_source(layout: Path) -> None:
    assert judge(layout, [bind(layout / "data" / "to-a")]) == [str(layout / "data" / "a")]
    assert judge(layout, [bind(layout / "ckpt", False)]) == [str(layout / "ckpt")]


@pytest.mark.parametrize(
    ("source", "read_only", "why"),
    [
        ("ckpt/run", True, "a directory tasks may write"),
        ("data/to-state", True, "exposes the protected host path"),
        ("data/out", True, "is not under a host path tasks may mount"),
        ("data/a", False, "may be mounted read-only only"),
        ("data/missing", True, "does not exist on the agent's host"),
        ("agent", True, "the agent mounts it for no task"),
        ("", True, "must be an absolute path"),
    ],
)
def test_a_non_admins_source_is_judged_as_it_is(
    layout: Path, source: str, read_only: bool, why: str
) -> None:
    path = str(layout / source) if source else "relative"
    with pytest.raises(MountRefused, match=why):
        judge(layout, [bind(path, read_only)])


def test_an_admins_source_skips_the_policy_not_the_agents_own(layout: Path) -> None:
    assert judge(layout, [bind(layout / "data" / "to-state")], admin=True) == [
        str(layout / "state")
    ]
    with pytest.raises(MountRefused, match="for no task"):
        judge(layout, [bind(layout / "agent")], admin=True)


def test_device_rules() -> None:
    assert parse_device_rule("c 10:229") == DeviceKey("c", 10, 229)
    assert parse_device_rule("b 7:*") == DeviceKey("b", 7, None)
    assert parse_device_rule("/dev/fuse") is None
    assert parse_device_rule("x 1:2") is None
    assert DeviceKey("b", 7, None).admits(DeviceKey("b", 7, 3))
    assert not DeviceKey("b", 7, None).admits(DeviceKey("c", 7, 3))
    null = os.stat("/dev/null")
    assert allowed_devices(["/dev/null", "/no/such/device", "c 1:*"]) == [
        DeviceKey("c", os.major(null.st_rdev), os.minor(null.st_rdev)),
        DeviceKey("c", 1, None),
    ]


def _created(mounts: list[dict[str, Any]], devices: list[str], **host: Any) -> dict[str, Any]:
    return {
        "HostConfig": {"Devices": [{"PathOnHost": d} for d in devices], **host},
        "Mounts": mounts,
    }


ARGS = {
    "mounts": [{"Source": "/data/a", "Target": "/x", "Type": "bind", "ReadOnly": True}],
    "devices": ["/dev/null:/dev/null:rwm"],
}
AS_JUDGED = [{"Type": "bind", "Source": "/data/a", "Destination": "/x", "RW": False}]


def test_the_created_container_must_be_what_was_judged() -> None:
    assert verify_created(_created(AS_JUDGED, ["/dev/null"]), ARGS) is None
    # An image's anonymous volume is no host path.
    volume = {"Type": "volume", "Driver": "local", "Name": "f" * 64, "Destination": "/v"}
    assert verify_created(_created([*AS_JUDGED, volume], ["/dev/null"]), ARGS) is None
    writable = [{**AS_JUDGED[0], "RW": True}]
    assert "bind mounts differ" in str(verify_created(_created(writable, ["/dev/null"]), ARGS))
    other = [{**AS_JUDGED[0], "Source": "/etc"}]
    assert "bind mounts differ" in str(verify_created(_created(other, ["/dev/null"]), ARGS))
    assert "devices differ" in str(verify_created(_created(AS_JUDGED, ["/dev/kmsg"]), ARGS))
    assert "binds" in str(verify_created(_created(AS_JUDGED, ["/dev/null"], Binds=["/:/h"]), ARGS))
    assert "privileged" in str(
        verify_created(_created(AS_JUDGED, ["/dev/null"], Privileged=True), ARGS)
    )
    plugin = {**volume, "Driver": "rexray"}
    assert "driver" in str(verify_created(_created([*AS_JUDGED, plugin], ["/dev/null"]), ARGS))
