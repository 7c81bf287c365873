"""The task container policy's pure check (det.master.container_policy), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.config import MasterConfigError, parse_config
from det.master.container_policy import (
    ContainerPolicy,
    Trusted,
    normalize,
    refusals,
    request_of,
    trusted_of,
)

DEFAULT = ContainerPolicy()
BARE = ContainerPolicy()
CLOUD = ContainerPolicy.model_validate(
    {"bind_mounts": [{"host_path": "/mnt/shared_fs"}], "add_capabilities": [], "devices": []}
)
DATA = ContainerPolicy.model_validate(
    {
        "bind_mounts": [
            {"host_path": "/data"},
            {"host_path": "/datasets", "read_only": True},
        ],
        "add_capabilities": ["SYS_PTRACE"],
        "devices": ["/dev/fuse"],
        "protected_host_paths": ["/datasets/secret"],
    }
)
TCD: dict[str, Any] = {
    "bind_mounts": [
        {"host_path": "/srv/ckpt", "container_path": "/ckpt"},
        {"host_path": "/etc/ssl/certs", "container_path": "/certs", "read_only": True},
        {"host_path": "/srv/data", "container_path": "/data", "read_only": True},
    ],
    "add_capabilities": ["NET_ADMIN"],
    "devices": [{"host_path": "/dev/kmsg", "container_path": "/dev/kmsg"}],
}
RO_DATA = ContainerPolicy()
#: An admin who allowed wide read-only roots: the protected paths under them stay protected.
WIDE = ContainerPolicy.model_validate(
    {
        "bind_mounts": [
            {"host_path": "/var", "read_only": True},
            {"host_path": "/opt", "read_only": True},
        ]
    }
)
TRUSTED = trusted_of(
    TCD, {"type": "shared_fs", "host_path": "/var/det/ckpt"}, ["/home/det/master-data"]
)


def mount(host: Any, read_only: bool = False) -> dict[str, Any]:
    return {"bind_mounts": [{"host_path": host, "container_path": "/x", "read_only": read_only}]}


def cap(*names: str) -> dict[str, Any]:
    return {"environment": {"add_capabilities": list(names)}}


def device(path: str) -> dict[str, Any]:
    return {"resources": {"devices": [{"host_path": path, "container_path": "/dev/x"}]}}


def storage(host: str) -> dict[str, Any]:
    return {"checkpoint_storage": {"type": "shared_fs", "host_path": host}}


def first(config: dict[str, Any], policy: ContainerPolicy) -> str:
    # BARE is DEFAULT's rules on a cluster whose defaults give tasks nothing.
    trusted = Trusted() if policy is BARE else TRUSTED
    return next(refusals(request_of(config), policy, trusted), "")


# (config, policy, the refusal's start, or "" when allowed)
CASES = [
    # The attack, under the default (permissive) policy.
    (
        mount("/root"),
        DEFAULT,
        "bind_mounts[0].host_path: /root is the protected host path /root",
    ),
    (mount("/etc"), DEFAULT, "bind_mounts[0].host_path: /etc is the protected host path /etc"),
    (mount("/var/run"), DEFAULT, "bind_mounts[0].host_path: /var/run is the protected"),
    (
        mount("/var/run/docker.sock"),
        DEFAULT,
        "bind_mounts[0].host_path: /var/run/docker.sock is under",
    ),
    (
        cap("SYS_ADMIN"),
        DEFAULT,
        "environment.add_capabilities[0]: SYS_ADMIN is a protected capability",
    ),
    (cap("cap_sys_admin"), DEFAULT, "environment.add_capabilities[0]: SYS_ADMIN is a protected"),
    (cap("ALL"), DEFAULT, "environment.add_capabilities[0]: ALL is a protected"),
    (
        device("/dev/kvm"),
        DATA,
        "resources.devices[0].host_path: /dev/kvm is not in task_container_policy.devices",
    ),
    (device("/dev/kmsg/"), BARE, "resources.devices[0].host_path: /dev/kmsg is a protected device"),
    (
        device("/dev/sda1"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/sda1 is a protected device",
    ),
    (
        device("/dev/mem"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/mem is a protected device",
    ),
    # Normalised before the check: dot-dot, repeated and trailing slashes.
    (mount("/data/../root"), DEFAULT, "bind_mounts[0].host_path: /root is the protected"),
    (mount("//etc/"), DEFAULT, "bind_mounts[0].host_path: /etc is the protected"),
    (mount("/home/./../etc/shadow"), DEFAULT, "bind_mounts[0].host_path: /etc/shadow is under"),
    (
        device("/dev/../dev/mem"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/mem is a protected",
    ),
    # Above a protected path: it would expose it.
    (mount("/"), DEFAULT, "bind_mounts[0].host_path: / contains the protected host path /bin"),
    (
        mount("/var"),
        DEFAULT,
        "bind_mounts[0].host_path: /var contains the protected host path /var/run",
    ),
    (
        mount("/var/lib"),
        DEFAULT,
        "bind_mounts[0].host_path: /var/lib contains the protected host path /var/lib/docker",
    ),
    # The master's own data (its agent token) and the policy's extra protected paths.
    (
        mount("/home/det"),
        DEFAULT,
        "bind_mounts[0].host_path: /home/det contains the protected host path /home/det/master-data",
    ),
    (
        mount("/datasets/secret/x", read_only=True),
        DATA,
        "bind_mounts[0].host_path: /datasets/secret/x is under the protected host path /datasets/secret",
    ),
    # Finding 5 of the third round: root's crontab, PostgreSQL's and kubelet's state, det's
    # installation on cloud machines; each protected even under an allowed root.
    (
        mount("/var/spool/cron", True),
        WIDE,
        "bind_mounts[0].host_path: /var/spool/cron is under the protected host path /var/spool",
    ),
    (
        mount("/var/lib/postgresql/16/main"),
        WIDE,
        "bind_mounts[0].host_path: /var/lib/postgresql/16/main is under the protected host path /var/lib/postgresql",
    ),
    (
        mount("/var/lib/kubelet", True),
        WIDE,
        "bind_mounts[0].host_path: /var/lib/kubelet is the protected host path /var/lib/kubelet",
    ),
    (
        mount("/opt/det/bin", True),
        WIDE,
        "bind_mounts[0].host_path: /opt/det/bin is under the protected host path /opt/det",
    ),
    (mount("/var/lib/other", True), WIDE, ""),
    # Relative paths are refused, not guessed.
    (mount("etc"), DEFAULT, "bind_mounts[0].host_path: must be an absolute path"),
    (mount(None), DEFAULT, "bind_mounts[0].host_path: must be an absolute path"),
    # Shared-fs storage is a mount too.
    (storage("/etc"), DEFAULT, "checkpoint_storage.host_path: /etc is the protected"),
    (
        storage("/scratch"),
        CLOUD,
        "checkpoint_storage.host_path: /scratch is not under a host path tasks may mount (allowed: /etc/ssl/certs, /srv/data, /mnt/shared_fs)",
    ),
    # Allow lists.
    (mount("/data"), DATA, ""),
    (mount("/data/", read_only=True), DATA, ""),
    # What lies under a directory tasks write is never a mount source: a task may have planted
    # a link there, or swap a directory for one between the agent's check and the mount.
    (
        mount("/data/imagenet", read_only=True),
        DATA,
        "bind_mounts[0].host_path: /data/imagenet is under /data, a directory tasks may write",
    ),
    (mount("/datasets/coco", read_only=True), DATA, ""),
    (
        mount("/datasets/coco"),
        DATA,
        "bind_mounts[0].host_path: /datasets/coco may be mounted read-only only",
    ),
    (
        mount("/database"),
        DATA,
        "bind_mounts[0].host_path: /database is not under a host path tasks may mount (allowed: /etc/ssl/certs, /srv/data, /data, /datasets)",
    ),
    (cap("SYS_PTRACE"), DATA, ""),
    (cap("sys_ptrace"), DATA, ""),
    (
        cap("SYS_NICE"),
        DATA,
        "environment.add_capabilities[0]: SYS_NICE is not in task_container_policy.add_capabilities (allowed: SYS_PTRACE)",
    ),
    (
        cap("SYS_PTRACE"),
        CLOUD,
        "environment.add_capabilities[0]: SYS_PTRACE is not in task_container_policy.add_capabilities (none allowed)",
    ),
    (device("/dev/fuse"), DATA, ""),
    (
        device("/dev/fuse"),
        CLOUD,
        "resources.devices[0].host_path: /dev/fuse is not in task_container_policy.devices (none allowed)",
    ),
    (mount("/mnt/shared_fs"), CLOUD, ""),
    (
        mount("/mnt/shared_fs/team-a"),
        CLOUD,
        "bind_mounts[0].host_path: /mnt/shared_fs/team-a is under /mnt/shared_fs, a directory",
    ),
    (mount("/mnt"), CLOUD, "bind_mounts[0].host_path: /mnt is not under a host path"),
    # By default a non-admin mounts only what the cluster mounts (no allow list: none), and
    # passes in no host device; capabilities stay Determined's (any but the protected ones).
    (
        mount("/home/alice/data"),
        DEFAULT,
        "bind_mounts[0].host_path: /home/alice/data is not under a host path tasks may mount"
        " (allowed: /etc/ssl/certs, /srv/data)",
    ),
    (
        mount("/tmp/x/"),
        BARE,
        "bind_mounts[0].host_path: /tmp/x is not under a host path tasks may mount (none allowed)",
    ),
    (cap("SYS_PTRACE", "SYS_NICE"), DEFAULT, ""),
    (
        device("/dev/fuse"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/fuse is not in task_container_policy.devices (none allowed)",
    ),
    (
        device("/dev/fuse"),
        ContainerPolicy(devices=["c 10:229"]),
        "",  # by number: the agent stat's the node and decides
    ),
    # Other names of the host's disks and kernel log.
    (
        device("/dev/block/8:0"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/block/8:0 is a protected device",
    ),
    (
        device("/dev/char/1:11"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/char/1:11 is a protected device",
    ),
    (
        device("/dev/root"),
        DEFAULT,
        "resources.devices[0].host_path: /dev/root is a protected device",
    ),
    # The cluster's own task_container_defaults and storage are trusted, under any policy.
    (mount("/srv/ckpt"), CLOUD, ""),
    # ...as given: what lies under the writable checkpoint directory is the tasks' (finding:
    # a link planted there led to /etc, the admin password and the database).
    (
        mount("/srv/ckpt/run1/"),
        CLOUD,
        "bind_mounts[0].host_path: /srv/ckpt/run1 is under /srv/ckpt, a directory tasks may write",
    ),
    # Under a read-only cluster mount: still not a protected path.
    (mount("/srv/data/x", read_only=True), RO_DATA, ""),
    (
        mount("/etc/ssl/certs/ca", read_only=True),
        CLOUD,
        "bind_mounts[0].host_path: /etc/ssl/certs/ca is under the protected host path /etc",
    ),
    (mount("/etc/ssl/certs", read_only=True), CLOUD, ""),
    (
        mount("/etc/ssl/certs"),
        CLOUD,
        "bind_mounts[0].host_path: /etc/ssl/certs is under the protected host path /etc",
    ),
    (cap("NET_ADMIN"), CLOUD, ""),
    (device("/dev/kmsg"), CLOUD, ""),
    (storage("/var/det/ckpt"), CLOUD, ""),
    (
        storage("/var/det/ckpt/../../run"),
        CLOUD,
        "checkpoint_storage.host_path: /var/run is the protected",
    ),
]


@pytest.mark.parametrize(("config", "policy", "expected"), CASES)
def test_refusal_names_the_field_and_the_rule(
    config: dict[str, Any], policy: ContainerPolicy, expected: str
) -> None:
    got = first(config, policy)
    if expected:
        assert got.startswith(expected), got
        assert "\n" not in got
    else:
        assert got == ""


def test_every_bad_item_is_reported_in_order() -> None:
    config = {
        **mount("/root"),
        **cap("SYS_ADMIN"),
        **device("/dev/kmsg"),
    }
    got = list(refusals(request_of(config), DEFAULT, Trusted()))
    assert [g.split(":")[0] for g in got] == [
        "bind_mounts[0].host_path",
        "environment.add_capabilities[0]",
        "resources.devices[0].host_path",
    ]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [("/etc/../root", "/root"), ("//etc/", "/etc"), ("/a/./b//c/", "/a/b/c"), ("/", "/")],
)
def test_normalize(raw: str, clean: str) -> None:
    assert normalize(raw) == clean


def test_a_pools_keys_replace_the_masters() -> None:
    config = parse_config(
        {
            "task_container_policy": {
                "bind_mounts": [{"host_path": "/data"}],
                "add_capabilities": [],
            },
            "resource_pools": [
                {"pool_name": "default"},
                {"pool_name": "gpu", "task_container_policy": {"add_capabilities": ["SYS_PTRACE"]}},
                {"pool_name": "open", "task_container_policy": {"bind_mounts": None}},
            ],
        }
    )
    default = config.task_container_policy_for("default")
    gpu = config.task_container_policy_for("gpu")
    open_ = config.task_container_policy_for("open")
    assert default.add_capabilities == [] and default.bind_mounts is not None
    assert gpu.add_capabilities == ["SYS_PTRACE"]
    assert gpu.bind_mounts == default.bind_mounts
    assert open_.bind_mounts is None and open_.add_capabilities == []


def test_unknown_policy_key_is_refused_by_name() -> None:
    with pytest.raises(MasterConfigError, match=r"task_container_policy\.allow_everything"):
        parse_config({"task_container_policy": {"allow_everything": True}})


def test_fields_are_numbered_as_in_the_users_own_config() -> None:
    """The cluster's mounts and devices are merged in first; the refusal counts the user's."""
    config = {
        "bind_mounts": [
            {**TCD["bind_mounts"][0], "read_only": False, "propagation": "rprivate"},
            {"host_path": "/etc", "container_path": "/e", "propagation": "rprivate"},
        ],
        "resources": {
            "devices": [
                {**TCD["devices"][0], "mode": "mrw"},
                {"host_path": "/dev/mem", "container_path": "/dev/mem", "mode": "mrw"},
            ]
        },
    }
    got = list(refusals(request_of(config, (), TCD), DEFAULT, TRUSTED))
    assert [g.split(":")[0] for g in got] == [
        "bind_mounts[0].host_path",
        "resources.devices[0].host_path",
    ]


def test_the_masters_installation_and_data_dir_are_protected() -> None:
    """What the master adds to the protected set it sends the agent (its data directory, its
    Python and det's code) is refused under any root."""
    import sys
    from types import SimpleNamespace

    from det.master.services.containers import docker_options

    st: Any = SimpleNamespace(
        config=parse_config(
            {"task_container_policy": {"bind_mounts": [{"host_path": "/", "read_only": True}]}}
        )
    )
    # master.yaml's policy (the stored one, when an admin set one: test_task_container_policy_runtime)
    policy = docker_options(
        st, {}, "default", admin=False, policy=st.config.task_container_policy_for("default")
    )["hostPolicy"]
    assert policy is not None
    protected = policy["protectedPaths"]
    assert sys.prefix in protected and str(st.config.data_dir) in protected
    import det.master

    assert any(det.master.__path__[0].startswith(p) for p in protected)
    trusted = trusted_of({}, None, protected)
    got = first_with(mount(sys.prefix + "/lib", True), st.config.task_container_policy, trusted)
    assert got.startswith(f"bind_mounts[0].host_path: {sys.prefix}/lib is under the protected"), got


def first_with(config: dict[str, Any], policy: ContainerPolicy, trusted: Trusted) -> str:
    return next(refusals(request_of(config), policy, trusted), "")
